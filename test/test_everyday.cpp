// The everyday ops of autograd/ops_everyday.h: values against PyTorch 1.13 on the
// cases of test/reference/ops15.txt (made by test/reference/ops15.py, which stores the
// inputs beside PyTorch's outputs), f64 finite-difference gradient checks, and errors.
#include <cmath>
#include <fstream>
#include <map>
#include <sstream>

#include "gradcheck.h"
#include "torch_table.h"

using namespace reel;
using reel::test::input;
using V = std::vector<Tensor>;
using namespace reel::test;

namespace {

const Table& table() {
  static const Table t = load_torch_table("ops15.txt");
  return t;
}
Case ref(const std::string& name) { return find_case(table(), name); }

std::string message_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "no error";
}
bool has(const std::string& m, const std::string& part) { return m.find(part) != std::string::npos; }
Tensor idx(std::vector<int64_t> v, const Dims& shape = {}) { return from_vector<int64_t>(v, shape); }

}  // namespace

// ---- masks, triangles, creation

TEST_CASE("masked_fill, tril and triu match PyTorch", "[everyday][fill]") {
  Case c = ref("masked_fill");
  CHECK_MATCHES(masked_fill(c.in("x"), c.in("mask"), -1.5), c, "y");
  CHECK_MATCHES(c.in("x").masked_fill(c.in("mask"), -1.5), c, "y");
  Case b = ref("masked_fill_bcast");
  CHECK_MATCHES(masked_fill(b.in("x"), b.in("mask"), -INFINITY), b, "y");
  Case t = ref("tril"), u = ref("triu"), tb = ref("tril_batched");
  CHECK_MATCHES(tril(t.in("x")), t, "y0");
  CHECK_MATCHES(tril(t.in("x"), 1), t, "y1");
  CHECK_MATCHES(tril(t.in("x"), -1), t, "ym1");
  CHECK_MATCHES(triu(u.in("x")), u, "y0");
  CHECK_MATCHES(triu(u.in("x"), 1), u, "y1");
  CHECK_MATCHES(triu(u.in("x"), -2), u, "ym2");
  CHECK_MATCHES(tril(tb.in("x")), tb, "y");
  CHECK_MATCHES(triu(tb.in("x"), 1), tb, "u");
}

TEST_CASE("masked_fill, tril and triu gradients", "[everyday][fill][grad]") {
  Tensor mask = tensor({{1, 0, 0}, {0, 1, 1}}).to(DType::boolean);
  CHECK_GRADIENTS([mask](const V& v) { return masked_fill(v[0], mask, 3.0); }, input({2, 3}));
  CHECK_GRADIENTS([mask](const V& v) { return masked_fill(v[0], mask, v[1].reshape({})); }, input({2, 3}), input({1}));
  CHECK_GRADIENTS([](const V& v) { return tril(v[0], -1); }, input({2, 3, 4}));
  CHECK_GRADIENTS([](const V& v) { return triu(v[0], 1); }, input({4, 3}));
  CHECK_SECOND_GRADIENTS([mask](const V& v) { return square(masked_fill(v[0], mask, 3.0)); }, input({2, 3}));
  // the masked positions get no gradient
  Tensor x = ones({2, 3}).requires_grad_();
  masked_fill(x, mask, 0.0).sum().backward();
  CHECK(x.grad().to_vector<float>() == std::vector<float>{0, 1, 1, 1, 0, 0});
  CHECK(has(message_of([&] { masked_fill(x, ones({2, 3}), 0.0); }), "masked_fill"));
  CHECK(has(message_of([&] { tril(ones({3})); }), "at least 2 dims"));
}

TEST_CASE("linspace, eye, full and arange match PyTorch", "[everyday][fill]") {
  Case c = ref("linspace");
  CHECK_MATCHES(linspace(0, 1, 7), c, "a", 0);
  CHECK_MATCHES(linspace(-2, 3.5, 10), c, "b", 0);
  CHECK_MATCHES(linspace(3, 3, 1), c, "c", 0);
  CHECK_MATCHES(linspace(5, -1, 4, {.dtype = DType::f64}), c, "d", 0);
  CHECK(linspace(0, 1, 0).numel() == 0);
  Case e = ref("eye");
  CHECK_MATCHES(eye(3), e, "a", 0);
  CHECK_MATCHES(eye(2, 4), e, "b", 0);
  CHECK_MATCHES(eye(4, 2, {.dtype = DType::f64}), e, "c", 0);
  Case f = ref("full");
  CHECK_MATCHES(full({2, 3}, 2.5), f, "a", 0);
  CHECK_MATCHES(arange(0.0, 1.0, 0.25), f, "b", 0);
  CHECK_MATCHES(arange(5), f, "c", 0);
}

// ---- chunk, split

