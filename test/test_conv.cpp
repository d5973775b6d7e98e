// conv2d and conv2d_relu: hand-computed values, a definition-by-loops reference for
// stride/padding/dilation/groups, strided inputs, the GEMM lowerings (1x1 and
// whole-input kernels), f32 (oneDNN) against f64 (loops) forward and backward,
// gradient checks, errors.
#include "gradcheck.h"

using namespace reel;
using reel::test::input;
using V = std::vector<Tensor>;

namespace {
// The convolution by definition, in doubles.
std::vector<double> reference_conv(const Tensor& x, const Tensor& w, const Tensor& b, Conv2dOptions o) {
  std::vector<double> xv = x.to_vector<double>(), wv = w.to_vector<double>();
  std::vector<double> bv = b.defined() ? b.to_vector<double>() : std::vector<double>();
  int64_t N = x.size(0), C = x.size(1), H = x.size(2), W = x.size(3);
  int64_t O = w.size(0), Cg = w.size(1), KH = w.size(2), KW = w.size(3), Og = O / o.groups;
  int64_t OH = (H + 2 * o.padding[0] - o.dilation[0] * (KH - 1) - 1) / o.stride[0] + 1;
  int64_t OW = (W + 2 * o.padding[1] - o.dilation[1] * (KW - 1) - 1) / o.stride[1] + 1;
  std::vector<double> y;
  for (int64_t n = 0; n < N; ++n)
    for (int64_t oc = 0; oc < O; ++oc)
      for (int64_t i = 0; i < OH; ++i)
        for (int64_t j = 0; j < OW; ++j) {
          double acc = bv.empty() ? 0.0 : bv[size_t(oc)];
          for (int64_t c = 0; c < Cg; ++c)
            for (int64_t kh = 0; kh < KH; ++kh)
              for (int64_t kw = 0; kw < KW; ++kw) {
                int64_t ih = i * o.stride[0] - o.padding[0] + kh * o.dilation[0];
                int64_t iw = j * o.stride[1] - o.padding[1] + kw * o.dilation[1];
                if (ih < 0 || ih >= H || iw < 0 || iw >= W) continue;
                int64_t ci = oc / Og * Cg + c;
                acc += xv[size_t(((n * C + ci) * H + ih) * W + iw)] * wv[size_t(((oc * Cg + c) * KH + kh) * KW + kw)];
              }
          y.push_back(acc);
        }
  return y;
}

void check_close(const std::vector<double>& got, const std::vector<double>& want, double tol) {
  REQUIRE(got.size() == want.size());
  for (size_t i = 0; i < got.size(); ++i) CHECK(got[i] == Approx(want[i]).margin(tol));
}

// conv2d in f32 and f64 on the same values, each against the reference
void check_both(const Tensor& x, const Tensor& w, const Tensor& b, Conv2dOptions o) {
  std::vector<double> want = reference_conv(x, w, b, o);
  Tensor bd = b.defined() ? b.to(DType::f64) : Tensor();
  check_close(conv2d(x, w, b, o).to_vector<double>(), want, 1e-4);
  check_close(conv2d(x.to(DType::f64), w.to(DType::f64), bd, o).to_vector<double>(), want, 1e-10);
}

// Gradients of sum(conv(x, w, b) * r) in f32 and in f64 agree (oneDNN's backward against the loops).
void check_backward_agrees(const Dims& xs, const Dims& ws, Conv2dOptions o, bool relu) {
  Tensor x = randn(xs), w = randn(ws), b = randn({ws[0]});
  std::vector<std::vector<double>> grads[2];
  for (int k = 0; k < 2; ++k) {
    DType dt = k ? DType::f64 : DType::f32;
    Tensor xv = x.to(dt).detach().requires_grad_(), wv = w.to(dt).detach().requires_grad_();
    Tensor bv = b.to(dt).detach().requires_grad_();
    Tensor y = relu ? conv2d_relu(xv, wv, bv, o) : conv2d(xv, wv, bv, o);
    Tensor r = arange(0.0, double(y.numel())).reshape(y.shape()).to(dt) * (1.0 / double(y.numel()));
    (y * r).sum().backward();
    grads[k] = {xv.grad().to_vector<double>(), wv.grad().to_vector<double>(), bv.grad().to_vector<double>()};
  }
  for (size_t i = 0; i < 3; ++i) check_close(grads[0][i], grads[1][i], 1e-3);
}
}  // namespace

