// The CUDA backend's elementwise geometry (cuda/internal/elementwise_geometry.h), checked
// without a GPU: dims ordered by the output's strides and merged, the pieces of huge
// tensors, and the tiled transpose of copy.cu. Each geometry is checked by enumerating its
// elements as the strided kernel walks them (flat index, last dim fastest) against the
// logical elements of the operands: the same (output offset, input offsets) tuples, each
// once. For a row-major output the geometry must be what merging alone gave before the
// reordering (merged_in_logical_order below is that code), so the default layout's launches
// did not change.
#include <catch2/catch.hpp>
#include <reel/reel.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <type_traits>
#include <vector>

#include "../cuda/internal/elementwise_geometry.h"

using namespace reel;
using reel::cuda::coalesce;
using reel::cuda::Geometry;

namespace {

template <int N>
using Offsets = std::array<int64_t, N>;

template <int N>
Geometry<N> geometry_of(const Dims& shape, const std::array<Dims, N>& strides) {
  std::array<const Dims*, N> p;
  for (size_t k = 0; k < size_t(N); ++k) p[k] = &strides[k];
  return coalesce<N>(shape, p);
}

// every element's offsets, as the strided kernel computes them from its flat index
template <int N>
std::vector<Offsets<N>> walk(const Geometry<N>& g, const std::type_identity_t<Offsets<N>>& first = {}) {
  int64_t n = 1;
  for (int d = 0; d < g.ndim; ++d) n *= g.shape[d];
  std::vector<Offsets<N>> out;
  for (int64_t i = 0; i < n; ++i) {
    Offsets<N> off = first;
    int64_t rest = i;
    for (int d = g.ndim - 1; d >= 0; --d) {
      const int64_t idx = rest % g.shape[d];
      rest /= g.shape[d];
      for (int k = 0; k < N; ++k) off[size_t(k)] += idx * g.strides[k][d];
    }
    out.push_back(off);
  }
  return out;
}

// every logical element's offsets in each operand
template <int N>
std::vector<Offsets<N>> logical(const Dims& shape, const std::array<Dims, N>& strides) {
  std::vector<Offsets<N>> out;
  const int64_t n = numel_of(shape);
  for (int64_t i = 0; i < n; ++i) {
    Offsets<N> off{};
    int64_t rest = i;
    for (int d = shape.size() - 1; d >= 0; --d) {
      const int64_t idx = rest % shape[d];
      rest /= shape[d];
      for (size_t k = 0; k < size_t(N); ++k) off[k] += idx * strides[k][d];
    }
    out.push_back(off);
  }
  return out;
}

template <typename T>
bool same_elements(std::vector<T> a, std::vector<T> b) {
  std::sort(a.begin(), a.end());
  std::sort(b.begin(), b.end());
  return a == b;
}

// the geometry before the reordering: size-1 dims dropped, dims merged in logical order
template <int N>
Geometry<N> merged_in_logical_order(const Dims& shape, const std::array<Dims, N>& s) {
  Geometry<N> g;
  for (int d = 0; d < shape.size(); ++d) {
    if (shape[d] == 1) continue;
    if (g.ndim > 0) {
      bool merge = true;
      for (int k = 0; k < N; ++k) merge = merge && g.strides[k][g.ndim - 1] == s[size_t(k)][d] * shape[d];
      if (merge) {
        g.shape[g.ndim - 1] *= shape[d];
        for (int k = 0; k < N; ++k) g.strides[k][g.ndim - 1] = s[size_t(k)][d];
        continue;
      }
    }
    g.shape[g.ndim] = shape[d];
    for (int k = 0; k < N; ++k) g.strides[k][g.ndim] = s[size_t(k)][d];
    ++g.ndim;
  }
  return g;
}

template <int N>
bool identical(const Geometry<N>& a, const Geometry<N>& b) {
  if (a.ndim != b.ndim) return false;
  for (int d = 0; d < a.ndim; ++d) {
    if (a.shape[d] != b.shape[d]) return false;
    for (int k = 0; k < N; ++k)
      if (a.strides[k][d] != b.strides[k][d]) return false;
  }
  return true;
}

// shape with its dims broadcast where `keep` is 0 (a [C, 1, 1] bias expanded to [N, C, H, W])
Dims broadcast_strides(const Dims& strides, const Dims& keep) {
  Dims s = strides;
  for (int d = 0; d < s.size(); ++d)
    if (!keep[d]) s[d] = 0;
  return s;
}

const std::vector<Dims> kShapes = {{2, 3, 4, 5}, {1, 17, 5, 7}, {3, 3, 1, 1}, {2, 1, 4, 4}, {2, 64, 7, 7},
                                   {1, 1, 1, 1}, {5, 2, 1, 9},  {4, 8, 2, 1}};

}  // namespace

