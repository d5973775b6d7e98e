// 2-D convolution, NCHW: conv2d and conv2d_relu (bias and relu fused into the
// forward kernel). Shapes: x [N, C, H, W], weight [O, C/groups, KH, KW], bias [O]
// -> y [N, O, OH, OW], OH = (H + 2 pad - dil (KH - 1) - 1) / stride + 1.
#include "autocast.h"
#include "op_support.h"
#include "ops.h"

namespace reel {
namespace {

using Grads = std::vector<Tensor>;

ConvParams params_of(const Conv2dOptions& o) {
  ConvParams p;
  for (int i = 0; i < 2; ++i) {
    p.stride[i] = o.stride[i];
    p.padding[i] = o.padding[i];
    p.dilation[i] = o.dilation[i];
  }
  p.groups = o.groups;
  return p;
}

Conv2dOptions options_of(const ConvParams& p) {
  return {.stride = {p.stride[0], p.stride[1]},
          .padding = {p.padding[0], p.padding[1]},
          .dilation = {p.dilation[0], p.dilation[1]},
          .groups = p.groups};
}

// ---- the two gradients as recorded ops, for a create_graph backward. Both are
// bilinear; with conv2d they form a set closed under differentiation:
// gx = conv_transpose(g, W): dg = conv2d(ggx, W), dW = weight_grad(ggx, g)
// gW = weight_grad(x, g):    dx = conv_transpose(g, ggW), dg = conv2d(x, ggW)
Tensor conv2d_weight_grad(const Tensor& x, const Tensor& g, const Dims& w_shape, const ConvParams& p);

Tensor conv2d_input_grad(const Tensor& g, const Tensor& w, const Dims& x_shape, const ConvParams& p) {
  OpScope op("conv2d_backward_data", {});
  Tensor gx = new_tensor(x_shape, g.dtype(), g.device());
  if (gx.numel()) backend_of(g).conv2d_backward_data(gx, g, w, p);
  Node* n = record(op, [](Node& n, const Grads& gg, Grads& gi) {
        const ConvParams& p = n.args<ConvParams>();
        if (n.needs_grad(0)) gi[0] = conv2d(gg[0], n.saved_tensor(1), {}, options_of(p));
        if (n.needs_grad(1)) gi[1] = conv2d_weight_grad(gg[0], n.saved_tensor(0), n.input_shape(1), p);
      }, {&g, &w}, {&gx});
  if (n) {
    n->save(n->needs_grad(1) ? g : Tensor());
    n->save(n->needs_grad(0) ? w : Tensor());
  }
  keep_args(op, n, p);
  return gx;
}

Tensor conv2d_weight_grad(const Tensor& x, const Tensor& g, const Dims& w_shape, const ConvParams& p) {
  OpScope op("conv2d_backward_weight", {});
  Tensor gw = new_tensor(w_shape, g.dtype(), g.device());
  if (g.numel()) backend_of(g).conv2d_backward_weight(gw, Tensor(), g, x, p);
  else backend_of(g).fill(gw, 0);
  Node* n = record(op, [](Node& n, const Grads& gg, Grads& gi) {
        const ConvParams& p = n.args<ConvParams>();
        if (n.needs_grad(0)) gi[0] = conv2d_input_grad(n.saved_tensor(1), gg[0], n.input_shape(0), p);
        if (n.needs_grad(1)) gi[1] = conv2d(n.saved_tensor(0), gg[0], {}, options_of(p));
      }, {&x, &g}, {&gw});
  if (n) {
    n->save(n->needs_grad(1) ? x : Tensor());
    n->save(n->needs_grad(0) ? g : Tensor());
  }
  keep_args(op, n, p);
  return gw;
}

// A fresh [N, C, H, W] activation for a convolution in `dtype` to write: channels-last
// where the backend keeps that dtype's activations so (Backend::channels_last) and the
// tensor it comes from, `from`, is channels-last or has few channels (a network's input
// image: its reorder is cheap, and the chain of channels-last layers starts there), else
// plain. A plain `from` with many channels comes from an op that writes plain (the norms):
// a plain y lets the next op read it as it is, and 1x1 convolutions run as GEMMs.
Tensor conv_activation(const Backend& be, const Dims& shape, DType dtype, Device device, const Tensor& from) {
  const bool cl = be.channels_last(dtype) && is_channels_last(shape, channels_last_strides(shape)) &&
                  from.dim() == 4 && (is_channels_last(from.shape(), from.strides()) || from.size(1) < 8);
  return new_tensor(shape, dtype, device, cl ? channels_last_strides(shape) : contiguous_strides(shape));
}

// Checks everything, then y = conv(x, w) + b (then relu) in one backend call.
// (`as_given`: what the backend reads in x's place, a channel-blocked x; x then only shapes the checks)
Tensor conv_forward(const OpScope& op, const Tensor& x, const Tensor& w, const Tensor& b, const ConvParams& p,
                    bool relu, const Tensor& as_given = {}) {
  check_defined(op, x, "the input");
  check_defined(op, w, "the weight");
  check_same_device(op, x, w);
  check_floating(op, x, "the input");
  check_dim(op, x, 4, "the input [N, C, H, W]");
  check_dim(op, w, 4, "the weight [O, C/groups, KH, KW]");
  if (x.dtype() != w.dtype())
    fail(op.op, fmt::format("expected the input and the weight of one dtype, got {} and {}", describe(x), describe(w)),
         op.site);
  for (int i = 0; i < 2; ++i)
    if (p.stride[i] < 1 || p.dilation[i] < 1 || p.padding[i] < 0)
      fail(op.op, fmt::format("expected stride >= 1, dilation >= 1 and padding >= 0, got stride [{}, {}], "
                              "dilation [{}, {}], padding [{}, {}]", p.stride[0], p.stride[1], p.dilation[0],
                              p.dilation[1], p.padding[0], p.padding[1]), op.site);
  int64_t C = x.size(1), O = w.size(0), g = p.groups;
  if (g < 1 || C % g != 0 || O % g != 0)
    fail(op.op, fmt::format("groups = {} must divide the input's {} channels and the weight's {} output channels "
                            "(input {}, weight {})", g, C, O, x.shape().str(), w.shape().str()), op.site);
  if (w.size(1) * g != C)
    fail(op.op, fmt::format("the input {} has {} channels but the weight {} with groups = {} expects {}",
                            x.shape().str(), C, w.shape().str(), g, w.size(1) * g), op.site);
  // No input channels: an Error. (PyTorch 1.13 gives an empty [N, 0, OH, OW] there, a shape
  // whose channels disagree with the weight's O and which drops the bias; no sound value to copy.)
  if (C == 0)
    fail(op.op, fmt::format("expected an input with at least one channel, got input {} and weight {}",
                            x.shape().str(), w.shape().str()), op.site);
  if (O == 0)
    fail(op.op, fmt::format("expected a weight with at least one output channel, got {}", w.shape().str()), op.site);
  if (w.size(2) == 0 || w.size(3) == 0)
    fail(op.op, fmt::format("expected a non-empty kernel, got weight {}", w.shape().str()), op.site);
  if (b.defined()) {
    check_same_device(op, x, b);
    if (b.dtype() != x.dtype() || b.dim() != 1 || b.size(0) != O)
      fail(op.op, fmt::format("expected a bias [{}] {} for the weight {}, got {}", O, dtype_name(x.dtype()),
                              w.shape().str(), describe(b)), op.site);
  }
  Dims shape{x.size(0), O, 0, 0};
  for (int i = 0; i < 2; ++i) {
    int64_t extent = p.dilation[i] * (w.size(2 + i) - 1) + 1, padded = x.size(2 + i) + 2 * p.padding[i];
    if (extent > padded)
      fail(op.op, fmt::format("the kernel [{}, {}] (dilation [{}, {}]) is larger than the padded input [{}, {}] "
                              "(input {}, padding [{}, {}])", w.size(2), w.size(3), p.dilation[0], p.dilation[1],
                              x.size(2) + 2 * p.padding[0], x.size(3) + 2 * p.padding[1], x.shape().str(),
                              p.padding[0], p.padding[1]), op.site);
    shape[2 + i] = (padded - extent) / p.stride[i] + 1;
  }
  Tensor y = as_given.defined() ? new_tensor(shape, x.dtype(), x.device())
                                 : conv_activation(backend_of(x), shape, x.dtype(), x.device(), x);
  if (y.numel()) backend_of(x).conv2d_forward(y, as_given.defined() ? as_given : x, w, b, p, relu);
  return y;
}

// gi[1] = dW and gi[2] = db of a conv node through the backend kernels, x as the backend reads it
void weight_grads(Node& n, const Tensor& g, const Tensor& x, const ConvParams& p, Grads& gi) {
  if (n.needs_grad(1)) {
    Backend& be = backend_of(g);
    Tensor gw = new_tensor(n.input_shape(1), n.inputs[1].dtype, g.device());
    Tensor gb = n.needs_grad(2) ? new_tensor(n.input_shape(2), n.inputs[2].dtype, g.device()) : Tensor();
    if (g.numel()) {
      be.conv2d_backward_weight(gw, gb, g, x, p);
    } else {
      be.fill(gw, 0);
      if (gb.defined()) be.fill(gb, 0);
    }
    gi[1] = gw;
    gi[2] = gb;
  } else if (n.needs_grad(2)) {
    gi[2] = sum(g.to(n.inputs[2].dtype), {0, 2, 3});
  }
}

// dx = conv_transpose(g, W), dW = correlate(x, g), db = sum of g over N, H, W; each in
// its input's dtype (under autocast the saved x and W are bf16/f16 copies of f32 inputs,
// and the backend accumulates the f32 gradients directly)
void conv_grads(Node& n, const Tensor& g, Grads& gi) {
  const ConvParams& p = n.args<ConvParams>();
  if (grad_enabled()) {  // create_graph: recorded ops, so second derivatives exist
    // (the engine casts these to the inputs' dtypes; the bias sum runs in its own, f32 under autocast)
    if (n.needs_grad(0)) gi[0] = conv2d_input_grad(g, n.saved_tensor(1), n.input_shape(0), p);
    if (n.needs_grad(1)) gi[1] = conv2d_weight_grad(n.saved_tensor(0), g, n.input_shape(1), p);
    if (n.needs_grad(2)) gi[2] = sum(g.to(n.inputs[2].dtype), {0, 2, 3});
    return;
  }
  if (n.needs_grad(0)) {
    Tensor gx = conv_activation(backend_of(g), n.input_shape(0), n.inputs[0].dtype, g.device(), g);
    if (gx.numel()) backend_of(g).conv2d_backward_data(gx, g, n.saved_tensor(1), p);
    gi[0] = gx;
  }
  weight_grads(n, g, n.saved_tensor(0), p, gi);
}

// String padding as amounts for the kernel [KH, KW]: "valid" none, "same" dil (k - 1) / 2
// on each side (stride 1 only), and where dil (k - 1) is odd one more row / column at the
// bottom / right, which x gets first (PyTorch pads so too); `pad_x`: whether this op may
// pad x (conv2d_blocked refuses the uneven case instead). Returns x as the convolution reads it.
Tensor resolve_padding(const OpScope& op, const Tensor& x, const Tensor& w, Conv2dOptions& opt, bool pad_x = true) {
  if (opt.padding.mode.empty()) return x;
  const std::string mode = opt.padding.mode;
  if (mode == "valid") {
    opt.padding = 0;
    return x;
  }
  if (mode != "same")
    fail(op.op, fmt::format("expected padding \"same\", \"valid\" or amounts, got \"{}\"", mode), op.site);
  check_defined(op, w, "the weight");
  check_dim(op, w, 4, "the weight [O, C/groups, KH, KW]");
  if (opt.stride.h != 1 || opt.stride.w != 1)
    fail(op.op, fmt::format("padding \"same\" needs stride 1 (PyTorch's rule), got stride [{}, {}]", opt.stride.h,
                            opt.stride.w), op.site);
  if (opt.dilation.h < 1 || opt.dilation.w < 1)
    fail(op.op, fmt::format("expected dilation >= 1, got [{}, {}]", opt.dilation.h, opt.dilation.w), op.site);
  const int64_t th = opt.dilation.h * (w.size(2) - 1), tw = opt.dilation.w * (w.size(3) - 1);
  opt.padding = {th / 2, tw / 2};
  if (th % 2 == 0 && tw % 2 == 0) return x;
  if (!pad_x)
    fail(op.op, fmt::format("padding \"same\" for the weight {} (dilation [{}, {}]) needs one more row or column at "
                            "the bottom or right than at the top or left, which a channel-blocked input cannot take; "
                            "use conv2d", w.shape().str(), opt.dilation.h, opt.dilation.w), op.site);
  check_defined(op, x, "the input");
  check_dim(op, x, 4, "the input [N, C, H, W]");
  return pad(x, {0, tw % 2, 0, th % 2});
}

}  // namespace

// y = conv(x, W) + b; dx = conv_transpose(g, W), dW = correlate(x, g), db = sum_{n,h,w} g
Tensor conv2d(const Tensor& x_in, const Tensor& weight, const Tensor& bias, Conv2dOptions opt, Site site) {
  OpScope op("conv2d", site);
  const Tensor x = resolve_padding(op, x_in, weight, opt);
  ConvParams p = params_of(opt);
  const Tensor xc = autocast_lower(x), wc = autocast_lower(weight), bc = autocast_lower(bias);
  Tensor y = conv_forward(op, xc, wc, bc, p, false);
  Node* n = record(op, [](Node& n, const Grads& g, Grads& gi) { conv_grads(n, g[0], gi); },
                       {&x, &weight, &bias}, {&y});
  if (n) {
    n->save(n->needs_grad(1) ? xc : Tensor());
    n->save(n->needs_grad(0) ? wc : Tensor());
  }
  keep_args(op, n, p);
  return y;
}

// y = relu(conv(x, W) + b); the conv2d gradients of m = g (y > 0)
Tensor conv2d_relu(const Tensor& x_in, const Tensor& weight, const Tensor& bias, Conv2dOptions opt, Site site) {
  OpScope op("conv2d_relu", site);
  const Tensor x = resolve_padding(op, x_in, weight, opt);
  ConvParams p = params_of(opt);
  const Tensor xc = autocast_lower(x), wc = autocast_lower(weight), bc = autocast_lower(bias);
  Tensor y = conv_forward(op, xc, wc, bc, p, true);
  Node* n = record(op, [](Node& n, const Grads& g, Grads& gi) {
        conv_grads(n, relu_grad(g[0], n.saved_tensor(2)), gi);
      }, {&x, &weight, &bias}, {&y});
  if (n) {
    n->save(n->needs_grad(1) ? xc : Tensor());
    n->save(n->needs_grad(0) ? wc : Tensor());
    n->save(y);
  }
  keep_args(op, n, p);
  return y;
}

int64_t conv2d_channel_block(const Tensor& x) {
  if (!x.defined()) return 0;
  DType dt = autocast_active(x) && x.dtype() != DType::f64 && is_floating(x.dtype())
                 ? autocast_dtype(x.device().type) : x.dtype();
  return backend_of(x).conv2d_channel_block(dt);
}

Tensor to_channel_blocks(const Tensor& x, int64_t block, Site site) {
  OpScope op("to_channel_blocks", site);
  check_defined(op, x, "the input");
  check_dim(op, x, 4, "the input [N, C, H, W]");
  if (block != 8 && block != 16) fail(op.op, fmt::format("expected a channel block of 8 or 16, got {}", block), op.site);
  if (x.size(1) % block != 0)
    fail(op.op, fmt::format("expected channels divisible by the block {}, got {}", block, describe(x)), op.site);
  return x.reshape({x.size(0), x.size(1) / block, block, x.size(2), x.size(3)}).permute({0, 1, 3, 4, 2}).contiguous();
}

Tensor from_channel_blocks(const Tensor& xb, Site site) {
  OpScope op("from_channel_blocks", site);
  check_defined(op, xb, "the input");
  check_dim(op, xb, 5, "a channel-blocked input [N, C/B, H, W, B]");
  return xb.permute({0, 1, 4, 2, 3}).reshape(unblocked_shape(xb.shape()));
}

// conv2d on xb [N, C/B, H, W, B]: handed to the backend as it is where the backend reads
// that block (conv2d_channel_block), else through plain copies; the gradients as conv2d's,
// the input's blocked again
Tensor conv2d_blocked(const Tensor& xb_in, const Tensor& weight, const Tensor& bias, Conv2dOptions opt, Site site) {
  OpScope op("conv2d_blocked", site);
  check_defined(op, xb_in, "the input");
  check_dim(op, xb_in, 5, "a channel-blocked input [N, C/B, H, W, B]");
  const int64_t B = xb_in.size(4);
  if (B != 8 && B != 16) fail(op.op, fmt::format("expected a channel block of 8 or 16, got {}", describe(xb_in)), op.site);
  resolve_padding(op, xb_in, weight, opt, false);
  ConvParams p = params_of(opt);
  const Tensor xb = autocast_lower(xb_in), wc = autocast_lower(weight), bc = autocast_lower(bias);
  const Dims plain = unblocked_shape(xb.shape());
  Tensor y;
  if (backend_of(xb).conv2d_channel_block(xb.dtype()) == B) {
    // conv_forward checks and runs x's logical [N, C, H, W]: a view that is never read
    // stands in for it in the checks, and the backend gets the blocked tensor itself
    Dims dense_strides{plain[1] * plain[2] * plain[3], plain[2] * plain[3], plain[3], 1};
    Tensor stand_in = storage_view(xb, plain, dense_strides, xb.offset());
    y = conv_forward(op, stand_in, wc, bc, p, false, xb);
  } else {
    Tensor x = new_tensor(plain, xb.dtype(), xb.device());
    copy_from_channel_blocks(x, xb);
    y = conv_forward(op, x, wc, bc, p, false);
  }
  Node* n = record(op, [](Node& n, const Grads& gg, Grads& gi) {
        const Tensor& g = gg[0];
        const ConvParams& p = n.args<ConvParams>();
        Tensor xb = n.saved_tensor(0), w = n.saved_tensor(1);
        const Dims plain = unblocked_shape(n.input_shape(0));
        const int64_t B = n.input_shape(0)[4];
        if (grad_enabled()) {  // create_graph: through conv2d's recorded gradients and view ops
          if (n.needs_grad(0)) gi[0] = to_channel_blocks(conv2d_input_grad(g, w, plain, p), B);
          if (n.needs_grad(1)) gi[1] = conv2d_weight_grad(from_channel_blocks(xb), g, n.input_shape(1), p);
          if (n.needs_grad(2)) gi[2] = sum(g.to(n.inputs[2].dtype), {0, 2, 3});
          return;
        }
        Backend& be = backend_of(g);
        const bool direct = be.conv2d_channel_block(g.dtype()) == B;
        if (n.needs_grad(0)) {
          Tensor gxb = new_tensor(n.input_shape(0), n.inputs[0].dtype, g.device());
          if (gxb.numel() && direct) {
            be.conv2d_backward_data(gxb, g, w, p);
          } else if (gxb.numel()) {
            Tensor gx = new_tensor(plain, g.dtype(), g.device());
            be.conv2d_backward_data(gx, g, w, p);
            copy_to_channel_blocks(gxb, gx);
          }
          gi[0] = gxb;
        }
        Tensor x = xb;
        if (!direct && n.needs_grad(1) && g.numel()) {
          x = new_tensor(plain, xb.dtype(), xb.device());
          copy_from_channel_blocks(x, xb);
        }
        weight_grads(n, g, x, p, gi);
      }, {&xb_in, &weight, &bias}, {&y});
  if (n) {
    n->save(n->needs_grad(1) ? xb : Tensor());
    n->save(n->needs_grad(0) ? wc : Tensor());
  }
  keep_args(op, n, p);
  return y;
}

}  // namespace reel

