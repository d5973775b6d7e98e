// REEL_CUDA_CHANNELS_LAST=on (cuda/internal/channels_last.h): under autocast f16/bf16
// activations stay NHWC from one convolution to the next, cuDNN convolves them in NHWC with
// the filter as [O, kh, kw, I], and the values and gradients are the NCHW path's up to the
// rounding of another algorithm. Each test sets the switch itself and puts it back.
#include <vector>

#include "../channels_last_check.h"
#include "../low_precision_check.h"
#include "compare.h"

using namespace reel;
using reel::cuda_test::kGpu;
using reel::test::channels_last;
using reel::test::rel_error;
using reel::test::rounded;
using reel::test::to_channels_last;

namespace {
// the switch for one scope
struct HalfChannelsLast {
  bool before;
  explicit HalfChannelsLast(bool on) : before(cuda::half_channels_last()) { cuda::set_half_channels_last(on); }
  ~HalfChannelsLast() { cuda::set_half_channels_last(before); }
};

double tolerance(DType d) { return d == DType::bf16 ? 3e-2 : 1e-2; }
}  // namespace

TEST_CASE("the CUDA backend keeps halves channels-last only when switched on", "[cuda][channels_last]") {
  Backend& be = backend_for(kGpu);
  {
    HalfChannelsLast off(false);
    for (DType d : {DType::bf16, DType::f16, DType::f32}) CHECK_FALSE(be.channels_last(d));
  }
  HalfChannelsLast on(true);
  CHECK(be.channels_last(DType::bf16));
  CHECK(be.channels_last(DType::f16));
  CHECK_FALSE(be.channels_last(DType::f32));
  CHECK_FALSE(be.channels_last(DType::f64));
}

TEST_CASE("NHWC half convolutions match the CPU's f32 on the rounded inputs, values and gradients",
          "[cuda][channels_last]") {
  HalfChannelsLast on(true);
  manual_seed(31);
  struct Case {
    int64_t c, h, o, k, groups;
    Conv2dOptions opt;
    bool input_nhwc;
  };
  const std::vector<Case> cases{
      {16, 9, 8, 3, 1, {.padding = 1}, true},
      {16, 9, 24, 3, 1, {.stride = 2, .padding = 1}, true},
      {16, 11, 8, 3, 1, {.padding = 2, .dilation = 2}, true},
      {16, 8, 16, 3, 2, {.padding = 1, .groups = 2}, true},
      {16, 7, 32, 1, 1, {}, true},    // 1x1: [O, I, 1, 1] is KRSC as it lies
      {16, 5, 12, 5, 1, {}, true},    // the kernel covers the input: a product on NHWC rows
      {3, 12, 16, 3, 1, {.padding = 1}, false},  // an RGB first layer: x NCHW, copied
  };
  for (DType d : {DType::bf16, DType::f16}) {
    for (const Case& c : cases) {
      INFO(dtype_name(d) << " C " << c.c << " H " << c.h << " O " << c.o << " k " << c.k << " groups " << c.groups);
      Tensor x = rounded(randn({2, c.c, c.h, c.h}), d), w = rounded(randn({c.o, c.c / c.groups, c.k, c.k}) * 0.3, d);
      Tensor b = rounded(randn({c.o}), d);
      Tensor xc = x.clone().requires_grad_(), wc = w.clone().requires_grad_(), bc = b.clone().requires_grad_();
      Tensor yc = conv2d(xc, wc, bc, c.opt);
      Tensor gy = rounded(randn(yc.shape()), d);
      (yc * gy).sum().backward();

      Tensor xg = x.to(kGpu).to(d);
      if (c.input_nhwc) xg = to_channels_last(xg);
      xg.requires_grad_();
      Tensor wg = w.to(kGpu).to(d).requires_grad_(), bg = b.to(kGpu).to(d).requires_grad_();
      const uint64_t before = cuda::nhwc_convolutions();
      Tensor yg = conv2d(xg, wg, bg, c.opt);
      CHECK(yg.dtype() == d);
      const bool one_pixel = yg.size(2) * yg.size(3) == 1;
      CHECK(channels_last(yg) == !one_pixel);
      CHECK(rel_error(yg, yc) < 8e-3);
      // gy laid out as y, so that the input gradient is written channels-last too (it follows
      // the output gradient's layout); a leaf's .grad is its own contiguous copy whatever that is
      Tensor gyg = gy.to(kGpu).to(d);
      if (!one_pixel) gyg = to_channels_last(gyg);
      (yg * gyg).sum().backward();
      // the forward, and the data and filter gradients where their tensors are channels-last
      CHECK(cuda::nhwc_convolutions() >= before + (one_pixel ? 1 : 2));
      CHECK(rel_error(xg.grad(), xc.grad()) < tolerance(d));
      CHECK(rel_error(wg.grad(), wc.grad()) < tolerance(d));
      CHECK(rel_error(bg.grad(), bc.grad()) < tolerance(d));
    }
  }
}

