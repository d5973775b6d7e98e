// scaled_dot_product_attention. Shapes: q [..., L, E], k [..., S, E], v [..., S, Ev],
// mask broadcastable to [..., L, S] -> y [..., L, Ev]; the leading dims flatten to BH
// planes. Forward: y_i = sum_j z_ij p_ij v_j, p_i = softmax(scale q_i k^T + mask_i), z the
// dropout factors; the backend keeps lse_i = log sum_j e^(s_ij) per row (Backend::
// attention_forward) and the backward recomputes p from it (attention_backward):
//   dv = (z p)^T g,  ds = p (z (g v^T) - rowsum(g y)),  dq = scale ds k,  dk = scale ds^T q.
#include "ops_attention.h"

#include <cmath>

#include "../tensor/philox.h"
#include "autocast.h"
#include "op_support.h"
#include "ops.h"

namespace reel {
namespace {

using Grads = std::vector<Tensor>;

// A contiguous [BH, rows, cols] copy (or t itself), not recorded: the node's inputs stay
// the caller's tensors.
Tensor planes(const Tensor& t, int64_t BH) {
  Tensor c = t;
  if (!t.is_contiguous()) {
    c = new_like(t);
    if (c.numel()) backend_of(t).copy(c, t);
  }
  return make_view(c, {BH, t.size(-2), t.size(-1)}, {t.size(-2) * t.size(-1), t.size(-1), 1}, c.offset());
}

// The mask as a view of [..., L, S] and the element offset of each plane's [L, S] block.
std::pair<Tensor, Tensor> mask_planes(const OpScope& op, const Tensor& mask, const Dims& lead, int64_t L,
                                      int64_t S, const Tensor& q) {
  Dims full = lead;
  full.push_back(L);
  full.push_back(S);
  bool fits = mask.dim() <= full.size();
  for (int d = 1; fits && d <= mask.dim(); ++d)
    fits = mask.size(-d) == 1 || mask.size(-d) == full[full.size() - d];
  if (!fits)
    fail(op.op, fmt::format("expected attn_mask broadcastable to {} (q {}), got {}", full.str(), q.shape().str(),
                            mask.shape().str()), op.site);
  Tensor m = expand_view(mask, full);
  const int64_t BH = numel_of(lead);
  Tensor offsets = empty({BH}, {.dtype = DType::i64});
  int64_t* po = offsets.data<int64_t>();
  for (int64_t bh = 0; bh < BH; ++bh) {
    int64_t rest = bh, off = m.offset();
    for (int d = lead.size() - 1; d >= 0; --d) {
      off += (rest % lead[d]) * m.strides()[d];
      rest /= lead[d];
    }
    po[bh] = off - m.offset();
  }
  if (!mask.device().is_cpu()) offsets = offsets.to(mask.device());
  return {m, offsets};
}


// The tensor the node records for an input: the caller's where autocast made an
// unrecorded low-precision copy, else the one computed from (the caller's, or its
// recorded f32 cast)
const Tensor& recorded(const Tensor& used, const Tensor& given) {
  return is_low_precision(used.dtype()) ? given : used;
}

}  // namespace

Tensor scaled_dot_product_attention(const Tensor& q_in, const Tensor& k_in, const Tensor& v_in, const SdpaOptions& opt,
                                    Site site) {
  OpScope op("scaled_dot_product_attention", site);
  // Under autocast: f32, or the autocast dtype where the backend fuses attention in it
  // (autocast_attention). A low-precision q, k or v is the caller's tensor or an unrecorded
  // copy of it (the node then records the caller's, and the engine converts the gradient);
  // an f32 one from a half input is a recorded cast.
  const Tensor q = autocast_attention(q_in), k = autocast_attention(k_in), v = autocast_attention(v_in);
  check_defined(op, q, "the query");
  check_defined(op, k, "the key");
  check_defined(op, v, "the value");
  check_same_device(op, q, k);
  check_same_device(op, q, v);
  check_floating(op, q, "the query");
  if (k.dtype() != q.dtype() || v.dtype() != q.dtype())
    fail(op.op, fmt::format("expected q, k and v of one dtype, got q {}, k {}, v {}", describe(q), describe(k),
                            describe(v)), op.site);
  if (q.dim() < 2 || k.dim() != q.dim() || v.dim() != q.dim())
    fail(op.op, fmt::format("expected q [..., L, E], k [..., S, E] and v [..., S, Ev] of one rank >= 2, got "
                            "q {}, k {}, v {}", q.shape().str(), k.shape().str(), v.shape().str()), op.site);
  Dims lead = q.shape();
  lead.resize(q.dim() - 2);
  for (int d = 0; d < lead.size(); ++d)
    if (k.size(d) != lead[d] || v.size(d) != lead[d])
      fail(op.op, fmt::format("expected q, k and v with the same leading dims, got q {}, k {}, v {}",
                              q.shape().str(), k.shape().str(), v.shape().str()), op.site);
  const int64_t L = q.size(-2), S = k.size(-2), E = q.size(-1), Ev = v.size(-1), BH = numel_of(lead);
  if (k.size(-1) != E || v.size(-2) != S)
    fail(op.op, fmt::format("expected k [..., S, {}] and v [..., S, Ev] for q {} (the keys' features match the "
                            "query's, as many values as keys), got k {}, v {}", E, q.shape().str(),
                            k.shape().str(), v.shape().str()), op.site);
  if (!(opt.dropout_p >= 0.0 && opt.dropout_p < 1.0))
    fail(op.op, fmt::format("expected dropout_p in [0, 1), got {}", opt.dropout_p), op.site);
  const Tensor mask = opt.attn_mask.defined() && opt.attn_mask.is_floating_point() ? autocast_attention(opt.attn_mask)
                                                                                    : opt.attn_mask;
  if (mask.defined()) {
    check_same_device(op, q, mask);
    if (opt.is_causal)
      fail(op.op, "expected attn_mask or is_causal, not both (fold the causal mask into attn_mask)", op.site);
    if (mask.dtype() != DType::boolean && mask.dtype() != q.dtype())
      fail(op.op, fmt::format("expected a bool attn_mask or one of q's dtype {}, got {}", dtype_name(q.dtype()),
                              describe(mask)), op.site);
    if (mask.requires_grad() && grad_enabled())
      fail(op.op, fmt::format("attn_mask {} requires grad, but the fused kernel gives no gradient for the mask "
                              "(detach it, or compose softmax(q k^T + mask) v for a learned bias)",
                              describe(mask)), op.site);
  }
  AttentionParams p{.scale = opt.scale ? *opt.scale : 1.0 / std::sqrt(double(E)), .causal = opt.is_causal,
                    .dropout_p = opt.dropout_p};
  if (p.dropout_p > 0) {
    Generator& gen = opt.generator ? *opt.generator : default_generator();
    p.seed = gen.seed();
    p.offset = gen.take(q.device(), philox::uniform_blocks(uint64_t(BH * L * S)));
  }
  Dims out_shape = q.shape();
  out_shape[q.dim() - 1] = Ev;
  Tensor y = new_tensor(out_shape, q.dtype(), q.device());
  // f16/bf16 attention keeps lse in f32: the backward recomputes p = exp(s - lse), and a
  // half lse would be off by |lse| 2^-8 (cuDNN's softmax statistics are f32 too)
  Tensor lse = new_tensor({BH, L}, is_low_precision(q.dtype()) ? DType::f32 : q.dtype(), q.device());
  Tensor qp = planes(q, BH), kp = planes(k, BH), vp = planes(v, BH);
  auto [m, offsets] = mask.defined() ? mask_planes(op, mask, lead, L, S, q) : std::pair<Tensor, Tensor>{};
  Tensor yp = make_view(y, {BH, L, Ev}, {L * Ev, Ev, 1}, 0);
  if (y.numel()) backend_of(q).attention_forward(yp, lse, qp, kp, vp, m, offsets, p);
  Node* n = record(op, [](Node& n, const Grads& g, Grads& gi) {
        if (grad_enabled())
          fail(n.op, "a create_graph backward (second derivatives) through scaled_dot_product_attention is not "
                     "supported; its backward is one fused kernel", n.site);
        Tensor q = n.saved_tensor(0), k = n.saved_tensor(1), v = n.saved_tensor(2), y = n.saved_tensor(3);
        Tensor lse = n.saved_tensor(4), m = n.saved_tensor(5), offsets = n.saved_tensor(6);
        const int64_t BH = q.size(0);
        Tensor gq = new_like(q), gk = new_like(k), gv = new_like(v);
        Backend& be = backend_of(q);
        if (g[0].defined() && q.numel() + k.numel() + v.numel() > 0) {
          be.attention_backward(gq, gk, gv, planes(g[0], BH), q, k, v, planes(y, BH), lse, m, offsets,
                                n.args<AttentionParams>());
        } else {
          for (Tensor* t : {&gq, &gk, &gv})
            if (t->numel()) be.fill(*t, 0);
        }
        for (size_t i = 0; i < 3; ++i) {
          Tensor& t = i == 0 ? gq : i == 1 ? gk : gv;
          if (n.needs_grad(i)) gi[i] = make_view(t, n.input_shape(i), contiguous_strides(n.input_shape(i)), 0);
        }
      }, {&recorded(q, q_in), &recorded(k, k_in), &recorded(v, v_in)}, {&y});
  if (n) {
    for (const Tensor* t : {&qp, &kp, &vp, &y, &lse, &m, &offsets}) n->save(*t);
  }
  keep_args(op, n, p);
  return y;
}

}  // namespace reel