TEST_CASE("chunk and split into sizes match PyTorch", "[everyday][shape]") {
  Case c = ref("chunk");
  std::vector<Tensor> parts = chunk(c.in("x"), 3, 0);
  REQUIRE(parts.size() == 3);
  for (size_t i = 0; i < parts.size(); ++i) CHECK_MATCHES(parts[i], c, "c" + std::to_string(i), 0);
  Case s = ref("split_sizes");
  std::vector<Tensor> sp = split(s.in("x"), std::vector<int64_t>{2, 5}, 0);
  REQUIRE(sp.size() == 2);
  CHECK_MATCHES(sp[0], s, "s0", 0);
  CHECK_MATCHES(sp[1], s, "s1", 0);
  CHECK_GRADIENTS([](const V& v) {
    std::vector<Tensor> p = split(v[0], std::vector<int64_t>{1, 3}, 1);
    return p[0] * 2.0 + p[1].sum(1, true);
  }, input({2, 4}));
  CHECK(has(message_of([&] { split(s.in("x"), std::vector<int64_t>{2, 4}, 0); }), "add up to 6"));
}

// ---- sorting and selection

TEST_CASE("topk, max/min with indices, sort and argsort match PyTorch", "[everyday][sort]") {
  Case t = ref("topk");
  auto [v, i] = topk(t.in("x"), 3);
  CHECK_MATCHES(v, t, "v", 0);
  CHECK_MATCHES(i, t, "i", 0);
  Case s0 = ref("topk_smallest_dim0");
  ValuesIndices r = topk(s0.in("x"), 2, 0, false);
  CHECK_MATCHES(r.values, s0, "v", 0);
  CHECK_MATCHES(r.indices, s0, "i", 0);
  Case m = ref("max_min");
  auto [maxv, maxi] = max(m.in("x"), 1);
  auto [minv, mini] = min(m.in("x"), 0, true);
  CHECK_MATCHES(maxv, m, "maxv", 0);
  CHECK_MATCHES(maxi, m, "maxi", 0);
  CHECK_MATCHES(minv, m, "minv", 0);
  CHECK_MATCHES(mini, m, "mini", 0);
  Case s = ref("sort");
  ValuesIndices a = sort(s.in("x"));
  ValuesIndices d = sort(s.in("x"), 0, true);
  CHECK_MATCHES(a.values, s, "v", 0);
  CHECK_MATCHES(a.indices, s, "i", 0);
  CHECK_MATCHES(d.values, s, "vd", 0);
  CHECK_MATCHES(d.indices, s, "id", 0);
  CHECK_MATCHES(argsort(s.in("x"), 1, true), s, "arg", 0);
  for (const char* name : {"sort_nan", "sort_ties"}) {  // NaN above every number; ties keep their order
    Case n = ref(name);
    ValuesIndices up = sort(n.in("x")), down = sort(n.in("x"), -1, true);
    CHECK_MATCHES(up.values, n, "v", 0);
    CHECK_MATCHES(up.indices, n, "i", 0);
    CHECK_MATCHES(down.values, n, "vd", 0);
    CHECK_MATCHES(down.indices, n, "id", 0);
  }
  // a long row: the partial sort for a small k against the full sort
  Tensor big = randn({3, 5000});
  ValuesIndices top = topk(big, 7), all = sort(big, -1, true);
  CHECK(differ(top.values, all.values.narrow(1, 0, 7), 0) == "");
  CHECK(differ(top.indices, all.indices.narrow(1, 0, 7), 0) == "");
}

TEST_CASE("sort, topk and max/min gradients go to the selected elements", "[everyday][sort][grad]") {
  CHECK_GRADIENTS([](const V& v) { return sort(v[0], 1).values; }, input({3, 5}));
  CHECK_GRADIENTS([](const V& v) { return sort(v[0], 0, true).values; }, input({4, 3}));
  CHECK_GRADIENTS([](const V& v) { return topk(v[0], 2).values; }, input({3, 6}));
  CHECK_GRADIENTS([](const V& v) { return topk(v[0], 2, 0, false).values; }, input({5, 3}));
  CHECK_GRADIENTS([](const V& v) { return max(v[0], 1).values; }, input({3, 4}));
  CHECK_GRADIENTS([](const V& v) { return min(v[0], 0, true).values; }, input({3, 4}));
  CHECK_SECOND_GRADIENTS([](const V& v) { return square(topk(v[0], 2).values); }, input({2, 5}));
  // ties: max's gradient goes to the first maximum only (PyTorch), amax's is shared
  Tensor x = tensor({1, 3, 3}).requires_grad_();
  max(x, 0).values.backward();
  CHECK(x.grad().to_vector<float>() == std::vector<float>{0, 1, 0});
  CHECK(has(message_of([&] { topk(ones({2, 3}), 4); }), "k = 4 is out of range"));
}