TEST_CASE("a row-major output keeps the geometry that merging alone gives", "[cuda_geometry][elementwise]") {
  for (const Dims& shape : kShapes) {
    INFO(shape.str());
    const Dims c = contiguous_strides(shape), cl = channels_last_strides(shape);
    const Dims bias = broadcast_strides(c, {0, 1, 0, 0}), scalar = Dims::filled(4, 0);
    // a slice of a larger tensor: row-major with gaps
    const Dims gaps = contiguous_strides({shape[0], shape[1] + 1, shape[2], shape[3] + 2});
    for (const Dims& out : {c, gaps})
      for (const Dims& in : {c, cl, bias, scalar, gaps}) {
        const std::array<Dims, 2> s{out, in};
        CHECK(identical(geometry_of<2>(shape, s), merged_in_logical_order<2>(shape, s)));
        CHECK(same_elements(walk(geometry_of<2>(shape, s)), logical<2>(shape, s)));
        const std::array<Dims, 3> s3{out, in, bias};
        CHECK(identical(geometry_of<3>(shape, s3), merged_in_logical_order<3>(shape, s3)));
      }
  }
  // a contiguous tensor is one run; one with a broadcast [C, 1, 1] bias three dims
  const Dims c{60, 20, 5, 1};
  const Geometry<2> g = geometry_of<2>({2, 3, 4, 5}, {c, c});
  CHECK(g.ndim == 1);
  CHECK(g.shape[0] == 120);
  CHECK(geometry_of<2>({2, 3, 4, 5}, {c, Dims{0, 1, 0, 0}}).ndim == 3);
}

TEST_CASE("channels-last operands of a channels-last output are one dense run; a [C] bias makes two dims",
          "[cuda_geometry][elementwise][channels_last]") {
  for (const Dims& shape : kShapes) {
    INFO(shape.str());
    const Dims cl = channels_last_strides(shape);
    const int64_t n = numel_of(shape), C = shape[1];
    // unary, binary, ternary (add_relu's out, a, b): the vector kernel's one run of stride 1
    const Geometry<3> all = geometry_of<3>(shape, {cl, cl, cl});
    CHECK(all.ndim == (n == 1 ? 0 : 1));
    if (all.ndim == 1) {
      CHECK(all.shape[0] == n);
      for (int k = 0; k < 3; ++k) CHECK(all.strides[k][0] == 1);
    }
    // a conv bias [C] viewed onto the NHWC output with strides {0, 1, 0, 0}
    const std::array<Dims, 3> s{cl, cl, Dims{0, 1, 0, 0}};
    const Geometry<3> g = geometry_of<3>(shape, s);
    CHECK(same_elements(walk(g), logical<3>(shape, s)));
    if (C > 1 && n / C > 1) {
      REQUIRE(g.ndim == 2);
      CHECK(g.shape[0] == n / C);
      CHECK(g.shape[1] == C);
      CHECK((g.strides[0][0] == C && g.strides[0][1] == 1));
      CHECK((g.strides[1][0] == C && g.strides[1][1] == 1));
      CHECK((g.strides[2][0] == 0 && g.strides[2][1] == 1));
    }
    // a broadcast scalar beside channels-last operands: still one run
    const Geometry<3> sc = geometry_of<3>(shape, {cl, cl, Dims::filled(4, 0)});
    CHECK(sc.ndim == (n == 1 ? 0 : 1));
    if (sc.ndim == 1) CHECK(sc.strides[2][0] == 0);
  }
}

