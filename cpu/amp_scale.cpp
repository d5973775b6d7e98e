// GradScaler's kernels on the CPU (optim/grad_scaler.h): unscaling every gradient of a
// step in one pass while looking for inf/NaN, and the scale's update after the step.
// Split from cpu/optim.cpp (the optimizer steps), compiled as it is (-ffp-contract=off).
#include <fmt/format.h>
#include <omp.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <type_traits>

#include "cpu_backend.h"
#include "loops.h"
#include "../tensor/parallel.h"

#if defined(__F16C__) || defined(__AVX2__)
#include <immintrin.h>
#endif

namespace reel::cpu {

// ---- GradScaler's unscale and scale update (optim/grad_scaler.h)
//
// amp_unscale: g *= inv_scale in place over every gradient of the step, and found_inf = 1
// when any element is inf or NaN; one pass that reads and writes each gradient once (reads
// only, when inv_scale is 1). The finiteness test is on the bits: |x| as an unsigned
// integer is at least the exponent mask exactly for inf and NaN, so a max-reduction of
// (bits & ~sign) over the loop vectorises (vpmaxud) beside the multiply, with no compare
// and branch per element. f16 and bf16 are converted to f32, multiplied and rounded back
// (PyTorch's opmath; F16C and AVX2 by hand), f64 multiplies in f64. Split across threads as
// optim_step is; no subnormal flushing (the GPU keeps them too).
// Floor: memory bandwidth, 8 bytes per f32 element (4 when inv_scale is 1).

namespace {

// f32 and f64: the largest |bits| (inf/NaN compare above the exponent mask), scaling as
// it goes. U is the unsigned integer of T's width.
template <bool kScale, typename T, typename U>
U unscale_float(T* __restrict p, int64_t n, T inv) {
  constexpr U kAbs = ~U(0) >> 1;
  U worst = 0;
#pragma omp simd reduction(max : worst)
  for (int64_t i = 0; i < n; ++i) {
    T v = p[i];
    U b = std::bit_cast<U>(v) & kAbs;
    worst = b > worst ? b : worst;
    if constexpr (kScale) p[i] = v * inv;
  }
  return worst;
}

// f16 (IEEE half: inf/NaN when the 5 exponent bits are all ones: |bits| >= 0x7c00).
template <bool kScale>
uint32_t unscale_f16(uint16_t* __restrict p, int64_t n, float inv) {
  uint32_t worst = 0;
  int64_t i = 0;
#ifdef __F16C__
  if constexpr (kScale) {
    const __m256 vinv = _mm256_set1_ps(inv);
    const __m128i mask = _mm_set1_epi16(0x7fff);
    __m128i vworst = _mm_setzero_si128();
    for (; i + 8 <= n; i += 8) {
      __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + i));
      vworst = _mm_max_epu16(vworst, _mm_and_si128(h, mask));
      __m256 f = _mm256_mul_ps(_mm256_cvtph_ps(h), vinv);
      _mm_storeu_si128(reinterpret_cast<__m128i*>(p + i), _mm256_cvtps_ph(f, _MM_FROUND_TO_NEAREST_INT));
    }
    alignas(16) uint16_t lanes[8];
    _mm_store_si128(reinterpret_cast<__m128i*>(lanes), vworst);
    for (uint16_t l : lanes) worst = l > worst ? l : worst;
  }
#endif
#pragma omp simd reduction(max : worst)
  for (int64_t j = i; j < n; ++j) {
    uint32_t b = p[j] & 0x7fffu;
    worst = b > worst ? b : worst;
  }
  if constexpr (kScale)
    for (; i < n; ++i) {
      Half h;
      h.bits = p[i];
      p[i] = Half(float(h) * inv).bits;
    }
  return worst;
}

