// The CUDA backend's launch geometry (cuda/internal/launch_geometry.h), checked without a
// GPU: for every launch that splits a reduction over blockIdx.y, the writes its kernel
// makes (simulated here from the same formulas the kernels use) stay inside the partial
// buffer the launch site allocates, every split is non-empty, every item is taken once,
// and the grid is within CUDA's limits; grid-stride loops with 32-bit counters cannot
// wrap. The first GPU run's memcheck report (bn_sums_planes writing past a 64-byte
// buffer in a replayed graph) is this class of bug; these rules keep it out of every
// launch on any machine CI runs on. A reduction's dims, ordered by x's strides, reach every
// element once, and a contiguous x keeps the dims (and so the path and summation order) it
// had before the ordering.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "../cuda/internal/launch_geometry.h"

namespace geo = reel::cuda::geometry;

namespace {
// SM counts: one SM, an A100, an H100 SXM, an H200, and a device larger than any today.
const std::vector<int> kSms = {1, 108, 132, 2000};
const std::vector<int64_t> kSizes = {1, 2, 3, 7, 8, 31, 32, 33, 63, 64, 65, 255, 256, 1000, 2047, 2048, 2049, 4096,
                                     65535, 65536, 100003, 1 << 20, int64_t(1) << 31, (int64_t(1) << 33) + 5};

// "" when g is sound for `outputs` outputs of `count` items each, outputs_per_block per
// block; else what is wrong. Simulates the kernels: block (x, y) writes
// partial[y * outputs + o] for each of its outputs o < outputs, reading rows
// [y chunk, min((y + 1) chunk, count)); the finishing kernel reads k * outputs + o, k < splits.
std::string check(const geo::SplitGrid& g, int64_t outputs, int64_t per_block, int64_t count) {
  auto at = [&](const std::string& what) {
    return what + " (outputs " + std::to_string(outputs) + ", count " + std::to_string(count) + ": blocks " +
           std::to_string(g.blocks) + ", splits " + std::to_string(g.splits) + ", chunk " + std::to_string(g.chunk) +
           ")";
  };
  if (g.outputs != outputs) return at("outputs differ");
  if (g.blocks < 1 || g.blocks > geo::kGridXMax) return at("gridDim.x out of range");
  if (g.splits < 1 || g.splits > geo::kGridYMax) return at("gridDim.y out of range");
  if (g.blocks * per_block < outputs) return at("the blocks miss outputs");
  if (g.chunk < 1) return at("empty chunks");
  // coverage: the chunks tile [0, count) and the last one is not empty
  if (g.chunk * g.splits < count) return at("rows left over");
  if (g.chunk * (g.splits - 1) >= count) return at("an empty split (its partial would never be written)");
  // the highest partial index any block writes, and the highest the finish reads
  int64_t last_write = (g.splits - 1) * outputs + (outputs - 1);
  if (last_write >= g.partial_elems()) return at("a write past the partial buffer");
  if (g.partial_elems() != g.splits * outputs) return at("the buffer is not [splits, outputs]");
  return "";
}
}  // namespace

TEST_CASE("batch_norm's channel sums write inside their partial buffer for every shape", "[cuda][geometry][norm]") {
  for (int sms : kSms)
    for (int64_t n : {int64_t(1), int64_t(2), int64_t(16), int64_t(64), int64_t(1000), int64_t(65536)})
      for (int64_t c : {int64_t(1), int64_t(3), int64_t(8), int64_t(33), int64_t(64), int64_t(2048), int64_t(70000)})
        for (int64_t s : {int64_t(1), int64_t(2), int64_t(49), int64_t(256), int64_t(3136), int64_t(1) << 20}) {
          INFO("sms " << sms << " x [" << n << ", " << c << ", " << s << "]");
          geo::SplitGrid g = geo::bn_sums(n, c, s, sms);
          CHECK(check(g, c, s == 1 ? 32 : 1, s == 1 ? n : n * s) == "");
          CHECK(g.splits <= 1024);
        }
  // the memcheck case: BatchNorm2d(8) over [16, 8, 16, 16] on an H200 (132 SMs): 2 splits,
  // a buffer of 2 * 8 double2 = 256 bytes (the 64 bytes memcheck saw were not this buffer)
  geo::SplitGrid g = geo::bn_sums(16, 8, 256, 132);
  CHECK(g.blocks == 8);
  CHECK(g.splits == 2);
  CHECK(g.partial_elems() * 16 == 256);
}

