// Same call, same answer as PyTorch 1.13 (issue 13, items 8-10): NaN rules, empty
// tensors, and the options PyTorch users pass (add/sub alpha, argmax over all elements,
// unbatched and ceil_mode pooling with indices, class losses over [N, C, d1, ...] with
// class weights, BCE weight and pos_weight, narrow's errors). Expected values come from
// test/reference/semantics.txt, written by test/reference/semantics.py under PyTorch
// 1.13; each backward there takes the incoming gradient ramp(shape) (element k: (k+1)/8).
#include <cmath>
#include <fstream>
#include <map>
#include <sstream>

#include "gradcheck.h"
#include "torch_table.h"

using namespace reel;
using reel::test::gradcheck;
using reel::test::gradgradcheck;
using reel::test::input;
using V = std::vector<Tensor>;

namespace {

const std::map<std::string, std::vector<double>>& table() {
  static const auto t = reel::test::load_flat_table("semantics.txt");
  return t;
}

const std::vector<double>& ref(const std::string& name) {
  auto it = table().find(name);
  if (it == table().end()) throw std::runtime_error("no reference tensor " + name);
  return it->second;
}

// An f64 tensor (requiring grad when asked) or i64 labels, from the table
Tensor f64(const std::string& name, const Dims& shape, bool grad = false) {
  Tensor t = from_vector(ref(name), shape);
  return grad ? t.requires_grad_() : t;
}
Tensor labels(const std::string& name, const Dims& shape) {
  std::vector<int64_t> v;
  for (double d : ref(name)) v.push_back(int64_t(d));
  return from_vector(v, shape);
}

Tensor ramp(const Dims& shape) {
  int64_t n = 1;
  for (int64_t s : shape) n *= s;
  return (arange(1.0, double(n) + 1, 1.0, {.dtype = DType::f64}) / 8.0).reshape(shape);
}

// d sum(y ramp) / d xs (zeros for an input y does not depend on)
V grads(const Tensor& y, const V& xs, bool create_graph = false) {
  V g = autograd::grad({(y * ramp(y.shape())).sum()}, xs, {}, {.create_graph = create_graph, .allow_unused = true});
  for (size_t i = 0; i < g.size(); ++i)
    if (!g[i].defined()) g[i] = zeros_like(xs[i]);
  return g;
}

// got against the table entry: NaN where NaN, the same infinity, else within tol (relative)
void check_ref(const Tensor& got, const std::string& name, double tol = 1e-12) {
  const std::vector<double>& want = ref(name);
  std::vector<double> g = got.to(DType::f64).contiguous().to_vector<double>();
  INFO(name);
  REQUIRE(g.size() == want.size());
  for (size_t i = 0; i < g.size(); ++i) {
    INFO(name << "[" << i << "]: got " << g[i] << ", PyTorch " << want[i]);
    if (std::isnan(want[i])) CHECK(std::isnan(g[i]));
    else if (std::isinf(want[i])) CHECK(g[i] == want[i]);
    else CHECK(std::abs(g[i] - want[i]) <= tol * (1 + std::abs(want[i])));
  }
}

Dims shape_of(const std::string& name) {
  Dims d;
  for (double v : ref(name)) d.push_back(int64_t(v));
  return d;
}

}  // namespace

// ---------------------------------------------------------------- item 8: NaN rules

TEST_CASE("relu(NaN) is NaN and its gradient passes through, as PyTorch 1.13", "[semantics][nan]") {
  Tensor x = f64("relu.x", {5}, true);
  Tensor y = relu(x);
  check_ref(y, "relu.y");
  check_ref(grads(y, {x})[0], "relu.gx");
  // the create_graph rule (recorded ops) agrees with the kernel's
  check_ref(grads(relu(x), {x}, true)[0], "relu.gx");
  // f32 through the same kernels
  Tensor xf = x.detach().to(DType::f32).requires_grad_();
  Tensor yf = relu(xf);
  CHECK(std::isnan(yf.to_vector<float>()[0]));
  yf.sum().backward();
  CHECK(xf.grad().to_vector<float>() == std::vector<float>{1, 0, 0, 1, 0});
}