TEST_CASE("multinomial draws in proportion to the weights", "[everyday][sort][random]") {
  manual_seed(7);
  Tensor p = tensor({0.1, 0.0, 0.6, 0.3});
  const int64_t n = 20000;
  Tensor draws = multinomial(p, n, true);
  CHECK(draws.shape() == Dims{n});
  CHECK(draws.dtype() == DType::i64);
  std::vector<int64_t> counts(4, 0);
  for (int64_t v : draws.to_vector<int64_t>()) ++counts[size_t(v)];
  CHECK(counts[1] == 0);  // a zero weight is never drawn
  CHECK(std::abs(double(counts[0]) / n - 0.1) < 0.015);
  CHECK(std::abs(double(counts[2]) / n - 0.6) < 0.015);
  CHECK(std::abs(double(counts[3]) / n - 0.3) < 0.015);
  // without replacement: distinct categories per row; unnormalised weights, rows
  Tensor w = tensor({{1, 1, 1, 1, 1, 1}, {0, 5, 0, 1, 0, 2}});
  for (int rep = 0; rep < 50; ++rep) {
    std::vector<int64_t> d = multinomial(w, 3).to_vector<int64_t>();
    CHECK(d[0] != d[1]);
    CHECK(d[1] != d[2]);
    CHECK(d[0] != d[2]);
    for (int k = 3; k < 6; ++k) CHECK((d[size_t(k)] == 1 || d[size_t(k)] == 3 || d[size_t(k)] == 5));
  }
  // the first draw without replacement follows the weights too
  std::vector<int64_t> first(3, 0);
  Tensor q = tensor({0.2, 0.5, 0.3}).expand({4000, 3}).contiguous();
  for (int64_t v : multinomial(q, 1).to_vector<int64_t>()) ++first[size_t(v)];
  CHECK(std::abs(first[1] / 4000.0 - 0.5) < 0.03);
  CHECK(has(message_of([&] { multinomial(tensor({1, 0, 0}), 2); }), "only 1 categories"));
  CHECK(has(message_of([&] { multinomial(tensor({1, -1}), 1, true); }), "non-negative"));
}

// ---- statistics and norms

TEST_CASE("logsumexp, std, norm, normalize and cosine_similarity match PyTorch", "[everyday][stats]") {
  Case l = ref("logsumexp");
  CHECK_MATCHES(logsumexp(l.in("x"), {1}), l, "a");
  CHECK_MATCHES(logsumexp(l.in("x"), {0, 1}), l, "b");
  CHECK_MATCHES(logsumexp(l.in("x"), {0}, true), l, "k");
  CHECK_MATCHES(logsumexp(l.in("xm"), {1}), l, "m");
  Case s = ref("std");
  CHECK_MATCHES(reel::std(s.in("x"), {1}), s, "a");
  CHECK_MATCHES(s.in("x").std(1), s, "a");
  CHECK_MATCHES(reel::std(s.in("x")), s, "b");
  CHECK_MATCHES(reel::std(s.in("x"), {0}, 0, true), s, "c");
  Case n = ref("norm");
  Tensor x = n.in("x");
  CHECK_MATCHES(norm(x, 1, {1}), n, "p1");
  CHECK_MATCHES(norm(x, 2, {1}), n, "p2");
  CHECK_MATCHES(norm(x, INFINITY, {0}), n, "inf");
  CHECK_MATCHES(norm(x), n, "fro");
  CHECK_MATCHES(x.norm(), n, "fro");
  CHECK_MATCHES(norm(x, 3, {1}, true), n, "p3");
  CHECK_MATCHES(norm(x, -INFINITY, {1}), n, "ninf");
  CHECK_MATCHES(norm(x, 0), n, "p0");
  Case z = ref("normalize");
  CHECK_MATCHES(normalize(z.in("x")), z, "a");
  CHECK_MATCHES(normalize(z.in("x"), 1, 0), z, "b");
  Case c = ref("cosine_similarity");
  CHECK_MATCHES(cosine_similarity(c.in("a"), c.in("b")), c, "ab");
  CHECK_MATCHES(cosine_similarity(c.in("a"), c.in("c"), -1), c, "ac");
  CHECK_MATCHES(cosine_similarity(c.in("a"), c.in("b"), 0), c, "ab0");
}

