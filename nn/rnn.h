// Recurrent layers as PyTorch has them: RNN (tanh or relu), GRU and LSTM over whole
// sequences, and the single-step cells. Parameter names and layouts are PyTorch's
// (weight_ih_l0 [G H, I], weight_hh_l0 [G H, H], bias_ih_l0, bias_hh_l0 [G H], the
// reverse direction's with the suffix _reverse; gates i f g o for LSTM, r z n for GRU),
// so a PyTorch state dict saved as safetensors loads and gives the same outputs.
// Init: every parameter U(-1/sqrt(H), 1/sqrt(H)).
//
//   nn::GRU gru(125, 100, {.batch_first = true});
//   auto [out, h_n] = gru(x, Tensor());          // x [B, T, 125] -> out [B, T, 100], h_n [1, B, 100]
//   auto [y, state] = lstm(x, {h0, c0}, lengths);  // state.h, state.c [L D, B, H]
//
// libtorch's forms beside these: each result converts to libtorch's std::tuple
// (`std::tuple<Tensor, Tensor> r = gru(x, h0);`), and an LSTM or LSTMCell given its state
// as a std::tuple (h, c) returns libtorch's tuple: `auto r = lstm.forward(x, std::make_tuple(h0, c0));
// std::get<0>(r)`, `std::get<1>(r)` the (h_n, c_n) tuple. forward(x) alone is the output
// tensor (what a Sequential passes on), not libtorch's tuple.
#pragma once
#include <cstdint>
#include <concepts>
#include <string>
#include <tuple>
#include <vector>

#include "../autograd/ops_rnn.h"
#include "module.h"

namespace reel::nn {

enum class Nonlinearity : uint8_t { tanh, relu };

struct RNNOptions {
  int64_t num_layers = 1;
  Nonlinearity nonlinearity = Nonlinearity::tanh;
  bool bias = true;
  bool batch_first = false;    // input and output [B, T, F] (states stay [L D, B, H])
  double dropout = 0;          // on every layer's output but the last's, in training
  bool bidirectional = false;  // output features: forward then reverse direction
};
struct GRUOptions {
  int64_t num_layers = 1;
  bool bias = true;
  bool batch_first = false;
  double dropout = 0;
  bool bidirectional = false;
};
using LSTMOptions = GRUOptions;

struct LSTMState {
  Tensor h, c;
  operator std::tuple<Tensor, Tensor>() const { return {h, c}; }  // libtorch's (h, c)
};
// output [T, B, D H] ([B, T, D H] batch_first), h_n [L D, B, H]
struct RNNOutput {
  Tensor output, h_n;
  operator std::tuple<Tensor, Tensor>() const { return {output, h_n}; }  // libtorch's (output, h_n)
};
struct LSTMOutput {
  Tensor output;
  LSTMState state;  // h_n, c_n [L D, B, H]
  // libtorch's (output, (h_n, c_n))
  operator std::tuple<Tensor, std::tuple<Tensor, Tensor>>() const { return {output, state}; }
};
// libtorch's spelling of an LSTM state: std::tuple<Tensor, Tensor> (h, c)
template <typename T>
concept TupleState = std::same_as<T, std::tuple<Tensor, Tensor>>;

// What RNN, GRU and LSTM share: the parameters of every layer and direction, the options.
// forward's inputs: x [T, B, I] ([B, T, I] batch_first, [T, I] unbatched); h0 (c0)
// [L D, B, H] or undefined for zeros; lengths: i64 [B] on the CPU, each in [1, T], any
// order (PyTorch's pack_padded_sequence(enforce_sorted=False)): steps past a sequence's
// length neither change its state nor reach h_n, and their output is zero.
class RNNBase : public Module {
 public:
  // The output alone (for Sequential); the states start at zero.
  Tensor forward(const Tensor& x) override;
  std::string extra_repr() const override;
  void reset_parameters();
  // The parameters of layer `layer`, direction `reverse`, as rnn() takes them.
  RnnLayerWeights layer_weights(int64_t layer, bool reverse = false) const;

  int64_t input_size, hidden_size, num_layers;
  bool bias, batch_first, bidirectional;
  double dropout;
  RnnMode mode;

 protected:
  RNNBase(const char* name, RnnMode mode, int64_t input_size, int64_t hidden_size, const GRUOptions& opt);
  RnnResult run(const Tensor& x, const Tensor& h0, const Tensor& c0, const Tensor& lengths) const;

