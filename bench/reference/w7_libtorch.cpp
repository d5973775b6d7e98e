// W7 in libtorch 1.13: per-channel sums of 64x64x32x32 gradients, rotating over the
// same number of buffers as bench/w7_bias_grad.cpp.
#include "torch_bench.h"

int main(int argc, char** argv) {
  bench::Args args = bench::parse_args(argc, argv);
  bench::Target t = bench::setup(args);
  int64_t nbuf = args.get("--buffers", 24), calls = args.get("--steps", 48);
  torch::manual_seed(1);
  std::vector<torch::Tensor> grads;
  for (int64_t i = 0; i < nbuf; ++i) grads.push_back(torch::randn({64, 64, 32, 32}, torch::TensorOptions().device(t.device)));
  for (int64_t i = 0; i < nbuf; ++i) (void)grads[size_t(i)].sum({0, 2, 3});
  std::vector<double> ms;
  for (int rep = 0; rep < args.reps; ++rep) {
    t.sync();
    double t0 = bench::now_s();
    for (int64_t i = 0; i < calls; ++i) (void)grads[size_t(i % nbuf)].sum({0, 2, 3});
    t.sync();
    ms.push_back(1e3 * (bench::now_s() - t0) / double(calls));
  }
  bench::report(args, "W7", "libtorch", t.name.c_str(), "bias_grad_ms", ms);
  return 0;
}
