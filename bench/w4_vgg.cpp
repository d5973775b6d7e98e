// W4: VGG-style CIFAR-10 CNN, Conv(3,50,3,p1)-ReLU-Conv(50,50,3,p1)-ReLU-MaxPool2-
// Dropout(.25)-Conv(50,100,3,p1)-ReLU-Conv(100,100,3,p1)-ReLU-MaxPool2-Dropout(.25)-
// Flatten-Linear(6400,512)-ReLU-Dropout(.5)-Linear(512,10), batch 64, SGD lr 0.01
// momentum 0.9, on synthetic N x 3 x 32 x 32 data. Reports ms per training step
// (each repetition: --steps steps, default 5) and images/s. --amp bf16|f16: the forward
// under autocast (parameters and optimizer in f32). --profile 1: one step's ops, on stderr.
#include "reel_bench.h"

int main(int argc, char** argv) {
  using namespace reel;
  bench::Args args = bench::parse_args(argc, argv);
  bench::Target t = bench::setup(args);
  int64_t steps = args.get("--steps", 5);
  manual_seed(1);
  nn::Sequential model{nn::Conv2d(3, 50, 3, {.padding = 1}),    nn::ReLU(), nn::Conv2d(50, 50, 3, {.padding = 1}),
                       nn::ReLU(),                              nn::MaxPool2d(2), nn::Dropout(0.25),
                       nn::Conv2d(50, 100, 3, {.padding = 1}),  nn::ReLU(), nn::Conv2d(100, 100, 3, {.padding = 1}),
                       nn::ReLU(),                              nn::MaxPool2d(2), nn::Dropout(0.25),
                       nn::Flatten(),                           nn::Linear(6400, 512), nn::ReLU(),
                       nn::Dropout(0.5),                        nn::Linear(512, 10)};
  model.to(t.device);
  optim::SGD opt(model.parameters(), {.lr = 0.01, .momentum = 0.9});
  Tensor x = randn({64, 3, 32, 32}, {.device = t.device});
  Tensor y = randint(0, 10, {64}, {.dtype = DType::i64, .device = t.device});
  auto step = [&] {
    Tensor loss;
    {
      auto amp = t.autocast();  // --amp bf16|f16
      loss = cross_entropy(model(x), y);
    }
    opt.zero_grad();
    loss.backward();
    opt.step();
    return loss;
  };
  for (int i = 0; i < 3; ++i) step();  // warm-up
  if (args.get("--profile", 0)) {  // one profiled step: where the time goes, per op (stderr)
    debug::Profiler prof;
    step().item<float>();
    prof.stop();
    std::fprintf(stderr, "%s\n", prof.summary(30).c_str());
  }
  std::vector<double> ms, ips;
  for (int rep = 0; rep < args.reps; ++rep) {
    double t0 = bench::now_s();
    Tensor loss;
    for (int64_t i = 0; i < steps; ++i) loss = step();
    (void)loss.item<float>();
    double s = (bench::now_s() - t0) / double(steps);
    ms.push_back(1e3 * s);
    ips.push_back(64.0 / s);
  }
  bench::report(args, "W4", "reel", t.name.c_str(), "step_ms", ms, t.extra);
  bench::report(args, "W4", "reel", t.name.c_str(), "images_per_s", ips, t.extra);
  return 0;
}