namespace reel {

// y = the gradient of conv2d with respect to its input, as an op: x [N, C, H, W] plays
// conv2d's output gradient, weight [C, O/g, KH, KW] conv2d's weight (same layout).
// OH = (H - 1) stride - 2 pad + dil (KH - 1) + output_padding + 1.
// dx = conv2d(g, W), dW = weight_grad(g as conv2d's input, x as its output gradient), db = sum_{n,h,w} g
Tensor conv_transpose2d(const Tensor& x_in, const Tensor& weight_in, const Tensor& bias_in,
                        ConvTranspose2dOptions opt, Site site) {
  OpScope op("conv_transpose2d", site);
  const Tensor x = autocast_lower(x_in), weight = autocast_lower(weight_in), bias = autocast_lower(bias_in);
  check_defined(op, x, "the input");
  check_defined(op, weight, "the weight");
  check_same_device(op, x, weight);
  check_floating(op, x, "the input");
  check_dim(op, x, 4, "the input [N, C, H, W]");
  check_dim(op, weight, 4, "the weight [C, O/groups, KH, KW]");
  if (x.dtype() != weight.dtype())
    fail(op.op, fmt::format("expected the input and the weight of one dtype, got {} and {}", describe(x),
                            describe(weight)), op.site);
  ConvParams p = params_of({.stride = opt.stride, .padding = opt.padding, .dilation = opt.dilation,
                            .groups = opt.groups});
  const int64_t C = x.size(1), g = opt.groups;
  if (g < 1 || weight.size(0) != C || C % g != 0)
    fail(op.op, fmt::format("the input {} has {} channels; expected a weight [{}, O/groups, KH, KW] with groups = {} "
                            "dividing them, got {}", x.shape().str(), C, C, g, weight.shape().str()), op.site);
  const int64_t O = weight.size(1) * g;
  Dims shape{x.size(0), O, 0, 0};
  for (int i = 0; i < 2; ++i) {
    if (p.stride[i] < 1 || p.dilation[i] < 1 || p.padding[i] < 0 || opt.output_padding[i] < 0 ||
        opt.output_padding[i] >= p.stride[i])
      fail(op.op, fmt::format("expected stride >= 1, dilation >= 1, padding >= 0 and 0 <= output_padding < stride, "
                              "got stride [{}, {}], dilation [{}, {}], padding [{}, {}], output_padding "
                              "[{}, {}]", p.stride[0], p.stride[1], p.dilation[0], p.dilation[1], p.padding[0],
                              p.padding[1], opt.output_padding[0], opt.output_padding[1]), op.site);
    shape[2 + i] = (x.size(2 + i) - 1) * p.stride[i] - 2 * p.padding[i] + p.dilation[i] * (weight.size(2 + i) - 1) +
                   opt.output_padding[i] + 1;
    if (shape[2 + i] < 1)
      fail(op.op, fmt::format("the output would have size {} in dim {} (input {}, weight {})", shape[2 + i], 2 + i,
                              x.shape().str(), weight.shape().str()), op.site);
  }
  if (bias.defined()) {
    check_same_device(op, x, bias);
    if (bias.dtype() != x.dtype() || bias.dim() != 1 || bias.size(0) != O)
      fail(op.op, fmt::format("expected a bias [{}] {}, got {}", O, dtype_name(x.dtype()), describe(bias)), op.site);
  }
  Tensor y = new_tensor(shape, x.dtype(), x.device());
  if (y.numel()) {
    if (x.numel()) backend_of(x).conv2d_backward_data(y, x.contiguous(), weight.contiguous(), p);
    else backend_of(x).fill(y, 0);
  }
  Node* n = record(op, [](Node& n, const Grads& g, Grads& gi) {
        const ConvParams& p = n.args<ConvParams>();
        if (n.needs_grad(0)) gi[0] = conv2d(g[0], n.saved_tensor(1), {}, options_of(p));
        if (n.needs_grad(1)) gi[1] = conv2d_weight_grad(g[0], n.saved_tensor(0), n.input_shape(1), p);
      }, {&x_in, &weight_in}, {&y});
  if (n) {
    n->save(n->needs_grad(1) ? x : Tensor());
    n->save(n->needs_grad(0) ? weight : Tensor());
  }
  keep_args(op, n, p);
  if (!bias.defined()) return y;
  return add(y, bias_in.to(y.dtype()).reshape({1, O, 1, 1}));  // recorded: the gradient reaches bias_in
}

}  // namespace reel
