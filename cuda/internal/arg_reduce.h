// argmax / argmin as a fold: the accumulator, its start value and how two combine, with
// the CPU's semantics (cpu/reduce.cpp): the first NaN wins, else the first extreme. Shared
// by reduce.cu's kernels and by reel_tests, which checks the rules without a GPU
// (test/test_cuda_rules.cpp). Plain C++; no CUDA headers.
//
// The start value is what every lane of a warp, every thread row and every split holds
// before it reads an element, and it meets real elements in every combine. It must lose
// to all of them, ties included: its value is the worst one there is (-inf for argmax of
// a float, +inf for argmin; the lowest / highest integer) and its index is INT64_MAX, past
// every real index, so a tie goes to the real element. (The value `lowest()` for floats
// beat a row of -inf and returned the index INT64_MAX, which the next index op read out of
// bounds.)
#pragma once
#include <cstdint>
#include <limits>

#if defined(__CUDACC__)
#define REEL_ARG_HD __host__ __device__ __forceinline__
#else
#define REEL_ARG_HD inline
#endif

namespace reel::cuda::arg_reduce {

template <typename T>
struct Acc {
  T v;
  int64_t i;
};

constexpr int64_t kNoIndex = std::numeric_limits<int64_t>::max();

template <typename T>
REEL_ARG_HD bool is_nan(T v) {
  return v != v;
}

template <typename T, bool MAX>
REEL_ARG_HD Acc<T> start() {
  if constexpr (std::numeric_limits<T>::has_infinity)
    return Acc<T>{MAX ? -std::numeric_limits<T>::infinity() : std::numeric_limits<T>::infinity(), kNoIndex};
  else
    return Acc<T>{MAX ? std::numeric_limits<T>::lowest() : std::numeric_limits<T>::max(), kNoIndex};
}

template <typename T, bool MAX>
REEL_ARG_HD Acc<T> combine(Acc<T> a, Acc<T> b) {
  bool an = is_nan(a.v), bn = is_nan(b.v);
  if (an || bn) return (an && bn) ? (a.i < b.i ? a : b) : (an ? a : b);  // the first NaN wins
  bool a_better = MAX ? a.v > b.v : a.v < b.v;
  bool b_better = MAX ? b.v > a.v : b.v < a.v;
  return a_better ? a : b_better ? b : (a.i < b.i ? a : b);  // ties: the first index (the start value's is last)
}

}  // namespace reel::cuda::arg_reduce

#undef REEL_ARG_HD
