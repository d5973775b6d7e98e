// Sorting and running sums/products along one dim: sort (stable, NaN above every
// number, as PyTorch; the first k of each row only, for topk) and cumulative.
// Rows are independent: the pool takes rows when there are many, and each row is
// sorted by one thread (std::stable_sort of positions, or a partial sort when k is
// small against n). cumulative walks each line sequentially (a scan has no parallel
// slack inside a line at these sizes) and the lines in parallel.
#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "cpu_backend.h"
#include "loops.h"

namespace reel::cpu {
namespace {

// a < b in the order where NaN is the largest value (and equal to itself)
template <typename T>
inline bool less_nan_last(T a, T b) {
  if constexpr (std::is_floating_point_v<T>) {
    if (std::isnan(a)) return false;
    if (std::isnan(b)) return true;
  }
  return a < b;
}

template <typename T>
void sort_typed(const Tensor& values, const Tensor& indices, const Tensor& x, bool descending) {
  const int64_t rows = x.size(0), n = x.size(1), k = values.size(1);
  const T* xp = x.data<T>();
  T* vp = values.data<T>();
  int64_t* ip = indices.data<int64_t>();
  auto one_row = [&](int64_t r) {
    const T* row = xp + r * n;
    std::vector<int64_t> pos(static_cast<size_t>(n));
    std::iota(pos.begin(), pos.end(), int64_t(0));
    // ties keep their order (stable): compare positions when the values tie
    auto before = [&](int64_t a, int64_t b) {
      bool lt = descending ? less_nan_last(row[b], row[a]) : less_nan_last(row[a], row[b]);
      if (lt) return true;
      bool gt = descending ? less_nan_last(row[a], row[b]) : less_nan_last(row[b], row[a]);
      return !gt && a < b;
    };
    if (k < n / 8) std::partial_sort(pos.begin(), pos.begin() + k, pos.end(), before);
    else std::sort(pos.begin(), pos.end(), before);  // `before` is a total order: stable without stable_sort
    for (int64_t j = 0; j < k; ++j) {
      vp[r * k + j] = row[pos[size_t(j)]];
      ip[r * k + j] = pos[size_t(j)];
    }
  };
  if (rows > 1 && rows * n >= kParallelGrain) {
#pragma omp parallel for schedule(dynamic, 1)
    for (int64_t r = 0; r < rows; ++r) one_row(r);
  } else {
    for (int64_t r = 0; r < rows; ++r) one_row(r);
  }
}

template <typename T>
void cumulative_typed(ScanOp op, const Tensor& out, const Tensor& x, int dim, bool reverse) {
  // lines along dim: every combination of the other dims
  const int nd = x.dim();
  const int64_t n = x.size(dim), xs = x.strides()[dim], os = out.strides()[dim];
  int64_t lines = 1;
  for (int d = 0; d < nd; ++d)
    if (d != dim) lines *= x.size(d);
  const T* xp = x.data<T>();
  T* op_ = out.data<T>();
  auto one_line = [&](int64_t l) {
    int64_t xo = 0, oo = 0, rest = l;
    for (int d = nd - 1; d >= 0; --d) {
      if (d == dim) continue;
      int64_t i = rest % x.size(d);
      rest /= x.size(d);
      xo += i * x.strides()[d];
      oo += i * out.strides()[d];
    }
    using Acc = std::conditional_t<std::is_floating_point_v<T>, T, int64_t>;
    Acc acc = op == ScanOp::sum ? Acc(0) : Acc(1);
    for (int64_t j = 0; j < n; ++j) {
      int64_t i = reverse ? n - 1 - j : j;
      if (op == ScanOp::sum) acc += Acc(xp[xo + i * xs]);
      else acc *= Acc(xp[xo + i * xs]);
      op_[oo + i * os] = T(acc);
    }
  };
  if (lines > 1 && lines * n >= kParallelGrain) {
#pragma omp parallel for schedule(static)
    for (int64_t l = 0; l < lines; ++l) one_line(l);
  } else {
    for (int64_t l = 0; l < lines; ++l) one_line(l);
  }
}

}  // namespace

void CpuBackend::sort(const Tensor& values, const Tensor& indices, const Tensor& x, bool descending) {
  dispatch(x.dtype(), "sort", [&]<typename T>() { sort_typed<T>(values, indices, x, descending); });
}

void CpuBackend::cumulative(ScanOp op, const Tensor& out, const Tensor& x, int dim, bool reverse) {
  dispatch(x.dtype(), "cumulative", [&]<typename T>() {
    if constexpr (std::is_same_v<T, bool>) throw Error("cumulative: bool tensors cannot be summed");
    else cumulative_typed<T>(op, out, x, dim, reverse);
  });
}

}  // namespace reel::cpu
