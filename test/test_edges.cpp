// Same answer as PyTorch at the edges (issue 35, section 5), against PyTorch 1.13 on
// test/reference/edges35.txt (made by test/reference/edges35.py), f32 and f64: every
// piecewise op and loss at its break points (values and gradients), reductions and max
// pooling with ties, binary_cross_entropy at 0 and 1 and refusing inputs outside [0, 1],
// pooling with dilation, ceil_mode and divisor_override, and convolutions with padding
// "same" and "valid"; f64 gradchecks of the new pooling and padding paths.
#include <functional>

#include "gradcheck.h"
#include "torch_table.h"

using namespace reel;
using namespace reel::test;
namespace F = reel::nn::functional;

namespace {
const Table& table() {
  static const Table t = load_torch_table("edges35.txt");
  return t;
}

using Fn = std::function<Tensor(const std::vector<Tensor>&)>;

// For "<name>_f32" and "<name>_f64": f on the case's inputs as leaves, then backward with
// the case's g; y and every input's gradient against PyTorch's
void check(const std::string& name, const std::vector<std::string>& inputs, const Fn& f, double tol = 1e-5) {
  for (const char* tag : {"_f32", "_f64"}) {
    Case c = find_case(table(), name + tag);
    std::vector<Tensor> xs;
    for (const std::string& k : inputs) xs.push_back(c.in(k).clone().requires_grad_());
    Tensor y = f(xs);
    CHECK_MATCHES(y, c, "y", tol);
    y.backward(c.in("g"));
    for (size_t i = 0; i < xs.size(); ++i) CHECK_MATCHES(xs[i].grad(), c, "g" + inputs[i], tol);
  }
}
void check1(const std::string& name, const std::function<Tensor(const Tensor&)>& f, double tol = 1e-5) {
  check(name, {"x"}, [&](const std::vector<Tensor>& v) { return f(v[0]); }, tol);
}
void check2(const std::string& name, const std::string& a, const std::string& b,
            const std::function<Tensor(const Tensor&, const Tensor&)>& f, double tol = 1e-5) {
  check(name, {a, b}, [&](const std::vector<Tensor>& v) { return f(v[0], v[1]); }, tol);
}
}  // namespace

TEST_CASE("activations and clamps at their break points match PyTorch", "[edges][torch]") {
  check1("relu", [](const Tensor& x) { return relu(x); });
  check1("leaky_relu_0.01", [](const Tensor& x) { return leaky_relu(x, 0.01); });
  check1("leaky_relu_0.2", [](const Tensor& x) { return leaky_relu(x, 0.2); });
  check1("elu_1", [](const Tensor& x) { return elu(x, 1.0); });
  check1("elu_0.5", [](const Tensor& x) { return elu(x, 0.5); });
  check1("hardswish", [](const Tensor& x) { return hardswish(x); });  // 1.5 g at 3, -0.5 g at -3
  check1("hardtanh", [](const Tensor& x) { return hardtanh(x); });  // 0 at the bounds, g at NaN
  check1("hardtanh_-2_0.5", [](const Tensor& x) { return hardtanh(x, -2.0, 0.5); });
  check1("relu6", [](const Tensor& x) { return relu6(x); });
  check1("hardsigmoid", [](const Tensor& x) { return hardsigmoid(x); });
  check1("threshold", [](const Tensor& x) { return threshold(x, 0.5, -2.0); });
  check1("softplus_1_20", [](const Tensor& x) { return softplus(x, 1, 20); });
  check1("softplus_2_10", [](const Tensor& x) { return softplus(x, 2, 10); });
  check1("clamp_-1_2", [](const Tensor& x) { return clamp(x, -1.0, 2.0); });
  check1("clamp_eq", [](const Tensor& x) { return clamp(x, 0.5, 0.5); });
  check1("clamp_min", [](const Tensor& x) { return clamp_min(x, 0.25); });
  check1("clamp_max", [](const Tensor& x) { return clamp_max(x, -0.5); });
  check("clamp_tensor", {"x", "lo", "hi"}, [](const std::vector<Tensor>& v) { return clamp(v[0], v[1], v[2]); });
  check2("clamp_tensor_min", "x", "lo", [](const Tensor& x, const Tensor& lo) { return clamp(x, lo, Tensor()); });
  check2("clamp_tensor_max", "x", "hi", [](const Tensor& x, const Tensor& hi) { return clamp(x, Tensor(), hi); });
  check("clamp_tensor_bcast", {"x", "lo", "hi"}, [](const std::vector<Tensor>& v) { return clamp(v[0], v[1], v[2]); });
  check1("abs", [](const Tensor& x) { return abs(x); });
  check2("maximum", "a", "b", [](const Tensor& a, const Tensor& b) { return maximum(a, b); });
  check2("minimum", "a", "b", [](const Tensor& a, const Tensor& b) { return minimum(a, b); });
  check2("add_relu", "a", "b", [](const Tensor& a, const Tensor& b) { return add_relu(a, b); });
}

