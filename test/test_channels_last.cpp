// Channels-last bf16 activations (Backend::channels_last: NHWC memory behind the NCHW
// shape, what oneDNN's AMX bf16 convolutions read and write): the layout helpers, which
// ops keep the layout, and that keeping it changes no value. Each op is checked bit for
// bit against the same op on a contiguous copy of its input (the plain path, with its
// reorders and f32 twins), and a VGG block's loss and gradients against the block with
// every activation made contiguous. On CPUs without AMX the ops run plain, and the same
// comparisons hold.
#include <cmath>

#include "../tensor/low_precision_backend.h"
#include "channels_last_check.h"
#include "gradcheck.h"

using namespace reel;
using namespace reel::test;

TEST_CASE("channels_last_strides, is_channels_last and dense_strides describe NHWC memory", "[channels_last]") {
  CHECK(channels_last_strides({2, 3, 4, 5}) == Dims{60, 1, 15, 3});
  CHECK(is_channels_last({2, 3, 4, 5}, {60, 1, 15, 3}));
  CHECK(is_channels_last({1, 3, 4, 5}, {7, 1, 15, 3}));  // a size-1 dim's stride is free
  CHECK_FALSE(is_channels_last({2, 3, 4, 5}, {60, 20, 5, 1}));  // contiguous
  CHECK_FALSE(is_channels_last({2, 1, 4, 5}, {20, 1, 5, 1}));   // one channel: contiguous too
  CHECK_FALSE(is_channels_last({2, 3, 1, 1}, {3, 1, 3, 3}));    // one pixel: contiguous too
  CHECK_FALSE(is_channels_last({2, 3, 4}, {12, 4, 1}));
  CHECK(dense_strides({2, 3, 4, 5}, {60, 20, 5, 1}));
  CHECK(dense_strides({2, 3, 4, 5}, {60, 1, 15, 3}));
  CHECK(dense_strides({3, 4}, {1, 3}));  // a transpose
  CHECK(dense_strides({0, 4}, {0, 0}));  // empty
  CHECK_FALSE(dense_strides({3, 4}, {0, 1}));  // broadcast: overlaps
  CHECK_FALSE(dense_strides({3, 4}, {8, 1}));  // a slice: gaps
  CHECK_FALSE(dense_strides({3, 4}, {-4, 1}));
}

TEST_CASE("bf16 convolutions write channels-last where the backend keeps bf16 so, and the ops after keep it",
          "[channels_last][bf16]") {
  manual_seed(3);
  const bool cl = keeps_bf16_channels_last();
  // an image's few channels start the chain
  Tensor x = randn({2, 3, 6, 6}).to(DType::bf16), w = randn({16, 3, 3, 3}).to(DType::bf16);
  Tensor y = conv2d_relu(x, w, {}, {.padding = 1});
  CHECK(channels_last(y) == cl);
  CHECK(y.is_contiguous() == !cl);
  CHECK(channels_last(relu(y)) == cl);
  CHECK(channels_last(add(y, y)) == cl);
  CHECK(channels_last(dropout(y, 0.3, true)) == cl);
  CHECK(channels_last(max_pool2d(y, {.kernel = 2})) == cl);
  CHECK(channels_last(conv2d(y, randn({4, 16, 1, 1}).to(DType::bf16))) == cl);  // a 1x1 too
  // a single pixel and f32 convolutions stay plain; channels-last f32 (the f32 twins of
  // channels-last bf16) keeps its layout through elementwise ops
  CHECK(conv2d(x, randn({16, 3, 6, 6}).to(DType::bf16)).is_contiguous());
  CHECK(conv2d(x.to(DType::f32), w.to(DType::f32), {}, {.padding = 1}).is_contiguous());
  // a plain input of many channels (a norm's output) gives a plain output, which the op
  // after reads as it is; the same input channels-last continues the chain
  Tensor wide = randn({2, 16, 6, 6}).to(DType::bf16), w16 = randn({8, 16, 3, 3}).to(DType::bf16);
  CHECK(conv2d(wide, w16, {}, {.padding = 1}).is_contiguous());
  CHECK(channels_last(conv2d(to_channels_last(wide), w16, {}, {.padding = 1})) == cl);
  CHECK(channels_last(relu(to_channels_last(randn({2, 8, 6, 6})))) == cl);
  CHECK(channels_last(y.to(DType::f32)) == cl);
}

