// Elementwise ops: values, broadcasting, non-contiguous inputs, gradients, errors.
#include "gradcheck.h"

using namespace reel;
using reel::test::input;

TEST_CASE("binary ops broadcast as NumPy does", "[elementwise]") {
  Tensor a = tensor({{1, 2, 3}, {4, 5, 6}});
  Tensor b = tensor({10, 20, 30});
  CHECK((a + b).to_vector<float>() == std::vector<float>{11, 22, 33, 14, 25, 36});
  CHECK((a * b).shape() == Dims{2, 3});
  Tensor col = tensor({1, 2}).reshape({2, 1});
  CHECK((a - col).to_vector<float>() == std::vector<float>{0, 1, 2, 2, 3, 4});
  CHECK((b / 10.0).to_vector<float>() == std::vector<float>{1, 2, 3});
  CHECK((1.0 - b).to_vector<float>() == std::vector<float>{-9, -19, -29});
}

TEST_CASE("binary ops read non-contiguous inputs", "[elementwise]") {
  Tensor a = arange(0.0, 6.0).reshape({2, 3});
  Tensor t = a.t();  // [3, 2], strides [1, 3]
  Tensor s = t + ones({3, 2});
  CHECK(s.to_vector<float>() == std::vector<float>{1, 4, 2, 5, 3, 6});
  CHECK(exp(t).to_vector<float>()[1] == Approx(std::exp(3.0f)));
}

TEST_CASE("unary ops give the expected values", "[elementwise]") {
  Tensor x = tensor({-2, -0.5, 0, 0.5, 2});
  CHECK(relu(x).to_vector<float>() == std::vector<float>{0, 0, 0, 0.5, 2});
  CHECK(abs(x).to_vector<float>() == std::vector<float>{2, 0.5, 0, 0.5, 2});
  CHECK(clamp(x, -1, 1).to_vector<float>() == std::vector<float>{-1, -0.5, 0, 0.5, 1});
  CHECK(sigmoid(x).to_vector<float>()[2] == Approx(0.5));
  CHECK(tanh(x).to_vector<float>()[4] == Approx(std::tanh(2.0)));
  CHECK(gelu(x, "tanh").to_vector<float>()[4] == Approx(1.9545977).epsilon(1e-5));
  CHECK(gelu(x).to_vector<float>()[4] == Approx(1.9544997).epsilon(1e-6));  // x Phi(x)
  CHECK(pow(x, 2.0).to_vector<float>() == std::vector<float>{4, 0.25, 0, 0.25, 4});
  CHECK((x > 0.0).to_vector<bool>() == std::vector<bool>{false, false, false, true, true});
}

TEST_CASE("a broadcast first operand (stride 0) gives the same values as a contiguous one", "[elementwise]") {
  // relu's rule reads the incoming gradient first: from sum() or mean() it is expanded
  Tensor x = tensor({{-1.0, 2.0, 0.0, 3.0}, {4.0, -5.0, 6.0, -0.5}, {0.25, 1.0, -2.0, 7.0}}).requires_grad_();
  Tensor y = relu(x);
  Tensor g = autograd::grad({y}, {x}, {full({}, 2.0).expand({3, 4})}, {.retain_graph = true})[0];
  CHECK(g.to_vector<float>() == std::vector<float>{0, 2, 0, 2, 2, 0, 2, 0, 2, 2, 0, 2});
  Tensor rows = autograd::grad({y}, {x}, {tensor({1.0, 2.0, 3.0}).reshape({3, 1}).expand({3, 4})})[0];
  CHECK(rows.to_vector<float>() == std::vector<float>{0, 1, 0, 1, 2, 0, 2, 0, 3, 3, 0, 3});
  CHECK(x.grad().defined() == false);
  // large enough for the parallel split, f64 and f32, against the contiguous gradient
  for (DType dt : {DType::f32, DType::f64}) {
    Tensor big = randn({300, 200}, {.dtype = dt}).requires_grad_();
    Tensor gb = autograd::grad({relu(big).sum()}, {big})[0];
    Tensor want = autograd::grad({relu(big)}, {big}, {ones({300, 200}, {.dtype = dt})})[0];
    CHECK(allclose(gb, want, 0, 0));
    CHECK(gb.sum().item<double>() == Approx(double(gt(big, 0.0).to(DType::f64).sum().item<double>())));
  }
  // ordinary binary ops with the first operand broadcast
  Tensor a = tensor({10.0, 20.0}).reshape({2, 1}), b = tensor({{1.0, 2.0, 3.0}, {4.0, 5.0, 6.0}});
  CHECK(sub(a, b).to_vector<float>() == std::vector<float>{9, 8, 7, 16, 15, 14});
  CHECK(div(full({1}, 12.0), b).to_vector<float>() == std::vector<float>{12, 6, 4, 3, 2.4f, 2});
}

