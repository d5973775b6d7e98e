// In-place ops inside graphs give PyTorch's values and gradients (issue 41): every case of
// test/reference/inplace.py, written the same way, against the table PyTorch 1.13 wrote
// (inplace.txt): results, gradients w.r.t. x, u, w, the cases PyTorch refuses, and a double
// backward. Then what the table cannot show: the tape, the errors' words, no recording
// where nothing requires grad.
#include <catch2/catch.hpp>

#include <cmath>
#include <fstream>
#include <functional>
#include <map>
#include <sstream>

#include "gradcheck.h"
#include "torch_table.h"

using namespace reel;

namespace {

const std::map<std::string, std::vector<double>>& table() {
  static const auto t = reel::test::load_flat_table("inplace.txt");
  return t;
}

Tensor ramp(const Dims& shape) {
  return (arange(0.0, double(numel_of(shape)), 1.0, {.dtype = DType::f64}) + 1.0).reshape(shape) / 8.0;
}

// x, u, w as inplace.py makes them
std::vector<Tensor> inputs() {
  Tensor k = arange(0.0, 6.0, 1.0, {.dtype = DType::f64}).reshape({2, 3});
  Tensor x = ((k - 2.5) * 0.7).detach().requires_grad_();
  Tensor u = ((k + 1.0) * 0.3).detach().requires_grad_();
  Tensor w = (cos(k) * 0.5).detach().requires_grad_();
  return {x, u, w};
}

Tensor pos(const Tensor& t) { return t * t + 0.5; }
Tensor mask23() { return tensor({{1, 0, 1}, {0, 0, 1}}).to_bool(); }
Tensor idx(std::vector<int64_t> v, Dims shape = {}) { return from_vector(v, shape); }

using Case = std::function<Tensor(Tensor& x, Tensor& u, Tensor& w)>;

// Each case as inplace.py writes it, line for line.
const std::vector<std::pair<std::string, Case>>& cases() {
  static const std::vector<std::pair<std::string, Case>> all = {
      // the table
      {"add_self_twice", [](Tensor& x, Tensor&, Tensor&) { Tensor y = x * 2; y += x; return y; }},
      {"mul_scalar", [](Tensor& x, Tensor&, Tensor&) { Tensor b = x * 1; b.mul_(3); return b; }},
      {"clamp_cut", [](Tensor& x, Tensor&, Tensor&) { Tensor y = x * 2; y.clamp_(-1, 1); return y; }},
      {"div_by_self", [](Tensor& x, Tensor&, Tensor&) { Tensor y = x * x; y.div_(x); return y; }},
      {"sub_operand", [](Tensor& x, Tensor& u, Tensor&) { Tensor y = x * 1; y -= u * 2; return y; }},
      {"narrow_add", [](Tensor& x, Tensor&, Tensor& w) {
         Tensor y = x * 1;
         y.narrow(0, 0, 1).add_(w.narrow(0, 1, 1));
         return y;
       }},
      {"zeros_grow", [](Tensor& x, Tensor&, Tensor&) {
         Tensor y = zeros({2, 3}, {.dtype = DType::f64});
         y += x * 3;
         return y;
       }},
      // every op on a non-leaf
      {"add_scalar", [](Tensor& x, Tensor&, Tensor&) { Tensor y = x * 1; y.add_(2.5); return y; }},
      {"add_alpha", [](Tensor& x, Tensor& u, Tensor&) { Tensor y = x * 1; y.add_(u, -0.5); return y; }},
      {"add_broadcast", [](Tensor& x, Tensor&, Tensor& w) { Tensor y = x * 1; y.add_(w[1]); return y; }},
      {"sub_scalar", [](Tensor& x, Tensor&, Tensor&) { Tensor y = x * 1; y.sub_(1.25); return y; }},
      {"mul_tensor", [](Tensor& x, Tensor& u, Tensor&) { Tensor y = x * 1; y.mul_(u); return y; }},
      {"div_scalar", [](Tensor& x, Tensor&, Tensor&) { Tensor y = x * 1; y.div_(4); return y; }},
      {"div_tensor", [](Tensor& x, Tensor& u, Tensor&) { Tensor y = x * 1; y.div_(u); return y; }},
      {"pow_", [](Tensor& x, Tensor&, Tensor&) { Tensor y = x * 1; y.pow_(3); return y; }},
      {"neg_", [](Tensor& x, Tensor&, Tensor&) { Tensor y = x * 1; y.neg_(); return y; }},
      {"abs_", [](Tensor& x, Tensor&, Tensor&) { Tensor y = x * 1; y.abs_(); return y; }},
      {"exp_", [](Tensor& x, Tensor&, Tensor&) { Tensor y = x * 1; y.exp_(); return y; }},
      {"log_", [](Tensor& x, Tensor&, Tensor&) { Tensor y = pos(x); y.log_(); return y; }},
      {"sqrt_", [](Tensor& x, Tensor&, Tensor&) { Tensor y = pos(x); y.sqrt_(); return y; }},
      {"relu_", [](Tensor& x, Tensor&, Tensor&) { Tensor y = x * 1; y.relu_(); return y; }},
      {"sigmoid_", [](Tensor& x, Tensor&, Tensor&) { Tensor y = x * 1; y.sigmoid_(); return y; }},
      {"tanh_", [](Tensor& x, Tensor&, Tensor&) { Tensor y = x * 1; y.tanh_(); return y; }},
      {"clamp_min_", [](Tensor& x, Tensor&, Tensor&) { Tensor y = x * 1; y.clamp_min_(-0.5); return y; }},
      {"clamp_max_", [](Tensor& x, Tensor&, Tensor&) { Tensor y = x * 1; y.clamp_max_(0.5); return y; }},
      {"masked_fill_", [](Tensor& x, Tensor&, Tensor&) { Tensor y = x * 1; y.masked_fill_(mask23(), 0.25); return y; }},
      {"index_fill_", [](Tensor& x, Tensor&, Tensor&) {
         Tensor y = x * 1;
         y.index_fill_(1, idx({0, 2}), -1.5);
         return y;
       }},
      {"fill_", [](Tensor& x, Tensor&, Tensor&) { Tensor y = x * 1; y.narrow(1, 1, 1).fill_(7); return y; }},
      {"zero_", [](Tensor& x, Tensor&, Tensor&) { Tensor y = x * 2; y[1].zero_(); return y; }},
      {"copy_", [](Tensor& x, Tensor& u, Tensor&) { Tensor y = x * 1; y.copy_(u * 3); return y; }},
      {"copy_broadcast", [](Tensor& x, Tensor&, Tensor& w) { Tensor y = x * 1; y.copy_(w[0]); return y; }},
      {"scatter_", [](Tensor& x, Tensor& u, Tensor&) {
         Tensor y = x * 1;
         y.scatter_(1, idx({2, 0, 1, 2}, {2, 2}), u.slice(1, 0, 2) * 1);
         return y;
       }},
      {"index_put_", [](Tensor& x, Tensor&, Tensor& w) {
         Tensor y = x * 1;
         y.index_put_({idx({0, 1}), idx({2, 0})}, w[0].slice(0, 0, 2) * 2);
         return y;
       }},
      {"index_put_accumulate", [](Tensor& x, Tensor& u, Tensor&) {
         Tensor y = x * 1;
         y.index_put_({idx({0, 0}), idx({1, 1})}, u[1].slice(0, 0, 2) * 1, true);
         return y;
       }},
      {"eq_", [](Tensor& x, Tensor& u, Tensor&) { Tensor y = x * 1; y.gt_(0); return y + u; }},
      // views
      {"select_mul", [](Tensor& x, Tensor& u, Tensor&) {
         Tensor y = x * 1;
         y.select(1, 2).mul_(u[0][0]);
         return y;
       }},
      {"index_add", [](Tensor& x, Tensor&, Tensor& w) { Tensor y = x * 1; y[0] += w[1]; return y; }},
      {"slice_step", [](Tensor& x, Tensor& u, Tensor&) {
         Tensor y = x * 1;
         y.slice(1, 0, 3, 2) *= u.slice(1, 0, 3, 2);
         return y;
       }},
      {"transpose_add", [](Tensor& x, Tensor&, Tensor& w) { Tensor y = x * 1; y.t().add_(w.t()); return y; }},
      {"narrow_of_narrow", [](Tensor& x, Tensor&, Tensor&) {
         Tensor y = x * 1;
         y.narrow(1, 1, 2).narrow(0, 1, 1).exp_();
         return y;
       }},
      {"view_mul", [](Tensor& x, Tensor& u, Tensor&) {
         Tensor y = x * 1;
         y.view({6}).narrow(0, 1, 4).mul_(u.view({6}).slice(0, 0, 4));
         return y;
       }},
      {"expand_refused", [](Tensor& x, Tensor&, Tensor&) {
         Tensor y = (x * 1).slice(1, 0, 1).expand({2, 3});
         y.add_(1);
         return y;
       }},
      {"view_then_base_written", [](Tensor& x, Tensor& u, Tensor&) {
         Tensor y = x * 1;
         Tensor a = y[0];
         y.mul_(u);
         return a * 2;
       }},
      {"other_view_after_write", [](Tensor& x, Tensor&, Tensor& w) {
         Tensor y = x * 1;
         Tensor a = y[1];
         y[0].mul_(w[0]);
         return a * 3 + y[0];
       }},
      {"view_of_plain_base", [](Tensor& x, Tensor& u, Tensor&) {
         Tensor y = zeros({2, 3}, {.dtype = DType::f64});
         y[1] += x[0] * 3;
         y[0].slice(0, 1, 3) -= u[1].slice(0, 0, 2);
         return y;
       }},
      // chains
      {"chain_ok", [](Tensor& x, Tensor& u, Tensor&) {
         Tensor y = x * 1;
         y.mul_(2).add_(u).tanh_();
         return y;
       }},
      {"chain", [](Tensor& x, Tensor& u, Tensor& w) {
         Tensor y = x * 1;
         y.mul_(2).add_(u).tanh_();
         y.sub_(w);
         return y;
       }},
      {"chain_views", [](Tensor& x, Tensor& u, Tensor& w) {
         Tensor y = x * 1;
         y[0] += u[1];
         y.select(1, 1) *= w[0][1];
         y.exp_();
         return y;
       }},
      // NaN, inf, empty
      {"nonfinite_operand", [](Tensor& x, Tensor& u, Tensor&) {
         Tensor y = x * 1;
         y.mul_(tensor({{NAN, INFINITY, 1.0}, {-INFINITY, 2.0, 0.0}}, {.dtype = DType::f64}));
         y.add_(u);
         return y;
       }},
      {"overflow_exp_", [](Tensor& x, Tensor&, Tensor&) { Tensor y = x * 500; y.exp_(); return y; }},
      {"empty_view_add", [](Tensor& x, Tensor& u, Tensor& w) {
         Tensor y = x * 1;
         y.narrow(0, 0, 0).add_(u.narrow(0, 0, 0));
         Tensor e = x.slice(0, 0, 0) * 1;
         e.mul_(w.slice(0, 0, 0));
         return y + e.sum();
       }},
      // refused
      {"leaf_refused", [](Tensor& x, Tensor&, Tensor&) { x.add_(1); return x; }},
      {"view_of_leaf_refused", [](Tensor& x, Tensor&, Tensor&) { x[0].mul_(2); return x; }},
      {"saved_then_written", [](Tensor& x, Tensor&, Tensor&) {
         Tensor y = x * 1;
         Tensor z = y * y;
         y.add_(1);
         return z;
       }},
      {"saved_output_written", [](Tensor& x, Tensor&, Tensor&) { Tensor y = x.sigmoid(); y.mul_(2); return y; }},
      {"operand_aliases_self", [](Tensor& x, Tensor&, Tensor&) { Tensor y = x * 1; y.mul_(y); return y; }},
      {"int_from_float_refused", [](Tensor& x, Tensor&, Tensor&) {
         Tensor y = zeros({2, 3}, {.dtype = DType::i64});
         y += x;
         return y;
       }},
      // mixed dtypes
      {"f32_from_f64", [](Tensor& x, Tensor& u, Tensor&) {
         Tensor y = x.to(DType::f32) * 1;
         y += u;
         return y.to(DType::f64);
       }},
      // modules written with +=
      {"residual_block", [](Tensor& x, Tensor& u, Tensor& w) {
         Tensor lin1 = (u * 0.5).t();
         Tensor lin2 = w * 0.5;
         Tensor out = relu(matmul(x.t(), lin2));
         out = matmul(out, lin1);
         Tensor residual = x.t() * 1;
         out += residual;
         out.relu_();
         return out;
       }},
      {"vae_reparam", [](Tensor& x, Tensor& u, Tensor& w) {
         Tensor mu = x * 0.5;
         Tensor log_var = u - 1;
         Tensor eps = w * 1;
         Tensor std = log_var.div(2.0).exp_();
         Tensor z = eps.mul(std).add_(mu);
         return z;
       }},
      {"double_backward", [](Tensor& x, Tensor&, Tensor&) { Tensor y = x * x; y.mul_(x); return y; }},
  };
  return all;
}

void check_values(const std::string& key, const Tensor& got) {
  auto it = table().find(key);
  REQUIRE(it != table().end());
  const std::vector<double>& want = it->second;
  std::vector<double> have = got.defined() ? got.to(DType::f64).contiguous().to_vector<double>() : std::vector<double>();
  if (!got.defined()) have.assign(want.size(), 0.0);  // undefined: no path leads there (PyTorch may say zeros)
  INFO(key);
  REQUIRE(have.size() == want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    INFO("element " << i << ": reel " << have[i] << ", PyTorch " << want[i]);
    if (std::isnan(want[i]) || std::isinf(want[i])) {  // NaN where PyTorch has NaN, the same infinity
      CHECK((std::isnan(want[i]) ? std::isnan(have[i]) : have[i] == want[i]));
      continue;
    }
    const double rel = key.find("f32") != std::string::npos ? 1e-6 : 1e-12;
    CHECK(std::abs(have[i] - want[i]) <= 1e-12 + rel * std::abs(want[i]));
  }
}

}  // namespace

