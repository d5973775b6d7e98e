// Batch norm and layer norm, forward and backward, PyTorch's formulas; statistics
// accumulate in double (one pass of sum and sum of squares, no cancellation worth
// the name for float data), outputs are written in the tensor's dtype.
//
// batch_norm, x [N, C, S] (S = the spatial size, 1 for BatchNorm1d), contiguous:
//   per-channel sums: a block per (channel, split of N*S), or, when S == 1, 32
//   channels per block on consecutive addresses; partial sums [splits, C] are combined
//   by one thread per channel, which also writes save_mean/save_invstd, updates the
//   running statistics (unbiased variance) and folds weight and bias into one scale and
//   shift per channel; then y = x * scale[c] + shift[c], elementwise.
//   Eval: the running statistics give the scale and shift (and save_mean/save_invstd,
//   which the backward reads). Backward: the same sums over gy and gy (x - mean) give
//   gb and gw, and gx = a[c] gy + b[c] (x - mean[c]) + d[c].
// batch_norm_relu, REEL_CUDA_BN_RELU=fused (internal/bn_relu.h): the same sums, finish and
//   elementwise kernels over each group of pieces of the never-made concatenation, each
//   piece read where it lies (geometry::bn_piece_groups: up to 32 pieces a launch, so a
//   DenseNet norm is 3 launches forward and 3 backward): y = relu(x * scale + shift) in the
//   pass that writes y; backward, gy masked by y > 0 inside the sums and inside the pass that
//   writes each piece's gx into its own tensor. The arithmetic is the separate path's (batch
//   norm's kernels, then relu / relu_backward) in the same order over the same split of the
//   sums, so up to 32 pieces give its bits. Full passes over a tensor of y's size: forward 3
//   where separate takes 5 (relu's read and write of y); backward 7 where separate takes 8
//   (the masked gradient's write; its two reads become reads of gy and y); several pieces
//   also save the joined copies (x's write and read, forward and again backward, and gx's
//   read and write into the pieces) and their launches.
// layer_norm, x [rows, D]: a warp per row (D <= 1024) or a block per row; two reads of
//   the row (sums, then the normalised write) that the second finds in cache. Backward:
//   per row two sums give gx; gw and gb are column sums over rows, 32 columns per
//   block, split over rows and combined in a fixed order.
// Floor: memory bandwidth (x read twice or three times, y written once).
#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <optional>
#include <string>
#include <vector>

#include "cuda.h"
#include "internal/allocator.h"
#include "internal/bn_relu.h"
#include "internal/env_switch.h"
#include "internal/launch_geometry.h"
#include "elementwise.cuh"

