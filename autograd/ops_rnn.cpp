// Recurrent layers. rnn_layer: one layer, one direction, the whole sequence in one
// backend call (oneDNN's / cuDNN's RNN primitives, the loops for f64) and its
// backward rule in one more. rnn: PyTorch's nn.RNN/LSTM/GRU forward composed from
// rnn_layer with recorded view, index and join ops, so its own gradient needs no rule; or,
// where the backend serves it (Backend::rnn_stack_forward: cuDNN under REEL_CUDNN_RNN=stack),
// every layer and direction in one backend call, one tape entry and one backward call.
// Shapes: x [T, B, I], h0/c0 [B, H], w_ih [G H, I], w_hh [G H, H], b [G H]
//   -> y [T, B, H], h_n/c_n [B, H]; G = 1 (RNN), 4 (LSTM), 3 (GRU).
#include "ops_rnn.h"

#include <algorithm>
#include <numeric>

#include "autocast.h"
#include "autocast_products.h"
#include "op_support.h"
#include "ops.h"

namespace reel {
namespace {

using Grads = std::vector<Tensor>;

const char* mode_name(RnnMode m) {
  switch (m) {
    case RnnMode::rnn_tanh: return "rnn_tanh";
    case RnnMode::rnn_relu: return "rnn_relu";
    case RnnMode::lstm: return "lstm";
    case RnnMode::gru: return "gru";
  }
  return "rnn";
}

Tensor dense(const Tensor& t) { return t.defined() ? t.contiguous() : t; }

void check_same_kind(const OpScope& op, const Tensor& x, const Tensor& t, const char* what) {
  check_same_device(op, x, t);
  if (t.dtype() != x.dtype())
    fail(op.op, fmt::format("expected {} of the input's dtype {}, got {}", what, dtype_name(x.dtype()), describe(t)),
         op.site);
}

void check_shape(const OpScope& op, const Tensor& t, const Dims& expected, const char* what) {
  if (t.shape() != expected)
    fail(op.op, fmt::format("expected {} of shape {}, got {}", what, expected.str(), t.shape().str()), op.site);
}

// Whether this layer computes in bf16: CPU autocast to bf16 on a backend whose recurrent
// layers run in bf16 (oneDNN's bf16 RNN primitives: AVX512-BF16 or AMX), where autocast's
// products run in bf16 (CpuBf16Products). PyTorch 2.x's CPU autocast lowers its LSTM too
// (mkldnn_rnn_layer); reel lowers every recurrent layer.
bool bf16_layer(const Tensor& x) {
  return x.defined() && x.device().is_cpu() && autocast_active(x) &&
         autocast_dtype(x.device().type) == DType::bf16 && (x.dtype() == DType::f32 || x.dtype() == DType::bf16) &&
         backend_of(x).rnn_native_bf16() && autocast_products_low(x);
}

// d(loss)/d(inputs) of one layer from the gradients of y, h and c (zeros where none came).
// A bf16 layer takes and gives f32 gradients (the engine casts them to the inputs' dtypes).
void rnn_layer_grads(Node& n, const Grads& g, Grads& gi) {
  if (grad_enabled())
    fail(n.op, "a create_graph backward (second derivatives) through a recurrent layer is not supported; "
               "its backward is one fused kernel", n.site);
  const RnnLayerArgs& args = n.args<RnnLayerArgs>();
  RnnParams p = args;
  p.training = true;
  Tensor x = n.saved_tensor(0), hx = n.saved_tensor(1), cx = n.saved_tensor(2), w_ih = n.saved_tensor(3),
         w_hh = n.saved_tensor(4), b_ih = n.saved_tensor(5), b_hh = n.saved_tensor(6), y = n.saved_tensor(7),
         hy = n.saved_tensor(8), cy = n.saved_tensor(9), ws = n.saved_tensor(10);
  bool lstm = p.mode == RnnMode::lstm;
  const bool bf16 = args.bf16;
  // a gradient as the backend takes it: the tensor's own dtype, f32 for a bf16 layer
  auto like = [&](const Tensor& t) { return new_tensor(t.shape(), bf16 ? DType::f32 : t.dtype(), t.device()); };
  auto grad_or_zeros = [&](size_t i, const Tensor& out) {
    if (i < g.size() && g[i].defined()) return (bf16 ? cast(g[i], DType::f32) : g[i]).contiguous();
    Tensor z = like(out);
    backend_of(out).fill(z, 0);
    return z;
  };
  Tensor gy = grad_or_zeros(0, y), ghy = grad_or_zeros(1, hy), gcy = lstm ? grad_or_zeros(2, cy) : Tensor();
  Tensor gx = like(x), ghx = like(hx), gcx = lstm ? like(cx) : Tensor();
  Tensor gw_ih = like(w_ih), gw_hh = like(w_hh);
  Tensor gb_ih = p.bias ? like(b_ih) : Tensor(), gb_hh = p.bias ? like(b_hh) : Tensor();
  backend_of(x).rnn_backward(p, gx, ghx, gcx, gw_ih, gw_hh, gb_ih, gb_hh, gy, ghy, gcy, x, hx, cx, w_ih, w_hh, b_ih,
                             b_hh, y, hy, cy, ws);
  Tensor outs[7] = {gx, ghx, gcx, gw_ih, gw_hh, gb_ih, gb_hh};
  for (size_t i = 0; i < 7; ++i)
    if (n.needs_grad(i)) gi[i] = outs[i];
}

}  // namespace

// y_t, h_t = cell(x_t, h_{t-1}) for t in order; backward: the cell's chain rule
// through time in one backend call (gate gradients, then gX, gW_ih, gW_hh as products).
RnnLayerResult rnn_layer(RnnMode mode, const Tensor& x_in, const Tensor& h0_in, const Tensor& c0_in,
                         const Tensor& w_ih_in, const Tensor& w_hh_in, const Tensor& b_ih_in, const Tensor& b_hh_in,
                         bool reverse, Site site) {
  OpScope op(mode_name(mode), site);
  const bool lstm = mode == RnnMode::lstm;
  check_defined(op, x_in, "the input");
  check_defined(op, h0_in, "h0");
  check_defined(op, w_ih_in, "weight_ih");
  check_defined(op, w_hh_in, "weight_hh");
  // under CPU autocast the layer computes in bf16 (bf16_layer): then f32 and bf16 inputs mix
  const bool bf16 = bf16_layer(x_in);
  if (x_in.dtype() != DType::f32 && x_in.dtype() != DType::f64 && !bf16)
    fail(op.op, fmt::format("expected an f32 or f64 input (bf16 under autocast), got {}", describe(x_in)), op.site);
  auto check_kind = [&](const Tensor& t, const char* what) {
    if (!bf16) return check_same_kind(op, x_in, t, what);
    check_same_device(op, x_in, t);
    if (t.dtype() != DType::f32 && t.dtype() != DType::bf16)
      fail(op.op, fmt::format("expected {} in f32 or bf16 under autocast, got {}", what, describe(t)), op.site);
  };
  check_dim(op, x_in, 3, "the input [T, B, I]");
  check_dim(op, w_ih_in, 2, "weight_ih [G H, I]");
  check_dim(op, w_hh_in, 2, "weight_hh [G H, H]");
  const int64_t T = x_in.size(0), B = x_in.size(1), I = x_in.size(2), H = w_hh_in.size(1), G = rnn_gates(mode);
  if (T < 1 || B < 1 || H < 1)
    fail(op.op, fmt::format("expected at least one step, one sequence and one hidden feature, got input {} and "
                            "weight_hh {}", x_in.shape().str(), w_hh_in.shape().str()), op.site);
  check_kind(w_ih_in, "weight_ih");
  check_kind(w_hh_in, "weight_hh");
  check_shape(op, w_hh_in, {G * H, H}, "weight_hh [G H, H]");
  if (w_ih_in.shape() != Dims{G * H, I})
    fail(op.op, fmt::format("the input {} has {} features but weight_ih is {} (expected [{}, {}])",
                            x_in.shape().str(), I, w_ih_in.shape().str(), G * H, I), op.site);
  check_kind(h0_in, "h0");
  check_shape(op, h0_in, {B, H}, "h0 [B, H]");
  if (lstm) {
    check_defined(op, c0_in, "c0");
    check_kind(c0_in, "c0");
    check_shape(op, c0_in, {B, H}, "c0 [B, H]");
  } else if (c0_in.defined()) {
    fail(op.op, fmt::format("only an LSTM takes a cell state, got c0 {}", describe(c0_in)), op.site);
  }
  if (b_ih_in.defined() != b_hh_in.defined())
    fail(op.op, "expected both biases (bias_ih and bias_hh) or neither", op.site);
  if (b_ih_in.defined()) {
    check_kind(b_ih_in, "bias_ih");
    check_kind(b_hh_in, "bias_hh");
    check_shape(op, b_ih_in, {G * H}, "bias_ih [G H]");
    check_shape(op, b_hh_in, {G * H}, "bias_hh [G H]");
  }
  // the backend reads dense tensors; contiguous() is recorded, so gradients flow through it
  Tensor x = dense(x_in), h0 = dense(h0_in), c0 = dense(c0_in), w_ih = dense(w_ih_in), w_hh = dense(w_hh_in),
         b_ih = dense(b_ih_in), b_hh = dense(b_hh_in);
  // what the backend computes from: bf16 copies of x, h0 and the weights (parameters' copies
  // kept per autocast scope), f32 biases and cell state; the inputs themselves otherwise
  auto lower = [&](const Tensor& t) { return bf16 ? autocast_lower(t) : t; };
  auto f32 = [&](const Tensor& t) { return bf16 && t.defined() ? cast(t, DType::f32) : t; };
  const Tensor xc = lower(x), h0c = lower(h0), w_ihc = lower(w_ih), w_hhc = lower(w_hh);
  const Tensor c0c = f32(c0), b_ihc = f32(b_ih), b_hhc = f32(b_hh);

  RnnParams p{.mode = mode, .T = T, .B = B, .I = I, .H = H, .reverse = reverse, .bias = b_ih.defined()};
  p.training = should_record({&x, &h0, &c0, &w_ih, &w_hh, &b_ih, &b_hh});
  Backend& be = backend_of(x);
  RnnLayerResult r;
  r.y = new_tensor({T, B, H}, xc.dtype(), x.device());
  r.h = new_tensor({B, H}, xc.dtype(), x.device());
  if (lstm) r.c = new_tensor({B, H}, bf16 ? DType::f32 : x.dtype(), x.device());
  Tensor ws = new_tensor({p.training ? be.rnn_workspace_bytes(p, xc.dtype()) : 0}, DType::u8, x.device());
  be.rnn_forward(p, r.y, r.h, r.c, ws, xc, h0c, c0c, w_ihc, w_hhc, b_ihc, b_hhc);
  std::vector<Tensor*> outs{&r.y, &r.h};
  if (lstm) outs.push_back(&r.c);
  Node* n = record(op, rnn_layer_grads, {&x, &h0, &c0, &w_ih, &w_hh, &b_ih, &b_hh}, outs);
  if (n) {
    for (const Tensor* t : std::initializer_list<const Tensor*>{&xc, &h0c, &c0c, &w_ihc, &w_hhc, &b_ihc, &b_hhc, &r.y,
                                                                &r.h, &r.c, &ws})
      n->save(*t);
  }
  keep_args(op, n, RnnLayerArgs{p, bf16});
  return r;
}

namespace {

// One layer, one direction, with sequence b ending after len[b] steps: the batch sorted
// by length, then the steps cut into spans over which the set of live sequences does not
// change, each span one rnn_layer over the live rows; finished rows keep their state.
RnnLayerResult run_lengths(RnnMode mode, const Tensor& x, const Tensor& h0, const Tensor& c0,
                           const RnnLayerWeights& w, const std::vector<int64_t>& len) {
  const int64_t T = x.size(0), B = x.size(1), H = h0.size(1);
  std::vector<int64_t> order(size_t(B), 0);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return len[size_t(a)] > len[size_t(b)]; });
  bool sorted = std::is_sorted(order.begin(), order.end());
  std::vector<int64_t> inverse(size_t(B), 0);
  for (int64_t i = 0; i < B; ++i) inverse[size_t(order[size_t(i)])] = i;
  Tensor perm = from_vector(order), inv = from_vector(inverse);
  if (!x.device().is_cpu()) perm = perm.to(x.device()), inv = inv.to(x.device());
  Tensor xs = sorted ? x : index_select(x, 1, perm);
  Tensor h = sorted ? h0 : index_select(h0, 0, perm);
  Tensor c = !c0.defined() || sorted ? c0 : index_select(c0, 0, perm);
  Options opt{.dtype = x.dtype(), .device = x.device()};
  std::vector<Tensor> ys;
  int64_t t0 = 0;
  for (int64_t i = B - 1; i >= 0; --i) {
    int64_t t1 = len[size_t(order[size_t(i)])];
    if (t1 == t0) continue;
    int64_t live = i + 1;  // rows 0..i are at least t1 long
    RnnLayerResult r = rnn_layer(mode, xs.narrow(0, t0, t1 - t0).narrow(1, 0, live), h.narrow(0, 0, live),
                                 c.defined() ? c.narrow(0, 0, live) : Tensor(), w.w_ih, w.w_hh, w.b_ih, w.b_hh);
    opt.dtype = r.y.dtype();  // bf16 under autocast (bf16_layer), with an f32 cell state
    if (live < B) {
      ys.push_back(cat({r.y, zeros({t1 - t0, B - live, H}, opt)}, 1));
      h = cat({r.h, h.narrow(0, live, B - live).to(r.h.dtype())}, 0);
      if (c.defined()) c = cat({r.c, c.narrow(0, live, B - live).to(r.c.dtype())}, 0);
    } else {
      ys.push_back(r.y);
      h = r.h;
      c = r.c;
    }
    t0 = t1;
  }
  if (t0 < T) ys.push_back(zeros({T - t0, B, H}, opt));
  RnnLayerResult out{ys.size() == 1 ? ys[0] : cat(ys, 0), h, c};
  if (!sorted) {
    out.y = index_select(out.y, 1, inv);
    out.h = index_select(out.h, 0, inv);
    if (out.c.defined()) out.c = index_select(out.c, 0, inv);
  }
  return out;
}

