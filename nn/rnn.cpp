// The recurrent modules: parameters under PyTorch's names, options checked at
// construction, forward through rnn() / rnn_layer() (autograd/ops_rnn.cpp).
#include "rnn.h"

#include <fmt/format.h>

#include <cmath>

#include "../autograd/grad_mode.h"
#include "../autograd/ops.h"
#include "init.h"

namespace reel::nn {
namespace {

void check_size(const char* layer, const char* what, int64_t v) {
  if (v <= 0) throw Error(fmt::format("{}: {} must be positive, got {}", layer, what, v));
}

void init_uniform(Tensor& t, int64_t hidden) {
  double bound = 1.0 / std::sqrt(double(hidden));
  init::uniform_(t, -bound, bound);
}

}  // namespace

// ---- RNN, GRU, LSTM
RNNBase::RNNBase(const char* name, RnnMode mode, int64_t input_size, int64_t hidden_size, const GRUOptions& opt)
    : input_size(input_size), hidden_size(hidden_size), num_layers(opt.num_layers), bias(opt.bias),
      batch_first(opt.batch_first), bidirectional(opt.bidirectional), dropout(opt.dropout), mode(mode) {
  check_size(name, "input_size", input_size);
  check_size(name, "hidden_size", hidden_size);
  check_size(name, "num_layers", num_layers);
  if (!(dropout >= 0 && dropout <= 1))
    throw Error(fmt::format("{}: dropout must be in [0, 1], got {}", name, dropout));
  const int64_t G = rnn_gates(mode), D = bidirectional ? 2 : 1;
  for (int64_t l = 0; l < num_layers; ++l)
    for (int64_t d = 0; d < D; ++d) {
      std::string suffix = fmt::format("_l{}{}", l, d ? "_reverse" : "");
      int64_t in = l == 0 ? input_size : D * hidden_size;
      weights_.push_back(&register_owned_parameter("weight_ih" + suffix, empty({G * hidden_size, in})));
      weights_.push_back(&register_owned_parameter("weight_hh" + suffix, empty({G * hidden_size, hidden_size})));
      if (bias) {
        weights_.push_back(&register_owned_parameter("bias_ih" + suffix, empty({G * hidden_size})));
        weights_.push_back(&register_owned_parameter("bias_hh" + suffix, empty({G * hidden_size})));
      }
    }
  reset_parameters();
}

void RNNBase::reset_parameters() {
  NoGradGuard guard;
  for (Tensor* t : weights_) init_uniform(*t, hidden_size);
}

RnnLayerWeights RNNBase::layer_weights(int64_t layer, bool reverse) const {
  const int64_t D = bidirectional ? 2 : 1, per = bias ? 4 : 2;
  if (layer < 0 || layer >= num_layers || (reverse && !bidirectional))
    throw Error(fmt::format("{}: no layer {}{} (num_layers = {}, bidirectional = {})", type_name(), layer,
                            reverse ? " in reverse" : "", num_layers, bidirectional));
  Tensor* const* w = weights_.data() + (layer * D + reverse) * per;
  return {*w[0], *w[1], bias ? *w[2] : Tensor(), bias ? *w[3] : Tensor()};
}

RnnResult RNNBase::run(const Tensor& x, const Tensor& h0, const Tensor& c0, const Tensor& lengths) const {
  SiteScope at_caller = at_caller_site();
  std::vector<RnnLayerWeights> w;
  for (int64_t l = 0; l < num_layers; ++l) {
    w.push_back(layer_weights(l, false));
    if (bidirectional) w.push_back(layer_weights(l, true));
  }
  return rnn(x, h0, c0, w,
             {.mode = mode, .num_layers = num_layers, .batch_first = batch_first, .dropout = dropout,
              .training = is_training(), .bidirectional = bidirectional},
             lengths);
}

Tensor RNNBase::forward(const Tensor& x) { return run(x, {}, {}, {}).output; }

std::string RNNBase::extra_repr() const {
  std::string s = fmt::format("{}, {}", input_size, hidden_size);
  if (num_layers != 1) s += fmt::format(", num_layers={}", num_layers);
  if (!bias) s += ", bias=False";
  if (batch_first) s += ", batch_first=True";
  if (dropout != 0) s += fmt::format(", dropout={}", dropout);
  if (bidirectional) s += ", bidirectional=True";
  return s;
}

RNN::RNN(int64_t input_size, int64_t hidden_size, RNNOptions o)
    : RNNBase("RNN", o.nonlinearity == Nonlinearity::relu ? RnnMode::rnn_relu : RnnMode::rnn_tanh, input_size,
              hidden_size,
              {.num_layers = o.num_layers, .bias = o.bias, .batch_first = o.batch_first, .dropout = o.dropout,
               .bidirectional = o.bidirectional}) {}

RNNOutput RNN::forward(const Tensor& x, const Tensor& h0, const Tensor& lengths) {
  RnnResult r = run(x, h0, {}, lengths);
  return {r.output, r.h_n};
}

std::string RNN::extra_repr() const {
  return RNNBase::extra_repr() + (mode == RnnMode::rnn_relu ? ", nonlinearity='relu'" : "");
}

GRU::GRU(int64_t input_size, int64_t hidden_size, GRUOptions opt)
    : RNNBase("GRU", RnnMode::gru, input_size, hidden_size, opt) {}

RNNOutput GRU::forward(const Tensor& x, const Tensor& h0, const Tensor& lengths) {
  RnnResult r = run(x, h0, {}, lengths);
  return {r.output, r.h_n};
}

LSTM::LSTM(int64_t input_size, int64_t hidden_size, LSTMOptions opt)
    : RNNBase("LSTM", RnnMode::lstm, input_size, hidden_size, opt) {}

LSTMOutput LSTM::forward(const Tensor& x, const LSTMState& state, const Tensor& lengths) {
  if (state.h.defined() != state.c.defined())
    throw Error(fmt::format("LSTM: expected both h0 and c0 or neither, got h0 {} and c0 {}",
                            state.h.defined() ? state.h.shape().str() : "undefined",
                            state.c.defined() ? state.c.shape().str() : "undefined"));
  RnnResult r = run(x, state.h, state.c, lengths);
  return {r.output, {r.h_n, r.c_n}};
}

// ---- cells
RNNCellBase::RNNCellBase(const char* name, RnnMode mode, int64_t input_size, int64_t hidden_size, bool bias)
    : input_size(input_size), hidden_size(hidden_size), mode(mode) {
  check_size(name, "input_size", input_size);
  check_size(name, "hidden_size", hidden_size);
  const int64_t G = rnn_gates(mode);
  weight_ih = empty({G * hidden_size, input_size});
  weight_hh = empty({G * hidden_size, hidden_size});
  if (bias) {
    bias_ih = empty({G * hidden_size});
    bias_hh = empty({G * hidden_size});
  }
  reset_parameters();
  register_parameter("weight_ih", weight_ih);
  register_parameter("weight_hh", weight_hh);
  register_parameter("bias_ih", bias_ih);
  register_parameter("bias_hh", bias_hh);
}

void RNNCellBase::reset_parameters() {
  NoGradGuard guard;
  for (Tensor* t : {&weight_ih, &weight_hh, &bias_ih, &bias_hh})
    if (t->defined()) init_uniform(*t, hidden_size);
}

std::string RNNCellBase::extra_repr() const {
  return fmt::format("{}, {}{}", input_size, hidden_size, bias_ih.defined() ? "" : ", bias=False");
}

// One step as a one-step sequence: x [B, I] -> [1, B, I].
RnnLayerResult RNNCellBase::step(const Tensor& x, const Tensor& h, const Tensor& c) const {
  SiteScope at_caller = at_caller_site();
  if (!x.defined() || (x.dim() != 1 && x.dim() != 2) || x.size(-1) != input_size)
    throw Error(fmt::format("{}: expected the input [B, {}] or [{}], got {}", type_name(), input_size, input_size,
                            x.defined() ? x.shape().str() : "undefined"));
  const bool batched = x.dim() == 2;
  const int64_t B = batched ? x.size(0) : 1;
  Dims state = batched ? Dims{B, hidden_size} : Dims{hidden_size};
  auto prepare = [&](const Tensor& s, const char* what) {
    if (!s.defined()) return zeros({B, hidden_size}, {.dtype = x.dtype(), .device = x.device()});
    if (s.shape() != state)
      throw Error(fmt::format("{}: expected {} of shape {} for the input {}, got {}", type_name(), what, state.str(),
                              x.shape().str(), s.shape().str()));
    return batched ? s : s.unsqueeze(0);
  };
  Tensor xb = batched ? x : x.unsqueeze(0);
  RnnLayerResult r = rnn_layer(mode, xb.unsqueeze(0), prepare(h, "h"),
                               mode == RnnMode::lstm ? prepare(c, "c") : Tensor(), weight_ih, weight_hh, bias_ih,
                               bias_hh);
  if (!batched) {
    r.h = r.h.squeeze(0);
    if (r.c.defined()) r.c = r.c.squeeze(0);
  }
  return r;
}

RNNCell::RNNCell(int64_t input_size, int64_t hidden_size, RNNCellOptions o)
    : RNNCellBase("RNNCell", o.nonlinearity == Nonlinearity::relu ? RnnMode::rnn_relu : RnnMode::rnn_tanh,
                  input_size, hidden_size, o.bias) {}
Tensor RNNCell::forward(const Tensor& x, const Tensor& h) { return step(x, h, {}).h; }
std::string RNNCell::extra_repr() const {
  return RNNCellBase::extra_repr() + (mode == RnnMode::rnn_relu ? ", nonlinearity='relu'" : "");
}

GRUCell::GRUCell(int64_t input_size, int64_t hidden_size, RNNCellOptions o)
    : RNNCellBase("GRUCell", RnnMode::gru, input_size, hidden_size, o.bias) {}
Tensor GRUCell::forward(const Tensor& x, const Tensor& h) { return step(x, h, {}).h; }

LSTMCell::LSTMCell(int64_t input_size, int64_t hidden_size, RNNCellOptions o)
    : RNNCellBase("LSTMCell", RnnMode::lstm, input_size, hidden_size, o.bias) {}
LSTMState LSTMCell::forward(const Tensor& x, const LSTMState& state) {
  if (state.h.defined() != state.c.defined())
    throw Error("LSTMCell: expected both h and c or neither");
  RnnLayerResult r = step(x, state.h, state.c);
  return {r.h, r.c};
}

}  // namespace reel::nn

// ---- call operators of the several-input forwards: a module call like Module::operator()
namespace reel::nn {
RNNOutput RNN::operator()(const Tensor& x, const Tensor& h0, const Tensor& lengths, Site site) {
  Call call(*this, site);
  return forward(x, h0, lengths);
}
RNNOutput GRU::operator()(const Tensor& x, const Tensor& h0, const Tensor& lengths, Site site) {
  Call call(*this, site);
  return forward(x, h0, lengths);
}
LSTMOutput LSTM::operator()(const Tensor& x, const LSTMState& state, const Tensor& lengths, Site site) {
  Call call(*this, site);
  return forward(x, state, lengths);
}
Tensor RNNCell::operator()(const Tensor& x, const Tensor& h, Site site) {
  Call call(*this, site);
  return forward(x, h);
}
Tensor GRUCell::operator()(const Tensor& x, const Tensor& h, Site site) {
  Call call(*this, site);
  return forward(x, h);
}
LSTMState LSTMCell::operator()(const Tensor& x, const LSTMState& state, Site site) {
  Call call(*this, site);
  return forward(x, state);
}
}  // namespace reel::nn