TEST_CASE("logsumexp, std, norm, normalize and cosine_similarity gradients", "[everyday][stats][grad]") {
  CHECK_GRADIENTS([](const V& v) { return logsumexp(v[0], {1}); }, input({3, 4}));
  CHECK_GRADIENTS([](const V& v) { return logsumexp(v[0], {0, 1}, true); }, input({2, 3}));
  CHECK_GRADIENTS([](const V& v) { return reel::std(v[0], {1}); }, input({3, 4}));
  for (double p : {1.0, 2.0, 3.0, 1.5})
    CHECK_GRADIENTS([p](const V& v) { return norm(v[0], p, {1}); }, input({3, 4}));
  CHECK_GRADIENTS([](const V& v) { return norm(v[0], INFINITY, {0}); }, input({3, 4}));
  CHECK_GRADIENTS([](const V& v) { return norm(v[0]); }, input({3, 4}));
  CHECK_GRADIENTS([](const V& v) { return normalize(v[0]); }, input({3, 4}));
  CHECK_GRADIENTS([](const V& v) { return cosine_similarity(v[0], v[1]); }, input({3, 4}), input({3, 4}));
  CHECK_GRADIENTS([](const V& v) { return cosine_similarity(v[0], v[1], -1); }, input({3, 4}), input({4}));
  CHECK_SECOND_GRADIENTS([](const V& v) { return norm(v[0], 2, {1}); }, input({2, 3}));
  CHECK_SECOND_GRADIENTS([](const V& v) { return norm(v[0], 3, {1}); }, input({2, 3}));
  // the gradient of a zero norm is 0 (PyTorch), not NaN
  Tensor zero = zeros({2, 3}, {.dtype = DType::f64}).requires_grad_();
  norm(zero, 2, {1}).sum().backward();
  CHECK(zero.grad().to_vector<double>() == std::vector<double>(6, 0.0));
  Tensor inf_row = tensor({{-INFINITY, -INFINITY}});
  CHECK(logsumexp(inf_row, {1}).item<float>() == -INFINITY);
}

// ---- scans

TEST_CASE("cumsum and cumprod match PyTorch, with zeros", "[everyday][scan]") {
  Case s = ref("cumsum");
  CHECK_MATCHES(cumsum(s.in("x"), 1), s, "a");
  CHECK_MATCHES(s.in("x").cumsum(0), s, "b");
  Case p = ref("cumprod");
  CHECK_MATCHES(cumprod(p.in("x"), 1), p, "a");
  CHECK_MATCHES(cumprod(p.in("x"), 0), p, "b");
  CHECK_MATCHES(cumprod(p.in("xz"), 1), p, "z");
  // integers sum in i64; strided inputs; a large input across threads
  CHECK(cumsum(tensor({1, 2, 3}, {.dtype = DType::i32}), 0).to_vector<int64_t>() == std::vector<int64_t>{1, 3, 6});
  Tensor t = arange(0.0, 6.0).reshape({2, 3}).t();  // [3, 2], strided
  CHECK(cumsum(t, 0).to_vector<float>() == std::vector<float>{0, 3, 1, 7, 3, 12});
  Tensor big = ones({300, 400});
  Tensor cs = cumsum(big, 1);
  CHECK(cs.select(1, 399).to_vector<float>() == std::vector<float>(300, 400.0f));
}

TEST_CASE("cumsum and cumprod gradients, zeros included", "[everyday][scan][grad]") {
  CHECK_GRADIENTS([](const V& v) { return cumsum(v[0], 1); }, input({3, 4}));
  CHECK_GRADIENTS([](const V& v) { return cumsum(v[0], 0); }, input({3, 4}));
  CHECK_SECOND_GRADIENTS([](const V& v) { return square(cumsum(v[0], 1)); }, input({2, 3}));
  CHECK_GRADIENTS([](const V& v) { return cumprod(v[0], 1); }, input({3, 4}, 0.5, 1.5));
  // zeros: the first zero of a row, a second zero, a zero at the start
  Tensor xz = tensor({{2, 0, 3, 0.5, 4}, {0, 2, 0.5, 3, 1}, {1.5, 2, 0.5, 3, 0}}, {.dtype = DType::f64});
  auto zeros_case = [xz](const V& v) { return cumprod(v[0] * 0.0 + xz + v[0] * 1e-300, 1); };
  (void)zeros_case;
  Tensor leaf = xz.clone().requires_grad_();
  Tensor w = randn({3, 5}, {.dtype = DType::f64});
  Tensor g = autograd::grad({(cumprod(leaf, 1) * w).sum()}, {leaf})[0];
  // against the definition: dL/dx_i = sum_{j >= i} w_j prod_{k <= j, k != i} x_k
  std::vector<double> xv = xz.to_vector<double>(), wv = w.to_vector<double>(), gv = g.to_vector<double>();
  for (int r = 0; r < 3; ++r)
    for (int i = 0; i < 5; ++i) {
      double want = 0;
      for (int j = i; j < 5; ++j) {
        double prod = 1;
        for (int k = 0; k <= j; ++k)
          if (k != i) prod *= xv[size_t(r * 5 + k)];
        want += wv[size_t(r * 5 + j)] * prod;
      }
      CHECK(std::abs(gv[size_t(r * 5 + i)] - want) < 1e-12);
    }
  CHECK_SECOND_GRADIENTS([](const V& v) { return cumprod(v[0], 1); }, input({2, 3}, 0.5, 1.5));
}

// ---- tests of values, clamping, lerp

