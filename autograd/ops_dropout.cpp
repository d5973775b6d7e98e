// Dropout: randomness in the graph. The mask comes from reel::rand on the given generator
// (or the thread's default one), so a seed, or a restored generator state, fixes it.
#include <cmath>

#include "../tensor/philox.h"
#include "op_support.h"
#include "ops.h"

namespace reel {

// y = x m, m_i = [u_i >= p] / (1 - p) with u_i ~ U[0, 1); dx = g m.
// Identity (x itself) when !training or p == 0; p == 1 gives zeros.
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
  Tensor mask = in_layout(mask_dtype), y = in_layout(x.dtype());
  if (p == 1.0) {
    if (mask.numel()) backend_of(x).fill(mask, 0.0);
    if (y.numel()) backend_of(x).binary(BinaryOp::mul, y, x, mask);
  } else if (mask.numel()) {
    // the uniforms rand(x.shape(), gen) would draw; f16/bf16 x: x m in f32, rounded once
    const uint64_t offset = gen.take(x.device(), philox::uniform_blocks(uint64_t(x.numel())));
    backend_of(x).dropout_forward(y, mask, x, p, gen.seed(), offset);
  }
  if (Node* n = record(op, [](Node& n, const std::vector<Tensor>& g, std::vector<Tensor>& gi) {
        const Tensor& m = n.saved_tensor(0);
        if (!grad_enabled() && is_low_precision(g[0].dtype()) && m.dtype() != g[0].dtype() &&
            g[0].shape() == m.shape()) {
          // f16/bf16 g: g m in f32 rounded once into g's dtype, the bits the engine's cast
          // of the f32 product gave, in one call (on the CPU one pass)
          Tensor gx = new_in_layout_of(g[0], g[0].shape(), g[0].dtype());
          backend_of(gx).binary(BinaryOp::mul, gx, g[0], m);
          gi[0] = gx;
          return;
        }
        gi[0] = mul(g[0], m);  // f32 for a bf16 x (create_graph): the engine casts it back
      }, {&x}, {&y}))
    n->save(mask);
  return y;
}

Tensor dropout(const Tensor& x, double p, bool training, Site site) {
  return dropout(x, p, default_generator(), training, site);
}

}  // namespace reel
