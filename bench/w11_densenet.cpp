// W11: DenseNet-121 training step, the DeepLearningFrameworks seed's DenseNet row:
// nn::models::densenet121 (1000 classes), batch 16 of 224x224x3 (synthetic), cross-entropy,
// SGD lr 0.01 momentum 0.9 (--amp bf16|f16: the forward under autocast). Reports ms per step and the process's peak resident memory
// (VmHWM, MB: the same measure as the PyTorch peer's). Floor: 3 x 2.87 G multiply-adds x 2
// per image (forward, and backward's two products) over peak sgemm.
#include <fstream>
#include <string>
#include <vector>

#include "reel_bench.h"

namespace {
double peak_rss_mb() {
  std::ifstream f("/proc/self/status");
  for (std::string line; std::getline(f, line);)
    if (line.rfind("VmHWM:", 0) == 0) return std::stod(line.substr(6)) / 1e3;
  return 0;
}
}  // namespace

int main(int argc, char** argv) {
  using namespace reel;
  bench::Args args = bench::parse_args(argc, argv);
  bench::Target t = bench::setup(args);
  const int64_t B = 16, steps = args.get("--steps", 2);
  manual_seed(1);
  auto net = nn::models::densenet121();
  net->to(t.device);
  optim::SGD opt(net->parameters(), {.lr = 0.01, .momentum = 0.9});
  Tensor x = randn({B, 3, 224, 224}, {.device = t.device});
  Tensor y = randint(0, 1000, {B}, {.dtype = DType::i64, .device = t.device});
  auto step = [&] {
    Tensor loss;
    {
      auto amp = t.autocast();  // --amp bf16|f16
      loss = cross_entropy((*net)(x), y);
    }
    opt.zero_grad();
    loss.backward();
    opt.step();
    return loss;
  };
  step().item<float>();  // warm-up
  if (args.get("--profile", 0)) {  // one profiled step: where the time goes, per op (stderr)
    debug::Profiler prof;
    step().item<float>();
    prof.stop();
    std::fprintf(stderr, "%s\n", prof.summary(40).c_str());
  }
  std::vector<double> ms;
  for (int rep = 0; rep < args.reps; ++rep) {
    double t0 = bench::now_s();
    Tensor loss;
    for (int64_t i = 0; i < steps; ++i) loss = step();
    loss.item<float>();
    ms.push_back(1e3 * (bench::now_s() - t0) / double(steps));
  }
  bench::report(args, "W11", "reel", t.name.c_str(), "step_ms", ms, t.extra);
  bench::report(args, "W11", "reel", t.name.c_str(), "peak_rss_mb", std::vector<double>{peak_rss_mb()}, t.extra);
  return 0;
}