TEST_CASE("conv2d gives hand-computed values", "[conv]") {
  Tensor x = arange(1.0, 17.0).reshape({1, 1, 4, 4});
  Tensor w = tensor({{1, 2}, {3, 4}}).reshape({1, 1, 2, 2});
  // y[i, j] = x[i, j] + 2 x[i, j+1] + 3 x[i+1, j] + 4 x[i+1, j+1] = 10 x[i, j] + 34
  Tensor y = conv2d(x, w);
  CHECK(y.shape() == Dims{1, 1, 3, 3});
  CHECK(y.to_vector<float>() == std::vector<float>{44, 54, 64, 84, 94, 104, 124, 134, 144});
  CHECK(conv2d(x, w, tensor({-100}), {.stride = {2, 2}}).to_vector<float>() == std::vector<float>{-56, -36, 24, 44});
  CHECK(conv2d_relu(x, w, tensor({-100})).to_vector<float>() ==
        std::vector<float>{0, 0, 0, 0, 0, 4, 24, 34, 44});
  // a 3x3 kernel of ones with padding 1 sees the whole 2x2 input from every position
  Tensor small = tensor({{1, 2}, {3, 4}}).reshape({1, 1, 2, 2});
  CHECK(conv2d(small, ones({1, 1, 3, 3}), {}, {.padding = {1, 1}}).to_vector<float>() ==
        std::vector<float>{10, 10, 10, 10});
  CHECK(conv2d(small.to(DType::f64), ones({1, 1, 3, 3}, {.dtype = DType::f64}), {}, {.padding = {1, 1}})
            .to_vector<double>() == std::vector<double>{10, 10, 10, 10});
}

TEST_CASE("conv2d matches the definition for stride, padding, dilation and groups", "[conv]") {
  manual_seed(10);
  check_both(randn({2, 3, 7, 6}), randn({4, 3, 3, 3}), randn({4}), {});
  check_both(randn({2, 3, 7, 6}), randn({4, 3, 3, 2}), randn({4}), {.stride = {2, 1}, .padding = {1, 2}});
  check_both(randn({1, 2, 9, 8}), randn({3, 2, 3, 3}), Tensor(), {.padding = {2, 0}, .dilation = {2, 3}});
  check_both(randn({2, 4, 6, 6}), randn({6, 2, 3, 3}), randn({6}), {.stride = {2, 2}, .padding = {1, 1}, .groups = 2});
  check_both(randn({2, 4, 5, 5}), randn({4, 1, 3, 3}), randn({4}), {.padding = {1, 1}, .groups = 4});  // depthwise
  check_both(randn({1, 3, 8, 8}), randn({2, 3, 5, 5}), randn({2}), {.stride = {3, 3}});  // stride skips the tail
}

TEST_CASE("conv2d reads strided inputs", "[conv]") {
  manual_seed(11);
  Tensor nhwc = randn({2, 5, 6, 3});
  Tensor x = nhwc.permute({0, 3, 1, 2});  // NCHW view of channels-last data
  Tensor w = randn({4, 3, 3, 3}), b = randn({4});
  check_both(x, w, b, {.padding = {1, 1}});
  check_both(randn({2, 6, 9, 8}).slice(1, 0, 6, 2).slice(3, 1, 8, 2), w, b, {});  // every other channel and column
  check_both(x, randn({3, 4, 3, 3}).permute({1, 0, 2, 3}), b, {});  // a transposed weight
  check_both(randn({1, 3, 1, 1}).expand({2, 3, 4, 4}), w, b, {.padding = {1, 1}});  // stride 0
}

