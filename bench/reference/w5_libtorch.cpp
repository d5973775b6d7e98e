// W5 in libtorch 1.13: the same chain as bench/w5_overhead.cpp, the same timing.
#include <torch/torch.h>

#include "torch_bench.h"

namespace {
constexpr int kOps = 300;

torch::Tensor chain(const torch::Tensor& x, const torch::Tensor& w) {
  torch::Tensor y = x;
  for (int i = 0; i < kOps; ++i) {
    switch (i % 4) {
      case 0: y = y + 0.5; break;
      case 1: y = y * w; break;
      case 2: y = torch::relu(y); break;
      default: y = torch::tanh(y); break;
    }
  }
  return y;
}
}  // namespace

int main(int argc, char** argv) {
  bench::Args args = bench::parse_args(argc, argv);
  bench::Target t = bench::setup(args);
  torch::manual_seed(0);
  torch::Tensor x = torch::randn({8}, torch::TensorOptions().device(t.device)).requires_grad_();
  torch::Tensor w = torch::randn({8}, torch::TensorOptions().device(t.device)).requires_grad_();
  int iters = 200;
  std::vector<double> fwd, bwd, nograd;
  for (int rep = 0; rep < args.reps + 2; ++rep) {
    double f = 0, b = 0, n = 0;
    for (int it = 0; it < iters; ++it) {
      double t0 = bench::now_s();
      torch::Tensor loss = chain(x, w).sum();
      double t1 = bench::now_s();
      loss.backward();
      double t2 = bench::now_s();
      f += t1 - t0;
      b += t2 - t1;
    }
    {
      torch::NoGradGuard guard;
      double t0 = bench::now_s();
      for (int it = 0; it < iters; ++it) (void)chain(x, w).sum();
      n = bench::now_s() - t0;
    }
    if (rep < 2) continue;
    double per_op = 1e6 / double(iters * (kOps + 1));
    fwd.push_back(f * per_op);
    bwd.push_back(b * per_op);
    nograd.push_back(n * per_op);
  }
  bench::report(args, "W5", "libtorch", t.name.c_str(), "forward_record_us_per_op", fwd);
  bench::report(args, "W5", "libtorch", t.name.c_str(), "backward_us_per_op", bwd);
  bench::report(args, "W5", "libtorch", t.name.c_str(), "forward_nograd_us_per_op", nograd);
  return 0;
}
