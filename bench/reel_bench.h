// What reel's bench programs share: the device and thread setup from the command
// line, Fashion-MNIST in memory, and one shuffled training epoch written the way
// the PyTorch and libtorch references write it (a permutation per epoch, each
// batch gathered with index_select), so that the three do the same work.
#pragma once
#include <omp.h>
#include <reel/reel.h>

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>

#include "bench_util.h"

namespace bench {

// The JSON "device" field and the device itself. CUDA asked for on a machine or a
// build without it: a clear message and exit status 2, never a crash.
struct Target {
  reel::Device device = reel::kCPU;
  std::string name = "cpu";
  std::string extra;  // "gpu": the GPU's name, "amp": the autocast dtype, for the JSON line
  std::string amp;    // "", "bf16" or "f16"
  // The forward's autocast scope (--amp), or none: `auto amp = t.autocast();`
  std::unique_ptr<reel::AutocastGuard> autocast() const {
    if (amp.empty()) return nullptr;
    return std::make_unique<reel::AutocastGuard>(reel::AutocastOptions{
        .device = device.type, .dtype = amp == "f16" ? reel::DType::f16 : reel::DType::bf16});
  }
  // The host waits for the device: on a GPU the clock is read only after this.
  void sync() const {
    if (device.is_cuda()) reel::cuda::synchronize(device.index);
  }
};

inline Target setup(const Args& args) {
  // the one OpenMP pool that reel and oneDNN share: a count given is kept; reel's default
  // (all cores, fewer while other processes keep some busy) otherwise
  if (args.threads_given) reel::set_num_threads(args.threads);
  Target t;
  if (!args.amp.empty()) {
    if (args.amp != "bf16" && args.amp != "f16") {
      std::fprintf(stderr, "--amp must be bf16 or f16, got '%s'\n", args.amp.c_str());
      std::exit(2);
    }
    t.amp = args.amp;
  }
  auto with_amp = [&](Target& r) -> Target& {
    if (!r.amp.empty()) r.extra += std::string(r.extra.empty() ? "" : ", ") + "\"amp\": \"" + r.amp + "\"";
    return r;
  };
  if (args.device == "cpu") return with_amp(t);
  if (args.device.rfind("cuda", 0) != 0) {
    std::fprintf(stderr, "--device must be cpu or cuda[:N], got '%s'\n", args.device.c_str());
    std::exit(2);
  }
  int index = args.device.size() > 5 ? std::atoi(args.device.c_str() + 5) : 0;
  if (!reel::cuda::is_available() || index >= reel::cuda::device_count()) {
    std::fprintf(stderr, "--device %s: no such CUDA device (%s)\n", args.device.c_str(),
                 reel::cuda::is_available() ? "index out of range" : reel::cuda::unavailable_reason().c_str());
    std::exit(2);
  }
  t.device = reel::Device::cuda(index);
  t.name = "cuda:" + std::to_string(index);
  t.extra = "\"gpu\": \"" + reel::cuda::device_name(index) + "\"";
  return with_amp(t);
}

inline const char* kFashionDir = "/usr/share/datasets/fashion-mnist";

// Images f32 [N, 1, 28, 28] in [0, 1] (pixels / 255) and labels i64 [N], on the target.
inline reel::data::ImageSet fashion(reel::data::Split split, const Target& t) {
  reel::data::ImageSet s = reel::data::load_mnist(kFashionDir, split);
  return {s.images.to(t.device), s.labels.to(t.device)};
}

// One epoch (or its first `max_steps` steps when > 0) of SGD on a classifier:
// returns the number of steps run. The loss is read once, at the end, so that a
// GPU is never waited on inside the epoch.
template <typename Model>
int64_t train_epoch(Model& model, reel::optim::Optimizer& opt, const reel::data::ImageSet& train, int64_t batch,
                    const Target& t, int64_t max_steps = 0) {
  int64_t n = train.images.size(0);
  reel::Tensor perm = reel::randperm(n, {.dtype = reel::DType::i64, .device = t.device});
  int64_t steps = 0;
  reel::Tensor loss;
  for (int64_t start = 0; start < n; start += batch) {
    if (max_steps > 0 && steps == max_steps) break;
    reel::Tensor idx = perm.narrow(0, start, std::min(batch, n - start));
    reel::Tensor x = reel::index_select(train.images, 0, idx);
    reel::Tensor y = reel::index_select(train.labels, 0, idx);
    {
      auto amp = t.autocast();  // --amp
      loss = reel::cross_entropy(model(x), y);
    }
    opt.zero_grad();
    loss.backward();
    opt.step();
    ++steps;
  }
  if (loss.defined() && !(loss.item<float>() < 1e30f)) {
    std::fprintf(stderr, "training diverged (loss %g)\n", double(loss.item<float>()));
    std::exit(1);
  }
  return steps;
}

// Fraction of the test set classified correctly (eval mode, no recording).
template <typename Model>
double accuracy(Model& model, const reel::data::ImageSet& test, const Target& t) {
  reel::NoGradGuard no_grad;
  auto amp = t.autocast();
  model.eval();
  int64_t n = test.images.size(0), correct = 0;
  for (int64_t start = 0; start < n; start += 1000) {
    int64_t m = std::min<int64_t>(1000, n - start);
    reel::Tensor logits = model(test.images.narrow(0, start, m));
    correct += reel::eq(reel::argmax(logits, 1), test.labels.narrow(0, start, m)).to(reel::DType::i64).sum().template item<int64_t>();
  }
  model.train();
  return double(correct) / double(n);
}

}  // namespace bench

