// Google Benchmark (Debian's libbenchmark-dev) timing reel code correctly: the device
// synchronised so that the clock covers the GPU's work, manual time from a CUDA device's
// blocks, and the work done as counters (FLOP/s, bytes/s, % of the machine's peak). Header
// only; include it after <benchmark/benchmark.h>'s package is found (find_package(benchmark)
// and link benchmark::benchmark beside reel::reel).
//
//   static void BM_mlp(benchmark::State& state) {
//     Run run(state.range(0));                                     // the model, its data
//     auto step = [&] { run.step(); };
//     reel::bench::gbench::set_work(state, reel::bench::gbench::count_work(step),
//                                   &reel::bench::machine_peak());  // counters: FLOP/s, % of peak
//     reel::bench::gbench::run(state, step, reel::kCPU);
//   }
//   BENCHMARK(BM_mlp)->Arg(128)->UseManualTime();   // UseManualTime: needed on a GPU
//   BENCHMARK_MAIN();
//
// On a CUDA device each iteration is one block: synchronised before and after, its time
// given by SetIterationTime, so register such benchmarks with ->UseManualTime(). On the
// CPU run() sets the same manual time (the wall clock of the iteration), so one
// registration serves both. A GPU iteration should queue enough work (a whole training
// step, or several) that one sync per iteration costs little; the sync per block of
// reel::bench::Timer is the better tool for short bodies.
#pragma once
#include <benchmark/benchmark.h>

#include <chrono>
#include <functional>

#include "../cuda/cuda.h"
#include "peak.h"
#include "work.h"

namespace reel::bench::gbench {

// Times `body` once per benchmark iteration, synchronising `device` around each one and
// reporting the iteration's wall time as manual time.
inline void run(benchmark::State& state, const std::function<void()>& body, Device device = kCPU) {
  auto sync = [&] {
    if (device.is_cuda()) cuda::synchronize(device.index);
  };
  body();  // warm-up: first-call costs, algorithm searches, allocator growth
  sync();
  for (auto _ : state) {
    auto t0 = std::chrono::steady_clock::now();
    body();
    sync();
    state.SetIterationTime(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
}

// The work of one call of `body`, counted from its ops (outside the timed loop).
inline Work count_work(const std::function<void()>& body) {
  WorkCounter count;
  body();
  count.stop();
  return count.total();
}

// Counters for the work of one iteration: "FLOP/s" and "bytes/s" (rates over the
// iterations' time) and, given the machine's peak, "%peak" (of its FLOP/s in `dtype`) and
// "%bandwidth" (of its memory bandwidth).
inline void set_work(benchmark::State& state, const Work& per_iteration, const MachinePeak* peak = nullptr,
                     DType dtype = DType::f32) {
  using benchmark::Counter;
  state.counters["FLOP/s"] = Counter(per_iteration.flops, Counter::kIsIterationInvariantRate, Counter::kIs1000);
  state.counters["bytes/s"] = Counter(per_iteration.bytes, Counter::kIsIterationInvariantRate, Counter::kIs1000);
  if (peak && peak->gflops(dtype) > 0)
    state.counters["%peak"] =
        Counter(100 * per_iteration.flops / (peak->gflops(dtype) * 1e9), Counter::kIsIterationInvariantRate);
  if (peak && peak->bandwidth_gbs > 0)
    state.counters["%bandwidth"] =
        Counter(100 * per_iteration.bytes / (peak->bandwidth_gbs * 1e9), Counter::kIsIterationInvariantRate);
}

}  // namespace reel::bench::gbench
