// The recurrent ops: one layer in one direction on the backend's fused kernels
// (rnn_layer), and PyTorch's multi-layer, bidirectional, variable-length RNN, LSTM
// and GRU composed from it (rnn). nn/rnn.h wraps them as modules.
//
//   RnnResult r = rnn(x, {}, {}, weights, {.mode = RnnMode::gru, .batch_first = true});
//   Tensor last = r.h_n[-1];  // [B, H]
#pragma once
#include <vector>

#include "../tensor/backend.h"  // RnnMode
#include "../tensor/tensor.h"

namespace reel {

// x [T, B, I], h0 [B, H], c0 [B, H] (LSTM only, else undefined), w_ih [G H, I],
// w_hh [G H, H], b_ih, b_hh [G H] (both or neither) -> y [T, B, H], h [B, H], c [B, H]
// (LSTM). G = 1 (RNN), 4 (LSTM: gates i f g o), 3 (GRU: r z n), PyTorch's layout.
// reverse: the steps run from T-1 down to 0. f32 or f64. Differentiable once (a
// create_graph backward through it is an Error).
struct RnnLayerResult {
  Tensor y, h, c;
};
RnnLayerResult rnn_layer(RnnMode mode, const Tensor& x, const Tensor& h0, const Tensor& c0, const Tensor& w_ih,
                         const Tensor& w_hh, const Tensor& b_ih = {}, const Tensor& b_hh = {}, bool reverse = false,
                         Site site = {});

// The weights of one layer in one direction (b_ih, b_hh undefined without bias).
struct RnnLayerWeights {
  Tensor w_ih, w_hh, b_ih, b_hh;
};
struct RnnOptions {
  RnnMode mode = RnnMode::rnn_tanh;
  int64_t num_layers = 1;
  bool batch_first = false;     // x [B, T, I] and output [B, T, D H]
  double dropout = 0;           // on each layer's output but the last, in training
  bool training = true;
  bool bidirectional = false;
};
// output [T, B, D H] (D = 2 when bidirectional: forward then reverse features),
// h_n and c_n [num_layers D, B, H] (c_n: LSTM only).
struct RnnResult {
  Tensor output, h_n, c_n;
};
// x [T, B, I] (or [B, T, I] batch_first, or [T, I] unbatched: then h0/c0 [num_layers D, H]
// and the results drop the batch dim); h0, c0 [num_layers D, B, H] or undefined (zeros).
// weights[layer D + direction]. lengths: i64 [B] on the CPU, each in [1, T], in any order:
// sequence b ends after lengths[b] steps (as pack_padded_sequence(enforce_sorted=False)):
// its h_n/c_n are the states after its last step, its output beyond it is zero, and its
// reverse direction starts at its last step.
RnnResult rnn(const Tensor& x, const Tensor& h0, const Tensor& c0, const std::vector<RnnLayerWeights>& weights,
              const RnnOptions& opt, const Tensor& lengths = {}, Site site = {});

}  // namespace reel
