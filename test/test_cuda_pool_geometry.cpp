// The index arithmetic of CUDA pooling (cuda/internal/pool_geometry.h), checked without a
// GPU: the kernels of cuda/pool.cu call these functions, so what holds here holds there.
// A tensor's walk (PoolTensor::at) must be its memory order: row-major for a contiguous
// tensor (the order, and so the bits, the kernels always had), channel fastest for NHWC,
// one visit per element for every layout, dense or not; and the window rules must agree
// with a brute-force reading of the pooling's definition.
#include <catch2/catch.hpp>

#include <algorithm>
#include <array>
#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "../cuda/internal/pool_geometry.h"

namespace geo = reel::cuda::geometry;

namespace {

using A4 = std::array<int64_t, 4>;

A4 contiguous(const A4& s) { return {s[1] * s[2] * s[3], s[2] * s[3], s[3], 1}; }
A4 nhwc(const A4& s) { return {s[2] * s[3] * s[1], 1, s[3] * s[1], s[1]}; }

// sizes with 1s among them, as the kernels meet them (N = 1, C = 1, 1x1 planes)
const std::vector<A4> kShapes = {{2, 3, 4, 5}, {1, 3, 4, 5}, {2, 1, 4, 5}, {2, 3, 1, 5}, {2, 3, 4, 1},
                                 {1, 1, 1, 1}, {1, 4, 1, 1}, {3, 1, 1, 2}, {1, 1, 3, 1}, {2, 5, 3, 3}};

std::string str(const A4& a) {
  return "[" + std::to_string(a[0]) + ", " + std::to_string(a[1]) + ", " + std::to_string(a[2]) + ", " +
         std::to_string(a[3]) + "]";
}

// Dense strides laying out `s` with its dims in memory order `perm` (outermost first).
A4 dense(const A4& s, const A4& perm) {
  A4 st{};
  int64_t step = 1;
  for (int k = 3; k >= 0; --k) {
    st[perm[k]] = step;
    step *= s[perm[k]];
  }
  return st;
}

bool same(const geo::Nchw& a, const geo::Nchw& b) { return a.n == b.n && a.c == b.c && a.h == b.h && a.w == b.w; }

}  // namespace

TEST_CASE("pool geometry: a contiguous tensor is walked row-major, as the kernels always did",
          "[cuda_geometry][pool]") {
  for (const A4& s : kShapes) {
    INFO("shape " << str(s));
    const geo::PoolTensor t = geo::pool_tensor(s, contiguous(s));
    REQUIRE(t.numel() == s[0] * s[1] * s[2] * s[3]);
    for (int64_t i = 0; i < t.numel(); ++i) {
      // the decomposition cuda/pool.cu had before it took strides
      const int64_t w = i % s[3], h = (i / s[3]) % s[2], plane = i / (s[3] * s[2]);
      const geo::Nchw e = t.at(i);
      REQUIRE(same(e, {plane / s[1], plane % s[1], h, w}));
      REQUIRE(t.offset(e) == i);
    }
  }
}

TEST_CASE("pool geometry: an NHWC tensor is walked channel fastest, each element at its own address",
          "[cuda_geometry][pool]") {
  for (const A4& s : kShapes) {
    INFO("shape " << str(s));
    const geo::PoolTensor t = geo::pool_tensor(s, nhwc(s));
    for (int64_t i = 0; i < t.numel(); ++i) {
      const geo::Nchw e = t.at(i);
      REQUIRE(same(e, {i / (s[2] * s[3] * s[1]), i % s[1], (i / (s[1] * s[3])) % s[2], (i / s[1]) % s[3]}));
      REQUIRE(t.offset(e) == ((e.n * s[2] + e.h) * s[3] + e.w) * s[1] + e.c);
      REQUIRE(t.offset(e) == i);  // consecutive threads store to consecutive addresses
    }
  }
  // [2, 3, 2, 2] NHWC: the first elements walked are (0, 0, 0, 0), (0, 1, 0, 0), (0, 2, 0, 0), (0, 0, 0, 1)
  const geo::PoolTensor t = geo::pool_tensor(A4{2, 3, 2, 2}, nhwc({2, 3, 2, 2}));
  CHECK(same(t.at(1), {0, 1, 0, 0}));
  CHECK(same(t.at(2), {0, 2, 0, 0}));
  CHECK(same(t.at(3), {0, 0, 0, 1}));
  CHECK(same(t.at(6), {0, 0, 1, 0}));
  CHECK(same(t.at(12), {1, 0, 0, 0}));
}

TEST_CASE("pool geometry: every dense layout is walked in its memory order", "[cuda_geometry][pool]") {
  A4 perm{0, 1, 2, 3};
  do {
    for (const A4& s : kShapes) {
      INFO("shape " << str(s) << ", dims outermost first " << str(perm));
      const geo::PoolTensor t = geo::pool_tensor(s, dense(s, perm));
      for (int64_t i = 0; i < t.numel(); ++i) {
        const geo::Nchw e = t.at(i);
        REQUIRE((e.n >= 0 && e.n < s[0] && e.c >= 0 && e.c < s[1] && e.h >= 0 && e.h < s[2] && e.w >= 0 &&
                 e.w < s[3]));
        REQUIRE(t.offset(e) == i);
      }
    }
  } while (std::next_permutation(perm.begin(), perm.end()));
}

