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
  float r = x + y + e * 0.693359375f;
  uint32_t special = 0u - uint32_t((b0 & 0x7fffffffu) >= 0x7f800000u);
  return std::bit_cast<float>((std::bit_cast<uint32_t>(r) & ~special) | (b0 & special));
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