TEST_CASE("hardswish's rule at -3 and 3 holds wherever the element lands (vector bodies and tails)",
          "[edges][activation]") {
  // PyTorch 1.13's own CPU answer at 3 depends on the position (edges35.py); reel's must not
  for (DType dt : {DType::f32, DType::f64})
    for (int64_t n : {1, 7, 16, 1000, 1003}) {
      for (double at : {-3.0, 3.0}) {
        Tensor x = full({n}, at, {.dtype = dt}).requires_grad_();
        hardswish(x).sum().backward();
        INFO(dtype_name(dt) << " n = " << n << " x = " << at);
        CHECK(differ(x.grad(), full({n}, at / 3 + 0.5, {.dtype = dt}), 0) == "");
      }
    }
}

TEST_CASE("the nn activation modules take the ops' break-point rules", "[edges][torch]") {
  auto run = [](const std::string& name, nn::Module& m) {
    Case c = find_case(table(), name);
    Tensor x = c.in("x").clone().requires_grad_();
    Tensor y = m(x);
    CHECK_MATCHES(y, c, "y");
    y.backward(c.in("g"));
    CHECK_MATCHES(x.grad(), c, "gx");
  };
  nn::Hardswish hs;
  run("hardswish_f64", hs);
  nn::Hardtanh ht(-2.0, 0.5);
  run("hardtanh_-2_0.5_f64", ht);
  CHECK(ht.extra_repr() == "min_val=-2.0, max_val=0.5");
  nn::ReLU6 r6;
  run("relu6_f32", r6);
  nn::Hardsigmoid hsig;
  run("hardsigmoid_f64", hsig);
  nn::Threshold th(0.5, -2.0);
  run("threshold_f32", th);
  CHECK(th.extra_repr() == "threshold=0.5, value=-2.0");
}

TEST_CASE("losses at their break points match PyTorch", "[edges][torch]") {
  auto none = Reduction::none;
  check2("l1_loss", "x", "t", [&](const Tensor& x, const Tensor& t) { return F::l1_loss(x, t, none); });
  check2("l1_loss_mean", "x", "t", [&](const Tensor& x, const Tensor& t) { return F::l1_loss(x, t); });
  check2("smooth_l1_loss_1", "x", "t",
         [&](const Tensor& x, const Tensor& t) { return F::smooth_l1_loss(x, t, {.reduction = none, .beta = 1.0}); });
  check2("smooth_l1_loss_0.5", "x", "t",
         [&](const Tensor& x, const Tensor& t) { return F::smooth_l1_loss(x, t, {.reduction = none, .beta = 0.5}); });
  check2("smooth_l1_loss_0", "x", "t",
         [&](const Tensor& x, const Tensor& t) { return F::smooth_l1_loss(x, t, {.reduction = none, .beta = 0.0}); });
  check2("smooth_l1_loss_sum", "x", "t",
         [&](const Tensor& x, const Tensor& t) { return F::smooth_l1_loss(x, t, {.reduction = Reduction::sum}); });
  check2("huber_loss_1", "x", "t",
         [&](const Tensor& x, const Tensor& t) { return F::huber_loss(x, t, {.reduction = none, .delta = 1.0}); });
  check2("huber_loss_2", "x", "t",
         [&](const Tensor& x, const Tensor& t) { return F::huber_loss(x, t, {.reduction = none, .delta = 2.0}); });
  check2("kl_div", "x", "t", [&](const Tensor& x, const Tensor& t) { return F::kl_div(x, t, {.reduction = nn::KLDivReduction::none}); });
  check2("kl_div_log_target", "x", "t", [&](const Tensor& x, const Tensor& t) {
    return F::kl_div(x, t, {.reduction = nn::KLDivReduction::none, .log_target = true});
  });
  // at x = 0 and 1: logs clamped at -100, the input's gradient through max(x (1 - x),
  // float(1e-12)) (PyTorch's EPSILON, a float), the target's -logit(x) unclamped (+-inf)
  check2("bce", "x", "t",
         [&](const Tensor& x, const Tensor& t) { return F::binary_cross_entropy(x, t, {.reduction = none}); });
  check2("bce_mean", "x", "t", [&](const Tensor& x, const Tensor& t) { return F::binary_cross_entropy(x, t); });
}

