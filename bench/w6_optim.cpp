// W6: one optimizer step over 100 parameter tensors totalling 10,000,000 floats
// (sizes from ::bench::w6_sizes), gradients present: ms per Adam step (lr 1e-3) and
// per SGD-momentum step (lr 0.01, momentum 0.9). Also measures `a += b` on two
// 10M-float tensors (12 bytes per element: the same working-set size as the
// optimizer's). Each step is reported against its floor: Adam moves 28 bytes per
// parameter (reads p, g, m, v; writes p, m, v), SGD-momentum 20, at the machine probe's
// bandwidth (reel::bench::machine_peak: STREAM, independent of reel's ops; "probe_*" and
// "machine_*" in the JSON). The floor at reel's own `a += b` bandwidth, the one quoted
// before round five, is still reported ("floor_ms", "times_floor", "add_gbs"): it is what
// reel's in-place path reaches, not what the machine can do.
// On a GPU it also times a device-to-device copy of the 10M floats (d2d_copy_ms,
// d2d_gbs): the bandwidth floor of the GPU targets.
#include "floors.h"

int main(int argc, char** argv) {
  using namespace reel;
  ::bench::Args args = ::bench::parse_args(argc, argv);
  ::bench::Target t = ::bench::setup(args);
  int64_t steps = args.get("--steps", 10);
  constexpr double kParams = 1e7;
  manual_seed(1);
  std::vector<Tensor> params;
  for (long long n : ::bench::w6_sizes()) {
    Tensor p = randn({n}, {.device = t.device}).requires_grad_();
    p.set_grad(randn({n}, {.device = t.device}) * 1e-3);
    params.push_back(p);
  }
  // ms per call of f over `steps` calls, appended to v
  auto time_into = [&](std::vector<double>& v, auto&& f) { v.push_back(::bench::block_ms(t, steps, f)); };
  Tensor a = randn({int64_t(kParams)}, {.device = t.device}), b = randn({int64_t(kParams)}, {.device = t.device});
  optim::Adam adam(params, {.lr = 1e-3});
  optim::SGD sgd(params, {.lr = 0.01, .momentum = 0.9});
  auto add_step = [&] { a += b; };
  auto adam_step = [&] { adam.step(); };
  auto sgd_step = [&] { sgd.step(); };
  for (int i = 0; i < 2; ++i) adam_step(), sgd_step();  // warm-up; a += b's own just before its blocks
  // The two steps alternate within each repetition: this machine's memory bandwidth
  // drifts over seconds.
  // `a += b` is timed first, all its repetitions in a row, as the peers time their add_
  // (bench/reference: before the optimizers exist): on a machine whose L3 holds a and b (the
  // 260 MiB of the Xeon of issue 42) the steps between the blocks evict them, and the first
  // calls after an Adam step re-warm the cache (3.8 -> 1.6 ms over ten calls), which the
  // peers never pay. On a 32 MiB L3 neither way stays in cache, and the two agree.
  std::vector<double> add_ms, adam_ms, sgd_ms;
  // the peers' two warm-up calls, after the optimizers' (which evicted a and b): the first
  // block started cold (3.4 against 2.0 ms on the Xeon, the peers' blocks 1.6)
  for (int i = 0; i < 2; ++i) add_step();
  for (int rep = 0; rep < args.reps; ++rep) time_into(add_ms, add_step);
  for (int rep = 0; rep < args.reps; ++rep) {
    time_into(adam_ms, adam_step);
    time_into(sgd_ms, sgd_step);
  }
  double gbs = 12 * kParams / (::bench::stats_of(add_ms).median * 1e-3) / 1e9;
  double adam_floor = 28 * kParams / (gbs * 1e9) * 1e3, sgd_floor = 20 * kParams / (gbs * 1e9) * 1e3;
  const reel::bench::MachinePeak& peak = ::bench::machine(t);
  auto with = [&](double floor_ms, const std::vector<double>& v) {
    // the same floor at the probe's bandwidth: floor_ms * add_gbs / probe_gbs
    const double machine_floor = floor_ms * gbs / peak.bandwidth_gbs;
    char s[400];
    std::snprintf(s, sizeof s,
                  "\"floor_ms\": %.4g, \"times_floor\": %.3f, \"add_gbs\": %.2f, \"machine_floor_ms\": %.4g, "
                  "\"machine_floor_fraction\": %.3f, %s",
                  floor_ms, ::bench::stats_of(v).median / floor_ms, gbs, machine_floor,
                  machine_floor / ::bench::stats_of(v).median, ::bench::probe_fields(peak).c_str());
    return t.extra.empty() ? std::string(s) : t.extra + ", " + s;
  };
  ::bench::report(args, "W6", "reel", t.name.c_str(), "add_inplace_ms", add_ms, with(12 * kParams / (gbs * 1e6), add_ms));
  ::bench::report(args, "W6", "reel", t.name.c_str(), "adam_step_ms", adam_ms, with(adam_floor, adam_ms));
  ::bench::report(args, "W6", "reel", t.name.c_str(), "sgd_momentum_step_ms", sgd_ms, with(sgd_floor, sgd_ms));
  std::printf("floors at the machine probe's %.2f GB/s (%s): a += b %.2f of its 12 B floor, Adam %.2f of its 28 B/param "
              "floor (%.2f ms), SGD-momentum %.2f of its 20 B floor\n",
              peak.bandwidth_gbs, peak.bandwidth_kernel.c_str(),
              12 * kParams / (peak.bandwidth_gbs * 1e6) / ::bench::stats_of(add_ms).median,
              28 * kParams / (peak.bandwidth_gbs * 1e6) / ::bench::stats_of(adam_ms).median,
              28 * kParams / (peak.bandwidth_gbs * 1e6),
              20 * kParams / (peak.bandwidth_gbs * 1e6) / ::bench::stats_of(sgd_ms).median);
  std::printf("(reel's own a += b: %.2f GB/s; against it Adam is %.2fx and SGD-momentum %.2fx its floor)\n", gbs,
              ::bench::stats_of(adam_ms).median / adam_floor, ::bench::stats_of(sgd_ms).median / sgd_floor);
  if (t.device.is_cuda()) {
    // The GPU floor: a device-to-device copy of a into c (cudaMemcpyAsync, 8 bytes per
    // element moved), the bandwidth the GPU targets of W6 are stated against.
    Tensor c = empty({int64_t(kParams)}, {.device = t.device});
    std::vector<double> copy_ms;
    for (int rep = 0; rep < args.reps; ++rep) time_into(copy_ms, [&] { c.copy_(a); });
    double d2d_gbs = 8 * kParams / (::bench::stats_of(copy_ms).median * 1e-3) / 1e9;
    char s[96];
    std::snprintf(s, sizeof s, "\"d2d_gbs\": %.2f", d2d_gbs);
    ::bench::report(args, "W6", "reel", t.name.c_str(), "d2d_copy_ms", copy_ms, t.extra + ", " + s);
    std::printf("device-to-device copy: %.2f GB/s; Adam reaches %.0f%% of its 28 B/param floor there, SGD %.0f%%\n",
                d2d_gbs, 100 * 28 * kParams / (d2d_gbs * 1e6) / ::bench::stats_of(adam_ms).median,
                100 * 20 * kParams / (d2d_gbs * 1e6) / ::bench::stats_of(sgd_ms).median);
  }
  return 0;
}
