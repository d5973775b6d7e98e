// cpu/attention_flash.cpp, f32 attention's blocked AVX-512 kernels: values and the
// gradients of q, k, v against the same op in f64 (the portable kernel, itself checked
// against the unfused math in test_attention.cpp), and against the portable f32 kernel
// (set_vector_isa(baseline)), over lengths that cut the query and key blocks (64, 256)
// and the micro-kernel's tiles (6 rows, 16-column vectors, 64-column panels) anywhere;
// head sizes below, at and past one panel; causal, boolean and additive masks, rows
// with every key masked, dropout.
#include <cmath>

#include "gradcheck.h"

using namespace reel;
using V = std::vector<Tensor>;

namespace {

struct Case {
  int64_t B, L, S, E, Ev;
  SdpaOptions opt;
};

// max |a - b| / max(1, max |b|)
double rel_diff(const Tensor& a, const Tensor& b) {
  REQUIRE(a.shape() == b.shape());
  std::vector<double> x = a.to_vector<double>(), y = b.to_vector<double>();
  double m = 0, top = 1;
  for (size_t i = 0; i < x.size(); ++i) {
    m = std::max(m, std::abs(x[i] - y[i]));
    top = std::max(top, std::abs(y[i]));
  }
  return m / top;
}

// y and the gradients of sum(y w) for q, k, v, in q's dtype; the dropout mask from a
// generator seeded alike every time.
V run(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& w, SdpaOptions opt) {
  Generator gen(11);
  opt.generator = &gen;
  Tensor qq = q.detach().requires_grad_(), kk = k.detach().requires_grad_(), vv = v.detach().requires_grad_();
  Tensor y = scaled_dot_product_attention(qq, kk, vv, opt);
  V g = autograd::grad({(y * w).sum()}, {qq, kk, vv});
  return {y, g[0], g[1], g[2]};
}

void check(const Case& c) {
  CAPTURE(c.B, c.L, c.S, c.E, c.Ev, c.opt.is_causal, c.opt.attn_mask.defined(), c.opt.dropout_p);
  Tensor q = randn({c.B, c.L, c.E}), k = randn({c.B, c.S, c.E}), v = randn({c.B, c.S, c.Ev});
  Tensor w = randn({c.B, c.L, c.Ev});
  SdpaOptions o64 = c.opt;
  if (o64.attn_mask.defined() && o64.attn_mask.dtype() == DType::f32) o64.attn_mask = o64.attn_mask.to(DType::f64);
  V want = run(q.to(DType::f64), k.to(DType::f64), v.to(DType::f64), w.to(DType::f64), o64);
  V fast = run(q, k, v, w, c.opt);
  const VectorIsa before = vector_isa();
  set_vector_isa(VectorIsa::baseline);
  V portable = run(q, k, v, w, c.opt);
  set_vector_isa(before);
  const char* names[4] = {"y", "dq", "dk", "dv"};
  for (int i = 0; i < 4; ++i) {
    CAPTURE(names[i]);
    CHECK(rel_diff(fast[i], want[i]) < 2e-5);
    CHECK(rel_diff(fast[i], portable[i]) < 2e-5);
  }
}

}  // namespace

TEST_CASE("f32 flash attention matches f64 and the portable kernel", "[attention][flash]") {
  if (vector_isa() != VectorIsa::avx512) WARN("no AVX-512 on this CPU: the blocked kernel is not tested here");
  manual_seed(21);
  for (bool causal : {false, true}) {
    check({.B = 2, .L = 1, .S = 1, .E = 4, .Ev = 3, .opt = {.is_causal = causal}});
    check({.B = 3, .L = 70, .S = 70, .E = 64, .Ev = 64, .opt = {.is_causal = causal}});
    check({.B = 2, .L = 131, .S = 300, .E = 20, .Ev = 17, .opt = {.is_causal = causal}});   // past a 256-key block
    check({.B = 2, .L = 300, .S = 131, .E = 100, .Ev = 80, .opt = {.is_causal = causal}});  // two panels of E
    check({.B = 1, .L = 257, .S = 257, .E = 64, .Ev = 64, .opt = {.is_causal = causal, .scale = 0.05}});
  }
}

TEST_CASE("f32 flash attention takes masks, fully masked rows and dropout", "[attention][flash]") {
  manual_seed(22);
  // a bool mask with key 0 kept for every row but row 3, which keeps none
  Tensor keep = gt(rand({97, 150}), 0.4);
  keep = logical_or(keep, lt(arange(0, 150, 1), 1.0).reshape({1, 150}));
  keep = logical_and(keep, logical_not(eq(arange(0, 97, 1), 3.0).reshape({97, 1})));
  check({.B = 2, .L = 97, .S = 150, .E = 16, .Ev = 16, .opt = {.attn_mask = keep}});
  Tensor bias = randn({2, 1, 150}) * 3.0;  // an additive mask broadcast over queries
  check({.B = 2, .L = 97, .S = 150, .E = 16, .Ev = 16, .opt = {.attn_mask = bias}});
  check({.B = 2, .L = 200, .S = 290, .E = 64, .Ev = 32, .opt = {.dropout_p = 0.25, .is_causal = true}});
  check({.B = 3, .L = 65, .S = 65, .E = 8, .Ev = 8, .opt = {.dropout_p = 0.5}});
}

TEST_CASE("f32 flash attention on empty dims", "[attention][flash]") {
  manual_seed(23);
  check({.B = 2, .L = 3, .S = 0, .E = 4, .Ev = 5, .opt = {}});  // no keys: zeros
  check({.B = 2, .L = 3, .S = 5, .E = 0, .Ev = 5, .opt = {}});  // no features: uniform weights
  check({.B = 2, .L = 0, .S = 5, .E = 4, .Ev = 5, .opt = {.is_causal = true}});
}