// [T, B, F] index reversing each sequence within its length (padding stays in place);
// it is its own inverse.
Tensor reversal_index(const std::vector<int64_t>& len, int64_t T, int64_t F, Device device) {
  int64_t B = int64_t(len.size());
  std::vector<int64_t> idx(size_t(T * B * F));
  for (int64_t t = 0; t < T; ++t)
    for (int64_t b = 0; b < B; ++b) {
      int64_t l = len[size_t(b)], src = t < l ? l - 1 - t : t;
      std::fill_n(idx.begin() + (t * B + b) * F, F, src);
    }
  Tensor i = from_vector(idx, {T, B, F});
  return device.is_cpu() ? i : i.to(device);
}

RnnLayerResult run_direction(RnnMode mode, const Tensor& x, const Tensor& h0, const Tensor& c0,
                             const RnnLayerWeights& w, bool reverse, const std::vector<int64_t>& len) {
  if (len.empty()) return rnn_layer(mode, x, h0, c0, w.w_ih, w.w_hh, w.b_ih, w.b_hh, reverse);
  if (!reverse) return run_lengths(mode, x, h0, c0, w, len);
  const int64_t T = x.size(0), H = h0.size(1);
  RnnLayerResult r = run_lengths(mode, gather(x, 0, reversal_index(len, T, x.size(2), x.device())), h0, c0, w, len);
  r.y = gather(r.y, 0, reversal_index(len, T, H, x.device()));
  return r;
}