// bf16 (inf/NaN when |bits| >= 0x7f80): widened to f32 by a shift, multiplied, rounded to
// nearest even as BFloat16(float) does (tensor/dtype.h), a NaN kept a NaN. AVX2 by hand: GCC
// does not vectorise the scalar loop (the 16-bit loads and stores around 32-bit math); the
// scalar loop is the tail and the reference.
template <bool kScale>
uint32_t unscale_bf16(uint16_t* __restrict p, int64_t n, float inv) {
  uint32_t worst = 0;
  int64_t i = 0;
#ifdef __AVX2__
  if constexpr (kScale) {
    const __m256 vinv = _mm256_set1_ps(inv);
    const __m256i one = _mm256_set1_epi32(1), bias = _mm256_set1_epi32(0x7fff), nan_in = _mm256_set1_epi32(0x7f80),
                  nan_out = _mm256_set1_epi32(0x7fc0);
    const __m128i mask = _mm_set1_epi16(0x7fff);
    __m128i vworst = _mm_setzero_si128();
    for (; i + 8 <= n; i += 8) {
      __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + i));
      __m128i a = _mm_and_si128(h, mask);
      vworst = _mm_max_epu16(vworst, a);
      __m256 f = _mm256_mul_ps(_mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16)), vinv);
      __m256i u = _mm256_castps_si256(f);
      __m256i r = _mm256_srli_epi32(_mm256_add_epi32(u, _mm256_add_epi32(bias, _mm256_and_si256(_mm256_srli_epi32(u, 16), one))), 16);
      r = _mm256_blendv_epi8(r, nan_out, _mm256_cmpgt_epi32(_mm256_cvtepu16_epi32(a), nan_in));
      __m256i packed = _mm256_permute4x64_epi64(_mm256_packus_epi32(r, r), 0x08);  // lanes 0 and 2: r0..r7
      _mm_storeu_si128(reinterpret_cast<__m128i*>(p + i), _mm256_castsi256_si128(packed));
    }
    alignas(16) uint16_t lanes[8];
    _mm_store_si128(reinterpret_cast<__m128i*>(lanes), vworst);
    for (uint16_t l : lanes) worst = l > worst ? l : worst;
  }
#endif
  if constexpr (!kScale) {
#pragma omp simd reduction(max : worst)
    for (int64_t j = 0; j < n; ++j) {
      uint32_t a = p[j] & 0x7fffu;
      worst = a > worst ? a : worst;
    }
    return worst;
  }
  for (; i < n; ++i) {
    uint32_t b = p[i];
    uint32_t a = b & 0x7fffu;
    worst = a > worst ? a : worst;
    float f = std::bit_cast<float>(b << 16) * inv;
    uint32_t u = std::bit_cast<uint32_t>(f);
    u += 0x7fffu + ((u >> 16) & 1u);
    // NaN stays NaN (the rounding add could carry a NaN's payload into the sign)
    p[i] = a > 0x7f80u ? uint16_t(0x7fc0u) : uint16_t(u >> 16);
  }
  return worst;
}

// Whether elements [lo, hi) of gradient g held a non-finite value (scaling them when asked).
bool unscale_range(const Tensor& g, int64_t lo, int64_t hi, float inv) {
  const bool scale = inv != 1.0f;
  int64_t n = hi - lo;
  switch (g.dtype()) {
    case DType::f32: {
      float* p = static_cast<float*>(g.data_ptr()) + lo;
      uint32_t worst = scale ? unscale_float<true, float, uint32_t>(p, n, inv)
                             : unscale_float<false, float, uint32_t>(p, n, inv);
      return worst >= 0x7f800000u;
    }
    case DType::f64: {
      double* p = static_cast<double*>(g.data_ptr()) + lo;
      uint64_t worst = scale ? unscale_float<true, double, uint64_t>(p, n, double(inv))
                             : unscale_float<false, double, uint64_t>(p, n, double(inv));
      return worst >= 0x7ff0000000000000ull;
    }
    case DType::f16: {
      uint16_t* p = static_cast<uint16_t*>(g.data_ptr()) + lo;
      return (scale ? unscale_f16<true>(p, n, inv) : unscale_f16<false>(p, n, inv)) >= 0x7c00u;
    }
    default: {  // bf16 (checked by the caller)
      uint16_t* p = static_cast<uint16_t*>(g.data_ptr()) + lo;
      return (scale ? unscale_bf16<true>(p, n, inv) : unscale_bf16<false>(p, n, inv)) >= 0x7f80u;
    }
  }
}