TEST_CASE("channels-last bf16 max pooling equals the plain path: values, indices, gradients", "[channels_last][bf16]") {
  manual_seed(5);
  Tensor base = randn({2, 24, 9, 10});
  // ties, NaNs and -inf exercise the first-maximum and last-NaN rules
  base.narrow(2, 0, 2).fill_(0.5);
  base.select(1, 3).select(1, 4).fill_(NAN);
  base.select(1, 5).fill_(-INFINITY);
  Tensor xb = to_channels_last(base.to(DType::bf16));
  REQUIRE(channels_last(xb));
  for (Pool2dOptions o : {Pool2dOptions{.kernel = 2}, Pool2dOptions{.kernel = 3, .stride = 2, .padding = 1},
                          Pool2dOptions{.kernel = 3, .stride = 1}, Pool2dOptions{.kernel = 2, .ceil_mode = true}}) {
    Tensor a = xb.detach().requires_grad_(), b = xb.contiguous().detach().requires_grad_();
    PoolWithIndices pa = max_pool2d_with_indices(a, o), pb = max_pool2d_with_indices(b, o);
    CHECK(channels_last(pa.values) == keeps_bf16_channels_last());
    CHECK(pb.values.is_contiguous());
    CHECK(same_values(pa.values, pb.values));
    CHECK(same_values(pa.indices, pb.indices));
    Tensor g = randn(pa.values.shape()).to(DType::bf16);
    g.select(1, 7).fill_(-0.0);  // the f32 sums turn -0 into +0
    g.select(1, 8).fill_(NAN);
    pa.values.backward(to_channels_last(g));  // the layout a convolution's gradient has
    pb.values.backward(g);
    CHECK(same_values(a.grad(), b.grad()));  // overlapping windows: sums in f32, one rounding
    CHECK_FALSE(std::signbit(a.grad().select(1, 7).max().item<float>()));  // == cannot tell -0 from +0
    CHECK_FALSE(std::signbit(b.grad().select(1, 7).max().item<float>()));
    a.set_grad(Tensor()), b.set_grad(Tensor());
    max_pool2d(a, o).backward(g);  // a plain gradient (after Flatten, say)
    max_pool2d(b, o).backward(g);
    CHECK(same_values(a.grad(), b.grad()));
  }
}

TEST_CASE("elementwise ops on channels-last bf16 give the plain path's bits; dropout the same mask for a seed",
          "[channels_last][bf16]") {
  manual_seed(6);
  Tensor p = to_channels_last(randn({2, 16, 5, 7}).to(DType::bf16)), q = to_channels_last(randn({2, 16, 5, 7}).to(DType::bf16));
  Tensor pc = p.contiguous(), qc = q.contiguous();
  CHECK(same_values(relu(p), relu(pc)));
  CHECK(same_values(add(p, q), add(pc, qc)));
  CHECK(same_values(mul(p, q), mul(pc, qc)));
  CHECK(same_values(add(p, qc), add(pc, qc)));  // mixed layouts
  CHECK(same_values(p.to(DType::f32), pc.to(DType::f32)));
  Tensor bias = randn({16, 1, 1}).to(DType::bf16);
  CHECK(same_values(add(p, bias), add(pc, bias)));  // a broadcast operand
  // f32 twins (casts keep the layout): the strided loops visit channels-last outputs in
  // memory order
  Tensor pf = p.to(DType::f32), qf = q.to(DType::f32);
  CHECK(channels_last(pf) == keeps_bf16_channels_last());
  CHECK(same_values(add(pf, qf), add(pc.to(DType::f32), qc.to(DType::f32))));
  CHECK(same_values(exp(pf), exp(pc.to(DType::f32))));
  CHECK(same_values(mul(pf, qc.to(DType::f32)), mul(pc.to(DType::f32), qc.to(DType::f32))));
  Generator g1(11), g2(11);
  Tensor da = dropout(p, 0.4, g1, true), db = dropout(pc, 0.4, g2, true);
  CHECK(same_values(da, db));
  // relu's gradient, on channels-last y and g
  Tensor a = p.detach().requires_grad_(), b = pc.detach().requires_grad_();
  relu(a).backward(q);
  relu(b).backward(qc);
  CHECK(same_values(a.grad(), b.grad()));
}

