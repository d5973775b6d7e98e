// What each cuDNN RNN path (rnn.cpp: per layer; rnn_stack.cpp: the whole stack) keeps per
// device: its own cuDNN handle, a dropout descriptor of probability 0 (dropout between
// layers is reel's, drawn from its Philox streams, never cuDNN's) and the path's plans; and
// the names both give cuDNN.
// Internal to cuda/.
#pragma once
#include <cudnn.h>

#include <map>
#include <mutex>

#include "backend.h"
#include "dnn.h"

namespace reel::cuda {

// cuDNN handles are not safe for two threads: a path uses its handle under `mu`.
struct RnnHandle {
  std::mutex mu;
  cudnnHandle_t handle = nullptr;
  cudnnDropoutDescriptor_t dropout = nullptr;
  Tensor dropout_states;
};
// cuDNN's names for an RNN's float type and cell
inline cudnnDataType_t rnn_data_type(DType t) { return t == DType::f64 ? CUDNN_DATA_DOUBLE : CUDNN_DATA_FLOAT; }
inline cudnnRNNMode_t rnn_cell(RnnMode m) {
  return m == RnnMode::lstm       ? CUDNN_LSTM
         : m == RnnMode::gru      ? CUDNN_GRU
         : m == RnnMode::rnn_relu ? CUDNN_RNN_RELU
                                  : CUDNN_RNN_TANH;
}

// Makes h's handle (on ctx's stream) and dropout descriptor; an Error naming `op` during a
// graph capture (the warm-up rule of cuda::Graph). rnn.cpp.
void make_rnn_handle(Context& ctx, RnnHandle& h, const char* op);

// The state S (an RnnHandle with a path's plans) of ctx's device: made at its first use,
// alive to the end of the process (tensors may be freed after main returns).
template <class S>
S& rnn_state_of(Context& ctx, const char* op) {
  static std::mutex mu;
  static std::map<int, S*> states;
  std::lock_guard<std::mutex> lock(mu);
  S*& s = states[ctx.device];
  if (!s) {
    auto* fresh = new S();
    make_rnn_handle(ctx, *fresh, op);
    s = fresh;
  }
  return *s;
}

}  // namespace reel::cuda
