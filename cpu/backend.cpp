// The CPU backend's memory, copies, fills and random numbers, and its registration.
#include <fmt/format.h>
#include <sys/mman.h>

#include <algorithm>
#include <atomic>
#include <bit>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <vector>

#include "../tensor/philox.h"
#include "memory.h"
#include "convert.h"
#include "cpu_backend.h"
#include "philox_words.h"
#include "loops.h"

namespace reel::cpu {

// ---- memory: 64-byte aligned, and cached: a fresh multi-megabyte block page-faults
// on first touch every training step, and glibc's aligned allocation of the small
// blocks (~76 per W1 step) took ~4% of the step. Blocks are rounded to a size class
// (see size_class) and kept per class in vectors, so that a steady-state step
// allocates nothing. The cache may hold 2 GiB, or more while live + cached bytes stay
// within twice the most ever live at once: W11's activations outgrow 2 GiB, and with
// the bound at 1x or 1.5x its peak the blocks of one size class still ran out while
// others sat cached (70-150k page faults, ~10% of the step); at 2x none, and its RSS
// is 2.75 GB. A miss that would pass the bound frees cached blocks first.
namespace {
constexpr size_t kSmallMax = size_t(1) << 16, kLargeMin = size_t(1) << 22;
#ifdef __SANITIZE_ADDRESS__
constexpr size_t kCacheLimit = 0;  // every block freed, so that AddressSanitizer sees a use after free
#else
constexpr size_t kCacheLimit = size_t(2) << 30;
#endif

struct BlockCache {
  std::mutex mu;
  std::map<size_t, std::vector<void*>> free;  // by size class
  size_t cached = 0;
};
BlockCache& cache() {
  static BlockCache* c = new BlockCache();  // never destroyed: tensors may die after main
  return *c;
}
// Below 64 KiB: four classes per power of two (at most 25% over the request), 64-byte
// multiples; to 4 MiB, pages; above, eight classes per power of two (at most 12.5% over),
// so that the many nearby sizes of a deep net's activations (DenseNet's grow by one
// growth step per layer) share blocks instead of each missing the cache.
size_t size_class(size_t n) {
  if (n >= kLargeMin) {
    size_t step = std::bit_ceil(n) / 16;
    return (n + step - 1) / step * step;
  }
  if (n >= kSmallMax) return (n + 4095) & ~size_t(4095);
  size_t step = std::max<size_t>(64, std::bit_ceil(n) / 8);
  return (n + step - 1) / step * step;
}
// Bytes held by live tensors, and the most at once (cpu/memory.h; g_high is never reset)
std::atomic<size_t> g_allocated{0}, g_peak{0}, g_high{0};
void raise_to(std::atomic<size_t>& m, size_t now) {
  size_t v = m.load(std::memory_order_relaxed);
  while (now > v && !m.compare_exchange_weak(v, now, std::memory_order_relaxed)) {
  }
}
void count_allocation(size_t r) {
  size_t now = g_allocated.fetch_add(r, std::memory_order_relaxed) + r;
  raise_to(g_peak, now);
  raise_to(g_high, now);
}
// What live + cached bytes may reach before the cache gives blocks back
size_t cache_bound() {
  size_t high = g_high.load(std::memory_order_relaxed);
  return std::max(kCacheLimit, 2 * high);
}
// Frees cached blocks (largest classes first) until cached + live + need fits the bound.
void trim_cache(BlockCache& c, size_t need) {
  size_t live = g_allocated.load(std::memory_order_relaxed), bound = cache_bound();
  for (auto it = c.free.rbegin(); it != c.free.rend() && c.cached > 0 && c.cached + live + need > bound; ++it)
    while (!it->second.empty() && c.cached + live + need > bound) {
      std::free(it->second.back());
      it->second.pop_back();
      c.cached -= it->first;
    }
}
}  // namespace

MemoryStats memory_stats() {
  size_t cached;
  {
    BlockCache& c = cache();
    std::lock_guard<std::mutex> lock(c.mu);
    cached = c.cached;
  }
  return {.allocated = g_allocated.load(std::memory_order_relaxed),
          .peak_allocated = g_peak.load(std::memory_order_relaxed), .cached = cached};
}
void empty_cache() {
  BlockCache& c = cache();
  std::lock_guard<std::mutex> lock(c.mu);
  for (auto& [size, blocks] : c.free)
    for (void* p : blocks) std::free(p);
  c.free.clear();
  c.cached = 0;
}
void reset_peak_memory_stats() { g_peak.store(g_allocated.load(std::memory_order_relaxed), std::memory_order_relaxed); }

void* CpuBackend::allocate(size_t nbytes) {
  if (nbytes == 0) return nullptr;
  // past a 64-bit machine's 2^47-byte user address space: nothing to ask malloc (whose
  // answer, under AddressSanitizer, is an abort), and size_class cannot wrap
  if (nbytes > (size_t(1) << 47))
    throw Error(fmt::format("cpu: out of memory allocating {} bytes (more than the address space)", nbytes));
  size_t r = size_class(nbytes);
  count_allocation(r);
  {
    BlockCache& c = cache();
    std::lock_guard<std::mutex> lock(c.mu);
    auto it = c.free.find(r);
    if (it != c.free.end() && !it->second.empty()) {
      void* p = it->second.back();
      it->second.pop_back();
      c.cached -= r;
      return p;
    }
    trim_cache(c, 0);  // this block is already counted live
  }
  void* p = std::aligned_alloc(64, r);
#if defined(__linux__) && defined(MADV_HUGEPAGE)
  // Large blocks ask for transparent huge pages over their whole 2 MiB pages (where the
  // system's THP mode is "madvise", as on Debian, nothing else gives them any): a 4M-float
  // map spans 4096 4 KiB pages per operand and misses the TLB on most of them. Streaming
  // ops went 4-10% faster (W14 on the Xeon: exp 0.64-0.67 -> 0.62-0.64 ms, log 0.71-0.75
  // -> 0.66-0.68); W10 and W11 unchanged within noise, W11's peak RSS +0.7%. Blocks are
  // not realigned to 2 MiB: that was faster still for W14 but 4% slower for W11 (every
  // large operand at the same offset in the cache sets).
  if (p && r >= kLargeMin) {
    const uintptr_t huge = uintptr_t(2) << 20, at = reinterpret_cast<uintptr_t>(p);
    const uintptr_t lo = (at + huge - 1) & ~(huge - 1), hi = (at + r) & ~(huge - 1);
    if (hi > lo) (void)madvise(reinterpret_cast<void*>(lo), hi - lo, MADV_HUGEPAGE);  // advice: a refusal is fine
  }
#endif
  if (!p) g_allocated.fetch_sub(r, std::memory_order_relaxed);
  if (!p) throw Error(fmt::format("cpu: out of memory allocating {} bytes", nbytes));
  return p;
}

void CpuBackend::deallocate(void* ptr, size_t nbytes) {
  if (!ptr) return;
  size_t r = size_class(nbytes);
  g_allocated.fetch_sub(r, std::memory_order_relaxed);
  {
    BlockCache& c = cache();
    std::lock_guard<std::mutex> lock(c.mu);
    if (kCacheLimit > 0 && c.cached + r + g_allocated.load(std::memory_order_relaxed) <= cache_bound()) {
      c.free[r].push_back(ptr);
      c.cached += r;
      return;
    }
  }
  std::free(ptr);
}

// ---- copy with dtype conversion
namespace {
template <typename To, typename From>
To convert(From v) {
  if constexpr (std::is_same_v<To, From>) return v;
  else if constexpr (std::is_same_v<From, Half> || std::is_same_v<From, BFloat16>) return convert<To>(float(v));
  else if constexpr (std::is_same_v<To, Half> || std::is_same_v<To, BFloat16>) return To(float(v));
  else if constexpr (std::is_same_v<To, bool>) return v != From(0);
  else return To(v);
}

template <typename Fn>
void dispatch_all(DType t, Fn&& fn) {
  switch (t) {
    case DType::f16: fn.template operator()<Half>(); return;
    case DType::bf16: fn.template operator()<BFloat16>(); return;
    default: dispatch(t, "copy", fn);
  }
}
// dst = src where one is channels-last and the other contiguous, both [N, C, H, W]: per
// image an [R, S] -> [S, R] transpose (R, S = C, HW one way, HW, C the other) in 32x32
// tiles, so both sides stay in cache; the row-wise loop read or wrote one element per
// cache line (dropout's uniforms, Flatten after a channels-last layer). Memory-bound.
template <typename To, typename From>
bool copy_transposing(const Tensor& dst, const Tensor& src) {
  if (dst.dim() != 4 || dst.shape() != src.shape()) return false;
  const Dims& sh = dst.shape();
  const bool to_cl = is_channels_last(sh, dst.strides()) && src.is_contiguous();
  const bool from_cl = dst.is_contiguous() && is_channels_last(sh, src.strides());
  if (!to_cl && !from_cl) return false;
  const int64_t N = sh[0], C = sh[1], HW = sh[2] * sh[3], R = to_cl ? C : HW, S = to_cl ? HW : C;
  To* o = static_cast<To*>(dst.data_ptr());
  const From* a = static_cast<const From*>(src.data_ptr());
  constexpr int64_t T = 32;
  const int64_t rt = (R + T - 1) / T, st = (S + T - 1) / T;
#pragma omp parallel for collapse(2) schedule(static) if (dst.numel() >= kParallelGrain)
  for (int64_t n = 0; n < N; ++n)
    for (int64_t t = 0; t < rt * st; ++t) {
      const int64_t r0 = t / st * T, s0 = t % st * T, r1 = std::min(R, r0 + T), s1 = std::min(S, s0 + T);
      const From* an = a + n * R * S;
      To* on = o + n * R * S;
      for (int64_t s = s0; s < s1; ++s)
        for (int64_t r = r0; r < r1; ++r) on[s * R + r] = convert<To>(an[r * S + s]);
    }
  return true;
}

// dst = src, bytes apart, on all the pool's threads once large: memory-bound, and one
// core's memcpy reaches about half of what two do (10M floats on the 2-core Xeon: 3.0 ms
// on one thread). Slices 64-byte aligned, one per thread.
void parallel_memcpy(void* dst, const void* src, size_t bytes) {
  constexpr size_t kSerialBytes = size_t(kParallelGrain) * 32;  // 1 MiB: below it the fork costs more
  const int parts = omp_get_max_threads();
  if (bytes < kSerialBytes || parts < 2 || omp_in_parallel()) {
    std::memcpy(dst, src, bytes);
    return;
  }
  // ceil(bytes / parts), then up to a cache line: the parts must cover every byte, also when bytes / parts
  // rounds down to a multiple of 64 (it did: the last bytes of 2^24 + 8 went uncopied on 16 threads)
  const size_t step = ((bytes + size_t(parts) - 1) / size_t(parts) + 63) / 64 * 64;
  auto* d = static_cast<char*>(dst);
  const auto* s = static_cast<const char*>(src);
#pragma omp parallel for schedule(static) num_threads(parts)
  for (int p = 0; p < parts; ++p) {
    const size_t lo = size_t(p) * step;
    if (lo < bytes) std::memcpy(d + lo, s + lo, std::min(bytes, lo + step) - lo);
  }
}
}  // namespace

void CpuBackend::copy(const Tensor& dst, const Tensor& src) {
  if (!dst.device().is_cpu() || !src.device().is_cpu())
    throw Error(fmt::format("copy: the CPU backend cannot copy {} -> {}", src.device().str(), dst.device().str()));
  if (dst.dtype() == src.dtype() && ((dst.is_contiguous() && src.is_contiguous()) || contiguous_same(dst, src))) {
    const size_t bytes = size_t(dst.numel()) * dst.element_size();
    char* d = static_cast<char*>(dst.data_ptr());
    const char* from = static_cast<const char*>(src.data_ptr());
    if (d == from) return;  // a tensor copied onto itself
    if (d < from + bytes && from < d + bytes) std::memmove(d, from, bytes);  // overlapping: as if src were read first
    else parallel_memcpy(d, from, bytes);
    return;
  }
  if (convert_contiguous(dst, src)) return;
  dispatch_all(dst.dtype(), [&]<typename To>() {
    dispatch_all(src.dtype(), [&]<typename From>() {
      if (copy_transposing<To, From>(dst, src)) return;
      for_each_row<To, const From>(dst.shape(), {&dst, &src}, [](auto p, auto st, int64_t n) {
        To* o = std::get<0>(p);
        const From* a = std::get<1>(p);
        for (int64_t i = 0; i < n; ++i) o[i * st[0]] = convert<To>(a[i * st[1]]);
      });
    });
  });
}

void CpuBackend::fill(const Tensor& out, double value) {
  dispatch_all(out.dtype(), [&]<typename T>() {
    T v = convert<T>(value);
    for_each_row<T>(out.shape(), {&out}, [v](auto p, auto st, int64_t n) {
      T* o = std::get<0>(p);
      for (int64_t i = 0; i < n; ++i) o[i * st[0]] = v;
    });
  });
}

void CpuBackend::axpy(const Tensor& out, const Tensor& x, double alpha) {
  dispatch_float(out.dtype(), "axpy", [&]<typename T>() {
    T a = T(alpha);
    map2<T, T>(out, out, x, [a](T o, T v) { return o + a * v; });
  });
}

// ---- random: element i of the fill is a function of (seed, offset, i) alone. Each
// Philox block (10 rounds) is generated once for the 4 uniforms or 2 normals it feeds:
// per element it cost 4x (2x) that, 5.5 ns per uniform at 2 threads.
void CpuBackend::fill_uniform(const Tensor& out, double low, double high, uint64_t seed, uint64_t offset) {
  dispatch_float(out.dtype(), "uniform_", [&]<typename T>() {
    T* p = out.data<T>();
    int64_t n = out.numel();
    if (!out.is_contiguous()) throw Error("uniform_: expected a contiguous tensor");
    T scale = T(high - low), lo = T(low);
    for_uniform_words(seed, offset, n, kParallelGrain, [&](int64_t i0, int64_t m, const uint32_t* w) {
#pragma omp simd
      for (int64_t k = 0; k < m; ++k) p[i0 + k] = lo + scale * T(philox::to_unit(w[k]));
    });
  });
}

void CpuBackend::fill_normal(const Tensor& out, double mean, double std, uint64_t seed, uint64_t offset) {
  dispatch_float(out.dtype(), "normal_", [&]<typename T>() {
    T* p = out.data<T>();
    int64_t n = out.numel();
    if (!out.is_contiguous()) throw Error("normal_: expected a contiguous tensor");
    T m = T(mean), s = T(std);
    int64_t blocks = int64_t(philox::normal_blocks(uint64_t(n)));
#pragma omp parallel for schedule(static) if (n >= kParallelGrain)
    for (int64_t b = 0; b < blocks; ++b) {
      auto [even, odd] = philox::normal_pair(seed, offset + uint64_t(b));
      p[2 * b] = m + s * T(even);
      if (2 * b + 1 < n) p[2 * b + 1] = m + s * T(odd);
    }
  });
}

// (registered through cpu/low_precision.cpp, the layer that gives it f16/bf16 tensors)

}  // namespace reel::cpu
