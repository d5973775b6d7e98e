// Fused softmax cross-entropy on logits [N, C] (any strides) and i64 labels [N].
// Forward: per row, max, log-sum-exp and the (smoothed) loss in two passes over a
// row that stays in L1; the softmax is never written out. Backward: one pass that
// recomputes exp(x - lse) and writes the gradient. Both are memory-bound: logits are
// read from memory once per call, and the f32 exp is a polynomial the compiler vectorises.
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>

#include "cpu_backend.h"
#include "loops.h"
#include "vmath.h"

namespace reel::cpu {
namespace {

// max and log-sum-exp of one row of C values at stride `s` (s == 1: the vectorised path)
template <typename T>
inline T row_lse(const T* x, int64_t C, int64_t s) {
  T m = -std::numeric_limits<T>::infinity();
  T sum = 0;
  if (s == 1) {
#pragma omp simd reduction(max : m)
    for (int64_t c = 0; c < C; ++c) m = x[c] > m ? x[c] : m;
#pragma omp simd reduction(+ : sum)
    for (int64_t c = 0; c < C; ++c) sum += vexp<T>(x[c] - m);
  } else {
    for (int64_t c = 0; c < C; ++c) m = x[c * s] > m ? x[c * s] : m;
    for (int64_t c = 0; c < C; ++c) sum += vexp<T>(x[c * s] - m);
  }
  if (std::isinf(m)) return m;  // a row of -inf (or one +inf) logits: lse is that infinity
  return m + std::log(sum);
}

// Log-sum-exp of up to 8 rows of C <= kFewClasses values, the rows in the vector
// lanes: with C = 10 a vector along a row is mostly remainder, and the per-row loop
// spent ~40 ns a row on W1's [128, 10] logits (now ~10).
constexpr int64_t kFewClasses = 16;
template <typename T>
void lse_8_rows(const T* x, int64_t rs, int64_t cs, int64_t C, int64_t rows, T* lse) {
  T t[kFewClasses][8], m[8], sum[8] = {};
  for (int64_t r = 0; r < 8; ++r)
    for (int64_t c = 0; c < C; ++c) t[c][r] = x[std::min(r, rows - 1) * rs + c * cs];  // lanes past the end repeat a row
  std::fill(m, m + 8, -std::numeric_limits<T>::infinity());
  for (int64_t c = 0; c < C; ++c) {
#pragma omp simd
    for (int r = 0; r < 8; ++r) m[r] = t[c][r] > m[r] ? t[c][r] : m[r];
  }
  for (int64_t c = 0; c < C; ++c) {
#pragma omp simd
    for (int r = 0; r < 8; ++r) sum[r] += vexp<T>(t[c][r] - m[r]);
  }
  T out[8];
#pragma omp simd
  for (int r = 0; r < 8; ++r) out[r] = m[r] + vlog<T>(sum[r]);
  for (int64_t r = 0; r < rows; ++r) lse[r] = std::isinf(m[r]) ? m[r] : out[r];
}

template <typename T>
inline T row_sum(const T* x, int64_t C, int64_t s) {
  T sum = 0;
  if (s == 1) {
#pragma omp simd reduction(+ : sum)
    for (int64_t c = 0; c < C; ++c) sum += x[c];
  } else {
    for (int64_t c = 0; c < C; ++c) sum += x[c * s];
  }
  return sum;
}

// loss_n = lse - (1-eps) x[y] - (eps/C) sum_c x[c]   (= (1-eps) nll + eps mean_c(-log p_c))
template <typename T>
void ce_forward(const Tensor& losses, const Tensor& lse, const Tensor& logits, const Tensor& labels, double eps,
                int64_t ignore) {
  const int64_t N = logits.shape()[0], C = logits.shape()[1];
  const int64_t rs = logits.strides()[0], cs = logits.strides()[1];
  const T* x = logits.data<T>();
  const int64_t* y = labels.data<int64_t>();
  const int64_t ys = labels.strides()[0];
  T* out = losses.data<T>();
  T* l = lse.data<T>();
  const T on = T(1 - eps), off = T(eps / double(C));
  const bool few = C <= kFewClasses;
  // blocks of 8 rows, so that the few-classes path never splits its rows between threads
#pragma omp parallel for schedule(static) if (N * C >= kParallelGrain && N > 8)
  for (int64_t b = 0; b < N; b += 8) {
    const int64_t rows = std::min<int64_t>(8, N - b);
    if (few) lse_8_rows(x + b * rs, rs, cs, C, rows, l + b);
    for (int64_t n = b; n < b + rows; ++n) {
      const T* row = x + n * rs;
      T v = few ? l[n] : row_lse(row, C, cs);
      l[n] = v;
      int64_t label = y[n * ys];
      if (label == ignore) {
        out[n] = 0;
        continue;
      }
      T loss = v - on * row[label * cs];
      if (off != T(0)) loss -= off * row_sum(row, C, cs);
      out[n] = loss;
    }
  }
}

// g[n, c] = gloss[n] (exp(x[n, c] - lse[n]) - (1-eps) [c == y[n]] - eps/C); 0 on ignored rows
template <typename T>
void ce_backward(const Tensor& glogits, const Tensor& glosses, const Tensor& logits, const Tensor& lse,
                 const Tensor& labels, double eps, int64_t ignore) {
  const int64_t N = logits.shape()[0], C = logits.shape()[1];
  const int64_t rs = logits.strides()[0], cs = logits.strides()[1];
  const int64_t grs = glogits.strides()[0], gcs = glogits.strides()[1];
  const T* x = logits.data<T>();
  const T* gl = glosses.data<T>();
  const int64_t gs = glosses.strides()[0];  // 0 when the upstream gradient is a broadcast scalar (mean, sum)
  const T* l = lse.data<T>();
  const int64_t ls = lse.strides()[0];
  const int64_t* y = labels.data<int64_t>();
  const int64_t ys = labels.strides()[0];
  T* g = glogits.data<T>();
  const T on = T(1 - eps), off = T(eps / double(C));
#pragma omp parallel for schedule(static) if (N * C >= kParallelGrain && N > 1)
  for (int64_t n = 0; n < N; ++n) {
    T* grow = g + n * grs;
    int64_t label = y[n * ys];
    if (label == ignore) {  // written as zero, not 0 * g: g may be inf/nan when every row is ignored
      for (int64_t c = 0; c < C; ++c) grow[c * gcs] = 0;
      continue;
    }
    const T* row = x + n * rs;
    const T scale = gl[n * gs], v = l[n * ls], shift = off * scale;
    if (cs == 1 && gcs == 1) {
      // Flushed: over many classes most e^(x - lse) / N land below FLT_MIN, and the
      // weight-gradient GEMM that reads them ran 3x slower on the subnormal operands (W8).
#pragma omp simd
      for (int64_t c = 0; c < C; ++c) {
        T gc = scale * vexp<T>(row[c] - v) - shift;
        if constexpr (std::is_same_v<T, float>) gc = flush_subnormal(gc);
        grow[c] = gc;
      }
    } else {
      for (int64_t c = 0; c < C; ++c) grow[c * gcs] = scale * vexp<T>(row[c * cs] - v) - shift;
    }
    grow[label * gcs] -= on * scale;
  }
}

}  // namespace

void CpuBackend::cross_entropy_forward(const Tensor& losses, const Tensor& lse, const Tensor& logits,
                                       const Tensor& labels, double label_smoothing, int64_t ignore_index) {
  dispatch_float(logits.dtype(), "cross_entropy", [&]<typename T>() {
    ce_forward<T>(losses, lse, logits, labels, label_smoothing, ignore_index);
  });
}

void CpuBackend::cross_entropy_backward(const Tensor& glogits, const Tensor& glosses, const Tensor& logits,
                                        const Tensor& lse, const Tensor& labels, double label_smoothing,
                                        int64_t ignore_index) {
  dispatch_float(logits.dtype(), "cross_entropy", [&]<typename T>() {
    ce_backward<T>(glogits, glosses, logits, lse, labels, label_smoothing, ignore_index);
  });
}

}  // namespace reel::cpu
