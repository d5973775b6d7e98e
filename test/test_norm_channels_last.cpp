// Batch norm, average pooling, add_relu and 1x1 weight gradients on channels-last bf16
// activations (the layout bf16 convolutions write on AMX CPUs, Backend::channels_last).
// Under autocast a batch norm of such activations stays bf16 in and out with f32
// parameters and statistics (PyTorch's CPU mixed batch norm): checked against the f32 norm
// of the same values, to bf16's rounding of the output. Pooling and add_relu are checked
// bit for bit against the plain path (contiguous input, f32 twins); the 1x1 weight
// gradient against f32. On CPUs without AMX the norm casts to f32, as docs/amp.md's table
// says, and the same comparisons hold exactly.
#include <cmath>

#include "channels_last_check.h"
#include "gradcheck.h"

using namespace reel;
using namespace reel::test;

namespace {

// |a - b| <= rel |b| + abs elementwise (NaN where NaN); the worst element named on failure
void check_close(const Tensor& a, const Tensor& b, double rel, double abs, const char* what) {
  INFO(what);
  REQUIRE(a.shape() == b.shape());
  std::vector<double> x = a.to_vector<double>(), y = b.to_vector<double>();
  size_t worst = 0;
  double excess = -1;
  for (size_t i = 0; i < x.size(); ++i) {
    if (std::isnan(x[i]) || std::isnan(y[i])) {
      CHECK(std::isnan(x[i]) == std::isnan(y[i]));
      continue;
    }
    double e = std::abs(x[i] - y[i]) - (rel * std::abs(y[i]) + abs);
    if (e > excess) excess = e, worst = i;
  }
  INFO("element " << worst << ": " << x[worst] << " against " << y[worst]);
  CHECK(excess <= 0);
}

struct NormParams {
  Tensor w, b, rm, rv;
};
NormParams norm_params(int64_t C) {
  NormParams p{(randn({C}) * 0.5 + 1).requires_grad_(), randn({C}).requires_grad_(), randn({C}) * 0.1,
               rand({C}) + 0.5};
  return p;
}
NormParams copy_of(const NormParams& p) {
  return {p.w.detach().clone().requires_grad_(), p.b.detach().clone().requires_grad_(), p.rm.clone(), p.rv.clone()};
}

}  // namespace

TEST_CASE("batch norm of channels-last bf16 under autocast: bf16 channels-last out, f32 statistics, f32's values",
          "[channels_last][bf16][autocast][norm]") {
  manual_seed(21);
  const bool cl = keeps_bf16_channels_last();
  // a mean far from 0 against a small spread: sums about the first value keep the variance
  Tensor base = randn({4, 24, 5, 7}) * 0.25 + 40;
  base.select(1, 3).mul_(100);  // a channel of large values
  Tensor xb = to_channels_last(base.to(DType::bf16));
  for (bool training : {true, false}) {
    INFO("training " << training);
    NormParams p = norm_params(24), q = copy_of(p);
    Tensor a = xb.detach().requires_grad_(), r = xb.to(DType::f32).contiguous().detach().requires_grad_();
    Tensor y;
    {
      AutocastGuard amp({.dtype = DType::bf16});
      y = batch_norm(a, p.w, p.b, p.rm, p.rv, training, 0.1, 1e-5);
    }
    Tensor ref = batch_norm(r, q.w, q.b, q.rm, q.rv, training, 0.1, 1e-5);
    CHECK(y.dtype() == (cl ? DType::bf16 : DType::f32));
    CHECK(channels_last(y) == cl);
    check_close(y.to(DType::f32), ref, cl ? 1.0 / 256 : 0, cl ? 1e-3 : 0, "output");
    check_close(p.rm, q.rm, 1e-6, 1e-6, "running mean");
    check_close(p.rv, q.rv, 1e-5, 1e-6, "running variance");
    Tensor g = randn(y.shape());
    y.backward(cl ? to_channels_last(g.to(DType::bf16)) : g);  // a convolution's gradient layout
    ref.backward(cl ? g.to(DType::bf16).to(DType::f32) : g);
    CHECK(a.grad().dtype() == DType::bf16);
    CHECK(p.w.grad().dtype() == DType::f32);
    check_close(a.grad().to(DType::f32), r.grad().to(DType::bf16).to(DType::f32), cl ? 1.0 / 128 : 0,
                cl ? 2e-2 : 0, "input gradient");
    check_close(p.w.grad(), q.w.grad(), 1e-4, 1e-4, "weight gradient");
    check_close(p.b.grad(), q.b.grad(), 1e-5, 1e-5, "bias gradient");
  }
}

