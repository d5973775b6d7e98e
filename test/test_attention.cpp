// scaled_dot_product_attention: values and gradients against the unfused composition
// (matmul, masked_fill, softmax, matmul) in f64 for causal, boolean and additive masks
// (broadcast over leading dims), dropout replayed from a seed, odd lengths, L = 1, L != S;
// finite-difference gradient checks; memory linear in the sequence length (the CPU
// allocator's counters); errors.
#include <cmath>

#include "gradcheck.h"
#include "torch_table.h"

using namespace reel;
using reel::test::input;
using V = std::vector<Tensor>;

namespace {

struct Ref {
  Tensor mask = {};  // bool (true: attend) or float (added)
  bool causal = false;
  double scale = 0;  // 0: 1/sqrt(E)
  Tensor drop = {};  // the dropout factors [..., L, S], or undefined
};

// softmax(scale q k^T + mask) (* drop) @ v, every op recorded
Tensor unfused(const Tensor& q, const Tensor& k, const Tensor& v, const Ref& r) {
  const int64_t L = q.size(-2), S = k.size(-2);
  double scale = r.scale != 0 ? r.scale : 1.0 / std::sqrt(double(q.size(-1)));
  Tensor s = matmul(q, k.transpose(-2, -1)) * scale;
  if (r.mask.defined() && r.mask.dtype() == DType::boolean) s = masked_fill(s, logical_not(r.mask), -INFINITY);
  else if (r.mask.defined()) s = s + r.mask;
  if (r.causal) s = masked_fill(s, logical_not(tril(ones({L, S}, {.dtype = DType::boolean}))), -INFINITY);
  Tensor p = softmax(s, -1);
  if (r.drop.defined()) p = p * r.drop;
  return matmul(p, v);
}

double max_diff(const Tensor& a, const Tensor& b) {
  REQUIRE(a.shape() == b.shape());
  std::vector<double> x = a.to_vector<double>(), y = b.to_vector<double>();
  double m = 0;
  for (size_t i = 0; i < x.size(); ++i) m = std::max(m, std::abs(x[i] - y[i]));
  return m;
}

// Values and the gradients of sum(y w) for q, k, v: fused against unfused.
void check_against_unfused(const Dims& qs, const Dims& ks, const Dims& vs, const SdpaOptions& opt, const Ref& r) {
  Tensor q = input(qs), k = input(ks), v = input(vs);
  Tensor y = scaled_dot_product_attention(q, k, v, opt);
  Tensor want = unfused(q, k, v, r);
  CHECK(max_diff(y, want) < 1e-12);
  Tensor w = randn(y.shape(), {.dtype = DType::f64});
  V g = autograd::grad({(y * w).sum()}, {q, k, v});
  V gw = autograd::grad({(want * w).sum()}, {q, k, v});
  for (size_t i = 0; i < 3; ++i) CHECK(max_diff(g[i], gw[i]) < 1e-11);
}

}  // namespace

TEST_CASE("sdpa matches the unfused math without a mask, any lengths", "[attention]") {
  manual_seed(1);
  check_against_unfused({2, 3, 5, 4}, {2, 3, 7, 4}, {2, 3, 7, 6}, {}, {});  // L != S, E != Ev
  check_against_unfused({1, 1, 4}, {1, 1, 4}, {1, 1, 3}, {}, {});           // L = S = 1
  check_against_unfused({3, 1, 8}, {3, 70, 8}, {3, 70, 8}, {}, {});         // L = 1, S past a key tile
  check_against_unfused({2, 67, 5}, {2, 131, 5}, {2, 131, 3}, {}, {});      // odd lengths over several tiles
  check_against_unfused({9, 4}, {9, 4}, {9, 4}, {.scale = 0.3}, {.scale = 0.3});  // no leading dims, a scale
}