void check_amp_scalar(const char* op, const char* what, const Tensor& t, DType dtype) {
  if (!t.defined() || t.numel() != 1 || t.dtype() != dtype || !t.device().is_cpu())
    throw Error(fmt::format("{}: {} must be a one-element {} tensor on cpu, got {}", op, what, dtype_name(dtype),
                            t.defined() ? fmt::format("{} {} on {}", t.shape().str(), dtype_name(t.dtype()),
                                                      t.device().str())
                                        : std::string("an undefined tensor")));
}

}  // namespace

void CpuBackend::amp_unscale(const std::vector<Tensor>& grads, const Tensor& found_inf, const Tensor& inv_scale) {
  check_amp_scalar("amp_unscale", "found_inf", found_inf, DType::f32);
  check_amp_scalar("amp_unscale", "inv_scale", inv_scale, DType::f32);
  size_t n = grads.size();
  std::vector<int64_t> starts(n + 1, 0);  // gradient i holds elements [starts[i], starts[i + 1]) of the pass
  for (size_t i = 0; i < n; ++i) {
    const Tensor& g = grads[i];
    if (!g.defined()) throw Error(fmt::format("amp_unscale: gradient {} is undefined", i));
    DType dt = g.dtype();
    if (dt != DType::f32 && dt != DType::f64 && dt != DType::f16 && dt != DType::bf16)
      throw Error(fmt::format("amp_unscale: gradient {} is {}, expected f32, f64, f16 or bf16", i, dtype_name(dt)));
    if (!g.device().is_cpu() || !g.is_contiguous())
      throw Error(fmt::format("amp_unscale: gradient {} is {} on {}, expected a contiguous cpu tensor", i,
                              g.shape().str(), g.device().str()));
    starts[i + 1] = starts[i] + g.numel();
  }
  const float inv = *static_cast<const float*>(inv_scale.data_ptr());
  const int64_t total = starts[n];
  auto range = [&](int64_t begin, int64_t end) {
    bool bad = false;
    size_t i = size_t(std::upper_bound(starts.begin(), starts.end(), begin) - starts.begin()) - 1;
    for (; begin < end && i < n; ++i) {
      int64_t lo = begin - starts[i], hi = std::min(end, starts[i + 1]) - starts[i];
      if (hi <= lo) continue;
      bad |= unscale_range(grads[i], lo, hi, inv);
      begin = starts[i + 1];
    }
    return bad;
  };
  bool bad = false;
  if (total >= kParallelGrain) {
#pragma omp parallel reduction(|| : bad)
    {
      int64_t t = omp_get_thread_num(), nt = omp_get_num_threads();
      auto cut = [&](int64_t k) { return k == nt ? total : total * k / nt / 32 * 32; };
      bad = range(cut(t), cut(t + 1));
    }
  } else {
    bad = range(0, total);
  }
  if (bad) *static_cast<float*>(found_inf.data_ptr()) = 1.0f;
}

void CpuBackend::amp_update_scale(const Tensor& scale, const Tensor& growth_tracker, const Tensor& found_inf,
                                  double growth_factor, double backoff_factor, int64_t growth_interval) {
  check_amp_scalar("amp_update_scale", "scale", scale, DType::f32);
  check_amp_scalar("amp_update_scale", "growth_tracker", growth_tracker, DType::i32);
  check_amp_scalar("amp_update_scale", "found_inf", found_inf, DType::f32);
  float& s = *static_cast<float*>(scale.data_ptr());
  int32_t& tracker = *static_cast<int32_t*>(growth_tracker.data_ptr());
  if (*static_cast<const float*>(found_inf.data_ptr()) != 0) {
    s = float(double(s) * backoff_factor);
    tracker = 0;
  } else if (int64_t successful = int64_t(tracker) + 1; successful == growth_interval) {
    float grown = float(double(s) * growth_factor);
    if (std::isfinite(grown)) s = grown;  // never grown past f32's range to inf
    tracker = 0;
  } else {
    tracker = int32_t(successful);
  }
}

}  // namespace reel::cpu
