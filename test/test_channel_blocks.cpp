// Channel-blocked activations [N, C/B, H, W, B]: to/from_channel_blocks, batch_norm_relu
// written blocked and conv2d reading blocked. Each is checked against its plain
// composition (values, running statistics, gradients, second gradients) on the CPU's
// direct paths (f32, B = 16: the transposing kernels and oneDNN's nChw16c without a
// reorder) and its fallbacks (f64, B = 8, the Backend's composed defaults that CUDA
// runs), by finite differences, in DenseNet's layer, and for its errors.
#include "gradcheck.h"

using namespace reel;
using reel::test::check_close_relative;
using reel::test::input;
using V = std::vector<Tensor>;

namespace {
V fresh_copies(const V& xs) {
  V r;
  for (const Tensor& t : xs) r.push_back(t.detach().clone().requires_grad_());
  return r;
}

// batch_norm_relu_blocked against to_channel_blocks(batch_norm_relu(...)) on copies
void check_norm_against_composition(const V& pieces, bool training, int64_t block, double tol) {
  DType dt = pieces[0].dtype();
  int64_t C = 0;
  for (const Tensor& p : pieces) C += p.size(1);
  Tensor w = (rand({C}, {.dtype = dt}) + 0.5).detach().requires_grad_(),
         b = (rand({C}, {.dtype = dt}) - 0.5).detach().requires_grad_();
  Tensor w2 = w.detach().clone().requires_grad_(), b2 = b.detach().clone().requires_grad_();
  Tensor rm1 = rand({C}, {.dtype = dt}), rv1 = rand({C}, {.dtype = dt}) + 0.5, rm2 = rm1.clone(), rv2 = rv1.clone();
  V a = fresh_copies(pieces), c = fresh_copies(pieces);
  Tensor z1 = batch_norm_relu_blocked(a, w, b, rm1, rv1, training, 0.1, 1e-5, block);
  Tensor z2 = to_channel_blocks(batch_norm_relu(c, w2, b2, rm2, rv2, training, 0.1, 1e-5), block);
  check_close_relative(z1, z2, tol);
  check_close_relative(rm1, rm2, tol);
  check_close_relative(rv1, rv2, tol);
  Tensor g = randn(z1.shape(), {.dtype = dt});
  (z1 * g).sum().backward();
  (z2 * g).sum().backward();
  for (size_t j = 0; j < a.size(); ++j) check_close_relative(a[j].grad(), c[j].grad(), tol);
  check_close_relative(w.grad(), w2.grad(), tol);
  check_close_relative(b.grad(), b2.grad(), tol);
}

// conv2d_blocked against conv2d(from_channel_blocks(xb)) on copies
void check_conv_against_composition(const Tensor& x, const Tensor& w, const Tensor& bias, Conv2dOptions opt,
                                    int64_t block, double tol) {
  Tensor xb1 = to_channel_blocks(x, block).detach().requires_grad_(), xb2 = xb1.detach().clone().requires_grad_();
  Tensor w1 = w.detach().clone().requires_grad_(), w2 = w.detach().clone().requires_grad_();
  Tensor b1 = bias.defined() ? bias.detach().clone().requires_grad_() : Tensor();
  Tensor b2 = bias.defined() ? bias.detach().clone().requires_grad_() : Tensor();
  Tensor y1 = conv2d_blocked(xb1, w1, b1, opt), y2 = conv2d(from_channel_blocks(xb2), w2, b2, opt);
  check_close_relative(y1, y2, tol);
  Tensor g = randn(y1.shape(), {.dtype = x.dtype()});
  (y1 * g).sum().backward();
  (y2 * g).sum().backward();
  CHECK(xb1.grad().shape() == xb1.shape());
  check_close_relative(xb1.grad(), xb2.grad(), tol);
  check_close_relative(w1.grad(), w2.grad(), tol);
  if (bias.defined()) check_close_relative(b1.grad(), b2.grad(), tol);
}
}  // namespace

TEST_CASE("to_channel_blocks puts channel c of pixel (h, w) at [n][c / B][h][w][c % B]", "[channel_blocks]") {
  Tensor x = arange(0.0, 2 * 32 * 3 * 2).reshape({2, 32, 3, 2});
  for (int64_t B : {8, 16}) {
    Tensor xb = to_channel_blocks(x, B);
    REQUIRE(xb.shape() == Dims{2, 32 / B, 3, 2, B});
    CHECK(xb.is_contiguous());
    for (int64_t n : {0, 1})
      for (int64_t c : {0, 5, 17, 31})
        CHECK(xb.select(0, n).select(0, c / B).select(0, 2).select(0, 1).select(0, c % B).item<float>() ==
              x.select(0, n).select(0, c).select(0, 2).select(0, 1).item<float>());
    CHECK(allclose(from_channel_blocks(xb), x, 0, 0));
  }
}