TEST_CASE("an NHWC output with an NCHW input (a transposing copy) reaches every element once at its offsets",
          "[cuda_geometry][elementwise][channels_last]") {
  for (const Dims& shape : kShapes) {
    INFO(shape.str());
    const Dims c = contiguous_strides(shape), cl = channels_last_strides(shape);
    for (const auto& s : {std::array<Dims, 2>{cl, c}, std::array<Dims, 2>{c, cl}}) {
      const Geometry<2> g = geometry_of<2>(shape, s);
      CHECK(same_elements(walk(g), logical<2>(shape, s)));
      // the output's innermost dim is its contiguous one: writes coalesce
      if (g.ndim > 0) CHECK(g.strides[0][g.ndim - 1] == 1);
      CHECK(g.ndim <= 3);
    }
  }
  // [2, 17, 5, 7]: NHWC <- NCHW is [N, H W, C], the reverse [N, C, H W]: batched transposes
  const Dims shape{2, 17, 5, 7}, c = contiguous_strides(shape), cl = channels_last_strides(shape);
  const cuda::Transpose to_cl = cuda::as_transpose(geometry_of<2>(shape, {cl, c}));
  CHECK(to_cl.ok);
  CHECK((to_cl.batch == 2 && to_cl.rows == 35 && to_cl.cols == 17));
  CHECK((to_cl.dst_row == 17 && to_cl.src_col == 35 && to_cl.dst_batch == 595 && to_cl.src_batch == 595));
  const cuda::Transpose to_c = cuda::as_transpose(geometry_of<2>(shape, {c, cl}));
  CHECK(to_c.ok);
  CHECK((to_c.batch == 2 && to_c.rows == 17 && to_c.cols == 35));
  CHECK((to_c.dst_row == 35 && to_c.src_col == 17));
  // one image: a plain 2-D transpose; three channels: the strided kernel (too narrow to tile)
  CHECK(cuda::as_transpose(geometry_of<2>({1, 17, 5, 7}, {channels_last_strides({1, 17, 5, 7}),
                                                          contiguous_strides({1, 17, 5, 7})})).batch == 1);
  CHECK_FALSE(cuda::as_transpose(geometry_of<2>({2, 3, 5, 7}, {channels_last_strides({2, 3, 5, 7}),
                                                              contiguous_strides({2, 3, 5, 7})})).ok);
  // same layouts, a slice, a broadcast: no transpose
  CHECK_FALSE(cuda::as_transpose(geometry_of<2>(shape, {c, c})).ok);
  CHECK_FALSE(cuda::as_transpose(geometry_of<2>(shape, {cl, cl})).ok);
  CHECK_FALSE(cuda::as_transpose(geometry_of<2>(shape, {c, Dims{0, 1, 0, 0}})).ok);
}

