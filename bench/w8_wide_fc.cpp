// W8: wide FC, Linear(25000,1024)-ReLU-Linear(1024,512)-ReLU-Linear(512,20000),
// softmax cross-entropy over 20000 classes, batch 128, Adam (lr 1e-3), synthetic
// data. Reports ms per step and its split: forward (to the loss), backward,
// optimizer (zero_grad + step). Each repetition averages `--steps` steps (default 3).
// --amp bf16|f16: the forward under autocast (parameters and Adam in f32).
// The optimizer's floor is measured here, not taken from W6: Adam's state for W8's
// 36.4M parameters (p, g, m, v: 16 B each, 580 MB) lives in DRAM, W6's 160 MB may sit
// in a large L3. So `a += b` runs on two tensors of 2P floats (the same 580 MB), and
// the floor is 28 B/param at the machine probe's bandwidth (reel::bench::machine_peak:
// STREAM, independent of reel's ops; adam_floor_ms in the JSON; until round five it was
// reel's own a += b bandwidth, still reported as add_floor_ms).
#include "floors.h"

int main(int argc, char** argv) {
  using namespace reel;
  ::bench::Args args = ::bench::parse_args(argc, argv);
  ::bench::Target t = ::bench::setup(args);
  int64_t steps = args.get("--steps", 3);
  manual_seed(1);
  nn::Sequential model{nn::Linear(25000, 1024), nn::ReLU(), nn::Linear(1024, 512), nn::ReLU(),
                       nn::Linear(512, 20000)};
  model.to(t.device);
  optim::Adam opt(model.parameters(), {.lr = 1e-3});
  Tensor x = randn({128, 25000}, {.device = t.device});
  Tensor y = randint(0, 20000, {128}, {.dtype = DType::i64, .device = t.device});
  double f = 0, b = 0, o = 0;
  auto step = [&] {
    double t0 = ::bench::now_s();
    Tensor loss;
    {
      auto amp = t.autocast();  // --amp bf16|f16
      loss = cross_entropy(model(x), y);
    }
    t.sync();
    double t1 = ::bench::now_s();
    loss.backward();
    t.sync();
    double t2 = ::bench::now_s();
    opt.step();
    opt.zero_grad();
    t.sync();
    double t3 = ::bench::now_s();
    f += t1 - t0, b += t2 - t1, o += t3 - t2;
  };
  for (int i = 0; i < 2; ++i) step();  // warm-up
  std::vector<double> fwd, bwd, opt_ms, total;
  for (int rep = 0; rep < args.reps; ++rep) {
    f = b = o = 0;
    for (int64_t i = 0; i < steps; ++i) step();
    double k = 1e3 / double(steps);
    fwd.push_back(f * k), bwd.push_back(b * k), opt_ms.push_back(o * k), total.push_back((f + b + o) * k);
  }
  int64_t params = 0;
  for (const Tensor& p : model.parameters()) params += p.numel();
  std::vector<double> floor_ms;
  {
    Tensor a = randn({2 * params}, {.device = t.device}), b = randn({2 * params}, {.device = t.device});
    a += b;  // warm-up: first touch of the pages
    for (int rep = 0; rep < args.reps; ++rep) {
      t.sync();
      double t0 = ::bench::now_s();
      a += b;
      t.sync();
      double gbs = 12.0 * double(2 * params) / (::bench::now_s() - t0) / 1e9;
      floor_ms.push_back(28.0 * double(params) / (gbs * 1e6));
    }
  }
  // the floor at the machine probe's bandwidth (STREAM, independent of reel's ops); the
  // a += b one above, quoted before round five, stays in the JSON as "add_floor_ms"
  const reel::bench::MachinePeak& peak = ::bench::machine(t);
  const double machine_floor = 28.0 * double(params) / (peak.bandwidth_gbs * 1e6);
  char fl[400];
  std::snprintf(fl, sizeof fl, "\"params\": %lld, \"add_floor_ms\": %.4g, %s", (long long)params,
                ::bench::stats_of(floor_ms).median, ::bench::probe_fields(peak).c_str());
  std::vector<double> machine_floor_ms(floor_ms.size(), machine_floor);
  ::bench::report(args, "W8", "reel", t.name.c_str(), "adam_floor_ms", machine_floor_ms,
                t.extra.empty() ? fl : t.extra + ", " + fl);
  std::printf("Adam floor (28 B/param at the machine probe's %.2f GB/s, %s): %.2f ms; optimizer part %.2fx its floor "
              "(%.2f ms at reel's own a += b bandwidth on %lld MB)\n",
              peak.bandwidth_gbs, peak.bandwidth_kernel.c_str(), machine_floor,
              ::bench::stats_of(opt_ms).median / machine_floor, ::bench::stats_of(floor_ms).median,
              (long long)(16 * params / 1000000));
  ::bench::report(args, "W8", "reel", t.name.c_str(), "step_ms", total, t.extra);
  ::bench::report(args, "W8", "reel", t.name.c_str(), "forward_ms", fwd, t.extra);
  ::bench::report(args, "W8", "reel", t.name.c_str(), "backward_ms", bwd, t.extra);
  ::bench::report(args, "W8", "reel", t.name.c_str(), "optimizer_ms", opt_ms, t.extra);
  return 0;
}
