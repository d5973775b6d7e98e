// softmax and log_softmax: values, stability with large logits, every dim, strided
// inputs, f32 (oneDNN on the last dim) against f64 (loops), gradients, errors.
#include "gradcheck.h"

using namespace reel;
using reel::test::input;
using V = std::vector<Tensor>;

namespace {
void check_close(const Tensor& got, const Tensor& want, double tol) {
  REQUIRE(got.shape() == want.shape());
  std::vector<double> g = got.to_vector<double>(), w = want.to_vector<double>();
  for (size_t i = 0; i < g.size(); ++i) CHECK(g[i] == Approx(w[i]).margin(tol));
}

Tensor reference_softmax(const Tensor& x, int64_t dim) {
  Tensor e = exp(x - amax(x, {dim}, true));
  return e / sum(e, {dim}, true);
}
}  // namespace

TEST_CASE("softmax and log_softmax give the expected values", "[softmax]") {
  Tensor x = tensor({1, 2, 3});
  std::vector<float> s = softmax(x, 0).to_vector<float>();
  CHECK(s[0] == Approx(0.0900306));
  CHECK(s[1] == Approx(0.2447285));
  CHECK(s[2] == Approx(0.6652410));
  std::vector<double> l = log_softmax(x.to(DType::f64), -1).to_vector<double>();
  CHECK(l[0] == Approx(-2.4076059644));
  CHECK(l[2] == Approx(-0.4076059644));
  // large logits neither overflow nor underflow into NaN
  std::vector<float> big = softmax(tensor({1000, 1001}), 0).to_vector<float>();
  CHECK(big[0] == Approx(0.2689414));
  CHECK(big[1] == Approx(0.7310586));
  std::vector<float> lbig = log_softmax(tensor({-1000, 0}), 0).to_vector<float>();
  CHECK(lbig[0] == Approx(-1000).margin(1e-4));
  CHECK(lbig[1] == Approx(0).margin(1e-5));  // oneDNN's f32 log is a few ulps off at 1
  CHECK(log_softmax(tensor({{-1000, 0}}, {.dtype = DType::f64}).t(), 0).to_vector<double>() ==
        std::vector<double>{-1000, 0});
  CHECK(softmax(scalar_tensor(3.0), 0).item<float>() == 1);
  CHECK(softmax(scalar_tensor(3.0), 0).dim() == 0);
}

TEST_CASE("softmax along every dim matches exp(x - max) / sum", "[softmax]") {
  manual_seed(40);
  Tensor x = randn({3, 4, 5}, {.dtype = DType::f64}) * 4.0;
  for (int64_t d = -3; d < 3; ++d) {
    Tensor want = reference_softmax(x, d);
    check_close(softmax(x, d), want, 1e-12);
    check_close(log_softmax(x, d), log(want), 1e-12);
    Tensor xf = x.to(DType::f32);  // oneDNN on the last dim, loops on the others
    check_close(softmax(xf, d), want, 1e-6);
    check_close(log_softmax(xf, d), log(want), 1e-5);
    check_close(sum(softmax(xf, d), {d}), ones_like(sum(x, {d})), 1e-6);
  }
  // strided inputs
  Tensor t = x.transpose(0, 2);
  check_close(softmax(t, -1), reference_softmax(t, -1), 1e-12);
  check_close(log_softmax(t.to(DType::f32), 1), log(reference_softmax(t, 1)), 1e-5);
  Tensor wide = randn({2, 300, 70}) * 3.0;  // several column blocks per row
  check_close(softmax(wide, 1), reference_softmax(wide.to(DType::f64), 1), 1e-6);
}

TEST_CASE("softmax gradients in f32 agree with f64", "[softmax][grad]") {
  manual_seed(41);
  Tensor x = randn({6, 33}), r = randn({6, 33});
  for (bool log : {false, true}) {
    for (int64_t d : {0, 1}) {
      Tensor grads[2];
      for (int k = 0; k < 2; ++k) {
        DType dt = k ? DType::f64 : DType::f32;
        Tensor xv = x.to(dt).detach().requires_grad_();
        Tensor y = log ? log_softmax(xv, d) : softmax(xv, d);
        (y * r.to(dt)).sum().backward();
        grads[k] = xv.grad();
      }
      check_close(grads[0], grads[1], 1e-5);
    }
  }
}

