// max_pool2d, avg_pool2d, adaptive_avg_pool2d: values (hand-computed, and PyTorch's
// for the less obvious windows), strided inputs, gradient routing, gradient checks, errors.
#include <cmath>
#include <cstring>

#include "gradcheck.h"

using namespace reel;
using reel::test::input;
using V = std::vector<Tensor>;

namespace {
Tensor grid(int64_t h, int64_t w, DType dt = DType::f32) {
  return arange(0.0, double(h * w), 1.0, {.dtype = dt}).reshape({1, 1, h, w});
}
}  // namespace

TEST_CASE("max_pool2d gives the window maxima", "[pool]") {
  Tensor x = grid(4, 4);  // x[i, j] = 4 i + j
  CHECK(max_pool2d(x).to_vector<float>() == std::vector<float>{5, 7, 13, 15});
  CHECK(max_pool2d(x, {.kernel = {2, 2}, .stride = {1, 1}}).to_vector<float>() ==
        std::vector<float>{5, 6, 7, 9, 10, 11, 13, 14, 15});
  // padding never wins: windows at the border see only real pixels (values from PyTorch)
  CHECK(max_pool2d(x, {.kernel = {2, 2}, .stride = {2, 2}, .padding = {1, 1}}).to_vector<float>() ==
        std::vector<float>{0, 2, 3, 8, 10, 11, 12, 14, 15});
  CHECK(max_pool2d(-grid(4, 4, DType::f64), {.kernel = {3, 2}, .stride = {1, 2}}).to_vector<double>() ==
        std::vector<double>{0, -2, -4, -6});
  Tensor nan = grid(2, 2);
  nan.data<float>()[1] = std::nanf("");
  CHECK(std::isnan(max_pool2d(nan).item<float>()));
}

TEST_CASE("max_pool2d routes the gradient to each window's maximum", "[pool]") {
  Tensor x = tensor({{1, 9, 2, 3}, {4, 5, 8, 7}}).reshape({1, 1, 2, 4}).requires_grad_();
  Tensor y = max_pool2d(x);  // maxima 9 (at 1) and 8 (at 6)
  CHECK(y.to_vector<float>() == std::vector<float>{9, 8});
  (y * tensor({2, 3}).reshape({1, 1, 1, 2})).sum().backward();
  CHECK(x.grad().to_vector<float>() == std::vector<float>{0, 2, 0, 0, 0, 0, 3, 0});
  // overlapping windows that share a maximum add up
  Tensor z = tensor({{0, 0, 0}, {0, 5, 0}, {0, 0, 0}}).reshape({1, 1, 3, 3}).requires_grad_();
  max_pool2d(z, {.kernel = {2, 2}, .stride = {1, 1}}).sum().backward();
  CHECK(z.grad().to_vector<float>() == std::vector<float>{0, 0, 0, 0, 4, 0, 0, 0, 0});
}

TEST_CASE("2x2 max pooling's fast path picks what the general loop picks: ties, NaN, odd sizes", "[pool]") {
  // Values from {0, 1, 2} (many ties) with NaNs sprinkled in; the transposed view has a
  // non-unit width stride and so takes the general loop, its contiguous copy the fast path.
  manual_seed(5);
  Tensor v = (rand({3, 4, 7, 9}) * 3.0).to(DType::i64).to(DType::f32);
  float* d = v.data<float>();
  for (int64_t i = 0; i < v.numel(); i += 11) d[i] = std::nanf("");
  Tensor general = v.transpose(2, 3).requires_grad_();       // [3, 4, 9, 7], strided
  Tensor fast = general.detach().contiguous().requires_grad_();
  REQUIRE(general.stride(3) != 1);
  Tensor yg = max_pool2d(general), yf = max_pool2d(fast);
  REQUIRE(yf.shape() == Dims{3, 4, 4, 3});
  std::vector<float> a = yg.to_vector<float>(), b = yf.to_vector<float>();
  for (size_t i = 0; i < a.size(); ++i) {
    INFO("output " << i);
    CHECK((std::isnan(a[i]) ? std::isnan(b[i]) : a[i] == b[i]));
  }
  // the chosen positions, through the gradient each output routes back
  Tensor w = arange(1.0, double(yf.numel()) + 1, 1.0).reshape(yf.shape());
  (yg * w).sum().backward();
  (yf * w).sum().backward();
  CHECK(general.grad().contiguous().to_vector<float>() == fast.grad().to_vector<float>());
}