TEST_CASE("conv2d_channel_block is 16 for f32 on AVX-512 CPUs (the direct paths below run there)",
          "[channel_blocks]") {
  Tensor x = zeros({1, 16, 2, 2});
  if (vector_isa() != VectorIsa::avx512) {
    CHECK(conv2d_channel_block(x) == 0);
    WARN("no AVX-512 on this CPU: the channel-blocked ops run their fallbacks only");
    return;
  }
  CHECK(conv2d_channel_block(x) == 16);
  CHECK(conv2d_channel_block(x.to(DType::f64)) == 0);
  AutocastGuard amp({.dtype = DType::bf16});
  CHECK(conv2d_channel_block(x) == 0);  // the convolution would run in bf16
}

TEST_CASE("batch_norm_relu_blocked equals the blocked batch_norm_relu in values, statistics and gradients",
          "[channel_blocks][bn_relu]") {
  manual_seed(11);
  for (DType dt : {DType::f32, DType::f64}) {
    double tol = dt == DType::f32 ? 2e-5 : 1e-12;
    for (bool training : {true, false})
      for (int64_t B : {16, 8}) {
        // S = 25: a 16-wide transpose and a tail; pieces of 16 + 8 + 8 channels (a block across two pieces)
        check_norm_against_composition({randn({3, 16, 5, 5}, {.dtype = dt}), randn({3, 8, 5, 5}, {.dtype = dt}),
                                        randn({3, 8, 5, 5}, {.dtype = dt}) * 2 + 1},
                                       training, B, tol);
        check_norm_against_composition({randn({2, 32, 3, 3}, {.dtype = dt})}, training, B, tol);  // S < 16
        // strided pieces: channels-last and a narrowed one
        check_norm_against_composition({randn({2, 4, 4, 16}, {.dtype = dt}).permute({0, 3, 1, 2}),
                                        randn({2, 20, 4, 4}, {.dtype = dt}).narrow(1, 2, 16)},
                                       training, B, tol);
      }
  }
}

TEST_CASE("batch_norm_relu_blocked keeps relu's NaN and zero rules", "[channel_blocks][bn_relu]") {
  Tensor x = randn({1, 16, 4, 5});
  x.select(1, 3).select(1, 2).fill_(std::nanf(""));
  Tensor rm = zeros({16}), rv = ones({16}) - 1e-5;
  Tensor xg = x.detach().requires_grad_(), xp = x.detach().requires_grad_();
  Tensor z = batch_norm_relu_blocked({xg}, {}, {}, rm, rv, false, 0.1, 1e-5, 16);
  Tensor y = batch_norm_relu({xp}, {}, {}, rm, rv, false);
  check_close_relative(from_channel_blocks(z), y, 1e-6);
  CHECK(std::isnan(from_channel_blocks(z).select(1, 3).select(1, 2).select(1, 0).item<float>()));
  z.sum().backward();
  y.sum().backward();
  check_close_relative(xg.grad(), xp.grad(), 0);
}

TEST_CASE("the Backend's composed batch_norm_relu_blocked (the CUDA path) equals the CPU's fused one",
          "[channel_blocks][bn_relu]") {
  manual_seed(12);
  Backend& be = backend_for(kCPU);
  for (bool training : {true, false}) {
    V xs{randn({2, 16, 5, 3}), randn({2, 16, 3, 5}).permute({0, 1, 3, 2})};
    Tensor w = rand({32}) + 0.5, b = rand({32}) - 0.5;
    Tensor rm1 = rand({32}), rv1 = rand({32}) + 0.5, rm2 = rm1.clone(), rv2 = rv1.clone();
    Tensor z1 = empty({2, 2, 5, 3, 16}), z2 = empty({2, 2, 5, 3, 16});
    Tensor m1 = empty({32}), m2 = empty({32}), i1 = empty({32}), i2 = empty({32});
    be.batch_norm_relu_blocked_forward(z1, m1, i1, xs, w, b, rm1, rv1, training, 0.1, 1e-5);
    be.Backend::batch_norm_relu_blocked_forward(z2, m2, i2, xs, w, b, rm2, rv2, training, 0.1, 1e-5);
    check_close_relative(z1, z2, 1e-6);
    check_close_relative(rm1, rm2, 1e-6);
    check_close_relative(rv1, rv2, 1e-6);
    Tensor gz = randn(z1.shape());
    V g1{empty({2, 16, 5, 3}), empty({2, 16, 5, 3})}, g2{empty({2, 16, 5, 3}), Tensor()};
    Tensor gw1 = empty({32}), gw2 = empty({32}), gb1 = empty({32}), gb2 = empty({32});
    be.batch_norm_relu_blocked_backward(g1, gw1, gb1, gz, xs, z1, w, m1, i1, training);
    be.Backend::batch_norm_relu_blocked_backward(g2, gw2, gb2, gz, xs, z1, w, m1, i1, training);
    check_close_relative(g1[0], g2[0], 1e-5);
    check_close_relative(gw1, gw2, 1e-4);
    check_close_relative(gb1, gb2, 1e-4);
  }
}