TEST_CASE("sdpa is_causal masks keys after the query (top-left when L != S)", "[attention]") {
  manual_seed(2);
  check_against_unfused({2, 2, 37, 8}, {2, 2, 37, 8}, {2, 2, 37, 8}, {.is_causal = true}, {.causal = true});
  check_against_unfused({1, 70, 3}, {1, 70, 3}, {1, 70, 5}, {.is_causal = true}, {.causal = true});
  check_against_unfused({2, 5, 4}, {2, 9, 4}, {2, 9, 4}, {.is_causal = true}, {.causal = true});
  check_against_unfused({2, 9, 4}, {2, 5, 4}, {2, 5, 4}, {.is_causal = true}, {.causal = true});
  check_against_unfused({1, 1, 4}, {1, 1, 4}, {1, 1, 4}, {.is_causal = true}, {.causal = true});
}

TEST_CASE("sdpa boolean masks attend where true and broadcast over leading dims", "[attention]") {
  manual_seed(3);
  // a key padding mask [B, 1, 1, S] and a per-head mask [H, L, S]
  Tensor pad = gt(rand({2, 1, 1, 11}, {.dtype = DType::f64}), 0.3);
  pad = masked_fill(pad, lt(arange(0, 11, 1, {.dtype = DType::f64}), 1.0), 1.0).to(DType::boolean);  // key 0 kept
  check_against_unfused({2, 3, 6, 4}, {2, 3, 11, 4}, {2, 3, 11, 5}, {.attn_mask = pad}, {.mask = pad});
  Tensor per_head = gt(rand({3, 6, 11}, {.dtype = DType::f64}), 0.5);
  per_head = masked_fill(per_head, lt(arange(0, 11, 1, {.dtype = DType::f64}), 1.0), 1.0).to(DType::boolean);
  check_against_unfused({2, 3, 6, 4}, {2, 3, 11, 4}, {2, 3, 11, 5}, {.attn_mask = per_head}, {.mask = per_head});
  Tensor causal2d = tril(ones({40, 40}, {.dtype = DType::boolean}));  // the causal mask given as a mask
  check_against_unfused({2, 40, 4}, {2, 40, 4}, {2, 40, 4}, {.attn_mask = causal2d}, {.causal = true});
}

TEST_CASE("sdpa additive float masks are added to the scores", "[attention]") {
  manual_seed(4);
  Tensor bias = randn({1, 3, 7, 9}, {.dtype = DType::f64});
  check_against_unfused({2, 3, 7, 4}, {2, 3, 9, 4}, {2, 3, 9, 4}, {.attn_mask = bias}, {.mask = bias});
  Tensor inf_mask = masked_fill(zeros({7, 9}, {.dtype = DType::f64}),
                                gt(rand({7, 9}, {.dtype = DType::f64}), 0.6), -INFINITY);
  inf_mask = masked_fill(inf_mask, lt(arange(0, 9, 1, {.dtype = DType::f64}), 1.0), 0.0);
  check_against_unfused({2, 7, 4}, {2, 9, 4}, {2, 9, 4}, {.attn_mask = inf_mask}, {.mask = inf_mask});
}

TEST_CASE("sdpa dropout draws its mask from the generator and replays it in backward", "[attention]") {
  Generator gen(77);
  GeneratorState before = gen.get_state();
  const double p = 0.3;
  Tensor q = input({2, 3, 13, 4}), k = input({2, 3, 17, 4}), v = input({2, 3, 17, 5});
  Tensor y = scaled_dot_product_attention(q, k, v, {.dropout_p = p, .is_causal = true, .generator = &gen});
  CHECK(gen.get_state() != before);
  // the same numbers as a dropout fill over [..., L, S] from the same state
  gen.set_state(before);
  Tensor u = rand({2, 3, 13, 17}, gen, {.dtype = DType::f64});
  Tensor z = ge(u, p).to(DType::f64) / (1 - p);
  Tensor want = unfused(q, k, v, {.causal = true, .drop = z});
  CHECK(max_diff(y, want) < 1e-12);
  Tensor w = randn(y.shape(), {.dtype = DType::f64});
  V g = autograd::grad({(y * w).sum()}, {q, k, v});
  V gw = autograd::grad({(want * w).sum()}, {q, k, v});
  for (size_t i = 0; i < 3; ++i) CHECK(max_diff(g[i], gw[i]) < 1e-11);
  // another draw drops other entries
  Tensor y2 = scaled_dot_product_attention(q, k, v, {.dropout_p = p, .is_causal = true, .generator = &gen});
  CHECK(max_diff(y, y2) > 1e-3);
}