TEST_CASE("pow's gradient at exponent 0 is 0 (not 0 * inf), scalar and tensor exponents", "[semantics][nan]") {
  Tensor x = tensor({0.0, 2.0, -1.5}, {.dtype = DType::f64}).requires_grad_();
  for (auto [p, key] : {std::pair<double, std::string>{0.0, "0.0"}, {1.0, "1.0"}, {2.0, "2.0"}, {0.5, "0.5"},
                        {-1.0, "-1.0"}}) {
    Tensor y = pow(x, p);
    check_ref(y, "pow_scalar." + key + ".y");
    check_ref(grads(y, {x})[0], "pow_scalar." + key + ".gx");
  }
  Tensor a = f64("pow.a", {6}, true), b = f64("pow.b", {6}, true);
  Tensor y = pow(a, b);
  check_ref(y, "pow.y");
  V g = grads(y, {a, b});
  check_ref(g[0], "pow.ga");
  check_ref(g[1], "pow.gb");
  // away from the special points the rule is still the derivative
  CHECK(gradcheck([](const V& v) { return pow(v[0], v[1]); }, {input({2, 3}, 0.5, 2.0), input({2, 3}, -1.0, 1.0)}) ==
        "");
}

TEST_CASE("max and min over NaN send the gradient to the NaN elements only", "[semantics][nan]") {
  Tensor x = f64("extremum.x", {3, 4}, true);
  for (std::string f : {"max", "min"}) {
    bool is_max = f == "max";
    Tensor all = is_max ? amax(x) : amin(x);
    check_ref(all, f + ".all.y");
    check_ref(grads(all, {x})[0], f + ".all.gx");
    Tensor dim1 = is_max ? amax(x, {1}) : amin(x, {1});
    check_ref(dim1, f + ".dim1.y");
    check_ref(grads(dim1, {x})[0], f + ".dim1.gx");
    check_ref(is_max ? argmax(x, 1) : argmin(x, 1), "arg" + f + ".dim1");
    check_ref(is_max ? argmax(x) : argmin(x), "arg" + f + ".all");
  }
  CHECK(std::isnan(x.max().item<double>()));
  // two NaNs in one group share its gradient, along dims as over all elements (reel's
  // rule for ties, as torch.amax's; torch.max(dim) would give all to the first NaN)
  Tensor two = tensor({{1.0, NAN, 2.0, NAN}, {3.0, 1.0, 0.0, 2.0}}, {.dtype = DType::f64}).requires_grad_();
  amax(two, {1}).sum().backward();
  CHECK(two.grad().to_vector<double>() == std::vector<double>{0, 0.5, 0, 0.5, 1, 0, 0, 0});
}

TEST_CASE("maximum and minimum with NaN operands: NaN out, the whole gradient to both", "[semantics][nan]") {
  Tensor a = f64("binary.a", {6}, true), b = f64("binary.b", {6}, true);
  for (std::string f : {"maximum", "minimum"}) {
    Tensor y = f == "maximum" ? maximum(a, b) : minimum(a, b);
    check_ref(y, f + ".y");
    V g = grads(y, {a, b});
    check_ref(g[0], f + ".ga");
    check_ref(g[1], f + ".gb");
  }
  // ties still split (broadcast b), the loser still gets nothing
  Tensor p = tensor({1.0, 2.0, 3.0}, {.dtype = DType::f64}).requires_grad_();
  Tensor q = tensor({2.0}, {.dtype = DType::f64}).requires_grad_();
  V g = grads(maximum(p, q), {p, q});
  CHECK(g[0].to_vector<double>() == std::vector<double>{0, 0.125, 0.375});
  CHECK(g[1].to_vector<double>() == std::vector<double>{0.125 + 0.125});
}