TEST_CASE("in-place ops in graphs give PyTorch's values and gradients (generated table)", "[inplace][torch]") {
  REQUIRE(table().size() > 100);
  size_t seen = 0;
  for (const auto& [name, fn] : cases()) {
    INFO("case " << name);
    REQUIRE((table().count(name + ".error") || table().count(name + ".y")));
    ++seen;
    std::vector<Tensor> in = inputs();
    if (table().count(name + ".error")) {
      CHECK_THROWS_AS(([&] {
                        Tensor y = fn(in[0], in[1], in[2]);
                        (void)autograd::grad({(y * ramp(y.shape())).sum()}, in, {}, {.allow_unused = true});
                      }()),
                      Error);
      continue;
    }
    Tensor y = fn(in[0], in[1], in[2]);
    check_values(name + ".y", y);
    std::vector<Tensor> g = autograd::grad({(y * ramp(y.shape())).sum()}, in, {}, {.allow_unused = true});
    check_values(name + ".gx", g[0]);
    check_values(name + ".gu", g[1]);
    check_values(name + ".gw", g[2]);
    if (table().count(name + ".gg")) {
      std::vector<Tensor> again = inputs();
      Tensor first = autograd::grad({fn(again[0], again[1], again[2]).sum()}, {again[0]}, {}, {.create_graph = true})[0];
      Tensor second = autograd::grad({first.sum()}, {again[0]})[0];
      check_values(name + ".gg", second);
    }
  }
  CHECK(seen == cases().size());
}

