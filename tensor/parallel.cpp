#include "parallel.h"

#include <omp.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <mutex>

#include <fmt/format.h>

#include "error.h"
#include "internal/core_load.h"

#ifdef __SSE2__
#include <xmmintrin.h>
#endif

namespace reel {

namespace {
std::atomic<bool> g_flush{true};
thread_local int tls_guard_depth = 0;

// ---- the thread count that follows the load (see parallel.h)
constexpr int64_t kProbeEveryUs = 250000;
std::mutex g_probe_mutex;
std::atomic<int64_t> g_next_probe_us{0};
std::atomic<int> g_load_threads{0};   // what the last measurement allows; 0: not measured yet
std::atomic<int> g_pool_high_water{0};  // the most threads any region was given (see set_pool)

// A thread's own state: whether it follows, its ceiling (the count OpenMP started it
// with), and the count last applied (a different omp_get_max_threads() means somebody
// called omp_set_num_threads: their count is kept).
struct ThreadCount {
  bool init = false;
  bool follow = true;
  int ceiling = 1;
  int applied = 0;
  unsigned calls = 0;
};
thread_local ThreadCount tls_count;

ThreadCount& thread_count() {
  ThreadCount& c = tls_count;
  if (!c.init) {
    c.init = true;
    c.follow = std::getenv("OMP_NUM_THREADS") == nullptr;
    c.ceiling = omp_get_max_threads();
    c.applied = c.ceiling;
  }
  return c;
}

int64_t now_us() {
  return std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// One thread measures; the others keep the last answer meanwhile.
void probe(int64_t now) {
  std::unique_lock lock(g_probe_mutex, std::try_to_lock);
  if (!lock.owns_lock() || now < g_next_probe_us.load(std::memory_order_relaxed)) return;
  static internal::CoreLoadProbe probe;
  static double previous_free = probe.allowed_cores();
  const double free = probe.allowed_cores() - probe.others_busy_cores();
  const int current = g_load_threads.load(std::memory_order_relaxed);
  g_load_threads.store(internal::threads_for_load(probe.allowed_cores(), current > 0 ? current : probe.allowed_cores(),
                                                  free, previous_free),
                       std::memory_order_relaxed);
  previous_free = free;
  g_next_probe_us.store(now + kProbeEveryUs, std::memory_order_relaxed);
}

void apply(ThreadCount& c, int n) {
  omp_set_num_threads(n);
  c.applied = n;
  int high = g_pool_high_water.load(std::memory_order_relaxed);
  while (n > high && !g_pool_high_water.compare_exchange_weak(high, n)) {
  }
}
}  // namespace

void set_num_threads(int n) {
  if (n < 1) throw Error(fmt::format("set_num_threads: expected at least 1 thread, got {}", n));
  ThreadCount& c = thread_count();
  c.follow = false;
  c.ceiling = n;
  apply(c, n);
}

int num_threads() { return omp_get_max_threads(); }

void set_threads_follow_load(bool on) {
  ThreadCount& c = thread_count();
  c.follow = on;
  if (!on) c.ceiling = omp_get_max_threads();
  c.calls = 15;  // the next op looks
}

bool threads_follow_load() { return thread_count().follow; }

namespace internal {
void follow_load_tick() {
  ThreadCount& c = thread_count();
  if (!c.follow || (++c.calls & 15) != 0 || omp_in_parallel()) return;
  if (omp_get_max_threads() != c.applied) {  // omp_set_num_threads from elsewhere: keep that count
    c.follow = false;
    c.ceiling = omp_get_max_threads();
    return;
  }
  const int64_t now = now_us();
  if (now >= g_next_probe_us.load(std::memory_order_relaxed)) probe(now);
  const int allowed = g_load_threads.load(std::memory_order_relaxed);
  int want = allowed > 0 ? std::min(allowed, c.ceiling) : c.ceiling;
  // inside a FlushSubnormalsGuard the pool's threads were set up for the count then;
  // a larger team would bring in a thread without flush-to-zero
  if (tls_guard_depth > 0) want = std::min(want, c.applied);
  if (want != c.applied) apply(c, want);
}
}  // namespace internal

namespace {
#ifdef __SSE2__
constexpr unsigned kFtzDaz = 0x8040;  // MXCSR flush-to-zero (bit 15) and denormals-are-zero (bit 6)
thread_local unsigned tls_saved_csr = 0;
thread_local bool tls_saved = false;

// On each pool thread: remembers its MXCSR and sets FTZ+DAZ (or puts it back). A
// thread that did not take part in the setting region restores nothing.
void set_pool(bool on) {
  // every thread that any earlier, larger team used: a later op may bring it back
  const int team = std::max(omp_get_max_threads(), g_pool_high_water.load(std::memory_order_relaxed));
#pragma omp parallel num_threads(team)
  {
    if (on && !tls_saved) {
      tls_saved_csr = _mm_getcsr();
      tls_saved = true;
      _mm_setcsr(tls_saved_csr | kFtzDaz);
    } else if (!on && tls_saved) {
      _mm_setcsr(tls_saved_csr);
      tls_saved = false;
    }
  }
}
#endif
}  // namespace

std::atomic<ConvAlgorithm> g_conv_algorithm{ConvAlgorithm::fastest};

void set_conv_algorithm(ConvAlgorithm algorithm) { g_conv_algorithm.store(algorithm, std::memory_order_relaxed); }
ConvAlgorithm conv_algorithm() { return g_conv_algorithm.load(std::memory_order_relaxed); }

void set_flush_subnormals(bool on) { g_flush.store(on, std::memory_order_relaxed); }
bool flush_subnormals() { return g_flush.load(std::memory_order_relaxed); }

// One region to set and one to restore: a parallel region costs about a microsecond,
// a backward pass at least tens.
FlushSubnormalsGuard::FlushSubnormalsGuard() {
  if (tls_guard_depth++ > 0 || !flush_subnormals() || omp_in_parallel()) return;
  active_ = true;
#ifdef __SSE2__
  set_pool(true);
#endif
}

FlushSubnormalsGuard::~FlushSubnormalsGuard() {
  --tls_guard_depth;
#ifdef __SSE2__
  if (active_) set_pool(false);
#endif
}

}  // namespace reel
