// cuDNN's status check and handle creation, shared by every cuDNN path (conv.cpp, rnn.cpp,
// rnn_stack.cpp through rnn_handle.h, attention_cudnn.cpp). Internal to cuda/.
#pragma once
#include <cudnn.h>

#include <map>
#include <mutex>

#include "context.h"
#include "graph.h"

namespace reel::cuda {

inline void check_dnn(cudnnStatus_t s, const char* op, const char* what) {
  if (s != CUDNN_STATUS_SUCCESS) fail_cudnn(op, int(s), what);
}

// A cuDNN handle on ctx's stream, made after checking that the cuDNN found at run time suits
// the headers and the CUDA runtime reel was built with (a mismatch fails later, with
// statuses that do not say why): an Error naming `op` otherwise. context.cpp.
cudnnHandle_t create_dnn_handle(Context& ctx, const char* op);

// The state S of one cuDNN path (a `handle` member, used under S's `mu`, and whatever the path
// caches) for ctx's device: made with its handle at the device's first call, never during a
// graph capture (`capture_refusal` says what the capture would have done), kept to the
// process's end (tensors may be freed after main returns). One map per S.
template <class S>
S& dnn_state_of(Context& ctx, const char* op, const char* capture_refusal) {
  static std::mutex mu;
  static std::map<int, S*> states;
  std::lock_guard<std::mutex> lock(mu);
  S*& s = states[ctx.device];
  if (!s) {
    forbid_in_capture(ctx, op, capture_refusal);
    auto* fresh = new S();
    fresh->handle = create_dnn_handle(ctx, op);
    s = fresh;
  }
  return *s;
}

}  // namespace reel::cuda