// batch_norm_relu's fused kernels (cuda/norm.cu) over groups of pieces of a never-made
// concatenation: the groups, and the kernels' own index formulas (the split of a group's
// element into batch, channel and position, bn_find_piece, bn_piece_index, bn_y_index)
// simulated over every element.
TEST_CASE("batch_norm_relu's piece groups reach every element of y and of each piece exactly once",
          "[cuda][geometry][norm]") {
  std::vector<std::vector<int64_t>> splits = {{1}, {3}, {2, 5}, {64, 32, 32, 32}, {1, 1, 1}, {4, 0, 3}, {0, 7, 1, 0}};
  std::vector<int64_t> dense(25, 32);  // DenseNet-121's third block's last norm: 25 pieces
  dense[0] = 256;
  splits.push_back(dense);
  splits.push_back(std::vector<int64_t>(70, 1));  // more pieces than one launch takes
  for (const auto& cs : splits)
    for (size_t max_pieces : {size_t(32), size_t(3), size_t(1)})
      for (int64_t n : {int64_t(1), int64_t(3)})
        for (int64_t s : {int64_t(1), int64_t(5)}) {
          int64_t C = 0;
          std::vector<int64_t> first;  // each piece's first channel in y
          for (int64_t c : cs) first.push_back(C), C += c;
          INFO("pieces " << cs.size() << " C " << C << " max " << max_pieces << " n " << n << " s " << s);
          const std::vector<geo::BnGroup> groups = geo::bn_piece_groups(cs, max_pieces);
          // the groups: consecutive, covering [0, C) once, each non-empty piece in one group
          int64_t next = 0;
          size_t taken = 0, nonempty = 0;
          for (int64_t c : cs) nonempty += c > 0;
          for (const geo::BnGroup& g : groups) {
            CHECK(!g.pieces.empty());
            CHECK(g.pieces.size() <= max_pieces);
            CHECK(g.c1 > g.c0);
            int64_t c = g.c0;
            for (size_t j : g.pieces) {
              CHECK(cs[j] > 0);
              CHECK(first[j] == c);
              c += cs[j];
            }
            CHECK(c == g.c1);
            if (g.c0 != next && cs.size() > 0) {  // only empty pieces lie between groups
              for (size_t j = 0; j < cs.size(); ++j)
                if (first[j] >= next && first[j] < g.c0) CHECK(cs[j] == 0);
            }
            next = g.c1;
            taken += g.pieces.size();
          }
          CHECK(next == C);
          CHECK(taken == nonempty);
          // every element of each group, as bn_relu_apply / bn_relu_grad_apply take it
          std::vector<int> y_hits(size_t(n * C * s), 0);
          std::vector<std::vector<int>> x_hits;
          for (int64_t c : cs) x_hits.emplace_back(size_t(n * c * s), 0);
          int64_t wrong = 0;
          for (const geo::BnGroup& g : groups) {
            std::vector<int64_t> off;  // the table's off[0..k]
            for (size_t j : g.pieces) off.push_back(first[j]);
            off.push_back(g.c1);
            const int k = int(g.pieces.size()), cg = int(g.c1 - g.c0);
            for (int64_t i = 0; i < n * cg * s; ++i) {
              const int64_t q = i / s, nn = q / cg, ch = q - nn * cg, sp = i - q * s, yc = g.c0 + ch;
              const int slot = geo::bn_find_piece(off, k, yc);
              const size_t j = g.pieces[size_t(slot)];
              const int64_t xi = geo::bn_piece_index(nn, yc, sp, off[size_t(slot)], off[size_t(slot) + 1] - off[size_t(slot)], s);
              const int64_t f = geo::bn_y_index(nn, yc, sp, C, s);
              REQUIRE(f >= 0);
              REQUIRE(f < n * C * s);
              REQUIRE(xi >= 0);
              REQUIRE(xi < n * cs[j] * s);
              // the element's channel is the piece's, and its place in the piece is (nn, yc - first, sp)
              if (yc < first[j] || yc >= first[j] + cs[j] || xi != (nn * cs[j] + yc - first[j]) * s + sp) ++wrong;
              ++y_hits[size_t(f)];
              ++x_hits[j][size_t(xi)];
            }
          }
          CHECK(wrong == 0);
          CHECK(std::all_of(y_hits.begin(), y_hits.end(), [](int h) { return h == 1; }));
          for (const auto& h : x_hits) CHECK(std::all_of(h.begin(), h.end(), [](int v) { return v == 1; }));
        }
  // one piece is the whole of y: the piece's index is y's
  const std::vector<int64_t> off{0, 6};
  CHECK(geo::bn_find_piece(off, 1, 5) == 0);
  CHECK(geo::bn_piece_index(2, 5, 3, 0, 6, 10) == geo::bn_y_index(2, 5, 3, 6, 10));
  // indices past 2^31 (the kernels' wide path) stay exact in 64 bits
  CHECK(geo::bn_y_index(1, 2, (int64_t(1) << 30) - 1, 3, int64_t(1) << 30) == 6 * (int64_t(1) << 30) - 1);
  CHECK(geo::bn_piece_index(1, 2, 0, 1, 2, int64_t(1) << 30) == 3 * (int64_t(1) << 30));
  // DenseNet's 25 pieces: one launch; 70 one-channel pieces: three
  CHECK(geo::bn_piece_groups(dense).size() == 1);
  CHECK(geo::bn_piece_groups(std::vector<int64_t>(70, 1)).size() == 3);
}

