// Dropout's forward in one pass (Backend::dropout_forward): logical element i keeps when
// its uniform (w >> 8) 2^-24, w word i % 4 of Philox block offset + i / 4, is >= p, i.e.
// when w >> 8 >= ceil(p 2^24), the test ge_scalar makes; its mask element is then
// float(1 / (1 - p)), else 0, and y = x m rounded once. Those are the composed form's
// bits (tensor/backend.cpp: uniforms, a layout copy, the compare, a cast, the scale, the
// product: six passes over memory). Compute-bound on Philox (16 blocks per AVX-512 step,
// cpu/philox_words.cpp); the mask and y written once.
#include <algorithm>
#include <cmath>
#include <vector>

#include "../tensor/philox.h"
#include "convert.h"
#include "cpu_backend.h"
#include "loops.h"
#include "philox_words.h"

namespace reel::cpu {
namespace {

struct Rule {
  uint32_t threshold;  // keep when w >> 8 >= threshold
  float scale;
};

inline float load(const float* x, int64_t i) { return x[i]; }
inline float load(const uint16_t* x, int64_t i) { return bf16_to_f32(x[i]); }
inline void store(float* y, int64_t i, float v) { y[i] = v; }
inline void store(uint16_t* y, int64_t i, float v) { y[i] = f32_to_bf16(v); }

// contiguous x, y, mask: element i at memory i
// The rule in registers and the pointers restrict: with the scale read from the closure GCC
// made the select a masked load it has no AVX2 form for, and left the loop scalar, a
// branch an element: 1.8 ns an element, 8% of a GPT step on the CPU.
template <typename T>
void plain_pass(T* y, float* mask, const T* x, int64_t n, Rule r, uint64_t seed, uint64_t offset) {
  const uint32_t threshold = r.threshold;
  const float scale = r.scale;
  for_uniform_words(seed, offset, n, kParallelGrain, [=](int64_t i0, int64_t m, const uint32_t* w) {
    float* __restrict mk = mask + i0;
    T* __restrict yo = y + i0;
    const T* __restrict xi = x + i0;
    const uint32_t th = threshold;  // registers: a select from the closure became a masked load
    const float keep = scale;
#pragma omp simd
    for (int64_t k = 0; k < m; ++k) {
      const float f = (w[k] >> 8) >= th ? keep : 0.0f;
      mk[k] = f;
      store(yo, k, load(xi, k) * f);
    }
  });
}

// channels-last [N, C, H, W] (memory n, h, w, c): per image a group of channels' words
// (logical order, HW per channel) made at once, then written pixel by pixel
template <typename T>
void channels_last_pass(T* y, float* mask, const T* x, int64_t N, int64_t C, int64_t HW, Rule r, uint64_t seed,
                        uint64_t offset) {
  const int64_t group = std::max<int64_t>(1, std::min<int64_t>(C, 16384 / std::max<int64_t>(HW, 1)));
  const int64_t groups = (C + group - 1) / group;
#pragma omp parallel if (N * C * HW >= kParallelGrain)
  {
    std::vector<uint32_t> words;
#pragma omp for schedule(static)
    for (int64_t unit = 0; unit < N * groups; ++unit) {
      const int64_t n = unit / groups, c0 = (unit % groups) * group, c1 = std::min(C, c0 + group);
      const int64_t first = (n * C + c0) * HW, skip = first % 4, nb = (skip + (c1 - c0) * HW + 3) / 4;
      words.resize(size_t(4 * nb));
      philox_words(seed, offset + uint64_t(first / 4), nb, words.data());
      const uint32_t* w = words.data() + skip;
      for (int64_t pix = 0; pix < HW; ++pix) {
        const int64_t at = (n * HW + pix) * C;
        for (int64_t c = c0; c < c1; ++c) {
          const float f = (w[(c - c0) * HW + pix] >> 8) >= r.threshold ? r.scale : 0.0f;
          mask[at + c] = f;
          store(y, at + c, load(x, at + c) * f);
        }
      }
    }
  }
}

}  // namespace

bool dropout_one_pass(const Tensor& y, const Tensor& mask, const Tensor& x, double p, uint64_t seed,
                      uint64_t offset) {
  const DType dt = x.dtype();
  if (mask.dtype() != DType::f32 || (dt != DType::f32 && dt != DType::bf16) || y.dtype() != dt) return false;
  const bool plain = x.is_contiguous() && y.is_contiguous() && mask.is_contiguous();
  auto cl = [](const Tensor& t) { return is_channels_last(t.shape(), t.strides()); };
  if (!plain && !(cl(x) && cl(y) && cl(mask))) return false;
  const Rule r{uint32_t(std::min(std::ceil(p * 16777216.0), 16777216.0)), float(1.0 / (1.0 - p))};
  auto run = [&](auto* yp, const auto* xp) {
    float* m = static_cast<float*>(mask.data_ptr());
    if (plain) return plain_pass(yp, m, xp, x.numel(), r, seed, offset);
    channels_last_pass(yp, m, xp, x.size(0), x.size(1), x.size(2) * x.size(3), r, seed, offset);
  };
  if (dt == DType::f32) run(static_cast<float*>(y.data_ptr()), static_cast<const float*>(x.data_ptr()));
  else run(static_cast<uint16_t*>(y.data_ptr()), static_cast<const uint16_t*>(x.data_ptr()));
  return true;
}

void CpuBackend::dropout_forward(const Tensor& y, const Tensor& mask, const Tensor& x, double p, uint64_t seed,
                                 uint64_t offset) {
  if (!dropout_one_pass(y, mask, x, p, seed, offset)) Backend::dropout_forward(y, mask, x, p, seed, offset);
}

}  // namespace reel::cpu
