// The tracer's entries: one per op or family of ops, each reading the op's arguments typed
// from its tape entry (autograd/op_args_types.h) and writing one or a few ONNX nodes.
#include "internal/tracer.h"

#include <cmath>
#include <cstring>

#include "../autograd/node.h"
#include "../autograd/op_args_types.h"
#include "../tensor/backend.h"

namespace reel::onnx::internal {

using P = ::onnx::TensorProto;

int onnx_type(DType t, const std::string& what) {
  switch (t) {
    case DType::f32: return P::FLOAT;
    case DType::f64: return P::DOUBLE;
    case DType::i32: return P::INT32;
    case DType::i64: return P::INT64;
    case DType::u8: return P::UINT8;
    case DType::boolean: return P::BOOL;
    default: throw Error("onnx::export_model: " + what + " has dtype " + std::string(dtype_name(t)) + ", not exported");
  }
}

void Tracer::gelu(const debug::OpRecord& r, bool tanh_form) {
  std::string x = value(r.inputs[0], "gelu's input");
  if (opset_ >= 20) {
    auto* n = add("Gelu", {x}, {out(r.outputs[0], "gelu")});
    if (tanh_form) {
      auto* a = n->add_attribute();
      a->set_name("approximate");
      a->set_type(::onnx::AttributeProto::STRING);
      a->set_s("tanh");
    }
    return;
  }
  // x (1 + erf(x / sqrt 2)) / 2, or x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3))) / 2
  std::string inner;
  if (!tanh_form) {
    std::string s = fresh("gelu"), e = fresh("gelu");
    add("Mul", {x, constant_floats({float(M_SQRT1_2)}, {})}, {s});
    add("Erf", {s}, {e});
    inner = e;
  } else {
    std::string x3 = fresh("gelu"), p = fresh("gelu"), a = fresh("gelu"), t = fresh("gelu");
    add("Mul", {x, x}, {x3 + "_sq"});
    add("Mul", {x3 + "_sq", x}, {x3});
    add("Mul", {x3, constant_floats({0.044715f}, {})}, {p});
    add("Add", {x, p}, {a});
    add("Mul", {a, constant_floats({float(std::sqrt(2.0 / M_PI))}, {})}, {a + "_s"});
    add("Tanh", {a + "_s"}, {t});
    inner = t;
  }
  std::string one = fresh("gelu"), half = fresh("gelu");
  add("Add", {inner, constant_floats({1.0f}, {})}, {one});
  add("Mul", {x, one}, {half});
  add("Mul", {half, constant_floats({0.5f}, {})}, {out(r.outputs[0], "gelu")});
}

// Reshapes keep the batch dimension symbolic: a leading dimension equal to the input's
// leading one is written as 0 ("copy"), so another batch size runs too.
void Tracer::reshape(const debug::OpRecord& r) {
  const Tensor &x = r.inputs[0], &y = r.outputs[0];
  std::vector<int64_t> shape(y.shape().begin(), y.shape().end());
  if (x.dim() > 0 && y.dim() > 0 && x.size(0) == y.size(0)) shape[0] = 0;
  else unsupported(r, "it changes the leading (batch) dimension " + x.shape().str() + " -> " + y.shape().str());
  add("Reshape", {value(x, r.name() + "'s input"), constant_ints(shape)}, {out(y, "reshape")});
}

// Squeeze / Unsqueeze with the one axis that turns the input's shape into the output's.
void Tracer::squeeze(const debug::OpRecord& r) {
  const Tensor &x = r.inputs[0], &y = r.outputs[0];
  bool sq = std::string_view(r.op) == "squeeze";
  const Tensor &longer = sq ? x : y, &shorter = sq ? y : x;
  if (longer.dim() != shorter.dim() + 1) return reshape(r);  // squeeze() of every size-1 dim
  for (int k = 0; k < longer.dim(); ++k) {
    if (longer.size(k) != 1) continue;
    Dims rest;
    for (int d = 0; d < longer.dim(); ++d)
      if (d != k) rest.push_back(longer.size(d));
    if (rest != shorter.shape()) continue;
    if (k == 0 && !sq) unsupported(r, "it adds a dimension before the batch dimension");
    add(sq ? "Squeeze" : "Unsqueeze", {value(x, r.name() + "'s input"), constant_ints({k})}, {out(y, r.op)});
    return;
  }
  unsupported(r, "no single axis turns " + x.shape().str() + " into " + y.shape().str());
}

// A recurrent layer (rnn()'s composite op: no tape entry of its own) from the ops it ran:
// per layer one rnn_layer entry (inputs x, h0, c0, w_ih, w_hh, b_ih, b_hh; RnnLayerArgs),
// the batch_first transposes and the stacks of the final
// states. Each layer becomes one ONNX GRU / LSTM / RNN op, the weights' gates reordered
// from PyTorch's (r z n; i f g o) to ONNX's (z r h; i o f c). Zero initial states, one
// direction and full-length sequences only.
std::string Tracer::rnn_layer(const debug::OpRecord& layer, const std::string& input, std::vector<std::string>& states) {
  const Node* n = layer.node;
  const RnnLayerArgs& a = n->args<RnnLayerArgs>();
  RnnMode mode = a.mode;
  int64_t H = a.H, I = a.I;
  if (a.reverse) unsupported(layer, "a reverse (bidirectional) direction");
  for (size_t k : {1, 2})
    if (layer.inputs[k].defined()) {
      if (names_.count(layer.inputs[k].impl())) unsupported(layer, "an initial state given by the caller");
      for (float v : layer.inputs[k].to_vector<float>())
        if (v != 0) unsupported(layer, "a nonzero initial state");
    }
  // gate order: the PyTorch block each ONNX block comes from
  std::vector<int> order = mode == RnnMode::gru ? std::vector<int>{1, 0, 2}
                           : mode == RnnMode::lstm ? std::vector<int>{0, 3, 1, 2} : std::vector<int>{0};
  int64_t G = int64_t(order.size());
  auto reorder = [&](const Tensor& t, int64_t cols) {
    std::vector<float> v = t.to_vector<float>(), o;
    for (int g : order) o.insert(o.end(), v.begin() + g * H * cols, v.begin() + (g + 1) * H * cols);
    return o;
  };
  std::vector<std::string> ins{input, constant_floats(reorder(layer.inputs[3], I), {1, G * H, I}),
                               constant_floats(reorder(layer.inputs[4], H), {1, G * H, H})};
  if (layer.inputs[5].defined()) {
    std::vector<float> b = reorder(layer.inputs[5], 1), bh = reorder(layer.inputs[6], 1);
    b.insert(b.end(), bh.begin(), bh.end());
    ins.push_back(constant_floats(b, {1, 2 * G * H}));
  }
  std::string y = fresh("rnn_y"), yh = fresh("rnn_h"), yc = fresh("rnn_c");
  std::vector<std::string> outs{y, yh};
  if (mode == RnnMode::lstm) outs.push_back(yc);
  auto* node = add(mode == RnnMode::gru ? "GRU" : mode == RnnMode::lstm ? "LSTM" : "RNN", ins, outs);
  attr(node, "hidden_size", H);
  if (mode == RnnMode::gru) attr(node, "linear_before_reset", int64_t(1));  // PyTorch's GRU
  if (mode == RnnMode::rnn_tanh || mode == RnnMode::rnn_relu) {
    auto* a = node->add_attribute();
    a->set_name("activations");
    a->set_type(::onnx::AttributeProto::STRINGS);
    a->add_strings(mode == RnnMode::rnn_relu ? "Relu" : "Tanh");
  }
  // Y [T, 1, B, H] -> [T, B, H]; Y_h, Y_c [1, B, H] -> [B, H]
  add("Squeeze", {y, constant_ints({1})}, {out(layer.outputs[0], "rnn_y")});
  add("Squeeze", {yh, constant_ints({0})}, {out(layer.outputs[1], "rnn_h")});
  if (mode == RnnMode::lstm) add("Squeeze", {yc, constant_ints({0})}, {out(layer.outputs[2], "rnn_c")});
  states.push_back(yh);
  if (mode == RnnMode::lstm) states.push_back(yc);
  return y;
}

void Tracer::rnn(const debug::OpRecord& r) {
  if (r.args.get_if<RnnStackArgs>())
    unsupported(r, "it ran as one whole-stack entry (REEL_CUDNN_RNN=stack on a GPU), not layer by layer: "
                   "export with REEL_CUDNN_RNN=layers or from the CPU");
  std::vector<std::string> states;  // per layer: Y_h (and Y_c), each [1, B, H]
  std::string last;                 // the latest [T, B, F] value: the next layer's input
  Dims last_shape;
  int stacks = 0;
  bool lstm = std::string_view(r.op) == "lstm";
  for (const debug::OpRecord& c : nested_) {
    std::string_view op = c.op;
    bool known_input = !c.inputs.empty() && c.inputs[0].defined() && names_.count(c.inputs[0].impl());
    if (op == r.op) {
      if (!c.node) unsupported(r, "its layers were not recorded");
      const Tensor& x = c.inputs[0];
      std::string in = names_.count(x.impl()) ? names_[x.impl()] : last;
      if (in.empty() || (!names_.count(x.impl()) && x.shape() != last_shape))
        unsupported(r, "its layer's input " + x.shape().str() + " is not a traced value");
      rnn_layer(c, in, states);
      last = names_[c.outputs[0].impl()], last_shape = c.outputs[0].shape();
    } else if (op == "transpose" && known_input && c.node && !c.outputs.empty()) {
      // batch_first: [B, T, F] <-> [T, B, F]
      last = out(c.outputs[0], "transpose"), last_shape = c.outputs[0].shape();
      attr(add("Transpose", {names_[c.inputs[0].impl()]}, {last}), "perm", std::vector<int64_t>{1, 0, 2});
    } else if (op == "stack" && !c.outputs.empty()) {
      // h_n (then c_n for an LSTM): the layers' final states along a new first dim
      size_t per = lstm ? 2 : 1, which = size_t(stacks++);
      std::vector<std::string> parts;
      for (size_t k = which; k < states.size(); k += per) parts.push_back(states[k]);
      if (parts.size() != c.inputs.size()) unsupported(r, "its states do not match its layers");
      attr(add("Concat", parts, {out(c.outputs[0], "rnn_state")}), "axis", int64_t(0));
    } else if ((op == "narrow" || op == "squeeze") && !known_input) {
      // the zero initial state's slices (checked in rnn_layer)
    } else if (known_input || op == "cat" || op == "dropout" || op == "index_select" || op == "gather") {
      unsupported(r, "the op " + std::string(op) + " inside it (an initial state, lengths, more directions, "
                     "or dropout between layers in training mode)");
    }
  }
  if (states.empty()) unsupported(r, "no recorded layer (does anything in it require grad?)");
}

// ---- one exporter entry per op: each reads the op's arguments typed from its tape entry

void Tracer::passthrough(const debug::OpRecord& r) {  // contiguous, clone, detach: the input itself
  if (!r.outputs.empty() && r.inputs.size() == 1) names_[r.outputs[0].impl()] = in(r, 0), keep_.push_back(r.outputs[0]);
}

void Tracer::dropout(const debug::OpRecord& r) {
  if (!r.outputs.empty() && r.outputs[0].impl() != r.inputs[0].impl())
    unsupported(r, "dropout in training mode: call model.eval() before exporting");
  // eval: the input itself
}

void Tracer::linear(const debug::OpRecord& r) {
  const std::string op = r.op;
  const Tensor &x = r.inputs[0], &y = r.outputs[0];
  bool has_bias = r.inputs.size() > 2 && r.inputs[2].defined();
  std::string res = op == "linear" ? out(y, "linear") : fresh("linear");
  if (x.dim() == 2) {
    std::vector<std::string> ins{in(r, 0), in(r, 1)};
    if (has_bias) ins.push_back(in(r, 2));
    attr(add("Gemm", ins, {res}), "transB", int64_t(1));
  } else {
    // MatMul multiplies by W^T: a transposed copy of the weight is the initializer
    auto p = param_names_.find(r.inputs[1].impl());
    std::string wt = initializer(r.inputs[1].detach().t().contiguous(),
                                 p != param_names_.end() ? p->second + "_t" : fresh("weight_t"));
    std::string mm = has_bias ? fresh("matmul") : res;
    add("MatMul", {in(r, 0), wt}, {mm});
    if (has_bias) add("Add", {mm, in(r, 2)}, {res});
  }
  if (op == "linear_relu") add("Relu", {res}, {out(y, "relu")});
}

void Tracer::conv(const debug::OpRecord& r) {
  const std::string op = r.op;
  const ConvParams& a = r.node->args<ConvParams>();
  const Tensor& y = r.outputs[0];
  std::vector<std::string> ins{in(r, 0), in(r, 1)};
  if (op == "conv2d_blocked") {  // [N, C/B, H, W, B] -> [N, C, H, W] first
    const Tensor& xb = r.inputs[0];
    std::string t = fresh("unblock_transpose"), plain = fresh("unblocked");
    attr(add("Transpose", {ins[0]}, {t}), "perm", std::vector<int64_t>{0, 1, 4, 2, 3});
    add("Reshape", {t, constant_ints({0, xb.size(1) * xb.size(4), xb.size(2), xb.size(3)})}, {plain});
    ins[0] = plain;
  }
  if (r.inputs.size() > 2 && r.inputs[2].defined()) ins.push_back(in(r, 2));
  std::string res = op == "conv2d_relu" ? fresh("conv") : out(y, "conv");
  auto* c = add("Conv", ins, {res});
  const Tensor& w = r.inputs[1];
  attr(c, "kernel_shape", std::vector<int64_t>{w.size(2), w.size(3)});
  attr(c, "strides", std::vector<int64_t>{a.stride[0], a.stride[1]});
  attr(c, "pads", std::vector<int64_t>{a.padding[0], a.padding[1], a.padding[0], a.padding[1]});
  attr(c, "dilations", std::vector<int64_t>{a.dilation[0], a.dilation[1]});
  attr(c, "group", a.groups);
  if (op == "conv2d_relu") add("Relu", {res}, {out(y, "relu")});
}

void Tracer::pool(const debug::OpRecord& r) {
  const bool max = std::string_view(r.op) == "max_pool2d";
  const PoolArgs& a = r.node->args<PoolArgs>();
  if (r.inputs[0].dim() != 4) unsupported(r, "expected a batched [N, C, H, W] input");
  auto* p = add(max ? "MaxPool" : "AveragePool", {in(r, 0)}, {out(r.outputs[0], "pool")});
  attr(p, "kernel_shape", std::vector<int64_t>{a.kernel[0], a.kernel[1]});
  attr(p, "strides", std::vector<int64_t>{a.stride[0], a.stride[1]});
  attr(p, "pads", std::vector<int64_t>{a.padding[0], a.padding[1], a.padding[0], a.padding[1]});
  attr(p, "ceil_mode", int64_t(a.ceil_mode));
  if (!max) attr(p, "count_include_pad", int64_t(a.count_include_pad));
}

void Tracer::adaptive_pool(const debug::OpRecord& r) {
  const Tensor &x = r.inputs[0], &y = r.outputs[0];
  int64_t H = x.size(2), W = x.size(3), oh = y.size(2), ow = y.size(3);
  if (oh == 1 && ow == 1) {
    add("GlobalAveragePool", {in(r, 0)}, {out(y, "pool")});
  } else if (H % oh == 0 && W % ow == 0) {
    auto* p = add("AveragePool", {in(r, 0)}, {out(y, "pool")});
    attr(p, "kernel_shape", std::vector<int64_t>{H / oh, W / ow});
    attr(p, "strides", std::vector<int64_t>{H / oh, W / ow});
  } else {
    unsupported(r, "windows of unequal size (" + x.shape().str() + " -> " + y.shape().str() + ")");
  }
}

// eval: y = x scale + shift per channel, with the very floats the CPU kernel uses
// (scale = invstd w, shift = b - mean scale; cpu/norm.cpp); batch_norm_relu's pieces
// (inputs 0..k-1, saved before w, mean, invstd) are concatenated first
void Tracer::batch_norm(const debug::OpRecord& r) {
  const std::string op = r.op;
  const Node* n = r.node;
  const BatchNormArgs& a = n->args<BatchNormArgs>();
  if (a.training) unsupported(r, "batch norm in training mode: call model.eval() before exporting");
  const Tensor& y = r.outputs[0];
  const bool blocked = op == "batch_norm_relu_blocked", fused = op == "batch_norm_relu" || blocked;
  const size_t k = size_t(a.pieces);
  std::string x = in(r, 0);
  if (k > 1) {
    std::vector<std::string> parts;
    for (size_t i = 0; i < k; ++i) parts.push_back(in(r, i));
    x = fresh("bn_input");
    attr(add("Concat", parts, {x}), "axis", int64_t(1));
  }
  const size_t at = fused ? k + 1 : 2;  // the saved mean
  std::vector<float> mean = n->saved_tensor(at).to_vector<float>(), invstd = n->saved_tensor(at + 1).to_vector<float>();
  const Tensor& wt = r.inputs[k], &bt = r.inputs[k + 1];
  std::vector<float> w = wt.defined() ? wt.to_vector<float>() : std::vector<float>(mean.size(), 1);
  std::vector<float> b = bt.defined() ? bt.to_vector<float>() : std::vector<float>(mean.size(), 0);
  std::vector<float> scale(mean.size()), shift(mean.size());
  for (size_t c = 0; c < mean.size(); ++c) {
    scale[c] = invstd[c] * w[c];
    shift[c] = b[c] - mean[c] * scale[c];
  }
  const int plain_dims = r.inputs[0].dim();
  Dims shape = Dims::filled(plain_dims - 1, 1);
  shape[0] = int64_t(mean.size());
  std::string m = fresh("bn_scaled"), res = fused ? fresh("batch_norm") : out(y, "batch_norm");
  add("Mul", {x, constant_floats(scale, shape)}, {m});
  add("Add", {m, constant_floats(shift, shape)}, {res});
  if (fused && !blocked) add("Relu", {res}, {out(y, "relu")});
  if (blocked) {  // [N, C, H, W] -> [N, C/B, B, H, W] -> [N, C/B, H, W, B]
    std::string relu = fresh("relu"), split = fresh("channel_blocks");
    add("Relu", {res}, {relu});
    add("Reshape", {relu, constant_ints({0, y.size(1), y.size(4), y.size(2), y.size(3)})}, {split});
    attr(add("Transpose", {split}, {out(y, "blocked")}), "perm", std::vector<int64_t>{0, 1, 3, 4, 2});
  }
}

void Tracer::layer_norm(const debug::OpRecord& r) {
  const LayerNormArgs& a = r.node->args<LayerNormArgs>();
  const Tensor& x = r.inputs[0];
  Dims norm_shape;
  for (int d = int(a.lead); d < x.dim(); ++d) norm_shape.push_back(x.size(d));
  int64_t count = numel_of(norm_shape);
  std::string w = r.inputs.size() > 1 && r.inputs[1].defined() ? in(r, 1) : constant_floats(std::vector<float>(count, 1), norm_shape);
  std::string b = r.inputs.size() > 2 && r.inputs[2].defined() ? in(r, 2) : constant_floats(std::vector<float>(count, 0), norm_shape);
  if (opset_ < 17) unsupported(r, "LayerNormalization needs opset 17 or later");
  auto* l = add("LayerNormalization", {in(r, 0), w, b}, {out(r.outputs[0], "layer_norm")});
  attr(l, "axis", a.lead);
  attr(l, "epsilon", float(a.eps));
}

void Tracer::unary(const debug::OpRecord& r) {  // relu, tanh, sigmoid
  const std::string_view op = r.op;
  add(op == "relu" ? "Relu" : op == "tanh" ? "Tanh" : "Sigmoid", {in(r, 0)}, {out(r.outputs[0], r.op)});
}

void Tracer::gelu_op(const debug::OpRecord& r) { gelu(r, r.node->args<ActivationArgs>().kind == UnaryOp::gelu_tanh); }

void Tracer::softmax(const debug::OpRecord& r) {
  const SoftmaxArgs& a = r.node->args<SoftmaxArgs>();
  attr(add(a.log ? "LogSoftmax" : "Softmax", {in(r, 0)}, {out(r.outputs[0], r.op)}), "axis", a.dim);
}

void Tracer::transpose(const debug::OpRecord& r) {
  const TransposeArgs& a = r.node->args<TransposeArgs>();
  std::vector<int64_t> perm(size_t(r.outputs[0].dim()));
  for (size_t d = 0; d < perm.size(); ++d) perm[d] = int64_t(d);
  std::swap(perm[size_t(a.dim0)], perm[size_t(a.dim1)]);
  attr(add("Transpose", {in(r, 0)}, {out(r.outputs[0], r.op)}), "perm", perm);
}

void Tracer::permute(const debug::OpRecord& r) {
  const PermuteArgs& a = r.node->args<PermuteArgs>();
  attr(add("Transpose", {in(r, 0)}, {out(r.outputs[0], r.op)}), "perm", a.order.vec());
}

// add, sub, mul, div of two tensors (add and sub with alpha: b scaled first); mul by a
// number (ScaleArgs)
void Tracer::arithmetic(const debug::OpRecord& r) {
  const std::string_view op = r.op;
  const Tensor& y = r.outputs[0];
  if (r.inputs.size() == 2) {
    const char* type = op == "add" ? "Add" : op == "sub" ? "Sub" : op == "mul" ? "Mul" : "Div";
    std::string b = in(r, 1);
    // sub keeps a + alpha b with alpha negated: Sub(a, -alpha b)
    if (const AlphaArgs* a = r.node->args_if<AlphaArgs>(); a && a->alpha != (op == "sub" ? -1.0 : 1.0)) {
      std::string scaled = fresh("alpha");
      add("Mul", {b, constant_floats({float(op == "sub" ? -a->alpha : a->alpha)}, {})}, {scaled});
      b = scaled;
    }
    add(type, {in(r, 0), b}, {out(y, r.op)});
  } else if (const ScaleArgs* a = r.node->args_if<ScaleArgs>()) {
    add("Mul", {in(r, 0), constant_floats({float(a->scale)}, {})}, {out(y, r.op)});
  } else {
    unsupported(r, "no ONNX form for it in reel's exporter");
  }
}

void Tracer::add_relu(const debug::OpRecord& r) {
  std::string sum = fresh("add");
  add("Add", {in(r, 0), in(r, 1)}, {sum});
  add("Relu", {sum}, {out(r.outputs[0], "relu")});
}

void Tracer::matmul(const debug::OpRecord& r) { add("MatMul", {in(r, 0), in(r, 1)}, {out(r.outputs[0], r.op)}); }

void Tracer::cat(const debug::OpRecord& r) {  // DenseNet's concatenations
  std::vector<std::string> parts;
  for (size_t i = 0; i < r.inputs.size(); ++i) parts.push_back(in(r, i));
  attr(add("Concat", parts, {out(r.outputs[0], r.op)}), "axis", r.node->args<DimArgs>().dim);
}

void Tracer::embedding(const debug::OpRecord& r) {
  // the ids are not among the entry's inputs; its saved flat index views their storage
  Tensor idx = r.node->saved_tensor(0);
  std::string ids;
  for (const Tensor& t : keep_)
    if (t.defined() && t.storage().get() == idx.storage().get() && t.numel() == idx.numel() && names_.count(t.impl()))
      ids = names_[t.impl()];
  if (ids.empty()) unsupported(r, "its indices are not a traced value (an input or an op's output)");
  add("Gather", {in(r, 0), ids}, {out(r.outputs[0], "embedding")});
}

// What each op becomes: the exporter entry for an op name, and whether it needs the op's
// tape entry (its arguments or saved tensors; the trace records every op it can).
struct Tracer::Entry {
  void (Tracer::*fn)(const debug::OpRecord&);
  bool needs_entry = true;
};

const std::unordered_map<std::string_view, Tracer::Entry>& Tracer::entries() {
  static const std::unordered_map<std::string_view, Entry> table = {
      {"gru", {&Tracer::rnn, false}}, {"lstm", {&Tracer::rnn, false}},
      {"rnn_tanh", {&Tracer::rnn, false}}, {"rnn_relu", {&Tracer::rnn, false}},
      {"dropout", {&Tracer::dropout, false}},
      {"contiguous", {&Tracer::passthrough, false}}, {"clone", {&Tracer::passthrough, false}},
      {"detach", {&Tracer::passthrough, false}},
      {"linear", {&Tracer::linear}}, {"linear_relu", {&Tracer::linear}},
      {"conv2d", {&Tracer::conv}}, {"conv2d_relu", {&Tracer::conv}}, {"conv2d_blocked", {&Tracer::conv}},
      {"max_pool2d", {&Tracer::pool}}, {"avg_pool2d", {&Tracer::pool}},
      {"adaptive_avg_pool2d", {&Tracer::adaptive_pool}},
      {"batch_norm", {&Tracer::batch_norm}}, {"batch_norm_relu", {&Tracer::batch_norm}},
      {"batch_norm_relu_blocked", {&Tracer::batch_norm}},
      {"layer_norm", {&Tracer::layer_norm}},
      {"relu", {&Tracer::unary}}, {"tanh", {&Tracer::unary}}, {"sigmoid", {&Tracer::unary}},
      {"gelu", {&Tracer::gelu_op}},
      {"softmax", {&Tracer::softmax}}, {"log_softmax", {&Tracer::softmax}},
      {"reshape", {&Tracer::reshape}}, {"view", {&Tracer::reshape}}, {"flatten", {&Tracer::reshape}},
      {"squeeze", {&Tracer::squeeze}}, {"unsqueeze", {&Tracer::squeeze}},
      {"transpose", {&Tracer::transpose}}, {"permute", {&Tracer::permute}},
      {"add", {&Tracer::arithmetic}}, {"sub", {&Tracer::arithmetic}}, {"mul", {&Tracer::arithmetic}},
      {"div", {&Tracer::arithmetic}},
      {"add_relu", {&Tracer::add_relu}},
      {"matmul", {&Tracer::matmul}},
      {"cat", {&Tracer::cat}},
      {"embedding", {&Tracer::embedding}},
  };
  return table;
}

void Tracer::op(const debug::OpRecord& r) {
  struct Clear {  // the nested records belong to this op only
    std::vector<debug::OpRecord>& v;
    ~Clear() { v.clear(); }
  } clear{nested_};
  auto it = entries().find(r.op);
  if (it == entries().end()) unsupported(r, "no ONNX form for it in reel's exporter (onnx/export.h lists the ops)");
  if (it->second.needs_entry && (!r.node || r.outputs.empty()))
    unsupported(r, "it was not recorded (an input on which nothing requires grad?)");
  (this->*it->second.fn)(r);
}

}  // namespace reel::onnx::internal