// The whole stack in one backend call: x [T, B, I] ([B, T, I] batch_first), h0/c0 [L D, B, H]
// -> y [T, B, D H], h_n/c_n [L D, B, H], every layer and direction at once (cuDNN's
// multi-layer bidirectional RNN under REEL_CUDNN_RNN=stack); backward: the same backend's
// gradients of all inputs in one more call.
void rnn_stack_grads(Node& n, const Grads& g, Grads& gi) {
  if (grad_enabled())
    fail(n.op, "a create_graph backward (second derivatives) through a recurrent layer is not supported; "
               "its backward is one fused kernel", n.site);
  const RnnStackParams& p = n.args<RnnStackArgs>();
  const bool lstm = p.mode == RnnMode::lstm;
  Tensor x = n.saved_tensor(0), h0 = n.saved_tensor(1), c0 = n.saved_tensor(2), y = n.saved_tensor(3),
         hy = n.saved_tensor(4), cy = n.saved_tensor(5);
  RnnStackState st{n.saved_tensor(6), n.saved_tensor(7), n.saved_tensor(8)};
  const Tensor lengths = n.saved_tensor(9);
  auto grad_or_zeros = [&](size_t i, const Tensor& out) {
    if (i < g.size() && g[i].defined()) return g[i].contiguous();
    Tensor z = new_like(out);
    backend_of(out).fill(z, 0);
    return z;
  };
  Tensor gy = grad_or_zeros(0, y), ghy = grad_or_zeros(1, hy), gcy = lstm ? grad_or_zeros(2, cy) : Tensor();
  Tensor gx = new_like(x), ghx = new_like(h0), gcx = lstm ? new_like(c0) : Tensor();
  std::vector<Tensor> gw;
  for (size_t i = 10; i < n.saved.size(); ++i) gw.push_back(new_like(n.saved_tensor(i)));
  if (!backend_of(x).rnn_stack_backward(p, gx, ghx, gcx, gw, gy, ghy, gcy, x, h0, c0, y, lengths, st))
    fail(n.op, fmt::format("the {} backend ran this stack's forward but refused its backward", x.device().str()),
         n.site);
  gw.insert(gw.begin(), {gx, ghx, gcx});
  for (size_t i = 0; i < gw.size(); ++i)
    if (n.needs_grad(i)) gi[i] = gw[i];
}