TEST_CASE("isnan, isinf, isfinite, nan_to_num, any and all match PyTorch", "[everyday][fill]") {
  Case c = ref("isnan_isinf");
  Tensor x = c.in("x");
  CHECK_MATCHES(isnan(x), c, "nan", 0);
  CHECK_MATCHES(isinf(x), c, "inf", 0);
  CHECK_MATCHES(isfinite(x), c, "fin", 0);
  CHECK_MATCHES(nan_to_num(x), c, "n2n", 0);
  CHECK_MATCHES(nan_to_num(x, 1.0, 2.0, -3.0), c, "n2n_args", 0);
  Case a = ref("any_all");
  CHECK_MATCHES(any(a.in("x"), {1}), a, "any1", 0);
  CHECK_MATCHES(all(a.in("x"), {1}), a, "all1", 0);
  CHECK_MATCHES(any(a.in("x")), a, "any", 0);
  CHECK_MATCHES(all(a.in("x")), a, "all", 0);
  CHECK_MATCHES(all(a.in("x"), {0}, true), a, "all0k", 0);
  // the gradient of nan_to_num passes where x was finite
  Tensor y = tensor({NAN, 2, INFINITY, -1}).requires_grad_();
  nan_to_num(y).sum().backward();
  CHECK(y.grad().to_vector<float>() == std::vector<float>{0, 1, 0, 1});
  CHECK_GRADIENTS([](const V& v) { return nan_to_num(v[0]); }, input({2, 3}));
}

TEST_CASE("clamp_min, clamp_max and lerp match PyTorch, with gradients", "[everyday][fill][grad]") {
  Case c = ref("clamp_lerp");
  CHECK_MATCHES(clamp_min(c.in("x"), 0.25), c, "cmin");
  CHECK_MATCHES(c.in("x").clamp_max(-0.5), c, "cmax");
  CHECK_MATCHES(lerp(c.in("x"), c.in("y"), 0.3), c, "ls");
  CHECK_MATCHES(lerp(c.in("x"), c.in("y"), c.in("w")), c, "lt");
  CHECK_GRADIENTS([](const V& v) { return clamp_min(v[0], 0.1); }, input({3, 4}));
  CHECK_GRADIENTS([](const V& v) { return clamp_max(v[0], -0.1); }, input({3, 4}));
  CHECK_GRADIENTS([](const V& v) { return lerp(v[0], v[1], 0.3); }, input({2, 3}), input({2, 3}));
  CHECK_GRADIENTS([](const V& v) { return lerp(v[0], v[1], v[2]); }, input({2, 3}), input({3}), input({2, 1}));
}

// ---- products and einsum

TEST_CASE("outer, addmm, baddbmm and einsum match PyTorch", "[everyday][contract]") {
  Case p = ref("products");
  CHECK_MATCHES(outer(p.in("a"), p.in("b")), p, "outer");
  CHECK_MATCHES(addmm(p.in("i2"), p.in("m1"), p.in("m2"), 0.5, 2.0), p, "addmm");
  CHECK_MATCHES(addmm(p.in("b"), p.in("m1"), p.in("m2")), p, "addmm_row");
  CHECK_MATCHES(baddbmm(p.in("bi"), p.in("b1"), p.in("b2"), 2.0, -1.0), p, "baddbmm");
  Case e = ref("einsum");
  auto in = [&](const char* k) { return e.in(k); };
  CHECK_MATCHES(einsum("ij,jk->ik", {in("p"), in("q")}), e, "mm");
  CHECK_MATCHES(einsum("bij,bjk->bik", {in("bp"), in("bq")}), e, "bmm");
  CHECK_MATCHES(einsum("ij->ji", {in("p")}), e, "t");
  CHECK_MATCHES(einsum("ij->", {in("p")}), e, "all");
  CHECK_MATCHES(einsum("i,j->ij", {in("v3"), in("v4")}), e, "outer");
  CHECK_MATCHES(einsum("ij,jk", {in("p"), in("q")}), e, "implicit");
  CHECK_MATCHES(einsum("ij,jk,kl->il", {in("p"), in("q"), in("r")}), e, "chain");
  CHECK_MATCHES(einsum("...ij,...jk->...ik", {in("e1"), in("bq")}), e, "ell");
  CHECK_MATCHES(einsum("bhqd,bhkd->bhqk", {in("aq"), in("ak")}), e, "att");
  CHECK_MATCHES(einsum("ij->i", {in("p")}), e, "rowsum");
  CHECK_MATCHES(einsum("bA", {in("p")}), e, "upper");  // implicit output: uppercase sorts first
  CHECK_MATCHES(einsum("i,i->", {in("v4"), in("v4")}), e, "dot");
  CHECK_MATCHES(einsum("ij,j->i", {in("p"), in("v4")}), e, "mv");
  CHECK(has(message_of([&] { einsum("ii->i", {in("p")}); }), "repeats a subscript"));
  CHECK(has(message_of([&] { einsum("ij,jk->ik", {in("p")}); }), "2 operand terms, 1 tensors"));
  CHECK(has(message_of([&] { einsum("ijk->i", {in("p")}); }), "names 3 dims, its operand has 2"));
}