TEST_CASE("1x1 and whole-input convolutions (GEMM lowerings) match the definition", "[conv]") {
  manual_seed(12);
  // 1x1, stride 1, no padding: y[n] = W x[n]
  check_both(randn({3, 5, 4, 6}), randn({7, 5, 1, 1}), randn({7}), {});  // small: loops in f32 too
  check_both(randn({3, 16, 8, 8}), randn({24, 16, 1, 1}), randn({24}), {});  // large enough for oneDNN
  check_both(randn({3, 16, 8, 8}), randn({24, 16, 1, 1}), Tensor(), {});
  check_both(randn({2, 4, 6, 5}).permute({0, 1, 3, 2}), randn({3, 4, 1, 1}), randn({3}), {});
  // the kernel covers the input: y = x W^T
  check_both(randn({4, 2, 5, 5}), randn({6, 2, 5, 5}), randn({6}), {});
  check_both(randn({8, 4, 6, 6}), randn({16, 4, 6, 6}), randn({16}), {});
  check_both(randn({4, 1, 28, 28}), randn({16, 1, 28, 28}), randn({16}), {.stride = {2, 2}});
  check_both(randn({2, 3, 4, 4}).permute({0, 1, 3, 2}), randn({5, 3, 4, 4}), randn({5}), {});
  // against the oneDNN convolution: a strided 1x1 conv is a 1x1 conv of the strided input
  Tensor x = randn({2, 8, 6, 6}), w = randn({5, 8, 1, 1}), b = randn({5});
  Tensor direct = conv2d(x, w, b, {.stride = {2, 2}});
  Tensor lowered = conv2d(x.slice(2, 0, 6, 2).slice(3, 0, 6, 2), w, b);
  check_close(lowered.to_vector<double>(), direct.to_vector<double>(), 1e-4);
  // and a whole-input kernel is the first output of the same kernel over a larger input
  Tensor big = randn({3, 2, 6, 6}), k = randn({4, 2, 5, 5});
  Tensor first = conv2d(big, k, b.slice(0, 0, 4)).slice(2, 0, 1).slice(3, 0, 1);
  Tensor whole = conv2d(big.slice(2, 0, 5).slice(3, 0, 5), k, b.slice(0, 0, 4));
  check_close(whole.to_vector<double>(), first.to_vector<double>(), 1e-4);
  CHECK(conv2d_relu(big.slice(2, 0, 5).slice(3, 0, 5), k).to_vector<double>() ==
        relu(conv2d(big.slice(2, 0, 5).slice(3, 0, 5), k)).to_vector<double>());
}

TEST_CASE("conv2d gradients in f32 (oneDNN) agree with f64 (loops)", "[conv][grad]") {
  manual_seed(13);
  check_backward_agrees({2, 3, 7, 6}, {4, 3, 3, 3}, {}, false);
  check_backward_agrees({2, 4, 7, 7}, {6, 2, 3, 2}, {.stride = {2, 1}, .padding = {1, 1}, .dilation = {1, 2}, .groups = 2},
                        true);
  check_backward_agrees({4, 16, 6, 6}, {12, 16, 1, 1}, {}, true);  // pointwise
  check_backward_agrees({8, 4, 6, 6}, {16, 4, 6, 6}, {}, false);  // whole input
  check_backward_agrees({2, 3, 5, 5}, {4, 3, 1, 1}, {.stride = {2, 2}}, false);
}

TEST_CASE("both CPU convolution algorithms agree with f64, forward and backward", "[conv][grad]") {
  // a batch of 64 3x3 stride-1 convolutions: oneDNN's own choice (`fastest`) takes
  // Winograd F(4x4, 3x3) for it on AVX-512 machines; `direct` sums the products as written
  manual_seed(17);
  Tensor x = randn({64, 8, 16, 16}), w = randn({8, 8, 3, 3}), b = randn({8});
  std::vector<double> want = reference_conv(x, w, b, {.padding = 1});
  REQUIRE(conv_algorithm() == ConvAlgorithm::fastest);  // the default
  for (ConvAlgorithm a : {ConvAlgorithm::fastest, ConvAlgorithm::direct}) {
    set_conv_algorithm(a);
    CAPTURE(int(a));
    CHECK(conv_algorithm() == a);
    check_close(conv2d(x, w, b, {.padding = 1}).to_vector<double>(), want, 1e-4);
    check_backward_agrees({64, 8, 16, 16}, {8, 8, 3, 3}, {.padding = 1}, true);
  }
  set_conv_algorithm(ConvAlgorithm::fastest);
}