TEST_CASE("a channels-last output of f32 or f64 handed to the backend gets the NCHW path's values",
          "[cuda][channels_last]") {
  // f32 runs cuDNN in NHWC (FMA math, no TF32); f64 convolves NCHW into a scratch tensor and copies
  HalfChannelsLast on(true);
  manual_seed(32);
  Backend& be = backend_for(kGpu);
  for (DType d : {DType::f32, DType::f64}) {
    INFO(dtype_name(d));
    Tensor x = randn({2, 8, 9, 9}, {.dtype = d}).to(kGpu), w = randn({12, 8, 3, 3}, {.dtype = d}).to(kGpu);
    ConvParams p;
    p.padding[0] = p.padding[1] = 1;
    Tensor plain = empty({2, 12, 9, 9}, {.dtype = d, .device = kGpu});
    be.conv2d_forward(plain, x, w, Tensor(), p, false);
    Tensor laid = to_channels_last(empty({2, 12, 9, 9}, {.dtype = d, .device = kGpu}));
    be.conv2d_forward(laid, to_channels_last(x), w, Tensor(), p, false);
    REQUIRE(channels_last(laid));
    CHECK(rel_error(laid, plain) < (d == DType::f64 ? 1e-12 : 1e-5));
    // the data gradient written channels-last, the filter gradient from channels-last x
    Tensor gy = randn({2, 12, 9, 9}, {.dtype = d}).to(kGpu);
    Tensor gx_plain = empty(x.shape(), {.dtype = d, .device = kGpu}), gx_laid = to_channels_last(gx_plain.clone());
    be.conv2d_backward_data(gx_plain, gy, w, p);
    be.conv2d_backward_data(gx_laid, to_channels_last(gy), w, p);
    CHECK(rel_error(gx_laid, gx_plain) < (d == DType::f64 ? 1e-12 : 1e-5));
    Tensor gw_plain = empty(w.shape(), {.dtype = d, .device = kGpu}), gw_laid = gw_plain.clone();
    be.conv2d_backward_weight(gw_plain, Tensor(), gy, x, p);
    be.conv2d_backward_weight(gw_laid, Tensor(), to_channels_last(gy), to_channels_last(x), p);
    CHECK(gw_laid.is_contiguous());  // the parameter's layout, whatever the activations'
    CHECK(rel_error(gw_laid, gw_plain) < (d == DType::f64 ? 1e-12 : 1e-5));
  }
}

TEST_CASE("a small CNN under autocast stays NHWC from convolution to convolution and trains as the NCHW one",
          "[cuda][channels_last]") {
  manual_seed(33);
  auto param = [](const Dims& shape, double scale) { return (randn(shape) * scale).to(kGpu).requires_grad_(); };
  Tensor x = randn({8, 3, 12, 12}, {.device = kGpu});
  Tensor labels = tensor({0, 1, 2, 3, 4, 5, 6, 7}, {.dtype = DType::i64}).to(kGpu);
  Tensor k1 = param({16, 3, 3, 3}, 0.3), b1 = param({16}, 0.1), g1 = param({16}, 1.0), h1 = param({16}, 0.1);
  Tensor k2 = param({32, 16, 3, 3}, 0.1), b2 = param({32}, 0.1), k3 = param({10, 32, 1, 1}, 0.2);
  std::vector<Tensor> params{k1, b1, g1, h1, k2, b2, k3};

  struct Run {
    Tensor loss;
    std::vector<Tensor> grads;
    std::vector<bool> layouts;  // channels-last: conv1, norm, relu, max pool, conv2, dropout, avg pool, conv3
  };
  auto run = [&](bool nhwc, DType d) {
    HalfChannelsLast layout(nhwc);
    for (Tensor& p : params) p.set_grad(Tensor());
    Tensor rm = zeros({16}, {.device = kGpu}), rv = ones({16}, {.device = kGpu});
    Run r;
    Generator gen(5);
    {
      AutocastGuard amp({.device = DeviceType::CUDA, .dtype = d});
      Tensor c1 = conv2d(x, k1, b1, {.padding = 1});
      Tensor n1 = batch_norm(c1, g1, h1, rm, rv, true);
      Tensor r1 = relu(n1);
      Tensor p1 = max_pool2d(r1, {.kernel = 2});
      Tensor c2 = conv2d(p1, k2, b2, {.stride = 2, .padding = 1});
      Tensor d2 = dropout(relu(c2), 0.25, gen, true);
      Tensor p2 = avg_pool2d(d2, {.kernel = 3, .stride = 1, .padding = 1});
      Tensor c3 = conv2d(p2, k3);
      r.loss = cross_entropy(adaptive_avg_pool2d(c3, 1, 1).flatten(1), labels);
      for (const Tensor* t : {&c1, &n1, &r1, &p1, &c2, &d2, &p2, &c3}) r.layouts.push_back(channels_last(*t));
    }
    r.loss.backward();
    for (Tensor& p : params) r.grads.push_back(p.grad().clone());
    return r;
  };
  for (DType d : {DType::bf16, DType::f16}) {
    INFO(dtype_name(d));
    Run plain = run(false, d);
    const uint64_t before = cuda::nhwc_convolutions();
    Run laid = run(true, d);
    // 3 forwards and the filter gradients of conv2 and conv3 (their x is NHWC); the adaptive
    // pool's gradient is NCHW (as on the CPU), so the data gradients after it run NCHW
    // (the H200 counted 6, 2026-11-29)
    CHECK(cuda::nhwc_convolutions() - before >= 5);
    for (bool l : plain.layouts) CHECK_FALSE(l);
    for (size_t i = 0; i < laid.layouts.size(); ++i) {
      INFO("activation " << i);
      CHECK(laid.layouts[i]);
    }
    CHECK(std::abs(laid.loss.item<double>() - plain.loss.item<double>()) < 2 * tolerance(d));
    for (size_t i = 0; i < params.size(); ++i) {
      INFO("parameter " << i);
      CHECK(laid.grads[i].dtype() == DType::f32);
      CHECK(rel_error(laid.grads[i], plain.grads[i]) < 2 * tolerance(d));
    }
  }
}
