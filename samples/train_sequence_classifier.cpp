// Trains a GRU sequence classifier on a task that needs memory across many steps:
// each sequence holds 150 tokens, among them exactly one A and one B at random
// places; the label says whether A comes before B. Nothing but the order of two
// tokens far apart decides it, so the GRU's state must carry "A seen" until B comes.
// Embedding -> GRU (batch_first) -> the state after the last token -> Linear, Adam,
// a progress bar, test accuracy after every epoch, then a checkpoint and the curves
// as CSV, and a TensorBoard log (as train_fashion_mnist does).
//
//   train_sequence_classifier --epochs 3 --out out/gru --logdir runs/gru
//   scripts/plot_curves.py out/gru/curves.csv
#include <reel/reel.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>

#include "fashion_mnist.h"  // parse_args, parse_device

using namespace reel;
using Clock = std::chrono::steady_clock;

namespace {

const char* kUsage =
    "usage: train_sequence_classifier [--epochs N] [--out DIR] [--logdir DIR|none] [--train N] [--test N]\n"
    "                                 [--length T] [--hidden H] [--batch-size N] [--lr X] [--seed N]\n"
    "                                 [--device cpu|cuda] [--amp none|bf16|f16]\n"
    "  --amp: the forward under autocast (the GRU in bf16 where the CPU's bf16 products outrun f32: docs/amp.md; f16 with a GradScaler)\n"
    "  --logdir: the TensorBoard log folder (default runs/train_sequence_classifier; none: no log)\n";

constexpr int64_t kVocab = 16, kA = 1, kB = 2;  // 0 unused, 3.. filler tokens

struct Sequences {
  Tensor ids, labels;  // i64 [N, T], i64 [N]
};

// N sequences of T tokens: filler everywhere, one A and one B at two distinct random
// places; label 1 when A comes first. Half of each label, in random order.
Sequences make_sequences(int64_t n, int64_t T, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int64_t> filler(3, kVocab - 1), place(0, T - 1);
  std::vector<int64_t> ids(static_cast<size_t>(n * T)), labels(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    int64_t* row = ids.data() + i * T;
    for (int64_t t = 0; t < T; ++t) row[t] = filler(rng);
    int64_t a = place(rng), b = place(rng);
    while (b == a) b = place(rng);
    row[a] = kA, row[b] = kB;
    labels[size_t(i)] = a < b;
  }
  return {from_vector(ids, {n, T}), from_vector(labels)};
}

class Classifier : public nn::Module {
 public:
  Classifier(int64_t hidden) : embed(kVocab, 16), gru(16, hidden, {.batch_first = true}), head(hidden, 2) {
    register_module("embed", embed);
    register_module("gru", gru);
    register_module("head", head);
  }
  Tensor forward(const Tensor& ids) override {
    nn::RNNOutput r = gru.forward(embed(ids), Tensor());
    return head(r.h_n.squeeze(0));  // the state after the last token: [B, hidden]
  }
  nn::Embedding embed;
  nn::GRU gru;
  nn::Linear head;
};

struct EpochLog {
  double train_loss, train_acc, test_loss, test_acc, seconds;
};

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

void progress(int epoch, int epochs, int64_t done, int64_t total, double loss, double acc, double per_s) {
  constexpr int kWidth = 30;
  int filled = int(kWidth * done / std::max<int64_t>(total, 1));
  std::string bar(size_t(filled), '=');
  if (filled < kWidth) bar += '>' + std::string(size_t(kWidth - filled - 1), ' ');
  std::fprintf(stderr, "\repoch %d/%d [%s] %lld/%lld  loss %.4f  acc %.2f%%  %.0f seq/s ", epoch, epochs, bar.c_str(),
               (long long)done, (long long)total, loss, 100 * acc, per_s);
  std::fflush(stderr);
}

void write_curves(const std::filesystem::path& out, const std::vector<EpochLog>& log) {
  std::ostringstream f;
  f << "epoch,train_loss,train_accuracy,test_loss,test_accuracy,seconds\n";
  for (size_t i = 0; i < log.size(); ++i)
    f << i + 1 << ',' << log[i].train_loss << ',' << log[i].train_acc << ',' << log[i].test_loss << ','
      << log[i].test_acc << ',' << log[i].seconds << '\n';
  reel::write_file_atomically((out / "curves.csv").string(), f.str(), "write_curves");
}

struct Score {
  double loss, accuracy;
};
Score evaluate(Classifier& model, data::DataLoader& loader, const AutocastOptions& amp) {
  NoGradGuard no_grad;
  AutocastGuard autocast(amp);
  model.eval();
  double loss = 0;
  int64_t correct = 0, seen = 0;
  for (data::Example& batch : loader) {
    Tensor logits = model(batch.data);
    loss += cross_entropy(logits, batch.target, {.reduction = Reduction::sum}).item<double>();
    correct += eq(argmax(logits, 1), batch.target).to(DType::i64).sum().item<int64_t>();
    seen += batch.data.size(0);
  }
  model.train();
  return {loss / double(seen), double(correct) / double(seen)};
}

int run(int argc, char** argv) {
  auto args = fashion::parse_args(argc, argv,
                                  {{"epochs", "3"}, {"out", "out_sequence"}, {"logdir", "runs/train_sequence_classifier"}, {"train", "20000"}, {"test", "2000"},
                                   {"length", "150"}, {"hidden", "64"}, {"batch-size", "64"}, {"lr", "3e-3"},
                                   {"seed", "1"}, {"device", "cpu"}, {"amp", "none"}},
                                  kUsage);
  int epochs = std::stoi(args["epochs"]);
  int64_t T = std::stoll(args["length"]), batch_size = std::stoll(args["batch-size"]);
  uint64_t seed = std::stoull(args["seed"]);
  Device device = fashion::parse_device(args["device"]);
  const AutocastOptions amp = fashion::parse_amp(args["amp"], device);
  std::filesystem::path out = args["out"];
  std::filesystem::create_directories(out);

  Sequences train = make_sequences(std::stoll(args["train"]), T, seed);
  Sequences test = make_sequences(std::stoll(args["test"]), T, seed + 1000);
  data::TensorDataset train_set(train.ids, train.labels), test_set(test.ids, test.labels);
  data::DataLoader train_loader(train_set, {.batch_size = batch_size, .shuffle = true, .seed = seed, .device = device});
  data::DataLoader test_loader(test_set, {.batch_size = 500, .device = device});

  manual_seed(seed);
  Classifier model(std::stoll(args["hidden"]));
  model.to(device);
  optim::Adam opt(model.parameters(), {.lr = std::stod(args["lr"])});
  std::printf("%s\n%lld training and %lld test sequences of %lld tokens, %s\n", model.str().c_str(),
              (long long)train_set.size(), (long long)test_set.size(), (long long)T, device.str().c_str());

  std::unique_ptr<SummaryWriter> tb;
  if (args["logdir"] != "none") {
    tb = std::make_unique<SummaryWriter>(args["logdir"]);
    std::string config;
    for (const auto& [key, value] : args) config += "- " + key + ": `" + value + "`\n";
    tb->add_text("config", config, 0);
  }

  optim::GradScaler scaler({.enabled = amp.enabled && amp.dtype == DType::f16});

  std::vector<EpochLog> log;
  int64_t global_step = 0;
  for (int epoch = 1; epoch <= epochs; ++epoch) {
    auto start = Clock::now(), last_shown = start;
    Tensor loss_sum, correct;  // on the device: the host reads them for the progress bar only
    int64_t seen = 0, step = 0;
    for (data::Example& batch : train_loader) {
      Tensor logits, loss;
      {
        AutocastGuard autocast(amp);  // a no-op unless --amp
        logits = model(batch.data);
        loss = cross_entropy(logits, batch.target);
      }
      opt.zero_grad();
      scaler.scale(loss).backward();
      scaler.unscale(opt);  // the true gradients before clipping them
      optim::clip_grad_norm(model.parameters(), 1.0);  // the usual guard against exploding recurrent gradients
      scaler.step(opt);
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
      if (seconds_since(last_shown) > 0.25 || step == train_loader.size()) {
        progress(epoch, epochs, step, train_loader.size(), loss_sum.item<double>() / double(seen),
                 double(correct.item<int64_t>()) / double(seen), double(seen) / seconds_since(start));
        last_shown = Clock::now();
      }
    }
    double train_seconds = seconds_since(start);
    Score score = evaluate(model, test_loader, amp);
    log.push_back({loss_sum.item<double>() / double(seen), double(correct.item<int64_t>()) / double(seen), score.loss,
                   score.accuracy, train_seconds});
    std::fprintf(stderr, "\n");
    std::printf("epoch %2d/%d  train loss %.4f acc %.2f%%  test loss %.4f acc %.2f%%  %.1f s  %.0f seq/s\n", epoch,
                epochs, log.back().train_loss, 100 * log.back().train_acc, score.loss, 100 * score.accuracy,
                train_seconds, double(seen) / train_seconds);
    std::fflush(stdout);
    write_curves(out, log);
    if (tb) {
      const EpochLog& e = log.back();
      tb->add_scalars("loss", {{"train", e.train_loss}, {"test", e.test_loss}}, epoch);
      tb->add_scalars("accuracy", {{"train", e.train_acc}, {"test", e.test_acc}}, epoch);
      for (auto& [name, p] : model.named_parameters()) tb->add_histogram(name, p, epoch);
      tb->flush();
    }
  }
  std::filesystem::path checkpoint = out / "gru_classifier.safetensors";
  model.save(checkpoint.string());
  std::printf("test accuracy %.2f%%; wrote %s, %s%s%s\n", 100 * log.back().test_acc, checkpoint.c_str(),
              (out / "curves.csv").c_str(), tb ? ", TensorBoard log in " : "", tb ? args["logdir"].c_str() : "");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "\ntrain_sequence_classifier: %s\n", e.what());
    return 1;
  }
}
