// Conversions between f32 and f16/bf16, and bf16 elementwise kernels: memory-bound
// (2 + 4 bytes per converted element, 6 per bf16 binary op); written so the compiler
// vectorises them (integer rounding for bf16, F16C for f16) and split across threads.
#include "convert.h"

#include <immintrin.h>

#include <cstring>

#include "loops.h"
#include "stream_store.h"

namespace reel::cpu {
namespace {

void to_bf16(uint16_t* o, const float* x, int64_t n) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) o[i] = f32_to_bf16(x[i]);
}
// to_bf16 for an output too large to stay cached (autocast's copies of big weights):
// 16 results at a time through a register-sized buffer, streamed out without the
// read-for-ownership (W8's 25.6M-element weight: 5.05 -> 4.1 ms on 2 cores)
void stream_to_bf16_unfenced(uint16_t* o, const float* x, int64_t n) {
#if defined(__AVX__)
  int64_t i = 0;
  for (; i < n && (reinterpret_cast<uintptr_t>(o + i) & 31u); ++i) o[i] = f32_to_bf16(x[i]);
  for (; i + 16 <= n; i += 16) {
    alignas(32) uint16_t buf[16];
#pragma omp simd
    for (int64_t j = 0; j < 16; ++j) buf[j] = f32_to_bf16(x[i + j]);
    _mm256_stream_si256(reinterpret_cast<__m256i*>(o + i), _mm256_load_si256(reinterpret_cast<const __m256i*>(buf)));
  }
  for (; i < n; ++i) o[i] = f32_to_bf16(x[i]);
#else
  to_bf16(o, x, n);
#endif
}
void stream_to_bf16(uint16_t* o, const float* x, int64_t n) {
  stream_to_bf16_unfenced(o, x, n);
  _mm_sfence();  // weakly ordered: complete them before the result is published
}
void from_bf16(float* o, const uint16_t* x, int64_t n) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) o[i] = bf16_to_f32(x[i]);
}
// F16C rounds to nearest even and keeps subnormals, infinities and NaNs (x86-64-v3 has it)
void to_f16(uint16_t* o, const float* x, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm_storeu_si128(reinterpret_cast<__m128i*>(o + i), _mm256_cvtps_ph(_mm256_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT));
  for (; i < n; ++i) o[i] = Half(x[i]).bits;
}
void from_f16(float* o, const uint16_t* x, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(o + i, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(x + i))));
  for (; i < n; ++i) {
    Half h;
    h.bits = x[i];
    o[i] = float(h);
  }
}

// f(i0, i1) over [0, n) in chunks, across threads when large
template <typename F>
void chunks(int64_t n, F&& f) {
  constexpr int64_t kChunk = 16384;
  int64_t c = (n + kChunk - 1) / kChunk;
#pragma omp parallel for schedule(static) if (n >= kParallelGrain)
  for (int64_t k = 0; k < c; ++k) f(k * kChunk, std::min(n, (k + 1) * kChunk));
}

}  // namespace

bool contiguous_same(const Tensor& a, const Tensor& b) {
  if (a.shape() != b.shape()) return false;
  if (a.is_contiguous() && b.is_contiguous()) return true;
  for (int d = 0; d < a.dim(); ++d)
    if (a.shape()[d] != 1 && a.strides()[d] != b.strides()[d]) return false;
  return dense_strides(a.shape(), a.strides());
}

void round_span(DType to, uint16_t* o, const float* x, int64_t n, bool stream) {
  if (to == DType::bf16) (stream ? stream_to_bf16_unfenced : to_bf16)(o, x, n);
  else to_f16(o, x, n);
}

bool convert_contiguous(const Tensor& dst, const Tensor& src) {
  if (!contiguous_same(dst, src)) return false;
  DType d = dst.dtype(), s = src.dtype();
  int64_t n = dst.numel();
  auto* o = static_cast<char*>(dst.data_ptr());
  const auto* x = static_cast<const char*>(src.data_ptr());
  if (s == DType::f32 && d == DType::bf16) {
    auto* convert = n * 2 >= kStreamingStoreBytes ? stream_to_bf16 : to_bf16;
    chunks(n, [&](int64_t i, int64_t j) { convert(reinterpret_cast<uint16_t*>(o) + i, reinterpret_cast<const float*>(x) + i, j - i); });
  }
  else if (s == DType::bf16 && d == DType::f32)
    chunks(n, [&](int64_t i, int64_t j) { from_bf16(reinterpret_cast<float*>(o) + i, reinterpret_cast<const uint16_t*>(x) + i, j - i); });
  else if (s == DType::f32 && d == DType::f16)
    chunks(n, [&](int64_t i, int64_t j) { to_f16(reinterpret_cast<uint16_t*>(o) + i, reinterpret_cast<const float*>(x) + i, j - i); });
  else if (s == DType::f16 && d == DType::f32)
    chunks(n, [&](int64_t i, int64_t j) { from_f16(reinterpret_cast<float*>(o) + i, reinterpret_cast<const uint16_t*>(x) + i, j - i); });
  else
    return false;
  return true;
}