TEST_CASE("binary_cross_entropy refuses inputs outside [0, 1] on the CPU, as PyTorch", "[edges][loss]") {
  for (double bad : {1.5, -1e-7, 1.0 + 1e-6, std::nan("")}) {
    for (DType dt : {DType::f32, DType::f64}) {
      Tensor x = from_vector<double>({0.5, bad, 0.25}, {3}, {.dtype = dt});
      Tensor t = full({3}, 1.0, {.dtype = dt});
      std::string e = error_message([&] { F::binary_cross_entropy(x, t); });
      INFO(e);
      CHECK(e.rfind("binary_cross_entropy: ", 0) == 0);
      CHECK(e.find("between 0 and 1") != std::string::npos);
      CHECK(error_message([&] { nn::BCELoss()(x, t); }).rfind("binary_cross_entropy: ", 0) == 0);
    }
  }
  // the ends themselves are inputs
  Tensor ends = from_vector<double>({0.0, 1.0}, {2});
  CHECK(error_message([&] { F::binary_cross_entropy(ends, ends); }) == "no error");
}

TEST_CASE("max/min reductions with ties match PyTorch: the returned index takes the gradient, amax/amin split it",
          "[edges][torch]") {
  check1("max_dim", [](const Tensor& x) { return max(x, 1).values; });
  check1("min_dim", [](const Tensor& x) { return min(x, 1).values; });
  check1("max_dim0", [](const Tensor& x) { return max(x, 0).values; });
  check1("amax", [](const Tensor& x) { return amax(x, {1}); });
  check1("amin", [](const Tensor& x) { return amin(x, {1}); });
  check1("amax_all", [](const Tensor& x) { return amax(x); });
  check1("amin_all", [](const Tensor& x) { return amin(x, {0, 1}); });
}

TEST_CASE("vector norms at 0 and the inf-norm's ties match PyTorch", "[edges][torch]") {
  check1("norm_2", [](const Tensor& x) { return norm(x, 2, {1}); });
  check1("norm_1", [](const Tensor& x) { return norm(x, 1, {1}); });
  check1("norm_inf", [](const Tensor& x) { return norm(x, INFINITY, {1}); });
  check1("norm_3", [](const Tensor& x) { return norm(x, 3, {1}); });
}

TEST_CASE("max pooling with ties matches PyTorch: the first maximum of each window takes the gradient",
          "[edges][torch][pool]") {
  check1("max_pool1d_ties", [](const Tensor& x) { return max_pool1d(x, {.kernel = 2, .stride = 1}); });
  check1("max_pool1d_ties_pad", [](const Tensor& x) { return max_pool1d(x, {.kernel = 3, .stride = 2, .padding = 1}); });
  check1("max_pool2d_ties", [](const Tensor& x) { return max_pool2d(x, {.kernel = 2, .stride = 1}); });
  check1("max_pool2d_ties_s2", [](const Tensor& x) { return max_pool2d(x, {.kernel = 2, .stride = 2}); });
}

TEST_CASE("linear at an empty inner dim or batch and on NaN/inf inputs matches PyTorch, gradients included",
          "[edges][torch][linear]") {
  auto lin = [](const std::vector<Tensor>& v) { return linear(v[0], v[1], v[2]); };
  check("linear_k0", {"x", "w", "b"}, lin);  // y is the bias; the bias takes every row's gradient
  check("linear_n0", {"x", "w", "b"}, lin);  // no rows: zero weight and bias gradients
  check("linear_nonfinite", {"x", "w", "b"}, lin);
  check("linear_relu_k0", {"x", "w", "b"}, [](const std::vector<Tensor>& v) { return linear_relu(v[0], v[1], v[2]); });
}

