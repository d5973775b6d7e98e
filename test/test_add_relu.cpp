// add_relu: relu(a + b) in one pass (a residual block's end). Checked against the
// composition (values, broadcasting, NaN, integer dtypes), finite differences, errors;
// and the ResNet options that use it on small images.
#include "gradcheck.h"

using namespace reel;
using reel::test::input;
using V = std::vector<Tensor>;

TEST_CASE("add_relu equals relu(add) in values and gradients, broadcasting included", "[add_relu]") {
  manual_seed(11);
  for (DType dt : {DType::f32, DType::f64}) {
    Tensor a = randn({4, 3, 5, 7}, {.dtype = dt}).requires_grad_(), b = randn({3, 1, 7}, {.dtype = dt}).requires_grad_();
    Tensor a2 = a.detach().clone().requires_grad_(), b2 = b.detach().clone().requires_grad_();
    Tensor y = add_relu(a, b), want = relu(add(a2, b2));
    REQUIRE(y.shape() == want.shape());
    CHECK(y.to_vector<double>() == want.to_vector<double>());  // one rounding each: equal
    Tensor g = randn(y.shape(), {.dtype = dt});
    (y * g).sum().backward();
    (want * g).sum().backward();
    CHECK(a.grad().to_vector<double>() == a2.grad().to_vector<double>());
    CHECK(b.grad().to_vector<double>() == b2.grad().to_vector<double>());
  }
  Tensor n = add_relu(tensor({std::nanf(""), -1.0f, 2.0f}), tensor({1.0f, 0.5f, -2.0f}));
  std::vector<float> v = n.to_vector<float>();
  CHECK(std::isnan(v[0]));
  CHECK(v[1] == 0.0f);
  CHECK(v[2] == 0.0f);
  Tensor i = add_relu(tensor({-3.0, 4.0}).to(DType::i64), tensor({1.0, 1.0}).to(DType::i64));
  CHECK(i.dtype() == DType::i64);
  CHECK(i.to_vector<int64_t>() == std::vector<int64_t>{0, 5});
}

TEST_CASE("add_relu gradients match finite differences", "[add_relu][grad]") {
  manual_seed(12);
  CHECK_GRADIENTS([](const V& v) { return add_relu(v[0], v[1]); }, input({3, 4}), input({3, 4}));
  CHECK_GRADIENTS([](const V& v) { return add_relu(v[0], v[1]); }, input({2, 3, 4}), input({4}));
  CHECK_SECOND_GRADIENTS([](const V& v) { return square(add_relu(v[0], v[1])); }, input({3, 4}), input({1, 4}));
}

TEST_CASE("add_relu errors name the op and both shapes", "[add_relu][errors]") {
  std::string m;
  try {
    add_relu(zeros({2, 3}), zeros({4}));
  } catch (const Error& e) {
    m = e.what();
  }
  CHECK_THAT(m, Catch::Contains("add_relu") && Catch::Contains("[2, 3]") && Catch::Contains("[4]") &&
                    Catch::Contains("test_add_relu.cpp"));
}

TEST_CASE("ResNet's width and small_images options keep torchvision's names", "[add_relu][models]") {
  manual_seed(13);
  auto small = nn::models::resnet18({.num_classes = 10, .in_channels = 1, .width = 8, .small_images = true});
  auto full = nn::models::resnet18({.num_classes = 10, .in_channels = 1});
  std::vector<std::string> a, b;
  for (auto& [name, p] : small->named_parameters()) a.push_back(name);
  for (auto& [name, p] : full->named_parameters()) b.push_back(name);
  CHECK(a == b);
  CHECK(small->conv1.weight.shape() == Dims{8, 1, 3, 3});
  CHECK(small->fc.weight.shape() == Dims{10, 64});
  Tensor x = randn({2, 1, 28, 28});
  CHECK(small->features(x).shape() == Dims{2, 64});
  Tensor y = (*small)(x);
  CHECK(y.shape() == Dims{2, 10});
  y.sum().backward();
  CHECK(small->conv1.weight.grad().defined());
  CHECK_THROWS_AS(nn::models::resnet18({.width = 0}), Error);
}