 private:
  std::vector<Tensor*> weights_;  // [layer D + direction][w_ih, w_hh, b_ih, b_hh], owned by Module
};

// h' = tanh(W_ih x + b_ih + W_hh h + b_hh) (or relu), layer after layer.
class RNN : public RNNBase {
 public:
  RNN(int64_t input_size, int64_t hidden_size, RNNOptions opt = {});
  using RNNBase::forward;
  RNNOutput forward(const Tensor& x, const Tensor& h0, const Tensor& lengths = {});
  std::string type_name() const override { return "RNN"; }
  using Module::operator();
  // forward(x, h0, lengths) as a module call: module path and the caller's line (Module::Call).
  RNNOutput operator()(const Tensor& x, const Tensor& h0, const Tensor& lengths = {}, Site site = {});
  std::string extra_repr() const override;
};

// r = σ(W_ir x + b_ir + W_hr h + b_hr), z likewise, n = tanh(W_in x + b_in + r (W_hn h + b_hn)),
// h' = (1 - z) n + z h (PyTorch's formula: the reset gate after the hidden bias).
class GRU : public RNNBase {
 public:
  GRU(int64_t input_size, int64_t hidden_size, GRUOptions opt = {});
  using RNNBase::forward;
  RNNOutput forward(const Tensor& x, const Tensor& h0, const Tensor& lengths = {});
  std::string type_name() const override { return "GRU"; }
  using Module::operator();
  RNNOutput operator()(const Tensor& x, const Tensor& h0, const Tensor& lengths = {}, Site site = {});
};

// [i f g o] = W_ih x + b_ih + W_hh h + b_hh; c' = σ(f) c + σ(i) tanh(g); h' = σ(o) tanh(c').
class LSTM : public RNNBase {
 public:
  LSTM(int64_t input_size, int64_t hidden_size, LSTMOptions opt = {});
  using RNNBase::forward;
  LSTMOutput forward(const Tensor& x, const LSTMState& state, const Tensor& lengths = {});
  std::string type_name() const override { return "LSTM"; }
  using Module::operator();
  LSTMOutput operator()(const Tensor& x, const LSTMState& state, const Tensor& lengths = {}, Site site = {});
  // libtorch's form: the state as std::tuple (h0, c0), the result as (output, (h_n, c_n))
  template <TupleState State>
  std::tuple<Tensor, std::tuple<Tensor, Tensor>> forward(const Tensor& x, const State& hx, const Tensor& lengths = {}) {
    return forward(x, LSTMState{std::get<0>(hx), std::get<1>(hx)}, lengths);
  }
  template <TupleState State>
  std::tuple<Tensor, std::tuple<Tensor, Tensor>> operator()(const Tensor& x, const State& hx,
                                                            const Tensor& lengths = {}, Site site = {}) {
    return (*this)(x, LSTMState{std::get<0>(hx), std::get<1>(hx)}, lengths, site);
  }
};

// ---- cells: one step. x [B, I] (or [I]), h [B, H] (or [H]; undefined: zeros) -> h' [B, H].
// Parameters weight_ih [G H, I], weight_hh [G H, H], bias_ih, bias_hh [G H].
struct RNNCellOptions {
  bool bias = true;
  Nonlinearity nonlinearity = Nonlinearity::tanh;  // RNNCell only
};
class RNNCellBase : public Module {
 public:
  std::string extra_repr() const override;
  void reset_parameters();
  Tensor weight_ih, weight_hh, bias_ih, bias_hh;
  int64_t input_size, hidden_size;
  RnnMode mode;

 protected:
  RNNCellBase(const char* name, RnnMode mode, int64_t input_size, int64_t hidden_size, bool bias);
  RnnLayerResult step(const Tensor& x, const Tensor& h, const Tensor& c) const;
};
class RNNCell : public RNNCellBase {
 public:
  RNNCell(int64_t input_size, int64_t hidden_size, RNNCellOptions opt = {});
  Tensor forward(const Tensor& x) override { return forward(x, Tensor()); }
  Tensor forward(const Tensor& x, const Tensor& h);
  std::string type_name() const override { return "RNNCell"; }
  using Module::operator();
  Tensor operator()(const Tensor& x, const Tensor& h, Site site = {});
  std::string extra_repr() const override;
};
class GRUCell : public RNNCellBase {
 public:
  GRUCell(int64_t input_size, int64_t hidden_size, RNNCellOptions opt = {});
  Tensor forward(const Tensor& x) override { return forward(x, Tensor()); }
  Tensor forward(const Tensor& x, const Tensor& h);
  std::string type_name() const override { return "GRUCell"; }
  using Module::operator();
  Tensor operator()(const Tensor& x, const Tensor& h, Site site = {});
};
class LSTMCell : public RNNCellBase {
 public:
  LSTMCell(int64_t input_size, int64_t hidden_size, RNNCellOptions opt = {});
  Tensor forward(const Tensor& x) override { return forward(x, LSTMState{}).h; }
  LSTMState forward(const Tensor& x, const LSTMState& state);
  std::string type_name() const override { return "LSTMCell"; }
  using Module::operator();
  LSTMState operator()(const Tensor& x, const LSTMState& state, Site site = {});
  // libtorch's form: the state as std::tuple (h, c), the result as (h', c')
  template <TupleState State>
  std::tuple<Tensor, Tensor> forward(const Tensor& x, const State& hx) {
    return forward(x, LSTMState{std::get<0>(hx), std::get<1>(hx)});
  }
  template <TupleState State>
  std::tuple<Tensor, Tensor> operator()(const Tensor& x, const State& hx, Site site = {}) {
    return (*this)(x, LSTMState{std::get<0>(hx), std::get<1>(hx)}, site);
  }
};

}  // namespace reel::nn
