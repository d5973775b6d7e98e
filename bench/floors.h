// What the programs that state floors share: reel::bench's Timer for their timed blocks and
// the machine probe (reel::bench::machine_peak) for their floors. Apart from reel_bench.h
// because <reel/bench.h> declares reel::bench, which a program's `using namespace reel;`
// makes ambiguous with this folder's own namespace `bench`: the programs that include this
// header write `::bench::` for the latter.
#pragma once
#include <reel/bench.h>

#include <functional>

#include "reel_bench.h"

namespace bench {

// ms per call of `f` over one block of `calls` calls, timed by reel::bench's Timer (the
// device synchronised around the block, never inside it; the thread count held for the
// block): the project times itself the way docs/benchmarking.md tells users to. No
// warm-up here: the programs warm up themselves.
template <typename F>
double block_ms(const Target& t, int64_t calls, F&& f) {
  reel::bench::Timer timer({.device = t.device, .warmup_runs = 0});
  return 1e3 * timer.timeit(std::function<void()>(std::forward<F>(f)), calls).median;
}

// The machine's floors: reel::bench::machine_peak (STREAM copy/scale/add/triad, the best
// of regular and non-temporal stores on all threads, and oneDNN's best f32/bf16 GEMM),
// measured once per machine and cached in ~/.cache/reel. Every floor fraction the
// programs print is against it, and says so.
inline const reel::bench::MachinePeak& machine(const Target& t) {
  static const reel::bench::MachinePeak peak = [&] {
    reel::bench::MachinePeak p = reel::bench::machine_peak(t.device);
    std::printf("floors from the machine probe: %s", p.str().c_str());
    return p;
  }();
  return peak;
}

// The JSON fields that name the probe: "probe_gbs": 41.3, "probe": "STREAM triad, ..."
inline std::string probe_fields(const reel::bench::MachinePeak& p) {
  char s[384];
  std::snprintf(s, sizeof s,
                "\"probe_gbs\": %.4g, \"probe_inplace_add_gbs\": %.4g, \"probe_read_gbs\": %.4g, \"probe_gflops\": %.4g, "
                "\"probe\": \"STREAM %s; oneDNN GEMM\"",
                p.bandwidth_gbs, p.inplace_add_gbs, p.read_gbs, p.f32_gflops, p.bandwidth_kernel.c_str());
  return s;
}

}  // namespace bench
