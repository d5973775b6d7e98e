// The machine's floors, for the other workloads to be measured against: peak f32
// GEMM throughput (reel::matmul, which is oneDNN's sgemm on the CPU, on square
// `--size` matrices, default 2048: 3072 runs at a third of the speed here, a
// leading dimension that oneDNN handles badly) in GFLOP/s; with --amp bf16 (or f16) the
// same product on bf16 operands (a bf16 result, f32 accumulation: autocast's products),
// the rate W8's bf16 floor is taken at. Then the machine probe of reel::bench::machine_peak
// (STREAM copy/scale/add/triad, best of regular and non-temporal stores, all threads,
// arrays far past the L3; oneDNN's best f32 and bf16 GEMM, independent of reel's calls),
// measured once per machine and cached: "probe_bandwidth_gbs", "probe_f32_gflops" and
// "probe_bf16_gflops", the floors every fraction in bench/RESULTS.md is stated against
// (--refresh-probe measures it again).
#include "floors.h"

int main(int argc, char** argv) {
  using namespace reel;
  ::bench::Args args = ::bench::parse_args(argc, argv);
  ::bench::Target t = ::bench::setup(args);
  int64_t n = args.get("--size", 2048);
  manual_seed(1);
  Tensor a = randn({n, n}, {.device = t.device}), b = randn({n, n}, {.device = t.device});
  const bool low = !t.amp.empty();
  if (low) {
    DType dt = t.amp == "f16" ? DType::f16 : DType::bf16;
    a = a.to(dt), b = b.to(dt);
  }
  (void)matmul(a, b);  // warm-up: creates the primitive
  std::vector<double> gflops;
  for (int rep = 0; rep < args.reps; ++rep) {
    t.sync();
    double t0 = ::bench::now_s();
    Tensor c = matmul(a, b);
    t.sync();
    gflops.push_back(2.0 * double(n) * double(n) * double(n) / (::bench::now_s() - t0) / 1e9);
  }
  ::bench::report(args, "peak", "reel", t.name.c_str(), low ? "lowp_gemm_gflops" : "sgemm_gflops", gflops,
                "\"size\": " + std::to_string(n) + (t.extra.empty() ? "" : ", " + t.extra));
  reel::bench::MachinePeak peak =
      reel::bench::machine_peak(t.device, {.refresh = args.get("--refresh-probe", 0) != 0});
  std::printf("%s", peak.str().c_str());
  std::string probe = ::bench::probe_fields(peak) + (t.extra.empty() ? "" : ", " + t.extra);
  ::bench::report(args, "peak", "reel", t.name.c_str(), "probe_bandwidth_gbs", std::vector<double>{peak.bandwidth_gbs}, probe);
  ::bench::report(args, "peak", "reel", t.name.c_str(), "probe_f32_gflops", std::vector<double>{peak.f32_gflops}, probe);
  if (peak.read_gbs > 0)
    ::bench::report(args, "peak", "reel", t.name.c_str(), "probe_read_gbs", std::vector<double>{peak.read_gbs}, probe);
  if (peak.bf16_gflops > 0)
    ::bench::report(args, "peak", "reel", t.name.c_str(), "probe_bf16_gflops", std::vector<double>{peak.bf16_gflops}, probe);
  return 0;
}