TEST_CASE("softmax and log_softmax of rows holding +inf or only -inf are NaN, as PyTorch", "[semantics][nan]") {
  Tensor x = f64("softmax.x", {5, 3}, true);
  for (std::string f : {"softmax", "log_softmax"}) {
    Tensor y = f == "softmax" ? softmax(x, 1) : log_softmax(x, 1);
    check_ref(y, f + ".y");
    check_ref(grads(y, {x})[0], f + ".gx");
    Tensor xf = x.detach().to(DType::f32).requires_grad_();
    Tensor yf = f == "softmax" ? softmax(xf, 1) : log_softmax(xf, 1);
    check_ref(yf, f + ".y", 1e-5);  // f32 (oneDNN's kernel for rows)
    // and its backward: a row holding +inf is NaN throughout (oneDNN alone gave -inf there)
    check_ref(autograd::grad({(yf * ramp(yf.shape()).to(DType::f32)).sum()}, {xf})[0], f + ".gx", 1e-5);
    Tensor xcf = x.detach().t().contiguous().to(DType::f32).requires_grad_();
    Tensor ycf = f == "softmax" ? softmax(xcf, 0) : log_softmax(xcf, 0);
    check_ref(autograd::grad({(ycf.t() * ramp(yf.shape()).to(DType::f32)).sum()}, {xcf})[0].t(), f + ".gx", 1e-5);
    Tensor yc = f == "softmax" ? softmax(x.detach().t().contiguous(), 0) : log_softmax(x.detach().t().contiguous(), 0);
    check_ref(yc.t(), f + ".y");  // along a dim with others inside it: the column loops
  }
}

// ---------------------------------------------------------------- item 9: empty tensors

TEST_CASE("amax, amin, argmax over an empty dim are errors; over a kept empty dim, empty", "[semantics][empty]") {
  Tensor x = zeros({2, 0});
  CHECK_THROWS_WITH(amax(x, {1}), Catch::Contains("amax") && Catch::Contains("reduced dim 1 to be non-empty"));
  CHECK_THROWS_WITH(amin(x, {-1}), Catch::Contains("amin"));
  CHECK_THROWS_WITH(argmax(x, 1), Catch::Contains("argmax") && Catch::Contains("[2, 0]"));
  CHECK_THROWS_WITH(amax(x), Catch::Contains("no elements"));
  CHECK_THROWS_WITH(x.max(), Catch::Contains("no elements"));
  CHECK_THROWS_WITH(argmin(x), Catch::Contains("argmin") && Catch::Contains("no elements"));
  CHECK(amax(x, {0}).shape() == Dims{0});
  CHECK(amin(x, {0}, true).shape() == Dims{1, 0});
  Tensor i = argmax(x, 0);
  CHECK(i.shape() == Dims{0});
  CHECK(i.dtype() == DType::i64);
}

TEST_CASE("var of 0 or 1 elements is NaN (PyTorch), and a spread group over 0 degrees of freedom inf",
          "[semantics][empty]") {
  auto d = [](std::initializer_list<double> v) { return tensor(v, {.dtype = DType::f64}); };
  CHECK(std::isnan(var(zeros({0}, {.dtype = DType::f64})).item<double>()));
  CHECK(std::isnan(var(zeros({0}, {.dtype = DType::f64}), {}, 0).item<double>()));
  CHECK(std::isnan(var(d({2.0})).item<double>()));
  CHECK(var(d({2.0}), {}, 0).item<double>() == 0.0);
  std::vector<double> rows = var(ones({2, 1}, {.dtype = DType::f64}), {1}).to_vector<double>();
  CHECK((std::isnan(rows[0]) && std::isnan(rows[1])));
  rows = var(ones({2, 0}, {.dtype = DType::f64}), {1}).to_vector<double>();
  CHECK((rows.size() == 2 && std::isnan(rows[0]) && std::isnan(rows[1])));
  CHECK(var(ones({2, 0}, {.dtype = DType::f64}), {0}).shape() == Dims{0});
  // the gradient of one element's var is NaN, as PyTorch's
  Tensor one = d({2.0}).requires_grad_();
  var(one).backward();
  CHECK(std::isnan(one.grad().item<double>()));
  Tensor two = d({1.0, 3.0}).requires_grad_();
  CHECK(var(two, {}, 2).item<double>() == INFINITY);
  CHECK(gradcheck([](const V& v) { return var(v[0], {1}, 1, true); }, {input({3, 4})}) == "");
  CHECK(gradgradcheck([](const V& v) { return var(v[0], {0}); }, {input({3, 4})}) == "");
  CHECK_THROWS_WITH(var(two, {}, -1), Catch::Contains("correction >= 0"));
}

