// nn::Conv1d, ConvTranspose2d, MaxPool1d, AvgPool1d and Upsample: PyTorch's parameter
// names, shapes and init ranges; forward equal to the functional op (whose values are
// checked against PyTorch in test_everyday.cpp); gradients through the module in f64;
// errors that name the layer.
#include <catch2/catch.hpp>
#include <reel/reel.h>

#include <cmath>
#include <string>
#include <vector>

#include "gradcheck.h"

using namespace reel;
using reel::test::gradcheck;
using reel::test::input;
using V = std::vector<Tensor>;

namespace {
double max_abs(const Tensor& t) { return t.abs().max().item<double>(); }
double max_diff(const Tensor& a, const Tensor& b) { return max_abs(sub(a, b)); }
}  // namespace

TEST_CASE("Conv1d has PyTorch's parameters and computes conv1d", "[conv_layers]") {
  manual_seed(3);
  nn::Conv1d conv(4, 6, 3, {.stride = 2, .padding = 1, .groups = 2});
  auto params = conv.named_parameters();
  REQUIRE(params.size() == 2);
  CHECK(params[0].first == "weight");
  CHECK(params[0].second.shape() == Dims{6, 2, 3});
  CHECK(params[1].second.shape() == Dims{6});
  // kaiming_uniform(a = sqrt 5): U(-1/sqrt(fan_in), 1/sqrt(fan_in)), fan_in = 2 * 3
  const double bound = 1 / std::sqrt(6.0);
  CHECK(max_abs(conv.weight) <= bound);
  CHECK(max_abs(conv.weight) > 0.8 * bound);
  CHECK(max_abs(conv.bias) <= bound);
  CHECK(conv.str() == "Conv1d(4, 6, kernel_size=(3,), stride=(2,), padding=(1,), groups=2)");

  Tensor x = randn({2, 4, 9});
  Tensor y = conv(x);
  CHECK(y.shape() == Dims{2, 6, 5});
  CHECK(max_diff(y, conv1d(x, conv.weight, conv.bias, {.stride = 2, .padding = 1, .groups = 2})) == 0);

  nn::Conv1d nobias(2, 3, 2, {.dilation = 2, .bias = false});
  CHECK(!nobias.bias.defined());
  CHECK(nobias.named_parameters().size() == 1);
  CHECK(nobias(randn({1, 2, 5})).shape() == Dims{1, 3, 3});
}

TEST_CASE("ConvTranspose2d has PyTorch's weight layout and inverts a strided conv's shape", "[conv_layers]") {
  manual_seed(5);
  nn::ConvTranspose2d up(4, 6, 4, {.stride = 2, .padding = 1, .groups = 2});
  CHECK(up.weight.shape() == Dims{4, 3, 4, 4});  // [C_in, C_out / groups, kh, kw]
  CHECK(up.bias.shape() == Dims{6});
  const double bound = 1 / std::sqrt(3.0 * 16);  // fan_in from dim 1: C_out/groups kh kw
  CHECK(max_abs(up.weight) <= bound);
  CHECK(max_abs(up.weight) > 0.8 * bound);
  CHECK(up.str() == "ConvTranspose2d(4, 6, kernel_size=(4, 4), stride=(2, 2), padding=(1, 1), groups=2)");

  Tensor x = randn({2, 4, 5, 7});
  Tensor y = up(x);
  CHECK(y.shape() == Dims{2, 6, 10, 14});
  CHECK(max_diff(y, conv_transpose2d(x, up.weight, up.bias, {.stride = 2, .padding = 1, .groups = 2})) == 0);

  nn::ConvTranspose2d odd(2, 2, 3, {.stride = 2, .output_padding = 1});
  CHECK(odd(randn({1, 2, 4, 4})).shape() == Dims{1, 2, 10, 10});
}

