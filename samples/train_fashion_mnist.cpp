// Trains an MLP, a CNN or a ResNet on Fashion-MNIST, the way one would in PyTorch: a
// seeded shuffling DataLoader whose worker prepares the next batches (and augments
// them: --augment crop-flip), Adam or SGD with a cosine schedule, a progress bar, test
// accuracy after every epoch, then a checkpoint and the curves as CSV; a TensorBoard
// log of the losses, accuracies, learning rate, weight histograms and a few test
// images as it trains.
//
//   train_fashion_mnist --model cnn --epochs 10 --out out/cnn --logdir runs/cnn
//   train_fashion_mnist --model resnet --augment crop-flip --optimizer sgd --lr 0.05 --epochs 15 --out out/resnet
//   tensorboard --logdir runs                        # while it trains
//   scripts/plot_curves.py out/cnn/curves.csv        # out/cnn/curves.png, with matplotlib
//   evaluate_fashion_mnist --model cnn --out out/cnn
//
// --distributed trains data-parallel on the processes mpirun starts (a build with MPI):
// each rank a shard of every epoch (DistributedSampler), the model wrapped in
// DistributedDataParallel (gradients averaged over the ranks during backward); rank 0
// prints, writes the curves and saves the checkpoint.
//   OMP_NUM_THREADS=1 mpirun -np 2 train_fashion_mnist --distributed --batch-size 64
#include <reel/reel.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <vector>

#include "fashion_mnist.h"

using namespace reel;
using Clock = std::chrono::steady_clock;

namespace {

const char* kUsage =
    "usage: train_fashion_mnist [--model mlp|cnn|resnet] [--epochs N] [--data DIR] [--out DIR] [--logdir DIR|none]\n"
    "                           [--batch-size N] [--lr X] [--seed N] [--workers N] [--device cpu|cuda]\n"
    "                           [--augment none|crop-flip] [--optimizer adam|sgd] [--weight-decay X]\n"
    "                           [--steps-per-epoch N] [--amp none|bf16|f16] [--distributed]\n"
    "  --distributed: under mpirun; --batch-size is then per rank\n"
    "  --augment crop-flip: each training image padded by 2, cropped back to 28x28 at a random offset and\n"
    "                       mirrored with probability 1/2, on the loader's workers\n"
    "  --optimizer sgd: momentum 0.9 (Nesterov); --weight-decay applies to either optimizer\n"
    "  --steps-per-epoch: stop each epoch after N steps (0: the whole set), e.g. to time a configuration\n"
    "  --amp: the forward under autocast in that dtype (parameters and optimizer stay f32; f16 with a GradScaler)\n"
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
  // --distributed takes no value: taken out before the key-value options are parsed
  bool distributed = false;
  std::vector<char*> rest;
  for (int i = 0; i < argc; ++i) {
    if (std::string(argv[i]) == "--distributed") distributed = true;
    else rest.push_back(argv[i]);
  }
  argc = int(rest.size());
  argv = rest.data();
#ifdef REEL_HAS_DIST
  dist::ProcessGroup* pg = distributed ? &dist::init() : nullptr;
  const bool rank0 = !pg || pg->rank() == 0;
  std::string ranks = pg ? ", " + std::to_string(pg->size()) + " ranks (data-parallel)" : "";
#else
  if (distributed) throw Error("--distributed needs reel built with MPI (libopenmpi-dev): this build has no dist/");
  const bool rank0 = true;
  std::string ranks;
#endif
  auto args = fashion::parse_args(argc, argv,
                                  {{"model", "mlp"}, {"epochs", "10"}, {"data", "/usr/share/datasets/fashion-mnist"},
                                   {"out", "out"}, {"logdir", "runs/train_fashion_mnist"}, {"batch-size", "128"}, {"lr", "1e-3"}, {"seed", "1"},
                                   {"workers", "1"}, {"device", "cpu"}, {"amp", "none"}, {"augment", "none"},
                                   {"optimizer", "adam"}, {"weight-decay", "0"}, {"steps-per-epoch", "0"}},
                                  kUsage);
  int epochs = std::stoi(args["epochs"]);
  int64_t batch_size = std::stoll(args["batch-size"]);
  uint64_t seed = std::stoull(args["seed"]);
  Device device = fashion::parse_device(args["device"]);
  const AutocastOptions amp = fashion::parse_amp(args["amp"], device);
  std::filesystem::path out = args["out"];
  if (rank0) std::filesystem::create_directories(out);

  // The whole set is normalised once, up front: batches are then plain row copies.
  // Augmented training batches are normalised after the crop instead, so that the
  // padding is the images' own background (0), not a gray border.
  const std::string augment = args["augment"];
  if (augment != "none" && augment != "crop-flip")
    throw Error("--augment: expected none or crop-flip, got '" + augment + "'");
  data::ImageSet train = data::load_mnist(args["data"], data::Split::train);
  data::ImageSet test = data::load_mnist(args["data"], data::Split::test);
  if (augment == "none") train.images = data::normalize(train.images, {fashion::kMean}, {fashion::kStd});
  test.images = data::normalize(test.images, {fashion::kMean}, {fashion::kStd});
  data::TensorDataset train_set(train.images, train.labels), test_set(test.images, test.labels);
  int workers = std::stoi(args["workers"]);
  data::DataLoaderOptions train_options{.batch_size = batch_size, .shuffle = true, .seed = seed,
                                        .workers = workers, .device = device};
  if (augment == "crop-flip")  // on the loader's worker threads, seeded per (epoch, batch)
    train_options.transform = [](data::Example b, uint64_t batch_seed) {
      b.data = data::random_horizontal_flip(data::random_crop(b.data, 2, batch_seed), batch_seed);
      b.data = data::normalize(b.data, {fashion::kMean}, {fashion::kStd});
      return b;
    };
  const int64_t steps_per_epoch = std::stoll(args["steps-per-epoch"]);
#ifdef REEL_HAS_DIST
  // each rank its shard of each epoch's permutation of (seed, epoch)
  std::optional<data::DistributedSampler> shard;
  if (pg) {
    shard.emplace(train_set.size(), data::DistributedSamplerOptions{.num_replicas = pg->size(), .rank = pg->rank(),
                                                                     .seed = seed});
    train_options.shuffle = false;
    train_options.sampler = &*shard;
  }
#endif
  data::DataLoader train_loader(train_set, train_options);
  data::DataLoader test_loader(test_set, {.batch_size = 1000, .workers = workers, .device = device});

