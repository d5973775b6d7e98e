// Batch normalisation (and batch norm + ReLU), forward and backward (layer norm: layer_norm.cpp). Memory-bound: statistics
// in one pass over the data (two for the centred variance), the output in one more;
// sums accumulate in double so f32 statistics of large batches stay accurate.
// Loops rather than oneDNN: oneDNN keeps variances where we save invstd, and its
// running statistics are not PyTorch's (momentum, unbiased variance).
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <omp.h>
#include <tuple>
#include <type_traits>
#include <vector>

#include "cpu_backend.h"
#include "dnnl_common.h"
#include "channel_blocks.h"
#include "loops.h"

namespace reel::cpu {
namespace {

// x [N, C, *] seen as [N, C, S]: its own strides when the trailing dims merge, else a dense copy.
struct Planes {
  Tensor t;
  int64_t N, C, S, sn, sc, ss;
};
Planes planes(const Tensor& x) {
  Tensor t = x;
  int64_t S = 1, ss = 1;
  int inner = -1;
  for (int d = x.dim() - 1; d >= 2; --d) {
    S *= x.shape()[d];
    if (x.shape()[d] == 1) continue;
    if (inner < 0) ss = x.strides()[d];
    else if (x.strides()[d] != x.strides()[inner] * x.shape()[inner]) t = Tensor();
    inner = d;
  }
  // channels-last (bf16 activations on AMX and AMD AVX512-BF16 CPUs, Backend::channels_last): the planes merge
  // at stride C, one element per cache line; a transposed copy (one tiled pass) reads better
  if (!t.defined() || is_channels_last(x.shape(), x.strides())) {
    t = dense_copy(x);
    ss = 1;
  }
  return {t, x.shape()[0], x.shape()[1], S, t.strides()[0], t.strides()[1], ss};
}

// Element i of a 1-D tensor of any stride, or `fallback` when it is undefined.
template <typename T>
struct Vec {
  const T* p = nullptr;
  int64_t s = 0;
  T fallback;
  Vec(const Tensor& t, T fallback) : fallback(fallback) {
    if (t.defined()) p = static_cast<const T*>(t.data_ptr()), s = t.strides()[0];
  }
  T operator[](int64_t i) const { return p ? p[i * s] : fallback; }
};

// Channel c of the concatenation of pieces [N, C_j, *] along dim 1: where its N planes of
// S elements start in its piece, and that piece's strides.
template <typename T>
struct Channel {
  const T* p;
  int64_t sn, ss;
  const T* plane(int64_t n) const { return p + n * sn; }
};
template <typename T>
struct Pieces {
  std::vector<Planes> keep;  // the pieces' planes (dense copies where the trailing dims do not merge)
  std::vector<Channel<T>> ch;
  int64_t N = 0, S = 0;
};
template <typename T>
Pieces<T> pieces(const std::vector<Tensor>& xs) {
  Pieces<T> r;
  for (const Tensor& x : xs) {
    const Planes& pl = r.keep.emplace_back(planes(x));
    const T* X = static_cast<const T*>(pl.t.data_ptr());
    for (int64_t c = 0; c < pl.C; ++c) r.ch.push_back({X + c * pl.sc, pl.sn, pl.ss});
    r.N = pl.N, r.S = pl.S;
  }
  return r;
}

// ---- unit-stride plane loops, written so that GCC vectorises them: sums in double over
// 8 explicit lanes (an `omp simd` double reduction over f32 data stays scalar in GCC 12),
// relu's select on the bit pattern (a float compare stops if-conversion under
// -ftrapping-math).
constexpr int kLanes = 8;

// g where relu passed y (y > 0, or NaN), else +0: relu's backward, y <= 0 ? 0 : g; on the bits
template <typename T>
T relu_grad_bits(T g, T y) {
  using U = std::conditional_t<sizeof(T) == 4, uint32_t, uint64_t>;
  using I = std::make_signed_t<U>;
  constexpr U abs_mask = ~U(0) >> 1, inf = std::bit_cast<U>(std::numeric_limits<T>::infinity());
  U b = std::bit_cast<U>(y);
  U keep = U(0) - U(I(b) > 0 || (b & abs_mask) > inf);
  return std::bit_cast<T>(std::bit_cast<U>(g) & keep);
}
// relu(v), NaN passing
template <typename T>
T relu_bits(T v) {
  return relu_grad_bits(v, v);
}

// sum of p[0..S)
template <typename T>
double plane_sum(const T* p, int64_t S) {
  double a[kLanes] = {};
  int64_t s = 0;
  for (; s + kLanes <= S; s += kLanes)
    for (int l = 0; l < kLanes; ++l) a[l] += double(p[s + l]);
  double r = 0;
  for (; s < S; ++s) r += double(p[s]);
  for (double v : a) r += v;
  return r;
}
// sum of (p[s] - mean)^2
template <typename T>
double plane_centred_sq(const T* p, int64_t S, double mean) {
  double a[kLanes] = {};
  int64_t s = 0;
  for (; s + kLanes <= S; s += kLanes)
    for (int l = 0; l < kLanes; ++l) a[l] += (double(p[s + l]) - mean) * (double(p[s + l]) - mean);
  double r = 0;
  for (; s < S; ++s) r += (double(p[s]) - mean) * (double(p[s]) - mean);
  for (double v : a) r += v;
  return r;
}
// f32: GCC vector types, because in this loop GCC 12 leaves the bit-pattern select
// scalar whatever its spelling (-fopt-info: "no vectype"), and it is a quarter of a W11
// step. 8 floats a step, widened to two 4-lane doubles.
using f32x8 = float __attribute__((vector_size(32)));
using i32x8 = int32_t __attribute__((vector_size(32)));
using f64x4 = double __attribute__((vector_size(32)));
template <bool Relu>
void plane_grad_sums_f32(const float* g, const float* y, const float* x, int64_t S, double mean, double& sum_g,
                         double& sum_gd) {
  f64x4 a0 = {}, a1 = {}, b0 = {}, b1 = {};
  const f64x4 m = {mean, mean, mean, mean};
  int64_t s = 0;
  for (; s + 8 <= S; s += 8) {
    f32x8 gv, xv;
    std::memcpy(&gv, g + s, sizeof gv);
    std::memcpy(&xv, x + s, sizeof xv);
    if constexpr (Relu) {
      f32x8 yv;
      std::memcpy(&yv, y + s, sizeof yv);
      i32x8 keep = (yv > 0.0f) | (yv != yv);  // relu passes it: y > 0, or NaN
      gv = reinterpret_cast<f32x8>(reinterpret_cast<i32x8>(gv) & keep);
    }
    f64x4 g0 = __builtin_convertvector(__builtin_shufflevector(gv, gv, 0, 1, 2, 3), f64x4);
    f64x4 g1 = __builtin_convertvector(__builtin_shufflevector(gv, gv, 4, 5, 6, 7), f64x4);
    f64x4 x0 = __builtin_convertvector(__builtin_shufflevector(xv, xv, 0, 1, 2, 3), f64x4);
    f64x4 x1 = __builtin_convertvector(__builtin_shufflevector(xv, xv, 4, 5, 6, 7), f64x4);
    a0 += g0, a1 += g1;
    b0 += g0 * (x0 - m), b1 += g1 * (x1 - m);
  }
  for (; s < S; ++s) {
    double v = Relu ? double(relu_grad_bits(g[s], y[s])) : double(g[s]);
    sum_g += v;
    sum_gd += v * (double(x[s]) - mean);
  }
  for (int l = 0; l < 4; ++l) sum_g += a0[l] + a1[l], sum_gd += b0[l] + b1[l];
}

// sum g' and sum g' (x - mean), g' = g (Relu: masked by y)
template <typename T, bool Relu>
void plane_grad_sums(const T* g, const T* y, const T* x, int64_t S, double mean, double& sum_g, double& sum_gd) {
  if constexpr (std::is_same_v<T, float>) {
    plane_grad_sums_f32<Relu>(g, y, x, S, mean, sum_g, sum_gd);
  } else {
    constexpr auto gv = [](const T* g, [[maybe_unused]] const T* y, int64_t i) {
      if constexpr (Relu) return double(relu_grad_bits(g[i], y[i]));
      else return double(g[i]);
    };
    double a[kLanes] = {}, b[kLanes] = {};
    int64_t s = 0;
    for (; s + kLanes <= S; s += kLanes)
      for (int l = 0; l < kLanes; ++l) {
        double v = gv(g, y, s + l);
        a[l] += v;
        b[l] += v * (double(x[s + l]) - mean);
      }
    for (; s < S; ++s) {
      double v = gv(g, y, s);
      sum_g += v;
      sum_gd += v * (double(x[s]) - mean);
    }
    for (int l = 0; l < kLanes; ++l) sum_g += a[l], sum_gd += b[l];
  }
}

// The forward's per-channel arguments: the pieces' channel table, the parameters, the
// statistics written (save_mean, save_invstd, running statistics updated in training).
template <typename T>
struct BnForward {
  Pieces<T> x;
  Vec<T> w, b;
  T *mean_out, *invstd_out, *rm, *rv;
  int64_t srm, srv;
  bool training;
  double momentum, eps;
  BnForward(const std::vector<Tensor>& xs, const Tensor& save_mean, const Tensor& save_invstd, const Tensor& weight,
            const Tensor& bias, const Tensor& running_mean, const Tensor& running_var, bool training, double momentum,
            double eps)
      : x(pieces<T>(xs)),
        w(weight, T(1)),
        b(bias, T(0)),
        mean_out(static_cast<T*>(save_mean.data_ptr())),
        invstd_out(static_cast<T*>(save_invstd.data_ptr())),
        rm(running_mean.defined() ? static_cast<T*>(running_mean.data_ptr()) : nullptr),
        rv(running_var.defined() ? static_cast<T*>(running_var.data_ptr()) : nullptr),
        srm(rm ? running_mean.strides()[0] : 0),
        srv(rv ? running_var.strides()[0] : 0),
        training(training),
        momentum(momentum),
        eps(eps) {}

