// cuDNN's status check and handle creation, shared by every cuDNN path (conv.cpp, rnn.cpp,
// rnn_stack.cpp through rnn_handle.h, attention_cudnn.cpp). Internal to cuda/.
#pragma once
#include <cudnn.h>

#include "context.h"

namespace reel::cuda {

inline void check_dnn(cudnnStatus_t s, const char* op, const char* what) {
  if (s != CUDNN_STATUS_SUCCESS) fail_cudnn(op, int(s), what);
}

// A cuDNN handle on ctx's stream, made after checking that the cuDNN found at run time suits
// the headers and the CUDA runtime reel was built with (a mismatch fails later, with
// statuses that do not say why): an Error naming `op` otherwise. context.cpp.
cudnnHandle_t create_dnn_handle(Context& ctx, const char* op);

}  // namespace reel::cuda