TEST_CASE("Conv1d and ConvTranspose2d gradients match finite differences", "[conv_layers][gradcheck]") {
  manual_seed(7);
  nn::Conv1d conv(2, 3, 3, {.padding = 1});
  conv.to(DType::f64);
  CHECK(gradcheck([&](const V& v) {
          conv.weight = v[1];
          conv.bias = v[2];
          return conv(v[0]);
        }, {input({2, 2, 5}), conv.weight.detach(), conv.bias.detach()}) == "");
  nn::ConvTranspose2d up(2, 3, 3, {.stride = 2, .padding = 1, .output_padding = 1});
  up.to(DType::f64);
  CHECK(gradcheck([&](const V& v) {
          up.weight = v[1];
          up.bias = v[2];
          return up(v[0]);
        }, {input({1, 2, 3, 4}), up.weight.detach(), up.bias.detach()}) == "");
}

TEST_CASE("MaxPool1d, AvgPool1d and Upsample as layers", "[conv_layers]") {
  Tensor x = arange(0.0, 12.0).reshape({1, 2, 6});
  nn::MaxPool1d mp(2);
  CHECK(mp(x).to_vector<float>() == std::vector<float>{1, 3, 5, 7, 9, 11});
  nn::AvgPool1d ap(3, {.stride = 1, .padding = 1, .count_include_pad = false});
  std::vector<float> a = ap(x).to_vector<float>();
  REQUIRE(a.size() == 12);
  CHECK(a[0] == 0.5f);   // (0 + 1) / 2: the padded zero does not count
  CHECK(a[1] == 1.0f);   // (0 + 1 + 2) / 3
  CHECK(a[5] == 4.5f);   // (4 + 5) / 2
  CHECK(mp.str() == "MaxPool1d(kernel_size=2, stride=2, padding=0)");

  Tensor img = arange(0.0, 4.0).reshape({1, 1, 2, 2});
  nn::Upsample nearest({.scale_factor = {2}});
  CHECK(nearest(img).to_vector<float>() ==
        std::vector<float>{0, 0, 1, 1, 0, 0, 1, 1, 2, 2, 3, 3, 2, 2, 3, 3});
  nn::Upsample bil({.size = {3, 3}, .mode = InterpolateMode::bilinear, .align_corners = true});
  CHECK(bil(img).to_vector<float>() == std::vector<float>{0, 0.5, 1, 1, 1.5, 2, 2, 2.5, 3});
  CHECK(bil.str() == "Upsample(size=3, 3, mode='bilinear')");
  CHECK(gradcheck([&](const V& v) { return bil(v[0]); }, {input({1, 2, 2, 3})}) == "");
}

TEST_CASE("the convolution-family layers name themselves on bad arguments", "[conv_layers][errors]") {
  CHECK_THROWS_WITH(nn::Conv1d(3, 4, 0), Catch::Contains("Conv1d: kernel_size must be positive, got 0"));
  CHECK_THROWS_WITH(nn::Conv1d(3, 4, 2, {.groups = 2}), Catch::Contains("divisible by groups 2"));
  CHECK_THROWS_WITH(nn::ConvTranspose2d(2, 2, 3, {.stride = 2, .output_padding = 2}),
                    Catch::Contains("output_padding (2, 2) must be smaller than either stride (2, 2)"));
  CHECK_THROWS_WITH(nn::MaxPool1d(2, {.padding = 2}), Catch::Contains("MaxPool1d: padding 2 must be at most half"));
  CHECK_THROWS_WITH(nn::Upsample({}), Catch::Contains("Upsample: expected either size or scale_factor"));
  nn::Conv1d conv(3, 4, 2);
  CHECK_THROWS_WITH(conv(randn({2, 5, 7})), Catch::Contains("Conv1d: expected input [N, 3, L], got [2, 5, 7]"));
  nn::ConvTranspose2d up(3, 4, 2);
  CHECK_THROWS_WITH(up(randn({2, 3, 7})), Catch::Contains("ConvTranspose2d: expected input [N, 3, H, W]"));
}