TEST_CASE("2x2 average pooling's fast path gives the general loop's bits, forward and backward", "[pool]") {
  // Odd sizes (the last row and column outside every window), -0, inf and NaN; the
  // transposed view has a non-unit width stride and so takes the general loop.
  manual_seed(7);
  for (Dims shape : {Dims{2, 3, 7, 9}, Dims{2, 3, 6, 8}})  // odd: rows outside every window; even: none
  for (DType dt : {DType::f32, DType::f64}) {
    Tensor v = randn(shape, {.dtype = dt});
    Tensor c = v.contiguous().to(DType::f64);
    double* d = c.data<double>();
    for (int64_t i = 0; i < c.numel(); i += 17) d[i] = -0.0;
    d[5] = INFINITY, d[40] = -INFINITY, d[77] = std::nan("");
    v = c.to(dt);
    Tensor general = v.transpose(2, 3).contiguous().transpose(2, 3).requires_grad_();
    Tensor fast = v.detach().clone().requires_grad_();
    REQUIRE(general.stride(3) != 1);
    REQUIRE(fast.stride(3) == 1);
    Tensor yg = avg_pool2d(general, {.kernel = 2}), yf = avg_pool2d(fast, {.kernel = 2});
    REQUIRE(yf.shape() == Dims{2, 3, shape[2] / 2, shape[3] / 2});
    std::vector<double> a = yg.to(DType::f64).to_vector<double>(), b = yf.to(DType::f64).to_vector<double>();
    bool same = true;
    for (size_t i = 0; i < a.size(); ++i)
      same = same && (std::isnan(a[i]) ? std::isnan(b[i]) : std::memcmp(&a[i], &b[i], sizeof(double)) == 0);
    CHECK(same);
    Tensor w = randn(yf.shape(), {.dtype = dt});
    (yg * w).sum().backward();
    (yf * w).sum().backward();
    std::vector<double> ga = general.grad().to(DType::f64).contiguous().to_vector<double>();
    std::vector<double> gb = fast.grad().to(DType::f64).to_vector<double>();
    CHECK(std::memcmp(ga.data(), gb.data(), ga.size() * sizeof(double)) == 0);
  }
}

TEST_CASE("max pooling's row-at-a-time loop picks what a window-at-a-time scan picks", "[pool]") {
  // Every window read in scan order (h, then w), the first maximum kept and the last NaN,
  // against the kernel for kernels 1-4, strides 1-3, padding, ceil_mode and a strided view;
  // values from {0, 1, 2} (many ties) with NaNs sprinkled in.
  manual_seed(6);
  Tensor v = (rand({2, 3, 11, 10}) * 3.0).to(DType::i64).to(DType::f64);
  double* d = v.data<double>();
  for (int64_t i = 0; i < v.numel(); i += 13) d[i] = std::nan("");
  for (Tensor x : {v, v.transpose(2, 3)})
    for (int64_t k = 1; k <= 4; ++k)
      for (int64_t s = 1; s <= 3; ++s)
        for (int64_t pad = 0; pad <= k / 2; ++pad)
          for (bool ceil : {false, true}) {
            INFO("kernel " << k << " stride " << s << " padding " << pad << " ceil " << ceil << " width stride " << x.stride(3));
            PoolWithIndices r = max_pool2d_with_indices(x, {.kernel = k, .stride = s, .padding = pad, .ceil_mode = ceil});
            const int64_t H = x.size(2), W = x.size(3), OH = r.values.size(2), OW = r.values.size(3);
            Tensor xc = x.contiguous();
            const double* X = xc.data<double>();
            std::vector<double> got = r.values.to_vector<double>();
            std::vector<int64_t> at = r.indices.to_vector<int64_t>();
            bool same = true;
            for (int64_t plane = 0; plane < 6; ++plane)
              for (int64_t oh = 0; oh < OH; ++oh)
                for (int64_t ow = 0; ow < OW; ++ow) {
                  double best = -INFINITY;
                  int64_t arg = -1;
                  for (int64_t h = std::max<int64_t>(0, oh * s - pad); h < std::min(H, oh * s - pad + k); ++h)
                    for (int64_t w = std::max<int64_t>(0, ow * s - pad); w < std::min(W, ow * s - pad + k); ++w) {
                      const double e = X[plane * H * W + h * W + w];
                      if (arg < 0 || e > best || std::isnan(e)) best = e, arg = h * W + w;
                    }
                  const size_t o = size_t((plane * OH + oh) * OW + ow);
                  same = same && at[o] == arg && (std::isnan(best) ? std::isnan(got[o]) : got[o] == best);
                }
            CHECK(same);
          }
}

