// The geometry of the CUDA backend's kernel launches: how many blocks, how a reduction
// splits over blockIdx.y, and how large the partial-result buffers those splits write
// must be. Pure functions of shapes and two device properties (SM count, threads per
// SM), no CUDA headers, so that reel_tests checks every rule on any machine
// (test/test_cuda_geometry.cpp): grid dimensions within CUDA's limits, every split
// non-empty, every item covered once, every partial write inside its buffer, 32-bit
// loop counters that cannot wrap. The launch sites in cuda/ size their buffers and
// grids from these functions only.
//
// CUDA graphs: a captured launch keeps the grid, the arguments and the addresses of
// its capture. Nothing here reads device data, so a replay (which always runs the
// captured shapes) launches exactly what the eager step launched; a step with other
// shapes must be captured again (cuda::Graph's rule), never replayed.
// Internal to cuda/.
#pragma once
#include <algorithm>
#include <cstdint>
#include <string_view>
#include <utility>
#include <vector>

#include "../../tensor/shape.h"
#include "env_switch.h"

namespace reel::cuda::geometry {

constexpr int kBlockThreads = 256;  // every kernel's block size (kThreads in cuda/elementwise.cuh)
constexpr int kWarpsPerBlock = kBlockThreads / 32;
constexpr int64_t kGridXMax = 2147483647;  // CUDA's limits on gridDim.x and gridDim.y
constexpr int64_t kGridYMax = 65535;
constexpr int64_t kU32Items = (int64_t(1) << 31) - 1;  // most items a kernel with uint32_t counters takes

// Blocks of `threads` threads for n items, per_thread items each, for a grid-stride loop:
// at least 1, at most enough resident blocks to fill every SM twice over.
inline int64_t grid_for(int64_t n, int threads, int per_thread, int sm_count, int max_threads_per_sm) {
  int64_t per_block = int64_t(threads) * per_thread;
  int64_t blocks = (n + per_block - 1) / per_block;
  int64_t cap = int64_t(sm_count) * std::max(1, max_threads_per_sm / threads) * 2;
  return std::max<int64_t>(1, std::min(blocks, cap));
}

// A grid-stride loop over n items with uint32_t counters (elementwise.cuh's strided
// kernel, index.cu): i + gridDim.x * blockDim.x must not wrap past 2^32 while i < n.
inline bool u32_loop_safe(int64_t n, int64_t grid, int threads) {
  return n <= kU32Items && n + grid * threads <= (int64_t(1) << 32);
}

// ---- the order to walk dims in (cuda/internal/elementwise_geometry.h, cuda/reduce.cu)
// Rewrites perm[0..n) (dims, outermost first) so that the dims adjacent in memory come
// innermost, as PyTorch's TensorIterator orders them (reorder_dimensions): a dim moves
// outside its neighbour when the first operand whose strides tell the two apart gives it the
// larger stride. stride_of(k, d) is operand k's stride of dim d, operand 0 first (the output
// of an elementwise op decides, the inputs break its ties); a 0 stride (a broadcast dim)
// tells nothing. Adjacent swaps only, so dims no operand tells apart keep their order and
// the result is defined even where operands disagree; a row-major operand 0 (strides
// decreasing, as every contiguous tensor's dims of size > 1 are) leaves perm as it is.
template <typename StrideOf>
inline void order_by_strides(int n, int operands, StrideOf&& stride_of, int* perm) {
  auto inside = [&](int a, int b) {  // whether dim a, now outside b, belongs inside it
    for (int k = 0; k < operands; ++k) {
      const int64_t sa = stride_of(k, a), sb = stride_of(k, b);
      if (sa != 0 && sb != 0 && sa != sb) return sa < sb;
    }
    return false;
  };
  for (int i = 1; i < n; ++i)
    for (int j = i; j > 0 && inside(perm[j - 1], perm[j]); --j) std::swap(perm[j - 1], perm[j]);
}

// ---- per-channel sums of a contiguous [N, C, L] (a conv bias gradient; cuda/reduce.cu)
// REEL_CUDA_CHANNEL_SUMS: "cub" (the default: CUB's segmented reduction over the N·C runs, a
// block a run), "warps" (run_sums: a warp a run, 16-byte loads); anything else invalid.
// "onepass" (channel_sums_onepass: blocks of runs a channel, the last block of each channel
// summing its partials, one launch).
enum class ChannelSums { cub, warps, onepass, invalid };
inline constexpr Choice<ChannelSums> kChannelSums[] = {
    {"cub", ChannelSums::cub}, {"warps", ChannelSums::warps}, {"onepass", ChannelSums::onepass}};
inline ChannelSums channel_sums_from_env(const char* value) {
  return parse_choice(value, kChannelSums, ChannelSums::cub, ChannelSums::invalid);
}
inline std::string channel_sums_message(const char* value) {
  return choice_message("reduce", "REEL_CUDA_CHANNEL_SUMS", kChannelSums, value);
}
// run_sums' grid: a warp a run in a grid-stride loop over the runs (warp w of the grid takes
// runs w, w + warps, ...); enough blocks for every run its own warp, at most every SM's
// resident blocks twice over.
inline int64_t run_sums_blocks(int64_t runs, int sm_count, int max_threads_per_sm) {
  const int64_t blocks = (runs + kWarpsPerBlock - 1) / kWarpsPerBlock;
  const int64_t cap = int64_t(sm_count) * std::max(1, max_threads_per_sm / kBlockThreads) * 2;
  return std::max<int64_t>(1, std::min(blocks, cap));
}
// channel_sums_onepass' grid: C x splits blocks, block (j, s) summing runs [s per, (s + 1) per)
// of channel j. Enough splits for one wave of resident blocks over the C channels, but none
// with under kOnepassMinBytes to read (four 16-byte loads a thread) where a channel has more,
// and no more splits than runs or than gridDim.y allows; every run in exactly one split.
constexpr int64_t kOnepassMinBytes = int64_t(16) << 10;
struct OnepassGrid {
  int64_t splits = 1, per = 1;
  int64_t partial_elems(int64_t c) const { return c * splits; }  // the partials: one a block
};
// The per-channel counters' slots on a device: at least c, and 1024 at first so that a
// network's later, wider sums rarely grow them (they are kept for good: a graph may name them)
inline int64_t onepass_counter_slots(int64_t c) { return std::max<int64_t>(c, 1024); }
inline OnepassGrid channel_sums_onepass_grid(int64_t n, int64_t c, int64_t l, int64_t elem_size, int sm_count,
                                             int max_threads_per_sm) {
  const int64_t resident = int64_t(sm_count) * std::max(1, max_threads_per_sm / kBlockThreads);
  const int64_t run_bytes = std::max<int64_t>(1, l * elem_size);
  const int64_t min_runs = std::max<int64_t>(1, (kOnepassMinBytes + run_bytes - 1) / run_bytes);
  const int64_t most = std::max<int64_t>(1, std::min<int64_t>(n / min_runs, 65535));
  const int64_t want = (resident + std::max<int64_t>(c, 1) - 1) / std::max<int64_t>(c, 1);
  OnepassGrid g;
  g.splits = std::clamp<int64_t>(want, 1, most);
  g.per = (std::max<int64_t>(n, 1) + g.splits - 1) / g.splits;
  g.splits = (std::max<int64_t>(n, 1) + g.per - 1) / g.per;  // no empty split
  return g;
}
// Whether every run (l elements of elem_size bytes from a base address) starts on 16 bytes:
// then a lane reads 16 bytes a load (float4, double2).
inline bool run_sums_vectorized(uint64_t base, int64_t l, int64_t elem_size) {
  return base % 16 == 0 && (l * elem_size) % 16 == 0;
}

// A reduction over a 2-D grid. `blocks` blocks along x each own outputs_per_block of the
// `outputs`; the `count` items each output reduces are cut into `splits` chunks of
// `chunk`, block row y taking [y chunk, min((y + 1) chunk, count)). With splits > 1 block
// (x, y) writes its partial result for output o to partial[y * outputs + o], and a
// finishing kernel combines partial[k * outputs + o] for k < splits.
struct SplitGrid {
  int64_t outputs = 0, blocks = 1, splits = 1, chunk = 1;
  int64_t partial_elems() const { return splits * outputs; }  // the buffer's length, in partial results
};

// About `want_blocks` blocks in all; a split keeps at least min_per_split items (so each
// thread has work), and at most max_splits splits. Every split is non-empty: `splits`
// is recounted from the chunk, and the launch and the buffer both use that count.
inline SplitGrid split_grid(int64_t outputs, int64_t outputs_per_block, int64_t count, int64_t want_blocks,
                            int64_t min_per_split, int64_t max_splits) {
  SplitGrid g;
  g.outputs = outputs;
  g.blocks = std::max<int64_t>(1, (outputs + outputs_per_block - 1) / outputs_per_block);
  int64_t s = std::clamp<int64_t>((want_blocks + g.blocks - 1) / g.blocks, 1,
                                  std::max<int64_t>(1, count / std::max<int64_t>(1, min_per_split)));
  s = std::min(s, max_splits);
  g.chunk = std::max<int64_t>(1, (count + s - 1) / s);
  g.splits = std::max<int64_t>(1, (count + g.chunk - 1) / g.chunk);
  return g;
}

// batch_norm's per-channel sums over x [n, c, s] (cuda/norm.cu). s == 1: 32 channels per
// block on consecutive addresses (bn_sums_cols), splits of n; else a block per channel
// (bn_sums_planes), splits of n * s. partial: [splits, c] double2.
inline SplitGrid bn_sums(int64_t n, int64_t c, int64_t s, int sm_count) {
  int64_t want = int64_t(sm_count) * 4;
  if (s == 1) return split_grid(c, 32, n, want, 64, 1024);
  return split_grid(c, 1, n * s, want, int64_t(kBlockThreads) * 8, 1024);
}

// batch_norm_relu's pieces read in place (cuda/norm.cu, REEL_CUDA_BN_RELU=fused): piece x_j
// [n, c_j, s], contiguous, holds channels [c0_j, c0_j + c_j) of y [n, C, s] (the
// concatenation along dim 1 that is never made). Consecutive non-empty pieces go in groups
// of at most kBnMaxPieces, whose pointers and channel offsets ride in the kernels' parameters
// (__grid_constant__): each group is one launch of each kernel (its channel sums, the
// per-channel finish, the elementwise pass), however many pieces it holds, so DenseNet's
// 25-piece norms cost 3 launches, not 3 per piece. The elementwise pass runs over y's
// elements of the group's channels [c0, c1) (y read or written coalesced) and finds each
// element's piece and place in it with the functions below, which the kernels call (nvcc's
// relaxed constexpr): the test's simulation is the kernels' own formula.
constexpr int kBnMaxPieces = 32;

struct BnGroup {
  std::vector<size_t> pieces;  // indices into the pieces, in order, none empty
  int64_t c0 = 0, c1 = 0;      // y's channels the group covers
};
template <typename Counts>
inline std::vector<BnGroup> bn_piece_groups(const Counts& cs, size_t max_pieces = kBnMaxPieces) {
  std::vector<BnGroup> groups;
  int64_t c = 0;
  for (size_t j = 0; j < cs.size(); ++j) {
    const int64_t cj = int64_t(cs[j]);
    if (cj > 0) {
      if (groups.empty() || groups.back().pieces.size() >= max_pieces) groups.push_back(BnGroup{{}, c, c});
      groups.back().pieces.push_back(j);
      groups.back().c1 = c + cj;
    }
    c += cj;
  }
  return groups;
}
// y's index of (nn, ch, sp), y [n, C, s]
constexpr int64_t bn_y_index(int64_t nn, int64_t ch, int64_t sp, int64_t C, int64_t s) { return (nn * C + ch) * s + sp; }
// the slot j < k with off[j] <= ch < off[j + 1] (off: the group's pieces' first channels in y,
// off[k] the group's end; ch inside the group)
template <typename Offsets>
constexpr int bn_find_piece(const Offsets& off, int k, int64_t ch) {
  int j = 0;
  while (j + 1 < k && off[j + 1] <= ch) ++j;
  return j;
}
// the piece's index of y's element (nn, ch, sp), the piece starting at channel off_j with c_j channels
constexpr int64_t bn_piece_index(int64_t nn, int64_t ch, int64_t sp, int64_t off_j, int64_t c_j, int64_t s) {
  return (nn * c_j + (ch - off_j)) * s + sp;
}

// layer_norm's weight and bias gradients: column sums of [rows, d], 32 columns per block
// (ln_backward_wb), splits of rows. partial: [splits, d] double2.
inline SplitGrid ln_weight_grads(int64_t rows, int64_t d, int sm_count) {
  return split_grid(d, 32, rows, int64_t(sm_count) * 4, 64, 1024);
}

// reduce over `count` items per output (cuda/reduce.cu): reduce_cols takes 32 outputs per
// block (the reduced dim is strided), reduce_rows one per warp. The outputs fill the
// GPU first; splits only when they cannot. partial: [splits, outputs] accumulators.
inline SplitGrid reduce_split(int64_t outputs, int64_t count, bool columns, int sm_count, int max_threads_per_sm) {
  int64_t want = int64_t(sm_count) * std::max(1, max_threads_per_sm / kBlockThreads) * 2;
  if (columns) return split_grid(outputs, 32, count, want, kWarpsPerBlock * 16, kGridYMax);
  return split_grid(outputs, kWarpsPerBlock, count, want, 32 * 16, kGridYMax);
}

// ---- a reduction's dims (cuda/reduce.cu): x of `ndim` dims, out of x's rank with each
// reduced dim of size 1. Size-1 dims are dropped. The kept dims go in the order of x's
// strides (out's breaking ties) and stay unmerged: their order only numbers the outputs, and
// `columns` asks whether the innermost is x's contiguous dim (32 outputs a block on
// consecutive addresses). The reduced dims go in the order of x's strides too, merged where
// adjacent in memory, so that a channels-last [N, C, H, W] summed over {0, 2, 3} is the column
// sum it is in memory ([N H W, C] over its rows, no copy) and a transposed view reads its
// groups in memory order. A contiguous x keeps its logical order on both sides (the same
// dims, paths and summation order as before the reordering). `logical_reduced` keeps the
// reduced dims in logical order (argmax, argmin: the answer is the flat index over them).
struct ReduceDims {
  int kept = 0, red = 0;
  int64_t kept_shape[kMaxDims] = {}, kept_xstride[kMaxDims] = {}, kept_ostride[kMaxDims] = {};
  int64_t red_shape[kMaxDims] = {}, red_stride[kMaxDims] = {};
  int64_t outputs = 1, count = 1;  // outputs, and the items each reduces
  bool columns = false;            // the innermost kept dim is x's contiguous one
};

inline ReduceDims reduce_dims(int ndim, const int64_t* shape, const int64_t* xstride, const int64_t* ostride,
                              const bool* reduced, bool logical_reduced) {
  int kept[kMaxDims], red[kMaxDims], nk = 0, nr = 0;
  for (int d = 0; d < ndim; ++d) {
    if (shape[d] == 1) continue;
    if (reduced[d]) red[nr++] = d;
    else kept[nk++] = d;
  }
  order_by_strides(nk, 2, [&](int k, int d) { return k == 0 ? xstride[d] : ostride[d]; }, kept);
  if (!logical_reduced) order_by_strides(nr, 1, [&](int, int d) { return xstride[d]; }, red);
  ReduceDims g;
  for (int i = 0; i < nk; ++i) {
    const int d = kept[i];
    g.kept_shape[g.kept] = shape[d];
    g.kept_xstride[g.kept] = xstride[d];
    g.kept_ostride[g.kept++] = ostride[d];
    g.outputs *= shape[d];
  }
  for (int i = 0; i < nr; ++i) {
    const int64_t n = shape[red[i]], st = xstride[red[i]];
    if (g.red > 0 && g.red_stride[g.red - 1] == st * n) {
      g.red_shape[g.red - 1] *= n;
      g.red_stride[g.red - 1] = st;
    } else {
      g.red_shape[g.red] = n;
      g.red_stride[g.red++] = st;
    }
    g.count *= n;
  }
  g.columns = g.kept > 0 && g.kept_xstride[g.kept - 1] == 1 && (g.red == 0 || g.red_stride[g.red - 1] > 1);
  return g;
}

// Whether g is a contiguous [N, C, L] reduced over N and L with runs L >= min_run (the
// per-channel sums' path, REEL_CUDA_CHANNEL_SUMS); sets n, c, l. A channels-last x is not:
// its channel's elements are strided, and the column kernel reads them.
// Shorter runs leave most of CUB's block per segment idle: the split kernels win.
constexpr int64_t kMinChannelRun = 64;
inline bool channel_runs(const ReduceDims& g, int64_t& n, int64_t& c, int64_t& l) {
  if (g.kept != 1 || g.red < 1 || g.red > 2 || g.red_stride[g.red - 1] != 1) return false;
  l = g.red_shape[g.red - 1];
  c = g.kept_shape[0];
  n = g.red == 2 ? g.red_shape[0] : 1;
  if (g.kept_xstride[0] != l || (g.red == 2 && g.red_stride[0] != c * l)) return false;
  return l >= kMinChannelRun;
}

// The fused optimizer step (cuda/optim.cu): chunks of 4096 elements, blocks take chunks
// grid-stride; at most 8 blocks per SM.
inline int64_t optim_grid(int64_t chunks, int sm_count) {
  return std::max<int64_t>(1, std::min<int64_t>(chunks, int64_t(sm_count) * 8));
}

// Scaled dot-product attention's tiled float32 kernels (cuda/attention_tiled.cu): a block
// owns `rows` (32 or 64) queries (forward, dq) or keys (dk, dv) of one head and streams
// the other side through shared memory 64 at a time; its 4 rows threads each hold a 4 x 4
// block of scores. The head sizes E and Ev are rounded up to 32, 64 or 128 (the register
// arrays the kernels are compiled for). Shared memory holds the tiles, each row padded by
// one float so that column reads fall on distinct banks. 32 rows a block when 64 would
// leave SMs idle (a short or causal sequence on few heads), else 64 (fewer reloads of the
// streamed tiles). A shape the tiles do not serve (a head over 128, tiles over the
// device's shared memory, a grid past gridDim.x) takes the row kernels (cuda/attention.cu),
// as does float64 and REEL_CUDA_ATTENTION=rows.
constexpr int kAttentionTile = 64;  // the streamed side's rows

enum class AttentionKernel { rows, tiles, vector, mma, invalid };
// REEL_CUDA_ATTENTION: unset or empty, the default; "rows", "tiles", "vector" or "mma";
// anything else invalid.
inline constexpr Choice<AttentionKernel> kAttentionKernels[] = {{"rows", AttentionKernel::rows},
                                                                 {"tiles", AttentionKernel::tiles},
                                                                 {"vector", AttentionKernel::vector},
                                                                 {"mma", AttentionKernel::mma}};
inline AttentionKernel attention_kernel_from_env(const char* value, AttentionKernel fallback) {
  return parse_choice(value, kAttentionKernels, fallback, AttentionKernel::invalid);
}

struct AttentionTiles {
  int head = 0;                      // 32, 64 or 128; 0: the tiles do not serve the shape
  int rows = 0;                      // a block's own rows: 32 or 64 (threads: 4 rows)
  int64_t q_tiles = 0, k_tiles = 0;  // blocks of `rows` queries, of `rows` keys, per head
  int64_t forward_blocks = 0, backward_q_blocks = 0, backward_kv_blocks = 0;
  size_t forward_smem = 0, backward_q_smem = 0, backward_kv_smem = 0;  // dynamic shared memory, bytes
  int threads() const { return 4 * rows; }
};

inline int attention_head_bucket(int64_t e, int64_t ev) {
  int64_t h = std::max(e, ev);
  return h <= 32 ? 32 : h <= 64 ? 64 : h <= 128 ? 128 : 0;
}

// Shared memory in bytes: `own` row tiles of the block's rows and `streamed` of 64 rows, each
// [r][head + 1]; `square` score tiles [rows][65]; `vectors` per-row vectors of 64.
inline size_t attention_smem_bytes(int head, int rows, int own, int streamed, int square, int vectors) {
  const size_t t = kAttentionTile, h = size_t(head + 1), r = size_t(rows);
  return sizeof(float) *
         (size_t(own) * r * h + size_t(streamed) * t * h + size_t(square) * r * (t + 1) + size_t(vectors) * t);
}

// bh heads of l queries and s keys; smem_limit: the device's shared memory per block with
// the opt-in (cudaDevAttrMaxSharedMemoryPerBlockOptin); sm_count: its SMs; rows: 32 or 64
// to take that many rows a block whatever the shape (REEL_CUDA_ATTENTION_ROWS), 0 to choose.
inline AttentionTiles attention_tiles(int64_t bh, int64_t l, int64_t s, int64_t e, int64_t ev, size_t smem_limit,
                                      int sm_count, int rows = 0) {
  AttentionTiles t;
  const int head = attention_head_bucket(e, ev);
  if (head == 0 || bh <= 0 || l <= 0 || s <= 0) return t;
  const int64_t wide = bh * ((std::max(l, s) + kAttentionTile - 1) / kAttentionTile);
  t.rows = rows == 32 || rows == 64 ? rows : wide < 4 * int64_t(std::max(1, sm_count)) ? 32 : 64;
  t.q_tiles = (l + t.rows - 1) / t.rows;
  t.k_tiles = (s + t.rows - 1) / t.rows;
  t.forward_blocks = bh * t.q_tiles;
  t.backward_q_blocks = bh * t.q_tiles;
  t.backward_kv_blocks = bh * t.k_tiles;
  t.forward_smem = attention_smem_bytes(head, t.rows, 1, 2, 1, 0);      // q; k, v; the weights
  t.backward_q_smem = attention_smem_bytes(head, t.rows, 2, 2, 1, 2);   // q, do; k, v; ds; lse, D
  t.backward_kv_smem = attention_smem_bytes(head, t.rows, 2, 2, 2, 2);  // k, v; q, do; p z, ds; lse, D
  const size_t most = std::max({t.forward_smem, t.backward_q_smem, t.backward_kv_smem});
  const int64_t blocks = std::max(t.forward_blocks, t.backward_kv_blocks);
  if (most > smem_limit || blocks > kGridXMax) return AttentionTiles{};
  t.head = head;
  return t;
}

// The vector tiles (cuda/attention_vector.cu, REEL_CUDA_ATTENTION=vector): the same blocks
// and grid as attention_tiles, but every shared-memory read 16 bytes wide. The score
// products read both operands transposed ([head][rows + 4]), the weighted sums read the
// streamed tile row-major ([64][head + 4]) and the weights row-major ([rows][68]); a thread
// owns rows 4 ty..4 ty + 3 and columns 4 tx..4 tx + 3 (+ 64). Heads round up to 64 or 128.
inline int attention_vector_head(int64_t e, int64_t ev) {
  int64_t h = std::max(e, ev);
  return h <= 64 ? 64 : h <= 128 ? 128 : 0;
}

// floats: `own_t` own tiles transposed [head][rows + 4], `str_t` streamed transposed
// [head][68], `str_n` streamed row-major [64][head + 4], `weights` [rows][68], `vectors` [64]
inline size_t attention_vector_smem_bytes(int head, int rows, int own_t, int str_t, int str_n, int weights,
                                          int vectors) {
  const size_t h = size_t(head), r = size_t(rows), t = kAttentionTile;
  return sizeof(float) * (size_t(own_t) * h * (r + 4) + size_t(str_t) * h * (t + 4) + size_t(str_n) * t * (h + 4) +
                          size_t(weights) * r * (t + 4) + size_t(vectors) * t);
}

inline AttentionTiles attention_vector_tiles(int64_t bh, int64_t l, int64_t s, int64_t e, int64_t ev,
                                             size_t smem_limit, int sm_count, int rows = 0) {
  AttentionTiles t = attention_tiles(bh, l, s, std::min<int64_t>(e, 128), std::min<int64_t>(ev, 128), size_t(-1),
                                     sm_count, rows);
  const int head = attention_vector_head(e, ev);
  if (head == 0 || t.rows == 0) return AttentionTiles{};
  t.forward_smem = attention_vector_smem_bytes(head, t.rows, 1, 1, 1, 1, 0);      // q^T; k^T; v; the weights
  t.backward_q_smem = attention_vector_smem_bytes(head, t.rows, 2, 2, 1, 1, 2);   // q^T, do^T; k^T, v^T; k; ds
  t.backward_kv_smem = attention_vector_smem_bytes(head, t.rows, 2, 2, 2, 2, 2);  // k^T, v^T; q^T, do^T; q, do
  const size_t most = std::max({t.forward_smem, t.backward_q_smem, t.backward_kv_smem});
  const int64_t blocks = std::max(t.forward_blocks, t.backward_kv_blocks);
  if (most > smem_limit && t.rows == 64 && rows == 0)  // head 128 at 64 rows passes an H100's 227 KiB
    return attention_vector_tiles(bh, l, s, e, ev, smem_limit, sm_count, 32);
  if (most > smem_limit || blocks > kGridXMax) return AttentionTiles{};
  t.head = head;
  return t;
}

// The tensor-core tiles (cuda/attention_mma.cu, cuda/attention_mma_backward.cu,
// REEL_CUDA_ATTENTION=mma): float32 through mma.sync m16n8k8 TF32 with 3xTF32 (sm_80 on;
// cuda/internal/mma_fragments.h). A block of rows / 16 warps owns `rows` (32 or 64) queries
// (forward, dq) or keys (dk, dv) of one head, 16 a warp, and streams the other side 64 rows at
// a time; every tile sits in shared memory row-major [r][head + 4] (the 4 floats of padding put
// the 32 lanes of each fragment load on 32 banks), heads rounded up to 64 or 128 and
// zero-padded. dk, dv at head 128 walk each 64-query tile in two passes of 32 (the scores of
// 32 queries beside dk and dv's 128 accumulators stay in registers). The rows a block follow
// attention_tiles' choice (or REEL_CUDA_ATTENTION_ROWS); 64 rows over the device's shared
// memory retry at 32 unless forced. A shape it does not serve (a head over 128, a device before
// sm_80, tiles over shared memory, a grid past gridDim.x) takes the scalar tiles.
struct AttentionMmaTiles {
  int head = 0;                      // 64 or 128; 0: the mma tiles do not serve the shape
  int rows = 0;                      // a block's own rows: 32 or 64, 16 a warp
  int64_t q_tiles = 0, k_tiles = 0;  // blocks of `rows` queries, of `rows` keys, per head
  int64_t forward_blocks = 0, backward_q_blocks = 0, backward_kv_blocks = 0;
  size_t forward_smem = 0, backward_q_smem = 0, backward_kv_smem = 0;  // dynamic shared memory, bytes
  int warps() const { return rows / 16; }
  int threads() const { return 32 * warps(); }
};

// queries a pass of the dk, dv kernel over a 64-query tile
constexpr int attention_mma_kv_pass(int head) { return head == 128 ? 32 : 64; }

// floats: `own` tiles of the block's rows and `streamed` tiles of 64 rows, each [r][head + 4];
// `vectors` per-query vectors of 64 (lse, D)
inline size_t attention_mma_smem_bytes(int head, int rows, int own, int streamed, int vectors) {
  const size_t p = size_t(head + 4), t = kAttentionTile;
  return sizeof(float) * ((size_t(own) * size_t(rows) + size_t(streamed) * t) * p + size_t(vectors) * t);
}

// cc_major: the device's compute capability (mma.sync with TF32 needs 8 or more)
inline AttentionMmaTiles attention_mma_tiles(int64_t bh, int64_t l, int64_t s, int64_t e, int64_t ev,
                                             size_t smem_limit, int sm_count, int cc_major, int rows = 0) {
  const int head = attention_vector_head(e, ev);
  const AttentionTiles base = attention_tiles(bh, l, s, std::min<int64_t>(e, 128), std::min<int64_t>(ev, 128),
                                              size_t(-1), sm_count, rows);
  if (head == 0 || cc_major < 8 || base.rows == 0) return AttentionMmaTiles{};
  AttentionMmaTiles t;
  t.rows = base.rows;
  t.q_tiles = base.q_tiles;
  t.k_tiles = base.k_tiles;
  t.forward_blocks = bh * t.q_tiles;
  t.backward_q_blocks = bh * t.q_tiles;
  t.backward_kv_blocks = bh * t.k_tiles;
  t.forward_smem = attention_mma_smem_bytes(head, t.rows, 1, 2, 0);      // q; k, v
  t.backward_q_smem = attention_mma_smem_bytes(head, t.rows, 2, 2, 0);   // q, do; k, v
  t.backward_kv_smem = attention_mma_smem_bytes(head, t.rows, 2, 2, 2);  // k, v; q, do; lse, D
  const size_t most = std::max({t.forward_smem, t.backward_q_smem, t.backward_kv_smem});
  const int64_t blocks = std::max(t.forward_blocks, t.backward_kv_blocks);
  if (most > smem_limit && t.rows == 64 && rows == 0)
    return attention_mma_tiles(bh, l, s, e, ev, smem_limit, sm_count, cc_major, 32);
  if (most > smem_limit || blocks > kGridXMax) return AttentionMmaTiles{};
  t.head = head;
  return t;
}

// Block b's head and first row: the forward and dq take the last query tiles first (under
// a causal mask they have the most keys), dk, dv the first key tiles first (the most queries)
struct AttentionBlock {
  int64_t bh, r0;
};
constexpr AttentionBlock attention_query_block(int64_t b, int64_t bh, int64_t q_tiles, int rows) {
  return {b % bh, (q_tiles - 1 - b / bh) * rows};
}
constexpr AttentionBlock attention_key_block(int64_t b, int64_t bh, int rows) { return {b % bh, b / bh * rows}; }

}  // namespace reel::cuda::geometry