TEST_CASE("transposed 2-D operands, size-1 dims and broadcast inputs", "[cuda_geometry][elementwise]") {
  const Dims shape{12, 10}, row{10, 1}, col{1, 12};
  // out row-major, input transposed: as before, output order
  Geometry<2> g = geometry_of<2>(shape, {row, col});
  CHECK(identical(g, merged_in_logical_order<2>(shape, {row, col})));
  CHECK(same_elements(walk(g), logical<2>(shape, {row, col})));
  CHECK(cuda::as_transpose(g).ok);
  // out transposed: the walk follows the output's memory ([10, 12], its stride 1 innermost)
  g = geometry_of<2>(shape, {col, row});
  REQUIRE(g.ndim == 2);
  CHECK((g.shape[0] == 10 && g.shape[1] == 12));
  CHECK((g.strides[0][0] == 12 && g.strides[0][1] == 1 && g.strides[1][0] == 1 && g.strides[1][1] == 10));
  CHECK(same_elements(walk(g), logical<2>(shape, {col, row})));
  CHECK(cuda::as_transpose(g).ok);
  // both transposed: one run
  g = geometry_of<2>(shape, {col, col});
  CHECK((g.ndim == 1 && g.shape[0] == 120 && g.strides[1][0] == 1));

  // size-1 dims carry any stride and are dropped before ordering: NHWC of N = 1, W = 1
  const Dims one{1, 8, 3, 1}, odd{7, 1, 8, 99};
  g = geometry_of<2>(one, {odd, odd});
  CHECK((g.ndim == 1 && g.shape[0] == 24 && g.strides[0][0] == 1));
  CHECK(geometry_of<2>({1, 1, 1, 1}, {Dims{5, 4, 3, 2}, Dims{0, 0, 0, 0}}).ndim == 0);

  // broadcast inputs tell nothing; the output orders, and where it has stride 0 too (no
  // output does, but index.cu's walked operand may be an expanded input) the inputs order
  const Dims shape3{4, 5, 6};
  for (const Dims& in : {Dims{0, 0, 0}, Dims{0, 1, 0}, Dims{1, 0, 4}, Dims{0, 6, 1}}) {
    INFO(in.str());
    const std::array<Dims, 2> s{contiguous_strides(shape3), in};
    CHECK(identical(geometry_of<2>(shape3, s), merged_in_logical_order<2>(shape3, s)));
    CHECK(same_elements(walk(geometry_of<2>(shape3, s)), logical<2>(shape3, s)));
  }
  const std::array<Dims, 2> walked{Dims{0, 1, 5}, Dims{1, 0, 4}};  // operand 0 expanded over dim 0
  g = geometry_of<2>(shape3, walked);
  CHECK(same_elements(walk(g), logical<2>(shape3, walked)));
  // operand 0 puts dim 2 outside dim 1; dim 0, where it has stride 0, goes where operand 1
  // puts it: inside dim 2. Walked as [6, 4, 5]
  REQUIRE(g.ndim == 3);
  CHECK((g.shape[0] == 6 && g.shape[1] == 4 && g.shape[2] == 5));
  CHECK(g.strides[0][2] == 1);
  CHECK(g.strides[1][1] == 1);
}

TEST_CASE("geometry::order_by_strides: the first operand that tells two dims apart orders them; ties keep their order",
          "[cuda_geometry][elementwise]") {
  auto order = [](const std::vector<Dims>& s) {
    const int n = s[0].size();
    std::vector<int> perm(static_cast<size_t>(n));
    for (int d = 0; d < n; ++d) perm[size_t(d)] = d;
    cuda::geometry::order_by_strides(n, int(s.size()), [&](int k, int d) { return s[size_t(k)][d]; }, perm.data());
    return perm;
  };
  CHECK(order({{60, 20, 5, 1}}) == std::vector<int>{0, 1, 2, 3});
  CHECK(order({{60, 1, 15, 3}}) == std::vector<int>{0, 2, 3, 1});          // NHWC
  CHECK(order({{60, 1, 15, 3}, {60, 20, 5, 1}}) == std::vector<int>{0, 2, 3, 1});  // the output decides
  CHECK(order({{0, 0, 0}, {1, 12, 4}}) == std::vector<int>{1, 2, 0});     // a broadcast output: inputs decide
  CHECK(order({{0, 0, 0}, {0, 0, 0}}) == std::vector<int>{0, 1, 2});      // nothing decides: as it was
  CHECK(order({{4, 4, 1}}) == std::vector<int>{0, 1, 2});                  // equal strides: stable
  CHECK(order({{4, 4, 1}, {1, 8, 2}}) == std::vector<int>{1, 0, 2});      // ... unless an input tells them apart
  CHECK(order({{1, 3, 9, 27, 81, 243, 729, 2187}}) == std::vector<int>{7, 6, 5, 4, 3, 2, 1, 0});  // reversed, 8 dims
}

TEST_CASE("the pieces of a huge geometry cover its elements once, in any dim order", "[cuda_geometry][elementwise]") {
  const Dims shape{3, 17, 5, 7}, c = contiguous_strides(shape), cl = channels_last_strides(shape);
  for (const auto& s : {std::array<Dims, 2>{cl, c}, std::array<Dims, 2>{c, cl}, std::array<Dims, 2>{cl, cl},
                        std::array<Dims, 2>{cl, Dims{0, 1, 0, 0}}})
    for (int64_t most : {int64_t(1), int64_t(2), int64_t(5), int64_t(16), int64_t(35), int64_t(36), int64_t(100),
                         int64_t(595), int64_t(1784), int64_t(1785)}) {
      const Geometry<2> g = geometry_of<2>(shape, s);
      INFO("most " << most << ", " << g.ndim << " dims");
      std::vector<Offsets<2>> seen;
      int64_t largest = 0;
      cuda::split_pieces<2>(
          g, {},
          [&](const Geometry<2>& p, const Offsets<2>& first) {
            const std::vector<Offsets<2>> e = walk(p, first);
            largest = std::max<int64_t>(largest, int64_t(e.size()));
            seen.insert(seen.end(), e.begin(), e.end());
          },
          most);
      CHECK(largest <= most);
      CHECK(same_elements(seen, logical<2>(shape, s)));
    }
}

