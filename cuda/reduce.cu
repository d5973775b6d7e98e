// Reductions over any set of dims of a strided tensor: sum, mean, max, min, prod,
// argmax, argmin, with the CPU's semantics (cpu/reduce.cpp): NaN wins max/min, the
// first NaN or the first extreme wins argmax/argmin, indices are flat over the reduced
// dims, integer sums accumulate in int64.
//
// Layout: x any strides; out has x's rank with each reduced dim of size 1. Dims are
// split into kept and reduced ones, each side put in the order of x's strides and the
// reduced side coalesced (geometry::reduce_dims): a contiguous x keeps its logical order,
// a channels-last [N, C, H, W] summed over {0, 2, 3} is the column sum of [N H W, C].
// Four paths, by where the contiguous dim of x is:
//   - whole tensor, contiguous, floating point: cub::DeviceReduce;
//   - per-channel sums of a contiguous [N, C, L] with runs L >= 64 (a conv bias gradient),
//     floating point: cub::DeviceSegmentedReduce over the N·C runs, then the columns
//     (REEL_CUDA_CHANNEL_SUMS=warps: a warp a run with 16-byte loads instead of CUB);
//   - rows (the contiguous dim is reduced, or none is): one warp per output (per split),
//     lanes strided along the group, cub::WarpReduce at the end;
//   - columns (the contiguous dim is kept: sum over the batch of [N, C], a linear bias
//     gradient, or over [N H W, C], a channels-last conv bias gradient): 32 outputs per
//     block on consecutive addresses, 8 thread rows splitting the group, combined in
//     shared memory. Kept hand-written on purpose: a column is a strided segment, and
//     CUB's segmented reduction (a block or warp per segment) would read it with
//     stride C, one useful 4-byte word per 32-byte sector. The fused
//     alternative, cuBLASLt's BGRADB epilogue on the weight-gradient GEMM, needs the
//     Backend contract to return the bias gradient from matmul (tensor/backend.h).
// When outputs are too few to fill the GPU, groups are split across blocks (grid.y) and
// a second small kernel combines the partial results in a fixed order (deterministic).
// Floor: memory bandwidth (x read once).
#include <cub/block/block_reduce.cuh>
#include <cub/device/device_reduce.cuh>
#include <cub/device/device_segmented_reduce.cuh>
#include <cub/warp/warp_reduce.cuh>
#include <thrust/iterator/counting_iterator.h>
#include <thrust/iterator/transform_iterator.h>

#include <algorithm>
#include <limits>
#include <map>
#include <mutex>
#include <optional>

#include "internal/allocator.h"
#include "internal/env_switch.h"
#include "internal/graph.h"
#include "internal/launch_geometry.h"
#include "internal/arg_reduce.h"
#include "elementwise.cuh"

namespace reel::cuda {
namespace {

template <typename T>
using ArgAcc = arg_reduce::Acc<T>;

template <typename T>
__device__ __forceinline__ bool is_nan(T v) {
  return v != v;
}

constexpr bool is_arg(ReduceOp op) { return op == ReduceOp::argmax || op == ReduceOp::argmin; }
constexpr bool is_max(ReduceOp op) { return op == ReduceOp::max || op == ReduceOp::argmax; }

template <typename T, ReduceOp OP>
struct Reducer {
  using Sum = std::conditional_t<std::is_floating_point_v<T>, T, int64_t>;
  using Acc = std::conditional_t<is_arg(OP), ArgAcc<T>, std::conditional_t<OP == ReduceOp::max || OP == ReduceOp::min, T, Sum>>;