TEST_CASE("outer, addmm, baddbmm and einsum gradients", "[everyday][contract][grad]") {
  CHECK_GRADIENTS([](const V& v) { return outer(v[0], v[1]); }, input({3}), input({2}));
  CHECK_GRADIENTS([](const V& v) { return addmm(v[0], v[1], v[2], 0.5, 2.0); }, input({3}), input({2, 4}),
                  input({4, 3}));
  CHECK_GRADIENTS([](const V& v) { return baddbmm(v[0], v[1], v[2], 2.0, -1.0); }, input({2, 2, 3}),
                  input({2, 2, 4}), input({2, 4, 3}));
  CHECK_GRADIENTS([](const V& v) { return einsum("bij,bjk->bik", v); }, input({2, 3, 4}), input({2, 4, 2}));
  CHECK_GRADIENTS([](const V& v) { return einsum("ij,jk,kl->il", v); }, input({2, 3}), input({3, 4}), input({4, 2}));
  CHECK_GRADIENTS([](const V& v) { return einsum("...ij,...jk->...ik", v); }, input({1, 2, 3}), input({3, 3, 2}));
  CHECK_GRADIENTS([](const V& v) { return einsum("ij->j", v); }, input({3, 4}));
}

// ---- repeat, tile, flip, roll

TEST_CASE("repeat, tile, flip and roll match PyTorch, with gradients", "[everyday][shape]") {
  Case c = ref("repeat_flip_roll");
  Tensor x = c.in("x");
  CHECK_MATCHES(repeat(x, {2, 1, 3}), c, "rep", 0);
  CHECK_MATCHES(x.repeat({2, 1, 3}), c, "rep", 0);
  CHECK_MATCHES(tile(x, {2}), c, "tile", 0);
  CHECK_MATCHES(flip(x, {0, 1}), c, "flip", 0);
  CHECK_MATCHES(x.flip({1}), c, "flip1", 0);
  CHECK_MATCHES(roll(x, {1, -2}, {0, 1}), c, "roll", 0);
  CHECK_MATCHES(roll(x, {4}), c, "rollflat", 0);
  CHECK_GRADIENTS([](const V& v) { return repeat(v[0], {2, 1, 3}); }, input({2, 3}));
  CHECK_GRADIENTS([](const V& v) { return flip(v[0], {0, 1}); }, input({2, 3}));
  CHECK_GRADIENTS([](const V& v) { return roll(v[0], {1, -2}, {0, 1}); }, input({2, 3}));
  CHECK_GRADIENTS([](const V& v) { return roll(v[0], {4}); }, input({2, 3}));
  // repeat with all ones is a copy, not a view
  Tensor r = repeat(x, {1, 1});
  r.fill_(0.0);
  CHECK(x.to_vector<float>() != r.to_vector<float>());
}

// ---- scatter family

TEST_CASE("scatter, scatter_add, index_add and index_put match PyTorch", "[everyday][scatter]") {
  Case c = ref("scatter");
  Tensor x = c.in("x");
  CHECK_MATCHES(scatter(x, 0, c.in("perm"), c.in("src")), c, "sc", 0);
  CHECK_MATCHES(scatter(x, 1, c.in("dup").narrow(1, 0, 2).contiguous(), 7.0), c, "scv", 0);
  CHECK_MATCHES(scatter_add(x, 0, c.in("dup"), c.in("src3")), c, "sa");
  CHECK_MATCHES(index_add(x, 1, c.in("ia"), c.in("srca"), 2.0), c, "ia");
  Case p = ref("index_put");
  Tensor y = p.in("x");
  CHECK_MATCHES(index_put(y, {p.in("r0"), p.in("r1")}, p.in("vals"), true), p, "acc");
  CHECK_MATCHES(index_put(y, {idx({0, 2, 3}), idx({1, 0, 2})}, p.in("vals").narrow(0, 0, 3)), p, "set", 0);
  CHECK_MATCHES(index_put(y, {p.in("rn"), p.in("cn")}, scalar_tensor(9.0)), p, "bc", 0);
  CHECK(has(message_of([&] { scatter(x, 0, idx({3, 0}, {1, 2}), c.in("src")); }), "index 3"));
  CHECK(has(message_of([&] { index_add(x, 1, idx({0}), c.in("srca")); }), "expected a source [3, 1]"));
}

TEST_CASE("scatter family gradients", "[everyday][scatter][grad]") {
  Tensor perm = idx({1, 0, 2, 2, 1, 0}, {2, 3});  // distinct rows per column
  Tensor dup = idx({0, 1, 1, 0, 1, 1}, {2, 3});
  CHECK_GRADIENTS([perm](const V& v) { return scatter(v[0], 0, perm, v[1]); }, input({3, 3}), input({2, 3}));
  CHECK_GRADIENTS([perm](const V& v) { return scatter(v[0], 0, perm, v[1]); }, input({3, 3}), input({2, 4}));
  CHECK_GRADIENTS([dup](const V& v) { return scatter_add(v[0], 0, dup, v[1]); }, input({3, 3}), input({2, 3}));
  Tensor ia = idx({2, 0, 2});
  CHECK_GRADIENTS([ia](const V& v) { return index_add(v[0], 1, ia, v[1], 0.5); }, input({2, 4}), input({2, 3}));
  Tensor r0 = idx({0, 2, 2}), r1 = idx({1, 0, 0});
  CHECK_GRADIENTS([=](const V& v) { return index_put(v[0], {r0, r1}, v[1], true); }, input({3, 2, 2}),
                  input({3, 2}));
  CHECK_GRADIENTS([](const V& v) { return index_put(v[0], {idx({0, 2})}, v[1]); }, input({3, 2}), input({2}));
  CHECK_SECOND_GRADIENTS([dup](const V& v) { return square(scatter_add(v[0], 0, dup, v[1])); }, input({2, 3}),
                         input({2, 3}));
}