TEST_CASE("layer_norm's weight gradients write inside their partial buffer", "[cuda][geometry][norm]") {
  for (int sms : kSms)
    for (int64_t rows : kSizes)
      for (int64_t d : {int64_t(1), int64_t(31), int64_t(32), int64_t(33), int64_t(768), int64_t(4097)}) {
        if (rows * d > (int64_t(1) << 36)) continue;
        INFO("sms " << sms << " [" << rows << ", " << d << "]");
        CHECK(check(geo::ln_weight_grads(rows, d, sms), d, 32, rows) == "");
      }
}

TEST_CASE("reductions split within gridDim.y and write inside their partial buffer", "[cuda][geometry][reduce]") {
  for (int sms : kSms)
    for (bool columns : {false, true})
      for (int64_t outputs : {int64_t(1), int64_t(7), int64_t(8), int64_t(9), int64_t(32), int64_t(1000),
                              int64_t(1) << 24})
        for (int64_t count : kSizes) {
          INFO("sms " << sms << (columns ? " columns" : " rows") << " outputs " << outputs << " count " << count);
          geo::SplitGrid g = geo::reduce_split(outputs, count, columns, sms, 2048);
          CHECK(check(g, outputs, columns ? 32 : geo::kWarpsPerBlock, count) == "");
        }
  // one output of 2^33 items (a whole-tensor reduction that is not contiguous): the most
  // splits gridDim.y allows, each still non-empty
  geo::SplitGrid g = geo::reduce_split(1, (int64_t(1) << 33) + 5, false, 2000, 2048);
  CHECK(g.splits <= geo::kGridYMax);
  CHECK(check(g, 1, geo::kWarpsPerBlock, (int64_t(1) << 33) + 5) == "");
}

TEST_CASE("grid-stride launches have at least one block, a bounded grid, and 32-bit counters that cannot wrap",
          "[cuda][geometry]") {
  for (int sms : kSms)
    for (int threads : {32, 256, 1024})
      for (int64_t n : kSizes) {
        INFO("sms " << sms << " threads " << threads << " n " << n);
        int64_t grid = geo::grid_for(n, threads, 1, sms, 2048);
        CHECK(grid >= 1);
        CHECK(grid <= int64_t(sms) * std::max(1, 2048 / threads) * 2);
        CHECK(grid <= geo::kGridXMax);
        // the strided elementwise and index kernels take pieces of at most 2^31 - 1 items
        int64_t piece = std::min(n, geo::kU32Items);
        CHECK(geo::u32_loop_safe(piece, geo::grid_for(piece, threads, 1, sms, 2048), threads));
      }
  CHECK(geo::grid_for(0, 256, 1, 132, 2048) == 1);  // an empty launch still has a valid grid
  CHECK_FALSE(geo::u32_loop_safe(int64_t(1) << 31, 1, 256));
  CHECK(geo::u32_loop_safe(geo::kU32Items, int64_t(1) << 23, 256));         // i + 2^31 stays below 2^32
  CHECK_FALSE(geo::u32_loop_safe(geo::kU32Items, int64_t(1) << 24, 256));  // 2^32 threads: i would wrap
  for (int sms : kSms)
    for (int64_t chunks : kSizes) {
      int64_t grid = geo::optim_grid(chunks, sms);
      CHECK(grid >= 1);
      CHECK(grid <= std::max<int64_t>(1, chunks));
    }
}

