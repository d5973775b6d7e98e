#include "parallel.h"

#include <omp.h>

#include <atomic>

#include <fmt/format.h>

#include "error.h"

#ifdef __SSE2__
#include <xmmintrin.h>
#endif

namespace reel {

void set_num_threads(int n) {
  if (n < 1) throw Error(fmt::format("set_num_threads: expected at least 1 thread, got {}", n));
  omp_set_num_threads(n);
}

int num_threads() { return omp_get_max_threads(); }

namespace {
std::atomic<bool> g_flush{true};
thread_local int tls_guard_depth = 0;
#ifdef __SSE2__
constexpr unsigned kFtzDaz = 0x8040;  // MXCSR flush-to-zero (bit 15) and denormals-are-zero (bit 6)
thread_local unsigned tls_saved_csr = 0;
thread_local bool tls_saved = false;

// On each pool thread: remembers its MXCSR and sets FTZ+DAZ (or puts it back). A
// thread that did not take part in the setting region restores nothing.
void set_pool(bool on) {
#pragma omp parallel
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
