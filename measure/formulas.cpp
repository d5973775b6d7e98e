// The work of one op, one formula per family, from the shapes the op hook reports. A
// forward op: r.inputs and r.outputs are its operands and results. A backward rule:
// r.inputs are the incoming gradients (of the forward op's outputs), r.outputs the
// gradients it gives (one per forward input, undefined where none is wanted), r.node the
// forward op's entry (its input shapes). Bytes are each operand and result once (what a
// kernel that reads and writes each of them once moves); views move nothing.
//
// FLOPs follow PyTorch's FlopCounterMode where it counts (products: 2 per multiply-add;
// attention as its two batched products, backward five with the scores recomputed); the rest counts
// what the math needs, transcendentals as one operation, as written beside each family.
//
// What the shapes do not say, the op's typed record does (r.args, autograd/op_args_types.h;
// for a rule, the forward op's): the pooling window, whether attention was causal (only
// the pairs it keeps are counted: PyTorch counts them all), a recurrent layer's cell, a
// norm in eval mode, which gelu. An op that kept no record is counted from its shapes.
#include <algorithm>
#include <cstring>
#include <optional>
#include <string_view>
#include <unordered_map>

#include "../autograd/node.h"
#include "../autograd/op_args_types.h"
#include "work.h"

namespace reel::bench {
namespace {

using debug::OpRecord;
using debug::Phase;

double numel(const Tensor& t) { return t.defined() ? double(t.numel()) : 0.0; }
double nbytes(const Tensor& t) { return t.defined() ? double(t.numel()) * double(t.element_size()) : 0.0; }
double numel(const Dims& d) {
  double n = 1;
  for (int64_t x : d) n *= double(x);
  return n;
}

double io_bytes(const OpRecord& r) {
  double b = 0;
  for (const Tensor& t : r.inputs) b += nbytes(t);
  for (const Tensor& t : r.outputs) b += nbytes(t);
  return b;
}
const Tensor& in(const OpRecord& r, size_t i) {
  static const Tensor none;
  return i < r.inputs.size() ? r.inputs[i] : none;
}
const Tensor& out(const OpRecord& r, size_t i) {
  static const Tensor none;
  return i < r.outputs.size() ? r.outputs[i] : none;
}
Dims shape_of(const Tensor& t) { return t.defined() ? t.shape() : Dims{}; }
// The forward op's input shape i (a rule), or empty.
Dims fwd_shape(const OpRecord& r, size_t i) {
  if (!r.node || i >= r.node->inputs.size() || !r.node->inputs[i].defined) return {};
  return r.node->inputs[i].shape;
}
double gout(const OpRecord& r) { return numel(in(r, 0)); }  // elements of the first incoming gradient

// Elements of a pooling window: the recorded kernel, or (no record: adaptive pooling) the
// input's elements per output element, exact for windows that tile the input.
double pool_window(const OpRecord& r, double x, double y) {
  if (const PoolArgs* p = r.args.get_if<PoolArgs>()) return double(p->kernel[0]) * double(p->kernel[1]);
  return y > 0 ? x / y : 0;
}

// The (query, key) pairs of one L x S score matrix attention computes: all, or under a
// causal mask (key j hidden from query i when j > i, top-left aligned) those with j <= i.
double attention_pairs(const OpRecord& r, double L, double S) {
  const AttentionParams* p = r.args.get_if<AttentionParams>();
  if (!p || !p->causal) return L * S;
  // sum over i < L of min(i + 1, S): a triangle of side min(L, S), then full rows
  double tri = std::min(L, S);
  return tri * (tri + 1) / 2 + std::max(0.0, L - S) * S;
}

enum class Family {
  view,        // no data moved: 0 FLOPs, 0 bytes
  copy,        // data moved, no arithmetic (gather, cat, dtype conversion, padding)
  unary,       // y = f(x): `cost` per element (1; transcendentals count as one)
  binary,      // y = f(a, b) with broadcasting: `cost` per output element
  reduction,   // a reduction over the input: `cost` per input element
  softmax,     // softmax-like over a dim: `cost` per element
  loss,        // a loss over its input: `cost` per input element
  norm,        // batch/layer/group norm: `cost` per element
  matmul,      // [.., M, K] @ [.., K, N]: 2 M N K per product
  linear,      // x [.., K] W^T [N, K] (+ b): 2 M N K, + M N for the bias
  addmm,       // beta c + alpha a @ b: 2 M N K + 2 M N
  conv,        // y [N, O, ..] from w [O, C/g, k..]: 2 |y| (C/g) prod(k), + |y| for the bias
  conv_t,      // transposed: x [N, C, ..], w [C, O/g, k..]: 2 |x| (O/g) prod(k)
  attention,   // q [.., L, E], k [.., S, E], v [.., S, Ev]: 2 L S E + 2 L S Ev per batch, softmax 4 L S
               // (L S: the pairs a causal mask keeps)
  rnn,         // RnnLayerArgs' T, B, I, H and cell (G gates): 2 T B G H (I + H), gates ~ (3 G + 4) H per step;
               // RnnStackArgs: the same summed over its layers and directions
  pool,        // pooling: one operation per window element per output (PoolArgs' kernel)
  embedding,   // rows gathered: 0 FLOPs; the rows read and written
  transparent, // no work of its own: its parts are counted (backward, checkpoint, hooks)
};

struct Formula {
  Family family;
  double cost = 1;      // per element (unary, binary, reduction, softmax, loss, norm)
  double bwd_cost = 2;  // per element of each gradient given (elementwise families' rules)
};

const std::unordered_map<std::string_view, Formula>& table() {
  static const std::unordered_map<std::string_view, Formula> t = [] {
    std::unordered_map<std::string_view, Formula> m;
    for (const char* v : {"reshape", "view", "transpose", "permute", "expand", "squeeze", "unsqueeze", "narrow",
                          "select", "slice", "split", "chunk", "flatten", "detach", "alias"})
      m[v] = {Family::view, 0, 0};
    for (const char* c : {"contiguous", "clone", "to", "copy_", "cat", "stack", "index_select", "gather", "repeat",
                          "tile", "pad", "flip", "roll", "one_hot", "fill_", "from_channel_blocks",
                          "to_channel_blocks", "index_put", "scatter", "masked_fill", "tril", "triu", "interpolate"})
      m[c] = {Family::copy, 0, 1};
    for (const char* u : {"neg", "abs", "relu", "sign", "square", "reciprocal", "clamp", "clamp_min", "clamp_max",
                          "relu6", "hardtanh", "threshold", "leaky_relu", "nan_to_num", "isfinite", "isinf", "isnan",
                          "logical_not", "exp", "log", "sqrt", "rsqrt", "sigmoid", "tanh", "sin", "cos", "erf",
                          "pow", "hardsigmoid"})
      m[u] = {Family::unary, 1, 2};
    // composite activations: a transcendental and a few multiply-adds each
    m["gelu"] = {Family::unary, 4, 6};
    m["silu"] = {Family::unary, 2, 4};
    m["softplus"] = {Family::unary, 2, 3};
    m["elu"] = {Family::unary, 2, 2};
    m["mish"] = {Family::unary, 4, 6};
    m["hardswish"] = {Family::unary, 3, 3};
    m["dropout"] = {Family::unary, 1, 1};  // one multiply by the scaled mask (its bytes: op_work)
    for (const char* b : {"add", "sub", "mul", "div", "maximum", "minimum", "eq", "ne", "lt", "le", "gt", "ge",
                          "logical_and", "logical_or", "rsub", "rdiv", "add_", "sub_", "mul_", "where"})
      m[b] = {Family::binary, 1, 1};
    m["add_relu"] = {Family::binary, 2, 1};
    m["lerp"] = {Family::binary, 2, 2};
    for (const char* r : {"sum", "mean", "prod", "max", "min", "argmax", "argmin", "all", "any", "sum_to", "cumsum",
                          "cumprod", "amax", "amin"})
      m[r] = {Family::reduction, 1, 1};
    m["var"] = {Family::reduction, 3, 3};  // mean, then squared deviations summed
    m["std"] = {Family::reduction, 3, 3};
    m["norm"] = {Family::reduction, 2, 2};
    m["logsumexp"] = {Family::reduction, 3, 3};
    m["softmax"] = {Family::softmax, 4, 3};      // max, exp, sum, scale; backward y (g - sum(g y))
    m["log_softmax"] = {Family::softmax, 4, 3};  // max, exp-sum, log, subtract
    m["normalize"] = {Family::softmax, 3, 4};
    m["cross_entropy"] = {Family::loss, 5, 3};   // log-softmax of the logits, then the picked entries
    m["nll_loss"] = {Family::loss, 1, 1};
    m["mse_loss"] = {Family::loss, 3, 2};
    m["l1_loss"] = {Family::loss, 3, 2};
    m["smooth_l1_loss"] = {Family::loss, 4, 3};
    m["huber_loss"] = {Family::loss, 4, 3};
    m["binary_cross_entropy"] = {Family::loss, 5, 4};
    m["binary_cross_entropy_with_logits"] = {Family::loss, 6, 4};
    m["kl_div"] = {Family::loss, 3, 2};
    // mean 1, variance 2, normalise 2, scale and shift 2; backward: the two sums and the
    // input gradient (~11); batch_norm_relu adds the ReLU and its mask
    m["batch_norm"] = {Family::norm, 7, 11};
    m["batch_norm_relu"] = {Family::norm, 8, 12};
    m["batch_norm_relu_blocked"] = {Family::norm, 8, 12};
    m["layer_norm"] = {Family::norm, 7, 11};
    m["group_norm"] = {Family::norm, 7, 11};
    m["instance_norm"] = {Family::norm, 7, 11};
    for (const char* mm : {"matmul", "mm", "bmm"}) m[mm] = {Family::matmul};
    m["linear"] = {Family::linear, 0};
    m["linear_relu"] = {Family::linear, 1};
    m["linear_bias_relu"] = {Family::linear, 1};
    m["addmm"] = {Family::addmm};
    m["baddbmm"] = {Family::addmm};
    for (const char* c : {"conv1d", "conv2d", "conv2d_blocked"}) m[c] = {Family::conv, 0};
    m["conv2d_relu"] = {Family::conv, 1};
    m["conv2d_bias_relu"] = {Family::conv, 1};
    m["conv2d_backward_data"] = {Family::conv_t, 0};  // the data gradient is a transposed convolution
    m["conv_transpose2d"] = {Family::conv_t, 0};
    m["scaled_dot_product_attention"] = {Family::attention};
    for (const char* r : {"rnn_tanh", "rnn_relu", "lstm", "gru"}) m[r] = {Family::rnn};
    for (const char* p : {"max_pool1d", "max_pool2d", "avg_pool1d", "avg_pool2d", "adaptive_avg_pool1d",
                          "adaptive_avg_pool2d"})
      m[p] = {Family::pool};
    m["embedding"] = {Family::embedding};
    for (const char* t : {"backward", "checkpoint", "backward_hook"}) m[t] = {Family::transparent};
    return m;
  }();
  return t;
}

// Per-element cost of a unary op whose record says which form ran (gelu's tanh form:
// the cube, two multiply-adds, the tanh and the final product).
double unary_cost(const OpRecord& r, const Formula& f) {
  if (const ActivationArgs* a = r.args.get_if<ActivationArgs>())
    if (a->kind == UnaryOp::gelu_tanh) return 7;
  return f.cost;
}

// A norm in eval mode (running statistics): one multiply-add per element, the ReLU's
// compare where fused; in training the formula's cost.
double norm_cost(const OpRecord& r, const Formula& f, bool backward) {
  if (const BatchNormArgs* b = r.args.get_if<BatchNormArgs>())
    if (!b->training) return (backward ? 1.0 : 2.0) + (f.cost - 7);
  return backward ? f.bwd_cost : f.cost;
}

// Attention's sizes from q [.., L, E], k [.., S, E], v [.., S, Ev] (B: the batch and heads),
// and the pairs of its score matrices it computes; nullopt for shapes it cannot have.
struct AttentionSizes {
  double B, L, E, S, Ev, pairs;
};
std::optional<AttentionSizes> attention_sizes(const OpRecord& r, const Dims& q, const Dims& k, const Dims& v) {
  if (q.size() < 2 || k.size() < 2 || v.size() < 2) return std::nullopt;
  const double L = double(q[q.size() - 2]), E = double(q.back()), S = double(k[k.size() - 2]), Ev = double(v.back());
  const double B = numel(q) / (L * E);
  return AttentionSizes{B, L, E, S, Ev, B * attention_pairs(r, L, S)};
}

// A recurrent layer's sizes from its record: steps, batch, hidden features, G H (the gates'
// rows), and over its layer-directions (one for rnn_layer, L D for a whole stack) their
// count and the sum of in + H, each one's input and hidden features; nullopt without a
// record (rnn()'s wrapper around rnn_layer entries).
struct RnnSizes {
  double T, B, H, GH, layers, in_plus_h;
};
std::optional<RnnSizes> rnn_sizes(const OpRecord& r) {
  if (const RnnLayerArgs* a = r.args.get_if<RnnLayerArgs>())
    return RnnSizes{double(a->T), double(a->B), double(a->H), double(rnn_gates(a->mode)) * double(a->H), 1,
                    double(a->I + a->H)};
  const RnnStackArgs* s = r.args.get_if<RnnStackArgs>();
  if (!s) return std::nullopt;
  // layer 0 reads I features, the others D H
  const double D = double(s->directions), L = double(s->layers), H = double(s->H);
  return RnnSizes{double(s->T), double(s->B), H, double(rnn_gates(s->mode)) * H, L * D,
                  D * (double(s->I) + H) + (L - 1) * D * (D * H + H)};
}

// K of a product a @ b: a's last dim (its only dim for a vector).
double inner_dim(const Dims& a) { return a.empty() ? 0 : double(a.back()); }

// The work of a forward op of family f.
Work forward_work(const OpRecord& r, const Formula& f) {
  Work w;
  w.bytes = io_bytes(r);
  const double y = numel(out(r, 0));
  switch (f.family) {
    case Family::view: w.bytes = 0; break;
    case Family::copy:
    case Family::embedding: break;
    case Family::unary: w.flops = unary_cost(r, f) * y; break;
    case Family::binary:
    case Family::softmax: w.flops = f.cost * y; break;
    case Family::reduction:
    case Family::loss: w.flops = f.cost * numel(in(r, 0)); break;
    case Family::norm: w.flops = norm_cost(r, f, false) * numel(in(r, 0)); break;
    case Family::matmul: w.product_flops = 2 * y * inner_dim(in(r, 0).shape()); break;
    case Family::linear:
      w.product_flops = 2 * y * inner_dim(in(r, 0).shape());
      w.flops = (in(r, 2).defined() ? y : 0) + f.cost * y;  // the bias, and the fused ReLU
      break;
    case Family::addmm:
      w.product_flops = 2 * y * inner_dim(in(r, 1).shape());
      w.flops = 2 * y;
      break;
    case Family::conv: {
      const Tensor& wt = in(r, 1);
      double per_out = wt.dim() ? numel(wt) / double(wt.size(0)) : 0;  // (C/g) prod(k)
      w.product_flops = 2 * y * per_out;
      w.flops = (in(r, 2).defined() ? y : 0) + f.cost * y;
      break;
    }
    case Family::conv_t: {
      // conv_transpose2d(x, w [C, O/g, k..]) and conv2d_backward_data(g, w [O, C/g, k..]):
      // each input element meets one weight row
      const Tensor& wt = in(r, 1);
      double per_in = wt.dim() ? numel(wt) / double(wt.size(0)) : 0;
      w.product_flops = 2 * numel(in(r, 0)) * per_in;
      w.flops = in(r, 2).defined() ? y : 0;
      break;
    }
    case Family::attention: {
      auto a = attention_sizes(r, shape_of(in(r, 0)), shape_of(in(r, 1)), shape_of(in(r, 2)));
      if (!a) return w;
      w.product_flops = 2 * a->pairs * a->E + 2 * a->pairs * a->Ev;
      w.flops = 4 * a->pairs + a->B * a->L * a->E;  // softmax of the scores, the scaling of q
      break;
    }
    case Family::rnn: {
      auto n = rnn_sizes(r);
      if (!n) return w;
      w.product_flops = 2 * n->T * n->B * n->GH * n->in_plus_h;
      // two bias adds and a nonlinearity per gate, the state update
      w.flops = n->layers * n->T * n->B * (3 * n->GH + 4 * n->H);
      break;
    }
    case Family::pool: w.flops = y * pool_window(r, numel(in(r, 0)), y); break;  // a compare or add per window element
    case Family::transparent: break;
  }
  w.flops += w.product_flops;
  return w;
}

// The work of a backward rule of family f: gradients of the forward inputs it gives.
Work backward_work(const OpRecord& r, const Formula& f) {
  Work w;
  w.bytes = io_bytes(r);
  const double g = gout(r);
  auto given = [&](size_t i) { return out(r, i).defined(); };
  switch (f.family) {
    case Family::view: {
      // expand's gradient sums the broadcast dims; the others reshape or place it
      std::string_view op = r.op;
      if (op == "expand") w.flops = g;
      else if (op != "slice" && op != "narrow" && op != "select" && op != "split" && op != "chunk") w.bytes = 0;
      break;
    }
    case Family::copy:
    case Family::embedding: w.flops = std::string_view(r.op) == "embedding" ? g : 0; break;  // rows scattered-added
    case Family::unary:
    case Family::softmax:
    case Family::norm:
    case Family::loss: {
      const double cost = f.family == Family::norm ? norm_cost(r, f, true) : f.bwd_cost;
      for (size_t i = 0; i < r.outputs.size(); ++i)
        if (given(i)) w.flops += cost * numel(out(r, i));
      break;
    }
    case Family::binary:
    case Family::reduction:
      // each gradient given: the rule's multiply per element, and a sum where it was broadcast
      for (size_t i = 0; i < r.outputs.size(); ++i)
        if (given(i)) w.flops += f.bwd_cost * std::max(g, numel(out(r, i)));
      break;
    case Family::matmul:
    case Family::linear:
    case Family::addmm: {
      // dA = g B^T and dB = A^T g: each 2 M N K; a bias's gradient sums g
      const size_t a = f.family == Family::addmm ? 1 : 0;
      const double K = inner_dim(fwd_shape(r, a));
      if (given(a)) w.product_flops += 2 * g * K;
      if (given(a + 1)) w.product_flops += 2 * g * K;
      if (f.family == Family::linear && given(2)) w.flops += g;
      if (f.family == Family::linear) w.flops += f.cost * g;  // the fused ReLU's mask
      if (f.family == Family::addmm && given(0)) w.flops += g;
      break;
    }
    case Family::conv: {
      // the data gradient and the weight gradient each cost the forward's products
      Dims wt = fwd_shape(r, 1);
      double per_out = wt.empty() ? 0 : numel(wt) / double(wt[0]);
      if (given(0)) w.product_flops += 2 * g * per_out;
      if (given(1)) w.product_flops += 2 * g * per_out;
      if (given(2)) w.flops += g;
      w.flops += f.cost * g;
      break;
    }
    case Family::conv_t: {
      Dims x = fwd_shape(r, 0), wt = fwd_shape(r, 1);
      double per_in = wt.empty() ? 0 : numel(wt) / double(wt[0]);
      if (given(0)) w.product_flops += 2 * numel(x) * per_in;
      if (given(1)) w.product_flops += 2 * numel(x) * per_in;
      if (given(2)) w.flops += g;
      break;
    }
    case Family::attention: {
      auto a = attention_sizes(r, fwd_shape(r, 0), fwd_shape(r, 1), fwd_shape(r, 2));
      if (!a) return w;
      // S = Q K^T again (a flash-style backward, reel's, recomputes P rather than keep it),
      // dV = P^T dY, dP = dY V^T, dQ = dS K, dK = dS^T Q: five products, as PyTorch counts
      w.product_flops = 2 * a->pairs * (3 * a->E + 2 * a->Ev);
      w.flops = 3 * a->pairs;  // dS = P (dP - rowsum(dY Y))
      break;
    }
    case Family::rnn: {
      auto n = rnn_sizes(r);
      if (!n) return w;
      // dX and dh through the gates, dW_ih and dW_hh: twice the forward's products
      w.product_flops = 4 * n->T * n->B * n->GH * n->in_plus_h;
      w.flops = 2 * n->layers * n->T * n->B * (3 * n->GH + 4 * n->H);
      break;
    }
    case Family::pool: {
      // max: each output's gradient added to one input; avg: spread over its window
      const PoolArgs* p = r.args.get_if<PoolArgs>();
      const bool max = std::string_view(r.op).find("max") != std::string_view::npos;
      w.flops = max ? g : g * (p ? double(p->kernel[0]) * double(p->kernel[1]) : numel(out(r, 0)) / std::max(g, 1.0));
      break;
    }
    case Family::transparent: break;
  }
  w.flops += w.product_flops;
  return w;
}

}  // namespace

std::optional<Work> op_work(const OpRecord& r) {
  auto it = table().find(std::string_view(r.op));
  if (it == table().end() || it->second.family == Family::transparent) return std::nullopt;
  // rnn() wraps its layers under the layer's own name ("lstm") but keeps no RnnLayerArgs:
  // the layers inside it carry the work (unless it ran the whole stack: RnnStackArgs)
  if (it->second.family == Family::rnn && !rnn_sizes(r)) return std::nullopt;
  Work w = r.phase == Phase::forward ? forward_work(r, it->second) : backward_work(r, it->second);
  // dropout's mask, where it kept one: written by the forward, read by the backward (f32,
  // or x's dtype for f64 x); without one each direction draws it in registers
  if (const DropoutArgs* d = r.args.get_if<DropoutArgs>(); d && d->mask_saved) {
    const Tensor& x = r.phase == Phase::forward ? in(r, 0) : out(r, 0);
    if (x.defined()) w.bytes += numel(x) * (is_low_precision(x.dtype()) ? 4.0 : double(dtype_size(x.dtype())));
  }
  return w;
}

// Whether an op has no work of its own, only parts (the counter promotes its parts).
bool transparent_op(const char* op) {
  auto it = table().find(std::string_view(op));
  return it != table().end() && it->second.family == Family::transparent;
}

}  // namespace reel::bench
