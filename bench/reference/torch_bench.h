// What the libtorch references share, mirroring ../reel_bench.h: device and thread
// setup, Fashion-MNIST read from the gzip IDX files, and the same shuffled epoch
// (a permutation per epoch, batches gathered with index_select).
#pragma once
#include <torch/torch.h>
#include <zlib.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "../bench_util.h"

namespace bench {

struct Target {
  torch::Device device = torch::kCPU;
  std::string name = "cpu";
  std::string extra;
  void sync() const {
    if (device.is_cuda()) torch::cuda::synchronize(device.index());
  }
};

inline Target setup(const Args& args) {
  torch::set_num_threads(args.threads);
  Target t;
  if (args.device == "cpu") return t;
  int index = args.device.size() > 5 ? std::atoi(args.device.c_str() + 5) : 0;
  if (args.device.rfind("cuda", 0) != 0 || !torch::cuda::is_available() || index >= int(torch::cuda::device_count())) {
    std::fprintf(stderr, "--device %s: no such CUDA device here\n", args.device.c_str());
    std::exit(2);
  }
  t.device = torch::Device(torch::kCUDA, index);
  t.name = "cuda:" + std::to_string(index);
  return t;
}

inline std::string gunzip(const std::string& path) {
  gzFile f = gzopen(path.c_str(), "rb");
  if (!f) {
    std::fprintf(stderr, "cannot open %s\n", path.c_str());
    std::exit(1);
  }
  std::string out;
  char buf[1 << 16];
  int n;
  while ((n = gzread(f, buf, sizeof buf)) > 0) out.append(buf, size_t(n));
  gzclose(f);
  return out;
}

struct ImageSet {
  torch::Tensor images, labels;
};

// Images f32 [N, 1, 28, 28] in [0, 1] and labels i64 [N]; split "train" or "t10k".
inline ImageSet fashion(const std::string& split, const Target& t) {
  std::string dir = "/usr/share/datasets/fashion-mnist/";
  std::string img = gunzip(dir + split + "-images-idx3-ubyte.gz"), lab = gunzip(dir + split + "-labels-idx1-ubyte.gz");
  int64_t n = int64_t(lab.size()) - 8;
  auto x = torch::from_blob(img.data() + 16, {n, 1, 28, 28}, torch::kUInt8).to(torch::kFloat32).div_(255);
  auto y = torch::from_blob(lab.data() + 8, {n}, torch::kUInt8).to(torch::kInt64);
  return {x.to(t.device), y.to(t.device)};
}

template <typename Model>
int64_t train_epoch(Model& model, torch::optim::Optimizer& opt, const ImageSet& train, int64_t batch,
                    int64_t max_steps = 0) {
  int64_t n = train.images.size(0);
  torch::Tensor perm = torch::randperm(n, torch::TensorOptions().dtype(torch::kInt64).device(train.images.device()));
  int64_t steps = 0;
  torch::Tensor loss;
  for (int64_t start = 0; start < n; start += batch) {
    if (max_steps > 0 && steps == max_steps) break;
    torch::Tensor idx = perm.narrow(0, start, std::min(batch, n - start));
    loss = torch::nn::functional::cross_entropy(model->forward(train.images.index_select(0, idx)),
                                                train.labels.index_select(0, idx));
    opt.zero_grad();
    loss.backward();
    opt.step();
    ++steps;
  }
  if (!(loss.item<float>() < 1e30f)) {
    std::fprintf(stderr, "training diverged\n");
    std::exit(1);
  }
  return steps;
}

template <typename Model>
double accuracy(Model& model, const ImageSet& test) {
  torch::NoGradGuard no_grad;
  model->eval();
  int64_t n = test.images.size(0), correct = 0;
  for (int64_t s = 0; s < n; s += 1000) {
    int64_t m = std::min<int64_t>(1000, n - s);
    correct += model->forward(test.images.narrow(0, s, m)).argmax(1).eq(test.labels.narrow(0, s, m)).sum().template item<int64_t>();
  }
  model->train();
  return double(correct) / double(n);
}

// W1-W3 as ../reel_bench.h's run_fashion does them.
template <typename Make>
int run_fashion(int argc, char** argv, const char* workload, Make make, int64_t batch, double lr, int default_epochs) {
  Args args = parse_args(argc, argv);
  Target t = setup(args);
  ImageSet train = fashion("train", t), test = fashion("t10k", t);
  int64_t epochs = args.get("--epochs", default_epochs), steps = args.get("--steps", 0);
  int64_t per_epoch = (train.images.size(0) + batch - 1) / batch;
  {
    auto warm = make();
    warm->to(t.device);
    torch::optim::SGD opt(warm->parameters(), torch::optim::SGDOptions(lr).momentum(0.9));
    train_epoch(warm, opt, train, batch, 20);
  }
  torch::manual_seed(1);
  auto model = make();
  model->to(t.device);
  torch::optim::SGD opt(model->parameters(), torch::optim::SGDOptions(lr).momentum(0.9));
  std::vector<double> times;
  if (steps > 0) {
    for (int rep = 0; rep < args.reps; ++rep) {
      double t0 = now_s();
      int64_t done = train_epoch(model, opt, train, batch, steps);
      t.sync();
      times.push_back((now_s() - t0) / double(done) * double(per_epoch));
    }
    std::printf("%s: s/epoch extrapolated from %lld of %lld steps per repetition\n", workload, (long long)steps,
                (long long)per_epoch);
    report(args, workload, "libtorch", t.name.c_str(), "epoch_s", times,
           "\"extrapolated_from_steps\": " + std::to_string(steps));
    return 0;
  }
  double first = 0;
  for (int64_t e = 1; e <= epochs; ++e) {
    double t0 = now_s();
    train_epoch(model, opt, train, batch);
    t.sync();
    times.push_back(now_s() - t0);
    if (e == 1) first = accuracy(model, test);
  }
  double last = accuracy(model, test);
  std::printf("%s: test accuracy %.4f after 1 epoch, %.4f after %lld\n", workload, first, last, (long long)epochs);
  report(args, workload, "libtorch", t.name.c_str(), "epoch_s", times);
  report(args, workload, "libtorch", t.name.c_str(), "test_acc_epoch1", std::vector<double>{first});
  std::string m = "test_acc_epoch" + std::to_string(epochs);
  if (epochs > 1) report(args, workload, "libtorch", t.name.c_str(), m.c_str(), std::vector<double>{last});
  return 0;
}

}  // namespace bench