TEST_CASE("avg_pool2d averages with and without the padding in the count", "[pool]") {
  Tensor x = grid(4, 4);
  CHECK(avg_pool2d(x).to_vector<float>() == std::vector<float>{2.5, 4.5, 10.5, 12.5});
  // values from PyTorch
  CHECK(avg_pool2d(x, {.kernel = {2, 2}, .stride = {2, 2}, .padding = {1, 1}}).to_vector<float>() ==
        std::vector<float>{0, 0.75, 0.75, 3, 7.5, 4.5, 3, 6.75, 3.75});
  CHECK(avg_pool2d(x, {.kernel = {2, 2}, .stride = {2, 2}, .padding = {1, 1}, .count_include_pad = false})
            .to_vector<float>() == std::vector<float>{0, 1.5, 3, 6, 7.5, 9, 12, 13.5, 15});
  CHECK(avg_pool2d(grid(4, 4, DType::f64), {.kernel = {3, 3}, .stride = {1, 1}, .padding = {1, 1},
                                            .count_include_pad = false})
            .to_vector<double>() ==
        std::vector<double>{2.5, 3, 4, 4.5, 4.5, 5, 6, 6.5, 8.5, 9, 10, 10.5, 10.5, 11, 12, 12.5});
}

TEST_CASE("adaptive_avg_pool2d uses PyTorch's windows", "[pool]") {
  Tensor x = grid(5, 5);
  // windows of 5 -> 2: [0, 3) and [2, 5)
  CHECK(adaptive_avg_pool2d(x, 2, 2).to_vector<float>() == std::vector<float>{6, 8, 16, 18});
  CHECK(adaptive_avg_pool2d(x, 1, 1).to_vector<float>() == std::vector<float>{12});
  CHECK(adaptive_avg_pool2d(x, 5, 5).to_vector<float>() == x.to_vector<float>());
  // values from PyTorch, shrinking one dim and growing the other
  CHECK(adaptive_avg_pool2d(grid(5, 7), 3, 4).to_vector<float>() ==
        std::vector<float>{4, 5.5, 7.5, 9, 14.5, 16, 18, 19.5, 25, 26.5, 28.5, 30});
  CHECK(adaptive_avg_pool2d(grid(5, 7, DType::f64), 7, 2).to_vector<double>() ==
        std::vector<double>{1.5, 4.5, 5, 8, 12, 15, 15.5, 18.5, 19, 22, 26, 29, 29.5, 32.5});
}

TEST_CASE("pooling reads strided inputs", "[pool]") {
  manual_seed(20);
  Tensor nhwc = randn({2, 6, 5, 3});
  Tensor x = nhwc.permute({0, 3, 1, 2});  // [2, 3, 6, 5], channels-last
  Tensor xc = x.contiguous();
  Pool2dOptions o{.kernel = {3, 2}, .stride = {2, 1}, .padding = {1, 1}};
  CHECK(max_pool2d(x, o).to_vector<float>() == max_pool2d(xc, o).to_vector<float>());
  CHECK(avg_pool2d(x, o).to_vector<float>() == avg_pool2d(xc, o).to_vector<float>());
  CHECK(adaptive_avg_pool2d(x, 4, 3).to_vector<float>() == adaptive_avg_pool2d(xc, 4, 3).to_vector<float>());
  Tensor s = randn({2, 3, 8, 8}).slice(3, 0, 8, 2);
  CHECK(max_pool2d(s).to_vector<float>() == max_pool2d(s.contiguous()).to_vector<float>());
}

TEST_CASE("pooling gradients match finite differences", "[pool][grad]") {
  CHECK_GRADIENTS([](const V& v) { return max_pool2d(v[0]); }, input({2, 2, 4, 6}));
  CHECK_GRADIENTS([](const V& v) { return max_pool2d(v[0], {.kernel = {3, 2}, .stride = {2, 1}, .padding = {1, 1}}); },
                  input({1, 2, 5, 5}));
  CHECK_GRADIENTS([](const V& v) { return avg_pool2d(v[0]); }, input({2, 2, 4, 4}));
  CHECK_GRADIENTS([](const V& v) { return avg_pool2d(v[0], {.kernel = {3, 3}, .stride = {2, 1}, .padding = {1, 1}}); },
                  input({1, 2, 5, 4}));
  CHECK_GRADIENTS([](const V& v) {
    return avg_pool2d(v[0], {.kernel = {3, 3}, .stride = {2, 1}, .padding = {1, 1}, .count_include_pad = false});
  }, input({1, 2, 5, 4}));
  CHECK_GRADIENTS([](const V& v) { return adaptive_avg_pool2d(v[0], 3, 2); }, input({2, 1, 5, 7}));
  CHECK_GRADIENTS([](const V& v) { return adaptive_avg_pool2d(v[0], 4, 5); }, input({1, 2, 3, 3}));
  // strided inputs
  CHECK_GRADIENTS([](const V& v) { return max_pool2d(v[0].permute({0, 3, 1, 2})); }, input({1, 4, 4, 2}));
  CHECK_GRADIENTS([](const V& v) { return avg_pool2d(v[0].slice(3, 0, 8, 2)); }, input({1, 2, 4, 8}));
  CHECK_GRADIENTS([](const V& v) { return adaptive_avg_pool2d(v[0].transpose(2, 3), 2, 2); }, input({1, 2, 5, 3}));
}