TEST_CASE("sdpa gradients pass finite-difference checks", "[attention][gradcheck]") {
  manual_seed(5);
  Tensor bias = randn({3, 4}, {.dtype = DType::f64});
  auto f = [](SdpaOptions o) {
    return [o](const V& in) { return scaled_dot_product_attention(in[0], in[1], in[2], o); };
  };
  CHECK(test::gradcheck(f({}), {input({2, 3, 5}), input({2, 4, 5}), input({2, 4, 2})}) == "");
  CHECK(test::gradcheck(f({.is_causal = true}), {input({1, 2, 5, 3}), input({1, 2, 5, 3}), input({1, 2, 5, 3})}) ==
        "");
  CHECK(test::gradcheck(f({.attn_mask = bias, .scale = 0.7}), {input({2, 3, 2}), input({2, 4, 2}), input({2, 4, 3})}) ==
        "");
  Generator gen(3);
  CHECK(test::gradcheck([&gen](const V& in) {
          GeneratorState s = gen.get_state();  // the same dropout mask for every evaluation
          Tensor y = scaled_dot_product_attention(in[0], in[1], in[2], {.dropout_p = 0.4, .generator = &gen});
          gen.set_state(s);
          return y;
        }, {input({2, 4, 3}), input({2, 6, 3}), input({2, 6, 3})}) == "");
}

TEST_CASE("sdpa rows with every key masked give zeros, not NaN", "[attention]") {
  Tensor mask = tensor({{1, 1, 0}, {0, 0, 0}}).to(DType::boolean);
  Tensor q = input({2, 3}), k = input({3, 3}), v = input({3, 2});
  Tensor y = scaled_dot_product_attention(q, k, v, {.attn_mask = mask});
  std::vector<double> yv = y.to_vector<double>();
  CHECK(yv[2] == 0);
  CHECK(yv[3] == 0);
  y.sum().backward();
  for (double g : q.grad().to_vector<double>()) CHECK(std::isfinite(g));
  CHECK(q.grad().to_vector<double>()[3] == 0);
}

TEST_CASE("sdpa f32 agrees with f64", "[attention]") {
  manual_seed(6);
  Tensor q = randn({2, 4, 100, 16}), k = randn({2, 4, 100, 16}), v = randn({2, 4, 100, 16});
  Tensor y = scaled_dot_product_attention(q, k, v, {.is_causal = true});
  Tensor y64 = scaled_dot_product_attention(q.to(DType::f64), k.to(DType::f64), v.to(DType::f64),
                                            {.is_causal = true});
  CHECK(max_diff(y, y64) < 1e-5);
}

// f16/bf16 attention computes in f32 twins of its inputs (the low-precision layer) with f32
// softmax statistics and rounds each output once, as PyTorch's CPU kernel accumulates in f32
TEST_CASE("sdpa in f16 and bf16 is the f32 attention of the rounded inputs, rounded once", "[attention]") {
  manual_seed(9);
  for (DType dt : {DType::bf16, DType::f16}) {
    INFO(dtype_name(dt));
    Tensor q = randn({2, 3, 37, 16}).to(dt).requires_grad_(), k = randn({2, 3, 45, 16}).to(dt).requires_grad_(),
           v = randn({2, 3, 45, 24}).to(dt).requires_grad_();
    Tensor qf = q.detach().to(DType::f32).requires_grad_(), kf = k.detach().to(DType::f32).requires_grad_(),
           vf = v.detach().to(DType::f32).requires_grad_();
    Tensor bias = (rand({37, 45}) - 0.5).to(dt);
    for (int form = 0; form < 2; ++form) {
      SdpaOptions o = form == 0 ? SdpaOptions{.is_causal = true} : SdpaOptions{.attn_mask = bias};
      SdpaOptions of = form == 0 ? SdpaOptions{.is_causal = true} : SdpaOptions{.attn_mask = bias.to(DType::f32)};
      Tensor y = scaled_dot_product_attention(q, k, v, o), yf = scaled_dot_product_attention(qf, kf, vf, of);
      REQUIRE(y.dtype() == dt);
      CHECK(max_diff(y.to(DType::f32), yf.to(dt).to(DType::f32)) == 0);  // the same f32 values, rounded once
      Tensor g = randn(y.shape()).to(dt);
      V gh = autograd::grad({y}, {q, k, v}, {g}), gf = autograd::grad({yf}, {qf, kf, vf}, {g.to(DType::f32)});
      for (int i = 0; i < 3; ++i) {
        REQUIRE(gh[i].dtype() == dt);
        // the backward reads the rounded output (rowsum(g y)) and rounds each gradient once
        const double scale = gf[i].abs().max().item<double>();
        CHECK(max_diff(gh[i].to(DType::f32), gf[i]) <= (dt == DType::bf16 ? 2e-2 : 3e-3) * scale);
      }
    }
  }
}