TEST_CASE("split and chunk (one node: an unused part's gradient is zeros), empty parts and NaN/inf inputs match "
          "PyTorch, gradients included", "[edges][torch][join]") {
  check1("split_sizes_empty_part", [](const Tensor& x) {
    std::vector<Tensor> p = split(x, std::vector<int64_t>{2, 0, 3}, 0);
    return cat({p[2] * 3.0, p[0].sin(), p[1] * 5.0}, 0);
  });
  check1("split_unused_part", [](const Tensor& x) {
    std::vector<Tensor> p = split(x, 2, 1);
    return p[1] * p[1];
  });
  check1("chunk_three", [](const Tensor& x) {
    std::vector<Tensor> c = chunk(x, 3, 1);
    return cat({c[0] * c[1], c[2]}, 1);
  });
  check1("split_empty_input", [](const Tensor& x) { return split(x, 2, 0)[0] * 2.0; });
}

TEST_CASE("layer_norm on NaN/inf rows, in blocks of rows with a short one, without affine and on an empty batch "
          "matches PyTorch, gradients included", "[edges][torch][norm]") {
  auto affine = [](const std::vector<Tensor>& v) { return layer_norm(v[0], {5}, v[1], v[2]); };
  check("layer_norm_nonfinite", {"x", "w", "b"}, affine);
  check("layer_norm_rows7", {"x", "w", "b"}, affine);
  check("layer_norm_empty", {"x", "w", "b"}, affine);
  check1("layer_norm_plain", [](const Tensor& x) { return layer_norm(x, {3, 5}); });
}

TEST_CASE("1-d pooling takes ceil_mode and dilation, 2-d pooling dilation and divisor_override, as PyTorch",
          "[edges][torch][pool]") {
  check1("max_pool1d_ceil",
         [](const Tensor& x) { return max_pool1d(x, {.kernel = 3, .stride = 2, .padding = 1, .ceil_mode = true}); });
  check1("max_pool1d_dil",
         [](const Tensor& x) { return max_pool1d(x, {.kernel = 3, .stride = 2, .padding = 1, .dilation = 2}); });
  check1("max_pool1d_dil_ceil", [](const Tensor& x) {
    return max_pool1d(x, {.kernel = 2, .stride = 3, .padding = 0, .ceil_mode = true, .dilation = 3});
  });
  check1("avg_pool1d_ceil",
         [](const Tensor& x) { return avg_pool1d(x, {.kernel = 3, .stride = 2, .padding = 1, .ceil_mode = true}); });
  check1("avg_pool1d_ceil_nopad", [](const Tensor& x) {
    return avg_pool1d(x, {.kernel = 4, .stride = 3, .padding = 1, .count_include_pad = false, .ceil_mode = true});
  });
  check1("max_pool2d_dil",
         [](const Tensor& x) { return max_pool2d(x, {.kernel = 3, .stride = 1, .padding = 1, .dilation = 2}); });
  check1("max_pool2d_dil_ceil", [](const Tensor& x) {
    return max_pool2d(x, {.kernel = {2, 3}, .stride = {2, 1}, .padding = {1, 0}, .ceil_mode = true,
                          .dilation = {2, 3}});
  });
  check1("avg_pool2d_div",
         [](const Tensor& x) { return avg_pool2d(x, {.kernel = 3, .stride = 2, .padding = 1, .divisor_override = 2}); });
  check1("avg_pool2d_div_ceil", [](const Tensor& x) {
    return avg_pool2d(x, {.kernel = {3, 2}, .stride = 2, .padding = {1, 0}, .ceil_mode = true,
                          .divisor_override = 5});
  });
  // the indices of dilated max pooling: flat h * W + w of each window's first maximum
  Case c = find_case(table(), "max_pool2d_dil_f64");
  Tensor x = c.in("x");
  PoolWithIndices r = max_pool2d_with_indices(x, {.kernel = 3, .stride = 1, .padding = 1, .dilation = 2});
  Tensor picked = gather(x.reshape({2, 2, -1}), 2, r.indices.reshape({2, 2, -1})).reshape(r.values.shape());
  CHECK(differ(picked, r.values, 0) == "");
}

TEST_CASE("the pooling modules take the new options", "[edges][torch][pool]") {
  Case c = find_case(table(), "max_pool1d_dil_ceil_f64");
  nn::MaxPool1d m(2, {.stride = 3, .ceil_mode = true, .dilation = 3});
  CHECK_MATCHES(m(c.in("x")), c, "y");
  CHECK(m.extra_repr() == "kernel_size=2, stride=3, padding=0, dilation=3, ceil_mode=True");
  Case a = find_case(table(), "avg_pool2d_div_f64");
  nn::AvgPool2d avg(3, {.stride = 2, .padding = 1, .divisor_override = 2});
  CHECK_MATCHES(avg(a.in("x")), a, "y");
  Case d = find_case(table(), "max_pool2d_dil_f64");
  nn::MaxPool2d mp(3, {.stride = 1, .padding = 1, .dilation = 2});
  CHECK_MATCHES(mp(d.in("x")), d, "y");
  CHECK_THROWS_AS(nn::AvgPool1d(3, {.dilation = 2}), Error);
  CHECK_THROWS_AS(nn::AvgPool2d(3, {.dilation = 2}), Error);
  CHECK_THROWS_AS(nn::MaxPool2d(3, {.divisor_override = 2}), Error);
}