TEST_CASE("conv and pool options: one number sets both dims", "[conv]") {
  // `.padding = 1` is {1, 1} (a plain int64_t[2] field once took it as {1, 0})
  Tensor x = randn({2, 3, 6, 7}), w = randn({4, 3, 3, 3});
  Tensor one = conv2d(x, w, {}, {.stride = 2, .padding = 1, .dilation = 1});
  CHECK(one.shape() == Dims{2, 4, 3, 4});
  CHECK(allclose(one, conv2d(x, w, {}, {.stride = {2, 2}, .padding = {1, 1}, .dilation = {1, 1}})));
  CHECK(conv2d(x, w, {}, {.padding = {1, 0}}).shape() == Dims{2, 4, 6, 5});
  Tensor pooled = max_pool2d(x, {.kernel = 3, .stride = 1, .padding = 1});
  CHECK(pooled.shape() == Dims{2, 3, 6, 7});
  CHECK(allclose(pooled, max_pool2d(x, {.kernel = {3, 3}, .stride = {1, 1}, .padding = {1, 1}})));
  CHECK(avg_pool2d(x, {.kernel = 2}).shape() == Dims{2, 3, 3, 3});
}

TEST_CASE("conv2d gradients match finite differences", "[conv][grad]") {
  auto conv = [](Conv2dOptions o) { return [o](const V& v) { return conv2d(v[0], v[1], v[2], o); }; };
  CHECK_GRADIENTS(conv({}), input({2, 2, 4, 5}), input({3, 2, 2, 3}), input({3}));
  CHECK_GRADIENTS(conv({.stride = {2, 1}, .padding = {1, 2}}), input({1, 2, 5, 4}), input({2, 2, 3, 3}), input({2}));
  CHECK_GRADIENTS(conv({.padding = {1, 0}, .dilation = {2, 2}}), input({1, 1, 6, 6}), input({2, 1, 2, 2}), input({2}));
  CHECK_GRADIENTS(conv({.stride = {2, 2}, .padding = {1, 1}, .groups = 2}), input({2, 4, 4, 4}), input({2, 2, 3, 3}),
                  input({2}));
  CHECK_GRADIENTS(conv({}), input({2, 3, 3, 2}), input({4, 3, 1, 1}), input({4}));  // pointwise
  CHECK_GRADIENTS(conv({}), input({3, 2, 3, 3}), input({2, 2, 3, 3}), input({2}));  // whole input
  CHECK_GRADIENTS([](const V& v) { return conv2d(v[0].permute({0, 3, 1, 2}), v[1]); }, input({2, 4, 3, 2}),
                  input({2, 2, 2, 2}));  // channels-last input
  CHECK_GRADIENTS([](const V& v) { return conv2d(v[0].slice(3, 0, 6, 2), v[1], v[2]); }, input({1, 2, 3, 6}),
                  input({2, 2, 1, 1}), input({2}));  // strided pointwise input
  CHECK_GRADIENTS([](const V& v) { return conv2d_relu(v[0], v[1], v[2], {.padding = {1, 1}}); }, input({2, 2, 3, 3}),
                  input({3, 2, 2, 2}), input({3}));
  CHECK_GRADIENTS([](const V& v) { return conv2d(v[0], v[1], v[2]); }, input({2, 2, 3, 3}),
                  input({2, 2, 2, 2}).detach(), input({2}));  // no weight gradient: the bias alone
}