namespace reel::cuda {
namespace {

constexpr unsigned kFull = 0xffffffffu;

__device__ __forceinline__ double2 add2(double2 a, double2 b) { return make_double2(a.x + b.x, a.y + b.y); }

// Sum over a group of TPR threads (32: a warp; kThreads: the block), given to every thread of it.
template <int TPR>
__device__ __forceinline__ double2 group_sum(double2 v, double2* smem) {
  for (int o = 16; o > 0; o >>= 1) {
    v.x += __shfl_down_sync(kFull, v.x, o);
    v.y += __shfl_down_sync(kFull, v.y, o);
  }
  if constexpr (TPR == 32) {
    v.x = __shfl_sync(kFull, v.x, 0);
    v.y = __shfl_sync(kFull, v.y, 0);
    return v;
  } else {
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    if (lane == 0) smem[warp] = v;
    __syncthreads();
    if (warp == 0) {
      v = lane < kThreads / 32 ? smem[lane] : make_double2(0, 0);
      for (int o = 16; o > 0; o >>= 1) {
        v.x += __shfl_down_sync(kFull, v.x, o);
        v.y += __shfl_down_sync(kFull, v.y, o);
      }
      if (lane == 0) smem[0] = v;
    }
    __syncthreads();
    v = smem[0];
    __syncthreads();
    return v;
  }
}

// ---- batch norm
// What a channel sum accumulates: (x, x^2) for statistics, (gy, gy (x - mean)) for gradients.
struct BnSums {
  const void* x;
  const void* gy;     // null: statistics
  const void* mean;   // per channel, with gy
  int64_t n, c, s;    // x is [n, c, s]
};

template <typename T>
__device__ __forceinline__ double2 term(const BnSums& a, int64_t off, int64_t ch) {
  double x = double(static_cast<const T*>(a.x)[off]);
  if (!a.gy) return make_double2(x, x * x);
  double g = double(static_cast<const T*>(a.gy)[off]);
  return make_double2(g, g * (x - double(static_cast<const T*>(a.mean)[ch])));
}

// grid (C, splits): block (c, k) sums the elements of channel c in its part of [0, N*S)
template <typename T>
__global__ void __launch_bounds__(kThreads) bn_sums_planes(BnSums a, double2* partial, int64_t chunk) {
  __shared__ double2 smem[kThreads / 32];
  int64_t ch = blockIdx.x, total = a.n * a.s;
  int64_t lo = int64_t(blockIdx.y) * chunk, hi = lo + chunk < total ? lo + chunk : total;
  double2 acc = make_double2(0, 0);
  for (int64_t i = lo + threadIdx.x; i < hi; i += kThreads) {
    int64_t n = i / a.s, s = i - n * a.s;
    acc = add2(acc, term<T>(a, (n * a.c + ch) * a.s + s, ch));
  }
  acc = group_sum<kThreads>(acc, smem);
  if (threadIdx.x == 0) partial[int64_t(blockIdx.y) * a.c + ch] = acc;
}

// S == 1: block (32 channels, 8 row groups); grid (ceil(C/32), splits of N)
template <typename T>
__global__ void __launch_bounds__(kThreads) bn_sums_cols(BnSums a, double2* partial, int64_t chunk) {
  __shared__ double2 smem[kThreads];
  int tx = threadIdx.x % 32, ty = threadIdx.x / 32;
  int64_t ch = int64_t(blockIdx.x) * 32 + tx;
  int64_t lo = int64_t(blockIdx.y) * chunk, hi = lo + chunk < a.n ? lo + chunk : a.n;
  double2 acc = make_double2(0, 0);
  if (ch < a.c)
    for (int64_t n = lo + ty; n < hi; n += kThreads / 32) acc = add2(acc, term<T>(a, n * a.c + ch, ch));
  smem[threadIdx.x] = acc;
  __syncthreads();
  if (ty == 0 && ch < a.c) {
    for (int k = 1; k < kThreads / 32; ++k) acc = add2(acc, smem[k * 32 + tx]);
    partial[int64_t(blockIdx.y) * a.c + ch] = acc;
  }
}

// Launches the channel sums; returns the partial buffer [splits, C] and the split count.
// The grid and the buffer come from one geometry::bn_sums (internal/launch_geometry.h).
template <typename T>
int bn_sums(Context& ctx, const BnSums& a, std::optional<DeviceBuffer>& partial) {
  geometry::SplitGrid g = geometry::bn_sums(a.n, a.c, a.s, ctx.sm_count);
  partial.emplace(ctx, size_t(g.partial_elems()) * sizeof(double2));
  dim3 grid{unsigned(g.blocks), unsigned(g.splits), 1u};
  if (a.s == 1)
    bn_sums_cols<T><<<grid, kThreads, 0, ctx.stream>>>(a, partial->as<double2>(), g.chunk);
  else
    bn_sums_planes<T><<<grid, kThreads, 0, ctx.stream>>>(a, partial->as<double2>(), g.chunk);
  check_launch("batch_norm");
  return int(g.splits);
}

struct BnParams {
  int64_t c, count;  // elements per channel
  int splits;
  bool training, has_running;
  double momentum, eps;
};

// One thread per channel: statistics (training) or running statistics (eval) ->
// save_mean, save_invstd, running updates, and y = x * scale + shift.
template <typename T>
__global__ void bn_finalize(const double2* partial, BnParams p, const T* w, const T* b, T* running_mean,
                            T* running_var, T* save_mean, T* save_invstd, T* scale, T* shift) {
  for (int64_t ch = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; ch < p.c; ch += int64_t(gridDim.x) * blockDim.x) {
    double mean, invstd;
    if (p.training) {
      double2 s = partial[ch];
      for (int k = 1; k < p.splits; ++k) s = add2(s, partial[int64_t(k) * p.c + ch]);
      mean = s.x / double(p.count);
      double var = s.y / double(p.count) - mean * mean;
      var = var < 0 ? 0 : var;  // rounding below 0 clamps; NaN (inf in the channel) stays, as on the CPU
      invstd = 1.0 / sqrt(var + p.eps);
      if (p.has_running) {
        double unbiased = p.count > 1 ? var * double(p.count) / double(p.count - 1) : var;
        running_mean[ch] = T((1 - p.momentum) * double(running_mean[ch]) + p.momentum * mean);
        running_var[ch] = T((1 - p.momentum) * double(running_var[ch]) + p.momentum * unbiased);
      }
    } else {
      mean = double(running_mean[ch]);
      invstd = 1.0 / sqrt(double(running_var[ch]) + p.eps);
    }
    if (save_mean) save_mean[ch] = T(mean);
    if (save_invstd) save_invstd[ch] = T(invstd);
    double k = w ? double(w[ch]) * invstd : invstd;
    scale[ch] = T(k);
    shift[ch] = T((b ? double(b[ch]) : 0.0) - mean * k);
  }
}

// out[n, c, s] = a[c] * in1[n, c, s] + b[c] * (in2[n, c, s] - m[c]) + d[c]  (in2, b, m optional)
template <typename T>
__global__ void __launch_bounds__(kThreads) bn_apply(T* out, const T* in1, const T* in2, const T* a, const T* b,
                                                     const T* m, const T* d, int64_t total, Divmod by_s, Divmod by_c,
                                                     bool wide, int64_t c, int64_t s) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x) {
    int64_t ch;
    if (wide) {
      ch = (i / s) % c;
    } else {
      uint32_t q = by_s.div(uint32_t(i));
      ch = int64_t(q - by_c.div(q) * uint32_t(c));
    }
    T v = a[ch] * in1[i] + d[ch];
    if (in2) v += b[ch] * (in2[i] - m[ch]);
    out[i] = v;
  }
}

template <typename T>
void launch_apply(Context& ctx, const Tensor& out, const T* in1, const T* in2, const T* a, const T* b, const T* m,
                  const T* d, int64_t c, int64_t s) {
  int64_t total = out.numel();
  bool wide = total > (int64_t(1) << 31) - 1;
  Divmod by_s(wide ? 1u : uint32_t(s)), by_c(wide ? 1u : uint32_t(c));
  bn_apply<T><<<ctx.grid_for(total, kThreads), kThreads, 0, ctx.stream>>>(
      static_cast<T*>(out.data_ptr()), in1, in2, a, b, m, d, total, by_s, by_c, wide, c, s);
  check_launch("batch_norm");
}