TEST_CASE("convolutions take padding \"same\" and \"valid\", as PyTorch", "[edges][torch][conv]") {
  auto c1 = [](const char* mode, int64_t stride, int64_t dilation) {
    return [=](const std::vector<Tensor>& v) {
      Conv1dOptions o{.stride = stride, .padding = ConvPadding1(std::string(mode)), .dilation = dilation, .groups = 2};
      return conv1d(v[0], v[1], v.size() > 2 ? v[2] : Tensor(), o);
    };
  };
  check("conv1d_same_odd", {"x", "w", "b"}, c1("same", 1, 1), 1e-4);
  check("conv1d_same_even", {"x", "w", "b"}, c1("same", 1, 1), 1e-4);
  check("conv1d_same_dil", {"x", "w"}, c1("same", 1, 3), 1e-4);
  check("conv1d_valid", {"x", "w", "b"}, c1("valid", 2, 1), 1e-4);
  check("conv2d_same_odd", {"x", "w", "b"},
        [](const std::vector<Tensor>& v) { return conv2d(v[0], v[1], v[2], {.padding = "same"}); }, 1e-4);
  check("conv2d_same_even", {"x", "w", "b"},
        [](const std::vector<Tensor>& v) { return conv2d(v[0], v[1], v[2], {.padding = "same"}); }, 1e-4);
  check("conv2d_same_dil", {"x", "w"},
        [](const std::vector<Tensor>& v) { return conv2d(v[0], v[1], {}, {.padding = "same", .dilation = {2, 1}}); },
        1e-4);
  check("conv2d_valid", {"x", "w", "b"},
        [](const std::vector<Tensor>& v) { return conv2d(v[0], v[1], v[2], {.stride = {1, 2}, .padding = "valid"}); },
        1e-4);
  // conv2d_relu: relu of the same convolution
  Case c = find_case(table(), "conv2d_same_even_f64");
  CHECK(differ(conv2d_relu(c.in("x"), c.in("w"), c.in("b"), {.padding = "same"}), relu(c.out("y"))) == "");

  // conv2d_blocked: "same" where it pads evenly, refused where it would pad x unevenly
  Tensor xp = randn({1, 16, 5, 6}), wo = randn({4, 16, 3, 3}), we = randn({4, 16, 2, 3});
  CHECK(differ(conv2d_blocked(to_channel_blocks(xp, 8), wo, {}, {.padding = "same"}),
               conv2d(xp, wo, {}, {.padding = "same"}), 1e-4) == "");
  CHECK(error_message([&] { conv2d_blocked(to_channel_blocks(xp, 8), we, {}, {.padding = "same"}); })
            .rfind("conv2d_blocked: padding \"same\" for the weight [4, 16, 2, 3]", 0) == 0);

  // PyTorch's rules: "same" needs stride 1; no other strings
  Tensor x = zeros({1, 2, 5}), w = zeros({2, 2, 3});
  std::string e = error_message([&] { conv1d(x, w, {}, {.stride = 2, .padding = "same"}); });
  CHECK(e.rfind("conv1d: padding \"same\" needs stride 1", 0) == 0);
  e = error_message([&] { conv1d(x, w, {}, {.padding = ConvPadding1(std::string("full"))}); });
  CHECK(e.rfind("conv1d: expected padding \"same\", \"valid\" or an amount, got \"full\"", 0) == 0);
  e = error_message([&] { conv2d(zeros({1, 2, 5, 5}), zeros({2, 2, 3, 3}), {}, {.stride = 2, .padding = "same"}); });
  CHECK(e.rfind("conv2d: padding \"same\" needs stride 1", 0) == 0);
  e = error_message([&] { conv2d(zeros({1, 2, 5, 5}), zeros({2, 2, 3, 3}), {}, {.padding = "SAME"}); });
  CHECK(e.rfind("conv2d: expected padding \"same\", \"valid\" or amounts", 0) == 0);
}

