// Batch norm (and batch norm + relu) of bf16 channels-last activations ([N, C, H, W] with
// NHWC memory: what bf16 convolutions write on AMX and AMD AVX512-BF16 CPUs, Backend::channels_last) with f32
// weight, bias and statistics: PyTorch's CPU mixed batch norm, which autocast uses for
// such activations (autograd/ops_norm.cpp). Computes in f32 and rounds each output once,
// so that the layout and half the bytes survive the norm where f32 twins would cost a
// conversion and a transpose each way. Memory-bound: training reads x twice (statistics,
// then output) and writes y once, evaluation reads once; the backward reads g and x (and
// y, relu's mask) twice and writes gx once. The channel loop is the contiguous, vectorised
// one; statistics sum blocks of pixels in f32, about the first pixel's value so that
// squares do not cancel, and the blocks in double.
#include <omp.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <span>
#include <vector>

#include "convert.h"
#include "loops.h"

namespace reel::cpu {
namespace {

constexpr int64_t kBlock = 64;  // pixels summed in f32 before the double sums take them

// The loops are compiled for AVX-512 (x86-64-v4): the channels-last form exists only on
// AMX and AMD AVX512-BF16 CPUs (Backend::channels_last), which have it, and the library's baseline
// (x86-64-v3) halves the lanes; at 8 lanes the backward ran at 16 GB/s, compute-bound.
// The entry points check the CPU before they run them. The lambdas handed to these
// templates are inlined into them and so compiled for AVX-512 too.
#if defined(__x86_64__)
#define REEL_V4 __attribute__((target("arch=x86-64-v4")))
bool cpu_has_v4() { return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw"); }
#else
#define REEL_V4
bool cpu_has_v4() { return true; }
#endif

bool bf16_channels_last(const Tensor& t) {
  return t.defined() && t.dtype() == DType::bf16 && is_channels_last(t.shape(), t.strides());
}
bool f32_or_none(const Tensor& t) { return !t.defined() || (t.dtype() == DType::f32 && t.dim() == 1); }

// Piece j of x = cat(xs, 1): its pixels' channels at p[pixel * C + c], channels [c0, c0 + C) of x
struct Piece {
  const uint16_t* p;
  int64_t C, c0;
};
std::vector<Piece> pieces_of(std::span<const Tensor> xs) {
  std::vector<Piece> r;
  int64_t c0 = 0;
  for (const Tensor& t : xs) {
    r.push_back({static_cast<const uint16_t*>(t.data_ptr()), t.size(1), c0});
    c0 += t.size(1);
  }
  return r;
}

// Element c of an optional f32 vector of any stride, or `fallback`.
std::vector<float> values(const Tensor& t, int64_t C, float fallback) {
  std::vector<float> v(static_cast<size_t>(C), fallback);
  if (!t.defined()) return v;
  const float* p = static_cast<const float*>(t.data_ptr());
  for (int64_t c = 0; c < C; ++c) v[size_t(c)] = p[c * t.strides()[0]];
  return v;
}

// relu's select on the bits (a float compare stops if-conversion under -ftrapping-math):
// g where y > 0 or y is NaN, else +0
inline float keep_where_positive(float g, float y) {
  const uint32_t b = std::bit_cast<uint32_t>(y);
  const uint32_t keep = uint32_t(0) - uint32_t(int32_t(b) > 0 || (b & 0x7fffffffu) > 0x7f800000u);
  return std::bit_cast<float>(std::bit_cast<uint32_t>(g) & keep);
}

// The pixels [0, P) split into one static range per thread of the pool (or one range).
template <typename F>
REEL_V4 void over_pixels(int64_t P, int64_t C, F f) {
  const int threads = P * C >= kParallelGrain ? omp_get_max_threads() : 1;
#pragma omp parallel num_threads(threads)
  {
    const int64_t t = omp_get_thread_num(), T = omp_get_num_threads();
    f(t, P * t / T, P * (t + 1) / T);
  }
}

// Per-channel sums over pixels [p0, p1), added into sa, sb (double, C each): row(q, piece,
// a, b) adds pixel q's terms of one piece's channels into a, b (f32, at the piece's first
// channel), which hold blocks of kBlock pixels
template <typename F>
REEL_V4 void channel_sums(const std::vector<Piece>& ps, int64_t C, int64_t p0, int64_t p1, double* sa, double* sb, F row) {
  std::vector<float> ba(static_cast<size_t>(C)), bb(static_cast<size_t>(C));
  for (int64_t q0 = p0; q0 < p1; q0 += kBlock) {
    std::fill(ba.begin(), ba.end(), 0.f);
    std::fill(bb.begin(), bb.end(), 0.f);
    // piece by piece, so that a block's rows of one piece are read in one stream
    for (const Piece& pc : ps)
      for (int64_t q = q0; q < std::min(q0 + kBlock, p1); ++q) row(q, pc, ba.data() + pc.c0, bb.data() + pc.c0);
    for (int64_t c = 0; c < C; ++c) sa[c] += double(ba[size_t(c)]), sb[c] += double(bb[size_t(c)]);
  }
}

// The per-thread sums of channel_sums, added in thread order (the same bits for a thread count)
template <typename F>
void reduce_channels(const std::vector<Piece>& ps, int64_t P, int64_t C, std::vector<double>& sa,
                     std::vector<double>& sb, F row) {
  const int T = P * C >= kParallelGrain ? omp_get_max_threads() : 1;
  std::vector<double> part(size_t(2 * C) * size_t(T), 0.0);
  std::vector<int> used(size_t(T), 0);
  over_pixels(P, C, [&](int64_t t, int64_t p0, int64_t p1) {
    double* a = part.data() + size_t(2 * C * t);
    channel_sums(ps, C, p0, p1, a, a + C, row);
    used[size_t(t)] = 1;
  });
  sa.assign(static_cast<size_t>(C), 0.0);
  sb.assign(static_cast<size_t>(C), 0.0);
  for (int t = 0; t < T; ++t) {
    if (!used[size_t(t)]) continue;
    const double* a = part.data() + size_t(2 * C * t);
    for (int64_t c = 0; c < C; ++c) sa[size_t(c)] += a[c], sb[size_t(c)] += a[C + c];
  }
}

// The backward's loops over one piece's channels at a pixel, the relu mask (Relu) and the
// batch statistics' terms (Training) compiled in: g' = g, or g where y > 0
struct BackwardRows {
  const uint16_t *G, *Y;  // gy and y [P, C]
  int64_t C;
  const float* mean;
  const float *scale = nullptr, *mean_g = nullptr, *k = nullptr;  // per channel, for gradient()

  // sum g' and sum g' (x - mean) of pixel q into a, b (at the piece's first channel)
  template <bool Relu>
  void sums(int64_t q, const Piece& pc, float* a, float* b) const {
    const uint16_t* g = G + q * C + pc.c0;
    const uint16_t* y = Relu ? Y + q * C + pc.c0 : nullptr;
    const uint16_t* x = pc.p + q * pc.C;
    const float* m = mean + pc.c0;
#pragma omp simd
    for (int64_t c = 0; c < pc.C; ++c) {
      float gv = bf16_to_f32(g[c]);
      if constexpr (Relu) gv = keep_where_positive(gv, bf16_to_f32(y[c]));
      a[c] += gv;
      b[c] += gv * (bf16_to_f32(x[c]) - m[c]);
    }
  }
  // gx of pixels [p0, p1) of the piece: w invstd (g' - mean(g') - (x - mean) k), or w invstd g'
  template <bool Relu, bool Training>
  void gradient(int64_t p0, int64_t p1, const Piece& pc, uint16_t* gx_piece) const {
    const int64_t c0 = pc.c0, n = pc.C;
    const float *sc = scale + c0, *mg = mean_g + c0, *kk = k + c0, *m = mean + c0;
    for (int64_t q = p0; q < p1; ++q) {
      const uint16_t* g = G + q * C + c0;
      const uint16_t* y = Relu ? Y + q * C + c0 : nullptr;
      const uint16_t* x = pc.p + q * n;
      uint16_t* gx = gx_piece + q * n;
#pragma omp simd
      for (int64_t c = 0; c < n; ++c) {
        float gv = bf16_to_f32(g[c]);
        if constexpr (Relu) gv = keep_where_positive(gv, bf16_to_f32(y[c]));
        if constexpr (Training) gv = gv - mg[c] - (bf16_to_f32(x[c]) - m[c]) * kk[c];
        gx[c] = f32_to_bf16(sc[c] * gv);  // evaluation: x does not enter (a NaN in x leaves gx alone)
      }
    }
  }
};

}  // namespace

// training: y = (x - mean) invstd w + b with the batch statistics, running statistics
// updated (momentum, unbiased variance); evaluation: the running statistics. Relu after.
bool lowp_batch_norm_forward(const Tensor& out, const Tensor& save_mean, const Tensor& save_invstd,
                             std::span<const Tensor> xs, const Tensor& weight, const Tensor& bias,
                             const Tensor& running_mean, const Tensor& running_var, bool training, double momentum,
                             double eps, bool relu) {
  if (xs.empty() || !bf16_channels_last(out) || !cpu_has_v4()) return false;
  for (const Tensor& t : xs)
    if (!bf16_channels_last(t)) return false;
  for (const Tensor* t : {&save_mean, &save_invstd, &weight, &bias, &running_mean, &running_var})
    if (!f32_or_none(*t)) return false;
  const int64_t N = out.size(0), C = out.size(1), P = N * out.size(2) * out.size(3);
  const std::vector<Piece> ps = pieces_of(xs);
  std::vector<float> w = values(weight, C, 1.f), b = values(bias, C, 0.f);
  float* mean_out = static_cast<float*>(save_mean.data_ptr());
  float* invstd_out = static_cast<float*>(save_invstd.data_ptr());
  std::vector<float> scale(static_cast<size_t>(C)), shift(static_cast<size_t>(C));
  if (training) {
    std::vector<float> k(static_cast<size_t>(C));  // the first pixel's values: sums of x - k, (x - k)^2
    for (const Piece& pc : ps)
      for (int64_t c = 0; c < pc.C; ++c) k[size_t(pc.c0 + c)] = bf16_to_f32(pc.p[c]);
    const float* K = k.data();
    std::vector<double> s1, s2;
    reduce_channels(ps, P, C, s1, s2, [K](int64_t q, const Piece& pc, float* a, float* b) {
      const uint16_t* x = pc.p + q * pc.C;
      const float* kc = K + pc.c0;
#pragma omp simd
      for (int64_t c = 0; c < pc.C; ++c) {
        const float d = bf16_to_f32(x[c]) - kc[c];
        a[c] += d;
        b[c] += d * d;
      }
    });
    const double count = double(P);
    float* rm = running_mean.defined() ? static_cast<float*>(running_mean.data_ptr()) : nullptr;
    float* rv = running_var.defined() ? static_cast<float*>(running_var.data_ptr()) : nullptr;
    const int64_t srm = rm ? running_mean.strides()[0] : 0, srv = rv ? running_var.strides()[0] : 0;
    for (int64_t c = 0; c < C; ++c) {
      const double d = s1[size_t(c)] / count, mean = double(K[c]) + d;
      const double var = std::max(s2[size_t(c)] / count - d * d, 0.0);
      mean_out[c] = float(mean);
      invstd_out[c] = float(1.0 / std::sqrt(var + eps));
      if (rm) rm[c * srm] = float((1 - momentum) * double(rm[c * srm]) + momentum * mean);
      if (rv) rv[c * srv] = float((1 - momentum) * double(rv[c * srv]) + momentum * var * count / (count - 1));
    }
  } else {
    const float* rm = static_cast<const float*>(running_mean.data_ptr());
    const float* rv = static_cast<const float*>(running_var.data_ptr());
    for (int64_t c = 0; c < C; ++c) {
      mean_out[c] = rm[c * running_mean.strides()[0]];
      invstd_out[c] = float(1.0 / std::sqrt(double(rv[c * running_var.strides()[0]]) + eps));
    }
  }
  for (int64_t c = 0; c < C; ++c) {  // as the f32 kernel folds them (cpu/norm.cpp)
    scale[size_t(c)] = invstd_out[c] * w[size_t(c)];
    shift[size_t(c)] = b[size_t(c)] - mean_out[c] * scale[size_t(c)];
  }
  uint16_t* Y = static_cast<uint16_t*>(out.data_ptr());
  over_pixels(P, C, [&](int64_t, int64_t p0, int64_t p1) {
    for (int64_t q = p0; q < p1; ++q)
      for (const Piece& pc : ps) {
        const uint16_t* x = pc.p + q * pc.C;
        uint16_t* y = Y + q * C + pc.c0;
        const float* sc = scale.data() + pc.c0;
        const float* sh = shift.data() + pc.c0;
#pragma omp simd
        for (int64_t c = 0; c < pc.C; ++c) {
          const float v = bf16_to_f32(x[c]) * sc[c] + sh[c];
          y[c] = f32_to_bf16(relu ? keep_where_positive(v, v) : v);
        }
      }
  });
  return true;
}

// g' = g (relu: where y > 0). training: gx = w invstd (g' - mean(g') - xhat mean(g' xhat));
// evaluation: gx = w invstd g'. gw = sum g' xhat, gb = sum g', per channel.
bool lowp_batch_norm_backward(std::span<const Tensor> gxs, const Tensor& gw, const Tensor& gb, const Tensor& gy,
                              std::span<const Tensor> xs, const Tensor& y, const Tensor& weight,
                              const Tensor& save_mean, const Tensor& save_invstd, bool training) {
  if (xs.empty() || gxs.size() != xs.size() || !bf16_channels_last(gy) || (y.defined() && !bf16_channels_last(y)) ||
      !cpu_has_v4())
    return false;
  for (size_t j = 0; j < xs.size(); ++j)
    if (!bf16_channels_last(xs[j]) || (gxs[j].defined() && !bf16_channels_last(gxs[j]))) return false;
  for (const Tensor* t : {&gw, &gb, &weight, &save_mean, &save_invstd})
    if (!f32_or_none(*t)) return false;
  const int64_t C = gy.size(1), P = gy.size(0) * gy.size(2) * gy.size(3);
  const std::vector<Piece> ps = pieces_of(xs);
  const std::vector<float> w = values(weight, C, 1.f), mean = values(save_mean, C, 0.f),
                           invstd = values(save_invstd, C, 1.f);
  const uint16_t* G = static_cast<const uint16_t*>(gy.data_ptr());
  const uint16_t* Yr = y.defined() ? static_cast<const uint16_t*>(y.data_ptr()) : nullptr;
  bool want_gx = false;
  for (const Tensor& t : gxs) want_gx = want_gx || t.defined();
  std::vector<double> sum_g, sum_gd;  // sum g', sum g' (x - mean)
  if (gw.defined() || gb.defined() || (training && want_gx)) {
    const BackwardRows rows{G, Yr, C, mean.data()};
    if (Yr) reduce_channels(ps, P, C, sum_g, sum_gd, [&rows](int64_t q, const Piece& pc, float* a, float* b) { rows.sums<true>(q, pc, a, b); });
    else reduce_channels(ps, P, C, sum_g, sum_gd, [&rows](int64_t q, const Piece& pc, float* a, float* b) { rows.sums<false>(q, pc, a, b); });
  }
  for (int64_t c = 0; c < C; ++c) {
    if (gw.defined()) static_cast<float*>(gw.data_ptr())[c * gw.strides()[0]] = float(sum_gd[size_t(c)] * invstd[size_t(c)]);
    if (gb.defined()) static_cast<float*>(gb.data_ptr())[c * gb.strides()[0]] = float(sum_g[size_t(c)]);
  }
  if (!want_gx) return true;
  const double count = double(P);
  std::vector<float> scale(static_cast<size_t>(C)), mean_g(static_cast<size_t>(C), 0.f), k(static_cast<size_t>(C), 0.f);
  for (int64_t c = 0; c < C; ++c) {  // as the f32 kernel (cpu/norm.cpp)
    scale[size_t(c)] = w[size_t(c)] * invstd[size_t(c)];
    if (!training) continue;
    mean_g[size_t(c)] = float(sum_g[size_t(c)] / count);
    k[size_t(c)] = float(sum_gd[size_t(c)] / count) * invstd[size_t(c)] * invstd[size_t(c)];
  }
  const BackwardRows rows{G, Yr, C, mean.data(), scale.data(), mean_g.data(), k.data()};
  over_pixels(P, C, [&](int64_t, int64_t p0, int64_t p1) {
    for (size_t j = 0; j < ps.size(); ++j) {
      if (!gxs[j].defined()) continue;
      uint16_t* gx = static_cast<uint16_t*>(gxs[j].data_ptr());
      if (Yr && training) rows.gradient<true, true>(p0, p1, ps[j], gx);
      else if (Yr) rows.gradient<true, false>(p0, p1, ps[j], gx);
      else if (training) rows.gradient<false, true>(p0, p1, ps[j], gx);
      else rows.gradient<false, false>(p0, p1, ps[j], gx);
    }
  });
  return true;
}

}  // namespace reel::cpu
