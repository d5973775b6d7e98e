// Dropout's forward in one pass (Backend::dropout_forward): logical element i keeps when
// its uniform (w >> 8) 2^-24, w word i % 4 of Philox block offset + i / 4, is >= p, i.e.
// when w >> 8 >= ceil(p 2^24), the test ge_scalar makes; its mask element is then
// float(1 / (1 - p)), else 0, and y = x m rounded once. Those are the composed form's
// bits (tensor/backend.cpp: uniforms, a layout copy, the compare, a cast, the scale, the
// product: six passes over memory). Without a mask (Backend::dropout_apply) the same pass
// writes y alone: the forward then keeps no mask, and its backward runs the pass again
// on g. Compute-bound on Philox (16 blocks per AVX-512 step, cpu/philox_words.cpp) where
// the operands are in cache, memory-bound where they are not (a GPT step: 20 bytes an
// element with the mask and read-for-ownership, 12 without).
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

// contiguous x, y, mask: element i at memory i; kMask: the mask written too
// The rule in registers and the pointers restrict: with the scale read from the closure GCC
// made the select a masked load it has no AVX2 form for, and left the loop scalar, a
// branch an element: 1.8 ns an element, 8% of a GPT step on the CPU.
template <bool kMask, typename T>
void plain_pass(T* y, float* mask, const T* x, int64_t n, Rule r, uint64_t seed, uint64_t offset) {
  const uint32_t threshold = r.threshold;
  const float scale = r.scale;
  for_uniform_words(seed, offset, n, kParallelGrain, [=](int64_t i0, int64_t m, const uint32_t* w) {
    float* __restrict mk = kMask ? mask + i0 : nullptr;
    T* __restrict yo = y + i0;
    const T* __restrict xi = x + i0;
    const uint32_t th = threshold;  // registers: a select from the closure became a masked load
    const float keep = scale;
#pragma omp simd
    for (int64_t k = 0; k < m; ++k) {
      const float f = (w[k] >> 8) >= th ? keep : 0.0f;
      if constexpr (kMask) mk[k] = f;
      store(yo, k, load(xi, k) * f);
    }
  });
}

// channels-last [N, C, H, W] (memory n, h, w, c): per image a group of channels' words
// (logical order, HW per channel) made at once, then written pixel by pixel
template <bool kMask, typename T>
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
          if constexpr (kMask) mask[at + c] = f;
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
  const bool has_mask = mask.defined();
  if ((has_mask && mask.dtype() != DType::f32) || (dt != DType::f32 && dt != DType::bf16) || y.dtype() != dt ||
      y.shape() != x.shape() || (has_mask && mask.shape() != x.shape()))
    return false;
  const bool plain = x.is_contiguous() && y.is_contiguous() && (!has_mask || mask.is_contiguous());
  auto cl = [](const Tensor& t) { return is_channels_last(t.shape(), t.strides()); };
  if (!plain && !(cl(x) && cl(y) && (!has_mask || cl(mask)))) return false;
  if (x.numel() == 0) return true;
  const Rule r{uint32_t(std::min(std::ceil(p * 16777216.0), 16777216.0)), float(1.0 / (1.0 - p))};
  auto run = [&](auto* yp, const auto* xp) {
    float* m = has_mask ? static_cast<float*>(mask.data_ptr()) : nullptr;
    const int64_t n = x.numel();
    if (plain) return has_mask ? plain_pass<true>(yp, m, xp, n, r, seed, offset)
                               : plain_pass<false>(yp, m, xp, n, r, seed, offset);
    const int64_t N = x.size(0), C = x.size(1), HW = x.size(2) * x.size(3);
    if (has_mask) channels_last_pass<true>(yp, m, xp, N, C, HW, r, seed, offset);
    else channels_last_pass<false>(yp, m, xp, N, C, HW, r, seed, offset);
  };
  if (dt == DType::f32) run(static_cast<float*>(y.data_ptr()), static_cast<const float*>(x.data_ptr()));
  else run(static_cast<uint16_t*>(y.data_ptr()), static_cast<const uint16_t*>(x.data_ptr()));
  return true;
}

void CpuBackend::dropout_forward(const Tensor& y, const Tensor& mask, const Tensor& x, double p, uint64_t seed,
                                 uint64_t offset) {
  if (!dropout_one_pass(y, mask, x, p, seed, offset)) Backend::dropout_forward(y, mask, x, p, seed, offset);
}

bool CpuBackend::dropout_apply(const Tensor& y, const Tensor& x, double p, uint64_t seed, uint64_t offset) {
  return p < 1.0 && dropout_one_pass(y, Tensor(), x, p, seed, offset);
}

}  // namespace reel::cpu
