// REEL_CUDA_HALF_NORM=cudnn (cuda/norm_cudnn.cpp, internal/half_norm.h): autocast's mixed
// batch norm of f16/bf16 activations, channels-last or row-major, through cuDNN against the
// staged path (f32 twins around reel's own kernels, or for row-major halves the cast to f32),
// values, running statistics and gradients; the calls it refuses still run, staged. Each test sets its switches and puts them back.
#include <vector>

#include "../channels_last_check.h"
#include "../low_precision_check.h"
#include "compare.h"

using namespace reel;
using reel::cuda_test::kGpu;
using reel::test::channels_last;
using reel::test::rel_error;
using reel::test::to_channels_last;

namespace {
struct Switches {
  bool layout;
  cuda::HalfNormPath norm;
  Switches(bool channels_last, cuda::HalfNormPath path)
      : layout(cuda::half_channels_last()), norm(cuda::half_norm_path()) {
    cuda::set_half_channels_last(channels_last);
    cuda::set_half_norm_path(path);
  }
  ~Switches() {
    cuda::set_half_channels_last(layout);
    cuda::set_half_norm_path(norm);
  }
};

struct Result {
  Tensor y, rm, rv;
  std::vector<Tensor> grads;  // the pieces', then weight's and bias's (undefined where none)
};

// batch_norm (one piece, relu false) or batch_norm_relu over pieces of dtype d, NHWC or (nhwc
// false, channels-last off) row-major, under autocast on the GPU, forward and backward through
// sum(y * gy)
Result run(cuda::HalfNormPath path, DType d, const std::vector<Tensor>& pieces_f32, const Tensor& weight,
           const Tensor& bias, bool running, bool training, bool relu, double eps, const Tensor& gy_f32,
           bool nhwc = true) {
  Switches on(nhwc, path);
  std::vector<Tensor> xs;
  for (const Tensor& p : pieces_f32) {
    Tensor x = p.to(kGpu).to(d);
    xs.push_back((nhwc ? to_channels_last(x) : x).requires_grad_());
  }
  Tensor w = weight.defined() ? weight.to(kGpu).requires_grad_() : Tensor();
  Tensor b = bias.defined() ? bias.to(kGpu).requires_grad_() : Tensor();
  const int64_t c = gy_f32.size(1);
  Result r;
  if (running) {
    r.rm = full({c}, 0.5, {.device = kGpu});
    r.rv = full({c}, 2.0, {.device = kGpu});
  }
  {
    AutocastGuard amp({.device = DeviceType::CUDA, .dtype = d});
    r.y = relu ? batch_norm_relu(xs, w, b, r.rm, r.rv, training, 0.1, eps)
               : batch_norm(xs[0], w, b, r.rm, r.rv, training, 0.1, eps);
  }
  // mixed (d in and out) where channels-last, or through cuDNN; row-major staged: cast to f32
  CHECK(r.y.dtype() == (nhwc || path == cuda::HalfNormPath::cudnn ? d : DType::f32));
  CHECK(channels_last(r.y) == nhwc);
  (r.y.to(DType::f32) * gy_f32.to(kGpu)).sum().backward();
  for (const Tensor& x : xs) {  // (a leaf's .grad is its own contiguous copy, whatever the layout)
    REQUIRE(x.grad().defined());
    r.grads.push_back(x.grad());
  }
  r.grads.push_back(w.defined() ? w.grad() : Tensor());
  r.grads.push_back(b.defined() ? b.grad() : Tensor());
  return r;
}

void check_close(const Result& got, const Result& want, DType d) {
  const double tol = d == DType::bf16 ? 1e-2 : 2e-3;  // a half rounding of f32 values summed in another order
  CHECK(rel_error(got.y, want.y) < tol);
  if (want.rm.defined()) {
    CHECK(rel_error(got.rm, want.rm) < 1e-5);
    CHECK(rel_error(got.rv, want.rv) < 1e-4);
  }
  REQUIRE(got.grads.size() == want.grads.size());
  for (size_t i = 0; i < want.grads.size(); ++i) {
    INFO("gradient " << i);
    CHECK(got.grads[i].defined() == want.grads[i].defined());
    if (want.grads[i].defined()) CHECK(rel_error(got.grads[i], want.grads[i]) < tol);
  }
}
}  // namespace

TEST_CASE("cuDNN's batch norm of NHWC halves matches the staged path: values, running statistics, gradients",
          "[cuda][channels_last][norm][half_norm]") {
  manual_seed(41);
  struct Case {
    Dims shape;
    bool affine, running, training;
    double eps;
  };
  const std::vector<Case> cases{
      {{4, 16, 7, 7}, true, true, true, 1e-5},
      {{2, 64, 14, 14}, true, true, true, 1e-3},  // another eps: the backward reads it from the saved invstd
      {{8, 24, 3, 5}, false, true, true, 1e-5},   // no weight, no bias
      {{4, 16, 7, 7}, true, false, true, 1e-5},   // no running statistics
      {{1, 8, 1, 3}, true, true, true, 1e-5},     // three values a channel
  };
  for (DType d : {DType::bf16, DType::f16}) {
    for (const Case& c : cases) {
      INFO(dtype_name(d) << " " << c.shape.str() << " affine " << c.affine << " running " << c.running);
      Tensor x = randn(c.shape) * 2 + 1, gy = randn(c.shape);
      Tensor w = c.affine ? randn({c.shape[1]}) : Tensor(), b = c.affine ? randn({c.shape[1]}) : Tensor();
      Result staged = run(cuda::HalfNormPath::staged, d, {x}, w, b, c.running, c.training, false, c.eps, gy);
      const uint64_t before = cuda::cudnn_norm_calls();
      Result fused = run(cuda::HalfNormPath::cudnn, d, {x}, w, b, c.running, c.training, false, c.eps, gy);
      CHECK(cuda::cudnn_norm_calls() == before + 2);  // the forward and the backward
      check_close(fused, staged, d);
    }
  }
}