// h0_in, c0_in: [L D, B, H] as rnn() made them (B = 1 for an unbatched x_in). False, with
// nothing recorded, where the backend declines or the inputs are not regular (then the
// per-layer path runs, and reports them).
bool run_stack(const OpScope& op, const Tensor& x_in, const Tensor& h0_in, const Tensor& c0_in,
               const std::vector<RnnLayerWeights>& weights, const RnnOptions& opt, const std::vector<int64_t>& len,
               RnnResult& out) {
  const bool lstm = opt.mode == RnnMode::lstm, batch_first = opt.batch_first && x_in.dim() == 3;
  const bool unbatched = x_in.dim() == 2;
  const int64_t L = opt.num_layers, D = opt.bidirectional ? 2 : 1, G = rnn_gates(opt.mode);
  const int64_t T = x_in.size(batch_first ? 1 : 0), B = unbatched ? 1 : x_in.size(batch_first ? 0 : 1),
                I = x_in.size(-1), H = weights[0].w_hh.size(1);
  const DType dt = x_in.dtype();
  // nothing is copied, allocated or recorded until the backend says it serves the stack:
  // the per-layer path, which reports irregular inputs, runs as it would without it
  auto regular = [&](const Tensor& t, const Dims& shape) {
    return t.defined() && t.dtype() == dt && t.device() == x_in.device() && t.shape() == shape;
  };
  const bool bias = weights[0].b_ih.defined();
  if ((dt != DType::f32 && dt != DType::f64) || bf16_layer(x_in) || T < 1 || B < 1 || H < 1 ||
      !regular(h0_in, {L * D, B, H}) || (lstm && !regular(c0_in, {L * D, B, H})))
    return false;
  std::vector<const Tensor*> given{&x_in, &h0_in, &c0_in};
  for (int64_t k = 0; k < L * D; ++k) {
    const RnnLayerWeights& lw = weights[size_t(k)];
    const int64_t in = k < D ? I : D * H;
    if (!regular(lw.w_ih, {G * H, in}) || !regular(lw.w_hh, {G * H, H}) || lw.b_ih.defined() != bias ||
        lw.b_hh.defined() != bias || (bias && (!regular(lw.b_ih, {G * H}) || !regular(lw.b_hh, {G * H}))))
      return false;
    for (const Tensor* t : {&lw.w_ih, &lw.w_hh, &lw.b_ih, &lw.b_hh}) given.push_back(t);
  }
  RnnStackParams p{.mode = opt.mode, .layers = L, .directions = D, .T = T, .B = B, .I = I, .H = H, .bias = bias,
                   .batch_first = batch_first, .training = false, .dropout = opt.training ? opt.dropout : 0};
  if (grad_enabled())
    for (const Tensor* t : given) p.training = p.training || (t->defined() && t->requires_grad());
  Backend& be = backend_of(x_in);
  if (!be.rnn_stack_serves(p, dt)) return false;

  const Tensor x = dense(unbatched ? x_in.unsqueeze(1) : x_in), h0 = dense(h0_in), c0 = dense(c0_in);
  std::vector<Tensor> w;
  for (const RnnLayerWeights& lw : weights) {
    w.push_back(dense(lw.w_ih));
    w.push_back(dense(lw.w_hh));
    if (bias) w.push_back(dense(lw.b_ih)), w.push_back(dense(lw.b_hh));
  }
  std::vector<const Tensor*> ins{&x, &h0, &c0};
  for (const Tensor& t : w) ins.push_back(&t);
  Tensor lengths;
  if (!len.empty()) lengths = from_vector(std::vector<int32_t>(len.begin(), len.end()));
  const Device dev = x.device();
  Tensor y = new_tensor(batch_first ? Dims{B, T, D * H} : Dims{T, B, D * H}, dt, dev),
         hy = new_tensor({L * D, B, H}, dt, dev), cy = lstm ? new_tensor({L * D, B, H}, dt, dev) : Tensor();
  RnnStackState st;
  if (!be.rnn_stack_forward(p, y, hy, cy, st, x, h0, c0, w, lengths))
    fail(op.op, fmt::format("the {} backend said it serves this stack, then declined it", dev.str()), op.site);
  std::vector<Tensor*> outs{&y, &hy};
  if (lstm) outs.push_back(&cy);
  Node* n = record(op, rnn_stack_grads, ins, outs);
  if (n) {
    for (const Tensor* t : std::initializer_list<const Tensor*>{&x, &h0, &c0, &y, &hy, &cy, &st.workspace, &st.weights,
                                                                &st.lengths, &lengths})
      n->save(*t);
    for (const Tensor& t : w) n->save(t);  // by version: an in-place write before backward is an error
  }
  keep_args(op, n, RnnStackArgs{p});
  out = {unbatched ? y.squeeze(1) : y, unbatched ? hy.squeeze(1) : hy, lstm && unbatched ? cy.squeeze(1) : cy};
  return true;
}

}  // namespace