TEST_CASE("the Conv modules take padding \"same\" and \"valid\"", "[edges][torch][conv]") {
  Case c = find_case(table(), "conv1d_same_even_f64");
  nn::Conv1d m(4, 6, 4, {.padding = "same", .groups = 2, .bias = true});
  m.weight = c.in("w");
  m.bias = c.in("b");
  CHECK_MATCHES(m(c.in("x")), c, "y", 1e-6);
  CHECK(m.extra_repr() == "4, 6, kernel_size=(4,), stride=(1,), padding=same, groups=2");
  Case c2 = find_case(table(), "conv2d_same_even_f64");
  nn::Conv2d m2(3, 4, {2, 4}, {.padding = "same"});
  m2.weight = c2.in("w");
  m2.bias = c2.in("b");
  CHECK_MATCHES(m2(c2.in("x")), c2, "y", 1e-6);
  Case v = find_case(table(), "conv2d_valid_f64");
  nn::Conv2d m3(3, 4, {2, 4}, {.stride = {1, 2}, .padding = "valid"});
  m3.weight = v.in("w");
  m3.bias = v.in("b");
  CHECK_MATCHES(m3(v.in("x")), v, "y", 1e-6);
  CHECK_THROWS_AS(nn::Conv2d(3, 4, 3, {.stride = 2, .padding = "same"}), Error);
  CHECK_THROWS_AS(nn::Conv1d(3, 4, 3, {.padding = ConvPadding1(std::string("full"))}), Error);
}

TEST_CASE("gradcheck: dilated and ceil-mode pooling, divisor_override, string padding, the hard activations (f64)",
          "[edges][gradcheck]") {
  auto ok = [](const Fn& f, std::vector<Tensor> in) { CHECK(gradcheck(f, std::move(in)) == ""); };
  // inputs in [-2, 2) and [-4, 4): every piece, the break points themselves almost surely not hit
  ok([](const std::vector<Tensor>& v) { return hardtanh(v[0]); }, {input({40}, -2, 2)});
  ok([](const std::vector<Tensor>& v) { return relu6(mul(v[0], 4.0)); }, {input({40}, -2, 2)});
  ok([](const std::vector<Tensor>& v) { return hardsigmoid(v[0]); }, {input({40}, -4, 4)});
  ok([](const std::vector<Tensor>& v) { return threshold(v[0], 0.25, 3.0); }, {input({40}, -2, 2)});
  ok([](const std::vector<Tensor>& v) { return clamp(v[0], v[1], v[2]); },
     {input({4, 10}, -2, 2), input({10}, -1.5, 0), input({4, 1}, 0, 1.5)});
  ok([](const std::vector<Tensor>& v) { return max_pool1d(v[0], {.kernel = 3, .stride = 2, .padding = 1, .dilation = 2}); },
     {input({2, 3, 11})});
  ok([](const std::vector<Tensor>& v) { return max_pool1d(v[0], {.kernel = 2, .stride = 3, .ceil_mode = true}); },
     {input({2, 3, 11})});
  ok([](const std::vector<Tensor>& v) { return avg_pool1d(v[0], {.kernel = 3, .stride = 2, .padding = 1, .ceil_mode = true}); },
     {input({2, 3, 10})});
  ok([](const std::vector<Tensor>& v) {
    return max_pool2d(v[0], {.kernel = {2, 3}, .stride = {2, 1}, .padding = {1, 0}, .ceil_mode = true, .dilation = {2, 3}});
  }, {input({2, 2, 7, 8})});
  ok([](const std::vector<Tensor>& v) {
    return avg_pool2d(v[0], {.kernel = {3, 2}, .stride = 2, .padding = {1, 0}, .ceil_mode = true, .divisor_override = 5});
  }, {input({2, 2, 7, 8})});
  ok([](const std::vector<Tensor>& v) { return conv1d(v[0], v[1], v[2], {.padding = "same", .dilation = 3}); },
     {input({2, 3, 9}), input({4, 3, 4}), input({4})});
  ok([](const std::vector<Tensor>& v) { return conv2d(v[0], v[1], v[2], {.padding = "same"}); },
     {input({1, 2, 5, 6}), input({3, 2, 2, 3}), input({3})});
  ok([](const std::vector<Tensor>& v) { return conv2d(v[0], v[1], {}, {.stride = 2, .padding = "valid"}); },
     {input({1, 2, 5, 6}), input({3, 2, 2, 3})});
}
