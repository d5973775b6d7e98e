// Batch and layer normalisation, forward and backward. Memory-bound: statistics
// in one pass over the data (two for the centred variance), the output in one more;
// sums accumulate in double so f32 statistics of large batches stay accurate.
// Loops rather than oneDNN: oneDNN keeps variances where we save invstd, and its
// running statistics are not PyTorch's (momentum, unbiased variance).
#include <cmath>
#include <vector>

#include "cpu_backend.h"
#include "dnnl_common.h"
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
  if (!t.defined()) {
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

template <typename T>
void bn_forward(const Tensor& out, const Tensor& save_mean, const Tensor& save_invstd, const Tensor& x_in,
                const Tensor& weight, const Tensor& bias, const Tensor& running_mean, const Tensor& running_var,
                bool training, double momentum, double eps) {
  Planes x = planes(x_in);
  const T* X = static_cast<const T*>(x.t.data_ptr());
  T* Y = static_cast<T*>(out.data_ptr());
  T* mean_out = static_cast<T*>(save_mean.data_ptr());
  T* invstd_out = static_cast<T*>(save_invstd.data_ptr());
  Vec<T> w(weight, T(1)), b(bias, T(0));
  T* rm = running_mean.defined() ? static_cast<T*>(running_mean.data_ptr()) : nullptr;
  T* rv = running_var.defined() ? static_cast<T*>(running_var.data_ptr()) : nullptr;
  int64_t srm = rm ? running_mean.strides()[0] : 0, srv = rv ? running_var.strides()[0] : 0;
  double count = double(x.N * x.S);
#pragma omp parallel for schedule(static) if (x.t.numel() >= kParallelGrain)
  for (int64_t c = 0; c < x.C; ++c) {
    double mean, invstd;
    if (training) {
      double sum = 0, sq = 0;
      for (int64_t n = 0; n < x.N; ++n) {
        const T* p = X + n * x.sn + c * x.sc;
        for (int64_t s = 0; s < x.S; ++s) sum += double(p[s * x.ss]);
      }
      mean = sum / count;
      for (int64_t n = 0; n < x.N; ++n) {
        const T* p = X + n * x.sn + c * x.sc;
        for (int64_t s = 0; s < x.S; ++s) {
          double d = double(p[s * x.ss]) - mean;
          sq += d * d;
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
    T scale = T(invstd) * w[c], shift = b[c] - T(mean) * scale;
    for (int64_t n = 0; n < x.N; ++n) {
      const T* p = X + n * x.sn + c * x.sc;
      T* y = Y + (n * x.C + c) * x.S;
      if (x.ss == 1) {
#pragma omp simd
        for (int64_t s = 0; s < x.S; ++s) y[s] = p[s] * scale + shift;
      } else {
        for (int64_t s = 0; s < x.S; ++s) y[s] = p[s * x.ss] * scale + shift;
      }
    }
  }
}

// training: gx = w invstd (g - mean(g) - xhat mean(g xhat)); eval: gx = w invstd g.
// gw = sum g xhat, gb = sum g, per channel.
template <typename T>
void bn_backward(const Tensor& gx, const Tensor& gw, const Tensor& gb, const Tensor& gy_in, const Tensor& x_in,
                 const Tensor& weight, const Tensor& save_mean, const Tensor& save_invstd, bool training) {
  Planes x = planes(x_in), g = planes(gy_in);
  const T* X = static_cast<const T*>(x.t.data_ptr());
  const T* G = static_cast<const T*>(g.t.data_ptr());
  T* GX = static_cast<T*>(gx.data_ptr());
  Vec<T> w(weight, T(1)), mean(save_mean, T(0)), invstd(save_invstd, T(1));
  T* GW = gw.defined() ? static_cast<T*>(gw.data_ptr()) : nullptr;
  T* GB = gb.defined() ? static_cast<T*>(gb.data_ptr()) : nullptr;
  double count = double(x.N * x.S);
#pragma omp parallel for schedule(static) if (x.t.numel() >= kParallelGrain)
  for (int64_t c = 0; c < x.C; ++c) {
    double sum_g = 0, sum_gd = 0;  // sum g, sum g (x - mean)
    T m = mean[c];
    for (int64_t n = 0; n < x.N; ++n) {
      const T* xp = X + n * x.sn + c * x.sc;
      const T* gp = G + n * g.sn + c * g.sc;
      for (int64_t s = 0; s < x.S; ++s) {
        double gv = double(gp[s * g.ss]);
        sum_g += gv;
        sum_gd += gv * (double(xp[s * x.ss]) - double(m));
      }
    }
    T is = invstd[c];
    if (GW) GW[c] = T(sum_gd * double(is));
    if (GB) GB[c] = T(sum_g);
    T scale = w[c] * is;
    T mean_g = training ? T(sum_g / count) : T(0);
    T k = training ? T(sum_gd / count) * is * is : T(0);  // (x - m) k = xhat mean(g xhat)
    for (int64_t n = 0; n < x.N; ++n) {
      const T* xp = X + n * x.sn + c * x.sc;
      const T* gp = G + n * g.sn + c * g.sc;
      T* out = GX + (n * x.C + c) * x.S;
      for (int64_t s = 0; s < x.S; ++s) out[s] = scale * (gp[s * g.ss] - mean_g - (xp[s * x.ss] - m) * k);
    }
  }
}

// Rows of a contiguous x [rows, D]; weight and bias made contiguous [D].
template <typename T>
void ln_forward(const Tensor& out, const Tensor& save_mean, const Tensor& save_invstd, const Tensor& x_in,
                const Tensor& weight, const Tensor& bias, double eps) {
  Tensor x = x_in.is_contiguous() ? x_in : dense_copy(x_in);
  Tensor wt = weight.defined() && !weight.is_contiguous() ? dense_copy(weight) : weight;
  Tensor bt = bias.defined() && !bias.is_contiguous() ? dense_copy(bias) : bias;
  int64_t rows = save_mean.numel(), D = x.numel() / rows;
  const T* X = static_cast<const T*>(x.data_ptr());
  const T* W = wt.defined() ? static_cast<const T*>(wt.data_ptr()) : nullptr;
  const T* B = bt.defined() ? static_cast<const T*>(bt.data_ptr()) : nullptr;
  T* Y = static_cast<T*>(out.data_ptr());
  T* M = static_cast<T*>(save_mean.data_ptr());
  T* I = static_cast<T*>(save_invstd.data_ptr());
#pragma omp parallel for schedule(static) if (x.numel() >= kParallelGrain)
  for (int64_t r = 0; r < rows; ++r) {
    const T* p = X + r * D;
    double sum = 0, sq = 0;
#pragma omp simd reduction(+ : sum)
    for (int64_t i = 0; i < D; ++i) sum += double(p[i]);
    double mean = sum / double(D);
#pragma omp simd reduction(+ : sq)
    for (int64_t i = 0; i < D; ++i) sq += (double(p[i]) - mean) * (double(p[i]) - mean);
    double invstd = 1.0 / std::sqrt(sq / double(D) + eps);
    M[r] = T(mean);
    I[r] = T(invstd);
    T m = T(mean), is = T(invstd);
    T* y = Y + r * D;
#pragma omp simd
    for (int64_t i = 0; i < D; ++i) y[i] = (p[i] - m) * is * (W ? W[i] : T(1)) + (B ? B[i] : T(0));
  }
}

// gx = invstd (h - mean(h) - xhat mean(h xhat)) with h = g w, per row;
// gw = sum over rows of g xhat, gb = sum over rows of g (per-thread partial sums, then added).
template <typename T>
void ln_backward(const Tensor& gx, const Tensor& gw, const Tensor& gb, const Tensor& gy_in, const Tensor& x_in,
                 const Tensor& weight, const Tensor& save_mean, const Tensor& save_invstd) {
  Tensor x = x_in.is_contiguous() ? x_in : dense_copy(x_in);
  Tensor gy = gy_in.is_contiguous() ? gy_in : dense_copy(gy_in);
  Tensor wt = weight.defined() && !weight.is_contiguous() ? dense_copy(weight) : weight;
  int64_t rows = save_mean.numel(), D = x.numel() / rows;
  const T* X = static_cast<const T*>(x.data_ptr());
  const T* G = static_cast<const T*>(gy.data_ptr());
  const T* W = wt.defined() ? static_cast<const T*>(wt.data_ptr()) : nullptr;
  const T* M = static_cast<const T*>(save_mean.data_ptr());
  const T* I = static_cast<const T*>(save_invstd.data_ptr());
  T* GX = static_cast<T*>(gx.data_ptr());
  bool params = gw.defined() || gb.defined();
  std::vector<double> sums(params ? size_t(2 * D) : 0, 0.0);  // gw then gb
#pragma omp parallel if (x.numel() >= kParallelGrain)
  {
    std::vector<double> part(params ? size_t(2 * D) : 0, 0.0);
#pragma omp for schedule(static)
    for (int64_t r = 0; r < rows; ++r) {
      const T* p = X + r * D;
      const T* g = G + r * D;
      T m = M[r], is = I[r];
      double sum_h = 0, sum_hx = 0;
      for (int64_t i = 0; i < D; ++i) {
        double h = double(g[i]) * (W ? double(W[i]) : 1.0), xhat = (double(p[i]) - double(m)) * double(is);
        sum_h += h;
        sum_hx += h * xhat;
        if (params) {
          part[size_t(i)] += double(g[i]) * xhat;
          part[size_t(D + i)] += double(g[i]);
        }
      }
      T mean_h = T(sum_h / double(D)), mean_hx = T(sum_hx / double(D));
      T* out = GX + r * D;
      for (int64_t i = 0; i < D; ++i) {
        T h = g[i] * (W ? W[i] : T(1)), xhat = (p[i] - m) * is;
        out[i] = is * (h - mean_h - xhat * mean_hx);
      }
    }
    if (params) {
#pragma omp critical
      for (size_t i = 0; i < sums.size(); ++i) sums[i] += part[i];
    }
  }
  if (gw.defined())
    for (int64_t i = 0; i < D; ++i) static_cast<T*>(gw.data_ptr())[i] = T(sums[size_t(i)]);
  if (gb.defined())
    for (int64_t i = 0; i < D; ++i) static_cast<T*>(gb.data_ptr())[i] = T(sums[size_t(D + i)]);
}

}  // namespace

void CpuBackend::batch_norm_forward(const Tensor& out, const Tensor& save_mean, const Tensor& save_invstd,
                                    const Tensor& x, const Tensor& weight, const Tensor& bias,
                                    const Tensor& running_mean, const Tensor& running_var, bool training,
                                    double momentum, double eps) {
  dispatch_float(x.dtype(), "batch_norm", [&]<typename T>() {
    bn_forward<T>(out, save_mean, save_invstd, x, weight, bias, running_mean, running_var, training, momentum, eps);
  });
}

void CpuBackend::batch_norm_backward(const Tensor& gx, const Tensor& gw, const Tensor& gb, const Tensor& gy,
                                     const Tensor& x, const Tensor& weight, const Tensor& save_mean,
                                     const Tensor& save_invstd, bool training) {
  dispatch_float(x.dtype(), "batch_norm", [&]<typename T>() {
    bn_backward<T>(gx, gw, gb, gy, x, weight, save_mean, save_invstd, training);
  });
}

void CpuBackend::layer_norm_forward(const Tensor& out, const Tensor& save_mean, const Tensor& save_invstd,
                                    const Tensor& x, const Tensor& weight, const Tensor& bias, double eps) {
  dispatch_float(x.dtype(), "layer_norm",
                 [&]<typename T>() { ln_forward<T>(out, save_mean, save_invstd, x, weight, bias, eps); });
}

void CpuBackend::layer_norm_backward(const Tensor& gx, const Tensor& gw, const Tensor& gb, const Tensor& gy,
                                     const Tensor& x, const Tensor& weight, const Tensor& save_mean,
                                     const Tensor& save_invstd) {
  dispatch_float(x.dtype(), "layer_norm",
                 [&]<typename T>() { ln_backward<T>(gx, gw, gb, gy, x, weight, save_mean, save_invstd); });
}

}  // namespace reel::cpu
