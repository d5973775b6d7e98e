// MultiheadAttention and TransformerEncoderLayer (nn/attention.h): PyTorch 1.13's
// F.multi_head_attention_forward and nn.TransformerEncoderLayer, with the attention on
// the fused scaled_dot_product_attention. PyTorch's masks say true = masked; SDPA's say
// true = attend: the conversion happens once, in merged_mask.
#include "attention.h"

#include <fmt/format.h>

#include <cmath>

#include "../autograd/ops.h"
#include "../autograd/ops_attention.h"
#include "../autograd/ops_everyday.h"
#include "init.h"

namespace reel::nn {

namespace {

const Site kNoSite{nullptr, 0};

// A mask in PyTorch's MHA convention (bool: true = masked; float: added), already shaped
// to broadcast against [B, H, L, S], merged with another: the bool masks or'ed, a float
// one added (a bool one becoming -inf where masked).
Tensor merge(const Tensor& a, const Tensor& b, DType dtype) {
  if (!a.defined()) return b;
  if (!b.defined()) return a;
  if (a.dtype() == DType::boolean && b.dtype() == DType::boolean) return logical_or(a, b);
  auto additive = [dtype](const Tensor& m) {
    if (m.dtype() != DType::boolean) return m;
    Options o{.dtype = dtype, .device = m.device()};
    return where(m, scalar_tensor(-INFINITY, o), scalar_tensor(0, o));
  };
  return add(additive(a), additive(b));
}

}  // namespace

// ---- MultiheadAttention
MultiheadAttention::MultiheadAttention(int64_t embed_dim, int64_t num_heads, MultiheadAttentionOptions opt)
    : out_proj(embed_dim, embed_dim, {.bias = opt.bias}),
      embed_dim(embed_dim),
      num_heads(num_heads),
      head_dim(num_heads > 0 ? embed_dim / num_heads : 0),
      dropout(opt.dropout),
      batch_first(opt.batch_first),
      generator(opt.generator) {
  if (embed_dim <= 0 || num_heads <= 0 || embed_dim % num_heads != 0)
    throw Error(fmt::format("MultiheadAttention: expected num_heads > 0 dividing embed_dim > 0, got embed_dim = {} "
                            "and num_heads = {}", embed_dim, num_heads));
  if (!(opt.dropout >= 0 && opt.dropout < 1))
    throw Error(fmt::format("MultiheadAttention: expected dropout in [0, 1), got {}", opt.dropout));
  in_proj_weight = empty({3 * embed_dim, embed_dim});
  if (opt.bias) in_proj_bias = empty({3 * embed_dim});
  reset_parameters();
  register_parameter("in_proj_weight", in_proj_weight);
  register_parameter("in_proj_bias", in_proj_bias);
  register_module("out_proj", out_proj);
}

void MultiheadAttention::reset_parameters() {
  init::xavier_uniform_(in_proj_weight);
  if (in_proj_bias.defined()) init::zeros_(in_proj_bias);
  if (out_proj.bias.defined()) init::zeros_(out_proj.bias);
}

std::string MultiheadAttention::extra_repr() const {
  return fmt::format("embed_dim={}, num_heads={}, dropout={}, batch_first={}", embed_dim, num_heads, dropout,
                     batch_first ? "True" : "False");
}

Tensor MultiheadAttention::forward(const Tensor& x) { return forward(x, x, x).output; }

AttentionOutput MultiheadAttention::operator()(const Tensor& query, const Tensor& key, const Tensor& value,
                                               const AttentionCall& call, Site site) {
  Call c(*this, site);
  return forward(query, key, value, call);
}

AttentionOutput MultiheadAttention::forward(const Tensor& query, const Tensor& key, const Tensor& value,
                                            const AttentionCall& call) {
  SiteScope at_caller = at_caller_site();
  const int rank = query.defined() ? query.dim() : 0;
  const bool batched = rank == 3;
  if ((rank != 2 && rank != 3) || !key.defined() || !value.defined() || key.dim() != rank || value.dim() != rank ||
      query.size(-1) != embed_dim || key.size(-1) != embed_dim || value.size(-1) != embed_dim)
    fail("MultiheadAttention", fmt::format("expected query, key and value [{} {}] (or unbatched [*, {}]), got {}, "
                                           "{}, {}", batch_first ? "B, L," : "L, B,", embed_dim, embed_dim,
                                           query.defined() ? query.shape().str() : "undefined",
                                           key.defined() ? key.shape().str() : "undefined",
                                           value.defined() ? value.shape().str() : "undefined"), kNoSite);
  // everything batch-first [B, L, E] from here on
  auto bf = [&](const Tensor& t) { return !batched ? t.unsqueeze(0) : batch_first ? t : t.transpose(0, 1); };
  Tensor q = bf(query), k = bf(key), v = bf(value);
  const int64_t B = q.size(0), L = q.size(1), S = k.size(1), E = embed_dim, H = num_heads;
  if (k.size(0) != B || v.size(0) != B || v.size(1) != S)
    fail("MultiheadAttention", fmt::format("expected key and value of one length and the query's batch, got "
                                           "query {}, key {}, value {}", query.shape().str(), key.shape().str(),
                                           value.shape().str()), kNoSite);
  // the projections: one matmul for self-attention, three otherwise
  if (query.impl() == key.impl() && key.impl() == value.impl()) {
    std::vector<Tensor> qkv = split(linear(q, in_proj_weight, in_proj_bias), E, -1);
    q = qkv[0], k = qkv[1], v = qkv[2];
  } else {
    std::vector<Tensor> w = split(in_proj_weight, E, 0);
    std::vector<Tensor> b = in_proj_bias.defined() ? split(in_proj_bias, E, 0) : std::vector<Tensor>(3);
    q = linear(q, w[0], b[0]), k = linear(k, w[1], b[1]), v = linear(v, w[2], b[2]);
  }
  auto heads = [&](const Tensor& t, int64_t T) { return t.reshape({B, T, H, head_dim}).transpose(1, 2); };
  q = heads(q, L), k = heads(k, S), v = heads(v, S);

  // the masks, in PyTorch's convention (true = masked), shaped to broadcast over [B, H, L, S]
  Tensor masked;
  if (call.key_padding_mask.defined()) {
    const Tensor& m = call.key_padding_mask;
    if (m.dim() != (batched ? 2 : 1) || m.size(-1) != S || (batched && m.size(0) != B))
      fail("MultiheadAttention", fmt::format("expected key_padding_mask [{}{}], got {}", batched ? "B, " : "", S,
                                             m.shape().str()), kNoSite);
    masked = m.reshape({B, 1, 1, S});
  }
  bool causal = call.is_causal;
  if (call.attn_mask.defined()) {
    const Tensor& m = call.attn_mask;
    if (causal) fail("MultiheadAttention", "expected attn_mask or is_causal, not both", kNoSite);
    if (m.dim() == 2 && m.size(0) == L && m.size(1) == S) masked = merge(masked, m.reshape({1, 1, L, S}), q.dtype());
    else if (m.dim() == 3 && m.size(0) == B * H && m.size(1) == L && m.size(2) == S)
      masked = merge(masked, m.reshape({B, H, L, S}), q.dtype());
    else
      fail("MultiheadAttention", fmt::format("expected attn_mask [{}, {}] or [{}, {}, {}] (batch x heads), got {}", L,
                                             S, B * H, L, S, m.shape().str()), kNoSite);
  }
  if (causal && masked.defined()) {  // SDPA takes a mask or is_causal: fold the causal mask in
    masked = merge(masked, logical_not(tril(ones({L, S}, {.dtype = DType::boolean, .device = q.device()}))),
                   q.dtype());
    causal = false;
  }
  Tensor sdpa_mask = !masked.defined() ? Tensor() : masked.dtype() == DType::boolean ? logical_not(masked) : masked;
  const double p = is_training() ? dropout : 0.0;

  AttentionOutput r;
  Tensor o;
  if (call.need_weights) {  // the unfused math, so that the weights exist to return
    Tensor s = matmul(q, k.transpose(-2, -1)) * (1.0 / std::sqrt(double(head_dim)));
    if (sdpa_mask.defined())
      s = sdpa_mask.dtype() == DType::boolean ? masked_fill(s, masked, -INFINITY) : add(s, sdpa_mask);
    if (causal)
      s = masked_fill(s, logical_not(tril(ones({L, S}, {.dtype = DType::boolean, .device = q.device()}))), -INFINITY);
    Tensor w = softmax(s, -1);
    if (p > 0) w = generator ? reel::dropout(w, p, *generator) : reel::dropout(w, p);
    o = matmul(w, v);
    r.weights = call.average_attn_weights ? mean(w, {1}) : w;
    if (!batched) r.weights = r.weights.squeeze(0);
  } else {
    o = scaled_dot_product_attention(q, k, v, {.attn_mask = sdpa_mask, .dropout_p = p, .is_causal = causal,
                                               .generator = generator});
  }
  o = out_proj(o.transpose(1, 2).reshape({B, L, E}));
  r.output = !batched ? o.squeeze(0) : batch_first ? o : o.transpose(0, 1);
  return r;
}

// ---- TransformerEncoderLayer
TransformerEncoderLayer::TransformerEncoderLayer(int64_t d_model, int64_t nhead, TransformerEncoderLayerOptions opt)
    : self_attn(d_model, nhead, {.dropout = opt.dropout, .bias = opt.bias, .batch_first = opt.batch_first}),
      linear1(d_model, opt.dim_feedforward, {.bias = opt.bias}),
      dropout(opt.dropout),
      linear2(opt.dim_feedforward, d_model, {.bias = opt.bias}),
      norm1({d_model}, {.eps = opt.layer_norm_eps}),
      norm2({d_model}, {.eps = opt.layer_norm_eps}),
      dropout1(opt.dropout),
      dropout2(opt.dropout),
      norm_first(opt.norm_first),
      activation(opt.activation) {
  if (activation != "relu" && activation != "gelu")
    throw Error(fmt::format("TransformerEncoderLayer: expected activation \"relu\" or \"gelu\", got \"{}\"",
                            activation));
  register_module("self_attn", self_attn);
  register_module("linear1", linear1);
  register_module("dropout", dropout);
  register_module("linear2", linear2);
  register_module("norm1", norm1);
  register_module("norm2", norm2);
  register_module("dropout1", dropout1);
  register_module("dropout2", dropout2);
}

Tensor TransformerEncoderLayer::forward(const Tensor& src) { return forward(src, EncoderCall{}); }

Tensor TransformerEncoderLayer::operator()(const Tensor& src, const EncoderCall& call, Site site) {
  Call c(*this, site);
  return forward(src, call);
}

Tensor TransformerEncoderLayer::forward(const Tensor& src, const EncoderCall& call) {
  SiteScope at_caller = at_caller_site();
  AttentionCall ac{.key_padding_mask = call.src_key_padding_mask, .attn_mask = call.src_mask,
                   .is_causal = call.is_causal};
  auto sa = [&](const Tensor& x) { return dropout1(self_attn(x, x, x, ac).output); };
  auto ff = [&](const Tensor& x) {
    Tensor h = linear1(x);
    h = activation == "gelu" ? gelu(h) : relu(h);
    return dropout2(linear2(dropout(h)));
  };
  Tensor x = src;
  if (norm_first) {
    x = x + sa(norm1(x));
    return x + ff(norm2(x));
  }
  x = norm1(x + sa(x));
  return norm2(x + ff(x));
}

}  // namespace reel::nn