TEST_CASE("cross_entropy and nll_loss of an empty batch: nan mean, 0 sum, empty none", "[semantics][empty]") {
  Tensor y = zeros({0}, {.dtype = DType::i64});
  Tensor w = ones({3});
  for (bool weighted : {false, true}) {
    for (double eps : {0.0, 0.1}) {
      INFO("weighted " << weighted << ", label_smoothing " << eps);
      Tensor x = zeros({0, 3}).requires_grad_();
      CrossEntropyOptions o{.label_smoothing = eps};
      if (weighted) o.weight = w;
      CHECK(std::isnan(cross_entropy(x, y, o).item<float>()));
      CHECK(std::isnan(nll_loss(x, y, o).item<float>()));
      o.reduction = Reduction::none;
      CHECK(cross_entropy(x, y, o).shape() == Dims{0});
      CHECK(nll_loss(x, y, o).shape() == Dims{0});
      o.reduction = Reduction::sum;
      Tensor s = cross_entropy(x, y, o);
      CHECK(s.item<float>() == 0.0f);
      s.backward();
      CHECK(x.grad().shape() == Dims{0, 3});
      CHECK(nll_loss(x, y, o).item<float>() == 0.0f);
    }
  }
  // zero positions in a spatial batch are an empty batch too
  CHECK(cross_entropy(zeros({2, 3, 0}), zeros({2, 0}, {.dtype = DType::i64}), {.reduction = Reduction::none}).shape() ==
        Dims{2, 0});
}

TEST_CASE("conv2d with no input channels or no output channels is an Error naming both shapes", "[semantics][empty]") {
  CHECK_THROWS_WITH(conv2d(zeros({2, 0, 5, 5}), zeros({3, 0, 3, 3}), zeros({3})),
                    Catch::Contains("conv2d: expected an input with at least one channel") &&
                        Catch::Contains("[2, 0, 5, 5]") && Catch::Contains("[3, 0, 3, 3]"));
  CHECK_THROWS_WITH(conv2d(zeros({1, 2, 5, 5}), zeros({0, 2, 3, 3})),
                    Catch::Contains("at least one output channel, got [0, 2, 3, 3]"));
  CHECK(conv2d(zeros({0, 2, 5, 5}), zeros({3, 2, 3, 3})).shape() == Dims{0, 3, 3, 3});  // N = 0 is fine
}

// ---------------------------------------------------------------- item 10: options

TEST_CASE("add and sub take alpha: a + alpha b, one op, gradients alpha g", "[semantics][options]") {
  Tensor a = f64("alpha.a", {2, 3}, true), b = f64("alpha.b", {3}, true);
  for (auto [f, alpha] : {std::pair<std::string, double>{"add", 2.5}, {"sub", -0.75}}) {
    size_t before = autograd::tape_size();
    Tensor y = f == "add" ? add(a, b, alpha) : sub(a, b, alpha);
    CHECK(autograd::tape_size() == before + 1);  // recorded as one op
    check_ref(y, f + "_alpha.y");
    V g = grads(y, {a, b});
    check_ref(g[0], f + "_alpha.ga");
    check_ref(g[1], f + "_alpha.gb");
  }
  CHECK(gradcheck([](const V& v) { return sub(v[0], v[1], 1.5); }, {input({2, 3}), input({2, 1})}) == "");
  CHECK(gradcheck([](const V& v) { return add(v[0], v[1], -3.0); }, {input({3}), input({2, 3})}) == "");
  Tensor i = tensor({1, 2, 3}, {.dtype = DType::i64});
  CHECK(add(i, i, 2).to_vector<int64_t>() == std::vector<int64_t>{3, 6, 9});
  CHECK_THROWS_WITH(add(i, i, 0.5), Catch::Contains("add: expected a whole-number alpha for integer operands"));
}

TEST_CASE("argmax and argmin over all elements give the flat index, a 0-dim i64", "[semantics][options]") {
  Tensor x = f64("argall.x", {3, 4});
  Tensor i = argmax(x);
  CHECK(i.dim() == 0);
  CHECK(i.dtype() == DType::i64);
  check_ref(i, "argall.argmax");
  check_ref(argmin(x), "argall.argmin");
  check_ref(argmax(x.t()), "argall.argmax_t");  // a strided view: indices in its own row-major order
  check_ref(argmin(x.t()), "argall.argmin_t");
}

