// W6 in libtorch 1.13: Adam and SGD-momentum steps over the same 100 tensors as
// bench/w6_optim.cpp, and the same `a += b` on 10M floats.
#include "torch_bench.h"

int main(int argc, char** argv) {
  bench::Args args = bench::parse_args(argc, argv);
  bench::Target t = bench::setup(args);
  int64_t steps = args.get("--steps", 10);
  auto on = torch::TensorOptions().device(t.device);
  torch::manual_seed(1);
  std::vector<torch::Tensor> params;
  for (long long n : bench::w6_sizes()) {
    torch::Tensor p = torch::randn({n}, on).requires_grad_();
    p.mutable_grad() = torch::randn({n}, on) * 1e-3;
    params.push_back(p);
  }
  auto time_ms = [&](auto&& f) {
    for (int i = 0; i < 2; ++i) f();
    std::vector<double> v;
    for (int rep = 0; rep < args.reps; ++rep) {
      t.sync();
      double t0 = bench::now_s();
      for (int64_t i = 0; i < steps; ++i) f();
      t.sync();
      v.push_back(1e3 * (bench::now_s() - t0) / double(steps));
    }
    return v;
  };
  torch::Tensor a = torch::randn({10000000}, on), b = torch::randn({10000000}, on);
  std::vector<double> add_ms = time_ms([&] { a += b; });
  torch::optim::Adam adam(params, torch::optim::AdamOptions(1e-3));
  std::vector<double> adam_ms = time_ms([&] { adam.step(); });
  torch::optim::SGD sgd(params, torch::optim::SGDOptions(0.01).momentum(0.9));
  std::vector<double> sgd_ms = time_ms([&] { sgd.step(); });
  bench::report(args, "W6", "libtorch", t.name.c_str(), "add_inplace_ms", add_ms);
  bench::report(args, "W6", "libtorch", t.name.c_str(), "adam_step_ms", adam_ms);
  bench::report(args, "W6", "libtorch", t.name.c_str(), "sgd_momentum_step_ms", sgd_ms);
  return 0;
}