TEST_CASE("pooling is twice differentiable (create_graph)", "[pool][grad][grad2]") {
  // L = max^2: dL/dx = 2 max at the argmax, so d/dx sum(dL/dx) = 2 there and 0 elsewhere
  Tensor x = tensor({1, 5, 3, 2}, {.dtype = DType::f64}).reshape({1, 1, 2, 2}).detach().requires_grad_();
  Tensor g = autograd::grad({square(max_pool2d(x)).sum()}, {x}, {}, {.create_graph = true})[0];
  CHECK(g.to_vector<double>() == std::vector<double>{0, 10, 0, 0});
  CHECK(autograd::grad({g.sum()}, {x})[0].to_vector<double>() == std::vector<double>{0, 2, 0, 0});
  // L = mean^2 over 4 values: dL/dx_i = m / 2, d/dx_j sum_i dL/dx_i = 4 / 8
  Tensor ga = autograd::grad({square(avg_pool2d(x)).sum()}, {x}, {}, {.create_graph = true})[0];
  CHECK(ga.to_vector<double>()[0] == Approx(11.0 / 8));
  for (double v : autograd::grad({ga.sum()}, {x})[0].to_vector<double>()) CHECK(v == Approx(0.5));

  CHECK_SECOND_GRADIENTS([](const V& v) { return square(max_pool2d(v[0])); }, input({2, 2, 4, 4}));
  CHECK_SECOND_GRADIENTS([](const V& v) {
    return square(max_pool2d(v[0], {.kernel = {3, 2}, .stride = {2, 1}, .padding = {1, 1}}));
  }, input({1, 2, 5, 5}));
  CHECK_SECOND_GRADIENTS([](const V& v) { return square(avg_pool2d(v[0])); }, input({1, 2, 4, 4}));
  CHECK_SECOND_GRADIENTS([](const V& v) {
    return square(avg_pool2d(v[0], {.kernel = {3, 3}, .stride = {2, 1}, .padding = {1, 1}, .count_include_pad = false}));
  }, input({1, 2, 5, 4}));
  CHECK_SECOND_GRADIENTS([](const V& v) { return square(adaptive_avg_pool2d(v[0], 3, 2)); }, input({1, 2, 5, 3}));
}

TEST_CASE("pooling errors name the op and the shapes", "[pool][errors]") {
  auto message = [](auto f) { return reel::test::error_message(f); };
  std::string m = message([] { max_pool2d(zeros({8, 8})); });  // [C, H, W] is an unbatched input
  CHECK_THAT(m, Catch::Contains("max_pool2d") && Catch::Contains("[8, 8]") && Catch::Contains("test_pool.cpp"));
  m = message([] { max_pool2d(zeros({1, 1, 3, 3}), {.kernel = {4, 4}}); });
  CHECK_THAT(m, Catch::Contains("max_pool2d") && Catch::Contains("larger") && Catch::Contains("[1, 1, 3, 3]"));
  m = message([] { avg_pool2d(zeros({1, 1, 3, 3}), {.kernel = {2, 2}, .padding = {2, 2}}); });
  CHECK_THAT(m, Catch::Contains("avg_pool2d") && Catch::Contains("padding"));
  m = message([] { avg_pool2d(zeros({1, 1, 3, 3}, {.dtype = DType::i64})); });
  CHECK_THAT(m, Catch::Contains("avg_pool2d") && Catch::Contains("floating"));
  m = message([] { adaptive_avg_pool2d(zeros({1, 1, 3, 3}), 0, 2); });
  CHECK_THAT(m, Catch::Contains("adaptive_avg_pool2d") && Catch::Contains("[0, 2]"));
  m = message([] { adaptive_avg_pool2d(zeros({2, 3}), 1, 1); });
  CHECK_THAT(m, Catch::Contains("adaptive_avg_pool2d") && Catch::Contains("[2, 3]"));
}
