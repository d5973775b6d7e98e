// Custom autograd functions written the way libtorch writes them (issue 35 §2): the
// tutorial's classes unchanged, both gradient conventions (one per forward argument, or one
// per Tensor argument, trailing undefined ones left off), errors that name the class, and
// ctx.saved_data beyond doubles; gradients against PyTorch 1.13's (libtorch_surface.txt).
#include <catch2/catch.hpp>
#include <reel/reel.h>

#include <cmath>

#include "gradcheck.h"
#include "torch_table.h"

using namespace reel;
using reel::test::differ;
using reel::test::error_message;

namespace {
const reel::test::Table& table() { return reel::test::cached_torch_table("libtorch_surface.txt"); }
}  // namespace

// ---- custom functions, as the libtorch tutorial ("Custom autograd function") writes them.
// The only line a port adds is the namespace alias; the classes are the tutorial's text.
namespace torch = reel;
using namespace torch::autograd;

namespace {
class LinearFunction : public Function<LinearFunction> {
 public:
  // Note that forward can take an arbitrary number of arguments
  static torch::Tensor forward(AutogradContext* ctx, torch::Tensor input, torch::Tensor weight,
                               torch::Tensor bias = torch::Tensor()) {
    ctx->save_for_backward({input, weight, bias});
    auto output = input.mm(weight.t());
    if (bias.defined()) {
      output += bias.unsqueeze(0).expand_as(output);
    }
    return output;
  }

  static tensor_list backward(AutogradContext* ctx, tensor_list grad_outputs) {
    auto saved = ctx->get_saved_variables();
    auto input = saved[0];
    auto weight = saved[1];
    auto bias = saved[2];

    auto grad_output = grad_outputs[0];
    auto grad_input = grad_output.mm(weight);
    auto grad_weight = grad_output.t().mm(input);
    auto grad_bias = torch::Tensor();
    if (bias.defined()) {
      grad_bias = grad_output.sum(0);
    }

    return {grad_input, grad_weight, grad_bias};
  }
};

class MulConstant : public Function<MulConstant> {
 public:
  static torch::Tensor forward(AutogradContext* ctx, torch::Tensor tensor, double constant) {
    // ctx is a context object that can be used to stash information
    // for backward computation
    ctx->saved_data["constant"] = constant;
    return tensor * constant;
  }

  static tensor_list backward(AutogradContext* ctx, tensor_list grad_outputs) {
    // We return as many input gradients as there were arguments.
    // Gradients of non-tensor arguments to forward must be `torch::Tensor()`.
    return {grad_outputs[0] * ctx->saved_data["constant"].toDouble(), torch::Tensor()};
  }
};

// reel's own convention: one gradient per Tensor argument (the double is skipped)
struct ScaleBoth : reel::autograd::Function<ScaleBoth> {
  static Tensor forward(Context& ctx, const Tensor& a, double k, const Tensor& b) {
    ctx.saved_data["k"] = k;
    return (a + b) * k;
  }
  static std::vector<Tensor> backward(Context& ctx, const std::vector<Tensor>& g) {
    double k = ctx.saved_data.at("k").toDouble();
    return {g[0] * k, g[0] * k};
  }
};
// libtorch's, with the trailing argument (not a tensor) left off
struct TrailingOff : reel::autograd::Function<TrailingOff> {
  static Tensor forward(Context&, const Tensor& a, const Tensor& b, int64_t) { return a * b; }
  static std::vector<Tensor> backward(Context&, const std::vector<Tensor>& g) { return {g[0] * 2.0}; }
};
// per argument, with a gradient where the argument is a number
struct GradForNumber : reel::autograd::Function<GradForNumber> {
  static Tensor forward(Context&, const Tensor& a, double, const Tensor& b) { return a * b; }
  static std::vector<Tensor> backward(Context&, const std::vector<Tensor>& g) { return {g[0], g[0], g[0]}; }
};
struct TooMany : reel::autograd::Function<TooMany> {
  static Tensor forward(Context&, const Tensor& a, double) { return a * 1.0; }
  static std::vector<Tensor> backward(Context&, const std::vector<Tensor>& g) { return {g[0], Tensor(), g[0]}; }
};
// ctx keeps more than doubles: integers, booleans, strings, shapes, lists
struct Keeps : reel::autograd::Function<Keeps> {
  static Tensor forward(Context& ctx, const Tensor& x, int n, bool flag, std::string tag) {
    ctx.saved_data["n"] = n;
    ctx.saved_data["flag"] = flag;
    ctx.saved_data["tag"] = tag;
    ctx.saved_data["shape"] = x.shape();
    ctx.saved_data["weights"] = std::vector<double>{0.5, 2.0};
    ctx.saved_data["note"] = "literal";
    return x * double(n);
  }
  static std::vector<Tensor> backward(Context& ctx, const std::vector<Tensor>& g) {
    const auto& d = ctx.saved_data;
    REQUIRE(d.at("n").isInt());
    REQUIRE(d.at("flag").toBool());
    REQUIRE(d.at("tag").toStringRef() == "cube");
    REQUIRE(d.at("shape").toDims() == g[0].shape());
    REQUIRE(d.at("shape").toIntVector() == g[0].shape().vec());
    REQUIRE(d.at("weights").toDoubleVector() == std::vector<double>{0.5, 2.0});
    REQUIRE(d.at("note").toStringRef() == "literal");
    return {g[0] * double(d.at("n").toInt())};
  }
};
}  // namespace