TEST_CASE("the tiled transpose's grid and the kernel's tile formula copy every element once from its place",
          "[cuda_geometry][elementwise][channels_last]") {
  using cuda::kTransposeTile;
  using cuda::kTransposeTileRows;
  for (int64_t batch : {int64_t(1), int64_t(3)})
    for (int64_t rows : {int64_t(8), int64_t(17), int64_t(32), int64_t(33), int64_t(70)})
      for (int64_t cols : {int64_t(8), int64_t(31), int64_t(64), int64_t(65)}) {
        INFO("batch " << batch << " rows " << rows << " cols " << cols);
        cuda::Transpose t;
        t.ok = true;
        t.batch = batch, t.rows = rows, t.cols = cols;
        t.dst_row = cols + 2, t.src_col = rows + 1;  // row pitches wider than a row (slices)
        t.dst_batch = rows * t.dst_row, t.src_batch = cols * t.src_col;
        const cuda::TransposeGrid g = cuda::transpose_grid(t);
        REQUIRE(g.blocks >= 1);
        CHECK(g.batches == batch);
        // simulate transpose_kernel: the read phase fills tile[j][x] from src, the write phase
        // stores tile[x][j]; collect (dst offset, src offset) pairs
        std::vector<std::array<int64_t, 2>> writes;
        for (int64_t bx = 0; bx < g.blocks; ++bx)
          for (int64_t by = 0; by < g.batches; ++by) {
            const int64_t r0 = cuda::transpose_tile_row(bx, g.col_tiles);
            const int64_t c0 = cuda::transpose_tile_col(bx, g.col_tiles);
            for (int64_t b = by; b < t.batch; b += g.batches) {
              int64_t tile[kTransposeTile][kTransposeTile + 1];
              for (int ty = 0; ty < kTransposeTileRows; ++ty)
                for (int x = 0; x < kTransposeTile; ++x)
                  for (int j = ty; j < kTransposeTile; j += kTransposeTileRows)
                    if (r0 + x < t.rows && c0 + j < t.cols)
                      tile[j][x] = b * t.src_batch + (r0 + x) + (c0 + j) * t.src_col;
              for (int ty = 0; ty < kTransposeTileRows; ++ty)
                for (int x = 0; x < kTransposeTile; ++x)
                  for (int j = ty; j < kTransposeTile; j += kTransposeTileRows)
                    if (r0 + j < t.rows && c0 + x < t.cols)
                      writes.push_back({b * t.dst_batch + (r0 + j) * t.dst_row + (c0 + x), tile[x][j]});
            }
          }
        std::vector<std::array<int64_t, 2>> want;
        for (int64_t b = 0; b < batch; ++b)
          for (int64_t r = 0; r < rows; ++r)
            for (int64_t c = 0; c < cols; ++c)
              want.push_back({b * t.dst_batch + r * t.dst_row + c, b * t.src_batch + r + c * t.src_col});
        std::sort(writes.begin(), writes.end());
        std::sort(want.begin(), want.end());
        CHECK(writes == want);
      }
  // batches past gridDim.y's limit loop; tiles past gridDim.x's are left to the strided kernel
  cuda::Transpose big;
  big.ok = true, big.batch = 100000, big.rows = 8, big.cols = 8;
  CHECK(cuda::transpose_grid(big).batches == cuda::geometry::kGridYMax);
  big.batch = 1, big.rows = int64_t(1) << 36, big.cols = int64_t(1) << 10;
  CHECK(cuda::transpose_grid(big).blocks == 0);
  CHECK(cuda::transpose_grid(cuda::Transpose{}).blocks == 0);
}
