// The tensor-core attention's index arithmetic (cuda/internal/mma_fragments.h), checked
// without a GPU: the lane -> element maps of mma.sync m16n8k8 .tf32 against the PTX ISA's
// tables, each a bijection; the relabelling that feeds a C fragment to the next product as
// its A operand; the shared-memory offsets of every fragment load on 32 distinct banks at the
// kernels' strides; and one warp run on the CPU: 32 threads execute the kernels' own
// warp-level code (xyT, py, online_softmax) with the mma and the shuffles emulated from the
// maps alone (a lane's registers in, D[m][n] = C[m][n] + sum_k A[m][k] B[k][n] out) and
// cvt.rna.tf32.f32 emulated bit for bit, against plain double-precision products: the
// scores, P V through the relabelled keys, the forward's online softmax over two key tiles
// with a causal mask, dq = dS K, and dk = dS^T Q, dv = (P Z)^T dO from the transposed
// scores in the dk, dv kernel's passes. What this cannot check: the instruction itself (the
// maps are transcribed from the PTX ISA), shared-memory races, and the kernels' code outside
// these functions (masks, dropout and lse are attention.cuh's, shared with the tiles).
#include <catch2/catch.hpp>

#include <barrier>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <random>
#include <set>
#include <thread>
#include <utility>
#include <vector>

#include "../cuda/internal/launch_geometry.h"
#include "../cuda/internal/mma_fragments.h"

namespace fr = reel::cuda::mma;

