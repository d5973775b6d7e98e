// Layer normalisation over the last D elements of each row, forward and backward.
// Memory-bound: per row two passes for the statistics (the centred variance) and one for
// the output, sums in double; the backward's column sums per thread, added in thread order
// (the same bits on every run with the same thread count).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <omp.h>
#include <vector>

#include "cpu_backend.h"
#include "dnnl_common.h"
#include "loops.h"

namespace reel::cpu {
namespace {

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
// gw = sum over rows of g xhat, gb = sum over rows of g (per-thread partial sums, then
// added in thread order).
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
  // Each thread's column sums (gw then gb) in a slot of its own, added up in thread order
  // afterwards: the same bits on every run with the same thread count (adding in the order
  // the threads finished, from 3 threads on, was not)
  const int64_t slots = omp_get_max_threads();
  std::vector<double> partials(params ? size_t(slots * 2 * D) : 0, 0.0);
#pragma omp parallel if (x.numel() >= kParallelGrain)
  {
    double* part = params ? partials.data() + size_t(omp_get_thread_num()) * size_t(2 * D) : nullptr;
    // This thread's rows as OpenMP's static schedule deals them (libgomp: the first
    // rows % threads threads one more), so each thread's column sums, and their bits,
    // are those of a plain `omp for` over the rows.
    const int64_t threads = omp_get_num_threads(), t = omp_get_thread_num();
    const int64_t q = rows / threads, extra = rows % threads;
    const int64_t r0 = t * q + std::min(t, extra), r1 = r0 + q + (t < extra ? 1 : 0);
    constexpr int64_t kRows = 4;
    for (int64_t r = r0; r < r1; r += kRows) {
      const int64_t k = std::min(kRows, r1 - r);
      const T* p[kRows];
      const T* g[kRows];
      double m[kRows], is[kRows], sum_h[kRows] = {}, sum_hx[kRows] = {};
      for (int64_t j = 0; j < kRows; ++j) {
        const int64_t row = r + std::min(j, k - 1);  // a short block repeats its last row, unused
        p[j] = X + row * D, g[j] = G + row * D, m[j] = double(M[row]), is[j] = double(I[row]);
      }
      // Each row's two sums in index order, as one row alone would take them; four rows'
      // chains side by side, since one chain waits on each add (4 cycles an element).
      for (int64_t i = 0; i < D; ++i) {
        const double w = W ? double(W[i]) : 1.0;
        for (int64_t j = 0; j < kRows; ++j) {
          double h = double(g[j][i]) * w, xhat = (double(p[j][i]) - m[j]) * is[j];
          sum_h[j] += h;
          sum_hx[j] += h * xhat;
        }
      }
      if (params) {  // the column sums row after row, vectorised across the columns
        // rows j0 .. j0 + K - 1 of the block; K fixed, so that the inner loop unrolls
        auto columns = [&]<int64_t K>(int64_t j0) {
          double* pw = part;
          double* pb = part + D;
#pragma omp simd
          for (int64_t i = 0; i < D; ++i) {
            double cw = pw[i], cb = pb[i];
            for (int64_t j = j0; j < j0 + K; ++j) {
              double xhat = (double(p[j][i]) - m[j]) * is[j];
              cw += double(g[j][i]) * xhat;
              cb += double(g[j][i]);
            }
            pw[i] = cw, pb[i] = cb;
          }
        };
        if (k == kRows) columns.template operator()<kRows>(0);
        else
          for (int64_t j = 0; j < k; ++j) columns.template operator()<1>(j);  // a short block: a row at a time
      }
      for (int64_t j = 0; j < k; ++j) {
        const T mt = M[r + j], it = I[r + j];
        T mean_h = T(sum_h[j] / double(D)), mean_hx = T(sum_hx[j] / double(D));
        const T* pj = p[j];
        const T* gj = g[j];
        T* out = GX + (r + j) * D;
        for (int64_t i = 0; i < D; ++i) {
          T h = gj[i] * (W ? W[i] : T(1)), xhat = (pj[i] - mt) * it;
          out[i] = it * (h - mean_h - xhat * mean_hx);
        }
      }
    }
  }
  std::vector<double> sums(params ? size_t(2 * D) : 0, 0.0);
  for (int64_t t = 0; t < (params ? slots : 0); ++t)
    for (size_t i = 0; i < sums.size(); ++i) sums[i] += partials[size_t(t) * sums.size() + i];
  if (gw.defined())
    for (int64_t i = 0; i < D; ++i) static_cast<T*>(gw.data_ptr())[i] = T(sums[size_t(i)]);
  if (gb.defined())
    for (int64_t i = 0; i < D; ++i) static_cast<T*>(gb.data_ptr())[i] = T(sums[size_t(D + i)]);
}

}  // namespace

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