TEST_CASE("staged f32 twins of channels-last halves keep their layout for the elementwise kernels",
          "[channels_last][bf16]") {
  manual_seed(7);
  Tensor p = to_channels_last(randn({2, 16, 5, 7}).to(DType::bf16)), q = to_channels_last(randn({2, 16, 5, 7}).to(DType::bf16));
  Tensor pc = p.contiguous(), qc = q.contiguous();
  Backend& cpu = backend_for(kCPU);
  {
    low_precision::Stage keep(cpu, low_precision::Twins::as_source), plain(cpu);
    Tensor kt = keep.in(p), pt = plain.in(p);
    CHECK(kt.dtype() == DType::f32);
    CHECK(kt.strides() == p.strides());                    // NHWC twin: a flat conversion
    CHECK(pt.is_contiguous());                             // the default: row-major
    CHECK(keep.in(pc).is_contiguous());                    // row-major sources stay so
    Tensor sliced = p.slice(1, 0, 8);                      // not dense: a row-major twin
    CHECK(keep.in(sliced).is_contiguous());
    CHECK(same_values(kt, pt));
    CHECK(same_values(keep.in(sliced), sliced));
    Tensor w = to_channels_last(zeros({2, 16, 5, 7}).to(DType::bf16));
    Tensor wt = keep.out(w);
    CHECK(wt.strides() == w.strides());
    cpu.copy(wt, kt);
    keep.finish();                                         // rounds the twin back into w
    CHECK(same_values(w, p));
  }
  // NaN, inf and -inf through the twins, and an empty tensor (no twin written)
  {
    Tensor special = to_channels_last(tensor({NAN, INFINITY, -INFINITY, -0.0, 1.5, 2.0}).reshape({1, 2, 1, 3})
                                          .expand({2, 2, 2, 3}).contiguous().to(DType::bf16));
    REQUIRE(channels_last(special) == (special.size(1) > 1));
    low_precision::Stage keep(cpu, low_precision::Twins::as_source);
    CHECK(same_values(keep.in(special), special));
    CHECK(same_values(sigmoid(special), sigmoid(special.contiguous())));
    Tensor empty = to_channels_last(zeros({0, 4, 3, 3}).to(DType::bf16));
    CHECK(keep.in(empty).numel() == 0);
    CHECK(relu(empty).numel() == 0);
  }
  // the staged elementwise calls on channels-last operands give the row-major bits
  CHECK(same_values(where(gt(p, q), p, q), where(gt(pc, qc), pc, qc)));
  CHECK(same_values(sigmoid(p), sigmoid(pc)));
  Tensor a = p.clone(), b = pc.clone();
  a.add_(q, 0.5);
  b.add_(qc, 0.5);
  CHECK(same_values(a, b));
  Tensor ga = p.detach().requires_grad_(), gb = pc.detach().requires_grad_();
  tanh(ga).backward(q);
  tanh(gb).backward(qc);
  CHECK(same_values(ga.grad(), gb.grad()));
}

TEST_CASE("a VGG block under bf16 autocast keeps its activations channels-last and the plain block's bits",
          "[channels_last][bf16][autocast]") {
  manual_seed(8);
  nn::Sequential block{nn::Conv2d(3, 16, 3, {.padding = 1}), nn::ReLU(),       nn::Conv2d(16, 16, 3, {.padding = 1}),
                       nn::ReLU(),                           nn::MaxPool2d(2), nn::Dropout(0.25),
                       nn::Conv2d(16, 32, 3, {.padding = 1}), nn::ReLU(),      nn::MaxPool2d(2)};
  Tensor x = randn({4, 3, 12, 12});
  std::vector<std::vector<Tensor>> grads;
  std::vector<Tensor> outs;
  for (bool plain : {false, true}) {
    manual_seed(9);  // one dropout mask for both
    Tensor y;
    {
      AutocastGuard amp({.dtype = DType::bf16});
      y = x;
      for (size_t i = 0; i < block.size(); ++i) {
        y = block[i](y);
        if (plain) y = y.contiguous();  // the layout the ops had before channels-last
        else CHECK(channels_last(y) == keeps_bf16_channels_last());
      }
    }
    outs.push_back(y.to(DType::f32));
    block.zero_grad();
    sum(outs.back() * outs.back()).backward();
    grads.emplace_back();
    for (const Tensor& t : block.parameters()) grads.back().push_back(t.grad().clone());
  }
  CHECK(same_values(outs[0], outs[1]));
  for (size_t i = 0; i < grads[0].size(); ++i) {
    INFO("parameter " << i);
    CHECK(grads[0][i].dtype() == DType::f32);
    CHECK(same_values(grads[0][i], grads[1][i]));
  }
}

TEST_CASE("copies between channels-last and contiguous tensors keep every value, converting dtypes",
          "[channels_last]") {
  manual_seed(10);
  Tensor x = randn({3, 37, 5, 9});  // 37 channels and 45 pixels: tiles of 32 cut on both sides
  Tensor cl = to_channels_last(x);
  REQUIRE(channels_last(cl));
  CHECK(same_values(cl.contiguous(), x));  // channels-last -> contiguous
  for (DType d : {DType::f32, DType::bf16, DType::f16, DType::f64}) {
    INFO(dtype_name(d));
    Tensor into_cl = to_channels_last(zeros({3, 37, 5, 9}, {.dtype = d}));
    into_cl.copy_(x);  // contiguous f32 -> channels-last d
    CHECK(same_values(into_cl, x.to(d)));
    Tensor into_plain = zeros({3, 37, 5, 9}, {.dtype = d});
    into_plain.copy_(cl);  // channels-last f32 -> contiguous d
    CHECK(same_values(into_plain, x.to(d)));
  }
}
