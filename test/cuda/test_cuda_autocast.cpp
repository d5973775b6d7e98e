// Autocast on CUDA: cuBLASLt and cuDNN in f16/bf16 with f32 accumulation, against the
// CPU's f32 kernels on the same rounded inputs; the dtypes autocast picks on a CUDA
// guard (and that a CPU guard leaves CUDA tensors alone); f32 gradients for f32 leaves;
// every other op on f16/bf16 CUDA tensors through the f32 twins of the low-precision layer.
#include <vector>

#include "../low_precision_check.h"
#include "compare.h"

using namespace reel;
using reel::cuda_test::close;
using reel::cuda_test::kGpu;
using reel::test::rel_error;
using reel::test::rounded;

TEST_CASE("CUDA f16/bf16 products match the CPU's f32 on the rounded inputs", "[cuda][autocast]") {
  manual_seed(11);
  for (DType d : {DType::bf16, DType::f16}) {
    INFO(dtype_name(d));
    Tensor a = rounded(randn({64, 96}), d), b = rounded(randn({96, 48}), d), bias = rounded(randn({48}), d);
    Tensor want = linear(a, b.t(), bias);
    Tensor ag = a.to(kGpu).to(d), bg = b.to(kGpu).to(d);
    Tensor got = linear(ag, bg.t(), bias.to(kGpu).to(d));
    CHECK(got.dtype() == d);
    CHECK(rel_error(got, want) < 8e-3);
    CHECK(rel_error(linear_relu(ag, bg.t(), bias.to(kGpu).to(d)), relu(want)) < 8e-3);  // the fused epilogue
    CHECK(rel_error(bmm(ag.reshape({4, 16, 96}), bg.expand({4, 96, 48})),
                    bmm(a.reshape({4, 16, 96}), b.expand({4, 96, 48}))) < 8e-3);
    Tensor x = rounded(randn({2, 4, 9, 9}), d), k = rounded(randn({8, 4, 3, 3}), d), kb = rounded(randn({8}), d);
    for (int64_t stride : {1, 2}) {
      Conv2dOptions o{.stride = {stride, stride}, .padding = {1, 1}};
      Tensor y = conv2d_relu(x.to(kGpu).to(d), k.to(kGpu).to(d), kb.to(kGpu).to(d), o);
      CHECK(y.dtype() == d);
      CHECK(rel_error(y, conv2d_relu(x, k, kb, o)) < 8e-3);
    }
  }
}

TEST_CASE("CUDA autocast picks PyTorch's dtypes and keeps f32 gradients for f32 leaves", "[cuda][autocast]") {
  manual_seed(12);
  Tensor x = randn({8, 3, 10, 10}, {.device = kGpu});
  Tensor k = (randn({6, 3, 3, 3}) * 0.2).to(kGpu).requires_grad_(), kb = zeros({6}, {.device = kGpu}).requires_grad_();
  Tensor w = (randn({5, 6 * 5 * 5}) * 0.1).to(kGpu).requires_grad_(), b = zeros({5}, {.device = kGpu}).requires_grad_();
  Tensor labels = tensor({0, 1, 2, 3, 4, 0, 1, 2}, {.dtype = DType::i64}).to(kGpu);
  auto loss_of = [&](bool check_dtypes) {
    Tensor c = conv2d(x, k, kb, {.padding = {1, 1}});
    Tensor h = avg_pool2d(c, {.kernel = {2, 2}});
    Tensor logits = linear(h.flatten(1), w, b);
    Tensor loss = cross_entropy(logits, labels);
    if (check_dtypes) {
      CHECK(c.dtype() == DType::bf16);
      CHECK(logits.dtype() == DType::bf16);
      CHECK(loss.dtype() == DType::f32);
    }
    return loss;
  };
  std::vector<Tensor> params{k, kb, w, b}, ref;
  loss_of(false).backward();
  for (Tensor& p : params) ref.push_back(p.grad().clone()), p.set_grad(Tensor());
  {
    AutocastGuard cpu_only({.device = DeviceType::CPU, .dtype = DType::bf16});
    CHECK(linear(x.flatten(1).narrow(1, 0, 150), w).dtype() == DType::f32);  // a CUDA op: left alone
  }
  Tensor loss;
  {
    AutocastGuard amp({.device = DeviceType::CUDA, .dtype = DType::bf16});
    loss = loss_of(true);
  }
  loss.backward();
  for (size_t i = 0; i < params.size(); ++i) {
    INFO("parameter " << i);
    REQUIRE(params[i].grad().defined());
    CHECK(params[i].grad().dtype() == DType::f32);
    CHECK(params[i].grad().device().is_cuda());
    CHECK(rel_error(params[i].grad(), ref[i]) < 3e-2);
  }
}

TEST_CASE("CUDA elementwise, pooling and norms read f16/bf16 and compute in f32", "[cuda][autocast]") {
  manual_seed(13);
  Tensor a = rounded(randn({4, 8, 6, 6}), DType::bf16), b = rounded(randn({4, 8, 6, 6}), DType::bf16);
  for (DType d : {DType::bf16, DType::f16}) {
    INFO(dtype_name(d));
    Tensor ag = a.to(kGpu).to(d), bg = b.to(kGpu).to(d);
    CHECK(close((ag * bg).to(DType::f32).cpu(), rounded(a * b, d), 0, 0) == "");
    CHECK(close(relu(ag).to(DType::f32).cpu(), rounded(relu(a), d), 0, 0) == "");
    CHECK(close(max_pool2d(ag, {.kernel = {2, 2}}).to(DType::f32).cpu(), rounded(max_pool2d(a, {.kernel = {2, 2}}), d),
                0, 0) == "");
    CHECK(rel_error(softmax(ag, 1), softmax(a, 1)) < 1e-2);
    CHECK(rel_error(layer_norm(ag, {6}), layer_norm(a, {6})) < 2e-2);
  }
}
