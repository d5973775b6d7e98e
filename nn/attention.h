// Attention modules with PyTorch's semantics and parameter names, so that weights
// load from a PyTorch state dict: nn::MultiheadAttention and nn::TransformerEncoderLayer.
// Attention runs through the fused scaled_dot_product_attention (autograd/ops_attention.h)
// unless the averaged attention weights are asked for.
//
//   nn::TransformerEncoderLayer layer(384, 6, {.dim_feedforward = 1536, .batch_first = true,
//                                              .norm_first = true});
//   Tensor y = layer(x, {.is_causal = true});                    // x [B, T, 384]
//   nn::MultiheadAttention mha(64, 4, {.batch_first = true});
//   auto [out, w] = mha(q, k, v, {.key_padding_mask = pad, .need_weights = true});
#pragma once
#include <string>

#include "layers.h"
#include "module.h"

namespace reel::nn {

struct MultiheadAttentionOptions {
  double dropout = 0;  // on the attention weights, in training
  bool bias = true;    // in_proj_bias and out_proj.bias
  bool batch_first = false;  // inputs and output [B, L, E] instead of [L, B, E]
  Generator* generator = nullptr;  // for dropout; null: the calling thread's default generator
};

struct AttentionCall {
  // [B, S] (or [S] unbatched): bool, true = ignore that key (PyTorch's MHA convention,
  // the opposite of scaled_dot_product_attention's), or float, added to the scores.
  Tensor key_padding_mask = {};
  // [L, S] or [B num_heads, L, S]: bool, true = not allowed, or float, added.
  Tensor attn_mask = {};
  bool need_weights = false;  // also return the attention weights (the unfused path)
  bool average_attn_weights = true;  // weights averaged over heads [B, L, S], else [B, H, L, S]
  bool is_causal = false;  // a causal mask without materialising it (not with attn_mask)
};

struct AttentionOutput {
  Tensor output;   // [L, B, E] ([B, L, E] batch_first, [L, E] unbatched)
  Tensor weights;  // defined when need_weights: after dropout, as PyTorch 1.13 returns them
};

// Multi-head attention: q, k, v projected by in_proj_weight [3 E, E] (+ in_proj_bias [3 E]),
// split into num_heads heads of E / num_heads features, attended, concatenated and
// projected by out_proj (Linear(E, E)). query [L, B, E], key and value [S, B, E]
// (batch_first: [B, L, E], [B, S, E]; or unbatched [L, E], [S, E]).
class MultiheadAttention : public Module {
 public:
  MultiheadAttention(int64_t embed_dim, int64_t num_heads, MultiheadAttentionOptions opt = {});
  Tensor forward(const Tensor& x) override;  // self-attention, output only
  AttentionOutput forward(const Tensor& query, const Tensor& key, const Tensor& value, const AttentionCall& call = {});
  using Module::operator();
  AttentionOutput operator()(const Tensor& query, const Tensor& key, const Tensor& value,
                             const AttentionCall& call = {}, Site site = {});
  std::string type_name() const override { return "MultiheadAttention"; }
  std::string extra_repr() const override;
  void reset_parameters();  // xavier_uniform in_proj_weight, zero biases (as PyTorch)

  Tensor in_proj_weight, in_proj_bias;
  Linear out_proj;
  int64_t embed_dim, num_heads, head_dim;
  double dropout;
  bool batch_first;
  Generator* generator;
};

struct TransformerEncoderLayerOptions {
  int64_t dim_feedforward = 2048;
  double dropout = 0.1;
  std::string activation = "relu";  // or "gelu"
  double layer_norm_eps = 1e-5;
  bool batch_first = false;
  bool norm_first = false;  // pre-norm: x + sa(norm1(x)), x + ff(norm2(x)); else post-norm
  bool bias = true;
};

struct EncoderCall {
  Tensor src_mask = {};              // as AttentionCall::attn_mask
  Tensor src_key_padding_mask = {};  // as AttentionCall::key_padding_mask
  bool is_causal = false;
};

// PyTorch's TransformerEncoderLayer: self-attention then a feed-forward block
// (linear2(dropout(activation(linear1(x))))), each with dropout and a residual, layer
// norms after (post-norm) or before (norm_first). Children: self_attn, linear1, dropout,
// linear2, norm1, norm2, dropout1, dropout2.
class TransformerEncoderLayer : public Module {
 public:
  TransformerEncoderLayer(int64_t d_model, int64_t nhead, TransformerEncoderLayerOptions opt = {});
  Tensor forward(const Tensor& src) override;
  Tensor forward(const Tensor& src, const EncoderCall& call);
  using Module::operator();
  Tensor operator()(const Tensor& src, const EncoderCall& call, Site site = {});
  std::string type_name() const override { return "TransformerEncoderLayer"; }

  MultiheadAttention self_attn;
  Linear linear1;
  Dropout dropout;
  Linear linear2;
  LayerNorm norm1, norm2;
  Dropout dropout1, dropout2;
  bool norm_first;
  std::string activation;
};

}  // namespace reel::nn