bool lowp_unary(UnaryOp op, const Tensor& out, const Tensor& x, double, double) {
  if (op != UnaryOp::relu || x.dtype() != DType::bf16 || out.dtype() != DType::bf16 || !contiguous_same(out, x))
    return false;
  auto* o = static_cast<uint16_t*>(out.data_ptr());
  const auto* v = static_cast<const uint16_t*>(x.data_ptr());
  // relu rounds nothing: negative numbers (sign bit, not NaN) become +0, the rest stay
  chunks(x.numel(), [&](int64_t i, int64_t j) {
#pragma omp simd
    for (int64_t k = i; k < j; ++k) {
      uint16_t b = v[k];
      o[k] = (b & 0x8000u) && (b & 0x7fffu) <= 0x7f80u ? uint16_t(0) : b;
    }
  });
  return true;
}

bool lowp_binary(BinaryOp op, const Tensor& out, const Tensor& a, const Tensor& b) {
  if (op == BinaryOp::mul && a.dtype() == DType::bf16 && b.dtype() == DType::f32 && out.dtype() == DType::bf16 &&
      contiguous_same(out, a) && contiguous_same(out, b)) {
    // bf16 x times an f32 factor (dropout's mask), the product rounded once: 8 bytes an
    // element against 24 through an f32 twin of x and of the product
    auto* o = static_cast<uint16_t*>(out.data_ptr());
    const auto* x = static_cast<const uint16_t*>(a.data_ptr());
    const auto* m = static_cast<const float*>(b.data_ptr());
    chunks(out.numel(), [&](int64_t i, int64_t j) {
#pragma omp simd
      for (int64_t k = i; k < j; ++k) o[k] = f32_to_bf16(bf16_to_f32(x[k]) * m[k]);
    });
    return true;
  }
  if (a.dtype() != DType::bf16 || b.dtype() != DType::bf16 || out.dtype() != DType::bf16 ||
      !contiguous_same(out, a) || !contiguous_same(out, b))
    return false;
  auto* o = static_cast<uint16_t*>(out.data_ptr());
  const auto* x = static_cast<const uint16_t*>(a.data_ptr());
  const auto* y = static_cast<const uint16_t*>(b.data_ptr());
  if (op == BinaryOp::relu_backward) {
    // bits only, as relu's forward: g where y > 0 or y is NaN, else +0; a NaN g becomes
    // the quiet NaN that rounding through f32 gives. Half the bytes of a 32-bit lane each.
    chunks(out.numel(), [&](int64_t i, int64_t j) {
#pragma omp simd
      for (int64_t k = i; k < j; ++k) {
        const uint16_t g = x[k], v = y[k];
        const bool keep = (v & 0x7fffu) > 0x7f80u || (!(v & 0x8000u) && v != 0);
        const uint16_t gq = (g & 0x7fffu) > 0x7f80u ? uint16_t(0x7fc0) : g;
        o[k] = keep ? gq : uint16_t(0);
      }
    });
    return true;
  }
  auto run = [&](auto f) {
    chunks(out.numel(), [&](int64_t i, int64_t j) {
#pragma omp simd
      for (int64_t k = i; k < j; ++k) o[k] = f32_to_bf16(f(bf16_to_f32(x[k]), bf16_to_f32(y[k])));
    });
    return true;
  };
  switch (op) {
    case BinaryOp::add: return run([](float p, float q) { return p + q; });
    case BinaryOp::sub: return run([](float p, float q) { return p - q; });
    case BinaryOp::mul: return run([](float p, float q) { return p * q; });
    case BinaryOp::add_relu:  // a residual sum and its relu: relu of the rounded sum, on the bits
      chunks(out.numel(), [&](int64_t i, int64_t j) {
#pragma omp simd
        for (int64_t k = i; k < j; ++k) {
          const uint16_t v = f32_to_bf16(bf16_to_f32(x[k]) + bf16_to_f32(y[k]));
          o[k] = (v & 0x8000u) && (v & 0x7fffu) <= 0x7f80u ? uint16_t(0) : v;
        }
      });
      return true;
    default: return false;
  }
}

}  // namespace reel::cpu
