// Timer, interleaved variants, phases and memory peaks (measure/timer.h). The clock is
// std::chrono::steady_clock on the CPU; on a GPU, CUDA events around each block (the
// host waits once per block, never per run).
#include "timer.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <exception>
#include <fstream>
#include <sstream>
#include <thread>

#include "../cpu/memory.h"
#include "../cuda/cuda.h"
#include "../tensor/parallel.h"

namespace reel::bench {
namespace {

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

void sync(Device d) {
  if (d.is_cuda()) cuda::synchronize(d.index);
}

// The pool's thread count held at a fixed value while measuring, restored afterwards
// (reel's default follows the load, which would change the count between blocks).
class FixedThreads {
 public:
  explicit FixedThreads(int n) : follow_(threads_follow_load()), prev_(num_threads()) {
    fixed_ = n > 0 ? n : prev_;
    set_num_threads(fixed_);
  }
  ~FixedThreads() {
    if (follow_) set_threads_follow_load(true);
    else set_num_threads(prev_);
  }
  FixedThreads(const FixedThreads&) = delete;
  FixedThreads& operator=(const FixedThreads&) = delete;
  int count() const { return fixed_; }

 private:
  bool follow_;
  int prev_, fixed_ = 0;
};

// Runs the body, turning whatever it throws into an Error that says where.
void run_body(const std::function<void()>& body, const std::string& label, const char* when) {
  try {
    body();
  } catch (const std::exception& e) {
    throw Error(fmt::format("bench: the body '{}' threw during {} (expected it to run to completion): {}",
                            label.empty() ? "body" : label, when, e.what()));
  } catch (...) {
    throw Error(fmt::format("bench: the body '{}' threw a non-standard exception during {}",
                            label.empty() ? "body" : label, when));
  }
}

void check_body(const std::function<void()>& body, const std::string& label) {
  if (!body) throw Error(fmt::format("bench: variant '{}' has no body (expected a callable)", label));
}

// Seconds for one block of `runs` runs, the device synchronised before. On a GPU with
// cuda_events: the GPU's time from an event queued before the first run to one after the
// last (the host's queueing ahead of the GPU is not counted; its falling behind is); else
// the host's clock to the sync after the last run.
double time_block(const std::function<void()>& body, int64_t runs, const TimerOptions& opt, const std::string& label) {
  const Device dev = opt.device;
  sync(dev);
  if (dev.is_cuda() && opt.cuda_events) {
    cuda::EventTimer events(dev.index);
    events.start();
    for (int64_t i = 0; i < runs; ++i) run_body(body, label, "timing");
    events.stop();
    return events.seconds();
  }
  double t0 = now_s();
  for (int64_t i = 0; i < runs; ++i) run_body(body, label, "timing");
  sync(dev);
  return now_s() - t0;
}

// The cost the timer adds to each block, timing an empty one (median of 31).
double block_overhead(const TimerOptions& opt) {
  std::vector<double> v;
  for (int i = 0; i < 31; ++i) v.push_back(time_block([] {}, 0, opt, "overhead"));
  std::nth_element(v.begin(), v.begin() + 15, v.end());
  return v[15];
}

void warm_up(const std::function<void()>& body, const TimerOptions& opt, const std::string& label) {
  double t0 = now_s();
  for (int i = 0; i < opt.warmup_runs || now_s() - t0 < opt.warmup_s; ++i) run_body(body, label, "warm-up");
  sync(opt.device);
}

int64_t autorange_impl(const std::function<void()>& body, const TimerOptions& opt, double overhead) {
  if (opt.runs_per_block > 0) return opt.runs_per_block;
  // long enough that the clock's cost is at most overhead_fraction of it
  const double target = overhead / opt.overhead_fraction;
  int64_t n = 1;
  for (;;) {
    double t = time_block(body, n, opt, opt.label);
    if (t >= target || n >= (int64_t(1) << 30)) return n;
    // aim 20% past the target from the rate seen, growing at most 10x and at least 2x a step
    double want = t > 0 ? double(n) * target / t * 1.2 : double(n) * 10;
    n = std::clamp<int64_t>(int64_t(std::ceil(want)), 2 * n, 10 * n);
  }
}

double quantile(const std::vector<double>& sorted, double q) {
  double pos = q * double(sorted.size() - 1);
  size_t lo = size_t(std::floor(pos));
  size_t hi = std::min(lo + 1, sorted.size() - 1);
  return sorted[lo] + (pos - double(lo)) * (sorted[hi] - sorted[lo]);
}

}  // namespace

// ---- helpers

std::string format_sig(double x, int significant) {
  if (!std::isfinite(x)) return fmt::format("{}", x);
  if (x == 0) return "0";
  double a = std::fabs(x);
  if (a >= 1e9 || a < 1e-4) return fmt::format("{:.{}e}", x, std::max(0, significant - 1));
  int digits = int(std::floor(std::log10(a))) + 1;  // before the point
  int decimals = std::max(0, significant - digits);
  // round to `significant` figures, then print without a trailing exponent
  double scale = std::pow(10.0, double(digits - significant));
  double r = std::round(x / scale) * scale;
  if (std::fabs(r) >= std::pow(10.0, digits)) decimals = std::max(0, decimals - 1);  // 9.99 -> 10.0
  return fmt::format("{:.{}f}", r, decimals);
}

std::string format_time(double s, int significant) {
  double a = std::fabs(s);
  if (a >= 1) return format_sig(s, significant) + " s";
  if (a >= 1e-3) return format_sig(s * 1e3, significant) + " ms";
  if (a >= 1e-6) return format_sig(s * 1e6, significant) + " us";
  return format_sig(s * 1e9, significant) + " ns";
}

double load_average() {
  std::ifstream f("/proc/loadavg");
  double l = 0;
  f >> l;
  return l;
}

int online_cpus() { return int(std::max(1u, std::thread::hardware_concurrency())); }

// ---- Measurement

Measurement summarize(std::vector<double> v, double noise_threshold) {
  if (v.empty()) throw Error("bench::summarize: expected at least one time, got none");
  Measurement m;
  m.times = v;
  std::sort(v.begin(), v.end());
  m.min = v.front();
  m.max = v.back();
  m.median = quantile(v, 0.5);
  m.q1 = quantile(v, 0.25);
  m.q3 = quantile(v, 0.75);
  m.iqr = m.q3 - m.q1;
  double sum = 0;
  for (double x : v) sum += x;
  m.mean = sum / double(v.size());
  m.blocks = int64_t(v.size());
  double rel = m.median > 0 ? m.iqr / m.median : 0;
  std::vector<std::string> why;
  if (rel > noise_threshold)
    why.push_back(fmt::format("the IQR is {:.1f}% of the median (above {:.0f}%)", 100 * rel, 100 * noise_threshold));
  if (v.size() < 4) why.push_back(fmt::format("only {} blocks: the quartiles are rough", v.size()));
  if (!why.empty()) {
    m.noisy = true;
    double load = load_average();
    int cpus = online_cpus();
    // the likely cause: other processes on the machine, or a body whose work varies
    if (load > 0.75 * cpus)
      why.push_back(fmt::format("the machine is busy (load average {:.1f} on {} CPUs)", load, cpus));
    else if (rel > noise_threshold)
      why.push_back(fmt::format("the machine is quiet (load {:.1f} on {} CPUs): the body's own time varies", load, cpus));
    for (size_t i = 0; i < why.size(); ++i) m.noise_reason += (i ? "; " : "") + why[i];
  }
  return m;
}

std::string Measurement::str() const {
  std::string s = fmt::format("{}: median {}  IQR {} ({:.1f}%)  min {}  max {}  {} blocks x {} runs  {} threads {}",
                              label.empty() ? "body" : label, format_time(median), format_time(iqr),
                              median > 0 ? 100 * iqr / median : 0.0, format_time(min), format_time(max), blocks,
                              runs_per_block, threads, device);
  if (noisy) s += "\n  warning: noisy measurement: " + noise_reason;
  return s;
}

// ---- Timer

Timer::Timer(TimerOptions opt) : opt_(std::move(opt)) {
  if (opt_.min_blocks < 1 || opt_.max_blocks < opt_.min_blocks)
    throw Error(fmt::format("bench::Timer: expected 1 <= min_blocks <= max_blocks, got {} and {}", opt_.min_blocks,
                            opt_.max_blocks));
  if (opt_.runs_per_block < 0)
    throw Error(fmt::format("bench::Timer: expected runs_per_block >= 0 (0: autorange), got {}", opt_.runs_per_block));
  if (!(opt_.overhead_fraction > 0))
    throw Error(fmt::format("bench::Timer: expected overhead_fraction > 0, got {}", opt_.overhead_fraction));
}

int64_t Timer::autorange(const std::function<void()>& body, double* overhead_s) const {
  check_body(body, opt_.label);
  FixedThreads threads(opt_.threads);
  warm_up(body, opt_, opt_.label);
  double ov = block_overhead(opt_);
  if (overhead_s) *overhead_s = ov;
  return autorange_impl(body, opt_, ov);
}

Measurement Timer::measure(const std::function<void()>& body) const {
  check_body(body, opt_.label);
  FixedThreads threads(opt_.threads);
  warm_up(body, opt_, opt_.label);
  double ov = block_overhead(opt_);
  int64_t n = autorange_impl(body, opt_, ov);
  std::vector<double> per_run;
  double total = 0;
  while ((int(per_run.size()) < opt_.min_blocks || total < opt_.min_run_s) && int(per_run.size()) < opt_.max_blocks) {
    double t = time_block(body, n, opt_, opt_.label);
    total += t;
    per_run.push_back(t / double(n));
  }
  Measurement m = summarize(per_run, opt_.noise_threshold);
  m.label = opt_.label;
  m.device = opt_.device.str();
  m.threads = threads.count();
  m.runs_per_block = n;
  m.runs = n * m.blocks;
  m.overhead_s = ov;
  return m;
}

Measurement Timer::timeit(const std::function<void()>& body, int64_t runs) const {
  check_body(body, opt_.label);
  if (runs < 1) throw Error(fmt::format("bench::Timer::timeit: expected at least 1 run, got {}", runs));
  FixedThreads threads(opt_.threads);
  warm_up(body, opt_, opt_.label);
  double ov = block_overhead(opt_);
  double t = time_block(body, runs, opt_, opt_.label);
  Measurement m = summarize({t / double(runs)}, opt_.noise_threshold);
  m.noisy = false;  // one block by request: no quartiles to judge
  m.noise_reason.clear();
  m.label = opt_.label;
  m.device = opt_.device.str();
  m.threads = threads.count();
  m.runs_per_block = runs;
  m.runs = runs;
  m.overhead_s = ov;
  return m;
}

// ---- interleaved variants

std::vector<Measurement> interleaved(const std::vector<Variant>& variants, TimerOptions opt) {
  if (variants.empty()) throw Error("bench::interleaved: expected at least one variant, got an empty list");
  for (const Variant& v : variants) check_body(v.body, v.name);
  Timer check(opt);  // validates the options
  FixedThreads threads(opt.threads);
  double ov = block_overhead(opt);
  std::vector<int64_t> n;
  for (const Variant& v : variants) {
    TimerOptions o = opt;
    o.label = v.name;
    warm_up(v.body, o, v.name);
    n.push_back(autorange_impl(v.body, o, ov));
  }
  std::vector<std::vector<double>> per_run(variants.size());
  std::vector<double> total(variants.size(), 0.0);
  auto done = [&] {
    for (size_t i = 0; i < variants.size(); ++i)
      if (int(per_run[i].size()) < opt.min_blocks || total[i] < opt.min_run_s) return false;
    return true;
  };
  while (!done() && int(per_run[0].size()) < opt.max_blocks) {
    for (size_t i = 0; i < variants.size(); ++i) {  // one round: a block of each, in order
      double t = time_block(variants[i].body, n[i], opt, variants[i].name);
      total[i] += t;
      per_run[i].push_back(t / double(n[i]));
    }
  }
  std::vector<Measurement> out;
  for (size_t i = 0; i < variants.size(); ++i) {
    Measurement m = summarize(per_run[i], opt.noise_threshold);
    m.label = variants[i].name;
    m.device = opt.device.str();
    m.threads = threads.count();
    m.runs_per_block = n[i];
    m.runs = n[i] * m.blocks;
    m.overhead_s = ov;
    out.push_back(std::move(m));
  }
  return out;
}

Ratio ratio(const std::vector<Measurement>& measured, const std::string& baseline, const std::string& variant) {
  auto find = [&](const std::string& name) -> const Measurement& {
    for (const Measurement& m : measured)
      if (m.label == name) return m;
    std::string have;
    for (const Measurement& m : measured) have += (have.empty() ? "" : ", ") + m.label;
    throw Error(fmt::format("bench::ratio: expected '{}' among the measured variants ({}), it is not there", name,
                            have.empty() ? "none" : have));
  };
  const Measurement& b = find(baseline);
  const Measurement& v = find(variant);
  size_t pairs = std::min(b.times.size(), v.times.size());
  std::vector<double> r;
  for (size_t i = 0; i < pairs; ++i)
    if (b.times[i] > 0) r.push_back(v.times[i] / b.times[i]);
  if (r.empty()) throw Error(fmt::format("bench::ratio: no timed pairs of '{}' and '{}'", variant, baseline));
  std::sort(r.begin(), r.end());
  return {.variant = variant, .baseline = baseline, .median = quantile(r, 0.5), .q1 = quantile(r, 0.25),
          .q3 = quantile(r, 0.75), .pairs = int64_t(r.size())};
}

std::string Ratio::str() const {
  return fmt::format("{} / {}: {}x (IQR {}-{}, {} pairs)", variant, baseline, format_sig(median), format_sig(q1),
                     format_sig(q3), pairs);
}

// ---- phases

PhaseMeasurement measure_phases(const StepPhases& p, TimerOptions opt) {
  check_body(p.forward, "forward");
  check_body(p.backward, "backward");
  Timer check(opt);
  FixedThreads threads(opt.threads);
  auto step = [&] {
    if (p.step) run_body(p.step, "step", "the optimizer phase");
  };
  for (int i = 0; i < std::max(1, opt.warmup_runs); ++i) {
    run_body(p.forward, "forward", "warm-up");
    run_body(p.backward, "backward", "warm-up");
    step();
  }
  std::vector<double> f, b, s, t;
  double total = 0;
  while ((int(t.size()) < opt.min_blocks || total < opt.min_run_s) && int(t.size()) < opt.max_blocks) {
    double tf, tb, ts;
    sync(opt.device);
    // events between the phases: the host waits once, after the whole step is queued
    if (opt.device.is_cuda() && opt.cuda_events) {
      cuda::EventTimer ef(opt.device.index), eb(opt.device.index), es(opt.device.index);
      ef.start();
      run_body(p.forward, "forward", "timing");
      ef.stop(), eb.start();
      run_body(p.backward, "backward", "timing");
      eb.stop(), es.start();
      step();
      es.stop();
      tf = ef.seconds(), tb = eb.seconds(), ts = es.seconds();
    } else {
      double t0 = now_s();  // a sync (a no-op on the CPU) before each clock read
      run_body(p.forward, "forward", "timing");
      sync(opt.device);
      double t1 = now_s();
      run_body(p.backward, "backward", "timing");
      sync(opt.device);
      double t2 = now_s();
      step();
      sync(opt.device);
      double t3 = now_s();
      tf = t1 - t0, tb = t2 - t1, ts = t3 - t2;
    }
    f.push_back(tf), b.push_back(tb), s.push_back(ts), t.push_back(tf + tb + ts);
    total += tf + tb + ts;
  }
  PhaseMeasurement r;
  auto fill = [&](Measurement& m, std::vector<double>& v, const char* name) {
    m = summarize(v, opt.noise_threshold);
    m.label = (opt.label.empty() ? std::string() : opt.label + " ") + name;
    m.device = opt.device.str();
    m.threads = threads.count();
    m.runs_per_block = 1;
    m.runs = m.blocks;
  };
  fill(r.forward, f, "forward");
  fill(r.backward, b, "backward");
  fill(r.step, s, "step");
  fill(r.total, t, "total");
  return r;
}

std::string PhaseMeasurement::str() const {
  std::string s;
  for (const Measurement* m : {&forward, &backward, &step, &total})
    s += fmt::format("{:<24} {:>10}  ({:.0f}% of the step)  IQR {:.1f}%\n", m->label, format_time(m->median),
                     total.median > 0 ? 100 * m->median / total.median : 0.0,
                     m->median > 0 ? 100 * m->iqr / m->median : 0.0);
  return s;
}

// ---- memory

namespace {
// VmRSS and VmHWM of this process, in bytes (0 where /proc is missing).
std::pair<size_t, size_t> rss_now_and_peak() {
  std::ifstream f("/proc/self/status");
  std::string line;
  size_t rss = 0, hwm = 0;
  while (std::getline(f, line)) {
    std::istringstream in(line);
    std::string key;
    size_t kb = 0;
    in >> key >> kb;
    if (key == "VmRSS:") rss = kb * 1024;
    if (key == "VmHWM:") hwm = kb * 1024;
  }
  return {rss, hwm};
}
}  // namespace

MemoryPeak measure_memory(const std::function<void()>& body, Device device) {
  check_body(body, "memory");
  MemoryPeak r;
  sync(device);
  // "5" resets the resident set's high-water mark (Linux 4.0+); where refused the mark
  // is the process's lifetime peak, never less than the body's
  if (FILE* f = std::fopen("/proc/self/clear_refs", "w")) {
    std::fputs("5", f);
    std::fclose(f);
  }
  r.rss_before_bytes = rss_now_and_peak().first;
  cpu::reset_peak_memory_stats();
  size_t cpu_before = cpu::memory_stats().allocated;
  size_t cuda_before = 0;
  if (device.is_cuda()) {
    cuda::reset_peak_memory_stats(device.index);
    cuda_before = cuda::memory_stats(device.index).allocated;
  }
  run_body(body, "memory", "the memory measurement");
  sync(device);
  size_t cpu_peak = cpu::memory_stats().peak_allocated;
  r.cpu_peak_bytes = cpu_peak > cpu_before ? cpu_peak - cpu_before : 0;
  if (device.is_cuda()) {
    size_t p = cuda::memory_stats(device.index).peak_allocated;
    r.cuda_peak_bytes = p > cuda_before ? p - cuda_before : 0;
  }
  r.rss_peak_bytes = rss_now_and_peak().second;
  return r;
}

std::string MemoryPeak::str() const {
  auto mib = [](size_t b) { return format_sig(double(b) / (1024.0 * 1024.0)) + " MiB"; };
  std::string s = "reel cpu peak +" + mib(cpu_peak_bytes);
  if (cuda_peak_bytes) s += ", cuda peak +" + mib(cuda_peak_bytes);
  s += ", host RSS peak " + mib(rss_peak_bytes);
  if (rss_peak_bytes > rss_before_bytes) s += " (+" + mib(rss_peak_bytes - rss_before_bytes) + ")";
  return s;
}

}  // namespace reel::bench