RnnResult rnn(const Tensor& x_in, const Tensor& h0_in, const Tensor& c0_in, const std::vector<RnnLayerWeights>& weights,
              const RnnOptions& opt, const Tensor& lengths, Site site) {
  OpScope op(mode_name(opt.mode), site);
  const bool lstm = opt.mode == RnnMode::lstm;
  const int64_t L = opt.num_layers, D = opt.bidirectional ? 2 : 1;
  check_defined(op, x_in, "the input");
  if (L < 1) fail(op.op, fmt::format("expected num_layers >= 1, got {}", L), op.site);
  if (opt.dropout < 0 || opt.dropout > 1)
    fail(op.op, fmt::format("expected dropout in [0, 1], got {}", opt.dropout), op.site);
  if (int64_t(weights.size()) != L * D)
    fail(op.op, fmt::format("expected the weights of {} layer-directions ({} layers x {} directions), got {}", L * D,
                            L, D, weights.size()), op.site);
  for (const RnnLayerWeights& w : weights)
    if (!w.w_ih.defined() || !w.w_hh.defined() || w.w_hh.dim() != 2)
      fail(op.op, "expected every layer's weight_ih and weight_hh [G H, H] to be defined", op.site);
  const int64_t H = weights[0].w_hh.size(1), I = weights[0].w_ih.dim() == 2 ? weights[0].w_ih.size(1) : -1;
  const bool batched = x_in.dim() == 3;
  if (x_in.dim() != 2 && x_in.dim() != 3)
    fail(op.op, fmt::format("expected the input [T, B, {}] ({}, or [T, {}] unbatched), got {}", I,
                            opt.batch_first ? "[B, T, I] with batch_first" : "[B, T, I] when batch_first", I,
                            x_in.shape().str()), op.site);
  if (x_in.size(-1) != I)
    fail(op.op, fmt::format("expected input_size {} in the input's last dim, got input {}", I, x_in.shape().str()),
         op.site);
  // time-major [T, B, I] from here on
  Tensor x = !batched ? x_in.unsqueeze(1) : opt.batch_first ? x_in.transpose(0, 1) : x_in;
  const int64_t T = x.size(0), B = x.size(1);
  Dims state_shape = batched ? Dims{L * D, B, H} : Dims{L * D, H};
  auto state = [&](const Tensor& s, const char* what) {
    if (!s.defined()) return zeros({L * D, B, H}, {.dtype = x.dtype(), .device = x.device()});
    check_same_device(op, x, s);
    if (s.shape() != state_shape)
      fail(op.op, fmt::format("expected {} of shape {} for the input {} ({} layers x {} directions, hidden size {}), "
                              "got {}", what, state_shape.str(), x_in.shape().str(), L, D, H, s.shape().str()),
           op.site);
    return batched ? s : s.unsqueeze(1);
  };
  Tensor h0 = state(h0_in, "h0");
  Tensor c0 = lstm ? state(c0_in, "c0") : Tensor();
  if (!lstm && c0_in.defined())
    fail(op.op, fmt::format("only an LSTM takes a cell state, got c0 {}", describe(c0_in)), op.site);

  std::vector<int64_t> len;
  if (lengths.defined()) {
    if (lengths.dtype() != DType::i64 || lengths.dim() != 1 || lengths.size(0) != B || !lengths.device().is_cpu())
      fail(op.op, fmt::format("expected lengths: i64 [{}] on the CPU (one per sequence of the input {}), got {}", B,
                              x_in.shape().str(), describe(lengths)), op.site);
    len = lengths.contiguous().to_vector<int64_t>();
    for (int64_t b = 0; b < B; ++b)
      if (len[size_t(b)] < 1 || len[size_t(b)] > T)
        fail(op.op, fmt::format("expected every length in [1, {}] (the input {} has {} steps), got lengths[{}] = {}",
                                T, x_in.shape().str(), T, b, len[size_t(b)]), op.site);
    if (std::all_of(len.begin(), len.end(), [&](int64_t l) { return l == T; })) len.clear();
  }
  // the whole stack in one backend call where the backend serves it (REEL_CUDNN_RNN=stack)
  RnnResult whole;
  if (run_stack(op, x_in, h0, c0, weights, opt, len, whole))
    return whole;

  std::vector<Tensor> hs, cs;
  Tensor layer_in = x;
  for (int64_t l = 0; l < L; ++l) {
    if (l > 0 && opt.dropout > 0 && opt.training) layer_in = dropout(layer_in, opt.dropout, true);
    std::vector<Tensor> ys;
    for (int64_t d = 0; d < D; ++d) {
      int64_t k = l * D + d;
      RnnLayerResult r = run_direction(opt.mode, layer_in, h0.narrow(0, k, 1).squeeze(0),
                                       lstm ? c0.narrow(0, k, 1).squeeze(0) : Tensor(), weights[size_t(k)], d == 1,
                                       len);
      ys.push_back(r.y);
      hs.push_back(r.h);
      if (lstm) cs.push_back(r.c);
    }
    layer_in = D == 1 ? ys[0] : cat(ys, 2);
  }
  RnnResult out{layer_in, stack(hs, 0), lstm ? stack(cs, 0) : Tensor()};
  if (!batched) {
    out.output = out.output.squeeze(1);
    out.h_n = out.h_n.squeeze(1);
    if (lstm) out.c_n = out.c_n.squeeze(1);
  } else if (opt.batch_first) {
    out.output = out.output.transpose(0, 1);
  }
  return out;
}

}  // namespace reel
