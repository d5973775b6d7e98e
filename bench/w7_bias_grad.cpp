// W7: the broadcast-bias gradient: a 64x64x32x32 (N, C, H, W) gradient reduced to
// 64 per-channel sums. Each call reads a different one of `--buffers` gradients
// (default 24 x 16 MiB = 384 MiB, more than this machine's 260 MiB L3), so the data
// comes from memory. The floor is 16 MiB over the read bandwidth that a plain
// OpenMP sum of the same buffers reaches here (a probe that uses none of reel's ops);
// reports the fraction of it reached, and the same at the machine probe's bandwidth
// (reel::bench::machine_peak, STREAM: "machine_floor_*", "probe_*" in the JSON; a plain
// read may beat STREAM's read-and-write kernels, so that fraction can pass 1).
// On a GPU the floor is half the time of a device-to-device copy between two of the
// buffers (the copy reads and writes 16 MiB; the reduction only reads).
#include "floors.h"

namespace {
// The read-bandwidth probe: sums a whole buffer, memory-bound by design. 32
// independent partial sums per thread, so the adds' latency never limits it; AVX2
// like reel's own loops (reel builds for x86-64-v3).
__attribute__((target("avx2"))) float read_all(const float* p, int64_t n) {
  float total = 0;
#pragma omp parallel reduction(+ : total)
  {
    float acc[32] = {};
#pragma omp for schedule(static)
    for (int64_t b = 0; b < n / 32; ++b) {
#pragma omp simd
      for (int k = 0; k < 32; ++k) acc[k] += p[b * 32 + k];
    }
    for (float a : acc) total += a;
  }
  return total;  // n is a multiple of 32 here
}
}  // namespace

int main(int argc, char** argv) {
  using namespace reel;
  ::bench::Args args = ::bench::parse_args(argc, argv);
  ::bench::Target t = ::bench::setup(args);
  int64_t nbuf = args.get("--buffers", 24), calls = args.get("--steps", 48);
  constexpr int64_t kNumel = int64_t(64) * 64 * 32 * 32;
  constexpr double kBytes = 4.0 * double(kNumel);
  manual_seed(1);
  std::vector<Tensor> grads;
  for (int64_t i = 0; i < nbuf; ++i) grads.push_back(randn({64, 64, 32, 32}, {.device = t.device}));
  auto time_ms = [&](auto&& f) {
    for (int64_t i = 0; i < nbuf; ++i) f(grads[size_t(i)]);  // warm-up: one pass over every buffer
    std::vector<double> v;
    for (int rep = 0; rep < args.reps; ++rep) {
      int64_t i = 0;  // each call reads the next buffer
      v.push_back(::bench::block_ms(t, calls, [&] { f(grads[size_t(i++ % nbuf)]); }));
    }
    return v;
  };
  std::vector<double> ms = time_ms([](const Tensor& g) { (void)sum(g, {0, 2, 3}); });
  std::string extra = t.extra;
  if (t.device.is_cuda()) {
    // The GPU floor: a device-to-device copy between two of the buffers (neither in L2)
    // moves 2 x 16 MiB; reading 16 MiB once takes half of it.
    std::vector<double> copy_ms;
    for (int64_t i = 0; i < nbuf; ++i) grads[size_t((i + nbuf / 2) % nbuf)].copy_(grads[size_t(i)]);
    for (int rep = 0; rep < args.reps; ++rep) {
      t.sync();
      double t0 = ::bench::now_s();
      for (int64_t i = 0; i < calls; ++i) grads[size_t((i + nbuf / 2) % nbuf)].copy_(grads[size_t(i % nbuf)]);
      t.sync();
      copy_ms.push_back(1e3 * (::bench::now_s() - t0) / double(calls));
    }
    std::vector<double> read_ms;
    for (double c : copy_ms) read_ms.push_back(c / 2);
    double floor_ms = ::bench::stats_of(read_ms).median, gbs = kBytes / (floor_ms * 1e-3) / 1e9;
    char s[200];
    std::snprintf(s, sizeof s, "%s, \"floor_ms\": %.4g, \"floor_fraction\": %.3f, \"d2d_gbs\": %.2f", t.extra.c_str(),
                  floor_ms, floor_ms / ::bench::stats_of(ms).median, gbs);
    extra = s;
    ::bench::report(args, "W7", "reel", t.name.c_str(), "read_floor_ms", read_ms, extra);
    std::printf("device-to-device copy %.2f GB/s: read floor %.4f ms; reel reaches %.0f%% of it\n", gbs, floor_ms,
                100 * floor_ms / ::bench::stats_of(ms).median);
  } else {
    volatile float sink = 0;
    std::vector<double> read_ms = time_ms([&](const Tensor& g) { sink = sink + read_all(g.data<float>(), kNumel); });
    double floor_ms = ::bench::stats_of(read_ms).median, gbs = kBytes / (floor_ms * 1e-3) / 1e9;
    const reel::bench::MachinePeak& peak = ::bench::machine(t);
    // a reduction only reads: its floor is the probe's read-only sum where it ran (STREAM's
    // best also writes, and a core's reads alone may reach less)
    const double read_gbs = peak.read_gbs > 0 ? peak.read_gbs : peak.bandwidth_gbs;
    const double machine_floor = kBytes / (read_gbs * 1e6);
    char s[480];
    std::snprintf(s, sizeof s,
                  "\"floor_ms\": %.4g, \"floor_fraction\": %.3f, \"read_gbs\": %.2f, \"machine_floor_ms\": %.4g, "
                  "\"machine_floor_fraction\": %.3f, %s",
                  floor_ms, floor_ms / ::bench::stats_of(ms).median, gbs, machine_floor,
                  machine_floor / ::bench::stats_of(ms).median, ::bench::probe_fields(peak).c_str());
    extra = s;
    ::bench::report(args, "W7", "reel", t.name.c_str(), "read_floor_ms", read_ms, extra);
    ::bench::report(args, "W7", "reel", t.name.c_str(), "machine_read_floor_ms", std::vector<double>{machine_floor}, extra);
    std::printf("read probe (a plain OpenMP sum) %.2f GB/s: floor %.3f ms; reel reaches %.0f%% of it; at the machine "
                "probe's read-only sum %.2f GB/s %.0f%%\n",
                gbs, floor_ms, 100 * floor_ms / ::bench::stats_of(ms).median, read_gbs,
                100 * machine_floor / ::bench::stats_of(ms).median);
  }
  ::bench::report(args, "W7", "reel", t.name.c_str(), "bias_grad_ms", ms, extra);
  return 0;
}
