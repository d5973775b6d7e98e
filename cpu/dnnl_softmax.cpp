// Softmax and log-softmax along one dim, forward and backward. Memory-bound; every
// path subtracts the max first so large logits do not overflow.
// f32 along the innermost dim: oneDNN's softmax (its JIT exp, wider vectors than
// ours). f64 along the innermost dim: our row loops. A dim with others inside it
// (x seen as [outer, n, inner]): loops over (outer, block of inner columns), the
// inner columns vectorised.
#include <algorithm>
#include <cmath>
#include <limits>

#include "cpu_backend.h"
#include "dnnl_common.h"
#include "loops.h"
#include "vmath.h"

namespace reel::cpu {
namespace {

struct Layout {
  int64_t outer = 1, n = 1, inner = 1;
};
Layout layout(const Tensor& t, int dim) {
  Layout l;
  for (int d = 0; d < t.dim(); ++d) {
    if (d < dim) l.outer *= t.shape()[d];
    else if (d == dim) l.n = t.shape()[d];
    else l.inner *= t.shape()[d];
  }
  return l;
}

Tensor dense(const Tensor& t) { return t.is_contiguous() ? t : dense_copy(t); }

struct SoftmaxPlan {
  dnnl::memory::desc md;
  dnnl::primitive prim;
};

// rows [outer, n] with the softmax along n
SoftmaxPlan& plan_for(const Layout& l, bool log, bool backward) {
  PlanKey key;
  key.add(l.outer), key.add(l.n), key.add(log), key.add(backward);
  thread_local PlanCache<SoftmaxPlan> cache;
  return cache.get(key, [&] {
    SoftmaxPlan p;
    p.md = dnnl::memory::desc({l.outer, l.n}, dnnl::memory::data_type::f32, dnnl::memory::format_tag::ab);
    auto alg = log ? dnnl::algorithm::softmax_log : dnnl::algorithm::softmax_accurate;
    dnnl::softmax_v2_forward::primitive_desc fwd(
        dnnl::softmax_v2_forward::desc(dnnl::prop_kind::forward_training, alg, p.md, p.md, 1), dnnl_engine());
    if (!backward) {
      p.prim = dnnl::softmax_v2_forward(fwd);
    } else {
      dnnl::softmax_v2_backward::primitive_desc bwd(dnnl::softmax_v2_backward::desc(alg, p.md, p.md, p.md, 1),
                                                    dnnl_engine(), fwd);
      p.prim = dnnl::softmax_v2_backward(bwd);
    }
    return p;
  });
}

// Calls f(outer index, first inner column, column count) over blocks of columns.
template <typename F>
void for_blocks(const Layout& l, F f) {
  constexpr int64_t kBlock = 64;
  int64_t blocks = (l.inner + kBlock - 1) / kBlock;
#pragma omp parallel for schedule(static) if (l.outer * l.n * l.inner >= kParallelGrain)
  for (int64_t b = 0; b < l.outer * blocks; ++b) {
    int64_t i0 = b % blocks * kBlock;
    f(b / blocks, i0, std::min(kBlock, l.inner - i0));
  }
}

// A row whose max is +inf is NaN throughout, as PyTorch (e^(inf - inf) = NaN poisons the
// sum there; here the vectorised exp need not propagate it, so the row says it outright).
template <typename T>
bool poisoned(T row_max) {
  return row_max == std::numeric_limits<T>::infinity();
}

// oneDNN's f32 softmax leaves a row holding +inf NaN at the inf and 0 elsewhere (log_softmax:
// -inf elsewhere);
// a NaN anywhere in a row of its output (a NaN or +inf input) makes the row NaN, as PyTorch.
// One pass over the output just written, in cache for rows of moderate size.
void spread_nan_rows(const Tensor& out, const Layout& l) {
  float* Y = static_cast<float*>(out.data_ptr());
#pragma omp parallel for schedule(static) if (l.outer * l.n >= kParallelGrain)
  for (int64_t r = 0; r < l.outer; ++r) {
    float* y = Y + r * l.n;
    int nan = 0;
#pragma omp simd reduction(| : nan)
    for (int64_t i = 0; i < l.n; ++i) nan |= y[i] != y[i];
    if (nan) std::fill(y, y + l.n, std::numeric_limits<float>::quiet_NaN());
  }
}

// oneDNN's f32 backward gives finite or infinite values in a row whose forward output is NaN
// (a row holding +inf: -inf at the inf for log_softmax); PyTorch's formulas (y (g - sum g y),
// g - e^y sum g) make every element of such a row NaN. The row's y is all NaN or NaN-free
// (spread_nan_rows), so its first element tells.
void nan_rows_of_y(const Tensor& gx, const Tensor& y, const Layout& l) {
  const float* Y = static_cast<const float*>(y.data_ptr());
  float* G = static_cast<float*>(gx.data_ptr());
#pragma omp parallel for schedule(static) if (l.outer * l.n >= kParallelGrain)
  for (int64_t r = 0; r < l.outer; ++r)
    if (l.n && Y[r * l.n] != Y[r * l.n])
      std::fill(G + r * l.n, G + (r + 1) * l.n, std::numeric_limits<float>::quiet_NaN());
}

// Rows [outer, n], softmax along n: the max, then e^(x - max) and its sum in one
// vectorised pass; log_softmax takes one accurate log per row.
template <typename T>
void forward_rows(const Tensor& out, const Tensor& x_in, const Layout& l, bool log) {
  Tensor x = dense(x_in);
  const T* X = static_cast<const T*>(x.data_ptr());
  T* Y = static_cast<T*>(out.data_ptr());
  int64_t n = l.n;
#pragma omp parallel for schedule(static) if (l.outer * n >= kParallelGrain)
  for (int64_t r = 0; r < l.outer; ++r) {
    const T* xp = X + r * n;
    T* y = Y + r * n;
    T m = -std::numeric_limits<T>::infinity(), sum = 0;
#pragma omp simd reduction(max : m)
    for (int64_t i = 0; i < n; ++i) m = xp[i] > m ? xp[i] : m;
    if (log) {
#pragma omp simd reduction(+ : sum)
      for (int64_t i = 0; i < n; ++i) sum += vexp<T>(xp[i] - m);
      T lse = poisoned(m) ? std::numeric_limits<T>::quiet_NaN() : std::isinf(m) ? m : m + std::log(sum);
#pragma omp simd
      for (int64_t i = 0; i < n; ++i) y[i] = xp[i] - lse;
    } else {
#pragma omp simd reduction(+ : sum)
      for (int64_t i = 0; i < n; ++i) {
        y[i] = vexp<T>(xp[i] - m);
        sum += y[i];
      }
      T inv = poisoned(m) ? std::numeric_limits<T>::quiet_NaN() : T(1) / sum;
#pragma omp simd
      for (int64_t i = 0; i < n; ++i) y[i] *= inv;
    }
  }
}

// softmax: gx = y (g - sum g y); log_softmax: gx = g - e^y sum g; per row
template <typename T>
void backward_rows(const Tensor& gx, const Tensor& gy_in, const Tensor& y, const Layout& l, bool log) {
  Tensor gy = dense(gy_in);
  const T* G = static_cast<const T*>(gy.data_ptr());
  const T* Y = static_cast<const T*>(y.data_ptr());
  T* GX = static_cast<T*>(gx.data_ptr());
  int64_t n = l.n;
#pragma omp parallel for schedule(static) if (l.outer * n >= kParallelGrain)
  for (int64_t r = 0; r < l.outer; ++r) {
    const T *g = G + r * n, *yp = Y + r * n;
    T* out = GX + r * n;
    T dot = 0;
    if (log) {
#pragma omp simd reduction(+ : dot)
      for (int64_t i = 0; i < n; ++i) dot += g[i];
#pragma omp simd
      for (int64_t i = 0; i < n; ++i) out[i] = g[i] - vexp<T>(yp[i]) * dot;
    } else {
#pragma omp simd reduction(+ : dot)
      for (int64_t i = 0; i < n; ++i) dot += g[i] * yp[i];
#pragma omp simd
      for (int64_t i = 0; i < n; ++i) out[i] = yp[i] * (g[i] - dot);
    }
  }
}

// y[o, :, i] = softmax (or log_softmax) of x[o, :, i]
template <typename T>
void forward_loops(const Tensor& out, const Tensor& x_in, const Layout& l, bool log) {
  Tensor x = dense(x_in);
  const T* X = static_cast<const T*>(x.data_ptr());
  T* Y = static_cast<T*>(out.data_ptr());
  for_blocks(l, [&](int64_t o, int64_t i0, int64_t cols) {
    T mx[64], sum[64];
    const T* xp = X + o * l.n * l.inner + i0;
    T* yp = Y + o * l.n * l.inner + i0;
    std::fill(mx, mx + cols, -std::numeric_limits<T>::infinity());
    std::fill(sum, sum + cols, T(0));
    for (int64_t j = 0; j < l.n; ++j)
      for (int64_t i = 0; i < cols; ++i) mx[i] = std::max(mx[i], xp[j * l.inner + i]);
    for (int64_t j = 0; j < l.n; ++j)
      for (int64_t i = 0; i < cols; ++i) {
        T e = vexp<T>(xp[j * l.inner + i] - mx[i]);
        if (!log) yp[j * l.inner + i] = e;
        sum[i] += e;
      }
    for (int64_t i = 0; i < cols; ++i)
      sum[i] = poisoned(mx[i]) ? std::numeric_limits<T>::quiet_NaN() : log ? mx[i] + std::log(sum[i]) : T(1) / sum[i];
    for (int64_t j = 0; j < l.n; ++j)
      for (int64_t i = 0; i < cols; ++i) {
        T& y = yp[j * l.inner + i];
        y = log ? xp[j * l.inner + i] - sum[i] : y * sum[i];
      }
  });
}

// softmax: gx = y (g - sum_j g y); log_softmax: gx = g - e^y sum_j g
template <typename T>
void backward_loops(const Tensor& gx, const Tensor& gy_in, const Tensor& y, const Layout& l, bool log) {
  Tensor gy = dense(gy_in);
  const T* G = static_cast<const T*>(gy.data_ptr());
  const T* Y = static_cast<const T*>(y.data_ptr());
  T* GX = static_cast<T*>(gx.data_ptr());
  for_blocks(l, [&](int64_t o, int64_t i0, int64_t cols) {
    T dot[64];
    int64_t base = o * l.n * l.inner + i0;
    const T *gp = G + base, *yp = Y + base;
    T* out = GX + base;
    std::fill(dot, dot + cols, T(0));
    for (int64_t j = 0; j < l.n; ++j)
      for (int64_t i = 0; i < cols; ++i) dot[i] += log ? gp[j * l.inner + i] : gp[j * l.inner + i] * yp[j * l.inner + i];
    for (int64_t j = 0; j < l.n; ++j)
      for (int64_t i = 0; i < cols; ++i) {
        int64_t k = j * l.inner + i;
        out[k] = log ? gp[k] - vexp<T>(yp[k]) * dot[i] : yp[k] * (gp[k] - dot[i]);
      }
  });
}

}  // namespace

void CpuBackend::softmax_forward(const Tensor& out, const Tensor& x, int dim, bool log) {
  Layout l = layout(x, dim);
  if (x.dtype() == DType::f32 && l.inner == 1) {
    Tensor xd = dense(x);
    SoftmaxPlan& p = plan_for(l, log, false);
    p.prim.execute(dnnl_stream(), {{DNNL_ARG_SRC, memory_of(p.md, xd)}, {DNNL_ARG_DST, memory_of(p.md, out)}});
    dnnl_stream().wait();
    spread_nan_rows(out, l);
    return;
  }
  dispatch_float(x.dtype(), "softmax", [&]<typename T>() {
    if (l.inner == 1) forward_rows<T>(out, x, l, log);
    else forward_loops<T>(out, x, l, log);
  });
}

void CpuBackend::softmax_backward(const Tensor& gx, const Tensor& gy, const Tensor& y, int dim, bool log) {
  Layout l = layout(y, dim);
  if (y.dtype() == DType::f32 && l.inner == 1) {
    Tensor gd = dense(gy), yd = dense(y);
    SoftmaxPlan& p = plan_for(l, log, true);
    p.prim.execute(dnnl_stream(), {{DNNL_ARG_DST, memory_of(p.md, yd)},
                                   {DNNL_ARG_DIFF_DST, memory_of(p.md, gd)},
                                   {DNNL_ARG_DIFF_SRC, memory_of(p.md, gx)}});
    dnnl_stream().wait();
    nan_rows_of_y(gx, yd, l);
    return;
  }
  dispatch_float(y.dtype(), "softmax", [&]<typename T>() {
    if (l.inner == 1) backward_rows<T>(gx, gy, y, l, log);
    else backward_loops<T>(gx, gy, y, l, log);
  });
}

}  // namespace reel::cpu
