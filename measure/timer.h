// reel::bench's timing: a Timer that warms a body up, grows a block of runs until the
// clock's own cost is negligible, repeats blocks until a minimum run time, and reports a
// Measurement (median, IQR, min, max per run, with a noise warning that says why);
// several variants timed in alternation (A B A B ...) so that drift and a busy neighbour
// hit all of them alike; a training step timed phase by phase; peak memory of a body.
//
//   reel::bench::Timer timer({.label = "mlp", .min_run_s = 0.5});
//   reel::bench::Measurement m = timer.measure([&] { net(x).sum().backward(); });
//   std::cout << m.str() << "\n";    // "mlp: median 1.23 ms  IQR 0.02 ms (1.6%)  ..."
//
//   auto ms = reel::bench::interleaved({{"dense", dense_step}, {"conv1x1", conv_step}});
//   reel::bench::Ratio r = reel::bench::ratio(ms, "dense", "conv1x1");  // median and quartiles
//
// A block is timed as a whole: on a GPU (TimerOptions::device) the device is synchronised
// before and after each block (or, with cuda_events, the block timed by CUDA events queued
// around it), never inside it, so a GPU's queue stays full and the host's launch cost
// overlaps the kernels as it does in training. Medians are per run (a block's
// time divided by its runs). Errors (a body that throws, zero runs, no variants) are
// reel::Error naming what was expected.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "../tensor/tensor.h"

namespace reel::bench {

struct TimerOptions {
  std::string label{};            // the name reported ("" prints "body")
  Device device = kCPU;         // a CUDA device: synchronised around each block, never inside
  int threads = 0;              // the CPU pool's threads while measuring; 0: the current count, held fixed
  int warmup_runs = 1;          // runs before timing (first-call costs, algorithm search, allocator growth)
  double warmup_s = 0.0;        // and at least this long
  double min_run_s = 0.2;       // timed blocks repeat until their sum reaches this
  int min_blocks = 5;           // and at least this many blocks
  int max_blocks = 10000;       // a cap for tiny bodies
  double overhead_fraction = 1e-4;  // a block grows until the clock's cost is at most this share of it
  int64_t runs_per_block = 0;   // > 0: fixed block size, no autorange
  double noise_threshold = 0.10;  // IQR / median above this sets Measurement::noisy
  // A GPU's blocks (and measure_phases' phases) timed by CUDA events (cuda::EventTimer)
  // rather than the host's clock around a sync. Off: on an H200 (2026-11-28) the two agreed
  // on a GPU-bound body but differed by a quarter on a launch-bound one (512^2 products),
  // and the clock is what a user waits for (docs/benchmarking.md).
  bool cuda_events = false;
};

struct Measurement {
  std::string label{};
  std::string device = "cpu";
  int threads = 0;
  std::vector<double> times{};  // seconds per run, one value per block
  int64_t runs_per_block = 0;
  int64_t blocks = 0, runs = 0;
  double median = 0, q1 = 0, q3 = 0, iqr = 0, min = 0, max = 0, mean = 0;  // seconds per run
  double overhead_s = 0;  // an empty block's time (clock or events, and the sync), measured before timing
  bool noisy = false;
  std::string noise_reason{};  // why noisy: the spread, too few blocks, the load of the machine

  // "mlp: median 1.23 ms  IQR 0.021 ms (1.7%)  min 1.20 ms  max 1.31 ms  20 blocks x 40 runs  2 threads cpu"
  // and, when noisy, a second line "  warning: ..." with the reason.
  std::string str() const;
};

// The statistics of per-run times (median, quartiles by linear interpolation, min, max,
// mean), with the noise verdict at `noise_threshold`. Throws Error for an empty list.
Measurement summarize(std::vector<double> per_run_s, double noise_threshold = 0.10);

class Timer {
 public:
  explicit Timer(TimerOptions opt = {});
  // Warm-up, autorange, then blocks until min_run_s and min_blocks: the whole protocol.
  Measurement measure(const std::function<void()>& body) const;
  // Exactly `runs` runs in one block after the warm-up (no autorange): timeit's form.
  Measurement timeit(const std::function<void()>& body, int64_t runs) const;
  // The runs per block that autorange picks for `body` (after the warm-up), and the
  // per-block overhead it measured.
  int64_t autorange(const std::function<void()>& body, double* overhead_s = nullptr) const;
  const TimerOptions& options() const { return opt_; }

 private:
  TimerOptions opt_;
};

// ---- several variants in alternation

struct Variant {
  std::string name{};
  std::function<void()> body{};
};

// Warms every variant up, autoranges each, then times one block of each in turn (A B C A B
// C ...) until each has min_blocks blocks and min_run_s of time. One Measurement per
// variant, in order, labelled with its name. Throws Error for an empty list or a variant
// without a body.
std::vector<Measurement> interleaved(const std::vector<Variant>& variants, TimerOptions opt = {});

// The time of `variant` over `baseline`, round by round (blocks of the same round were
// timed next to each other): median and quartiles of those ratios.
struct Ratio {
  std::string variant{}, baseline{};
  double median = 0, q1 = 0, q3 = 0;
  int64_t pairs = 0;
  std::string str() const;  // "conv1x1 / dense: 1.42x (IQR 1.39-1.46, 20 pairs)"
};
Ratio ratio(const std::vector<Measurement>& measured, const std::string& baseline, const std::string& variant);

// ---- a training step by phases

struct StepPhases {
  std::function<void()> forward{};   // builds the loss (keep it in a variable the others see)
  std::function<void()> backward{};  // loss.backward()
  std::function<void()> step{};      // opt.step(); opt.zero_grad() (may be empty)
};
struct PhaseMeasurement {
  Measurement forward, backward, step, total;
  std::string str() const;  // one line per phase, with its share of the total
};
// Times whole steps phase by phase: the clock at each phase's end (after a device sync on
// a GPU); with cuda_events, CUDA events between the phases and one wait per step. The step's runs are the blocks
// (runs_per_block 1).
PhaseMeasurement measure_phases(const StepPhases& phases, TimerOptions opt = {});

// ---- memory

struct MemoryPeak {
  size_t cpu_peak_bytes = 0;   // reel's CPU allocator: the most held at once during the body, above what was held before
  size_t cuda_peak_bytes = 0;  // the device's pool (TimerOptions::device, a CUDA device), the same way
  size_t rss_peak_bytes = 0;   // the process's resident set: its high-water mark during the body (VmHWM)
  size_t rss_before_bytes = 0; // resident set before the body
  std::string str() const;     // "reel cpu peak +12.3 MiB, host RSS peak 345 MiB (+10.1 MiB)"
};
// Runs `body` once after resetting the peaks (reel's allocators, and the kernel's
// high-water mark of this process through /proc/self/clear_refs where allowed).
MemoryPeak measure_memory(const std::function<void()>& body, Device device = kCPU);

// ---- helpers the other parts share

// A duration with 3 significant figures and its unit: "1.23 ms", "456 us", "2.01 s".
std::string format_time(double seconds, int significant = 3);
// `x` with `significant` digits, no exponent for ordinary magnitudes: 0.00123, 1230, 1.23e+09.
std::string format_sig(double x, int significant = 3);
// The 1-minute load average and the number of online CPUs, for noise reasons and reports.
double load_average();
int online_cpus();

}  // namespace reel::bench
