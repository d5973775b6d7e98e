// W14 in libtorch 1.13: as bench/w14_transcendental.cpp, ms per forward (no grad) and
// per backward (torch::autograd::grad of a recorded forward) on 4M floats.
#include "torch_bench.h"

int main(int argc, char** argv) {
  bench::Args args = bench::parse_args(argc, argv);
  bench::Target t = bench::setup(args);
  const int64_t n = args.get("--numel", int64_t(4) << 20), calls = args.get("--steps", 10);
  torch::manual_seed(1);
  auto opt = torch::TensorOptions().device(t.device);
  torch::Tensor x = torch::rand({n}, opt) * 12 - 6;
  torch::Tensor xpos = torch::rand({n}, opt) * 10 + 1e-3;
  torch::Tensor g = torch::randn({n}, opt);
  namespace F = torch::nn::functional;
  struct Op {
    const char* name;
    torch::Tensor (*f)(const torch::Tensor&);
  };
  const Op ops[] = {
      {"exp", [](const torch::Tensor& v) { return torch::exp(v); }},
      {"log", [](const torch::Tensor& v) { return torch::log(v); }},
      {"tanh", [](const torch::Tensor& v) { return torch::tanh(v); }},
      {"sigmoid", [](const torch::Tensor& v) { return torch::sigmoid(v); }},
      {"gelu", [](const torch::Tensor& v) { return torch::gelu(v); }},
      {"gelu_tanh", [](const torch::Tensor& v) { return torch::gelu(v, "tanh"); }},
      {"erf", [](const torch::Tensor& v) { return torch::erf(v); }},
      {"softplus", [](const torch::Tensor& v) { return F::softplus(v); }},
      {"silu", [](const torch::Tensor& v) { return F::silu(v); }},
  };
  constexpr size_t kOps = sizeof ops / sizeof ops[0];
  auto forward_ms = [&](const Op& op, const torch::Tensor& in) {
    torch::NoGradGuard ng;
    t.sync();
    double t0 = bench::now_s();
    for (int64_t i = 0; i < calls; ++i) (void)op.f(in);
    t.sync();
    return 1e3 * (bench::now_s() - t0) / double(calls);
  };
  auto backward_ms = [&](const Op& op, const torch::Tensor& in) {
    torch::Tensor leaf = in.detach().requires_grad_();
    double total = 0;
    for (int64_t i = 0; i < calls; ++i) {
      torch::Tensor y = op.f(leaf);
      t.sync();
      double t0 = bench::now_s();
      (void)torch::autograd::grad({y}, {leaf}, {g});
      t.sync();
      total += bench::now_s() - t0;
    }
    return 1e3 * total / double(calls);
  };
  std::vector<double> fwd[kOps], bwd[kOps];
  for (size_t k = 0; k < kOps; ++k) {
    const torch::Tensor& in = std::string(ops[k].name) == "log" ? xpos : x;
    forward_ms(ops[k], in);
    backward_ms(ops[k], in);
  }
  for (int rep = 0; rep < args.reps; ++rep)
    for (size_t k = 0; k < kOps; ++k) {
      const torch::Tensor& in = std::string(ops[k].name) == "log" ? xpos : x;
      fwd[k].push_back(forward_ms(ops[k], in));
      bwd[k].push_back(backward_ms(ops[k], in));
    }
  for (size_t k = 0; k < kOps; ++k) {
    bench::report(args, "W14", "libtorch", t.name.c_str(), (std::string(ops[k].name) + "_fwd_ms").c_str(), fwd[k]);
    bench::report(args, "W14", "libtorch", t.name.c_str(), (std::string(ops[k].name) + "_bwd_ms").c_str(), bwd[k]);
  }
  return 0;
}