TEST_CASE("batch_norm_relu over channels-last bf16 pieces under autocast: f32's values, gradients per piece",
          "[channels_last][bf16][autocast][norm]") {
  manual_seed(22);
  const bool cl = keeps_bf16_channels_last();
  std::vector<Tensor> pieces, plain;
  for (int64_t c : {8, 16, 40}) {  // a DenseNet layer's input: the block's feature maps
    Tensor t = to_channels_last((randn({3, c, 6, 5}) + 0.3).to(DType::bf16));
    pieces.push_back(t.detach().requires_grad_());
    plain.push_back(t.to(DType::f32).contiguous().detach().requires_grad_());
  }
  pieces[1].detach().select(1, 2).select(1, 1).fill_(NAN);  // a NaN stays in its channel
  plain[1].detach().select(1, 2).select(1, 1).fill_(NAN);
  for (bool training : {true, false}) {
    INFO("training " << training);
    NormParams p = norm_params(64), q = copy_of(p);
    Tensor y;
    {
      AutocastGuard amp({.dtype = DType::bf16});
      y = batch_norm_relu(pieces, p.w, p.b, p.rm, p.rv, training);
    }
    Tensor ref = batch_norm_relu(plain, q.w, q.b, q.rm, q.rv, training);
    CHECK(y.dtype() == (cl ? DType::bf16 : DType::f32));
    CHECK(channels_last(y) == cl);
    check_close(y.to(DType::f32), ref, cl ? 1.0 / 256 : 0, cl ? 1e-3 : 0, "output");
    check_close(p.rm, q.rm, 1e-6, 1e-6, "running mean");
    check_close(p.rv, q.rv, 1e-5, 1e-6, "running variance");
    if (training) CHECK(std::isnan(y.select(1, 10).sum().item<float>()));  // piece 1's channel 2
    CHECK_FALSE(std::isnan(y.select(1, 11).sum().item<float>()));
    Tensor g = randn(y.shape());
    y.backward(cl ? to_channels_last(g.to(DType::bf16)) : g);
    ref.backward(cl ? g.to(DType::bf16).to(DType::f32) : g);
    for (size_t j = 0; j < pieces.size(); ++j) {
      INFO("piece " << j);
      CHECK(pieces[j].grad().dtype() == DType::bf16);
      check_close(pieces[j].grad().to(DType::f32), plain[j].grad().to(DType::bf16).to(DType::f32),
                  cl ? 1.0 / 128 : 0, cl ? 2e-2 : 0, "input gradient");
      pieces[j].set_grad(Tensor()), plain[j].set_grad(Tensor());
    }
    check_close(p.w.grad(), q.w.grad(), 1e-4, 1e-4, "weight gradient");
    check_close(p.b.grad(), q.b.grad(), 1e-5, 1e-5, "bias gradient");
  }
}

TEST_CASE("a mixed batch norm's second derivatives run in f32 and agree with the first", "[channels_last][bf16][norm][grad2]") {
  manual_seed(23);
  Tensor x = to_channels_last(randn({2, 8, 4, 4}).to(DType::bf16)).requires_grad_();
  NormParams p = norm_params(8);
  Tensor y;
  {
    AutocastGuard amp({.dtype = DType::bf16});
    y = batch_norm(x, p.w, p.b, p.rm, p.rv, true);
  }
  Tensor g = to_channels_last(randn(y.shape()).to(y.dtype()));
  auto first = autograd::grad({y}, {x, p.w}, {g}, {.retain_graph = true});
  auto graph = autograd::grad({y}, {x, p.w}, {g}, {.create_graph = true});
  CHECK(graph[0].dtype() == DType::bf16);
  CHECK(graph[1].dtype() == DType::f32);
  check_close(graph[0].to(DType::f32), first[0].to(DType::f32), 1.0 / 64, 2e-2, "input gradient");
  check_close(graph[1], first[1], 1e-4, 1e-4, "weight gradient");
  // d/dw of sum(dx^2): defined, finite, through the f32 rule
  Tensor gw = autograd::grad({sum(graph[0].to(DType::f32) * graph[0].to(DType::f32))}, {p.w})[0];
  CHECK(gw.dtype() == DType::f32);
  CHECK(std::isfinite(gw.abs().sum().item<float>()));
}