  // Channel c's statistics (in double; unit-stride planes vectorised), saved and folded
  // into y = x scale + shift: {scale, shift}
  std::pair<T, T> coefficients(int64_t c) {
    const Channel<T> ch = x.ch[size_t(c)];
    const int64_t N = x.N, S = x.S, ss = ch.ss;
    const double count = double(N * S);
    double mean, invstd;
    if (training) {
      double sum = 0, sq = 0;
      for (int64_t n = 0; n < N; ++n) {
        const T* p = ch.plane(n);
        if (ss == 1) {
          sum += plane_sum(p, S);
        } else {
          for (int64_t s = 0; s < S; ++s) sum += double(p[s * ss]);
        }
      }
      mean = sum / count;
      for (int64_t n = 0; n < N; ++n) {
        const T* p = ch.plane(n);
        if (ss == 1) {
          sq += plane_centred_sq(p, S, mean);
        } else {
          for (int64_t s = 0; s < S; ++s) sq += (double(p[s * ss]) - mean) * (double(p[s * ss]) - mean);
        }
      }
      double var = sq / count;
      invstd = 1.0 / std::sqrt(var + eps);
      if (rm) rm[c * srm] = T((1 - momentum) * double(rm[c * srm]) + momentum * mean);
      if (rv) rv[c * srv] = T((1 - momentum) * double(rv[c * srv]) + momentum * var * count / (count - 1));
    } else {
      mean = double(rm[c * srm]);
      invstd = 1.0 / std::sqrt(double(rv[c * srv]) + eps);
    }
    mean_out[c] = T(mean);
    invstd_out[c] = T(invstd);
    T scale = T(invstd) * w[c];
    return {scale, b[c] - T(mean) * scale};
  }
};

// Per channel: the statistics, then y = x scale + shift (relu: max(., 0), NaN passing)
// into out [N, C, S] while the channel's planes are still in cache.
template <typename T, bool Relu>
void bn_forward(const Tensor& out, const Tensor& save_mean, const Tensor& save_invstd, const std::vector<Tensor>& xs,
                const Tensor& weight, const Tensor& bias, const Tensor& running_mean, const Tensor& running_var,
                bool training, double momentum, double eps) {
  BnForward<T> f(xs, save_mean, save_invstd, weight, bias, running_mean, running_var, training, momentum, eps);
  const int64_t N = f.x.N, S = f.x.S, C = int64_t(f.x.ch.size());
  T* Y = static_cast<T*>(out.data_ptr());
#pragma omp parallel for schedule(static) if (out.numel() >= kParallelGrain)
  for (int64_t c = 0; c < C; ++c) {
    // plain names, not a structured binding: clang's OpenMP cannot capture one in a lambda
    const std::pair<T, T> coef = f.coefficients(c);
    const T scale = coef.first, shift = coef.second;
    auto affine = [scale, shift](T v) {
      T y = v * scale + shift;
      if constexpr (Relu) y = relu_bits(y);
      return y;
    };
    const Channel<T> ch = f.x.ch[size_t(c)];
    for (int64_t n = 0; n < N; ++n) {
      const T* p = ch.plane(n);
      T* y = Y + (n * C + c) * S;
      if (ch.ss == 1) {
#pragma omp simd
        for (int64_t s = 0; s < S; ++s) y[s] = affine(p[s]);
      } else {
        for (int64_t s = 0; s < S; ++s) y[s] = affine(p[s * ch.ss]);
      }
    }
  }
}

// f32 pieces into out [N, C/B, S, B]: the coefficients per channel, then per (image,
// block) the B planes written through the transposing kernel (cpu/channel_blocks.h)
void bn_relu_forward_blocked(const Tensor& out, const Tensor& save_mean, const Tensor& save_invstd,
                             const std::vector<Tensor>& xs, const Tensor& weight, const Tensor& bias,
                             const Tensor& running_mean, const Tensor& running_var, bool training, double momentum,
                             double eps) {
  BnForward<float> f(xs, save_mean, save_invstd, weight, bias, running_mean, running_var, training, momentum, eps);
  const int64_t N = f.x.N, S = f.x.S, C = int64_t(f.x.ch.size()), B = out.shape()[out.dim() - 1], CB = C / B;
  std::vector<float> scale(static_cast<size_t>(C)), shift(static_cast<size_t>(C));
  const bool parallel = out.numel() >= kParallelGrain;
#pragma omp parallel for schedule(static) if (parallel)
  for (int64_t c = 0; c < C; ++c) std::tie(scale[size_t(c)], shift[size_t(c)]) = f.coefficients(c);
  float* Y = static_cast<float*>(out.data_ptr());
  std::vector<Planes> dense;  // pieces whose planes are not unit-stride: dense copies for this pass
  std::vector<const float*> first(static_cast<size_t>(C));
  std::vector<int64_t> sn(static_cast<size_t>(C));
  for (int64_t c = 0; c < C; ++c) {
    Channel<float> ch = f.x.ch[size_t(c)];
    first[size_t(c)] = ch.p, sn[size_t(c)] = ch.sn;
    if (ch.ss != 1) first[size_t(c)] = nullptr;
  }
  for (size_t j = 0, c0 = 0; j < xs.size(); c0 += size_t(xs[j].shape()[1]), ++j) {
    if (first[c0] || xs[j].shape()[1] == 0) continue;
    const Planes& d = dense.emplace_back(planes(dense_copy(xs[j])));
    for (int64_t c = 0; c < d.C; ++c)
      first[c0 + size_t(c)] = static_cast<const float*>(d.t.data_ptr()) + c * d.sc, sn[c0 + size_t(c)] = d.sn;
  }
#pragma omp parallel for collapse(2) schedule(static) if (parallel)
  for (int64_t n = 0; n < N; ++n)
    for (int64_t cb = 0; cb < CB; ++cb) {
      const float* plane[16];
      for (int64_t i = 0; i < B; ++i) plane[i] = first[size_t(cb * B + i)] + n * sn[size_t(cb * B + i)];
      write_blocked_scale_shift_relu(Y + (n * CB + cb) * S * B, plane, &scale[size_t(cb * B)],
                                     &shift[size_t(cb * B)], S, B);
    }
}

// training: gx = w invstd (g - mean(g) - xhat mean(g xhat)); eval: gx = w invstd g.
// gw = sum g xhat, gb = sum g, per channel. Relu: g is first masked by y > 0 (y the
// forward's output, [N, C, S]; NaN passes). gxs[j] (contiguous, or undefined: not
// wanted) is piece j's gradient.
template <typename T, bool Relu>
void bn_backward(const std::vector<Tensor>& gxs, const Tensor& gw, const Tensor& gb, const Tensor& gy_in,
                 const std::vector<Tensor>& xs, const Tensor& y, const Tensor& weight, const Tensor& save_mean,
                 const Tensor& save_invstd, bool training) {
  Pieces<T> x = pieces<T>(xs);
  Planes g = planes(gy_in);
  const int64_t N = x.N, S = x.S, C = int64_t(x.ch.size());
  std::vector<std::pair<T*, int64_t>> gx_at;  // channel c's gradient: its first plane and the n stride
  for (size_t j = 0; j < xs.size(); ++j)
    for (int64_t c = 0; c < xs[j].size(1); ++c)
      gx_at.push_back(gxs[j].defined() ? std::pair{static_cast<T*>(gxs[j].data_ptr()) + c * S, xs[j].size(1) * S}
                                       : std::pair<T*, int64_t>{nullptr, 0});
  const T* G = static_cast<const T*>(g.t.data_ptr());
  const T* Y = Relu ? static_cast<const T*>(y.data_ptr()) : nullptr;
  Vec<T> w(weight, T(1)), mean(save_mean, T(0)), invstd(save_invstd, T(1));
  T* GW = gw.defined() ? static_cast<T*>(gw.data_ptr()) : nullptr;
  T* GB = gb.defined() ? static_cast<T*>(gb.data_ptr()) : nullptr;
  double count = double(N * S);
#pragma omp parallel for schedule(static) if (N * C * S >= kParallelGrain)
  for (int64_t c = 0; c < C; ++c) {
    const Channel<T> ch = x.ch[size_t(c)];
    const bool unit = ch.ss == 1 && g.ss == 1;
    double sum_g = 0, sum_gd = 0;  // sum g, sum g (x - mean)
    const T m = mean[c];
    auto masked = [](T gv, [[maybe_unused]] const T* yp, [[maybe_unused]] int64_t s) {
      if constexpr (Relu) return relu_grad_bits(gv, yp[s]);
      else return gv;
    };
    for (int64_t n = 0; n < N; ++n) {
      const T* xp = ch.plane(n);
      const T* gp = G + n * g.sn + c * g.sc;
      const T* yp = Relu ? Y + (n * C + c) * S : nullptr;
      if (unit) {
        plane_grad_sums<T, Relu>(gp, yp, xp, S, double(m), sum_g, sum_gd);
      } else {
        for (int64_t s = 0; s < S; ++s) {
          double gv = double(masked(gp[s * g.ss], yp, s));
          sum_g += gv;
          sum_gd += gv * (double(xp[s * ch.ss]) - double(m));
        }
      }
    }
    T is = invstd[c];
    if (GW) GW[c] = T(sum_gd * double(is));
    if (GB) GB[c] = T(sum_g);
    auto [GX, gx_sn] = gx_at[size_t(c)];
    if (!GX) continue;
    T scale = w[c] * is;
    if (!training) {  // dx = w invstd g: x does not enter (a NaN in x leaves dx alone, as PyTorch)
      for (int64_t n = 0; n < N; ++n) {
        const T* gp = G + n * g.sn + c * g.sc;
        const T* yp = Relu ? Y + (n * C + c) * S : nullptr;
        T* out = GX + n * gx_sn;
        for (int64_t s = 0; s < S; ++s) out[s] = scale * masked(gp[s * g.ss], yp, s);
      }
      continue;
    }
    T mean_g = T(sum_g / count);
    T k = T(sum_gd / count) * is * is;  // (x - m) k = xhat mean(g xhat)
    for (int64_t n = 0; n < N; ++n) {
      const T* xp = ch.plane(n);
      const T* gp = G + n * g.sn + c * g.sc;
      const T* yp = Relu ? Y + (n * C + c) * S : nullptr;
      T* out = GX + n * gx_sn;
      if (unit) {
#pragma omp simd
        for (int64_t s = 0; s < S; ++s) out[s] = scale * (masked(gp[s], yp, s) - mean_g - (xp[s] - m) * k);
      } else {
        for (int64_t s = 0; s < S; ++s)
          out[s] = scale * (masked(gp[s * g.ss], yp, s) - mean_g - (xp[s * ch.ss] - m) * k);
      }
    }
  }
}

// gz and z [N, C/B, S, B] (z: the blocked forward's output): relu's mask applied while
// moving gz into plain planes, then batch_norm's backward over the pieces
void bn_relu_backward_blocked(const std::vector<Tensor>& gxs, const Tensor& gw, const Tensor& gb, const Tensor& gz,
                              const std::vector<Tensor>& xs, const Tensor& z, const Tensor& weight,
                              const Tensor& save_mean, const Tensor& save_invstd, bool training) {
  const int64_t N = z.shape()[0], CB = z.shape()[1], B = z.shape()[z.dim() - 1], C = CB * B, S = z.numel() / (N * C);
  Tensor g = empty({N, C, S}, {.dtype = DType::f32});
  Tensor gzc = gz.is_contiguous() ? gz : dense_copy(gz);
  const float* GZ = static_cast<const float*>(gzc.data_ptr());
  const float* Z = static_cast<const float*>(z.data_ptr());
  float* G = static_cast<float*>(g.data_ptr());
#pragma omp parallel for collapse(2) schedule(static) if (z.numel() >= kParallelGrain)
  for (int64_t n = 0; n < N; ++n)
    for (int64_t cb = 0; cb < CB; ++cb) {
      float* plane[16];
      for (int64_t i = 0; i < B; ++i) plane[i] = G + (n * C + cb * B + i) * S;
      read_blocked_relu_grad(plane, GZ + (n * CB + cb) * S * B, Z + (n * CB + cb) * S * B, S, B);
    }
  bn_backward<float, false>(gxs, gw, gb, g, xs, Tensor(), weight, save_mean, save_invstd, training);
}

}  // namespace

void CpuBackend::batch_norm_forward(const Tensor& out, const Tensor& save_mean, const Tensor& save_invstd,
                                    const Tensor& x, const Tensor& weight, const Tensor& bias,
                                    const Tensor& running_mean, const Tensor& running_var, bool training,
                                    double momentum, double eps) {
  dispatch_float(x.dtype(), "batch_norm", [&]<typename T>() {
    bn_forward<T, false>(out, save_mean, save_invstd, {x}, weight, bias, running_mean, running_var, training, momentum,
                         eps);
  });
}

void CpuBackend::batch_norm_backward(const Tensor& gx, const Tensor& gw, const Tensor& gb, const Tensor& gy,
                                     const Tensor& x, const Tensor& weight, const Tensor& save_mean,
                                     const Tensor& save_invstd, bool training) {
  dispatch_float(x.dtype(), "batch_norm", [&]<typename T>() {
    bn_backward<T, false>({gx}, gw, gb, gy, {x}, Tensor(), weight, save_mean, save_invstd, training);
  });
}

void CpuBackend::batch_norm_relu_forward(const Tensor& out, const Tensor& save_mean, const Tensor& save_invstd,
                                         const std::vector<Tensor>& xs, const Tensor& weight, const Tensor& bias,
                                         const Tensor& running_mean, const Tensor& running_var, bool training,
                                         double momentum, double eps) {
  dispatch_float(out.dtype(), "batch_norm_relu", [&]<typename T>() {
    bn_forward<T, true>(out, save_mean, save_invstd, xs, weight, bias, running_mean, running_var, training, momentum,
                        eps);
  });
}

void CpuBackend::batch_norm_relu_backward(const std::vector<Tensor>& gxs, const Tensor& gw, const Tensor& gb,
                                          const Tensor& gy, const std::vector<Tensor>& xs, const Tensor& y,
                                          const Tensor& weight, const Tensor& save_mean, const Tensor& save_invstd,
                                          bool training) {
  dispatch_float(y.dtype(), "batch_norm_relu", [&]<typename T>() {
    bn_backward<T, true>(gxs, gw, gb, gy, xs, y, weight, save_mean, save_invstd, training);
  });
}

void CpuBackend::batch_norm_relu_blocked_forward(const Tensor& out, const Tensor& save_mean,
                                                 const Tensor& save_invstd, const std::vector<Tensor>& xs,
                                                 const Tensor& weight, const Tensor& bias, const Tensor& running_mean,
                                                 const Tensor& running_var, bool training, double momentum,
                                                 double eps) {
  if (out.dtype() != DType::f32 || out.shape()[out.dim() - 1] > 16)  // the kernels hold 16 plane pointers at most
    return Backend::batch_norm_relu_blocked_forward(out, save_mean, save_invstd, xs, weight, bias, running_mean,
                                                    running_var, training, momentum, eps);
  bn_relu_forward_blocked(out, save_mean, save_invstd, xs, weight, bias, running_mean, running_var, training,
                          momentum, eps);
}

void CpuBackend::batch_norm_relu_blocked_backward(const std::vector<Tensor>& gxs, const Tensor& gw, const Tensor& gb,
                                                  const Tensor& gz, const std::vector<Tensor>& xs, const Tensor& z,
                                                  const Tensor& weight, const Tensor& save_mean,
                                                  const Tensor& save_invstd, bool training) {
  if (z.dtype() != DType::f32 || z.shape()[z.dim() - 1] > 16)
    return Backend::batch_norm_relu_blocked_backward(gxs, gw, gb, gz, xs, z, weight, save_mean, save_invstd,
                                                     training);
  bn_relu_backward_blocked(gxs, gw, gb, gz, xs, z, weight, save_mean, save_invstd, training);
}

}  // namespace reel::cpu