TEST_CASE("conv2d_blocked equals conv2d of the unblocked input, gradients included", "[channel_blocks][conv]") {
  manual_seed(13);
  Tensor x = randn({2, 32, 9, 7}), w = randn({8, 32, 3, 3}) * 0.1, b = randn({8});
  for (int64_t B : {16, 8}) {  // 16: oneDNN reads it directly on AVX-512; 8: the copies
    check_conv_against_composition(x, w, b, {.padding = 1}, B, 1e-4);
    check_conv_against_composition(x, w, Tensor(), {.stride = 2, .padding = {0, 1}}, B, 1e-4);
    check_conv_against_composition(x, randn({16, 32, 1, 1}), Tensor(), {}, B, 1e-4);  // 1x1: no GEMM lowering
    check_conv_against_composition(x, randn({8, 8, 3, 3}), b, {.padding = 1, .groups = 4}, B, 1e-4);
  }
  Tensor xd = x.to(DType::f64), wd = w.to(DType::f64), bd = b.to(DType::f64);
  check_conv_against_composition(xd, wd, bd, {.padding = 1}, 16, 1e-12);
}

TEST_CASE("under autocast conv2d_blocked runs in bf16 as conv2d does, its gradients in the inputs' dtypes",
          "[channel_blocks][conv][autocast]") {
  manual_seed(17);
  Tensor xb = to_channel_blocks(randn({2, 16, 5, 5}), 16).detach().requires_grad_();
  Tensor w = (randn({4, 16, 3, 3}) * 0.2).requires_grad_();
  Tensor x2 = xb.detach().clone().requires_grad_(), w2 = w.detach().clone().requires_grad_();
  Tensor y1, y2;
  {
    AutocastGuard amp({.dtype = DType::bf16});
    y1 = conv2d_blocked(xb, w, {}, {.padding = 1});
    y2 = conv2d(from_channel_blocks(x2), w2, {}, {.padding = 1});
  }
  CHECK(y1.dtype() == DType::bf16);
  check_close_relative(y1.to(DType::f32), y2.to(DType::f32), 0);
  y1.to(DType::f32).sum().backward();
  y2.to(DType::f32).sum().backward();
  CHECK(xb.grad().dtype() == DType::f32);
  check_close_relative(xb.grad(), x2.grad(), 1e-2);
  check_close_relative(w.grad(), w2.grad(), 1e-2);
}

TEST_CASE("the channel-blocked ops' gradients match finite differences", "[channel_blocks][grad]") {
  manual_seed(14);
  CHECK_GRADIENTS([](const V& v) { return batch_norm_relu_blocked({v[0], v[1]}, v[2], v[3], {}, {}, true, 0.1, 1e-5, 8); },
                  input({2, 4, 2, 3}), input({2, 4, 2, 3}), input({8}, 0.5, 1.5), input({8}));
  auto eval = [](const V& v) {
    Tensor rm = arange(-0.4, 0.4, 0.1, {.dtype = DType::f64}), rv = arange(0.5, 2.1, 0.2, {.dtype = DType::f64});
    return batch_norm_relu_blocked({v[0]}, v[1], {}, rm, rv, false, 0.1, 1e-5, 8);
  };
  CHECK_GRADIENTS(eval, input({2, 8, 3, 2}), input({8}, 0.5, 1.5));
  CHECK_GRADIENTS([](const V& v) { return conv2d_blocked(v[0], v[1], v[2], {.padding = 1}); },
                  input({2, 1, 3, 3, 8}), input({3, 8, 2, 2}), input({3}));
  CHECK_GRADIENTS([](const V& v) { return to_channel_blocks(v[0], 8); }, input({1, 16, 2, 2}));
  CHECK_GRADIENTS([](const V& v) { return from_channel_blocks(v[0]); }, input({1, 2, 2, 2, 8}));
  CHECK_SECOND_GRADIENTS(
      [](const V& v) { return square(batch_norm_relu_blocked({v[0]}, v[1], {}, {}, {}, true, 0.1, 1e-5, 8)); },
      input({3, 8, 1, 2}), input({8}, 0.5, 1.5));
  CHECK_SECOND_GRADIENTS([](const V& v) { return square(conv2d_blocked(v[0], v[1], {}, {.padding = 1})); },
                         input({1, 1, 3, 2, 8}), input({2, 8, 2, 2}));
}