TEST_CASE("conv2d is twice differentiable (create_graph)", "[conv][grad][grad2]") {
  // 1x1 conv with one weight w: L = sum (w x)^2 / 2; dL/dw = w sum x^2, dL/dx = w^2 x
  Tensor x = tensor({1, 2, 3}, {.dtype = DType::f64}).reshape({1, 1, 1, 3}).detach().requires_grad_();
  Tensor w = full({1, 1, 1, 1}, 0.5, {.dtype = DType::f64}).requires_grad_();
  auto g = autograd::grad({(square(conv2d(x, w)) * 0.5).sum()}, {x, w}, {}, {.create_graph = true});
  CHECK(g[1].item<double>() == Approx(0.5 * 14));
  auto gg = autograd::grad({g[1].sum()}, {x, w}, {}, {.retain_graph = true});  // d/dx = 2 w x, d/dw = sum x^2
  CHECK(gg[0].to_vector<double>() == std::vector<double>{1, 2, 3});
  CHECK(gg[1].item<double>() == Approx(14));
  auto gx = autograd::grad({g[0].sum()}, {x, w});  // d/dx sum(w^2 x) = w^2, d/dw = 2 w sum x
  CHECK(gx[0].to_vector<double>() == std::vector<double>{0.25, 0.25, 0.25});
  CHECK(gx[1].item<double>() == Approx(6));

  auto conv = [](Conv2dOptions o) { return [o](const V& v) { return square(conv2d(v[0], v[1], v[2], o)); }; };
  CHECK_SECOND_GRADIENTS(conv({}), input({2, 2, 3, 4}), input({3, 2, 2, 3}), input({3}));
  CHECK_SECOND_GRADIENTS(conv({.stride = {2, 1}, .padding = {1, 2}}), input({1, 2, 5, 4}), input({2, 2, 3, 3}),
                         input({2}));
  CHECK_SECOND_GRADIENTS(conv({.stride = {2, 2}, .padding = {1, 0}, .dilation = {2, 1}, .groups = 2}),
                         input({1, 4, 6, 5}), input({2, 2, 2, 2}), input({2}));
  CHECK_SECOND_GRADIENTS(conv({}), input({2, 3, 2, 2}), input({2, 3, 1, 1}), input({2}));  // pointwise
  CHECK_SECOND_GRADIENTS(conv({}), input({2, 2, 3, 3}), input({2, 2, 3, 3}), input({2}));  // whole input
  CHECK_SECOND_GRADIENTS([](const V& v) { return square(conv2d_relu(v[0], v[1], v[2], {.padding = {1, 1}})); },
                         input({1, 2, 3, 3}), input({2, 2, 2, 2}), input({2}));
}

TEST_CASE("conv2d errors name the op and the shapes", "[conv][errors]") {
  auto message = [](auto f) { return reel::test::error_message(f); };
  std::string m = message([] { conv2d(zeros({1, 3, 8, 8}), zeros({4, 2, 3, 3})); });
  CHECK_THAT(m, Catch::Contains("conv2d") && Catch::Contains("[1, 3, 8, 8]") && Catch::Contains("[4, 2, 3, 3]") &&
                    Catch::Contains("test_conv.cpp"));
  m = message([] { conv2d(zeros({3, 8, 8}), zeros({4, 3, 3, 3})); });
  CHECK_THAT(m, Catch::Contains("conv2d") && Catch::Contains("[3, 8, 8]") && Catch::Contains("4 dims"));
  m = message([] { conv2d(zeros({1, 3, 8, 8}), zeros({4, 3, 3})); });
  CHECK_THAT(m, Catch::Contains("conv2d") && Catch::Contains("weight") && Catch::Contains("[4, 3, 3]"));
  m = message([] { conv2d_relu(zeros({1, 3, 4, 4}), zeros({4, 3, 5, 5})); });
  CHECK_THAT(m, Catch::Contains("conv2d_relu") && Catch::Contains("larger") && Catch::Contains("[1, 3, 4, 4]"));
  m = message([] { conv2d(zeros({1, 3, 4, 4}), zeros({4, 3, 3, 3}), {}, {.dilation = {2, 2}}); });
  CHECK_THAT(m, Catch::Contains("conv2d") && Catch::Contains("larger"));
  m = message([] { conv2d(zeros({1, 4, 4, 4}), zeros({3, 2, 3, 3}), {}, {.groups = 2}); });
  CHECK_THAT(m, Catch::Contains("conv2d") && Catch::Contains("groups"));
  m = message([] { conv2d(zeros({1, 3, 4, 4}), zeros({4, 3, 3, 3}), zeros({3})); });
  CHECK_THAT(m, Catch::Contains("conv2d") && Catch::Contains("bias") && Catch::Contains("[3]"));
  m = message([] { conv2d(zeros({1, 3, 4, 4}), zeros({4, 3, 3, 3}), {}, {.stride = {0, 1}}); });
  CHECK_THAT(m, Catch::Contains("conv2d") && Catch::Contains("stride"));
  m = message([] { conv2d(zeros({1, 3, 4, 4}), zeros({4, 3, 3, 3}, {.dtype = DType::f64})); });
  CHECK_THAT(m, Catch::Contains("conv2d") && Catch::Contains("f32") && Catch::Contains("f64"));
}
