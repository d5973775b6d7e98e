// Backend's composed defaults: fused kernels spelled as the primitive kernels they fuse,
// for backends without a one-pass version (CUDA; f16/bf16 staging reaches the inner one).
#include "backend.h"

namespace reel {
namespace {

// The pieces (each [N, C_j, *]) joined along dim 1 into one new tensor of `shape`.
Tensor concatenated(Backend& b, const std::vector<Tensor>& xs, const Dims& shape) {
  Tensor x = empty(shape, {.dtype = xs[0].dtype(), .device = xs[0].device()});
  int64_t c0 = 0;
  for (const Tensor& p : xs) {
    if (p.numel()) b.copy(storage_view(x, p.shape(), x.strides(), c0 * x.strides()[1]), p);
    c0 += p.shape()[1];
  }
  return x;
}

}  // namespace

void Backend::dropout_forward(const Tensor& y, const Tensor& mask, const Tensor& x, double p, uint64_t seed,
                              uint64_t offset) {
  const Device d = x.device();
  Tensor u = empty(x.shape(), {.dtype = mask.dtype(), .device = d});
  fill_uniform(u, 0.0, 1.0, seed, offset);
  // a new tensor laid out as mask (dense: contiguous or channels-last)
  auto like_mask = [&](DType dt) {
    return storage_view(empty({mask.numel()}, {.dtype = dt, .device = d}), mask.shape(), mask.strides(), 0);
  };
  if (!mask.is_contiguous()) {  // into the layout in one tiled copy, not in each kernel after
    Tensor laid = like_mask(mask.dtype());
    copy(laid, u);
    u = laid;
  }
  Tensor keep = like_mask(DType::boolean);
  unary(UnaryOp::ge_scalar, keep, u, p);
  copy(mask, keep);
  unary(UnaryOp::mul_scalar, mask, mask, 1.0 / (1.0 - p));
  binary(BinaryOp::mul, y, x, mask);
}

void Backend::batch_norm_relu_forward(const Tensor& out, const Tensor& save_mean, const Tensor& save_invstd,
                                      const std::vector<Tensor>& xs, const Tensor& weight, const Tensor& bias,
                                      const Tensor& running_mean, const Tensor& running_var, bool training,
                                      double momentum, double eps) {
  Tensor x = xs.size() == 1 ? xs[0] : concatenated(*this, xs, out.shape());
  batch_norm_forward(out, save_mean, save_invstd, x, weight, bias, running_mean, running_var, training, momentum,
                     eps);
  unary(UnaryOp::relu, out, out);
}

void Backend::batch_norm_relu_backward(const std::vector<Tensor>& gxs, const Tensor& gw, const Tensor& gb,
                                       const Tensor& gy, const std::vector<Tensor>& xs, const Tensor& y,
                                       const Tensor& weight, const Tensor& save_mean, const Tensor& save_invstd,
                                       bool training) {
  Tensor x = xs.size() == 1 ? xs[0] : concatenated(*this, xs, y.shape());
  Tensor g = empty(y.shape(), {.dtype = y.dtype(), .device = y.device()});
  binary(BinaryOp::relu_backward, g, gy, y);
  bool direct = xs.size() == 1 && gxs[0].defined();  // the one piece's gradient is the whole
  Tensor gx = direct ? gxs[0] : empty(y.shape(), {.dtype = y.dtype(), .device = y.device()});
  batch_norm_backward(gx, gw, gb, g, x, weight, save_mean, save_invstd, training);
  if (direct) return;
  int64_t c0 = 0;
  for (size_t j = 0; j < xs.size(); ++j) {
    if (gxs[j].defined() && gxs[j].numel())
      copy(gxs[j], storage_view(gx, gxs[j].shape(), gx.strides(), c0 * gx.strides()[1]));
    c0 += xs[j].shape()[1];
  }
}

namespace {
// block cb of blocked [N, C/B, *, B] seen as [N, B, *] (element i of the block is channel cb B + i)
Tensor block_view(const Tensor& blocked, int64_t cb) {
  const int d = blocked.dim();
  Dims shape{blocked.shape()[0], blocked.shape()[d - 1]}, strides{blocked.strides()[0], blocked.strides()[d - 1]};
  for (int k = 2; k < d - 1; ++k) shape.push_back(blocked.shape()[k]), strides.push_back(blocked.strides()[k]);
  return storage_view(blocked, shape, strides, blocked.offset() + cb * blocked.strides()[1]);
}
// channels [cb B, cb B + B) of plain [N, C, *]
Tensor channel_view(const Tensor& plain, int64_t cb, int64_t B) {
  Dims shape = plain.shape();
  shape[1] = B;
  return storage_view(plain, shape, plain.strides(), plain.offset() + cb * B * plain.strides()[1]);
}
}  // namespace

void copy_to_channel_blocks(const Tensor& blocked, const Tensor& plain) {
  if (!blocked.numel()) return;
  for (int64_t cb = 0; cb < blocked.shape()[1]; ++cb)
    backend_for(plain.device()).copy(block_view(blocked, cb), channel_view(plain, cb, blocked.shape()[blocked.dim() - 1]));
}

void copy_from_channel_blocks(const Tensor& plain, const Tensor& blocked) {
  if (!blocked.numel()) return;
  for (int64_t cb = 0; cb < blocked.shape()[1]; ++cb)
    backend_for(plain.device()).copy(channel_view(plain, cb, blocked.shape()[blocked.dim() - 1]), block_view(blocked, cb));
}

void Backend::batch_norm_relu_blocked_forward(const Tensor& out, const Tensor& save_mean, const Tensor& save_invstd,
                                              const std::vector<Tensor>& xs, const Tensor& weight, const Tensor& bias,
                                              const Tensor& running_mean, const Tensor& running_var, bool training,
                                              double momentum, double eps) {
  Dims shape = xs[0].shape();
  shape[1] = save_mean.numel();
  Tensor y = empty(shape, {.dtype = out.dtype(), .device = out.device()});
  batch_norm_relu_forward(y, save_mean, save_invstd, xs, weight, bias, running_mean, running_var, training, momentum,
                          eps);
  copy_to_channel_blocks(out, y);
}

void Backend::batch_norm_relu_blocked_backward(const std::vector<Tensor>& gxs, const Tensor& gw, const Tensor& gb,
                                               const Tensor& gz, const std::vector<Tensor>& xs, const Tensor& z,
                                               const Tensor& weight, const Tensor& save_mean,
                                               const Tensor& save_invstd, bool training) {
  Dims shape = xs[0].shape();
  shape[1] = save_mean.numel();
  Tensor g = empty(shape, {.dtype = z.dtype(), .device = z.device()}), y = empty(shape, {.dtype = z.dtype(), .device = z.device()});
  copy_from_channel_blocks(g, gz);
  copy_from_channel_blocks(y, z);
  batch_norm_relu_backward(gxs, gw, gb, g, xs, y, weight, save_mean, save_invstd, training);
}

}  // namespace reel