TEST_CASE("create_graph through the f32 direct paths equals the composition's", "[channel_blocks][grad]") {
  manual_seed(15);
  Tensor x = randn({2, 16, 4, 4}), w = randn({4, 16, 3, 3}) * 0.2, nw = rand({16}) + 0.5;
  auto grad_norm = [&](bool blocked) {
    Tensor xi = x.detach().requires_grad_(), wi = w.detach().requires_grad_(), nwi = nw.detach().requires_grad_();
    Tensor y = blocked ? conv2d_blocked(batch_norm_relu_blocked({xi}, nwi, {}, {}, {}, true, 0.1, 1e-5, 16), wi, {},
                                        {.padding = 1})
                       : conv2d(batch_norm_relu({xi}, nwi, {}, {}, {}, true), wi, {}, {.padding = 1});
    V g = autograd::grad({square(y).sum()}, {xi, wi, nwi}, {}, {.create_graph = true});
    Tensor r = square(g[0]).sum() + square(g[1]).sum() + square(g[2]).sum();
    return autograd::grad({r}, {xi, wi, nwi});
  };
  V a = grad_norm(true), b = grad_norm(false);
  for (size_t i = 0; i < a.size(); ++i) check_close_relative(a[i], b[i], 1e-3);
}

TEST_CASE("DenseNet's layer gives the plain path's values and gradients through the blocked ops",
          "[channel_blocks][models]") {
  manual_seed(16);
  nn::models::DenseLayer layer(24, 8, 4, 0.0);  // 1x1 to 32 channels, BN-ReLU, 3x3 to 8
  layer.eval();                                  // the running statistics stay put across the two calls
  Tensor a = randn({2, 16, 6, 6}).requires_grad_(), b = randn({2, 8, 6, 6}).requires_grad_();
  Tensor y1 = layer({a, b});
  Tensor h = layer.conv1(layer.norm1.forward_relu({a, b}));
  Tensor y2 = layer.conv2(layer.norm2.forward_relu({h}));
  check_close_relative(y1, y2, 1e-5);
  V g1 = autograd::grad({(y1 * y1).sum()}, {a, b, layer.conv2.weight, layer.norm2.weight});
  V g2 = autograd::grad({(y2 * y2).sum()}, {a, b, layer.conv2.weight, layer.norm2.weight});
  for (size_t i = 0; i < g1.size(); ++i) check_close_relative(g1[i], g2[i], 1e-4);
}

TEST_CASE("the channel-blocked ops' errors name the op, what was expected and what came",
          "[channel_blocks][errors]") {
  auto message = [](auto f) { return reel::test::error_message(f); };
  std::string m = message([] { batch_norm_relu_blocked({zeros({2, 24, 3, 3})}, {}, {}, {}, {}, true, 0.1, 1e-5, 16); });
  CHECK_THAT(m, Catch::Contains("batch_norm_relu_blocked") && Catch::Contains("divisible") && Catch::Contains("24") &&
                    Catch::Contains("test_channel_blocks.cpp"));
  m = message([] { batch_norm_relu_blocked({zeros({2, 16, 3, 3})}, {}, {}, {}, {}, true, 0.1, 1e-5, 4); });
  CHECK_THAT(m, Catch::Contains("8 or 16") && Catch::Contains("got 4"));
  m = message([] { batch_norm_relu_blocked({zeros({2, 16, 3})}, {}, {}, {}, {}, true, 0.1, 1e-5, 16); });
  CHECK_THAT(m, Catch::Contains("[N, C, H, W]") && Catch::Contains("[2, 16, 3]"));
  m = message([] { conv2d_blocked(zeros({2, 16, 3, 3}), zeros({4, 16, 3, 3})); });
  CHECK_THAT(m, Catch::Contains("conv2d_blocked") && Catch::Contains("[N, C/B, H, W, B]") &&
                    Catch::Contains("[2, 16, 3, 3]"));
  m = message([] { conv2d_blocked(zeros({2, 1, 3, 3, 16}), zeros({4, 8, 3, 3})); });
  CHECK_THAT(m, Catch::Contains("conv2d_blocked") && Catch::Contains("16 channels") && Catch::Contains("[4, 8, 3, 3]"));
  m = message([] { conv2d_blocked(zeros({2, 1, 3, 3, 4}), zeros({4, 4, 3, 3})); });
  CHECK_THAT(m, Catch::Contains("8 or 16"));
  m = message([] { to_channel_blocks(zeros({2, 12, 3, 3}), 8); });
  CHECK_THAT(m, Catch::Contains("to_channel_blocks") && Catch::Contains("divisible"));
  nn::Conv2d conv(32, 4, 3);
  m = message([&] { conv.forward_blocked(zeros({2, 1, 5, 5, 16})); });
  CHECK_THAT(m, Catch::Contains("Conv2d") && Catch::Contains("forward_blocked") && Catch::Contains("[2, 1, 5, 5, 16]"));
}