// Per channel, from the sums (gb = sum gy, gw' = sum gy (x - mean)):
// gw = gw' invstd, gb; gx = a gy + b (x - mean) + d.
template <typename T>
__global__ void bn_grad_finalize(const double2* partial, BnParams p, const T* w, const T* invstd, T* gw, T* gb, T* a,
                                 T* b, T* d) {
  for (int64_t ch = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; ch < p.c; ch += int64_t(gridDim.x) * blockDim.x) {
    double2 s = partial[ch];
    for (int k = 1; k < p.splits; ++k) s = add2(s, partial[int64_t(k) * p.c + ch]);
    double inv = double(invstd[ch]), wc = w ? double(w[ch]) : 1.0;
    if (gw) gw[ch] = T(s.y * inv);
    if (gb) gb[ch] = T(s.x);
    double k = wc * inv, m = double(p.count);
    a[ch] = T(k);
    b[ch] = T(p.training ? -k * inv * inv * s.y / m : 0.0);
    d[ch] = T(p.training ? -k * s.x / m : 0.0);
  }
}

template <typename T>
const T* cp(const Tensor& t) { return t.defined() && t.numel() ? static_cast<const T*>(t.data_ptr()) : nullptr; }
template <typename T>
T* mp(const Tensor& t) { return t.defined() && t.numel() ? static_cast<T*>(t.data_ptr()) : nullptr; }

// ---- batch_norm_relu, fused (REEL_CUDA_BN_RELU=fused)
// A group of pieces (geometry::bn_piece_groups): their pointers and first channels in y,
// kernel parameters read in place (__grid_constant__: no copy to local memory for the
// indexed reads).
struct PieceTable {
  const void* x[geometry::kBnMaxPieces] = {};
  void* gx[geometry::kBnMaxPieces] = {};           // backward: null where not wanted
  int64_t off[geometry::kBnMaxPieces + 1] = {};  // y's first channel of each, off[k] the group's end
  int k = 0;
  int64_t n = 0, C = 0, s = 0, g0 = 0, cg = 0;  // y [n, C, s]; the group: channels [g0, g0 + cg)
  // y's channel yc (inside the group) -> its piece's slot, channel count and index there
  __device__ __forceinline__ int find(int64_t yc) const { return geometry::bn_find_piece(off, k, yc); }
  __device__ __forceinline__ int64_t at(int j, int64_t nn, int64_t yc, int64_t sp) const {
    return geometry::bn_piece_index(nn, yc, sp, off[j], off[j + 1] - off[j], s);
  }
};

// The group's channel sums: (x, x^2) for statistics (gy null), (g, g (x - mean)) with
// g = gy masked by y > 0 for gradients; gy and y in y's layout, mean the group's channels.
template <typename T>
__device__ __forceinline__ double2 piece_term(const PieceTable& t, const T* gy, const T* y, const T* mean, int j,
                                              int64_t nn, int64_t ch, int64_t sp) {
  const int64_t yc = t.g0 + ch;
  double x = double(static_cast<const T*>(t.x[j])[t.at(j, nn, yc, sp)]);
  if (!gy) return make_double2(x, x * x);
  const int64_t f = geometry::bn_y_index(nn, yc, sp, t.C, t.s);
  double g = double(bn_relu::masked_gradient(gy[f], y[f]));
  return make_double2(g, g * (x - double(mean[ch])));
}

// Per-channel sums over a group: grid (cg, splits), block (c, k) sums channel c of its piece
// over its part of [0, n s) (bn_sums_planes over pieces). Floor: memory (x, and gy and y
// for gradients, read once).
template <typename T>
__global__ void __launch_bounds__(kThreads) bn_piece_sums_planes(const __grid_constant__ PieceTable t, const T* gy,
                                                                 const T* y, const T* mean, double2* partial,
                                                                 int64_t chunk) {
  __shared__ double2 smem[kThreads / 32];
  const int64_t ch = blockIdx.x, total = t.n * t.s;
  const int j = t.find(t.g0 + ch);
  int64_t lo = int64_t(blockIdx.y) * chunk, hi = lo + chunk < total ? lo + chunk : total;
  double2 acc = make_double2(0, 0);
  for (int64_t i = lo + threadIdx.x; i < hi; i += kThreads) {
    int64_t nn = i / t.s;
    acc = add2(acc, piece_term<T>(t, gy, y, mean, j, nn, ch, i - nn * t.s));
  }
  acc = group_sum<kThreads>(acc, smem);
  if (threadIdx.x == 0) partial[int64_t(blockIdx.y) * t.cg + ch] = acc;
}

// s == 1: block (32 channels, 8 row groups), grid (ceil(cg/32), splits of n) (bn_sums_cols
// over pieces). Floor: memory.
template <typename T>
__global__ void __launch_bounds__(kThreads) bn_piece_sums_cols(const __grid_constant__ PieceTable t, const T* gy,
                                                               const T* y, const T* mean, double2* partial,
                                                               int64_t chunk) {
  __shared__ double2 smem[kThreads];
  int tx = threadIdx.x % 32, ty = threadIdx.x / 32;
  int64_t ch = int64_t(blockIdx.x) * 32 + tx;
  int64_t lo = int64_t(blockIdx.y) * chunk, hi = lo + chunk < t.n ? lo + chunk : t.n;
  double2 acc = make_double2(0, 0);
  if (ch < t.cg) {
    const int j = t.find(t.g0 + ch);
    for (int64_t nn = lo + ty; nn < hi; nn += kThreads / 32) acc = add2(acc, piece_term<T>(t, gy, y, mean, j, nn, ch, 0));
  }
  smem[threadIdx.x] = acc;
  __syncthreads();
  if (ty == 0 && ch < t.cg) {
    for (int k = 1; k < kThreads / 32; ++k) acc = add2(acc, smem[k * 32 + tx]);
    partial[int64_t(blockIdx.y) * t.cg + ch] = acc;
  }
}