  __host__ __device__ static Acc identity() {
    if constexpr (is_arg(OP)) {
      return arg_reduce::start<T, is_max(OP)>();  // loses to every element, -inf and ties included
    } else if constexpr (OP == ReduceOp::max) {
      return std::numeric_limits<T>::has_infinity ? -std::numeric_limits<T>::infinity()
                                                  : std::numeric_limits<T>::lowest();
    } else if constexpr (OP == ReduceOp::min) {
      return std::numeric_limits<T>::has_infinity ? std::numeric_limits<T>::infinity() : std::numeric_limits<T>::max();
    } else if constexpr (OP == ReduceOp::prod) {
      return Acc(1);
    } else {
      return Acc(0);
    }
  }
  __device__ static Acc load(T v, int64_t r) {
    if constexpr (is_arg(OP)) return Acc{v, r};
    else return Acc(v);
  }
  __device__ static Acc combine(Acc a, Acc b) {
    if constexpr (is_arg(OP)) {
      return arg_reduce::combine<T, is_max(OP)>(a, b);
    } else if constexpr (OP == ReduceOp::max) {
      return (is_nan(a) || a > b) ? a : (is_nan(b) ? b : (b > a ? b : a));
    } else if constexpr (OP == ReduceOp::min) {
      return (is_nan(a) || a < b) ? a : (is_nan(b) ? b : (b < a ? b : a));
    } else if constexpr (OP == ReduceOp::prod) {
      return a * b;
    } else {
      return a + b;
    }
  }
  template <typename Out>
  __device__ static Out finish(Acc a, int64_t count) {
    if constexpr (is_arg(OP)) return Out(a.i);
    else if constexpr (OP == ReduceOp::mean) return Out(double(a) / double(count));
    else return Out(a);
  }
};

template <typename R>
struct CombineFn {
  __device__ typename R::Acc operator()(const typename R::Acc& a, const typename R::Acc& b) const {
    return R::combine(a, b);
  }
};

// ---- geometry: kept dims (x and out offsets of an output) and reduced dims (x offset of a group element)
struct KeptCalc {
  int n = 0;
  int64_t shape[kMaxDims], xstride[kMaxDims], ostride[kMaxDims];
  __device__ __forceinline__ void offsets(int64_t o, int64_t& xo, int64_t& oo) const {
    xo = 0;
    oo = 0;
    for (int d = n - 1; d >= 0; --d) {
      int64_t i = o % shape[d];
      o /= shape[d];
      xo += i * xstride[d];
      oo += i * ostride[d];
    }
  }
};

struct RedCalc {
  int n = 0;
  bool wide = false;  // groups of 2^31 elements or more: 64-bit division
  Divmod div[kMaxDims];
  int64_t shape[kMaxDims], stride[kMaxDims];
  __device__ __forceinline__ int64_t offset(int64_t r) const {
    if (n == 1) return r * stride[0];
    int64_t off = 0;
    if (!wide) {
      uint32_t i = uint32_t(r);
      for (int d = n - 1; d >= 0; --d) {
        uint32_t q = div[d].div(i);
        off += int64_t(i - q * div[d].d) * stride[d];
        i = q;
      }
    } else {
      for (int d = n - 1; d >= 0; --d) {
        off += (r % shape[d]) * stride[d];
        r /= shape[d];
      }
    }
    return off;
  }
};

struct Split {
  geometry::ReduceDims geo;  // what kept and red are made from
  KeptCalc kept;
  RedCalc red;
  int64_t outputs = 1, count = 1;
  bool columns = false;  // the innermost kept dim is x's contiguous one
};

// logical_reduced: the reduced dims in logical order (argmax, argmin: r is the answer)
Split split_dims(const Tensor& x, const Tensor& out, const std::vector<int>& dims, bool logical_reduced) {
  bool reduced[kMaxDims] = {};
  for (int d : dims) reduced[d] = true;
  const geometry::ReduceDims g = geometry::reduce_dims(x.dim(), x.shape().data(), x.strides().data(),
                                                       out.strides().data(), reduced, logical_reduced);
  Split s;
  s.geo = g;
  s.outputs = g.outputs;
  s.count = g.count;
  s.columns = g.columns;
  KeptCalc& k = s.kept;
  k.n = g.kept;
  for (int d = 0; d < k.n; ++d) {
    k.shape[d] = g.kept_shape[d];
    k.xstride[d] = g.kept_xstride[d];
    k.ostride[d] = g.kept_ostride[d];
  }
  RedCalc& r = s.red;
  r.n = g.red;
  r.wide = s.count > (int64_t(1) << 31) - 1;
  for (int d = 0; d < r.n; ++d) {
    r.shape[d] = g.red_shape[d];
    r.stride[d] = g.red_stride[d];
    r.div[d] = Divmod(r.wide ? 1u : uint32_t(r.shape[d]));
  }
  return s;
}

// ---- kernels
constexpr int kWarps = kThreads / 32;

template <typename T, typename Out, typename R>
__global__ void __launch_bounds__(kThreads) reduce_rows(const T* x, Out* out, typename R::Acc* partial, KeptCalc kc,
                                                        RedCalc rc, int64_t outputs, int64_t count, int64_t chunk) {
  using Acc = typename R::Acc;
  using WarpReduce = cub::WarpReduce<Acc>;
  __shared__ typename WarpReduce::TempStorage temp[kWarps];
  int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  int64_t o = int64_t(blockIdx.x) * kWarps + warp;
  if (o >= outputs) return;  // the whole warp leaves together
  int64_t xo, oo;
  kc.offsets(o, xo, oo);
  int64_t r0 = int64_t(blockIdx.y) * chunk, r1 = r0 + chunk < count ? r0 + chunk : count;
  Acc acc = R::identity();
  for (int64_t r = r0 + lane; r < r1; r += 32) acc = R::combine(acc, R::load(x[xo + rc.offset(r)], r));
  acc = WarpReduce(temp[warp]).Reduce(acc, CombineFn<R>{});
  if (lane == 0) {
    if (gridDim.y == 1) out[oo] = R::template finish<Out>(acc, count);
    else partial[int64_t(blockIdx.y) * outputs + o] = acc;
  }
}

template <typename T, typename Out, typename R>
__global__ void __launch_bounds__(kThreads) reduce_cols(const T* x, Out* out, typename R::Acc* partial, KeptCalc kc,
                                                        RedCalc rc, int64_t outputs, int64_t count, int64_t chunk) {
  using Acc = typename R::Acc;
  __shared__ alignas(16) unsigned char raw[kThreads * sizeof(Acc)];
  Acc* sm = reinterpret_cast<Acc*>(raw);
  int tx = threadIdx.x % 32, ty = threadIdx.x / 32;
  int64_t o = int64_t(blockIdx.x) * 32 + tx;
  int64_t xo = 0, oo = 0;
  Acc acc = R::identity();
  int64_t r0 = int64_t(blockIdx.y) * chunk, r1 = r0 + chunk < count ? r0 + chunk : count;
  if (o < outputs) {
    kc.offsets(o, xo, oo);
    for (int64_t r = r0 + ty; r < r1; r += kWarps) acc = R::combine(acc, R::load(x[xo + rc.offset(r)], r));
  }
  sm[ty * 32 + tx] = acc;
  __syncthreads();
  if (ty == 0 && o < outputs) {
    for (int k = 1; k < kWarps; ++k) acc = R::combine(acc, sm[k * 32 + tx]);
    if (gridDim.y == 1) out[oo] = R::template finish<Out>(acc, count);
    else partial[int64_t(blockIdx.y) * outputs + o] = acc;
  }
}

// Combines the partial results of `splits` chunks per output, in split order.
template <typename Out, typename R>
__global__ void __launch_bounds__(kThreads)
    reduce_finish(const typename R::Acc* partial, Out* out, KeptCalc kc, int64_t outputs, int splits, int64_t count) {
  for (int64_t o = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; o < outputs; o += int64_t(gridDim.x) * blockDim.x) {
    typename R::Acc acc = partial[o];
    for (int s = 1; s < splits; ++s) acc = R::combine(acc, partial[int64_t(s) * outputs + o]);
    int64_t xo, oo;
    kc.offsets(o, xo, oo);
    out[oo] = R::template finish<Out>(acc, count);
  }
}

template <typename T, typename R>
struct LoadAt {
  const T* x;
  __device__ typename R::Acc operator()(int64_t i) const { return R::load(x[i], i); }
};

// ---- per-channel sums of a contiguous [N, C, L] over N and L (a conv bias gradient:
// NCHW summed over 0, 2, 3). A channel's elements are N runs of L, C·L apart, so the sum
// runs in two stages: CUB's segmented reduction over the N·C contiguous runs (fully
// coalesced, one pass over x), then the [N, C] partials summed down the columns.
struct RunOffset {
  int64_t len;
  __host__ __device__ int64_t operator()(int64_t s) const { return s * len; }
};

// Stage 2: out[c] = finish(sum over n of partial[n, c]); consecutive threads take
// consecutive channels (coalesced), each sums its column in order n = 0.. (deterministic).
// Memory-bound and small: N·C partials read once.
template <typename T, typename Out, typename R>
__global__ void __launch_bounds__(kThreads) sum_partials(const T* partial, Out* out, int64_t n, int64_t c,
                                                         int64_t ostride, int64_t count) {
  for (int64_t j = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; j < c; j += int64_t(gridDim.x) * blockDim.x) {
    typename R::Acc acc = R::identity();
    for (int64_t i = 0; i < n; ++i) acc = R::combine(acc, R::load(partial[i * c + j], i));
    out[j * ostride] = R::template finish<Out>(acc, count);
  }
}

// acc[0..3] += the elements first, first + stride, ... of the run p[0, l): 16-byte loads
// (float4, double2) where `vec` (every run starts on 16 bytes), four independent sums so
// that a thread keeps several loads in flight; the tail element by element.
template <typename T>
__device__ __forceinline__ void add_run(T (&acc)[4], const T* p, int64_t l, int first, int stride, bool vec) {
  using V = std::conditional_t<std::is_same_v<T, float>, float4, double2>;
  constexpr int kPer = int(sizeof(V) / sizeof(T));  // elements a 16-byte load
  int64_t done = 0;
  if (vec) {
    const V* pv = reinterpret_cast<const V*>(p);
    const int64_t nv = l / kPer;
#pragma unroll 4
    for (int64_t i = first; i < nv; i += stride) {
      const V v = pv[i];
      if constexpr (kPer == 4) {
        acc[0] += v.x, acc[1] += v.y, acc[2] += v.z, acc[3] += v.w;
      } else {
        acc[0] += v.x, acc[1] += v.y;
      }
    }
    done = nv * kPer;
  }
  for (int64_t i = done + first; i < l; i += stride) acc[(i / stride) % 4] += p[i];
}

// Stage 1 with REEL_CUDA_CHANNEL_SUMS=warps: partial[r] = the sum of run r (l contiguous
// elements at x + r l), one warp a run (geometry::run_sums_blocks), each lane four
// independent sums over 16-byte loads where every run is 16-byte aligned
// (geometry::run_sums_vectorized), so that a warp keeps several loads in flight where CUB's
// block a run waits on 4 KiB. Memory-bound: x read once, no scratch beyond the partials.
template <typename T>
__global__ void __launch_bounds__(kThreads) run_sums(const T* x, T* partial, int64_t runs, int64_t l, bool vec) {
  const int lane = int(threadIdx.x % 32);
  const int64_t warps = int64_t(gridDim.x) * (blockDim.x / 32);
  for (int64_t r = int64_t(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32; r < runs; r += warps) {
    T acc[4] = {T(0), T(0), T(0), T(0)};
    add_run(acc, x + r * l, l, lane, 32, vec);
    T sum = (acc[0] + acc[1]) + (acc[2] + acc[3]);
    for (int o = 16; o > 0; o /= 2) sum += __shfl_down_sync(0xffffffffu, sum, o);
    if (lane == 0) partial[r] = sum;
  }
}

// Both stages in one launch with REEL_CUDA_CHANNEL_SUMS=onepass: block (j, s) sums runs
// [s per, min((s + 1) per, n)) of channel j (run r at x + (r c + j) l) into partial[j splits + s];
// the block that finishes a channel's last split (counters[j], which it resets to 0 for the next
// call) adds that channel's partials in split order and writes out[j]. The sums' order is fixed
// by the grid alone, so the result is deterministic. Memory-bound: x read once in 16-byte loads
// where every run starts on 16 bytes; C splits partials and C counters beside it.
template <typename T, typename Out, typename R>
__global__ void __launch_bounds__(kThreads)
    channel_sums_onepass(const T* x, T* partial, unsigned* counters, Out* out, int64_t n, int64_t c, int64_t l,
                         int64_t per, int64_t ostride, int64_t count, bool vec) {
  const int64_t j = blockIdx.x, splits = gridDim.y, s = blockIdx.y;
  const int64_t first = s * per, last = min(n, first + per);
  T acc[4] = {T(0), T(0), T(0), T(0)};
  for (int64_t r = first; r < last; ++r) add_run(acc, x + (r * c + j) * l, l, int(threadIdx.x), int(blockDim.x), vec);
  T sum = (acc[0] + acc[1]) + (acc[2] + acc[3]);
  for (int o = 16; o > 0; o /= 2) sum += __shfl_down_sync(0xffffffffu, sum, o);
  __shared__ T warp_sums[kThreads / 32];
  __shared__ bool finishes;
  const int warp = int(threadIdx.x / 32), lane = int(threadIdx.x % 32);
  if (lane == 0) warp_sums[warp] = sum;
  __syncthreads();
  if (threadIdx.x == 0) {
    T block = warp_sums[0];
    for (int w = 1; w < int(blockDim.x / 32); ++w) block += warp_sums[w];
    partial[j * splits + s] = block;
    __threadfence();  // the partial is visible to every block before the count says so
    finishes = atomicAdd(&counters[j], 1u) == unsigned(splits - 1);
  }
  __syncthreads();
  if (!finishes || warp != 0) return;
  __threadfence();
  typename R::Acc total = R::identity();
  for (int64_t k = lane; k < splits; k += 32) total = R::combine(total, R::load(__ldcg(partial + j * splits + k), k));
  for (int o = 16; o > 0; o /= 2) total = R::combine(total, __shfl_down_sync(0xffffffffu, total, o));
  if (lane == 0) {
    out[j * ostride] = R::template finish<Out>(total, count);
    counters[j] = 0u;
  }
}

// channel_sums_onepass' counters on each device: zero between calls (each call's finishing
// blocks reset theirs). Grown, never freed: a captured graph may still name an old buffer.
unsigned* onepass_counters(Context& ctx, int64_t c) {
  struct Counters {
    unsigned* p = nullptr;
    int64_t slots = 0;
  };
  static std::mutex mu;
  static std::map<int, Counters> by_device;
  std::lock_guard<std::mutex> lock(mu);
  Counters& k = by_device[ctx.device];
  if (k.slots < c) {
    forbid_in_capture(ctx, "reduce", "would allocate the per-channel counters of REEL_CUDA_CHANNEL_SUMS=onepass "
                                     "(a first sum of this many channels); run the step once before capturing it "
                                     "(the warm-up rule of cuda::Graph)");
    const int64_t slots = geometry::onepass_counter_slots(c);
    auto* p = static_cast<unsigned*>(device_alloc(ctx, size_t(slots) * sizeof(unsigned)));
    check(cudaMemsetAsync(p, 0, size_t(slots) * sizeof(unsigned), ctx.stream), "reduce", "cudaMemsetAsync");
    k = {p, slots};
  }
  return k.p;
}

EnvSwitch<geometry::ChannelSums> g_channel_sums("REEL_CUDA_CHANNEL_SUMS", geometry::channel_sums_from_env,
                                                geometry::channel_sums_message, geometry::ChannelSums::invalid);

template <typename T, typename Out, typename R>
void channel_sums(Context& ctx, const T* x, Out* out, const Split& s, int64_t n, int64_t c, int64_t l) {
  int64_t runs = n * c;
  DeviceBuffer partial(ctx, size_t(runs) * sizeof(T));
  if (g_channel_sums.get() == geometry::ChannelSums::onepass) {
    const geometry::OnepassGrid g =
        geometry::channel_sums_onepass_grid(n, c, l, int64_t(sizeof(T)), ctx.sm_count, ctx.max_threads_per_sm);
    if (c > geometry::kGridXMax) throw Error("reduce: " + std::to_string(c) + " channels are more than one launch covers");
    DeviceBuffer parts(ctx, size_t(g.partial_elems(c)) * sizeof(T));
    unsigned* counters = onepass_counters(ctx, c);
    const bool vec = geometry::run_sums_vectorized(reinterpret_cast<uint64_t>(x), l, int64_t(sizeof(T)));
    channel_sums_onepass<T, Out, R><<<dim3(unsigned(c), unsigned(g.splits), 1u), kThreads, 0, ctx.stream>>>(
        x, parts.as<T>(), counters, out, n, c, l, g.per, s.kept.ostride[0], s.count, vec);
    check_launch("reduce");
    return;
  }
  if (g_channel_sums.get() == geometry::ChannelSums::warps) {
    const int64_t blocks = geometry::run_sums_blocks(runs, ctx.sm_count, ctx.max_threads_per_sm);
    const bool vec = geometry::run_sums_vectorized(reinterpret_cast<uint64_t>(x), l, int64_t(sizeof(T)));
    run_sums<T><<<unsigned(blocks), kThreads, 0, ctx.stream>>>(x, partial.as<T>(), runs, l, vec);
    check_launch("reduce");
    sum_partials<T, Out, R><<<ctx.grid_for(c, kThreads), kThreads, 0, ctx.stream>>>(partial.as<T>(), out, n, c,
                                                                                    s.kept.ostride[0], s.count);
    check_launch("reduce");
    return;
  }
  auto begins = thrust::make_transform_iterator(thrust::counting_iterator<int64_t>(0), RunOffset{l});
  auto ends = thrust::make_transform_iterator(thrust::counting_iterator<int64_t>(1), RunOffset{l});
  size_t bytes = 0;
  check(cub::DeviceSegmentedReduce::Sum(nullptr, bytes, x, partial.as<T>(), runs, begins, ends, ctx.stream), "reduce",
        "cub::DeviceSegmentedReduce::Sum");
  DeviceBuffer temp(ctx, std::max<size_t>(bytes, 1));
  check(cub::DeviceSegmentedReduce::Sum(temp.get(), bytes, x, partial.as<T>(), runs, begins, ends, ctx.stream),
        "reduce", "cub::DeviceSegmentedReduce::Sum");
  sum_partials<T, Out, R><<<ctx.grid_for(c, kThreads), kThreads, 0, ctx.stream>>>(partial.as<T>(), out, n, c,
                                                                                  s.kept.ostride[0], s.count);
  check_launch("reduce");
}

template <typename T, typename Out, ReduceOp OP>
void reduce_typed(Context& ctx, const Tensor& out, const Tensor& x, const std::vector<int>& dims) {
  using R = Reducer<T, OP>;
  using Acc = typename R::Acc;
  Split s = split_dims(x, out, dims, is_arg(OP));
  const T* xp = static_cast<const T*>(x.data_ptr());
  Out* op = static_cast<Out*>(out.data_ptr());

  if constexpr (std::is_floating_point_v<T>) {
    if (s.kept.n == 0 && s.red.n == 1 && s.red.stride[0] == 1) {  // the whole of a contiguous tensor
      auto in = thrust::make_transform_iterator(thrust::counting_iterator<int64_t>(0), LoadAt<T, R>{xp});
      DeviceBuffer result(ctx, sizeof(Acc));
      size_t bytes = 0;
      check(cub::DeviceReduce::Reduce(nullptr, bytes, in, result.as<Acc>(), s.count, CombineFn<R>{}, R::identity(),
                                      ctx.stream),
            "reduce", "cub::DeviceReduce::Reduce");
      DeviceBuffer temp(ctx, std::max<size_t>(bytes, 1));
      check(cub::DeviceReduce::Reduce(temp.get(), bytes, in, result.as<Acc>(), s.count, CombineFn<R>{}, R::identity(),
                                      ctx.stream),
            "reduce", "cub::DeviceReduce::Reduce");
      reduce_finish<Out, R><<<1, 32, 0, ctx.stream>>>(result.as<Acc>(), op, s.kept, 1, 1, s.count);
      check_launch("reduce");
      return;
    }
    if constexpr (OP == ReduceOp::sum || OP == ReduceOp::mean) {
      int64_t n = 0, c = 0, l = 0;
      if (geometry::channel_runs(s.geo, n, c, l)) return channel_sums<T, Out, R>(ctx, xp, op, s, n, c, l);
    }
  }

  // Split groups across blocks only when the outputs alone cannot fill the GPU; each split
  // keeps every thread busy for 16 loads (internal/launch_geometry.h).
  geometry::SplitGrid g = geometry::reduce_split(s.outputs, s.count, s.columns, ctx.sm_count, ctx.max_threads_per_sm);
  int64_t splits = g.splits, chunk = g.chunk;
  if (g.blocks > geometry::kGridXMax)
    throw Error("reduce: " + std::to_string(s.outputs) + " outputs are more than one launch covers");
  std::optional<DeviceBuffer> partial;
  if (splits > 1) partial.emplace(ctx, size_t(g.partial_elems()) * sizeof(Acc));
  Acc* pp = partial ? partial->as<Acc>() : nullptr;
  dim3 grid{unsigned(g.blocks), unsigned(splits), 1u};
  if (s.columns)
    reduce_cols<T, Out, R><<<grid, kThreads, 0, ctx.stream>>>(xp, op, pp, s.kept, s.red, s.outputs, s.count, chunk);
  else
    reduce_rows<T, Out, R><<<grid, kThreads, 0, ctx.stream>>>(xp, op, pp, s.kept, s.red, s.outputs, s.count, chunk);
  check_launch("reduce");
  if (splits > 1) {
    reduce_finish<Out, R><<<ctx.grid_for(s.outputs, kThreads), kThreads, 0, ctx.stream>>>(pp, op, s.kept, s.outputs,
                                                                                         int(splits), s.count);
    check_launch("reduce");
  }
}

template <typename T>
void reduce_dispatch(Context& ctx, ReduceOp op, const Tensor& out, const Tensor& x, const std::vector<int>& dims) {
  auto expect_out = [&](DType want) {
    if (out.dtype() != want)
      throw Error(std::string("reduce: expected an output of dtype ") + dtype_name(want) + ", got " +
                  dtype_name(out.dtype()));
  };
  switch (op) {
    case ReduceOp::sum:
      if (out.dtype() == DType::i64 && !std::is_same_v<T, int64_t>) {
        if constexpr (!std::is_floating_point_v<T>) return reduce_typed<T, int64_t, ReduceOp::sum>(ctx, out, x, dims);
      }
      expect_out(x.dtype());
      return reduce_typed<T, T, ReduceOp::sum>(ctx, out, x, dims);
    case ReduceOp::mean: expect_out(x.dtype()); return reduce_typed<T, T, ReduceOp::mean>(ctx, out, x, dims);
    case ReduceOp::max: expect_out(x.dtype()); return reduce_typed<T, T, ReduceOp::max>(ctx, out, x, dims);
    case ReduceOp::min: expect_out(x.dtype()); return reduce_typed<T, T, ReduceOp::min>(ctx, out, x, dims);
    case ReduceOp::prod: expect_out(x.dtype()); return reduce_typed<T, T, ReduceOp::prod>(ctx, out, x, dims);
    case ReduceOp::argmax: expect_out(DType::i64); return reduce_typed<T, int64_t, ReduceOp::argmax>(ctx, out, x, dims);
    case ReduceOp::argmin: expect_out(DType::i64); return reduce_typed<T, int64_t, ReduceOp::argmin>(ctx, out, x, dims);
  }
}

}  // namespace

void CudaBackend::reduce(ReduceOp op, const Tensor& out, const Tensor& x, const std::vector<int>& dims) {
  expect_here("reduce", {&out, &x});
  if (out.numel() == 0) return;
  if (x.numel() == 0) {  // empty groups: sum 0, prod 1, mean NaN (as PyTorch and the CPU)
    fill(out, op == ReduceOp::prod ? 1.0 : op == ReduceOp::mean ? std::numeric_limits<double>::quiet_NaN() : 0.0);
    return;
  }
  Context& c = ctx();
  dispatch(x.dtype(), "reduce", [&]<typename T>() {
    if constexpr (std::is_same_v<T, bool>) {
      throw Error("reduce: convert a bool tensor with .to(DType::i64) before reducing it");
    } else {
      reduce_dispatch<T>(c, op, out, x, dims);
    }
  });
}

}  // namespace reel::cuda