TEST_CASE("in-place ops: finite-difference gradients through writes and views (f64)", "[inplace][gradcheck]") {
  using reel::test::gradcheck;
  using reel::test::gradgradcheck;
  auto f = [](const std::vector<Tensor>& in) {
    Tensor y = in[0] * 1;
    y.narrow(1, 0, 2).mul_(in[1]);  // a write through a view, an operand with its own gradient
    y += in[0].sigmoid();
    y.t().slice(0, 1, 3).add_(in[1].t(), 0.5);
    y[1].exp_();  // last: exp_ reads its output at backward, so nothing may write it after
    return y;
  };
  std::vector<Tensor> in = {reel::test::input({2, 3}), reel::test::input({2, 2})};
  CHECK(gradcheck(f, in).empty());
  CHECK(gradgradcheck(f, in).empty());
}

TEST_CASE("in-place ops: the tape shows the in-place node at the user's line", "[inplace][debug]") {
  Tensor x = ones({2, 2}, {.dtype = DType::f64, .requires_grad = true});
  Tensor y = x * 2;
  const int line = __LINE__ + 1;
  y.mul_(3);
  std::string site = std::string("test_inplace.cpp:") + std::to_string(line);
  REQUIRE(y.grad_fn());
  CHECK(std::string(y.grad_fn()->inplace) == "mul_");
  CHECK(y.grad_fn()->name() == "MulBackward0");
  CHECK_THAT(y.grad_fn()->describe(), Catch::Contains("mul_") && Catch::Contains(site));
  y[0] += x[1];
  CHECK(y.grad_fn()->name() == "CopySlices");
  CHECK_THAT(autograd::tape_str(), Catch::Contains("add_ (through a view)"));
}