// Launches a group's sums (gy null: statistics); the grid and the buffer [splits, cg] from
// one geometry::bn_sums, as bn_sums does. Returns the split count.
template <typename T>
int piece_sums(Context& ctx, const PieceTable& t, const T* gy, const T* y, const T* mean,
               std::optional<DeviceBuffer>& partial, const char* op) {
  geometry::SplitGrid g = geometry::bn_sums(t.n, t.cg, t.s, ctx.sm_count);
  partial.emplace(ctx, size_t(g.partial_elems()) * sizeof(double2));
  dim3 grid{unsigned(g.blocks), unsigned(g.splits), 1u};
  if (t.s == 1)
    bn_piece_sums_cols<T><<<grid, kThreads, 0, ctx.stream>>>(t, gy, y, mean, partial->as<double2>(), g.chunk);
  else
    bn_piece_sums_planes<T><<<grid, kThreads, 0, ctx.stream>>>(t, gy, y, mean, partial->as<double2>(), g.chunk);
  check_launch(op);
  return int(g.splits);
}

// y's element i of the group's [n, cg, s] -> batch index, group channel, position: 32-bit
// magic division unless the group passes 2^31 - 1 elements (wide)
struct GroupIndex {
  Divmod by_s, by_c;
  bool wide;
  __device__ __forceinline__ void split(int64_t i, int64_t s, int64_t cg, int64_t& nn, int64_t& ch,
                                        int64_t& sp) const {
    int64_t q;
    if (wide) {
      q = i / s;
      nn = q / cg;
    } else {
      uint32_t q32 = by_s.div(uint32_t(i));
      q = int64_t(q32);
      nn = int64_t(by_c.div(q32));
    }
    ch = q - nn * cg;
    sp = i - q * s;
  }
};
GroupIndex group_index(const PieceTable& t, int64_t total) {
  bool wide = total > geometry::kU32Items;
  return GroupIndex{Divmod(wide ? 1u : uint32_t(t.s)), Divmod(wide ? 1u : uint32_t(t.cg)), wide};
}

// y = relu(scale[c] x + shift[c]), NaN kept, over the group's channels of y, each x read in
// its piece: the normalised output and its relu in one write. Floor: memory (x read once,
// y written once).
template <typename T>
__global__ void __launch_bounds__(kThreads) bn_relu_apply(const __grid_constant__ PieceTable t, T* y, const T* scale,
                                                          const T* shift, int64_t total, GroupIndex gi) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x) {
    int64_t nn, ch, sp;
    gi.split(i, t.s, t.cg, nn, ch, sp);
    const int64_t yc = t.g0 + ch;
    const int j = t.find(yc);
    T v = scale[ch] * static_cast<const T*>(t.x[j])[t.at(j, nn, yc, sp)] + shift[ch];
    y[geometry::bn_y_index(nn, yc, sp, t.C, t.s)] = bn_relu::relu_output(v);
  }
}

// gx = a[c] g + b[c] (x - m[c]) + d[c] with g = gy masked by y > 0 (training false: the b
// term dropped), written into each wanted piece's gradient; the masked g never stored.
// Floor: memory (gy, y and x read once, gx written once).
template <typename T>
__global__ void __launch_bounds__(kThreads) bn_relu_grad_apply(const __grid_constant__ PieceTable t, const T* gy,
                                                               const T* y, bool training, const T* a, const T* b,
                                                               const T* m, const T* d, int64_t total, GroupIndex gi) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x) {
    int64_t nn, ch, sp;
    gi.split(i, t.s, t.cg, nn, ch, sp);
    const int64_t yc = t.g0 + ch;
    const int j = t.find(yc);
    T* gx = static_cast<T*>(t.gx[j]);
    if (!gx) continue;
    const int64_t f = geometry::bn_y_index(nn, yc, sp, t.C, t.s), xi = t.at(j, nn, yc, sp);
    T v = a[ch] * bn_relu::masked_gradient(gy[f], y[f]) + d[ch];
    if (training) v += b[ch] * (static_cast<const T*>(t.x[j])[xi] - m[ch]);
    gx[xi] = v;
  }
}

// p + off, or null for an absent tensor
template <typename P>
P* shifted(P* p, int64_t off) { return p ? p + off : nullptr; }

EnvSwitch<bn_relu::Path> g_bn_relu_path("REEL_CUDA_BN_RELU", bn_relu::path_from_env, bn_relu::invalid_path_message,
                                         bn_relu::Path::invalid);
std::atomic<uint64_t> g_bn_relu_fused{0};

bn_relu::Path chosen_bn_relu_path() { return g_bn_relu_path.get(); }

bool fused_bn_relu(const std::vector<Tensor>& xs, DType dtype) {
  return bn_relu::fused({chosen_bn_relu_path(), dtype == DType::f32 || dtype == DType::f64, int64_t(xs.size())});
}

// The inner size of [n, C, *]: the product of the dims after the channels
int64_t spatial(const Dims& shape) {
  int64_t s = 1;
  for (int k = 2; k < int(shape.size()); ++k) s *= shape[k];
  return s;
}

std::vector<int64_t> channel_counts(const std::vector<Tensor>& xs) {
  std::vector<int64_t> cs;
  for (const Tensor& t : xs) cs.push_back(t.shape()[1]);
  return cs;
}

// A group's table over contiguous pieces `x` (xs' dense copies) and gradients `gx` (empty:
// forward; undefined: not wanted)
PieceTable piece_table(const geometry::BnGroup& g, const std::vector<Tensor>& x, const std::vector<Tensor>& gx,
                       const std::vector<int64_t>& counts, int64_t n, int64_t C, int64_t s) {
  PieceTable t;
  t.k = int(g.pieces.size());
  t.n = n, t.C = C, t.s = s, t.g0 = g.c0, t.cg = g.c1 - g.c0;
  int64_t c = g.c0;
  for (int slot = 0; slot < t.k; ++slot) {
    const size_t j = g.pieces[size_t(slot)];
    t.x[slot] = x[j].data_ptr();
    t.gx[slot] = !gx.empty() && gx[j].defined() && gx[j].numel() ? gx[j].data_ptr() : nullptr;
    t.off[slot] = c;
    c += counts[j];
  }
  t.off[t.k] = c;
  return t;
}