// ---- padding and resampling

TEST_CASE("pad and interpolate match PyTorch", "[everyday][resample]") {
  Case c = ref("pad");
  Tensor x = c.in("x");
  CHECK_MATCHES(pad(x, {1, 2}, {.value = 0.5}), c, "c", 0);
  CHECK_MATCHES(pad(x, {1, 1, 2, 0}), c, "c2", 0);
  CHECK_MATCHES(pad(x, {-1, 1, 0, -1}), c, "crop", 0);
  CHECK_MATCHES(pad(x, {2, 1, 1, 2}, {.mode = PadMode::reflect}), c, "refl", 0);
  CHECK_MATCHES(pad(x, {2, 3, 1, 0}, {.mode = PadMode::replicate}), c, "rep", 0);
  CHECK_MATCHES(pad(x, {1, 2, 3, 1}, {.mode = PadMode::circular}), c, "circ", 0);
  CHECK(has(message_of([&] { pad(x, {4, 0}, {.mode = PadMode::reflect}); }), "expected amounts from 0 to 3"));
  Case i = ref("interpolate");
  Tensor x1 = i.in("x1"), x2 = i.in("x2");
  CHECK_MATCHES(interpolate(x1, {.size = {7}}), i, "n_size", 0);
  CHECK_MATCHES(interpolate(x1, {.scale_factor = {1.5}}), i, "n_scale", 0);
  CHECK_MATCHES(interpolate(x2, {.scale_factor = {2}}), i, "n2", 0);
  CHECK_MATCHES(interpolate(x2, {.size = {5, 3}}), i, "n2_size", 0);
  CHECK_MATCHES(interpolate(x1, {.scale_factor = {2.5}, .mode = InterpolateMode::linear}), i, "lin");
  CHECK_MATCHES(interpolate(x1, {.size = {8}, .mode = InterpolateMode::linear, .align_corners = true}), i, "lin_ac");
  CHECK_MATCHES(interpolate(x2, {.size = {5, 7}, .mode = InterpolateMode::bilinear}), i, "bil");
  CHECK_MATCHES(interpolate(x2, {.size = {5, 7}, .mode = InterpolateMode::bilinear, .align_corners = true}), i,
                "bil_ac");
  CHECK_MATCHES(interpolate(x2, {.size = {2, 3}, .mode = InterpolateMode::bilinear}), i, "bil_down");
}

TEST_CASE("pad and interpolate gradients", "[everyday][resample][grad]") {
  CHECK_GRADIENTS([](const V& v) { return pad(v[0], {1, 2, -1, 1}, {.value = 0.5}); }, input({2, 3, 4}));
  CHECK_GRADIENTS([](const V& v) { return pad(v[0], {2, 1, 1, 2}, {.mode = PadMode::reflect}); }, input({1, 2, 3, 4}));
  CHECK_GRADIENTS([](const V& v) { return pad(v[0], {2, 3}, {.mode = PadMode::replicate}); }, input({2, 3}));
  CHECK_GRADIENTS([](const V& v) { return pad(v[0], {1, 2}, {.mode = PadMode::circular}); }, input({2, 3}));
  CHECK_GRADIENTS([](const V& v) { return interpolate(v[0], {.scale_factor = {1.5}}); }, input({1, 2, 5}));
  CHECK_GRADIENTS([](const V& v) { return interpolate(v[0], {.size = {5, 7}, .mode = InterpolateMode::bilinear}); },
                  input({1, 2, 3, 4}));
  CHECK_GRADIENTS([](const V& v) {
    return interpolate(v[0], {.size = {2, 3}, .mode = InterpolateMode::bilinear, .align_corners = true});
  }, input({1, 1, 3, 4}));
  CHECK_GRADIENTS([](const V& v) { return interpolate(v[0], {.size = {8}, .mode = InterpolateMode::linear}); },
                  input({2, 1, 5}));
}

// ---- 1-d convolution and pooling, transposed convolution