TEST_CASE("in-place ops: refusals name the op, the tensors and the lines", "[inplace][errors]") {
  Tensor x = ones({2, 3}, {.dtype = DType::f64, .requires_grad = true});
  try {
    x.add_(1);
    FAIL("a leaf that requires grad was written in place");
  } catch (const Error& e) {
    CHECK_THAT(e.what(), Catch::Contains("add_") && Catch::Contains("leaf") && Catch::Contains("test_inplace.cpp"));
  }
  try {
    x[0].mul_(2);
    FAIL("a view of a leaf that requires grad was written in place");
  } catch (const Error& e) {
    CHECK_THAT(e.what(), Catch::Contains("mul_") && Catch::Contains("view of a leaf"));
  }
  Tensor y = x.sigmoid();
  const int line = __LINE__ + 1;
  y.mul_(2);
  try {
    y.sum().backward();
    FAIL("a saved output overwritten in place went unnoticed");
  } catch (const Error& e) {
    std::string at = "test_inplace.cpp:" + std::to_string(line);
    CHECK_THAT(e.what(), Catch::Contains("saved by sigmoid") && Catch::Contains("by mul_ at") && Catch::Contains(at));
  }
  Tensor e = (x * 1).slice(1, 0, 1).expand({2, 3});
  CHECK_THROWS_WITH(e.add_(1), Catch::Contains("one memory location"));
  Tensor i = zeros({2, 3}, {.dtype = DType::i64});
  CHECK_THROWS_WITH(i += x * 1, Catch::Contains("cannot be written into"));
  Tensor small = x * 1;
  CHECK_THROWS_AS(small.add_(ones({4, 2, 3}, {.dtype = DType::f64})), Error);
}