// ---- layer norm
template <typename T, int TPR>
__global__ void __launch_bounds__(kThreads) ln_forward(const T* x, T* out, T* save_mean, T* save_invstd, const T* w,
                                                       const T* b, int64_t rows, int64_t D, double eps) {
  __shared__ double2 smem[kThreads / 32];
  constexpr int per_block = kThreads / TPR;
  int local = threadIdx.x / TPR, t = threadIdx.x % TPR;
  for (int64_t row0 = int64_t(blockIdx.x) * per_block; row0 < rows; row0 += int64_t(gridDim.x) * per_block) {
    int64_t row = row0 + local;  // row0 is uniform over the block, so the block-wide syncs stay uniform
    bool live = row < rows;
    const T* xr = x + (live ? row : 0) * D;
    double2 acc = make_double2(0, 0);
    if (live)
      for (int64_t j = t; j < D; j += TPR) {
        double v = double(xr[j]);
        acc = add2(acc, make_double2(v, v * v));
      }
    acc = group_sum<TPR>(acc, smem);
    if (!live) continue;
    double mean = acc.x / double(D), var = acc.y / double(D) - mean * mean;
    double inv = 1.0 / sqrt((var < 0 ? 0 : var) + eps);  // NaN (an inf in the row) stays, as on the CPU
    if (t == 0) {
      if (save_mean) save_mean[row] = T(mean);
      if (save_invstd) save_invstd[row] = T(inv);
    }
    T* orow = out + row * D;
    for (int64_t j = t; j < D; j += TPR) {
      T v = T((double(xr[j]) - mean) * inv);
      if (w) v = v * w[j];
      if (b) v = v + b[j];
      orow[j] = v;
    }
  }
}

// gx = invstd (w gy - mean_j(w gy) - xhat mean_j(w gy xhat)), per row
template <typename T, int TPR>
__global__ void __launch_bounds__(kThreads) ln_backward_x(T* gx, const T* gy, const T* x, const T* w, const T* mean,
                                                          const T* invstd, int64_t rows, int64_t D) {
  __shared__ double2 smem[kThreads / 32];
  constexpr int per_block = kThreads / TPR;
  int local = threadIdx.x / TPR, t = threadIdx.x % TPR;
  for (int64_t row0 = int64_t(blockIdx.x) * per_block; row0 < rows; row0 += int64_t(gridDim.x) * per_block) {
    int64_t row = row0 + local;
    bool live = row < rows;
    int64_t base = (live ? row : 0) * D;
    double m = live ? double(mean[row]) : 0, inv = live ? double(invstd[row]) : 0;
    double2 acc = make_double2(0, 0);
    if (live)
      for (int64_t j = t; j < D; j += TPR) {
        double wg = double(gy[base + j]) * (w ? double(w[j]) : 1.0);
        acc = add2(acc, make_double2(wg, wg * (double(x[base + j]) - m) * inv));
      }
    acc = group_sum<TPR>(acc, smem);
    if (!live) continue;
    double s1 = acc.x / double(D), s2 = acc.y / double(D);
    for (int64_t j = t; j < D; j += TPR) {
      double wg = double(gy[base + j]) * (w ? double(w[j]) : 1.0);
      double xhat = (double(x[base + j]) - m) * inv;
      gx[base + j] = T(inv * (wg - s1 - xhat * s2));
    }
  }
}

// Column sums over rows of (gy xhat, gy): block (32 columns, 8 row groups), grid (ceil(D/32), splits)
template <typename T>
__global__ void __launch_bounds__(kThreads) ln_backward_wb(const T* gy, const T* x, const T* mean, const T* invstd,
                                                           double2* partial, int64_t rows, int64_t D, int64_t chunk) {
  __shared__ double2 smem[kThreads];
  int tx = threadIdx.x % 32, ty = threadIdx.x / 32;
  int64_t j = int64_t(blockIdx.x) * 32 + tx;
  int64_t lo = int64_t(blockIdx.y) * chunk, hi = lo + chunk < rows ? lo + chunk : rows;
  double2 acc = make_double2(0, 0);
  if (j < D)
    for (int64_t r = lo + ty; r < hi; r += kThreads / 32) {
      double g = double(gy[r * D + j]);
      acc = add2(acc, make_double2(g * (double(x[r * D + j]) - double(mean[r])) * double(invstd[r]), g));
    }
  smem[threadIdx.x] = acc;
  __syncthreads();
  if (ty == 0 && j < D) {
    for (int k = 1; k < kThreads / 32; ++k) acc = add2(acc, smem[k * 32 + tx]);
    partial[int64_t(blockIdx.y) * D + j] = acc;
  }
}

template <typename T>
__global__ void ln_wb_finalize(const double2* partial, int splits, int64_t D, T* gw, T* gb) {
  for (int64_t j = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; j < D; j += int64_t(gridDim.x) * blockDim.x) {
    double2 s = partial[j];
    for (int k = 1; k < splits; ++k) s = add2(s, partial[int64_t(k) * D + j]);
    if (gw) gw[j] = T(s.x);
    if (gb) gb[j] = T(s.y);
  }
}

}  // namespace