TEST_CASE("channels-last bf16 average pooling and add_relu give the plain path's bits", "[channels_last][bf16]") {
  manual_seed(24);
  Tensor base = randn({2, 20, 9, 10});
  base.select(1, 4).select(1, 3).fill_(NAN);
  Tensor xb = to_channels_last(base.to(DType::bf16));
  for (Pool2dOptions o : {Pool2dOptions{.kernel = 2}, Pool2dOptions{.kernel = 3, .stride = 2, .padding = 1},
                          Pool2dOptions{.kernel = 3, .stride = 2, .padding = 1, .count_include_pad = false},
                          Pool2dOptions{.kernel = 2, .ceil_mode = true}}) {
    Tensor a = xb.detach().requires_grad_(), b = xb.contiguous().detach().requires_grad_();
    Tensor ya = avg_pool2d(a, o), yb = avg_pool2d(b, o);
    CHECK(channels_last(ya) == keeps_bf16_channels_last());
    CHECK(yb.is_contiguous());
    CHECK(same_values(ya, yb));
    Tensor g = randn(ya.shape()).to(DType::bf16);
    ya.backward(to_channels_last(g));
    yb.backward(g);
    CHECK(same_values(a.grad(), b.grad()));  // overlapping windows: f32 sums, one rounding
    a.set_grad(Tensor()), b.set_grad(Tensor());
    avg_pool2d(a, o).backward(g);  // a plain gradient
    avg_pool2d(b, o).backward(g);
    CHECK(same_values(a.grad(), b.grad()));
  }
  Tensor p = to_channels_last(randn({2, 16, 5, 7}).to(DType::bf16)), q = to_channels_last(randn({2, 16, 5, 7}).to(DType::bf16));
  p.select(1, 1).fill_(NAN);
  q.select(1, 2).fill_(-0.0);
  p.select(1, 2).fill_(0.0);  // 0 + -0: +0
  Tensor s = add_relu(p, q), t = add_relu(p.contiguous(), q.contiguous());
  CHECK(channels_last(s) == keeps_bf16_channels_last());
  CHECK(same_values(s, t));
  CHECK(same_values(s, relu(add(p.to(DType::f32), q.to(DType::f32))).to(DType::bf16)));
  CHECK_FALSE(std::signbit(s.select(1, 2).min().item<float>()));
}

TEST_CASE("a 1x1 convolution's weight gradient on channels-last bf16 (one long product) matches f32",
          "[channels_last][bf16][conv]") {
  manual_seed(25);
  const bool cl = keeps_bf16_channels_last();
  Tensor x = to_channels_last(randn({3, 40, 9, 11}).to(DType::bf16));
  Tensor w = randn({24, 40, 1, 1}).requires_grad_(), wr = w.detach().clone().requires_grad_();
  Tensor y;
  {
    AutocastGuard amp({.dtype = DType::bf16});
    y = conv2d(x, w);
  }
  CHECK(channels_last(y) == cl);
  Tensor g = to_channels_last(randn(y.shape()).to(DType::bf16));
  y.backward(g);
  // f32 on the same (bf16) values: the sums differ only in order and in f32 rounding
  conv2d(x.to(DType::f32).contiguous(), wr).backward(g.to(DType::f32).contiguous());
  CHECK(w.grad().dtype() == DType::f32);
  check_close(w.grad(), wr.grad(), 1e-4, 1e-4, "weight gradient");
}