TEST_CASE("pool geometry: size-1 dims with arbitrary strides change nothing", "[cuda_geometry][pool]") {
  // [2, 1, 3, 1] whose size-1 dims carry strides a permute or an unsqueeze could leave
  const A4 s{2, 1, 3, 1};
  for (const A4& st : {A4{3, 1, 1, 1}, A4{3, 99, 1, 0}, A4{3, 0, 1, 7}, A4{3, 3, 1, 3}}) {
    INFO("strides " << str(st));
    const geo::PoolTensor t = geo::pool_tensor(s, st);
    for (int64_t i = 0; i < t.numel(); ++i) {
      const geo::Nchw e = t.at(i);
      REQUIRE(same(e, {i / 3, 0, i % 3, 0}));
      REQUIRE(t.offset(e) == i);
    }
  }
}

TEST_CASE("pool geometry: mixed layouts in one call (the staged f16/bf16 pool)", "[cuda_geometry][pool]") {
  // out a contiguous f32 twin, indices the caller's NHWC: walking out, each element's index
  // goes to the NHWC address of the same (n, c, h, w)
  const A4 s{2, 3, 4, 5};
  const geo::PoolTensor out = geo::pool_tensor(s, contiguous(s)), idx = geo::pool_tensor(s, nhwc(s));
  std::set<int64_t> seen;
  for (int64_t i = 0; i < out.numel(); ++i) {
    const geo::Nchw e = out.at(i);
    REQUIRE(out.offset(e) == i);
    REQUIRE(idx.offset(e) == ((e.n * s[2] + e.h) * s[3] + e.w) * s[1] + e.c);
    seen.insert(idx.offset(e));
  }
  CHECK(int64_t(seen.size()) == out.numel());
  CHECK(*seen.rbegin() == out.numel() - 1);
  // and the other way round: an NHWC out beside contiguous indices
  for (int64_t i = 0; i < idx.numel(); ++i) {
    const geo::Nchw e = idx.at(i);
    REQUIRE(idx.offset(e) == i);
    REQUIRE(out.offset(e) == ((e.n * s[1] + e.c) * s[2] + e.h) * s[3] + e.w);
  }
}

TEST_CASE("pool geometry: strided views that are not dense", "[cuda_geometry][pool]") {
  SECTION("a narrowed, stepped view of a contiguous base: walked row-major, at the view's addresses") {
    // base [2, 5, 6, 8] contiguous; view [2, 3, 4, 3]: channels 1..3, rows 1..4, every other column
    const A4 base{2, 5, 6, 8}, bs = contiguous(base), s{2, 3, 4, 3};
    const A4 st{bs[0], bs[1], bs[2], 2 * bs[3]};
    const geo::PoolTensor t = geo::pool_tensor(s, st);
    std::set<int64_t> seen;
    for (int64_t i = 0; i < t.numel(); ++i) {
      const geo::Nchw e = t.at(i);
      const int64_t w = i % s[3], h = (i / s[3]) % s[2], plane = i / (s[3] * s[2]);
      REQUIRE(same(e, {plane / s[1], plane % s[1], h, w}));
      REQUIRE(t.offset(e) == e.n * 240 + e.c * 48 + e.h * 8 + e.w * 2);
      seen.insert(t.offset(e));
    }
    CHECK(int64_t(seen.size()) == t.numel());
    CHECK(*seen.rbegin() < base[0] * base[1] * base[2] * base[3]);
  }
  SECTION("some channels of an NHWC base: walked channel fastest") {
    // base [2, 8, 3, 4] NHWC; view: channels 2..6
    const A4 base{2, 8, 3, 4}, s{2, 5, 3, 4};
    const geo::PoolTensor t = geo::pool_tensor(s, nhwc(base));
    for (int64_t i = 0; i < t.numel(); ++i) {
      const geo::Nchw e = t.at(i);
      REQUIRE(same(e, {i / 60, i % 5, (i / 20) % 3, (i / 5) % 4}));
      REQUIRE(t.offset(e) == ((e.n * 3 + e.h) * 4 + e.w) * 8 + e.c);
    }
  }
  SECTION("an expanded (stride 0) gradient is read at one address per broadcast") {
    const geo::PoolTensor t = geo::pool_tensor(A4{2, 3, 4, 5}, A4{0, 0, 0, 0});
    for (int64_t i = 0; i < t.numel(); ++i) REQUIRE(t.offset(t.at(i)) == 0);
  }
}