TEST_CASE("attention's tiles cover every query and key, fit the device's shared memory, and say when they cannot",
          "[cuda][geometry][attention]") {
  using geo::AttentionKernel;
  CHECK(geo::attention_kernel_from_env(nullptr, AttentionKernel::rows) == AttentionKernel::rows);
  CHECK(geo::attention_kernel_from_env("", AttentionKernel::tiles) == AttentionKernel::tiles);
  CHECK(geo::attention_kernel_from_env("rows", AttentionKernel::tiles) == AttentionKernel::rows);
  CHECK(geo::attention_kernel_from_env("tiles", AttentionKernel::rows) == AttentionKernel::tiles);
  CHECK(geo::attention_kernel_from_env("tile", AttentionKernel::rows) == AttentionKernel::invalid);

  CHECK(geo::attention_head_bucket(16, 24) == 32);
  CHECK(geo::attention_head_bucket(64, 64) == 64);
  CHECK(geo::attention_head_bucket(8, 65) == 128);
  CHECK(geo::attention_head_bucket(129, 8) == 0);
  // the forward at head 64, 64 rows a block: q, k, v [64][65] and the weights [64][65], floats
  CHECK(geo::attention_smem_bytes(64, 64, 1, 2, 1, 0) == 4 * (3 * 64 * 65 + 64 * 65));
  CHECK(geo::attention_smem_bytes(64, 32, 1, 2, 1, 0) == 4 * (32 * 65 + 2 * 64 * 65 + 32 * 65));

  const size_t h200 = 232448, a100 = 166912, sm86 = 101376, default_48k = 49152;
  for (size_t limit : {h200, a100, sm86, default_48k})
    for (int sms : {1, 132})
      for (int64_t bh : {int64_t(1), int64_t(6), int64_t(1000)})
        for (int64_t l : {int64_t(1), int64_t(37), int64_t(64), int64_t(65), int64_t(4096)})
          for (int64_t s : {int64_t(1), int64_t(45), int64_t(128), int64_t(4097)})
            for (int64_t e : {int64_t(16), int64_t(64), int64_t(96), int64_t(128), int64_t(200)}) {
              INFO("limit " << limit << " sms " << sms << " bh " << bh << " l " << l << " s " << s << " e " << e);
              geo::AttentionTiles t = geo::attention_tiles(bh, l, s, e, e, limit, sms);
              if (t.head == 0) continue;
              CHECK(t.head >= e);
              CHECK((t.rows == 32 || t.rows == 64));
              CHECK(t.threads() == 4 * t.rows);
              CHECK(t.q_tiles * t.rows >= l);
              CHECK((t.q_tiles - 1) * t.rows < l);
              CHECK(t.k_tiles * t.rows >= s);
              CHECK((t.k_tiles - 1) * t.rows < s);
              CHECK(t.forward_blocks == bh * t.q_tiles);
              CHECK(t.backward_kv_blocks == bh * t.k_tiles);
              CHECK(std::max({t.forward_smem, t.backward_q_smem, t.backward_kv_smem}) <= limit);
            }
  // an H200 serves every head up to 128; an A100 too; 48 KiB serves no head over 32 (the
  // backward's four tiles do not fit), nor does anything serve a head over 128
  CHECK(geo::attention_tiles(6, 1024, 1024, 128, 128, h200, 132).head == 128);
  CHECK(geo::attention_tiles(6, 1024, 1024, 128, 128, a100, 108).head == 128);
  CHECK(geo::attention_tiles(6, 1024, 1024, 64, 64, sm86, 84).head == 64);
  CHECK(geo::attention_tiles(6, 1024, 1024, 64, 64, default_48k, 132).head == 0);
  CHECK(geo::attention_tiles(6, 1024, 1024, 200, 64, h200, 132).head == 0);
  CHECK(geo::attention_tiles(0, 1024, 1024, 64, 64, h200, 132).head == 0);
  CHECK(geo::attention_tiles(6, 0, 1024, 64, 64, h200, 132).head == 0);
  // 32 rows a block while 64 would leave SMs idle; 64 once there are 4 tiles an SM
  CHECK(geo::attention_tiles(6, 1024, 1024, 64, 64, h200, 132).rows == 32);
  CHECK(geo::attention_tiles(528, 64, 64, 64, 64, h200, 132).rows == 64);
  CHECK(geo::attention_tiles(527, 64, 64, 64, 64, h200, 132).rows == 32);
  CHECK(geo::attention_tiles(527, 64, 64, 64, 64, h200, 132, 64).rows == 64);  // REEL_CUDA_ATTENTION_ROWS
  CHECK(geo::attention_tiles(528, 64, 64, 64, 64, h200, 132, 32).rows == 32);
}

TEST_CASE("attention's vector tiles cover every row with 16-byte aligned tiles inside shared memory",
          "[cuda][geometry][attention]") {
  CHECK(geo::attention_kernel_from_env("vector", geo::AttentionKernel::tiles) == geo::AttentionKernel::vector);
  CHECK(geo::attention_vector_head(16, 24) == 64);
  CHECK(geo::attention_vector_head(64, 65) == 128);
  CHECK(geo::attention_vector_head(129, 1) == 0);
  const size_t h200 = 232448, a100 = 166912;
  for (size_t limit : {h200, a100})
    for (int64_t bh : {int64_t(1), int64_t(6), int64_t(1000)})
      for (int64_t l : {int64_t(1), int64_t(37), int64_t(65), int64_t(4096)})
        for (int64_t e : {int64_t(16), int64_t(64), int64_t(96), int64_t(128)})
          for (int rows : {0, 32, 64}) {
            INFO("limit " << limit << " bh " << bh << " l " << l << " e " << e << " rows " << rows);
            geo::AttentionTiles t = geo::attention_vector_tiles(bh, l, l + 3, e, e, limit, 132, rows);
            // unforced, some rows always fit an H200; an A100 (163 KiB) takes heads up to 64
            // (head 128's dk, dv at 32 rows need 192000 bytes: the scalar tiles serve it)
            if (rows == 0 && (limit == h200 || e <= 64)) CHECK(t.head != 0);
            if (t.head == 0) continue;
            CHECK(t.head >= e);
            CHECK(t.head % 64 == 0);
            CHECK(t.q_tiles * t.rows >= l);
            CHECK(t.k_tiles * t.rows >= l + 3);
            CHECK(std::max({t.forward_smem, t.backward_q_smem, t.backward_kv_smem}) <= limit);
            // every sub-array of the kernels starts on 16 bytes: each is a multiple of 4 floats
            CHECK(t.forward_smem % 16 == 0);
            CHECK(t.backward_kv_smem % 16 == 0);
          }
  // head 128 at 64 rows needs 242176 bytes for dk, dv: the H200 takes 32 rows instead
  CHECK(geo::attention_vector_smem_bytes(128, 64, 2, 2, 2, 2, 2) == 242176);
  CHECK(geo::attention_vector_tiles(1000, 4096, 4096, 128, 128, h200, 132).rows == 32);
  CHECK(geo::attention_vector_tiles(1000, 4096, 4096, 64, 64, h200, 132).rows == 64);
  CHECK(geo::attention_vector_tiles(6, 1024, 1024, 128, 128, a100, 108).head == 0);
}

