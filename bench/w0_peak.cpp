// The machine's floors, for the other workloads to be measured against: peak f32
// GEMM throughput (reel::matmul, which is oneDNN's sgemm on the CPU, on square
// `--size` matrices, default 2048: 3072 runs at a third of the speed here, a
// leading dimension that oneDNN handles badly) in GFLOP/s; with --amp bf16 (or f16) the
// same product on bf16 operands (a bf16 result, f32 accumulation: autocast's products),
// the rate W8's bf16 floor is taken at. Bandwidth floors are measured inside
// W6 (a += b) and W7 (a plain read), on the data those workloads touch.
#include "reel_bench.h"

int main(int argc, char** argv) {
  using namespace reel;
  bench::Args args = bench::parse_args(argc, argv);
  bench::Target t = bench::setup(args);
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
    double t0 = bench::now_s();
    Tensor c = matmul(a, b);
    t.sync();
    gflops.push_back(2.0 * double(n) * double(n) * double(n) / (bench::now_s() - t0) / 1e9);
  }
  bench::report(args, "peak", "reel", t.name.c_str(), low ? "lowp_gemm_gflops" : "sgemm_gflops", gflops,
                "\"size\": " + std::to_string(n) + (t.extra.empty() ? "" : ", " + t.extra));
  return 0;
}