TEST_CASE("elementwise gradients match finite differences", "[elementwise][grad]") {
  using V = std::vector<Tensor>;
  CHECK_GRADIENTS([](const V& v) { return neg(v[0]); }, input({3, 4}));
  CHECK_GRADIENTS([](const V& v) { return abs(v[0]); }, input({3, 4}, 0.1, 1));
  CHECK_GRADIENTS([](const V& v) { return exp(v[0]); }, input({3, 4}));
  CHECK_GRADIENTS([](const V& v) { return log(v[0]); }, input({3, 4}, 0.5, 2));
  CHECK_GRADIENTS([](const V& v) { return sqrt(v[0]); }, input({3, 4}, 0.5, 2));
  CHECK_GRADIENTS([](const V& v) { return rsqrt(v[0]); }, input({3, 4}, 0.5, 2));
  CHECK_GRADIENTS([](const V& v) { return square(v[0]); }, input({3, 4}));
  CHECK_GRADIENTS([](const V& v) { return reciprocal(v[0]); }, input({3, 4}, 0.5, 2));
  CHECK_GRADIENTS([](const V& v) { return sin(v[0]); }, input({3, 4}));
  CHECK_GRADIENTS([](const V& v) { return cos(v[0]); }, input({3, 4}));
  CHECK_GRADIENTS([](const V& v) { return relu(v[0]); }, input({3, 4}, 0.1, 1));
  CHECK_GRADIENTS([](const V& v) { return relu(v[0]); }, input({3, 4}, -1, -0.1));
  CHECK_GRADIENTS([](const V& v) { return leaky_relu(v[0], 0.1); }, input({3, 4}, -1, -0.1));
  CHECK_GRADIENTS([](const V& v) { return gelu(v[0]); }, input({3, 4}, -3, 3));
  CHECK_GRADIENTS([](const V& v) { return sigmoid(v[0]); }, input({3, 4}, -3, 3));
  CHECK_GRADIENTS([](const V& v) { return tanh(v[0]); }, input({3, 4}, -3, 3));
  CHECK_GRADIENTS([](const V& v) { return pow(v[0], 3.0); }, input({3, 4}));
  CHECK_GRADIENTS([](const V& v) { return clamp(v[0], -0.5, 0.5); }, input({3, 4}));
  CHECK_GRADIENTS([](const V& v) { return v[0] + v[1]; }, input({3, 4}), input({4}));
  CHECK_GRADIENTS([](const V& v) { return v[0] - v[1]; }, input({3, 1}), input({1, 4}));
  CHECK_GRADIENTS([](const V& v) { return v[0] * v[1]; }, input({2, 3, 4}), input({3, 1}));
  CHECK_GRADIENTS([](const V& v) { return v[0] / v[1]; }, input({3, 4}), input({3, 4}, 0.5, 2));
  CHECK_GRADIENTS([](const V& v) { return pow(v[0], v[1]); }, input({3, 4}, 0.5, 2), input({4}));
  CHECK_GRADIENTS([](const V& v) { return maximum(v[0], v[1]); }, input({3, 4}), input({3, 4}));
  CHECK_GRADIENTS([](const V& v) { return minimum(v[0], v[1]); }, input({3, 4}), input({4}));
  CHECK_GRADIENTS([](const V& v) { return v[0] * 3.0 + 1.0; }, input({3, 4}));
  CHECK_GRADIENTS([](const V& v) { return 2.0 / v[0] - 1.0; }, input({3, 4}, 0.5, 2));
  CHECK_GRADIENTS([](const V& v) { return 2.0 - v[0]; }, input({3, 4}));
  CHECK_GRADIENTS([](const V& v) { return where(v[0] > 0.0, v[0], v[1]); }, input({3, 4}), input({4}));
}

