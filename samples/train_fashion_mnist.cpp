// Trains an MLP or a CNN on Fashion-MNIST, the way one would in PyTorch: a seeded
// shuffling DataLoader whose worker prepares the next batches, Adam with a cosine
// schedule, a progress bar, test accuracy after every epoch, then a checkpoint and
// the curves as CSV; a TensorBoard log of the losses, accuracies, learning rate,
// weight histograms and a few test images as it trains.
//
//   train_fashion_mnist --model cnn --epochs 10 --out out/cnn --logdir runs/cnn
//   tensorboard --logdir runs                        # while it trains
//   scripts/plot_curves.py out/cnn/curves.csv        # out/cnn/curves.png, with matplotlib
//   evaluate_fashion_mnist --model cnn --out out/cnn
#include <reel/reel.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include "fashion_mnist.h"

using namespace reel;
using Clock = std::chrono::steady_clock;

namespace {

const char* kUsage =
    "usage: train_fashion_mnist [--model mlp|cnn] [--epochs N] [--data DIR] [--out DIR] [--logdir DIR|none]\n"
    "                           [--batch-size N] [--lr X] [--seed N] [--workers N] [--device cpu|cuda]\n"
    "  --logdir: the TensorBoard log folder (default runs/train_fashion_mnist; none: no log)\n";

struct EpochLog {
  double train_loss, train_acc, test_loss, test_acc, lr, seconds;
};

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

void progress(int epoch, int epochs, int64_t done, int64_t total, double loss, double images_per_s) {
  constexpr int kWidth = 30;
  int filled = int(kWidth * done / std::max<int64_t>(total, 1));
  std::string bar(size_t(filled), '=');
  if (filled < kWidth) bar += '>' + std::string(size_t(kWidth - filled - 1), ' ');
  std::fprintf(stderr, "\repoch %d/%d [%s] %lld/%lld  loss %.4f  %.0f img/s ", epoch, epochs, bar.c_str(),
               (long long)done, (long long)total, loss, images_per_s);
  std::fflush(stderr);
}

// Rewritten whole after every epoch (to a temporary, then renamed): an interrupted
// run still leaves complete curves.
void write_curves(const std::filesystem::path& out, const std::vector<EpochLog>& log) {
  std::filesystem::path tmp = out / "curves.csv.tmp";
  {
    std::ofstream f(tmp);
    f << "epoch,train_loss,train_accuracy,test_loss,test_accuracy,lr,seconds\n";
    for (size_t i = 0; i < log.size(); ++i)
      f << i + 1 << ',' << log[i].train_loss << ',' << log[i].train_acc << ',' << log[i].test_loss << ','
        << log[i].test_acc << ',' << log[i].lr << ',' << log[i].seconds << '\n';
  }
  std::filesystem::rename(tmp, out / "curves.csv");
}

int run(int argc, char** argv) {
  auto args = fashion::parse_args(argc, argv,
                                  {{"model", "mlp"}, {"epochs", "10"}, {"data", "/usr/share/datasets/fashion-mnist"},
                                   {"out", "out"}, {"logdir", "runs/train_fashion_mnist"}, {"batch-size", "128"}, {"lr", "1e-3"}, {"seed", "1"},
                                   {"workers", "1"}, {"device", "cpu"}},
                                  kUsage);
  int epochs = std::stoi(args["epochs"]);
  int64_t batch_size = std::stoll(args["batch-size"]);
  uint64_t seed = std::stoull(args["seed"]);
  Device device = fashion::parse_device(args["device"]);
  std::filesystem::path out = args["out"];
  std::filesystem::create_directories(out);

  // The whole set is normalised once, up front: batches are then plain row copies.
  data::ImageSet train = data::load_mnist(args["data"], data::Split::train);
  data::ImageSet test = data::load_mnist(args["data"], data::Split::test);
  train.images = data::normalize(train.images, {fashion::kMean}, {fashion::kStd});
  test.images = data::normalize(test.images, {fashion::kMean}, {fashion::kStd});
  data::TensorDataset train_set(train.images, train.labels), test_set(test.images, test.labels);
  int workers = std::stoi(args["workers"]);
  data::DataLoader train_loader(train_set, {.batch_size = batch_size, .shuffle = true, .seed = seed,
                                            .workers = workers, .device = device});
  data::DataLoader test_loader(test_set, {.batch_size = 1000, .workers = workers, .device = device});

  manual_seed(seed);
  nn::Sequential model = fashion::make_model(args["model"]);
  model.to(device);
  optim::Adam opt(model.parameters(), {.lr = std::stod(args["lr"])});
  optim::CosineAnnealingLR schedule(opt, {.T_max = epochs});
  std::printf("%s: %zu parameter tensors, %lld training images, %lld test images, %s\n", args["model"].c_str(),
              model.parameters().size(), (long long)train_set.size(), (long long)test_set.size(),
              device.str().c_str());

  std::string logdir = args["logdir"];
  std::unique_ptr<SummaryWriter> tb;
  if (logdir != "none") {
    tb = std::make_unique<SummaryWriter>(logdir);
    std::string config;
    for (const auto& [key, value] : args) config += "- " + key + ": `" + value + "`\n";
    tb->add_text("config", config, 0);
    tb->add_image("test_images/first", clamp(test.images[0] * fashion::kStd + fashion::kMean, 0, 1), 0);
  }

  std::vector<EpochLog> log;
  int64_t global_step = 0;
  for (int epoch = 1; epoch <= epochs; ++epoch) {
    auto start = Clock::now();
    double lr = opt.lr();
    Tensor loss_sum, correct;  // on the device: the host reads them for the progress bar only
    int64_t seen = 0, step = 0;
    double shown_loss = 0;
    auto last_shown = start;
    for (data::Example& batch : train_loader) {
      Tensor logits = model(batch.data);
      Tensor loss = cross_entropy(logits, batch.target);
      opt.zero_grad();
      loss.backward();
      opt.step();
      {
        NoGradGuard no_grad;
        Tensor l = loss.detach() * double(batch.data.size(0));
        Tensor c = eq(argmax(logits.detach(), 1), batch.target).to(DType::i64).sum();
        loss_sum = loss_sum.defined() ? loss_sum + l : l;
        correct = correct.defined() ? correct + c : c;
      }
      seen += batch.data.size(0);
      ++step;
      ++global_step;
      if (tb && global_step % 50 == 0) tb->add_scalar("loss/train_step", loss.item<double>(), global_step);
      if (seconds_since(last_shown) > 0.25 || step == train_loader.size()) {
        shown_loss = loss_sum.item<double>() / double(seen);
        progress(epoch, epochs, step, train_loader.size(), shown_loss, double(seen) / seconds_since(start));
        last_shown = Clock::now();
      }
    }
    double train_seconds = seconds_since(start);
    schedule.step();
    fashion::Score score = fashion::evaluate(model, test_loader);
    log.push_back({loss_sum.item<double>() / double(seen), double(correct.item<int64_t>()) / double(seen), score.loss,
                   score.accuracy, lr, train_seconds});
    std::fprintf(stderr, "\n");
    std::printf("epoch %2d/%d  train loss %.4f acc %.2f%%  test loss %.4f acc %.2f%%  lr %.2e  %.1f s  %.0f img/s\n",
                epoch, epochs, log.back().train_loss, 100 * log.back().train_acc, score.loss, 100 * score.accuracy, lr,
                train_seconds, double(seen) / train_seconds);
    std::fflush(stdout);
    write_curves(out, log);
    if (tb) {
      const EpochLog& e = log.back();
      tb->add_scalars("loss", {{"train", e.train_loss}, {"test", e.test_loss}}, epoch);
      tb->add_scalars("accuracy", {{"train", e.train_acc}, {"test", e.test_acc}}, epoch);
      tb->add_scalar("lr", lr, epoch);
      for (auto& [name, p] : model.named_parameters()) tb->add_histogram(name, p, epoch);
      tb->flush();
    }
  }
  std::filesystem::path checkpoint = out / (args["model"] + ".safetensors");
  model.save(checkpoint.string());
  std::printf("test accuracy %.2f%%; wrote %s, %s%s%s\n", 100 * log.back().test_acc, checkpoint.c_str(),
              (out / "curves.csv").c_str(), tb ? ", TensorBoard log in " : "", tb ? logdir.c_str() : "");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "\ntrain_fashion_mnist: %s\n", e.what());
    return 1;
  }
}
