// The geometry of the elementwise launches (cuda/elementwise.cuh, index.cu, copy.cu): which
// dims a kernel walks, with which strides, in which pieces. Host code without CUDA types, so
// that reel_tests checks it on any machine (test/test_cuda_elementwise_geometry.cpp).
//
// Dims are walked in the order of the output's strides (geometry::order_by_strides: the
// output decides, the inputs break its ties), then merged where they are adjacent in memory
// in every operand. A row-major output keeps the logical order, so the default layout's
// geometry is what merging alone gives; a channels-last output with channels-last operands
// becomes one dense run (the 16-byte vector kernel), with a [C] bias two dims.
// Internal to cuda/.
#pragma once
#include <algorithm>
#include <array>
#include <cstdint>

#include "../../tensor/shape.h"
#include "launch_geometry.h"

namespace reel::cuda {

template <int N>
struct Geometry {
  int ndim = 0;
  int64_t shape[kMaxDims];
  int64_t strides[N][kMaxDims];  // elements; dims outermost first; operand 0 the output
};

// Drops size-1 dims, orders the rest by the operands' strides, and merges dims contiguous
// with each other in every operand. strides[k]: operand k's strides (k = 0: the output).
template <int N>
Geometry<N> coalesce(const Dims& shape, const std::array<const Dims*, N>& strides) {
  int perm[kMaxDims], n = 0;
  for (int d = 0; d < shape.size(); ++d)
    if (shape[d] != 1) perm[n++] = d;
  geometry::order_by_strides(n, N, [&](int k, int d) { return (*strides[size_t(k)])[d]; }, perm);
  Geometry<N> g;
  for (int i = 0; i < n; ++i) {
    const int d = perm[i];
    if (g.ndim > 0) {
      bool merge = true;
      for (int k = 0; k < N; ++k) merge = merge && g.strides[k][g.ndim - 1] == (*strides[size_t(k)])[d] * shape[d];
      if (merge) {
        g.shape[g.ndim - 1] *= shape[d];
        for (int k = 0; k < N; ++k) g.strides[k][g.ndim - 1] = (*strides[size_t(k)])[d];
        continue;
      }
    }
    g.shape[g.ndim] = shape[d];
    for (int k = 0; k < N; ++k) g.strides[k][g.ndim] = (*strides[size_t(k)])[d];
    ++g.ndim;
  }
  return g;
}

// Calls piece(p, first) for pieces p of g of at most max_items elements (one piece, g itself,
// unless the tensor is huge), splitting the outermost dim; first[k] is the element offset of
// the piece's first element in operand k. The pieces cover g's elements once each, whatever
// order its dims are in.
template <int N, typename Piece>
void split_pieces(const Geometry<N>& g, const std::array<int64_t, N>& first, Piece&& piece,
                  int64_t max_items = geometry::kU32Items) {
  int64_t n = 1;
  for (int d = 0; d < g.ndim; ++d) n *= g.shape[d];
  if (n <= max_items) {
    piece(g, first);
    return;
  }
  const int64_t outer = g.shape[0], inner = n / outer;
  Geometry<N> p = g;
  if (inner <= max_items) {  // runs of whole outer rows
    const int64_t rows = std::max<int64_t>(1, max_items / inner);
    for (int64_t r = 0; r < outer; r += rows) {
      p.shape[0] = std::min(rows, outer - r);
      std::array<int64_t, N> f = first;
      for (int k = 0; k < N; ++k) f[size_t(k)] += r * g.strides[k][0];
      split_pieces<N>(p, f, piece, max_items);
    }
    return;
  }
  for (int d = 1; d < g.ndim; ++d) {  // one outer index at a time, recursing into the inner dims
    p.shape[d - 1] = g.shape[d];
    for (int k = 0; k < N; ++k) p.strides[k][d - 1] = g.strides[k][d];
  }
  p.ndim = g.ndim - 1;
  for (int64_t r = 0; r < outer; ++r) {
    std::array<int64_t, N> f = first;
    for (int k = 0; k < N; ++k) f[size_t(k)] += r * g.strides[k][0];
    split_pieces<N>(p, f, piece, max_items);
  }
}

// ---- a copy that is a batched transpose (copy.cu's tiled kernel): g (operand 0 dst,
// operand 1 src) is [batch, rows, cols] (batch 1 when 2-D) with dst's cols and src's rows
// contiguous: dst[b, r, c] at b dst_batch + r dst_row + c, src's at b src_batch + r + c src_col,
// neither plane overlapping itself.
// What an NHWC <-> NCHW copy coalesces to: NHWC into NCHW is [N, C, H W], the reverse
// [N, H W, C]. Both sides at least kTransposeMin long: below that the strided kernel's reads
// share 32-byte sectors anyway, and a 32-wide tile would leave most lanes idle (not measured).
constexpr int64_t kTransposeMin = 8;
struct Transpose {
  bool ok = false;
  int64_t batch = 1, rows = 0, cols = 0;
  int64_t dst_batch = 0, dst_row = 0, src_batch = 0, src_col = 0;
};
inline Transpose as_transpose(const Geometry<2>& g) {
  Transpose t;
  if (g.ndim != 2 && g.ndim != 3) return t;
  const int r = g.ndim - 2, c = g.ndim - 1;
  if (g.strides[0][c] != 1 || g.strides[1][r] != 1) return t;
  if (g.shape[r] < kTransposeMin || g.shape[c] < kTransposeMin) return t;
  t.rows = g.shape[r];
  t.cols = g.shape[c];
  t.dst_row = g.strides[0][r];
  t.src_col = g.strides[1][c];
  if (g.ndim == 3) {
    t.batch = g.shape[0];
    t.dst_batch = g.strides[0][0];
    t.src_batch = g.strides[1][0];
  }
  t.ok = t.dst_row >= t.cols && t.src_col >= t.rows;  // planes without overlap: not a broadcast source
  return t;
}

// The tiled kernel's launch: a block (32 x 8 threads) a 32 x 32 tile, tiles numbered row-major
// along gridDim.x, batches along gridDim.y in a grid-stride loop. blocks 0: more tiles than
// one launch takes (the strided kernel copies it then). The kernel finds its tile with
// transpose_tile_row/col, so that the test's simulation runs the kernel's own formula.
constexpr int kTransposeTile = 32, kTransposeTileRows = 8;
struct TransposeGrid {
  int64_t blocks = 0, batches = 0, col_tiles = 0;
};
inline TransposeGrid transpose_grid(const Transpose& t) {
  TransposeGrid g;
  g.col_tiles = (t.cols + kTransposeTile - 1) / kTransposeTile;
  const int64_t tiles = (t.rows + kTransposeTile - 1) / kTransposeTile * g.col_tiles;
  if (!t.ok || tiles > geometry::kGridXMax) return TransposeGrid{};
  g.blocks = tiles;
  g.batches = std::min(t.batch, geometry::kGridYMax);
  return g;
}
constexpr int64_t transpose_tile_row(int64_t tile, int64_t col_tiles) { return tile / col_tiles * kTransposeTile; }
constexpr int64_t transpose_tile_col(int64_t tile, int64_t col_tiles) { return tile % col_tiles * kTransposeTile; }

}  // namespace reel::cuda