namespace {

float as_float(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// ---- one warp on the CPU: 32 threads, the collective operations meet at a barrier
struct Warp {
  std::barrier<> meet{32};
  uint32_t a[32][4] = {}, b[32][2] = {};
  float d[32][4] = {}, shuffled[32] = {};
  int mmas = 0;  // counted by lane 0
  // (lane, register) of each element: the inverse of the maps
  int a_at[16][8][2] = {}, b_at[8][8][2] = {};
  Warp() {
    for (int lane = 0; lane < 32; ++lane) {
      for (int i = 0; i < 4; ++i) {
        a_at[fr::a_row(lane, i)][fr::a_col(lane, i)][0] = lane;
        a_at[fr::a_row(lane, i)][fr::a_col(lane, i)][1] = i;
      }
      for (int i = 0; i < 2; ++i) {
        b_at[fr::b_k(lane, i)][fr::b_n(lane, i)][0] = lane;
        b_at[fr::b_k(lane, i)][fr::b_n(lane, i)][1] = i;
      }
    }
  }
};
Warp* the_warp = nullptr;
thread_local int this_lane = 0;

struct HostOps {
  static void split(float x, uint32_t& big, uint32_t& small) {
    big = fr::tf32_bits(x);
    small = fr::tf32_bits(x - as_float(big));
  }
  static void mma(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) {
    Warp& w = *the_warp;
    const int lane = this_lane;
    for (int i = 0; i < 4; ++i) w.a[lane][i] = a[i];
    for (int i = 0; i < 2; ++i) w.b[lane][i] = b[i];
    w.meet.arrive_and_wait();
    float out[4];
    for (int i = 0; i < 4; ++i) {
      const int m = fr::c_row(lane, i), n = fr::c_col(lane, i);
      double acc = d[i];
      for (int k = 0; k < 8; ++k) {
        const int* pa = w.a_at[m][k];
        const int* pb = w.b_at[k][n];
        // the tensor cores read the TF32 bits only: the low 13 bits must be clear already
        acc += double(as_float(w.a[pa[0]][pa[1]] & 0xffffe000u)) * double(as_float(w.b[pb[0]][pb[1]] & 0xffffe000u));
      }
      out[i] = float(acc);
    }
    if (lane == 0) ++w.mmas;
    w.meet.arrive_and_wait();  // every lane has read the operands before any writes its next
    for (int i = 0; i < 4; ++i) d[i] = out[i];
  }
  static float shfl_xor(float v, int m) {
    Warp& w = *the_warp;
    w.shuffled[this_lane] = v;
    w.meet.arrive_and_wait();
    const float r = w.shuffled[this_lane ^ m];
    w.meet.arrive_and_wait();
    return r;
  }
};

// runs fn(lane) on 32 threads as one warp; returns the mma instructions it issued
int run_warp(const std::function<void(int)>& fn) {
  auto w = std::make_unique<Warp>();
  the_warp = w.get();
  std::vector<std::thread> lanes;
  for (int lane = 0; lane < 32; ++lane)
    lanes.emplace_back([&fn, lane] {
      this_lane = lane;
      fn(lane);
    });
  for (std::thread& t : lanes) t.join();
  the_warp = nullptr;
  return w->mmas;
}

// a row-major tile [rows][stride] of uniform values in [-1, 1), zero in the padding
std::vector<float> tile(int rows, int cols, int stride, std::mt19937& rng) {
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  std::vector<float> t(size_t(rows) * stride, 0.f);
  for (int r = 0; r < rows; ++r)
    for (int c = 0; c < cols; ++c) t[size_t(r) * stride + c] = u(rng);
  return t;
}

// got(m, n) against sum_k x y, {x, y} = term(m, n, k): each element within 2^-20 of
// sum_k |x y| (3xTF32 drops ~2^-22 of each product, float32's sum rounds), and the root mean
// square error within twice a plain float32 sum's, where one TF32 pass is hundreds of times it
template <typename Term, typename Got>
void compare(int rows, int cols, int K, Term term, Got got) {
  double e_got = 0, e_f32 = 0, e_tf32 = 0;
  for (int m = 0; m < rows; ++m)
    for (int n = 0; n < cols; ++n) {
      double want = 0, mass = 0;
      float f32 = 0.f, tf32 = 0.f;
      for (int k = 0; k < K; ++k) {
        const auto [x, y] = term(m, n, k);
        want += double(x) * double(y);
        mass += std::fabs(double(x) * double(y));
        f32 = std::fma(x, y, f32);
        tf32 += as_float(fr::tf32_bits(x)) * as_float(fr::tf32_bits(y));
      }
      CHECK(std::fabs(got(m, n) - want) <= mass * std::ldexp(1.0, -20));
      e_got += (got(m, n) - want) * (got(m, n) - want);
      e_f32 += (f32 - want) * (f32 - want);
      e_tf32 += (tf32 - want) * (tf32 - want);
    }
  INFO("rms error " << std::sqrt(e_got / (rows * cols)) << ", a float32 sum's " << std::sqrt(e_f32 / (rows * cols))
                    << ", one TF32 pass's " << std::sqrt(e_tf32 / (rows * cols)));
  CHECK(e_got <= 4 * e_f32);
  CHECK(e_tf32 > 1e4 * e_f32);
}

// S = X Y^T (X: the second warp's 16 rows of a 32-row tile, Y: 64 rows, H dims), then O = S Z
// (Z: 64 x H) with S's C fragments as the A operand, against double products
template <int H>
void check_products(std::mt19937& rng) {
  constexpr int P = H + 4, NT = 8;
  std::vector<float> X = tile(32, H, P, rng), Y = tile(64, H, P, rng), Z = tile(64, H, P, rng);
  static float S[16][64], O[16][H];
  const int mmas = run_warp([&](int lane) {
    float c[NT][4] = {}, o[H / 8][4] = {};
    fr::xyT<HostOps, NT, H>(c, X.data() + 16 * P, P, Y.data(), P, lane);
    for (int nt = 0; nt < NT; ++nt)
      for (int r = 0; r < 4; ++r) S[fr::c_row(lane, r)][8 * nt + fr::c_col(lane, r)] = c[nt][r];
    fr::py<HostOps, NT, H / 8>(o, c, Z.data(), P, lane);
    for (int nt = 0; nt < H / 8; ++nt)
      for (int r = 0; r < 4; ++r) O[fr::c_row(lane, r)][8 * nt + fr::c_col(lane, r)] = o[nt][r];
  });
  CHECK(mmas == 3 * (H / 8 * NT + NT * H / 8));  // 3xTF32: three a product
  compare(16, 64, H, [&](int m, int n, int k) { return std::pair(X[size_t(16 + m) * P + k], Y[size_t(n) * P + k]); },
          [&](int m, int n) { return S[m][n]; });
  compare(16, H, 64, [&](int m, int n, int k) { return std::pair(S[m][k], Z[size_t(k) * P + n]); },
          [&](int m, int n) { return O[m][n]; });
}

}  // namespace

TEST_CASE("mma m16n8k8 tf32 fragments: the PTX maps, each element once, the relabelling, no bank conflicts",
          "[cuda][mma]") {
  // PTX ISA, "Matrix Fragments for mma.m16n8k8" (.tf32), at lane 5 (g = 1, t = 1) and lane 30 (g = 7, t = 2)
  CHECK((fr::a_row(5, 0) == 1 && fr::a_col(5, 0) == 1 && fr::a_row(5, 1) == 9 && fr::a_col(5, 1) == 1));
  CHECK((fr::a_row(5, 2) == 1 && fr::a_col(5, 2) == 5 && fr::a_row(5, 3) == 9 && fr::a_col(5, 3) == 5));
  CHECK((fr::b_k(30, 0) == 2 && fr::b_n(30, 0) == 7 && fr::b_k(30, 1) == 6 && fr::b_n(30, 1) == 7));
  CHECK((fr::c_row(30, 0) == 7 && fr::c_col(30, 0) == 4 && fr::c_row(30, 1) == 7 && fr::c_col(30, 1) == 5));
  CHECK((fr::c_row(30, 2) == 15 && fr::c_col(30, 2) == 4 && fr::c_row(30, 3) == 15 && fr::c_col(30, 3) == 5));
  std::set<int> as, bs, cs;
  for (int lane = 0; lane < 32; ++lane) {
    for (int i = 0; i < 4; ++i) as.insert(fr::a_row(lane, i) * 8 + fr::a_col(lane, i));
    for (int i = 0; i < 2; ++i) bs.insert(fr::b_k(lane, i) * 8 + fr::b_n(lane, i));
    for (int i = 0; i < 4; ++i) cs.insert(fr::c_row(lane, i) * 8 + fr::c_col(lane, i));
  }
  CHECK((as.size() == 128 && *as.rbegin() == 127));
  CHECK((bs.size() == 64 && *bs.rbegin() == 63));
  CHECK((cs.size() == 128 && *cs.rbegin() == 127));
  // the relabelled keys are a permutation, and A's register i is the C register holding its element
  std::set<int> keys;
  for (int k = 0; k < 8; ++k) keys.insert(fr::key_of(k));
  CHECK((keys.size() == 8 && *keys.rbegin() == 7));
  for (int lane = 0; lane < 32; ++lane)
    for (int i = 0; i < 4; ++i) {
      CHECK(fr::c_row(lane, fr::c_of_a(i)) == fr::a_row(lane, i));
      CHECK(fr::c_col(lane, fr::c_of_a(i)) == fr::key_of(fr::a_col(lane, i)));
    }
  // a quad (lanes 4 g..4 g + 3, the shuffles' xor 1 and 2) holds each row of a C fragment
  for (int lane = 0; lane < 32; ++lane)
    for (int x : {1, 2, 3}) CHECK(fr::c_row(lane ^ x, 0) == fr::c_row(lane, 0));
  // the kernels' strides (head + 4): each fragment load of the warp touches 32 distinct banks
  for (int head : {64, 128}) {
    const int stride = head + 4;
    for (int i = 0; i < 4; ++i) {
      std::set<int> banks;
      for (int lane = 0; lane < 32; ++lane) banks.insert(fr::a_offset(lane, i, stride) % 32);
      CHECK(banks.size() == 32);
    }
    for (int i = 0; i < 2; ++i) {
      std::set<int> nk, kn;
      for (int lane = 0; lane < 32; ++lane) {
        nk.insert(fr::b_offset_nk(lane, i, stride) % 32);
        kn.insert(fr::b_offset_kn(lane, i, stride) % 32);
      }
      CHECK(nk.size() == 32);
      CHECK(kn.size() == 32);
    }
  }
  // cvt.rna.tf32.f32: 10 fraction bits, nearest, ties away from zero
  CHECK(fr::tf32_bits(1.f) == 0x3f800000u);
  CHECK(fr::tf32_bits(as_float(0x3f801000u)) == 0x3f802000u);  // a tie rounds away
  CHECK(fr::tf32_bits(as_float(0x3f800fffu)) == 0x3f800000u);
  CHECK(fr::tf32_bits(as_float(0xbf801000u)) == 0xbf802000u);
  CHECK(fr::tf32_bits(INFINITY) == 0x7f800000u);
}

TEST_CASE("one warp's mma on the CPU: a plain 16x8x8 product, X Y^T, and P Y through the relabelled keys",
          "[cuda][mma]") {
  std::mt19937 rng(7);
  SECTION("one instruction, exact TF32 operands") {
    // small integers are exact in TF32 and their sums of 8 products exact in float32
    float A[16][8], B[8][8], C[16][8], D[16][8] = {};
    std::uniform_int_distribution<int> u(-8, 8);
    for (auto& r : A)
      for (float& x : r) x = float(u(rng));
    for (auto& r : B)
      for (float& x : r) x = float(u(rng));
    for (auto& r : C)
      for (float& x : r) x = float(u(rng));
    run_warp([&](int lane) {
      uint32_t a[4], b[2];
      float d[4];
      for (int i = 0; i < 4; ++i) a[i] = fr::tf32_bits(A[fr::a_row(lane, i)][fr::a_col(lane, i)]);
      for (int i = 0; i < 2; ++i) b[i] = fr::tf32_bits(B[fr::b_k(lane, i)][fr::b_n(lane, i)]);
      for (int i = 0; i < 4; ++i) d[i] = C[fr::c_row(lane, i)][fr::c_col(lane, i)];
      HostOps::mma(d, a, b);
      for (int i = 0; i < 4; ++i) D[fr::c_row(lane, i)][fr::c_col(lane, i)] = d[i];
    });
    for (int m = 0; m < 16; ++m)
      for (int n = 0; n < 8; ++n) {
        float want = C[m][n];
        for (int k = 0; k < 8; ++k) want += A[m][k] * B[k][n];
        CHECK(D[m][n] == want);
      }
  }
  SECTION("X Y^T and P Y at head 64") { check_products<64>(rng); }
  SECTION("X Y^T and P Y at head 128") { check_products<128>(rng); }
}

namespace {

// One head of attention with ragged ends (L = 90 queries, S = 120 keys, E and Ev under the
// head), its tiles zero-padded to 128 rows [128][H + 4] as the kernels' shared memory holds
// them, and the double-precision answers: lse, o, D = rowsum(do o), dq, dk, dv
template <int H>
struct Problem {
  static constexpr int P = H + 4, L = 90, S = 120, E = H - 24, Ev = H - 8;
  bool causal;
  float scale = 1.f / std::sqrt(float(E));
  std::vector<float> q, k, v, go;
  std::vector<double> lse, o, D, dq, dk, dv;
  bool visible(int i, int j) const { return i < L && j < S && !(causal && j > i); }
  Problem(bool causal_, std::mt19937& rng)
      : causal(causal_), q(tile(128, E, P, rng)), k(tile(128, E, P, rng)), v(tile(128, Ev, P, rng)),
        go(tile(128, Ev, P, rng)), lse(L), o(size_t(L) * H), D(L), dq(size_t(L) * H), dk(size_t(S) * H),
        dv(size_t(S) * H) {
    for (int r = L; r < 128; ++r)
      for (int c = 0; c < P; ++c) q[size_t(r) * P + c] = go[size_t(r) * P + c] = 0.f;
    for (int r = S; r < 128; ++r)
      for (int c = 0; c < P; ++c) k[size_t(r) * P + c] = v[size_t(r) * P + c] = 0.f;
    auto dot = [](const std::vector<float>& x, int i, const std::vector<float>& y, int j) {
      double s = 0;
      for (int c = 0; c < H; ++c) s += double(x[size_t(i) * P + c]) * double(y[size_t(j) * P + c]);
      return s;
    };
    std::vector<double> p(size_t(L) * S, 0.0), ds(size_t(L) * S, 0.0);
    for (int i = 0; i < L; ++i) {
      double mx = -INFINITY, sum = 0;
      for (int j = 0; j < S; ++j)
        if (visible(i, j)) mx = std::max(mx, scale * dot(q, i, k, j));
      for (int j = 0; j < S; ++j)
        if (visible(i, j)) sum += std::exp(scale * dot(q, i, k, j) - mx);
      lse[i] = mx + std::log(sum);
      for (int j = 0; j < S; ++j)
        if (visible(i, j)) p[size_t(i) * S + j] = std::exp(scale * dot(q, i, k, j) - lse[i]);
      for (int c = 0; c < H; ++c)
        for (int j = 0; j < S; ++j) o[size_t(i) * H + c] += p[size_t(i) * S + j] * v[size_t(j) * P + c];
      for (int c = 0; c < H; ++c) D[i] += double(go[size_t(i) * P + c]) * o[size_t(i) * H + c];
      for (int j = 0; j < S; ++j) ds[size_t(i) * S + j] = scale * p[size_t(i) * S + j] * (dot(go, i, v, j) - D[i]);
    }
    for (int i = 0; i < L; ++i)
      for (int j = 0; j < S; ++j)
        for (int c = 0; c < H; ++c) {
          dq[size_t(i) * H + c] += ds[size_t(i) * S + j] * k[size_t(j) * P + c];
          dk[size_t(j) * H + c] += ds[size_t(i) * S + j] * q[size_t(i) * P + c];
          dv[size_t(j) * H + c] += p[size_t(i) * S + j] * go[size_t(i) * P + c];
        }
  }
};

// The forward kernel's warp 1 of a 32-row block at query 64 (rows 80..95, 90..95 past L),
// over the key tiles at 0 and 64 (keys 120..127 past S): o and lse against the double answer
template <int H>
void check_forward(const Problem<H>& pr) {
  constexpr int P = H + 4, NO = H / 8;
  const int iw = 80;
  static float o[16][H], lse[16];
  run_warp([&](int lane) {
    float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.f, 0.f}, acc[NO][4] = {};
    const int jend = pr.causal ? std::min(pr.S, 64 + 32) : pr.S;
    for (int j0 = 0; j0 < jend; j0 += 64) {
      float s[8][4] = {};
      fr::xyT<HostOps, 8, H>(s, pr.q.data() + iw * P, P, pr.k.data() + j0 * P, P, lane);
      for (int nt = 0; nt < 8; ++nt)
        for (int r = 0; r < 4; ++r) {
          const int i = iw + fr::c_row(lane, r), j = j0 + 8 * nt + fr::c_col(lane, r);
          s[nt][r] = pr.visible(i, j) ? pr.scale * s[nt][r] : -INFINITY;
        }
      fr::online_softmax<HostOps>(s, m, l, acc);
      fr::py<HostOps, 8, NO>(acc, s, pr.v.data() + j0 * P, P, lane);
    }
    for (int h = 0; h < 2; ++h) {
      for (int nt = 0; nt < NO; ++nt) acc[nt][2 * h] /= l[h], acc[nt][2 * h + 1] /= l[h];
      if (fr::in_group(lane) == 0) lse[fr::c_row(lane, 2 * h)] = m[h] + std::log(l[h]);
    }
    for (int nt = 0; nt < NO; ++nt)
      for (int r = 0; r < 4; ++r) o[fr::c_row(lane, r)][8 * nt + fr::c_col(lane, r)] = acc[nt][r];
  });
  for (int r = 0; r < 10; ++r) {  // rows 80..89; 90.. are past L
    CHECK(std::fabs(lse[r] - pr.lse[iw + r]) < 2e-6);
    for (int c = 0; c < H; ++c) CHECK(std::fabs(o[r][c] - pr.o[size_t(iw + r) * H + c]) < 2e-6);
  }
}

// ds_ij = scale p_ij (do_i . v_j - D_i), p_ij = e^(scale q_i . k_j - lse_i): attention.cuh's
// grads_at without masks and dropout
float ds_of(float qk, float dp, float scale, float lse, float D) {
  return scale * std::exp(scale * qk - lse) * (dp - D);
}

// The dq kernel's warp 1 (rows 80..95) over the key tiles: dq = dS K, dS's fragments as A
template <int H>
void check_dq(const Problem<H>& pr) {
  constexpr int P = H + 4, NO = H / 8;
  const int iw = 80;
  static float dq[16][H];
  run_warp([&](int lane) {
    float gq[NO][4] = {};
    const int jend = pr.causal ? std::min(pr.S, 64 + 32) : pr.S;
    for (int j0 = 0; j0 < jend; j0 += 64) {
      float s[8][4] = {}, dp[8][4] = {};
      fr::xyT<HostOps, 8, H>(s, pr.q.data() + iw * P, P, pr.k.data() + j0 * P, P, lane);
      fr::xyT<HostOps, 8, H>(dp, pr.go.data() + iw * P, P, pr.v.data() + j0 * P, P, lane);
      for (int nt = 0; nt < 8; ++nt)
        for (int r = 0; r < 4; ++r) {
          const int i = iw + fr::c_row(lane, r), j = j0 + 8 * nt + fr::c_col(lane, r);
          s[nt][r] = pr.visible(i, j) ? ds_of(s[nt][r], dp[nt][r], pr.scale, float(pr.lse[i]), float(pr.D[i])) : 0.f;
        }
      fr::py<HostOps, 8, NO>(gq, s, pr.k.data() + j0 * P, P, lane);
    }
    for (int nt = 0; nt < NO; ++nt)
      for (int r = 0; r < 4; ++r) dq[fr::c_row(lane, r)][8 * nt + fr::c_col(lane, r)] = gq[nt][r];
  });
  for (int r = 0; r < 10; ++r)
    for (int c = 0; c < H; ++c) CHECK(std::fabs(dq[r][c] - pr.dq[size_t(iw + r) * H + c]) < 2e-6);
}

// The dk, dv kernel's warp 1 of a 32-key block at key 32 (keys 48..63) over the query tiles,
// each in passes of attention_mma_kv_pass(H) queries: the transposed scores K Q^T and V dO^T,
// then dv = (P Z)^T dO and dk = dS^T Q with the transposed fragments as A
template <int H>
void check_dkv(const Problem<H>& pr) {
  constexpr int P = H + 4, NO = H / 8, QP = reel::cuda::geometry::attention_mma_kv_pass(H), NP = QP / 8;
  const int j0 = 32, jw = 48;
  static float dk[16][H], dv[16][H];
  run_warp([&](int lane) {
    float gk[NO][4] = {}, gv[NO][4] = {};
    for (int i0 = pr.causal ? j0 : 0; i0 < pr.L; i0 += 64)
      for (int q0 = 0; q0 < 64; q0 += QP) {
        float st[NP][4] = {}, dpt[NP][4] = {};
        fr::xyT<HostOps, NP, H>(st, pr.k.data() + jw * P, P, pr.q.data() + (i0 + q0) * P, P, lane);
        fr::xyT<HostOps, NP, H>(dpt, pr.v.data() + jw * P, P, pr.go.data() + (i0 + q0) * P, P, lane);
        for (int nt = 0; nt < NP; ++nt)
          for (int r = 0; r < 4; ++r) {
            const int i = i0 + q0 + 8 * nt + fr::c_col(lane, r), j = jw + fr::c_row(lane, r);
            const bool on = pr.visible(i, j);
            const float lse = on ? float(pr.lse[i]) : 0.f, D = on ? float(pr.D[i]) : 0.f;
            const float p = on ? std::exp(pr.scale * st[nt][r] - lse) : 0.f;
            dpt[nt][r] = on ? ds_of(st[nt][r], dpt[nt][r], pr.scale, lse, D) : 0.f;
            st[nt][r] = p;
          }
        fr::py<HostOps, NP, NO>(gv, st, pr.go.data() + (i0 + q0) * P, P, lane);
        fr::py<HostOps, NP, NO>(gk, dpt, pr.q.data() + (i0 + q0) * P, P, lane);
      }
    for (int nt = 0; nt < NO; ++nt)
      for (int r = 0; r < 4; ++r) {
        dk[fr::c_row(lane, r)][8 * nt + fr::c_col(lane, r)] = gk[nt][r];
        dv[fr::c_row(lane, r)][8 * nt + fr::c_col(lane, r)] = gv[nt][r];
      }
  });
  for (int r = 0; r < 16; ++r)
    for (int c = 0; c < H; ++c) {
      CHECK(std::fabs(dk[r][c] - pr.dk[size_t(jw + r) * H + c]) < 2e-6);
      CHECK(std::fabs(dv[r][c] - pr.dv[size_t(jw + r) * H + c]) < 2e-6);
    }
}

template <int H>
void check_attention(bool causal) {
  std::mt19937 rng(causal ? 11 : 12);
  const Problem<H> pr(causal, rng);
  check_forward(pr);
  check_dq(pr);
  check_dkv(pr);
}

}  // namespace

TEST_CASE("one warp of each mma attention kernel on the CPU: forward, dq and dk, dv against double precision",
          "[cuda][mma]") {
  for (bool causal : {false, true}) {
    INFO("causal " << causal);
    check_attention<64>(causal);
    check_attention<128>(causal);
  }
}
