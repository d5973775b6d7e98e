// Augmentation for the deep-CNN work (issue 17): resized crops against interpolate()
// (PyTorch's bilinear, align_corners = false: checked against PyTorch in test_everyday),
// RandomResizedCrop's windows, to_tensor, and seeding.
#include <catch2/catch.hpp>
#include <reel/reel.h>

#include <array>
#include <vector>

using namespace reel;

namespace {
double max_diff(const Tensor& a, const Tensor& b) { return sub(a, b).abs().max().item<double>(); }
}  // namespace

TEST_CASE("resized_crop is interpolate of the window", "[augment]") {
  manual_seed(4);
  Tensor x = rand({2, 3, 20, 17});
  for (auto [top, left, h, w, oh, ow] : std::vector<std::array<int64_t, 6>>{
           {0, 0, 20, 17, 20, 17}, {3, 2, 9, 11, 24, 24}, {5, 4, 12, 6, 5, 7}, {0, 0, 1, 1, 3, 3}}) {
    INFO(top << " " << left << " " << h << " " << w << " -> " << oh << "x" << ow);
    Tensor want = interpolate(x.narrow(2, top, h).narrow(3, left, w).contiguous(),
                              {.size = {oh, ow}, .mode = InterpolateMode::bilinear});
    CHECK(max_diff(data::resized_crop(x, top, left, h, w, {oh, ow}), want) < 1e-6);
  }
  CHECK(max_diff(data::resized_crop(x, 0, 0, 20, 17, {20, 17}), x) == 0);  // the identity
  CHECK_THROWS_WITH(data::resized_crop(x, 15, 0, 6, 4, {8, 8}), Catch::Contains("must lie inside the 20x17 images"));
}

TEST_CASE("random_resized_crop draws windows within scale and ratio, per image and seed", "[augment]") {
  // a ramp image: the crop's value range tells which window was taken
  Tensor ramp = arange(0.0, 64.0).reshape({1, 1, 1, 64}).expand({8, 1, 64, 64}).contiguous();
  Tensor a = data::random_resized_crop(ramp, 16, 7), b = data::random_resized_crop(ramp, 16, 7);
  CHECK(a.shape() == Dims{8, 1, 16, 16});
  CHECK(max_diff(a, b) == 0);                                   // same seed, same crops
  CHECK(max_diff(a, data::random_resized_crop(ramp, 16, 8)) > 0);  // another seed, others
  std::vector<float> v = a.to_vector<float>();
  bool differ = false;
  for (int64_t i = 0; i < 8; ++i) {
    float lo = v[size_t(i * 256)], hi = v[size_t(i * 256 + 15)];
    // the window's width is sqrt(scale ratio) 64 with scale in [0.08, 1], ratio in [3/4, 4/3]
    CHECK(hi - lo <= 64.0f);
    CHECK(hi - lo >= 0.08f * 64.0f * 0.5f);
    differ = differ || v[size_t(i * 256)] != v[0];
  }
  CHECK(differ);  // images of one batch get their own windows
  // scale 1 and ratio 1 on a square image: the whole image, resized
  Tensor whole = data::random_resized_crop(ramp, 32, 1, {.scale_lo = 1, .scale_hi = 1, .ratio_lo = 1, .ratio_hi = 1});
  CHECK(max_diff(whole, interpolate(ramp, {.size = {32, 32}, .mode = InterpolateMode::bilinear})) < 1e-5);
  CHECK_THROWS_WITH(data::random_resized_crop(ramp.to(DType::u8), 16, 1), Catch::Contains("expected f32 images"));
}

TEST_CASE("to_tensor turns u8 HWC into f32 CHW in [0, 1]", "[augment]") {
  std::vector<uint8_t> px{0, 128, 255, 1, 2, 3};  // one row of two RGB pixels
  Tensor x = from_vector(px, {1, 2, 3});
  Tensor t = data::to_tensor(x);
  CHECK(t.shape() == Dims{3, 1, 2});
  std::vector<float> v = t.to_vector<float>();
  CHECK(v == std::vector<float>{0.0f / 255, 1.0f / 255, 128.0f / 255, 2.0f / 255, 255.0f / 255, 3.0f / 255});
  CHECK(data::to_tensor(from_vector(px, {1, 1, 2, 3})).shape() == Dims{1, 3, 1, 2});
  CHECK_THROWS_WITH(data::to_tensor(t), Catch::Contains("to_tensor: expected u8 CPU images"));
}
