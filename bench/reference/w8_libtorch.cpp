// W8 in libtorch 1.13: the wide FC network of bench/w8_wide_fc.cpp with Adam, the
// same forward / backward / optimizer split.
#include "torch_bench.h"

int main(int argc, char** argv) {
  namespace nn = torch::nn;
  bench::Args args = bench::parse_args(argc, argv);
  bench::Target t = bench::setup(args);
  int64_t steps = args.get("--steps", 3);
  torch::manual_seed(1);
  nn::Sequential model(nn::Linear(25000, 1024), nn::ReLU(), nn::Linear(1024, 512), nn::ReLU(), nn::Linear(512, 20000));
  model->to(t.device);
  torch::optim::Adam opt(model->parameters(), torch::optim::AdamOptions(1e-3));
  torch::Tensor x = torch::randn({128, 25000}, torch::TensorOptions().device(t.device));
  torch::Tensor y = torch::randint(0, 20000, {128}, torch::TensorOptions().dtype(torch::kInt64).device(t.device));
  double f = 0, b = 0, o = 0;
  auto step = [&] {
    double t0 = bench::now_s();
    torch::Tensor loss = torch::nn::functional::cross_entropy(model->forward(x), y);
    t.sync();
    double t1 = bench::now_s();
    loss.backward();
    t.sync();
    double t2 = bench::now_s();
    opt.step();
    opt.zero_grad();
    t.sync();
    double t3 = bench::now_s();
    f += t1 - t0, b += t2 - t1, o += t3 - t2;
  };
  for (int i = 0; i < 2; ++i) step();
  std::vector<double> fwd, bwd, opt_ms, total;
  for (int rep = 0; rep < args.reps; ++rep) {
    f = b = o = 0;
    for (int64_t i = 0; i < steps; ++i) step();
    double k = 1e3 / double(steps);
    fwd.push_back(f * k), bwd.push_back(b * k), opt_ms.push_back(o * k), total.push_back((f + b + o) * k);
  }
  bench::report(args, "W8", "libtorch", t.name.c_str(), "step_ms", total);
  bench::report(args, "W8", "libtorch", t.name.c_str(), "forward_ms", fwd);
  bench::report(args, "W8", "libtorch", t.name.c_str(), "backward_ms", bwd);
  bench::report(args, "W8", "libtorch", t.name.c_str(), "optimizer_ms", opt_ms);
  return 0;
}