TEST_CASE("pooling: unbatched [C, H, W], ceil_mode windows and return_indices, against PyTorch",
          "[semantics][options][pool]") {
  Tensor x = f64("pool.x", {2, 5, 7}, true);
  struct Case {
    std::string name;
    bool max;
    Pool2dOptions opt;
  };
  std::vector<Case> cases = {
      {"max_k3s2_ceil", true, {.kernel = 3, .stride = 2, .ceil_mode = true}},
      {"max_k2s2_ceil", true, {.kernel = 2, .stride = 2, .ceil_mode = true}},
      {"max_k3s2p1_ceil", true, {.kernel = 3, .stride = 2, .padding = 1, .ceil_mode = true}},
      {"max_k2s1", true, {.kernel = 2, .stride = 1}},
      {"avg_k3s2_ceil", false, {.kernel = 3, .stride = 2, .ceil_mode = true}},
      {"avg_k2s2_ceil", false, {.kernel = 2, .stride = 2, .ceil_mode = true}},
      {"avg_k3s2p1_ceil", false, {.kernel = 3, .stride = 2, .padding = 1, .ceil_mode = true}},
      {"avg_k3s2p1_ceil_nopad", false,
       {.kernel = 3, .stride = 2, .padding = 1, .count_include_pad = false, .ceil_mode = true}},
  };
  for (const Case& c : cases) {
    INFO(c.name);
    const std::string key = "pool." + c.name;
    for (bool batched : {false, true}) {
      INFO("batched " << batched);
      Tensor in = batched ? x.unsqueeze(0) : x;
      Tensor y, idx;
      if (c.max) {
        PoolWithIndices r = max_pool2d_with_indices(in, c.opt);
        y = r.values;
        idx = r.indices;
        CHECK(idx.shape() == y.shape());
        check_ref(idx, key + ".indices");
        check_ref(max_pool2d(in, c.opt), key + ".y");
      } else {
        y = avg_pool2d(in, c.opt);
      }
      Dims want = shape_of(key + ".shape");
      CHECK(y.shape() == (batched ? Dims{1, want[0], want[1], want[2]} : want));
      check_ref(y, key + ".y");
      check_ref(grads(y, {x})[0], key + ".gx");
      // f32 (the 2x2 case takes the fast path when its windows fit) agrees
      Tensor yf = c.max ? max_pool2d(in.detach().to(DType::f32), c.opt) : avg_pool2d(in.detach().to(DType::f32), c.opt);
      check_ref(yf, key + ".y", 1e-6);
    }
    auto f = [&](const V& v) { return c.max ? max_pool2d(v[0], c.opt) : avg_pool2d(v[0], c.opt); };
    CHECK(gradcheck(f, {input({2, 5, 7})}) == "");
    CHECK(gradcheck(f, {input({2, 1, 5, 7})}) == "");
    if (!c.max) CHECK(gradgradcheck(f, {input({1, 2, 5, 7})}) == "");  // re-pools with ceil_mode
  }
  Tensor ya = adaptive_avg_pool2d(x, 3, 4);
  CHECK(ya.shape() == shape_of("pool.adaptive_3x4.shape"));
  check_ref(ya, "pool.adaptive_3x4.y");
  check_ref(grads(ya, {x})[0], "pool.adaptive_3x4.gx");
  CHECK_THROWS_WITH(max_pool2d(zeros({5, 7})), Catch::Contains("expected the input [N, C, H, W] or [C, H, W], got [5, 7]"));
}

TEST_CASE("nn pooling modules take ceil_mode, unbatched inputs and give indices", "[semantics][options][pool]") {
  Tensor x = f64("pool.x", {2, 5, 7});
  nn::MaxPool2d mp(3, {.stride = 2, .ceil_mode = true});
  check_ref(mp.forward(x), "pool.max_k3s2_ceil.y");
  PoolWithIndices r = mp.forward_with_indices(x.unsqueeze(0));
  check_ref(r.indices, "pool.max_k3s2_ceil.indices");
  CHECK(mp.extra_repr() == "kernel_size=(3, 3), stride=(2, 2), padding=(0, 0), ceil_mode=True");
  nn::AvgPool2d ap(3, {.stride = 2, .padding = 1, .count_include_pad = false, .ceil_mode = true});
  check_ref(ap.forward(x), "pool.avg_k3s2p1_ceil_nopad.y");
  nn::AdaptiveAvgPool2d aap(Size2(3, 4));
  check_ref(aap.forward(x), "pool.adaptive_3x4.y");
  CHECK_THROWS_WITH(mp.forward(zeros({7})), Catch::Contains("MaxPool2d: expected input [N, C, H, W] or [C, H, W]"));
}