TEST_CASE("the per-channel sums' warp-a-run kernel takes every run once, on a bounded grid, 16 bytes a load only "
          "where every run is aligned", "[cuda][geometry][reduce]") {
  // cub stays the default: the H200 measured warps at 0.68, 0.72, 0.69 of it (three runs,
  // 2026-11-29), but its memcheck and synccheck have not run yet
  CHECK(geo::channel_sums_from_env(nullptr) == geo::ChannelSums::cub);
  CHECK(geo::channel_sums_from_env("") == geo::ChannelSums::cub);
  CHECK(geo::channel_sums_from_env("cub") == geo::ChannelSums::cub);
  CHECK(geo::channel_sums_from_env("warps") == geo::ChannelSums::warps);
  CHECK(geo::channel_sums_from_env("Warps") == geo::ChannelSums::invalid);
  for (int sms : {1, 108, 132})
    for (int64_t runs : {int64_t(1), int64_t(7), int64_t(8), int64_t(9), int64_t(4096), int64_t(100003),
                         int64_t(1) << 31}) {
      INFO(sms << " SMs, " << runs << " runs");
      const int64_t blocks = geo::run_sums_blocks(runs, sms, 2048);
      CHECK(blocks >= 1);
      CHECK(blocks <= geo::kGridXMax);
      CHECK(blocks <= int64_t(sms) * (2048 / geo::kBlockThreads) * 2);  // resident blocks twice over at most
      const int64_t warps = blocks * geo::kWarpsPerBlock;
      if (runs <= warps) CHECK(blocks == (runs + geo::kWarpsPerBlock - 1) / geo::kWarpsPerBlock);  // a warp a run
      if (runs <= 200000) {  // the kernel's grid-stride loop: run r is warp (r mod warps)'s, once
        std::vector<int> taken(size_t(runs), 0);
        for (int64_t w = 0; w < warps; ++w)
          for (int64_t r = w; r < runs; r += warps) ++taken[size_t(r)];
        CHECK(std::all_of(taken.begin(), taken.end(), [](int t) { return t == 1; }));
      }
    }
  CHECK(geo::run_sums_vectorized(0x1000, 1024, 4));      // W7's runs of 1024 floats
  CHECK(geo::run_sums_vectorized(0x1000, 144, 4));       // 12 x 12
  CHECK_FALSE(geo::run_sums_vectorized(0x1000, 81, 4));  // 9 x 9: the second run starts 4 bytes off
  CHECK(geo::run_sums_vectorized(0x1000, 66, 8));        // doubles: pairs
  CHECK_FALSE(geo::run_sums_vectorized(0x1000, 65, 8));
  CHECK_FALSE(geo::run_sums_vectorized(0x1004, 1024, 4));  // a view one float into its storage
}

TEST_CASE("the one-pass per-channel sums split each channel's runs into blocks covering each run once",
          "[cuda][geometry][reduce]") {
  CHECK(geo::channel_sums_from_env("onepass") == geo::ChannelSums::onepass);
  // W7 on an H200: 64 channels of 64 runs of 4 KiB; one wave is 132 x 8 blocks, and a block
  // reads at least 16 KiB: 16 splits of 4 runs
  const geo::OnepassGrid w7 = geo::channel_sums_onepass_grid(64, 64, 1024, 4, 132, 2048);
  CHECK(w7.splits == 16);
  CHECK(w7.per == 4);
  CHECK(w7.partial_elems(64) == 64 * 16);  // a partial for every block of the C x splits grid
  CHECK(geo::onepass_counter_slots(64) == 1024);
  CHECK(geo::onepass_counter_slots(4096) == 4096);
  for (int sms : {1, 108, 132})
    for (int64_t n : {int64_t(1), int64_t(3), int64_t(64), int64_t(1000), int64_t(1) << 20, int64_t(1) << 33})
      for (int64_t c : {int64_t(1), int64_t(3), int64_t(64), int64_t(4096), int64_t(1) << 20})
        for (int64_t l : {int64_t(64), int64_t(1024), int64_t(50176)}) {
          INFO(sms << " SMs, [" << n << ", " << c << ", " << l << "]");
          const geo::OnepassGrid g = geo::channel_sums_onepass_grid(n, c, l, 4, sms, 2048);
          CHECK(g.splits >= 1);
          CHECK(g.splits <= 65535);  // gridDim.y
          CHECK(g.per >= 1);
          CHECK(g.splits * g.per >= n);          // every run in a split
          CHECK((g.splits - 1) * g.per < n);     // no split without runs
          if (n >= 2 * (geo::kOnepassMinBytes / (4 * l) + 1) && g.splits > 1)
            CHECK(g.per * l * 4 >= geo::kOnepassMinBytes);  // no block with little to read where there is more
          if (c >= int64_t(sms) * 8) CHECK(g.splits == 1);  // the channels alone fill a wave
        }
}