TEST_CASE("softmax gradients match finite differences", "[softmax][grad]") {
  CHECK_GRADIENTS([](const V& v) { return softmax(v[0], -1); }, input({3, 5}, -3, 3));
  CHECK_GRADIENTS([](const V& v) { return softmax(v[0], 0); }, input({3, 5}, -3, 3));
  CHECK_GRADIENTS([](const V& v) { return softmax(v[0], 1); }, input({2, 3, 4}, -3, 3));
  CHECK_GRADIENTS([](const V& v) { return log_softmax(v[0], -1); }, input({3, 5}, -3, 3));
  CHECK_GRADIENTS([](const V& v) { return log_softmax(v[0], 1); }, input({2, 3, 4}, -3, 3));
  CHECK_GRADIENTS([](const V& v) { return softmax(v[0].t(), 1); }, input({4, 3}, -3, 3));
  CHECK_GRADIENTS([](const V& v) { return log_softmax(v[0].slice(1, 0, 6, 2), 0); }, input({3, 6}, -3, 3));
}

TEST_CASE("softmax and log_softmax are twice differentiable (create_graph)", "[softmax][grad][grad2]") {
  // y0 = softmax([a, b])[0] = sigmoid(a - b) = s: d2 y0 / da2 = s (1 - s) (1 - 2 s) = -d2 y0 / da db
  Tensor x = tensor({0.5, -0.5}, {.dtype = DType::f64}).requires_grad_();
  Tensor y0 = softmax(x, 0).slice(0, 0, 1).sum();
  Tensor g = autograd::grad({y0}, {x}, {}, {.create_graph = true})[0];
  Tensor gg = autograd::grad({g.slice(0, 0, 1).sum()}, {x})[0];
  double s = 1 / (1 + std::exp(-1.0)), want = s * (1 - s) * (1 - 2 * s);
  CHECK(g.to_vector<double>()[0] == Approx(s * (1 - s)));
  CHECK(gg.to_vector<double>()[0] == Approx(want));
  CHECK(gg.to_vector<double>()[1] == Approx(-want));
  // log_softmax: d/dx sum(log_softmax(x)) = 1 - n softmax(x), so the second derivative is -n d softmax
  Tensor z = tensor({0.3, -1.2, 2.0}, {.dtype = DType::f64}).requires_grad_();
  Tensor gl = autograd::grad({log_softmax(z, 0).sum()}, {z}, {}, {.create_graph = true})[0];
  Tensor ggl = autograd::grad({gl.slice(0, 0, 1).sum()}, {z})[0];
  std::vector<double> p = softmax(z.detach(), 0).to_vector<double>();
  CHECK(ggl.to_vector<double>()[0] == Approx(-3 * p[0] * (1 - p[0])));
  CHECK(ggl.to_vector<double>()[1] == Approx(3 * p[0] * p[1]));

  CHECK_SECOND_GRADIENTS([](const V& v) { return softmax(v[0], -1); }, input({3, 5}, -3, 3));
  CHECK_SECOND_GRADIENTS([](const V& v) { return softmax(v[0], 0); }, input({2, 3, 4}, -3, 3));
  CHECK_SECOND_GRADIENTS([](const V& v) { return log_softmax(v[0], -1); }, input({3, 5}, -3, 3));
  CHECK_SECOND_GRADIENTS([](const V& v) { return log_softmax(v[0].t(), 1); }, input({4, 3}, -3, 3));
  // a nonlinear consumer makes the incoming gradient depend on x as well
  CHECK_SECOND_GRADIENTS([](const V& v) { return square(softmax(v[0], 1)); }, input({2, 4}, -3, 3));
  CHECK_SECOND_GRADIENTS([](const V& v) { return square(log_softmax(v[0], 0)); }, input({3, 2}, -3, 3));
}

TEST_CASE("softmax errors name the op and what came", "[softmax][errors]") {
  auto message = [](auto f) { return reel::test::error_message(f); };
  std::string m = message([] { softmax(zeros({2, 3}), 2); });
  CHECK_THAT(m, Catch::Contains("softmax") && Catch::Contains("2") && Catch::Contains("test_softmax.cpp"));
  m = message([] { log_softmax(zeros({2, 3}), -3); });
  CHECK_THAT(m, Catch::Contains("log_softmax") && Catch::Contains("-3"));
  m = message([] { softmax(zeros({2, 3}, {.dtype = DType::i64}), 0); });
  CHECK_THAT(m, Catch::Contains("softmax") && Catch::Contains("floating") && Catch::Contains("[2, 3]"));
}