TEST_CASE("cross_entropy and nll_loss with class weights, ignore_index and label smoothing", "[semantics][options][loss]") {
  Tensor w = f64("ce.weight", {4});
  struct Case {
    std::string name;
    CrossEntropyOptions opt;
  };
  std::vector<Case> cases = {
      {"w_mean", {.weight = w}},
      {"w_sum", {.reduction = Reduction::sum, .weight = w}},
      {"w_none", {.reduction = Reduction::none, .weight = w}},
      {"w_ls_mean", {.label_smoothing = 0.2, .weight = w}},
      {"w_ls_none", {.reduction = Reduction::none, .label_smoothing = 0.2, .weight = w}},
      {"w_ls_ign0_mean", {.label_smoothing = 0.3, .ignore_index = 0, .weight = w}},
  };
  Tensor x = f64("ce.x", {6, 4}, true);
  for (const Case& c : cases) {
    INFO(c.name);
    Tensor y = labels(c.opt.ignore_index == 0 ? "ce.labels0" : "ce.labels", {6});
    Tensor loss = cross_entropy(x, y, c.opt);
    check_ref(loss, "ce." + c.name + ".y");
    check_ref(grads(loss, {x})[0], "ce." + c.name + ".gx");
    CrossEntropyOptions nll = c.opt;
    nll.label_smoothing = 0;  // the table's nll_loss cases take no smoothing
    Tensor lp = log_softmax(x, 1).detach().requires_grad_();
    Tensor l2 = nll_loss(lp, y, nll);
    check_ref(l2, "nll." + c.name + ".y");
    check_ref(grads(l2, {lp})[0], "nll." + c.name + ".gx");
    CHECK(gradcheck([&](const V& v) { return cross_entropy(v[0], y, c.opt); }, {input({6, 4}, -2, 2)}) == "");
    CHECK(gradgradcheck([&](const V& v) { return cross_entropy(v[0], y, c.opt); }, {input({6, 4}, -2, 2)}) == "");
  }
  // f32 logits with the f64 weight (cast), and the module
  nn::CrossEntropyLoss criterion({.weight = w});
  check_ref(criterion(x.detach().to(DType::f32), labels("ce.labels", {6})), "ce.w_mean.y", 1e-6);
  // weights are constants, their shape is checked
  Tensor y = labels("ce.labels", {6});
  CHECK_THROWS_WITH(cross_entropy(x, y, {.weight = ones({4}).requires_grad_()}),
                    Catch::Contains("cross_entropy: the class weight gets no gradient"));
  CHECK_THROWS_WITH(nll_loss(x, y, {.weight = ones({3})}),
                    Catch::Contains("nll_loss: expected a class weight of shape [4] for log_probs [6, 4], got weight [3]"));
}

TEST_CASE("cross_entropy and nll_loss over [N, C, d1, d2] scores with [N, d1, d2] labels", "[semantics][options][loss]") {
  Tensor x = f64("spatial.x", {2, 3, 4, 2}, true);
  Tensor y = labels("spatial.labels", {2, 4, 2});
  Tensor w = f64("spatial.weight", {3});
  struct Case {
    std::string name;
    CrossEntropyOptions opt;
  };
  std::vector<Case> ce = {
      {"mean", {}},
      {"none", {.reduction = Reduction::none}},
      {"sum_ls", {.reduction = Reduction::sum, .label_smoothing = 0.1}},
      {"w_mean", {.weight = w}},
      {"w_ls_none", {.reduction = Reduction::none, .label_smoothing = 0.25, .weight = w}},
  };
  for (const Case& c : ce) {
    INFO(c.name);
    Tensor loss = cross_entropy(x, y, c.opt);
    if (c.opt.reduction == Reduction::none) CHECK(loss.shape() == Dims{2, 4, 2});
    check_ref(loss, "spatial.ce." + c.name + ".y");
    check_ref(grads(loss, {x})[0], "spatial.ce." + c.name + ".gx");
    CHECK(gradcheck([&](const V& v) { return cross_entropy(v[0], y, c.opt); }, {input({2, 3, 4, 2}, -2, 2)}) == "");
  }
  std::vector<Case> nll = {{"mean", {}}, {"w_none", {.reduction = Reduction::none, .weight = w}}};
  for (const Case& c : nll) {
    INFO(c.name);
    Tensor loss = nll_loss(x, y, c.opt);
    check_ref(loss, "spatial.nll." + c.name + ".y");
    check_ref(grads(loss, {x})[0], "spatial.nll." + c.name + ".gx");
  }
  CHECK_THROWS_WITH(cross_entropy(x, zeros({2, 4}, {.dtype = DType::i64})),
                    Catch::Contains("cross_entropy: expected labels of shape [2, 4, 2] for logits [2, 3, 4, 2], got labels [2, 4]"));
}