void CudaBackend::batch_norm_forward(const Tensor& out, const Tensor& save_mean, const Tensor& save_invstd,
                                     const Tensor& x_, const Tensor& weight, const Tensor& bias,
                                     const Tensor& running_mean, const Tensor& running_var, bool training,
                                     double momentum, double eps) {
  expect_here("batch_norm", {&out, &save_mean, &save_invstd, &x_, &weight, &bias, &running_mean, &running_var});
  Context& c = ctx();
  Tensor x = contiguous_copy(x_);
  int64_t n = x.shape()[0], ch = x.shape()[1], s = x.numel() / std::max<int64_t>(1, n * ch);
  if (ch == 0) return;
  if (!training && (!running_mean.defined() || !running_var.defined()))
    throw Error("batch_norm: evaluation mode needs running_mean and running_var");
  // weight, bias and running statistics may be strided views: work on dense copies, write the running ones back
  Tensor w = weight.defined() ? contiguous_copy(weight) : weight, b = bias.defined() ? contiguous_copy(bias) : bias;
  Tensor rm = running_mean.defined() ? contiguous_copy(running_mean) : running_mean;
  Tensor rv = running_var.defined() ? contiguous_copy(running_var) : running_var;
  dispatch_float(x.dtype(), "batch_norm", [&]<typename T>() {
    std::optional<DeviceBuffer> partial;
    BnParams p{ch, n * s, 1, training, running_mean.defined() && running_var.defined(), momentum, eps};
    if (training) {
      if (n * s == 0) throw Error("batch_norm: training needs at least one value per channel");
      p.splits = bn_sums<T>(c, BnSums{x.data_ptr(), nullptr, nullptr, n, ch, s}, partial);
    }
    DeviceBuffer coef(c, size_t(2 * ch) * sizeof(T));
    T* scale = coef.as<T>();
    T* shift = scale + ch;
    bn_finalize<T><<<c.grid_for(ch, kThreads), kThreads, 0, c.stream>>>(
        partial ? partial->as<double2>() : nullptr, p, cp<T>(w), cp<T>(b), mp<T>(rm), mp<T>(rv), mp<T>(save_mean),
        mp<T>(save_invstd), scale, shift);
    check_launch("batch_norm");
    if (training && rm.defined() && rm.impl() != running_mean.impl()) copy_same_device(running_mean, rm);
    if (training && rv.defined() && rv.impl() != running_var.impl()) copy_same_device(running_var, rv);
    if (out.numel())
      launch_apply<T>(c, out, static_cast<const T*>(x.data_ptr()), nullptr, scale, nullptr, nullptr, shift, ch, s);
  });
}

void CudaBackend::batch_norm_backward(const Tensor& gx, const Tensor& gw, const Tensor& gb, const Tensor& gy_,
                                      const Tensor& x_, const Tensor& weight, const Tensor& save_mean,
                                      const Tensor& save_invstd, bool training) {
  expect_here("batch_norm_backward", {&gx, &gw, &gb, &gy_, &x_, &weight, &save_mean, &save_invstd});
  Context& c = ctx();
  Tensor x = contiguous_copy(x_), gy = contiguous_copy(gy_);
  int64_t n = x.shape()[0], ch = x.shape()[1], s = x.numel() / std::max<int64_t>(1, n * ch);
  if (ch == 0) return;
  dispatch_float(x.dtype(), "batch_norm_backward", [&]<typename T>() {
    Tensor mean = contiguous_copy(save_mean), invstd = contiguous_copy(save_invstd);
    Tensor w = weight.defined() ? contiguous_copy(weight) : weight;
    std::optional<DeviceBuffer> partial;
    BnParams p{ch, n * s, 1, training, false, 0, 0};
    bool need_sums = training || (gw.defined() && gw.numel()) || (gb.defined() && gb.numel());
    if (need_sums && n * s > 0) {
      p.splits = bn_sums<T>(c, BnSums{x.data_ptr(), gy.data_ptr(), mean.data_ptr(), n, ch, s}, partial);
    } else {  // nothing to sum: every sum is 0
      partial.emplace(c, sizeof(double2) * size_t(ch));
      check(cudaMemsetAsync(partial->get(), 0, partial->size(), c.stream), "batch_norm_backward", "cudaMemsetAsync");
    }
    DeviceBuffer coef(c, size_t(3 * ch) * sizeof(T));
    T* a = coef.as<T>();
    T* b = a + ch;
    T* d = b + ch;
    bn_grad_finalize<T><<<c.grid_for(ch, kThreads), kThreads, 0, c.stream>>>(
        partial->as<double2>(), p, cp<T>(w), cp<T>(invstd), mp<T>(gw), mp<T>(gb), a, b, d);
    check_launch("batch_norm_backward");
    if (gx.defined() && gx.numel())
      launch_apply<T>(c, gx, static_cast<const T*>(gy.data_ptr()),
                      training ? static_cast<const T*>(x.data_ptr()) : nullptr, a, b, cp<T>(mean), d, ch, s);
  });
}