  manual_seed(seed);
  std::unique_ptr<nn::Module> made = fashion::make_model(args["model"]);
  nn::Module& model = *made;
  model.to(device);
#ifdef REEL_HAS_DIST
  std::optional<dist::DistributedDataParallel> ddp;  // rank 0's initial weights on every rank
  if (pg) ddp.emplace(model, *pg);
  auto forward = [&](const Tensor& x) { return ddp ? (*ddp)(x) : model(x); };
#else
  auto forward = [&](const Tensor& x) { return model(x); };
#endif
  const double lr0 = std::stod(args["lr"]), weight_decay = std::stod(args["weight-decay"]);
  std::unique_ptr<optim::Optimizer> optimizer;
  if (args["optimizer"] == "adam")
    optimizer = std::make_unique<optim::Adam>(model.parameters(), optim::AdamOptions{.lr = lr0, .weight_decay = weight_decay});
  else if (args["optimizer"] == "sgd")
    optimizer = std::make_unique<optim::SGD>(
        model.parameters(), optim::SGDOptions{.lr = lr0, .momentum = 0.9, .weight_decay = weight_decay, .nesterov = true});
  else
    throw Error("--optimizer: expected adam or sgd, got '" + args["optimizer"] + "'");
  optim::Optimizer& opt = *optimizer;
  optim::CosineAnnealingLR schedule(opt, {.T_max = epochs});
  if (rank0)
    std::printf("%s: %zu parameter tensors, %lld training images, %lld test images, %s%s\n", args["model"].c_str(),
                model.parameters().size(), (long long)train_set.size(), (long long)test_set.size(),
                device.str().c_str(), ranks.c_str());

  std::string logdir = args["logdir"];
  std::unique_ptr<SummaryWriter> tb;
  if (logdir != "none" && rank0) {  // one log, written by rank 0
    tb = std::make_unique<SummaryWriter>(logdir);
    std::string config;
    for (const auto& [key, value] : args) config += "- " + key + ": `" + value + "`\n";
    tb->add_text("config", config, 0);
    tb->add_image("test_images/first", clamp(test.images[0] * fashion::kStd + fashion::kMean, 0, 1), 0);
  }

  // loss scaling for f16 only: bf16 has f32's range (a disabled scaler passes through)
  optim::GradScaler scaler({.enabled = amp.enabled && amp.dtype == DType::f16});

  std::vector<EpochLog> log;
  int64_t global_step = 0;
  for (int epoch = 1; epoch <= epochs; ++epoch) {
    auto start = Clock::now();
    double lr = opt.lr();
    Tensor loss_sum, correct;  // on the device: the host reads them for the progress bar only
    int64_t seen = 0, step = 0;
    double shown_loss = 0;
    auto last_shown = start;
    const int64_t steps = steps_per_epoch > 0 ? std::min(steps_per_epoch, train_loader.size()) : train_loader.size();
    for (data::Example& batch : train_loader) {
      if (step == steps) break;
      Tensor logits, loss;
      {
        AutocastGuard autocast(amp);  // a no-op unless --amp
        logits = forward(batch.data);
        loss = cross_entropy(logits, batch.target);
      }
      opt.zero_grad();
      scaler.scale(loss).backward();  // f16: the loss scaled so small gradients stay above f16's range
      scaler.step(opt);               // skipped when a gradient overflowed
      scaler.update();
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
      if (rank0 && (seconds_since(last_shown) > 0.25 || step == steps)) {
        shown_loss = loss_sum.item<double>() / double(seen);
        progress(epoch, epochs, step, steps, shown_loss, double(seen) / seconds_since(start));
        last_shown = Clock::now();
      }
    }
    double train_seconds = seconds_since(start);
#ifdef REEL_HAS_DIST
    if (pg) {  // the epoch's figures over every rank's shard
      Tensor totals = tensor({loss_sum.item<double>(), double(correct.item<int64_t>()), double(seen)});
      pg->all_reduce(totals);
      auto v = totals.to_vector<float>();
      loss_sum = scalar_tensor(v[0]);
      correct = scalar_tensor(v[1], {.dtype = DType::i64});
      seen = int64_t(v[2]);
    }
#endif
    schedule.step();
    fashion::Score score = fashion::evaluate(model, test_loader, amp);
    log.push_back({loss_sum.item<double>() / double(seen), double(correct.item<int64_t>()) / double(seen), score.loss,
                   score.accuracy, lr, train_seconds});
    if (!rank0) continue;
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
#ifdef REEL_HAS_DIST
  if (pg) {
    dist::save_on_rank0(*pg, [&] { model.save(checkpoint.string()); });
    dist::finalize();
    if (!rank0) return 0;
  } else {
    model.save(checkpoint.string());
  }
#else
  model.save(checkpoint.string());
#endif
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
