// The index arithmetic of 2-D pooling on CUDA (cuda/pool.cu), as host and device functions:
// no CUDA header, so that reel_tests checks every rule on any machine
// (test/test_cuda_pool_geometry.cpp), and the kernels call these very functions.
//
// Layouts: every tensor of a pooling call may have its own. Under the low-precision layer
// (tensor/low_precision_backend.h) an f16/bf16 pool runs on contiguous f32 twins of x, out
// and gx while `indices` keeps the caller's channels-last strides; a channels-last backend
// (Backend::channels_last) hands over NHWC out, indices and gx wherever x is NHWC. So a
// kernel addresses each tensor through its own sizes and element strides (PoolTensor), and
// walks the tensor it writes in that tensor's memory order (PoolTensor::at): consecutive
// threads then store to consecutive addresses, and for NHWC they take consecutive channels,
// whose window reads in an NHWC x are consecutive too. For a contiguous tensor the walk is
// the row-major N, C, H, W order the kernels always had, so their results stay bit for bit.
//
// Indices keep one meaning whatever the layout: the flat h * W + w within the (n, c) plane,
// as PyTorch and the CPU define it.
// Internal to cuda/.
#pragma once
#include <cstdint>

#ifdef __CUDACC__
#define REEL_POOL_FN __host__ __device__ __forceinline__
#else
#define REEL_POOL_FN inline
#endif

namespace reel::cuda::geometry {

REEL_POOL_FN int64_t pool_min(int64_t a, int64_t b) { return a < b ? a : b; }
REEL_POOL_FN int64_t pool_max(int64_t a, int64_t b) { return a > b ? a : b; }

// one element's coordinates in [N, C, H, W]
struct Nchw {
  int64_t n, c, h, w;
};

// One 4-D tensor [N, C, H, W] as a pooling kernel addresses it.
struct PoolTensor {
  int64_t size[4] = {1, 1, 1, 1};    // N, C, H, W
  int64_t stride[4] = {0, 0, 0, 0};  // elements
  int64_t radix[4] = {1, 1, 1, 1};   // the sizes in memory order, outermost first
  int place[4] = {0, 1, 2, 3};       // dim d's position in that order

  REEL_POOL_FN int64_t numel() const { return size[0] * size[1] * size[2] * size[3]; }
  REEL_POOL_FN int64_t offset(int64_t n, int64_t c, int64_t h, int64_t w) const {
    return n * stride[0] + c * stride[1] + h * stride[2] + w * stride[3];
  }
  REEL_POOL_FN int64_t offset(const Nchw& e) const { return offset(e.n, e.c, e.h, e.w); }

  // The i-th element in memory order (0 <= i < numel()): i read as a mixed-radix number
  // whose digits are the dims from outermost to innermost. Three divisions, as the
  // row-major decomposition had; the digits are picked by select, not by a dynamic array
  // index (which would put them in local memory on the GPU).
  REEL_POOL_FN Nchw at(int64_t i) const {
    int64_t d[4];
    int64_t q = i / radix[3];
    d[3] = i - q * radix[3];
    i = q;
    q = i / radix[2];
    d[2] = i - q * radix[2];
    i = q;
    q = i / radix[1];
    d[1] = i - q * radix[1];
    d[0] = q;
    return {digit(d, place[0]), digit(d, place[1]), digit(d, place[2]), digit(d, place[3])};
  }