TEST_CASE("custom functions written libtorch's way run unchanged, against PyTorch's gradients", "[libtorch][function]") {
  auto c = reel::test::find_case(table(), "custom");
  // (clones: the table's tensors are shared by every test that reads them)
  Tensor x = c.in("x").clone().requires_grad_(), w = c.in("w").clone().requires_grad_();
  Tensor b = c.in("b").clone().requires_grad_();
  Tensor g = c.in("g");
  auto y = MulConstant::apply(LinearFunction::apply(x, w, b), 5.5);
  (y * g).sum().backward();
  CHECK_MATCHES(y, c, "y", 1e-12);
  CHECK_MATCHES(x.grad(), c, "gx", 1e-12);
  CHECK_MATCHES(w.grad(), c, "gw", 1e-12);
  CHECK_MATCHES(b.grad(), c, "gb", 1e-12);
  CHECK(std::string(y.grad_fn()->op) == "MulConstant");  // the class names the op without a declared name
  CHECK(y.grad_fn()->name() == "MulConstantBackward");
  // bias left out (forward's default): backward still returns three, the last undefined
  x.set_grad({});
  w.set_grad({});
  auto y2 = LinearFunction::apply(x, w);
  (y2 * g).sum().backward();
  CHECK_MATCHES(y2, c, "y_nobias", 1e-12);
  CHECK_MATCHES(x.grad(), c, "gx_nobias", 1e-12);
  CHECK_MATCHES(w.grad(), c, "gw_nobias", 1e-12);
  // finite differences agree with the tutorial's backward
  CHECK(reel::test::gradcheck(
            [](const std::vector<Tensor>& in) { return MulConstant::apply(LinearFunction::apply(in[0], in[1], in[2]), 1.5); },
            {reel::test::input({4, 3}), reel::test::input({2, 3}), reel::test::input({2})}) == "");
}

TEST_CASE("custom functions: both gradient conventions, and errors that name the class", "[libtorch][function]") {
  Tensor a = tensor({1.0, 2.0}).requires_grad_(), b = tensor({3.0, 4.0}).requires_grad_();
  ScaleBoth::apply(a, 0.5, b).sum().backward();  // one per Tensor argument
  CHECK(a.grad().to_vector<float>() == std::vector<float>{0.5, 0.5});
  CHECK(b.grad().to_vector<float>() == std::vector<float>{0.5, 0.5});

  Tensor p = tensor({1.0, 2.0}).requires_grad_(), q = tensor({5.0, 6.0});  // q needs no gradient
  TrailingOff::apply(p, q, int64_t(3)).sum().backward();  // {gp}: q's and the int's left off
  CHECK(p.grad().to_vector<float>() == std::vector<float>{2, 2});
  Tensor q2 = tensor({5.0, 6.0}).requires_grad_();
  CHECK_THAT(error_message([&] { TrailingOff::apply(p, q2, int64_t(3)).sum().backward(); }),
             Catch::Contains("TrailingOff: backward returned 1 gradients; expected 3 (one per argument of forward, an "
                             "undefined Tensor for each of the 1 non-tensor ones) or 2 (one per Tensor argument)"));
  CHECK_THAT(error_message([&] { GradForNumber::apply(p, 2.0, q2).sum().backward(); }),
             Catch::Contains("GradForNumber: backward returned a defined gradient at position 1, but argument 1 of "
                             "forward is not a Tensor"));
  CHECK_THAT(error_message([&] { TooMany::apply(p, 2.0).sum().backward(); }),
             Catch::Contains("TooMany: backward returned 3 gradients; expected 2"));

  Tensor k = tensor({{1.0, 2.0}, {3.0, 4.0}}).requires_grad_();
  Keeps::apply(k, 3, true, std::string("cube")).sum().backward();
  CHECK(k.grad().to_vector<float>() == std::vector<float>{3, 3, 3, 3});
  autograd::IValue iv = int64_t(4);
  CHECK_THAT(error_message([&] { (void)iv.toDouble(); }),
             Catch::Contains("IValue::toDouble: expected a saved double, got a int"));
  CHECK(autograd::IValue().isNone());
}

