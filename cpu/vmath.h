// Vectorisable math for the CPU loops: functions written so that `omp simd` loops
// calling them compile to AVX2 code (libm's expf is a call GCC will not vectorise
// under -fmath-errno). Internal to cpu/.
#pragma once
#include <bit>
#include <cmath>
#include <cstdint>
#include <type_traits>

namespace reel::cpu {

// e^x for f32 (Cephes expf: x = n ln2 + r, e^r by a degree-6 polynomial, 2^n built in
// the exponent bits); about 1 ulp for x <= 88. Clamps and special cases are integer
// masks on the bit patterns: a float select would stop GCC's if-conversion
// (-ftrapping-math). Below -87 (and -inf) gives 0; NaN stays NaN.
inline float exp_f32(float x0) {
  uint32_t b0 = std::bit_cast<uint32_t>(x0);
  int32_t i = int32_t(b0);
  i = i < 0x42B00000 ? i : 0x42B00000;  // positive x: at most 88 (signed order of the bits)
  uint32_t u = uint32_t(i);
  u = u < 0xC2AE0000u ? u : 0xC2AE0000u;  // negative x: at least -87 (unsigned order of the bits)
  float x = std::bit_cast<float>(u);
  float n = (x * 1.44269504088896341f + 12582912.0f) - 12582912.0f;  // round to nearest: 1.5 * 2^23
  float r = x - n * 0.693359375f + n * 2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  float e = (p * r * r + r + 1.0f) * std::bit_cast<float>((int32_t(n) + 127) << 23);
  uint32_t below = 0u - uint32_t(b0 > 0xC2AE0000u), nan = 0u - uint32_t((b0 & 0x7fffffffu) > 0x7f800000u);
  return std::bit_cast<float>((std::bit_cast<uint32_t>(e) & ~(below | nan)) | (b0 & nan));
}

// ln(1 + x) + e ln 2 for x = m - 1, m in [sqrt(1/2), sqrt(2)): Cephes logf's degree-9
// polynomial, the core of log_f32 and log_any_f32.
inline float log_poly_f32(float x, float e) {
  float z = x * x;
  float y = 7.0376836292e-2f;
  y = y * x - 1.1514610310e-1f;
  y = y * x + 1.1676998740e-1f;
  y = y * x - 1.2420140846e-1f;
  y = y * x + 1.4249322787e-1f;
  y = y * x - 1.6668057665e-1f;
  y = y * x + 2.0000714765e-1f;
  y = y * x - 2.4999993993e-1f;
  y = y * x + 3.3333331174e-1f;
  y = y * x * z;
  y += e * -2.12194440e-4f;
  y += -0.5f * z;
  return x + y + e * 0.693359375f;
}

// ln x for f32 (Cephes logf: x = m 2^e with m in [sqrt(1/2), sqrt(2)), ln m by a
// degree-9 polynomial in m - 1); about 1 ulp for normal x > 0. +inf and NaN come back
// as they are; 0, negatives and subnormals are outside its domain (callers: sums >= 1).
inline float log_f32(float x0) {
  uint32_t b0 = std::bit_cast<uint32_t>(x0);
  float e = float(int32_t(b0 >> 23) - 126);
  float m = std::bit_cast<float>((b0 & 0x007fffffu) | 0x3f000000u);  // in [0.5, 1)
  uint32_t small = 0u - uint32_t(std::bit_cast<uint32_t>(m) < 0x3f3504f3u);  // m < sqrt(1/2): use 2m, e - 1
  e -= float(small & 1u);
  float x = m - 1.0f + std::bit_cast<float>(std::bit_cast<uint32_t>(m) & small);
  float r = log_poly_f32(x, e);
  uint32_t special = 0u - uint32_t((b0 & 0x7fffffffu) >= 0x7f800000u);
  return std::bit_cast<float>((std::bit_cast<uint32_t>(r) & ~special) | (b0 & special));
}

// ---- the activations' f32 math (cpu/vmath_kernels.cpp runs them over arrays, AVX2 and
// AVX-512). Written as scalar functions whose branches are integer masks on bit patterns,
// so that `omp simd` loops calling them become straight-line vector code; each computes
// every branch and selects. Accuracy over dense sweeps against f64 (test/test_vmath.cpp):
// a few ulp; results below the smallest normal float may be flushed to 0.

inline uint32_t f32_bits(float x) { return std::bit_cast<uint32_t>(x); }
inline float f32_from(uint32_t b) { return std::bit_cast<float>(b); }
inline uint32_t f32_mask(bool c) { return 0u - uint32_t(c); }  // all ones when c
inline float f32_select(uint32_t mask, float a, float b) { return f32_from((f32_bits(a) & mask) | (f32_bits(b) & ~mask)); }
inline float f32_abs(float x) { return f32_from(f32_bits(x) & 0x7fffffffu); }
// |x| carrying s's sign bit
inline float f32_with_sign(float x, float s) { return f32_from(f32_bits(x) | (f32_bits(s) & 0x80000000u)); }

// e^x for every f32 x: exp_f32's polynomial, with 2^n applied as two factors so that
// results overflow to inf above 88.72 and underflow gradually (subnormals) below -87.3
inline float exp_any_f32(float x0) {
  uint32_t b0 = f32_bits(x0);
  int32_t i = int32_t(b0);
  i = i < 0x42B20000 ? i : 0x42B20000;  // positive x: at most 89
  uint32_t u = uint32_t(i);
  u = u < 0xC2D00000u ? u : 0xC2D00000u;  // negative x: at least -104
  float x = f32_from(u);
  float n = (x * 1.44269504088896341f + 12582912.0f) - 12582912.0f;
  float r = x - n * 0.693359375f + n * 2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  int32_t k = int32_t(n), k1 = k >> 1, k2 = k - k1;
  float e = (p * r * r + r + 1.0f) * f32_from(uint32_t(k1 + 127) << 23) * f32_from(uint32_t(k2 + 127) << 23);
  uint32_t nan = f32_mask((b0 & 0x7fffffffu) > 0x7f800000u);
  return f32_select(nan, x0, e);
}

// ln x for every f32 x: log_f32 plus subnormals (scaled by 2^23 first), 0 -> -inf, x < 0 -> NaN
inline float log_any_f32(float x0) {
  uint32_t b0 = f32_bits(x0);
  uint32_t sub = f32_mask(b0 < 0x00800000u);  // +0 and positive subnormals
  uint32_t b = f32_bits(f32_select(sub, x0 * 8388608.0f, x0));
  float e = float(int32_t(b >> 23) - 126) - f32_from(sub & f32_bits(23.0f));
  float m = f32_from((b & 0x007fffffu) | 0x3f000000u);  // in [0.5, 1)
  uint32_t small = f32_mask(f32_bits(m) < 0x3f3504f3u);
  e -= f32_from(small & f32_bits(1.0f));
  float x = m - 1.0f + f32_from(f32_bits(m) & small);
  float r = log_poly_f32(x, e);
  uint32_t zero = f32_mask((b0 & 0x7fffffffu) == 0), neg = f32_mask(b0 > 0x80000000u);
  uint32_t special = f32_mask((b0 & 0x7fffffffu) >= 0x7f800000u);  // inf, NaN: as they are
  r = f32_select(special, x0, r);
  r = f32_select(zero, -__builtin_inff(), r);
  return f32_select(neg, __builtin_nanf(""), r);
}

// ln(1 + e) for e in [0, 1]: log of the rounded sum, corrected by e / (u - 1) (exact
// for u = 1 + e rounded; Goldberg's trick keeps the relative accuracy for tiny e)
inline float log1p_unit_f32(float e) {
  float u = 1.0f + e;
  float d = u - 1.0f;
  float r = log_f32(u) * (e / d);
  return f32_select(f32_mask(f32_bits(d) == 0), e, r);
}

// tanh: x + x^3 P(x^2) below 0.625 (Cephes tanhf), 1 - 2 / (e^2|x| + 1) above, sign restored
inline float tanh_f32(float x) {
  float a = f32_abs(x);
  float z = x * x;
  float p = -5.70498872745e-3f;
  p = p * z + 2.06390887954e-2f;
  p = p * z - 5.37397155531e-2f;
  p = p * z + 1.33314422036e-1f;
  p = p * z - 3.33332819422e-1f;
  float small = x + x * z * p;
  float large = f32_with_sign(1.0f - 2.0f / (exp_f32(2.0f * a) + 1.0f), x);
  return f32_select(f32_mask(f32_bits(a) < 0x3f200000u), small, large);  // 0.625
}

// 1 / (1 + e^-x) as s = 1 / (1 + e^-|x|) for x >= 0 and e^-|x| s below: no overflow,
// no cancellation. `below` receives 1 - sigmoid(x) with the same accuracy.
inline float sigmoid_f32(float x, float* below = nullptr) {
  float e = exp_any_f32(-f32_abs(x));
  float s = 1.0f / (1.0f + e);
  float es = e * s;
  uint32_t neg = f32_mask(f32_bits(x) >> 31);
  if (below) *below = f32_select(neg, s, es);
  return f32_select(neg, es, s);
}

// e^-(x^2 scale) with x^2 split exactly into hi + lo (an FMA): the rounding of x^2
// alone would cost x^2 ulp of the result (50 ulp at x = 7)
inline float exp_neg_square_f32(float x0, float scale) {
  uint32_t b = f32_bits(x0) & 0x7fffffffu;  // |x|, capped at 20 (e^-200 is 0 already) unless NaN: no inf - inf below
  float x = f32_select(f32_mask((b > 0x41a00000u) & (b <= 0x7f800000u)), f32_from(0x41a00000u), f32_from(b));
  float hi = x * x;
  float lo = std::fma(x, x, -hi);
  float e = exp_any_f32(-scale * hi);
  return e - e * (scale * lo);
}

// erf(a) / a = P(a^2) on [0, 0.9] (fitted by test/reference/fit_erf.py), relative error 1.4e-7
inline float erf_small_f32(float a) {
  float t = a * a;
  float p = 8.513059583e-05f;
  p = p * t - 8.175628609e-04f;
  p = p * t + 5.203858018e-03f;
  p = p * t - 2.686050721e-02f;
  p = p * t + 1.128371507e-01f;
  p = p * t - 3.761263490e-01f;
  p = p * t + 1.128379226e+00f;
  return a * p;
}

// erfc(a) e^(a^2) a = Q(1/a) for a >= 0.9 (1/a in [1/12, 1/0.9], centred at 0.5972;
// fitted by test/reference/fit_erf.py), relative error 1.2e-7; times e^-a^2 / a.
// `e` is e^-(a^2) (callers often have it).
inline float erfc_large_f32(float a, float e) {
  float u = 1.0f / a;
  float s = u - 5.972222090e-01f;
  float q = 7.042226940e-02f;
  q = q * s - 1.940029487e-02f;
  q = q * s - 8.340626210e-02f;
  q = q * s + 7.744798064e-02f;
  q = q * s - 3.167784959e-02f;
  q = q * s - 7.101417985e-03f;
  q = q * s + 5.050214380e-02f;
  q = q * s - 8.484362066e-02f;
  q = q * s + 8.117068559e-02f;
  q = q * s - 7.679210510e-03f;
  q = q * s - 1.713400930e-01f;
  q = q * s + 4.942884743e-01f;
  return e * q * u;
}

inline bool erf_is_small(float a) { return f32_bits(a) < 0x3f666666u; }  // a < 0.9

inline float erf_f32(float x) {
  float a = f32_abs(x);
  float r = f32_select(f32_mask(erf_is_small(a)), erf_small_f32(a), 1.0f - erfc_large_f32(a, exp_neg_square_f32(a, 1.0f)));
  return f32_with_sign(r, x);
}

// 2 Phi(x) = 1 + erf(x / sqrt 2), through erfc for x < 0 (no cancellation in the left
// tail); `pdf` receives e^(-x^2 / 2), which the gradient wants too.
inline float two_phi_f32(float x, float* pdf) {
  float a = f32_abs(x) * 0.70710678118654752f;
  float e = exp_neg_square_f32(x, 0.5f);
  *pdf = e;
  uint32_t small = f32_mask(erf_is_small(a)), neg = f32_mask(f32_bits(x) >> 31);
  float erf_a = erf_small_f32(a), erfc_a = erfc_large_f32(a, e);
  float pos = f32_select(small, 1.0f + erf_a, 2.0f - erfc_a);
  float negv = f32_select(small, 1.0f - erf_a, erfc_a);
  return f32_select(neg, negv, pos);
}

// gelu(x) = x Phi(x) (PyTorch's default, approximate='none')
inline float gelu_f32(float x) {
  float pdf;
  return 0.5f * x * two_phi_f32(x, &pdf);
}
// gelu'(x) = Phi(x) + x phi(x)
inline float gelu_grad_f32(float x) {
  float pdf;
  float p2 = two_phi_f32(x, &pdf);
  return 0.5f * p2 + x * pdf * 0.39894228040143268f;
}

// gelu with approximate='tanh': x (1 + tanh u) / 2 = x sigmoid(2u), u = sqrt(2/pi) (x + 0.044715 x^3).
// 2u is formed in f64 and split into f32 hi + lo: rounded in f32 it would carry |2u| 2^-23
// absolute error into e^-|2u| (30 ulp at x = -5); the lo part enters to first order,
// sigmoid(hi + lo) = s + s (1 - s) lo.
inline float gelu_tanh_u2_f32(float x, float* lo) {
  uint32_t b = f32_bits(x) & 0x7fffffffu;  // |x| capped at 100 (sigmoid is saturated), NaN kept: 2u fits f32
  double xd = double(f32_with_sign(f32_select(f32_mask((b > 0x42c80000u) & (b <= 0x7f800000u)), 100.0f, f32_from(b)), x));
  double u = 1.5957691216057308 * xd * (1.0 + 0.044715 * xd * xd);
  float hi = float(u);
  *lo = float(u - double(hi));
  return hi;
}
inline float gelu_tanh_f32(float x) {
  float lo, rest;
  float s = sigmoid_f32(gelu_tanh_u2_f32(x, &lo), &rest);
  return x * (s + s * rest * lo);
}
// its derivative: s + 2 x s (1 - s) u', s = sigmoid(2u)
inline float gelu_tanh_grad_f32(float x) {
  float lo, rest;
  float s = sigmoid_f32(gelu_tanh_u2_f32(x, &lo), &rest);
  float d = s * rest * lo;
  s += d;
  rest -= d;
  float du2 = 1.5957691216057308f * (1.0f + 3.0f * 0.044715f * x * x);  // 2u'
  return s + x * s * rest * du2;
}

inline float silu_f32(float x) { return x * sigmoid_f32(x); }
// silu'(x) = s (1 + x (1 - s))
inline float silu_grad_f32(float x) {
  float rest;
  float s = sigmoid_f32(x, &rest);
  return s + x * s * rest;
}

// softplus(x) = ln(1 + e^(beta x)) / beta, x itself where beta x > threshold (PyTorch's
// rule), as max(z, 0) + ln(1 + e^-|z|) with z = beta x: no overflow, no cancellation
inline float softplus_f32(float x, float beta, float threshold) {
  float z = beta * x;
  float r = (f32_from(f32_bits(z) & ~f32_mask(f32_bits(z) >> 31)) + log1p_unit_f32(exp_any_f32(-f32_abs(z)))) / beta;
  return f32_select(f32_mask(z > threshold), x, r);
}
// softplus'(x) = sigmoid(beta x), 1 where beta x > threshold
inline float softplus_grad_f32(float x, float beta, float threshold) {
  float z = beta * x;
  return f32_select(f32_mask(z > threshold), 1.0f, sigmoid_f32(z));
}

// x, or 0 when x is subnormal: results that feed a GEMM must not carry subnormals, which
// cost a ~100-cycle microcode assist per operand on x86 (see cpu/loss.cpp's backward)
inline float flush_subnormal(float x) {
  uint32_t b = std::bit_cast<uint32_t>(x);
  uint32_t keep = 0u - uint32_t((b & 0x7fffffffu) >= 0x00800000u);
  return std::bit_cast<float>(b & keep);
}

// e^x: the vectorisable polynomial for f32, libm for f64 (gradient checks want its accuracy)
template <typename T>
inline T vexp(T x) {
  if constexpr (std::is_same_v<T, float>) return exp_f32(x);
  else return std::exp(x);
}

// ln x: the vectorisable polynomial for f32 (normal x > 0, inf, NaN), libm for f64
template <typename T>
inline T vlog(T x) {
  if constexpr (std::is_same_v<T, float>) return log_f32(x);
  else return std::log(x);
}

}  // namespace reel::cpu