void CudaBackend::batch_norm_relu_forward(const Tensor& out, const Tensor& save_mean, const Tensor& save_invstd,
                                          const std::vector<Tensor>& xs, const Tensor& weight, const Tensor& bias,
                                          const Tensor& running_mean, const Tensor& running_var, bool training,
                                          double momentum, double eps) {
  if (!fused_bn_relu(xs, out.dtype()))
    return Backend::batch_norm_relu_forward(out, save_mean, save_invstd, xs, weight, bias, running_mean, running_var,
                                            training, momentum, eps);
  constexpr const char* op = "batch_norm_relu";
  expect_here(op, {&out, &save_mean, &save_invstd, &weight, &bias, &running_mean, &running_var});
  for (const Tensor& x : xs) expect_here(op, {&x});
  Context& c = ctx();
  const int64_t n = out.shape()[0], C = out.shape()[1], s = spatial(out.shape());
  if (C == 0) return;
  if (!training && (!running_mean.defined() || !running_var.defined()))
    throw Error("batch_norm_relu: evaluation mode needs running_mean and running_var");
  if (training && n * s == 0) throw Error("batch_norm_relu: training needs at least one value per channel");
  Tensor w = weight.defined() ? contiguous_copy(weight) : weight, b = bias.defined() ? contiguous_copy(bias) : bias;
  Tensor rm = running_mean.defined() ? contiguous_copy(running_mean) : running_mean;
  Tensor rv = running_var.defined() ? contiguous_copy(running_var) : running_var;
  Tensor y = out.is_contiguous() ? out : scratch(c, out.shape(), out.dtype());
  std::vector<Tensor> x;
  for (const Tensor& t : xs) x.push_back(contiguous_copy(t));
  const std::vector<int64_t> counts = channel_counts(xs);
  dispatch_float(out.dtype(), op, [&]<typename T>() {
    DeviceBuffer coef(c, size_t(2 * C) * sizeof(T));
    T* scale = coef.as<T>();
    T* shift = scale + C;
    for (const geometry::BnGroup& g : geometry::bn_piece_groups(counts)) {
      const PieceTable t = piece_table(g, x, {}, counts, n, C, s);
      const int64_t g0 = t.g0;
      std::optional<DeviceBuffer> partial;
      BnParams p{t.cg, n * s, 1, training, running_mean.defined() && running_var.defined(), momentum, eps};
      if (training) p.splits = piece_sums<T>(c, t, nullptr, nullptr, nullptr, partial, op);
      bn_finalize<T><<<c.grid_for(t.cg, kThreads), kThreads, 0, c.stream>>>(
          partial ? partial->as<double2>() : nullptr, p, shifted(cp<T>(w), g0), shifted(cp<T>(b), g0),
          shifted(mp<T>(rm), g0), shifted(mp<T>(rv), g0), shifted(mp<T>(save_mean), g0),
          shifted(mp<T>(save_invstd), g0), scale + g0, shift + g0);
      check_launch(op);
      const int64_t total = n * t.cg * s;
      if (total == 0) continue;
      bn_relu_apply<T><<<c.grid_for(total, kThreads), kThreads, 0, c.stream>>>(
          t, static_cast<T*>(y.data_ptr()), scale + g0, shift + g0, total, group_index(t, total));
      check_launch(op);
    }
  });
  if (training && rm.defined() && rm.impl() != running_mean.impl()) copy_same_device(running_mean, rm);
  if (training && rv.defined() && rv.impl() != running_var.impl()) copy_same_device(running_var, rv);
  if (y.impl() != out.impl() && out.numel()) copy_same_device(out, y);
  g_bn_relu_fused.fetch_add(1, std::memory_order_relaxed);
}

void CudaBackend::batch_norm_relu_backward(const std::vector<Tensor>& gxs, const Tensor& gw, const Tensor& gb,
                                           const Tensor& gy_, const std::vector<Tensor>& xs, const Tensor& y_,
                                           const Tensor& weight, const Tensor& save_mean, const Tensor& save_invstd,
                                           bool training) {
  if (!fused_bn_relu(xs, y_.dtype()))
    return Backend::batch_norm_relu_backward(gxs, gw, gb, gy_, xs, y_, weight, save_mean, save_invstd, training);
  constexpr const char* op = "batch_norm_relu_backward";
  expect_here(op, {&gw, &gb, &gy_, &y_, &weight, &save_mean, &save_invstd});
  for (const Tensor& x : xs) expect_here(op, {&x});
  for (const Tensor& g : gxs) expect_here(op, {&g});
  if (gxs.size() != xs.size())
    throw Error(std::string(op) + ": expected a gradient slot for each of the " + std::to_string(xs.size()) +
                " pieces, got " + std::to_string(gxs.size()));
  Context& c = ctx();
  Tensor gy = contiguous_copy(gy_), y = contiguous_copy(y_);
  const int64_t n = y.shape()[0], C = y.shape()[1], s = spatial(y.shape());
  if (C == 0) return;
  const bool want_w = gw.defined() && gw.numel(), want_b = gb.defined() && gb.numel();
  std::vector<Tensor> x, gx;  // dense pieces; dense gradients (a strided one written through a copy)
  for (size_t j = 0; j < xs.size(); ++j) {
    x.push_back(contiguous_copy(xs[j]));
    const Tensor& g = gxs[j];
    gx.push_back(!g.defined() || !g.numel() || g.is_contiguous() ? g : scratch(c, g.shape(), g.dtype()));
  }
  const std::vector<int64_t> counts = channel_counts(xs);
  dispatch_float(y.dtype(), op, [&]<typename T>() {
    Tensor mean = contiguous_copy(save_mean), invstd = contiguous_copy(save_invstd);
    Tensor w = weight.defined() ? contiguous_copy(weight) : weight;
    DeviceBuffer coef(c, size_t(3 * C) * sizeof(T));
    T* a = coef.as<T>();
    T* b = a + C;
    T* d = b + C;
    for (const geometry::BnGroup& g : geometry::bn_piece_groups(counts)) {
      const PieceTable t = piece_table(g, x, gx, counts, n, C, s);
      bool want_x = false;
      for (int slot = 0; slot < t.k; ++slot) want_x = want_x || t.gx[slot];
      const bool need_sums = (training && want_x) || want_w || want_b;
      if (!want_x && !need_sums) continue;
      const int64_t g0 = t.g0;
      std::optional<DeviceBuffer> partial;
      BnParams p{t.cg, n * s, 1, training, false, 0, 0};
      if (need_sums && n * s > 0) {
        p.splits = piece_sums<T>(c, t, cp<T>(gy), cp<T>(y), cp<T>(mean) + g0, partial, op);
      } else {  // nothing to sum: every sum is 0
        partial.emplace(c, sizeof(double2) * size_t(t.cg));
        check(cudaMemsetAsync(partial->get(), 0, partial->size(), c.stream), op, "cudaMemsetAsync");
      }
      bn_grad_finalize<T><<<c.grid_for(t.cg, kThreads), kThreads, 0, c.stream>>>(
          partial->as<double2>(), p, shifted(cp<T>(w), g0), cp<T>(invstd) + g0, shifted(mp<T>(gw), g0),
          shifted(mp<T>(gb), g0), a + g0, b + g0, d + g0);
      check_launch(op);
      const int64_t total = n * t.cg * s;
      if (!want_x || total == 0) continue;
      bn_relu_grad_apply<T><<<c.grid_for(total, kThreads), kThreads, 0, c.stream>>>(
          t, cp<T>(gy), cp<T>(y), training, a + g0, b + g0, cp<T>(mean) + g0, d + g0, total, group_index(t, total));
      check_launch(op);
    }
  });
  for (size_t j = 0; j < gxs.size(); ++j)
    if (gx[j].defined() && gx[j].impl() != gxs[j].impl()) copy_same_device(gxs[j], gx[j]);
  g_bn_relu_fused.fetch_add(1, std::memory_order_relaxed);
}