namespace {

// the outputs along one dim as autograd/ops_pool.cpp's pooled_size computes them
int64_t pooled(int64_t in, int64_t k, int64_t s, int64_t pad, bool ceil) {
  int64_t span = in + 2 * pad - (k - 1) - 1;
  int64_t out = (ceil ? span + s - 1 : span) / s + 1;
  if (ceil && (out - 1) * s >= in + pad) --out;
  return out;
}

std::vector<geo::PoolWindow> windows() {
  std::vector<geo::PoolWindow> r;
  for (int64_t h : {1, 2, 5, 7})
    for (int k : {1, 2, 3, 4})
      for (int s : {1, 2, 3})
        for (int p = 0; 2 * p <= k; ++p)
          for (bool ceil : {false, true})
            for (bool pad : {false, true}) {
              if (k > h + 2 * p) continue;
              geo::PoolWindow g;
              g.h = h;
              g.w = h + 1;  // a different width
              g.kh = k;
              g.kw = k;
              g.sh = s;
              g.sw = s == 3 ? 1 : s + 1;
              g.ph = p;
              g.pw = p;
              g.oh = pooled(g.h, k, g.sh, p, ceil);
              g.ow = pooled(g.w, k, g.sw, p, ceil);
              g.include_pad = pad;
              r.push_back(g);
            }
  return r;
}

std::string str(const geo::PoolWindow& g) {
  return "in " + std::to_string(g.h) + "x" + std::to_string(g.w) + ", out " + std::to_string(g.oh) + "x" +
         std::to_string(g.ow) + ", kernel " + std::to_string(g.kh) + ", stride " + std::to_string(g.sh) + "x" +
         std::to_string(g.sw) + ", padding " + std::to_string(g.ph) + (g.include_pad ? ", pad counted" : "");
}

}  // namespace

TEST_CASE("pool geometry: the windows and the outputs the backward gathers from", "[cuda_geometry][pool]") {
  const std::vector<geo::PoolWindow> gs = windows();
  REQUIRE(gs.size() > 50);
  for (const geo::PoolWindow& g : gs) {
    INFO(str(g));
    for (int64_t oh = 0; oh < g.oh; ++oh)
      for (int64_t ow = 0; ow < g.ow; ++ow) {
        const int64_t hs = oh * g.sh - g.ph, ws = ow * g.sw - g.pw;
        const geo::Span2 s = geo::pool_window(g, oh, ow);
        REQUIRE(s.h0 == std::max<int64_t>(hs, 0));
        REQUIRE(s.h1 == std::min<int64_t>(hs + g.kh, g.h));
        REQUIRE(s.w0 == std::max<int64_t>(ws, 0));
        REQUIRE(s.w1 == std::min<int64_t>(ws + g.kw, g.w));
        REQUIRE((s.h0 < s.h1 && s.w0 < s.w1));  // every window holds an input element
        // the divisor, counted element by element
        int64_t padded = 0, inside = 0;
        for (int64_t y = hs; y < hs + g.kh; ++y)
          for (int64_t x = ws; x < ws + g.kw; ++x) {
            padded += y < g.h + g.ph && x < g.w + g.pw;
            inside += y >= 0 && y < g.h && x >= 0 && x < g.w;
          }
        REQUIRE(geo::avg_divisor(g, oh, ow) == (g.include_pad ? padded : std::max<int64_t>(inside, 1)));
      }
    // the backward's range holds exactly the outputs whose windows contain (y, x)
    for (int64_t y = 0; y < g.h; ++y)
      for (int64_t x = 0; x < g.w; ++x) {
        const geo::Span2 r = geo::pool_outputs_of(g, y, x);
        for (int64_t oh = 0; oh < g.oh; ++oh)
          for (int64_t ow = 0; ow < g.ow; ++ow) {
            const geo::Span2 s = geo::pool_window(g, oh, ow);
            const bool in_window = y >= s.h0 && y < s.h1 && x >= s.w0 && x < s.w1;
            const bool in_range = oh >= r.h0 && oh < r.h1 && ow >= r.w0 && ow < r.w1;
            REQUIRE(in_window == in_range);
          }
      }
  }
}

TEST_CASE("pool geometry: adaptive windows and their candidates", "[cuda_geometry][pool]") {
  for (int64_t h : {1, 2, 3, 5, 7, 10})
    for (int64_t oh : {1, 2, 3, 4, 7, 10}) {
      geo::PoolWindow g;
      g.h = h;
      g.w = oh + 1;
      g.oh = oh;
      g.ow = h;
      INFO(str(g));
      std::vector<int> covered(size_t(g.h * g.w), 0);
      for (int64_t o = 0; o < g.oh; ++o)
        for (int64_t q = 0; q < g.ow; ++q) {
          const geo::Span2 s = geo::adaptive_window(g, o, q);
          REQUIRE((0 <= s.h0 && s.h0 < s.h1 && s.h1 <= g.h && 0 <= s.w0 && s.w0 < s.w1 && s.w1 <= g.w));
          for (int64_t y = s.h0; y < s.h1; ++y)
            for (int64_t x = s.w0; x < s.w1; ++x) {
              ++covered[size_t(y * g.w + x)];
              const geo::Span2 r = geo::adaptive_candidates(g, y, x);  // must include (o, q)
              REQUIRE((o >= r.h0 && o < r.h1 && q >= r.w0 && q < r.w1));
            }
        }
      for (int c : covered) REQUIRE(c >= 1);
    }
}