namespace {
// A reduction's dims as reduce.cu split them before they were ordered by x's strides: kept
// dims in logical order, reduced ones merged in logical order.
geo::ReduceDims split_in_logical_order(const reel::Dims& shape, const reel::Dims& xs, const reel::Dims& os,
                                       const std::vector<bool>& reduced) {
  geo::ReduceDims g;
  for (int d = 0; d < shape.size(); ++d) {
    const int64_t n = shape[d], st = xs[d];
    if (n == 1) continue;
    if (reduced[size_t(d)]) {
      if (g.red > 0 && g.red_stride[g.red - 1] == st * n) {
        g.red_shape[g.red - 1] *= n;
        g.red_stride[g.red - 1] = st;
      } else {
        g.red_shape[g.red] = n;
        g.red_stride[g.red++] = st;
      }
      g.count *= n;
    } else {
      g.kept_shape[g.kept] = n;
      g.kept_xstride[g.kept] = st;
      g.kept_ostride[g.kept++] = os[d];
      g.outputs *= n;
    }
  }
  g.columns = g.kept > 0 && g.kept_xstride[g.kept - 1] == 1 && (g.red == 0 || g.red_stride[g.red - 1] > 1);
  return g;
}

bool same_dims(const geo::ReduceDims& a, const geo::ReduceDims& b) {
  if (a.kept != b.kept || a.red != b.red || a.outputs != b.outputs || a.count != b.count || a.columns != b.columns)
    return false;
  for (int d = 0; d < a.kept; ++d)
    if (a.kept_shape[d] != b.kept_shape[d] || a.kept_xstride[d] != b.kept_xstride[d] ||
        a.kept_ostride[d] != b.kept_ostride[d])
      return false;
  for (int d = 0; d < a.red; ++d)
    if (a.red_shape[d] != b.red_shape[d] || a.red_stride[d] != b.red_stride[d]) return false;
  return true;
}

geo::ReduceDims reduce_dims(const reel::Dims& shape, const reel::Dims& xs, const std::vector<int>& dims,
                            bool logical = false) {
  reel::Dims out_shape = shape;
  bool reduced[reel::kMaxDims] = {};
  for (int d : dims) reduced[d] = true, out_shape[d] = 1;
  const reel::Dims os = reel::contiguous_strides(out_shape);
  return geo::reduce_dims(shape.size(), shape.data(), xs.data(), os.data(), reduced, logical);
}

// The (x offset, out offset) pairs the reduce kernels visit: output o split over the kept dims
// (KeptCalc), item r over the reduced dims (RedCalc), last dim fastest; against every
// logical element's x offset and its output's offset.
bool visits_every_element_once(const reel::Dims& shape, const reel::Dims& xs, const std::vector<int>& dims,
                               const geo::ReduceDims& g) {
  reel::Dims out_shape = shape;
  for (int d : dims) out_shape[d] = 1;
  const reel::Dims os = reel::contiguous_strides(out_shape);
  std::vector<std::pair<int64_t, int64_t>> seen, want;
  for (int64_t o = 0; o < g.outputs; ++o) {
    int64_t xo = 0, oo = 0, rest = o;
    for (int d = g.kept - 1; d >= 0; --d) {
      xo += rest % g.kept_shape[d] * g.kept_xstride[d];
      oo += rest % g.kept_shape[d] * g.kept_ostride[d];
      rest /= g.kept_shape[d];
    }
    for (int64_t r = 0; r < g.count; ++r) {
      int64_t off = 0, rr = r;
      for (int d = g.red - 1; d >= 0; --d) {
        off += rr % g.red_shape[d] * g.red_stride[d];
        rr /= g.red_shape[d];
      }
      seen.push_back({xo + off, oo});
    }
  }
  const int64_t n = reel::numel_of(shape);
  for (int64_t i = 0; i < n; ++i) {
    int64_t xo = 0, oo = 0, rest = i;
    for (int d = shape.size() - 1; d >= 0; --d) {
      const int64_t idx = rest % shape[d];
      rest /= shape[d];
      xo += idx * xs[d];
      if (out_shape[d] != 1) oo += idx * os[d];
    }
    want.push_back({xo, oo});
  }
  std::sort(seen.begin(), seen.end());
  std::sort(want.begin(), want.end());
  return seen == want;
}
}  // namespace