void CudaBackend::layer_norm_forward(const Tensor& out, const Tensor& save_mean, const Tensor& save_invstd,
                                     const Tensor& x_, const Tensor& weight, const Tensor& bias, double eps) {
  expect_here("layer_norm", {&out, &save_mean, &save_invstd, &x_, &weight, &bias});
  Context& c = ctx();
  Tensor x = contiguous_copy(x_);
  Tensor w = weight.defined() ? contiguous_copy(weight) : weight, b = bias.defined() ? contiguous_copy(bias) : bias;
  int64_t rows = save_mean.defined() ? save_mean.numel() : 0;
  int64_t D = rows ? x.numel() / rows : 0;
  if (!rows && x.numel()) {  // no statistics wanted: infer the row length from the weight
    D = w.defined() ? w.numel() : x.shape()[x.dim() - 1];
    rows = x.numel() / std::max<int64_t>(D, 1);
  }
  if (rows == 0 || D == 0) return;
  dispatch_float(x.dtype(), "layer_norm", [&]<typename T>() {
    auto args = [&]<int TPR>() {
      unsigned grid = c.grid_for(rows, kThreads / TPR);
      ln_forward<T, TPR><<<grid, kThreads, 0, c.stream>>>(static_cast<const T*>(x.data_ptr()),
                                                          static_cast<T*>(out.data_ptr()), mp<T>(save_mean),
                                                          mp<T>(save_invstd), cp<T>(w), cp<T>(b), rows, D, eps);
    };
    if (D <= 1024) args.template operator()<32>();
    else args.template operator()<kThreads>();
    check_launch("layer_norm");
  });
}

void CudaBackend::layer_norm_backward(const Tensor& gx, const Tensor& gw, const Tensor& gb, const Tensor& gy_,
                                      const Tensor& x_, const Tensor& weight, const Tensor& save_mean,
                                      const Tensor& save_invstd) {
  expect_here("layer_norm_backward", {&gx, &gw, &gb, &gy_, &x_, &weight, &save_mean, &save_invstd});
  Context& c = ctx();
  Tensor x = contiguous_copy(x_), gy = contiguous_copy(gy_);
  Tensor w = weight.defined() ? contiguous_copy(weight) : weight;
  Tensor mean = contiguous_copy(save_mean), invstd = contiguous_copy(save_invstd);
  int64_t rows = mean.numel(), D = rows ? x.numel() / rows : 0;
  if (rows == 0 || D == 0) return;
  dispatch_float(x.dtype(), "layer_norm_backward", [&]<typename T>() {
    const T* gyp = static_cast<const T*>(gy.data_ptr());
    const T* xp = static_cast<const T*>(x.data_ptr());
    if (gx.defined() && gx.numel()) {
      auto run = [&]<int TPR>() {
        ln_backward_x<T, TPR><<<c.grid_for(rows, kThreads / TPR), kThreads, 0, c.stream>>>(
            static_cast<T*>(gx.data_ptr()), gyp, xp, cp<T>(w), cp<T>(mean), cp<T>(invstd), rows, D);
      };
      if (D <= 1024) run.template operator()<32>();
      else run.template operator()<kThreads>();
      check_launch("layer_norm_backward");
    }
    if ((gw.defined() && gw.numel()) || (gb.defined() && gb.numel())) {
      geometry::SplitGrid g = geometry::ln_weight_grads(rows, D, c.sm_count);
      DeviceBuffer partial(c, size_t(g.partial_elems()) * sizeof(double2));
      ln_backward_wb<T><<<dim3{unsigned(g.blocks), unsigned(g.splits), 1u}, kThreads, 0, c.stream>>>(
          gyp, xp, cp<T>(mean), cp<T>(invstd), partial.as<double2>(), rows, D, g.chunk);
      check_launch("layer_norm_backward");
      ln_wb_finalize<T><<<c.grid_for(D, kThreads), kThreads, 0, c.stream>>>(partial.as<double2>(), int(g.splits), D,
                                                                            mp<T>(gw), mp<T>(gb));
      check_launch("layer_norm_backward");
    }
  });
}

void set_bn_relu_path(BnReluPath path) {
  g_bn_relu_path.set(path == BnReluPath::fused ? bn_relu::Path::fused : bn_relu::Path::separate);
}
BnReluPath bn_relu_path() {
  return chosen_bn_relu_path() == bn_relu::Path::fused ? BnReluPath::fused : BnReluPath::separate;
}
uint64_t bn_relu_fused_calls() { return g_bn_relu_fused.load(std::memory_order_relaxed); }

}  // namespace reel::cuda