TEST_CASE("in-place ops: nothing recorded when nothing requires grad or under no-grad", "[inplace]") {
  size_t before = autograd::tape_size();
  Tensor a = ones({1000});
  Tensor b = full({1000}, 2.0);
  a += b;
  a.mul_(3.0);
  a[0] += b[1];
  CHECK(autograd::tape_size() == before);
  CHECK(!a.requires_grad());
  CHECK(a.to_vector<float>()[0] == 11.0f);
  Tensor p = ones({3}, {.requires_grad = true});
  {
    NoGradGuard off;
    p.add_(1.0);  // an optimizer's update: allowed, not recorded
    p[0].mul_(2.0);
  }
  CHECK(autograd::tape_size() == before);
  CHECK(p.is_leaf());
  CHECK(p.to_vector<float>() == std::vector<float>{4, 2, 2});
}

TEST_CASE("in-place ops: a residual block written with += trains like its out-of-place form", "[inplace]") {
  // the ported ResNet's defect: out += residual must carry the skip path's gradient
  auto step = [](bool inplace) {
    manual_seed(3);
    Tensor w1 = (randn({8, 8}, {.dtype = DType::f64}) * 0.3).requires_grad_();
    Tensor w2 = (randn({8, 8}, {.dtype = DType::f64}) * 0.3).requires_grad_();
    Tensor x = randn({4, 8}, {.dtype = DType::f64});
    for (int i = 0; i < 5; ++i) {
      Tensor h = relu(matmul(x, w1));
      Tensor residual = h;
      Tensor out = matmul(h, w2);
      if (inplace) {
        out += residual;
        out.relu_();
      } else {
        out = relu(out + residual);
      }
      Tensor loss = (out * out).mean();
      loss.backward();
      NoGradGuard off;
      w1.sub_(w1.grad() * 0.1);
      w2.sub_(w2.grad() * 0.1);
      w1.grad().zero_();
      w2.grad().zero_();
    }
    return std::make_pair(w1.detach().clone(), w2.detach().clone());
  };
  auto [a1, a2] = step(true);
  auto [b1, b2] = step(false);
  CHECK(a1.to_vector<double>() == b1.to_vector<double>());
  CHECK(a2.to_vector<double>() == b2.to_vector<double>());
}

TEST_CASE("in-place ops: anomaly mode and the profiler name the in-place op and its line", "[inplace][debug]") {
  {
    debug::AnomalyMode anomaly;
    Tensor x = tensor({1, 1000}).requires_grad_();
    Tensor y = x * 1;
    const int line = __LINE__ + 1;
    CHECK_THROWS_WITH(y.exp_(), Catch::Contains("exp_") && Catch::Contains("gave inf") &&
                                    Catch::Contains("test_inplace.cpp:" + std::to_string(line)));
    Tensor z = tensor({{4, 0}}).requires_grad_() * 1;
    const int l_sqrt = __LINE__ + 1;
    z.sqrt_();
    CHECK_THROWS_WITH(z.sum().backward(), Catch::Contains("backward rule of sqrt_ gave inf") &&
                                              Catch::Contains("test_inplace.cpp:" + std::to_string(l_sqrt)));
  }
  Tensor x = randn({4, 3}).requires_grad_();
  debug::Profiler prof;
  Tensor y = x * 2;
  y += x;
  y.sum().backward();
  prof.stop();
  bool forward = false, backward = false;
  for (const auto& r : prof.table()) {
    forward = forward || r.op == "add_";
    backward = backward || (r.op.find("add_") == 0 && r.op.find("backward") != std::string::npos);
  }
  CHECK(forward);
  CHECK(backward);
}