TEST_CASE("sdpa under CPU autocast stays in f32, whatever dtype its inputs come in", "[attention][autocast]") {
  manual_seed(10);
  Tensor q = randn({1, 2, 9, 8}).requires_grad_(), k = randn({1, 2, 9, 8}), v = randn({1, 2, 9, 8});
  AutocastGuard amp({.device = DeviceType::CPU, .dtype = DType::bf16});
  Tensor y = scaled_dot_product_attention(q, k, v, {.is_causal = true});
  CHECK(y.dtype() == DType::f32);
  Tensor yh = scaled_dot_product_attention(q.to(DType::bf16), k.to(DType::bf16), v.to(DType::bf16));
  CHECK(yh.dtype() == DType::f32);  // the f32 policy casts half inputs up (recorded)
  Tensor gq = autograd::grad({yh.sum()}, {q})[0];
  CHECK(gq.dtype() == DType::f32);
}

TEST_CASE("sdpa forward and backward allocate O(T), the unfused math O(T^2)", "[attention][memory]") {
  // the most bytes held at once during forward + backward, beyond the inputs
  auto extra = [](int64_t T, bool fused) {
    manual_seed(7);
    Tensor q = randn({1, 2, T, 16}).requires_grad_(), k = randn({1, 2, T, 16}).requires_grad_(),
           v = randn({1, 2, T, 16}).requires_grad_();
    size_t base = cpu::memory_stats().allocated;
    cpu::reset_peak_memory_stats();
    {
      Tensor y = fused ? scaled_dot_product_attention(q, k, v, {.is_causal = true})
                       : unfused(q, k, v, {.causal = true});
      y.sum().backward();
    }
    return double(cpu::memory_stats().peak_allocated - base);
  };
  const double fused_ratio = extra(1024, true) / extra(256, true);
  const double unfused_ratio = extra(1024, false) / extra(256, false);
  INFO("fused x" << fused_ratio << ", unfused x" << unfused_ratio << " from T = 256 to 1024");
  CHECK(fused_ratio < 5);      // linear: about 4
  CHECK(unfused_ratio > 10);   // the measurement sees quadratic growth: about 16
  CHECK(extra(1024, true) < 2.0 * 1024 * 1024 * 16 * 4 / 2);  // well under one [2, T, T] f32 score tensor
}

