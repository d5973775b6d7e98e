// nn::functional: the fused wrappers give relu(op + b) and its gradients, and report
// the caller's line on errors.
#include "gradcheck.h"

using namespace reel;
namespace F = reel::nn::functional;

namespace {
void same(const Tensor& a, const Tensor& b) {
  std::vector<double> x = a.to_vector<double>(), y = b.to_vector<double>();
  REQUIRE(x.size() == y.size());
  for (size_t i = 0; i < x.size(); ++i) CHECK(x[i] == Approx(y[i]).margin(1e-12));
}
}  // namespace

TEST_CASE("conv2d_bias_relu is relu(conv2d + b), forward and backward", "[nn][functional][conv]") {
  manual_seed(3);
  Conv2dOptions opt{.stride = {1, 1}, .padding = {1, 1}};
  Tensor x = randn({2, 3, 6, 5}, {.dtype = DType::f64}).requires_grad_();
  Tensor w = randn({4, 3, 3, 3}, {.dtype = DType::f64}).requires_grad_();
  Tensor b = randn({4}, {.dtype = DType::f64}).requires_grad_();
  Tensor y = F::conv2d_bias_relu(x, w, b, opt);
  Tensor r = relu(conv2d(x, w, b, opt));
  same(y, r);
  Tensor g = randn(y.shape(), {.dtype = DType::f64});
  (y * g).sum().backward();
  Tensor gx = x.grad(), gw = w.grad(), gb = b.grad();
  x.set_grad(Tensor());
  w.set_grad(Tensor());
  b.set_grad(Tensor());
  (r * g).sum().backward();
  same(gx, x.grad());
  same(gw, w.grad());
  same(gb, b.grad());
}

TEST_CASE("linear_bias_relu is relu(linear + b), forward and backward", "[nn][functional][linalg]") {
  manual_seed(4);
  Tensor x = randn({5, 7}, {.dtype = DType::f64}).requires_grad_();
  Tensor w = randn({3, 7}, {.dtype = DType::f64}).requires_grad_();
  Tensor b = randn({3}, {.dtype = DType::f64}).requires_grad_();
  Tensor y = F::linear_bias_relu(x, w, b);
  Tensor r = relu(linear(x, w, b));
  same(y, r);
  y.sum().backward();
  Tensor gx = x.grad(), gb = b.grad();
  x.set_grad(Tensor());
  b.set_grad(Tensor());
  r.sum().backward();
  same(gx, x.grad());
  same(gb, b.grad());
}

TEST_CASE("the functional wrappers report the caller's line", "[nn][functional][errors]") {
  Tensor x = randn({2, 3, 5, 5}), w = randn({4, 2, 3, 3}), b = randn({4});
  int line = __LINE__ + 2;
  try {
    F::conv2d_bias_relu(x, w, b);
    FAIL("no Error");
  } catch (const Error& e) {
    CHECK_THAT(e.what(), Catch::Contains("conv2d_relu") && Catch::Contains("test_functional.cpp:" + std::to_string(line)));
  }
  CHECK_THROWS_AS(F::linear_bias_relu(randn({2, 3}), randn({4, 5}), randn({4})), Error);
}
