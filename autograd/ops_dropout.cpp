// Dropout: randomness in the graph. The mask comes from reel::rand on the given generator
// (or the thread's default one), so a seed, or a restored generator state, fixes it.
#include <cmath>

#include "../tensor/philox.h"
#include "../tensor/shape.h"
#include "op_args_types.h"
#include "op_support.h"
#include "ops.h"

namespace reel {
using Grads = std::vector<Tensor>;

namespace {
// The mask a forward that kept none drew, f32 and contiguous: the backend's pass on ones
// (1 m is m exactly), or its general forward where it has no such pass
Tensor dropout_mask(const DropoutArgs& a, const Dims& shape, Device device) {
  Tensor one = ones(shape, {.dtype = DType::f32, .device = device});
  Tensor m = new_tensor(shape, DType::f32, device);
  if (m.numel() && !backend_of(one).dropout_apply(m, one, a.p, a.seed, a.offset))
    backend_of(one).dropout_forward(new_tensor(shape, DType::f32, device), m, one, a.p, a.seed, a.offset);
  return m;
}

// dx = g m. f16/bf16 g: g m in f32 rounded once into g's dtype, the bits the engine's
// cast of the f32 product gives, in one call
void dropout_backward(Node& n, const Grads& g, Grads& gi) {
  const DropoutArgs& a = n.args<DropoutArgs>();
  if (!a.mask_saved && !grad_enabled()) {
    // the forward's pass again, on g: g read once, no mask in memory (a dense g as it is)
    Tensor gin = g[0];
    if (!gin.is_contiguous() && !(gin.dim() == 4 && is_channels_last(gin.shape(), gin.strides())))
      gin = gin.contiguous();
    Tensor gx = new_tensor(gin.shape(), gin.dtype(), gin.device(), gin.strides());
    if (backend_of(gin).dropout_apply(gx, gin, a.p, a.seed, a.offset)) {
      gi[0] = gx;
      return;
    }
  }
  const Tensor m = a.mask_saved ? n.saved_tensor(0) : dropout_mask(a, g[0].shape(), g[0].device());
  if (!grad_enabled() && is_low_precision(g[0].dtype()) && m.dtype() != g[0].dtype() && g[0].shape() == m.shape()) {
    Tensor gx = new_in_layout_of(g[0], g[0].shape(), g[0].dtype());
    backend_of(gx).binary(BinaryOp::mul, gx, g[0], m);
    gi[0] = gx;
    return;
  }
  gi[0] = mul(g[0], m);  // f32 for a bf16 x (create_graph): the engine casts it back
}
}  // namespace

// y = x m, m_i = [u_i >= p] / (1 - p) with u_i ~ U[0, 1); dx = g m.
// Identity (x itself) when !training or p == 0; p == 1 gives zeros. Where the backend has
// a one-pass kernel for x (the CPU: f32 or bf16, contiguous or channels-last) the mask is
// not kept: backward draws it again from (p, seed, offset), the DropoutArgs on the tape
// (a GPT step on the CPU: 8 of 20 bytes an element less in the forward, no 116 MB of
// masks held until backward).
Tensor dropout(const Tensor& x, double p, Generator& gen, bool training, Site site) {
  OpScope op("dropout", site);
  check_defined(op, x, "the input");
  check_floating(op, x, "the input");
  if (!(p >= 0.0 && p <= 1.0)) fail(op.op, fmt::format("expected p in [0, 1], got {}", p), op.site);
  if (!training || p == 0.0) return x;
  // f16/bf16 inputs: the uniforms and the scale 1 / (1 - p) stay f32 (rounded to 8 bits
  // they would shift the keep probability and the scale by up to 0.4%); y rounds once
  const DType mask_dtype = is_low_precision(x.dtype()) ? DType::f32 : x.dtype();
  // mask, y and their temporaries take x's layout (channels-last activations stay so); the
  // uniforms are drawn in x's logical order whatever its layout, so a seed fixes one mask
  auto in_layout = [&](DType dt) { return new_in_layout_of(x, x.shape(), dt); };
  Tensor y = in_layout(x.dtype()), mask;
  DropoutArgs args{.p = p};
  if (p == 1.0) {
    mask = in_layout(mask_dtype);
    if (mask.numel()) backend_of(x).fill(mask, 0.0);
    if (y.numel()) backend_of(x).binary(BinaryOp::mul, y, x, mask);
  } else if (x.numel()) {
    // the uniforms rand(x.shape(), gen) would draw; f16/bf16 x: x m in f32, rounded once
    args.seed = gen.seed();
    args.offset = gen.take(x.device(), philox::uniform_blocks(uint64_t(x.numel())));
    args.mask_saved = !backend_of(x).dropout_apply(y, x, p, args.seed, args.offset);  // false: y in another layout
    if (args.mask_saved) {
      mask = in_layout(mask_dtype);
      backend_of(x).dropout_forward(y, mask, x, p, args.seed, args.offset);
    }
  } else {
    mask = in_layout(mask_dtype);
  }
  Node* n = record(op, dropout_backward, {&x}, {&y});
  if (n && args.mask_saved) n->save(mask);
  keep_args(op, n, args);
  return y;
}

Tensor dropout(const Tensor& x, double p, bool training, Site site) {
  return dropout(x, p, default_generator(), training, site);
}

}  // namespace reel