TEST_CASE("a reduction of a contiguous tensor keeps its dims, paths and order; a channels-last one is ordered by "
          "memory", "[cuda][geometry][reduce][channels_last]") {
  using reel::Dims;
  const std::vector<std::vector<int>> sets = {{0}, {1}, {2}, {3}, {0, 2, 3}, {2, 3}, {0, 1}, {1, 3}, {0, 1, 2, 3}, {}};
  for (Dims shape : {Dims{2, 3, 4, 5}, Dims{4, 17, 9, 9}, Dims{1, 8, 1, 70}, Dims{3, 1, 5, 1}, Dims{2, 16, 8, 8}})
    for (const auto& dims : sets) {
      INFO(shape.str() << " over " << dims.size() << " dims, first " << (dims.empty() ? -1 : dims[0]));
      const Dims c = reel::contiguous_strides(shape), cl = reel::channels_last_strides(shape);
      std::vector<bool> red(4, false);
      for (int d : dims) red[size_t(d)] = true;
      Dims out_shape = shape;
      for (int d : dims) out_shape[d] = 1;
      const geo::ReduceDims g = reduce_dims(shape, c, dims);
      CHECK(same_dims(g, split_in_logical_order(shape, c, reel::contiguous_strides(out_shape), red)));
      CHECK(visits_every_element_once(shape, c, dims, g));
      CHECK(visits_every_element_once(shape, cl, dims, reduce_dims(shape, cl, dims)));
      CHECK(visits_every_element_once(shape, cl, dims, reduce_dims(shape, cl, dims, true)));
    }
  // the conv bias gradient of NCHW keeps the per-channel sums' path (REEL_CUDA_CHANNEL_SUMS)
  int64_t n = 0, c = 0, l = 0;
  const Dims nchw{8, 32, 16, 16};
  geo::ReduceDims g = reduce_dims(nchw, reel::contiguous_strides(nchw), {0, 2, 3});
  CHECK(geo::channel_runs(g, n, c, l));
  CHECK((n == 8 && c == 32 && l == 256));
  CHECK_FALSE(g.columns);
  // ... and NHWC's is the column sum of [N H W, C]: one kept dim of stride 1, one reduced of stride C
  g = reduce_dims(nchw, reel::channels_last_strides(nchw), {0, 2, 3});
  CHECK_FALSE(geo::channel_runs(g, n, c, l));
  CHECK(g.columns);
  CHECK((g.kept == 1 && g.kept_shape[0] == 32 && g.kept_xstride[0] == 1 && g.kept_ostride[0] == 1));
  CHECK((g.red == 1 && g.red_shape[0] == 8 * 16 * 16 && g.red_stride[0] == 32));
  CHECK((g.outputs == 32 && g.count == 2048));
  // NHWC over the batch only: the kept channels innermost (columns, coalesced), not W
  g = reduce_dims(nchw, reel::channels_last_strides(nchw), {0});
  CHECK(g.columns);
  CHECK((g.kept == 3 && g.kept_shape[2] == 32 && g.kept_xstride[2] == 1 && g.kept_ostride[2] == 256));
  // NHWC over the channels: each output's group contiguous (rows)
  g = reduce_dims(nchw, reel::channels_last_strides(nchw), {1});
  CHECK_FALSE(g.columns);
  CHECK((g.red == 1 && g.red_stride[0] == 1));
  // NHWC over H, W (a global average pool): columns of [H W, C] per image
  g = reduce_dims(nchw, reel::channels_last_strides(nchw), {2, 3});
  CHECK(g.columns);
  CHECK((g.red == 1 && g.red_shape[0] == 256 && g.red_stride[0] == 32));
  // a transposed plane summed whole: one contiguous run in memory order, unless argmax's flat
  // index needs the logical order
  const Dims t{4, 6, 12, 16}, ts{1152, 192, 1, 12};
  g = reduce_dims(t, ts, {2, 3});
  CHECK((g.red == 1 && g.red_shape[0] == 192 && g.red_stride[0] == 1));
  CHECK(visits_every_element_once(t, ts, {2, 3}, g));
  g = reduce_dims(t, ts, {2, 3}, true);
  CHECK((g.red == 2 && g.red_stride[0] == 1 && g.red_stride[1] == 12));
}