TEST_CASE("sdpa errors name the op and what came", "[attention][errors]") {
  Tensor q = randn({2, 5, 4}), k = randn({2, 6, 4}), v = randn({2, 6, 3});
  CHECK_THROWS_WITH(scaled_dot_product_attention(q, randn({2, 6, 5}), v),
                    Catch::Contains("scaled_dot_product_attention") && Catch::Contains("[2, 6, 5]"));
  CHECK_THROWS_WITH(scaled_dot_product_attention(q, randn({3, 6, 4}), randn({3, 6, 3})),
                    Catch::Contains("same leading dims"));
  CHECK_THROWS_WITH(scaled_dot_product_attention(q, k, v, {.attn_mask = ones({5, 7}, {.dtype = DType::boolean})}),
                    Catch::Contains("broadcastable to [2, 5, 6]"));
  CHECK_THROWS_WITH(scaled_dot_product_attention(q, k, v, {.attn_mask = ones({5, 6}, {.dtype = DType::i64})}),
                    Catch::Contains("bool attn_mask"));
  CHECK_THROWS_WITH(scaled_dot_product_attention(q, k, v, {.attn_mask = ones({5, 6}, {.dtype = DType::boolean}),
                                                           .is_causal = true}),
                    Catch::Contains("not both"));
  CHECK_THROWS_WITH(scaled_dot_product_attention(q, k, v, {.dropout_p = 1.0}), Catch::Contains("dropout_p"));
  CHECK_THROWS_WITH(scaled_dot_product_attention(q.to(DType::i64), k.to(DType::i64), v.to(DType::i64)),
                    Catch::Contains("scaled_dot_product_attention") && Catch::Contains("i64"));
  CHECK_THROWS_WITH(scaled_dot_product_attention(q.to(DType::bf16), k, v), Catch::Contains("one dtype") &&
                    Catch::Contains("bf16") && Catch::Contains("f32"));
  CHECK_THROWS_WITH(scaled_dot_product_attention(q.to(DType::bf16), k.to(DType::bf16), v.to(DType::bf16),
                                                 {.attn_mask = zeros({5, 6})}),
                    Catch::Contains("one of q's dtype bf16"));
  Tensor qq = randn({1, 2, 3}).requires_grad_();
  Tensor y = scaled_dot_product_attention(qq, randn({1, 2, 3}), randn({1, 2, 3}));
  CHECK_THROWS_WITH(autograd::grad({y.sum()}, {qq}, {}, {.create_graph = true}), Catch::Contains("create_graph"));
}

// f16/bf16 attention against PyTorch's math path on a generated table
// (test/reference/sdpa_half.py, PyTorch 1.13: the composition in f64 from the rounded inputs,
// rounded once): plain, causal with L != S, an additive half mask, a NaN in q, an inf in v, L = 0
// and S = 0. Finite values within a rounding of the dtype (relative to the tensor's largest),
// NaN where PyTorch has NaN, the same infinity where it has one.
TEST_CASE("sdpa in f16 and bf16 matches PyTorch's table, NaN, inf and empty inputs included", "[attention]") {
  static const reel::test::Table t = reel::test::load_torch_table("sdpa_half.txt");
  REQUIRE(t.size() == 14);
  for (const auto& [name, m] : t) {
    reel::test::Case c{m, name};
    INFO(name);
    Tensor q = c.in("q").requires_grad_(), k = c.in("k").requires_grad_(), v = c.in("v").requires_grad_();
    const DType dt = q.dtype();
    const bool causal = name.find("_causal") != std::string::npos;
    SdpaOptions o{.is_causal = causal};
    if (m.count("mask")) o.attn_mask = c.in("mask");
    Tensor y = scaled_dot_product_attention(q, k, v, o);
    REQUIRE(y.dtype() == dt);
    V got = {y};
    V g = autograd::grad({y}, {q, k, v}, {c.in("g")}, {.allow_unused = true});
    for (int i = 0; i < 3; ++i) got.push_back(g[i].defined() ? g[i] : zeros_like(i == 0 ? q : i == 1 ? k : v));
    const char* keys[] = {"y", "gq", "gk", "gv"};
    for (int i = 0; i < 4; ++i) {
      INFO(keys[i]);
      Tensor want = c.out(keys[i]);
      REQUIRE(got[i].shape() == want.shape());
      REQUIRE(got[i].dtype() == dt);
      std::vector<double> a = got[i].to_vector<double>(), b = want.to_vector<double>();
      double scale = 0;
      for (double x : b)
        if (std::isfinite(x)) scale = std::max(scale, std::abs(x));
      // outputs: a rounding or two; gradients read the rounded output (rowsum(g y)) too
      const double tol = (i == 0 ? 2.0 : 6.0) * (dt == DType::bf16 ? 0x1p-8 : 0x1p-11) * std::max(scale, 1.0);
      for (size_t j = 0; j < b.size(); ++j) {
        INFO("element " << j << ": reel " << a[j] << ", PyTorch " << b[j]);
        if (std::isnan(b[j])) CHECK(std::isnan(a[j]));
        else if (std::isinf(b[j])) CHECK(a[j] == b[j]);
        else CHECK(std::abs(a[j] - b[j]) <= tol);
      }
    }
  }
}