TEST_CASE("binary_cross_entropy_with_logits with weight and pos_weight", "[semantics][options][loss]") {
  Tensor x = f64("bce.x", {3, 4}, true), t = f64("bce.t", {3, 4}, true);
  Tensor w = f64("bce.weight", {3, 1}), pw = f64("bce.pos_weight", {4});
  struct Case {
    std::string name;
    BCEWithLogitsOptions opt;
  };
  std::vector<Case> cases = {
      {"w_mean", {.weight = w}},
      {"pw_none", {.reduction = Reduction::none, .pos_weight = pw}},
      {"w_pw_sum", {.reduction = Reduction::sum, .weight = w, .pos_weight = pw}},
      {"w_pw_mean", {.weight = w, .pos_weight = pw}},
  };
  for (const Case& c : cases) {
    INFO(c.name);
    Tensor loss = binary_cross_entropy_with_logits(x, t, c.opt);
    check_ref(loss, "bce." + c.name + ".y");
    V g = grads(loss, {x, t});
    check_ref(g[0], "bce." + c.name + ".gx");
    check_ref(g[1], "bce." + c.name + ".gt");
    auto f = [&](const V& v) { return binary_cross_entropy_with_logits(v[0], v[1], c.opt); };
    CHECK(gradcheck(f, {input({3, 4}, -3, 3), input({3, 4}, 0, 1)}) == "");
    CHECK(gradgradcheck(f, {input({3, 4}, -3, 3), input({3, 4}, 0, 1)}) == "");
  }
  nn::BCEWithLogitsLoss criterion({.weight = w, .pos_weight = pw});
  check_ref(criterion(x, t), "bce.w_pw_mean.y");
  // no overflow for large logits with pos_weight
  Tensor big = tensor({-800.0, 800.0}, {.dtype = DType::f64}).requires_grad_();
  Tensor half = full({2}, 0.5, {.dtype = DType::f64}).requires_grad_();
  Tensor l = binary_cross_entropy_with_logits(big, half, {.reduction = Reduction::sum, .pos_weight = full({2}, 3.0, {.dtype = DType::f64})});
  CHECK(std::isfinite(l.item<double>()));
  l.backward();
  for (double v : half.grad().to_vector<double>()) CHECK(std::isfinite(v));
  CHECK_THROWS_WITH(binary_cross_entropy_with_logits(x, t, {.pos_weight = ones({5}, {.dtype = DType::f64})}),
                    Catch::Contains("binary_cross_entropy_with_logits"));
  CHECK_THROWS_WITH(binary_cross_entropy_with_logits(x, t, {.weight = ones({4}, {.dtype = DType::f64}).requires_grad_()}),
                    Catch::Contains("the weight gets no gradient"));
}

TEST_CASE("narrow's errors say narrow; a negative start counts from the end", "[semantics][options]") {
  Tensor x = arange(0.0, 6.0);
  CHECK(x.narrow(0, -2, 2).to_vector<float>() == std::vector<float>{4, 5});
  CHECK(x.narrow(0, 1, 0).numel() == 0);
  CHECK_THROWS_WITH(x.narrow(0, 2, 5), Catch::Contains("narrow: start 2 + length 5 exceeds dim 0 of size 6") &&
                                           !Catch::Contains("slice"));
  CHECK_THROWS_WITH(x.narrow(0, -7, 1), Catch::Contains("narrow: start -7 is out of range"));
  CHECK_THROWS_WITH(x.narrow(0, 0, -1), Catch::Contains("narrow: expected length >= 0"));
  CHECK_THROWS_WITH(x.narrow(1, 0, 1), Catch::Contains("narrow"));
}