 private:
  REEL_POOL_FN static int64_t digit(const int64_t (&d)[4], int k) {
    return k == 0 ? d[0] : k == 1 ? d[1] : k == 2 ? d[2] : d[3];
  }
};

// A tensor of these sizes and element strides (anything with operator[]: Dims, arrays).
// Memory order: dims by stride, largest outermost; size-1 dims, whose coordinate is always
// 0, go outermost (their strides are arbitrary); ties keep N, C, H, W order. A contiguous
// tensor's dims of size > 1 have strictly falling strides, so its walk is row-major.
template <typename Sizes, typename Strides>
inline PoolTensor pool_tensor(const Sizes& sizes, const Strides& strides) {
  PoolTensor t;
  int order[4] = {0, 1, 2, 3};
  for (int d = 0; d < 4; ++d) {
    t.size[d] = int64_t(sizes[d]);
    t.stride[d] = int64_t(strides[d]);
  }
  auto outer = [&](int a, int b) {  // a strictly before b
    const bool a1 = t.size[a] == 1, b1 = t.size[b] == 1;
    if (a1 != b1) return a1;
    return !a1 && t.stride[a] > t.stride[b];
  };
  for (int k = 1; k < 4; ++k)  // stable insertion sort: ties keep their order
    for (int j = k; j > 0 && outer(order[j], order[j - 1]); --j) {
      const int s = order[j];
      order[j] = order[j - 1];
      order[j - 1] = s;
    }
  for (int k = 0; k < 4; ++k) {
    t.radix[k] = t.size[order[k]];
    t.place[order[k]] = k;
  }
  return t;
}

// The window of one pooling call: input h x w, output oh x ow, kernel, stride, padding.
struct PoolWindow {
  int64_t h = 0, w = 0, oh = 0, ow = 0;
  int kh = 1, kw = 1, sh = 1, sw = 1, ph = 0, pw = 0;
  bool include_pad = true;  // avg pooling's count_include_pad
};

// rows [h0, h1), columns [w0, w1)
struct Span2 {
  int64_t h0, h1, w0, w1;
};

// Output (oh, ow)'s window clipped to the input (max and avg pooling's forward).
REEL_POOL_FN Span2 pool_window(const PoolWindow& g, int64_t oh, int64_t ow) {
  const int64_t hs = oh * g.sh - g.ph, ws = ow * g.sw - g.pw;
  return {pool_max(hs, 0), pool_min(hs + g.kh, g.h), pool_max(ws, 0), pool_min(ws + g.kw, g.w)};
}

// The outputs whose windows contain input (y, x) (the backward gathers): output o's
// window holds rows [o sh - ph, o sh - ph + kh).
REEL_POOL_FN Span2 pool_outputs_of(const PoolWindow& g, int64_t y, int64_t x) {
  return {y + g.ph < g.kh ? 0 : (y + g.ph - g.kh) / g.sh + 1, pool_min((y + g.ph) / g.sh + 1, g.oh),
          x + g.pw < g.kw ? 0 : (x + g.pw - g.kw) / g.sw + 1, pool_min((x + g.pw) / g.sw + 1, g.ow)};
}

// avg pooling's divisor of output (oh, ow): the window's size clipped to the padded input
// (count_include_pad), or to the input.
REEL_POOL_FN int64_t avg_divisor(const PoolWindow& g, int64_t oh, int64_t ow) {
  int64_t hs = oh * g.sh - g.ph, ws = ow * g.sw - g.pw;
  int64_t he = pool_min(hs + g.kh, g.h + g.ph), we = pool_min(ws + g.kw, g.w + g.pw);
  const int64_t pool = (he - hs) * (we - ws);
  if (g.include_pad) return pool;
  hs = pool_max(hs, 0);
  ws = pool_max(ws, 0);
  he = pool_min(he, g.h);
  we = pool_min(we, g.w);
  return pool_max((he - hs) * (we - ws), int64_t(1));
}

// adaptive windows along one dim: [floor(o in / out), ceil((o + 1) in / out))
REEL_POOL_FN int64_t adaptive_start(int64_t o, int64_t in, int64_t out) { return (o * in) / out; }
REEL_POOL_FN int64_t adaptive_end(int64_t o, int64_t in, int64_t out) { return ((o + 1) * in + out - 1) / out; }
REEL_POOL_FN Span2 adaptive_window(const PoolWindow& g, int64_t oh, int64_t ow) {
  return {adaptive_start(oh, g.h, g.oh), adaptive_end(oh, g.h, g.oh), adaptive_start(ow, g.w, g.ow),
          adaptive_end(ow, g.w, g.ow)};
}
// The outputs whose adaptive windows may contain input (y, x): a superset, which the
// backward narrows with adaptive_window.
REEL_POOL_FN Span2 adaptive_candidates(const PoolWindow& g, int64_t y, int64_t x) {
  return {(y * g.oh) / g.h, pool_min(((y + 1) * g.oh + g.h - 1) / g.h, g.oh), (x * g.ow) / g.w,
          pool_min(((x + 1) * g.ow + g.w - 1) / g.w, g.ow)};
}

}  // namespace reel::cuda::geometry
