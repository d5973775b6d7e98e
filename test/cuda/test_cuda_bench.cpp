// bench on a GPU: each block is timed by CUDA events (cuda::EventTimer), with one host
// wait per block rather than one per run, and the events' time agrees with the host's
// clock around a synchronised block.
#include <reel/bench.h>

#include <chrono>

#include "compare.h"

using namespace reel;
using cuda_test::kGpu;

TEST_CASE("cuda::EventTimer measures the GPU's time between its two events", "[cuda][bench]") {
  Tensor a = randn({2048, 2048}, {.device = kGpu}), b = randn({2048, 2048}, {.device = kGpu});
  Tensor c = matmul(a, b);
  cuda::synchronize();
  cuda::EventTimer t;
  CHECK_THROWS_WITH(t.seconds(), Catch::Contains("expected start() and then stop()"));
  auto h0 = std::chrono::steady_clock::now();
  const uint64_t syncs = cuda::host_sync_count();
  t.start();
  for (int i = 0; i < 20; ++i) c = matmul(a, b);
  t.stop();
  CHECK(cuda::host_sync_count() == syncs);  // start() and stop() queue events; nothing waits
  double s = t.seconds();
  double host = std::chrono::duration<double>(std::chrono::steady_clock::now() - h0).count();
  CHECK(cuda::host_sync_count() == syncs + 1);
  // 20 products of 2 * 2048^3 FLOPs: more than 0, and no more than the host saw pass
  CHECK(s > 0);
  CHECK(s <= host * 1.01);
  CHECK(s > 0.5 * host);  // the GPU was busy most of the time the host waited
}

TEST_CASE("bench::Timer on a GPU waits once per block, not per run, and events agree with the clock",
          "[cuda][bench]") {
  // 2048^2: GPU-bound on an H100/H200 (512^2 took 17 us of GPU against 22 us of launching)
  Tensor a = randn({2048, 2048}, {.device = kGpu});
  Tensor c;
  auto body = [&] { c = matmul(a, a); };
  const bool events = GENERATE(false, true);
  bench::Timer timer({.device = kGpu, .warmup_runs = 3, .min_run_s = 0, .min_blocks = 4, .max_blocks = 4,
                      .runs_per_block = 20, .cuda_events = events});
  const uint64_t before = cuda::host_sync_count();
  bench::Measurement m = timer.measure(body);
  const uint64_t waits = cuda::host_sync_count() - before;
  CHECK(m.blocks == 4);
  CHECK(m.runs == 80);
  CHECK(m.median > 0);
  // the warm-up's wait, the overhead probe's 31 empty blocks and the 4 blocks: two each
  CHECK(waits <= 1 + 2 * (31 + 4));
  CHECK(waits < uint64_t(m.runs));
  // the two ways agree on a GPU-bound body to within the host's launch cost
  bench::Measurement other = bench::Timer({.device = kGpu, .warmup_runs = 3, .min_run_s = 0, .min_blocks = 4,
                                           .max_blocks = 4, .runs_per_block = 20, .cuda_events = !events})
                                 .measure(body);
  CHECK(m.median == Approx(other.median).epsilon(0.25));
}
