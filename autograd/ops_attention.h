// Scaled dot-product attention as one op (PyTorch 2's F.scaled_dot_product_attention):
// a fused, flash-attention style kernel that never stores the L x S score matrix, in
// forward or backward; its memory grows linearly with the sequence lengths.
//
//   Tensor y = scaled_dot_product_attention(q, k, v, {.is_causal = true});  // GPT
//   Tensor y = scaled_dot_product_attention(q, k, v, {.attn_mask = keep, .dropout_p = 0.1});
#pragma once
#include <optional>

#include "../tensor/tensor.h"

namespace reel {

struct SdpaOptions {
  // bool (true: attend, PyTorch's convention) or q's floating dtype (added to the scores),
  // broadcastable to [..., L, S]; not differentiable. Undefined: no mask.
  Tensor attn_mask = {};
  double dropout_p = 0;  // on the attention weights, always applied when > 0 (pass 0 in eval)
  bool is_causal = false;  // query i attends keys j <= i (top-left aligned when L != S)
  std::optional<double> scale = std::nullopt;  // of the scores; default 1 / sqrt(E)
  Generator* generator = nullptr;  // for dropout; null: this thread's default generator
};

// q [..., L, E], k [..., S, E], v [..., S, Ev] (one leading shape, one floating dtype, one
// device) -> [..., L, Ev]: softmax(scale q k^T + mask) (dropped out) @ v. f16/bf16 compute
// with f32 softmax statistics and accumulation: in f32 twins of the inputs, rounded once,
// or fused in the half dtype where the backend has such a kernel (cuDNN's, on CUDA with
// REEL_CUDA_HALF_ATTENTION=cudnn; docs/cuda.md). Under autocast: f32, or the autocast
// dtype where that kernel serves it (docs/amp.md). A query row whose every
// key is masked gives zeros (and zero gradients), not NaN. The dropout mask is drawn
// from the generator once, in forward, and replayed from its seed and offset in backward.
// Differentiable in q, k, v once (a create_graph backward through it is an Error).
Tensor scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v, const SdpaOptions& opt = {},
                                    Site site = {});

}  // namespace reel