TEST_CASE("attention's mma tiles cover every query and key once, fit shared memory, and fall back to the tiles",
          "[cuda][geometry][attention]") {
  CHECK(geo::attention_kernel_from_env("mma", geo::AttentionKernel::tiles) == geo::AttentionKernel::mma);
  const size_t h200 = 232448, a100 = 166912, sm86 = 101376, default_48k = 49152;
  // the backward's dk, dv at head 128 and 64 rows: k, v [64][132], q, do [64][132], lse and D of 64
  CHECK(geo::attention_mma_smem_bytes(128, 64, 2, 2, 2) == 4 * (4 * 64 * 132 + 2 * 64));
  CHECK(geo::attention_mma_kv_pass(64) == 64);
  CHECK(geo::attention_mma_kv_pass(128) == 32);
  for (size_t limit : {h200, a100, sm86, default_48k})
    for (int64_t bh : {int64_t(1), int64_t(6), int64_t(1000)})
      for (int64_t l : {int64_t(1), int64_t(37), int64_t(64), int64_t(65), int64_t(4096)})
        for (int64_t s : {int64_t(1), int64_t(45), int64_t(4097)})
          for (int64_t e : {int64_t(16), int64_t(64), int64_t(96), int64_t(128), int64_t(200)})
            for (int rows : {0, 32, 64}) {
              INFO("limit " << limit << " bh " << bh << " l " << l << " s " << s << " e " << e << " rows " << rows);
              const geo::AttentionMmaTiles t = geo::attention_mma_tiles(bh, l, s, e, e, limit, 132, 9, rows);
              // unforced, an H200 and an A100 serve every head up to 128
              if (rows == 0 && e <= 128 && (limit == h200 || limit == a100)) CHECK(t.head != 0);
              if (e > 128) CHECK(t.head == 0);
              if (t.head == 0) continue;
              CHECK(t.head >= e);
              CHECK(t.head % 64 == 0);
              CHECK((t.rows == 32 || t.rows == 64));
              if (rows != 0) CHECK(t.rows == rows);
              CHECK(t.threads() == 2 * t.rows);  // 16 rows a warp
              CHECK(std::max({t.forward_smem, t.backward_q_smem, t.backward_kv_smem}) <= limit);
              CHECK(t.forward_smem % 16 == 0);  // the float4 tile stores: every tile starts on 16 bytes
              CHECK(t.backward_q_smem % 16 == 0);
              CHECK(t.backward_kv_smem % 16 == 0);
              CHECK(t.forward_blocks == bh * t.q_tiles);
              CHECK(t.backward_q_blocks == bh * t.q_tiles);
              CHECK(t.backward_kv_blocks == bh * t.k_tiles);
              // the blocks' rows, as the kernels take them (attention_query_block, attention_key_block),
              // and a warp's 16 rows a C fragment: every (head, query) and (head, key) once
              if (bh * std::max(l, s) > 100000) continue;
              std::vector<int> queries(size_t(bh * l), 0), keys(size_t(bh * s), 0);
              int64_t negative = 0;
              for (int64_t b = 0; b < t.forward_blocks; ++b) {
                const geo::AttentionBlock blk = geo::attention_query_block(b, bh, t.q_tiles, t.rows);
                negative += blk.r0 < 0;
                for (int w = 0; w < t.warps(); ++w)
                  for (int r = 0; r < 16; ++r)
                    if (blk.r0 >= 0 && blk.r0 + 16 * w + r < l) ++queries[size_t(blk.bh * l + blk.r0 + 16 * w + r)];
              }
              CHECK(negative == 0);
              for (int64_t b = 0; b < t.backward_kv_blocks; ++b) {
                const geo::AttentionBlock blk = geo::attention_key_block(b, bh, t.rows);
                for (int w = 0; w < t.warps(); ++w)
                  for (int r = 0; r < 16; ++r)
                    if (blk.r0 + 16 * w + r < s) ++keys[size_t(blk.bh * s + blk.r0 + 16 * w + r)];
              }
              CHECK(std::count(queries.begin(), queries.end(), 1) == bh * l);
              CHECK(std::count(keys.begin(), keys.end(), 1) == bh * s);
            }
  // the rows a block follow the tiles' choice: 32 while 64 would leave SMs idle
  CHECK(geo::attention_mma_tiles(6, 1024, 1024, 64, 64, h200, 132, 9).rows == 32);
  CHECK(geo::attention_mma_tiles(528, 64, 64, 64, 64, h200, 132, 9).rows == 64);
  // head 128 at 64 rows: 135680 bytes, over sm86's 99 KiB; 32 rows need 101888, over it too: the tiles
  CHECK(geo::attention_mma_tiles(1000, 4096, 4096, 128, 128, sm86, 84, 8).head == 0);
  CHECK(geo::attention_mma_tiles(1000, 4096, 4096, 64, 64, sm86, 84, 8).head == 64);
  CHECK(geo::attention_mma_tiles(1000, 4096, 4096, 64, 64, default_48k, 132, 9).head == 0);
  // before sm_80 there is no TF32 mma; a head over 128 or an empty side is the tiles' (or rows') too
  CHECK(geo::attention_mma_tiles(6, 1024, 1024, 64, 64, h200, 132, 7).head == 0);
  CHECK(geo::attention_mma_tiles(6, 1024, 1024, 64, 129, h200, 132, 9).head == 0);
  CHECK(geo::attention_mma_tiles(6, 0, 1024, 64, 64, h200, 132, 9).head == 0);
  CHECK(geo::attention_mma_tiles(6, 1024, 1024, 16, 24, h200, 132, 9).head == 64);
  CHECK(geo::attention_mma_tiles(6, 1024, 1024, 65, 8, h200, 132, 9).head == 128);
}