namespace bench {

// W1, W2, W3: a model made by `make` (seeded), trained with SGD (momentum 0.9) on
// Fashion-MNIST. Times `--epochs` epochs (test accuracy after the first and the
// last), or with `--steps N` the first N steps of an epoch, `--reps` times, each
// extrapolated to a whole epoch. A 20-step warm-up on a throwaway model first
// fills the allocator's cache and oneDNN's primitive cache.
template <typename Make>
int run_fashion(int argc, char** argv, const char* workload, Make make, int64_t batch, double lr, int default_epochs) {
  Args args = parse_args(argc, argv);
  Target t = setup(args);
  auto train = fashion(reel::data::Split::train, t), test = fashion(reel::data::Split::test, t);
  int64_t epochs = args.get("--epochs", default_epochs), steps = args.get("--steps", 0);
  int64_t per_epoch = (train.images.size(0) + batch - 1) / batch;
  {
    auto warm = make();
    warm.to(t.device);
    reel::optim::SGD opt(warm.parameters(), {.lr = lr, .momentum = 0.9});
    train_epoch(warm, opt, train, batch, t, 20);
  }
  reel::manual_seed(1);
  auto model = make();
  model.to(t.device);
  reel::optim::SGD opt(model.parameters(), {.lr = lr, .momentum = 0.9});
  std::vector<double> times;
  std::string extra = t.extra;
  auto add = [&extra](const std::string& field) { extra += (extra.empty() ? "" : ", ") + field; };
  if (steps > 0) {
    for (int rep = 0; rep < args.reps; ++rep) {
      double t0 = now_s();
      int64_t done = train_epoch(model, opt, train, batch, t, steps);
      t.sync();
      times.push_back((now_s() - t0) / double(done) * double(per_epoch));
    }
    std::printf("%s: s/epoch extrapolated from %lld of %lld steps per repetition\n", workload, (long long)steps,
                (long long)per_epoch);
    add("\"extrapolated_from_steps\": " + std::to_string(steps));
    report(args, workload, "reel", t.name.c_str(), "epoch_s", times, extra);
    return 0;
  }
  double first_acc = 0;
  for (int64_t e = 1; e <= epochs; ++e) {
    double t0 = now_s();
    train_epoch(model, opt, train, batch, t);
    t.sync();
    times.push_back(now_s() - t0);
    if (e == 1) first_acc = accuracy(model, test, t);
  }
  double last_acc = accuracy(model, test, t);
  std::printf("%s: test accuracy %.4f after 1 epoch, %.4f after %lld\n", workload, first_acc, last_acc,
              (long long)epochs);
  report(args, workload, "reel", t.name.c_str(), "epoch_s", times, extra);
  std::string acc_extra = t.extra.empty() ? "" : t.extra;
  report(args, workload, "reel", t.name.c_str(), "test_acc_epoch1", std::vector<double>{first_acc}, acc_extra);
  std::string last = "test_acc_epoch" + std::to_string(epochs);
  if (epochs > 1) report(args, workload, "reel", t.name.c_str(), last.c_str(), std::vector<double>{last_acc}, acc_extra);
  return 0;
}

}  // namespace bench