TEST_CASE("conv1d, conv_transpose2d and 1-d pooling match PyTorch", "[everyday][conv]") {
  Case c = ref("conv1d");
  CHECK_MATCHES(conv1d(c.in("x"), c.in("w"), c.in("b"), {.stride = 2, .padding = 1, .groups = 2}), c, "y", 1e-4);
  Tensor wd = c.in("w").narrow(1, 0, 2).repeat({1, 2, 1});
  CHECK_MATCHES(conv1d(c.in("x"), wd, {}, {.dilation = 2}), c, "yd", 1e-4);
  Case t = ref("conv_transpose2d");
  CHECK_MATCHES(conv_transpose2d(t.in("x"), t.in("w"), t.in("b"), {.stride = 2, .padding = 1, .output_padding = 1}),
                t, "y", 1e-4);
  CHECK_MATCHES(conv_transpose2d(t.in("x"), t.in("wg"), {}, {.stride = {1, 2}, .padding = {0, 1}, .groups = 2}), t,
                "yg", 1e-4);
  CHECK_MATCHES(conv_transpose2d(t.in("x"), t.in("w"), {}, {.padding = 1, .dilation = 2}), t, "yd", 1e-4);
  Case p = ref("pool1d");
  Tensor x = p.in("x");
  CHECK_MATCHES(max_pool1d(x, {.kernel = 3, .stride = 2, .padding = 1}), p, "max");
  CHECK_MATCHES(avg_pool1d(x, {.kernel = 3, .stride = 2, .padding = 1}), p, "avg");
  CHECK_MATCHES(avg_pool1d(x, {.kernel = 3, .stride = 2, .padding = 1, .count_include_pad = false}), p, "avg_nopad");
  CHECK_MATCHES(max_pool1d(x), p, "max_default");
  CHECK_MATCHES(adaptive_avg_pool1d(x, 4), p, "ada");
}

TEST_CASE("conv1d, conv_transpose2d and 1-d pooling gradients", "[everyday][conv][grad]") {
  CHECK_GRADIENTS([](const V& v) { return conv1d(v[0], v[1], v[2], {.stride = 2, .padding = 1, .groups = 2}); },
                  input({2, 4, 7}), input({4, 2, 3}), input({4}));
  CHECK_GRADIENTS([](const V& v) {
    return conv_transpose2d(v[0], v[1], v[2], {.stride = 2, .padding = 1, .output_padding = 1});
  }, input({1, 2, 3, 3}), input({2, 3, 3, 3}), input({3}));
  CHECK_GRADIENTS([](const V& v) { return conv_transpose2d(v[0], v[1], {}, {.stride = {1, 2}, .groups = 2}); },
                  input({1, 4, 2, 3}), input({4, 1, 2, 2}));
  CHECK_SECOND_GRADIENTS([](const V& v) { return conv_transpose2d(v[0], v[1], {}, {.stride = 2}); },
                         input({1, 1, 2, 2}), input({1, 2, 2, 2}));
  CHECK_GRADIENTS([](const V& v) { return max_pool1d(v[0], {.kernel = 3, .stride = 2, .padding = 1}); },
                  input({2, 2, 7}));
  CHECK_GRADIENTS([](const V& v) { return avg_pool1d(v[0], {.kernel = 3, .stride = 2, .padding = 1}); },
                  input({2, 2, 7}));
  CHECK_GRADIENTS([](const V& v) { return adaptive_avg_pool1d(v[0], 3); }, input({2, 2, 7}));
  CHECK(has(message_of([] { conv_transpose2d(ones({1, 2, 3, 3}), ones({3, 1, 2, 2})); }), "has 2 channels"));
}

// ---- the method spellings

TEST_CASE("PyTorch's method spellings", "[everyday][methods]") {
  Tensor x = tensor({{1, -2, 3}, {4, 5, -6}});
  CHECK(x.sum(1).to_vector<float>() == std::vector<float>{2, 3});
  CHECK(x.mean(-1, true).shape() == Dims{2, 1});
  CHECK(x.to_long().dtype() == DType::i64);
  CHECK(x.to_long().to_float().dtype() == DType::f32);
  CHECK(x.to_double().dtype() == DType::f64);
  CHECK(x.to_int().dtype() == DType::i32);
  CHECK(x.to_bool().to_vector<bool>() == std::vector<bool>{true, true, true, true, true, true});
  CHECK(differ(x.softmax(1), softmax(x, 1)) == "");
  CHECK(differ(x.log_softmax(0), log_softmax(x, 0)) == "");
  CHECK(x.clamp(-1, 2).to_vector<float>() == std::vector<float>{1, -1, 2, 2, 2, -1});
  CHECK(x.t().shape() == Dims{3, 2});
  CHECK(x.view({3, 2}).shape() == Dims{3, 2});
  CHECK(x.unsqueeze(0).shape() == Dims{1, 2, 3});
  CHECK(x.min().item<float>() == -6);
  CHECK(x.min(1).to_vector<float>() == std::vector<float>{-2, -6});
  CHECK(x.argmin(0).to_vector<int64_t>() == std::vector<int64_t>{0, 0, 1});
  CHECK(std::abs(x.var(1).to_vector<float>()[0] - 19.0f / 3) < 1e-5f);  // (1/9 + 64/9 + 49/9) / 2
}