TEST_CASE("cuDNN's batch norm serves batch_norm_relu, DenseNet's pieces joined, and evaluation forwards",
          "[cuda][channels_last][norm][half_norm]") {
  manual_seed(42);
  for (DType d : {DType::bf16, DType::f16}) {
    INFO(dtype_name(d));
    // one piece and three pieces of one [N, 40, H, W] norm, relu after
    const std::vector<Tensor> one{randn({4, 40, 6, 6})};
    const std::vector<Tensor> three{randn({4, 16, 6, 6}), randn({4, 8, 6, 6}), randn({4, 16, 6, 6})};
    Tensor w = randn({40}), b = randn({40}), gy = randn({4, 40, 6, 6});
    for (const auto* pieces : {&one, &three}) {
      INFO(pieces->size() << " pieces");
      Result staged = run(cuda::HalfNormPath::staged, d, *pieces, w, b, true, true, true, 1e-5, gy);
      const uint64_t before = cuda::cudnn_norm_calls();
      Result fused = run(cuda::HalfNormPath::cudnn, d, *pieces, w, b, true, true, true, 1e-5, gy);
      CHECK(cuda::cudnn_norm_calls() == before + 2);
      check_close(fused, staged, d);
    }
    // evaluation: cuDNN's inference forward; the backward (constant statistics) runs staged
    Result staged = run(cuda::HalfNormPath::staged, d, one, w, b, true, false, false, 1e-5, gy);
    const uint64_t before = cuda::cudnn_norm_calls();
    Result fused = run(cuda::HalfNormPath::cudnn, d, one, w, b, true, false, false, 1e-5, gy);
    CHECK(cuda::cudnn_norm_calls() == before + 1);
    check_close(fused, staged, d);
  }
}

TEST_CASE("cuDNN's batch norm of row-major halves matches the f32 cast path: values, statistics, gradients",
          "[cuda][norm][half_norm]") {
  // channels-last off, REEL_CUDA_HALF_NORM=cudnn: autocast keeps NCHW halves mixed (half in and
  // out, f32 statistics) and cuDNN runs them NCHW; staged casts them to f32 as before
  manual_seed(44);
  for (DType d : {DType::bf16, DType::f16}) {
    INFO(dtype_name(d));
    Tensor x = randn({4, 16, 7, 7}) * 2 + 1, gy = randn({4, 16, 7, 7}), w = randn({16}), b = randn({16});
    Result staged = run(cuda::HalfNormPath::staged, d, {x}, w, b, true, true, false, 1e-5, gy, false);
    uint64_t before = cuda::cudnn_norm_calls();
    Result fused = run(cuda::HalfNormPath::cudnn, d, {x}, w, b, true, true, false, 1e-5, gy, false);
    CHECK(cuda::cudnn_norm_calls() == before + 2);
    check_close(fused, staged, d);
    // batch_norm_relu over three pieces (joined NCHW), and an evaluation forward
    const std::vector<Tensor> three{randn({4, 16, 6, 6}), randn({4, 8, 6, 6}), randn({4, 16, 6, 6})};
    Tensor w40 = randn({40}), b40 = randn({40}), gy40 = randn({4, 40, 6, 6});
    staged = run(cuda::HalfNormPath::staged, d, three, w40, b40, true, true, true, 1e-5, gy40, false);
    before = cuda::cudnn_norm_calls();
    fused = run(cuda::HalfNormPath::cudnn, d, three, w40, b40, true, true, true, 1e-5, gy40, false);
    CHECK(cuda::cudnn_norm_calls() == before + 2);
    check_close(fused, staged, d);
    staged = run(cuda::HalfNormPath::staged, d, {x}, w, b, true, false, false, 1e-5, gy, false);
    before = cuda::cudnn_norm_calls();
    fused = run(cuda::HalfNormPath::cudnn, d, {x}, w, b, true, false, false, 1e-5, gy, false);
    CHECK(cuda::cudnn_norm_calls() == before + 1);  // the evaluation backward runs staged
    check_close(fused, staged, d);
  }
}

TEST_CASE("batch norms cuDNN does not take run staged with REEL_CUDA_HALF_NORM=cudnn",
          "[cuda][channels_last][norm][half_norm]") {
  manual_seed(43);
  Switches on(true, cuda::HalfNormPath::cudnn);
  const uint64_t before = cuda::cudnn_norm_calls();
  // f32 activations: reel's own kernels; a bf16 [N, C, L] under autocast: mixed (bf16 out),
  // but cuDNN's rule takes 4-d inputs only, so the staged mixed path runs it
  Tensor x32 = randn({4, 8, 5, 5}).to(kGpu), w = ones({8}, {.device = kGpu}), b = zeros({8}, {.device = kGpu});
  Tensor y32 = batch_norm(x32, w, b, Tensor(), Tensor(), true);
  CHECK(rel_error(y32, batch_norm(x32.cpu(), w.cpu(), b.cpu(), Tensor(), Tensor(), true)) < 1e-5);
  Tensor xh = randn({4, 8, 25}).to(kGpu).to(DType::bf16);
  {
    AutocastGuard amp({.device = DeviceType::CUDA, .dtype = DType::bf16});
    Tensor y = batch_norm(xh, w, b, Tensor(), Tensor(), true);
    CHECK(y.dtype() == DType::bf16);
    CHECK(rel_error(y, batch_norm(xh.cpu().to(DType::f32), w.cpu(), b.cpu(), Tensor(), Tensor(), true)) < 1e-2);
  }
  CHECK(cuda::cudnn_norm_calls() == before);
}