TEST_CASE("elementwise gradients through non-contiguous views", "[elementwise][grad]") {
  using V = std::vector<Tensor>;
  CHECK_GRADIENTS([](const V& v) { return v[0].t() * v[1]; }, input({4, 3}), input({3, 4}));
  CHECK_GRADIENTS([](const V& v) { return exp(v[0].slice(1, 0, 4, 2)); }, input({3, 4}));
  CHECK_GRADIENTS([](const V& v) { return v[0].expand({2, 3, 4}) * v[1]; }, input({3, 1}), input({2, 3, 4}));
}

TEST_CASE("activations with kernel backward rules are twice differentiable", "[elementwise][grad][grad2]") {
  using V = std::vector<Tensor>;
  // relu'' = 0, but d relu / dx = g (x > 0) still depends on g
  CHECK_SECOND_GRADIENTS([](const V& v) { return square(relu(v[0])); }, input({3, 4}, 0.1, 1));
  CHECK_SECOND_GRADIENTS([](const V& v) { return square(relu(v[0])); }, input({2, 3}, -1, -0.1));
  CHECK_SECOND_GRADIENTS([](const V& v) { return sigmoid(v[0]); }, input({3, 4}, -3, 3));
  CHECK_SECOND_GRADIENTS([](const V& v) { return square(tanh(v[0])); }, input({3, 4}, -2, 2));
  CHECK_SECOND_GRADIENTS([](const V& v) { return gelu(v[0]); }, input({3, 4}, -3, 3));
  CHECK_SECOND_GRADIENTS([](const V& v) { return square(linear_relu(v[0], v[1], v[2])); }, input({3, 4}),
                         input({2, 4}), input({2}));
  // sigmoid'' = s (1 - s) (1 - 2 s)
  Tensor x = tensor({0.7}, {.dtype = DType::f64}).requires_grad_();
  Tensor g = autograd::grad({sigmoid(x).sum()}, {x}, {}, {.create_graph = true})[0];
  double s = 1 / (1 + std::exp(-0.7));
  CHECK(autograd::grad({g.sum()}, {x})[0].item<double>() == Approx(s * (1 - s) * (1 - 2 * s)));
}

TEST_CASE("elementwise errors name the op and the shapes", "[elementwise][errors]") {
  Tensor a = zeros({2, 3}), b = zeros({4});
  REQUIRE_THROWS_AS(a + b, Error);
  try {
    (void)(a + b);
  } catch (const Error& e) {
    std::string m = e.what();
    CHECK(m.find("add") != std::string::npos);
    CHECK(m.find("[2, 3]") != std::string::npos);
    CHECK(m.find("[4]") != std::string::npos);
    CHECK(m.find("test_elementwise.cpp") != std::string::npos);
  }
  CHECK_THROWS_AS(where(zeros({2}), a, a), Error);
}

TEST_CASE("division by a number is a true division, as PyTorch's", "[elementwise][semantics]") {
  // x * (1 / 255) differs from x / 255 in the last bit for 126 of these 256 values
  Tensor x = arange(0.0, 256.0);
  std::vector<float> got = (x / 255.0).to_vector<float>(), got_fn = div(x, 255.0).to_vector<float>();
  for (int v = 0; v < 256; ++v) {
    INFO(v);
    CHECK(got[size_t(v)] == float(v) / 255.0f);
    CHECK(got_fn[size_t(v)] == float(v) / 255.0f);
  }
  CHECK((arange(int64_t(4)) / 2.0).dtype() == DType::f32);  // integers promote, as true division
  CHECK((arange(int64_t(4)) / 2.0).to_vector<float>() == std::vector<float>{0, 0.5f, 1, 1.5f});
}
