// Which cuDNN algorithm the per-layer recurrent path (cuda/rnn.cpp) asks for, as far as it
// needs no GPU: the switch and the rule. Plain values in, plain values out, no CUDA header,
// so that reel_tests checks it in every build (test/test_cuda_rules.cpp).
//
// REEL_CUDA_RNN_ALGO: "standard" (the default: CUDNN_RNN_ALGO_STANDARD, a step after step of
// small kernels) or "small_h" (CUDNN_RNN_ALGO_PERSIST_STATIC_SMALL_H with padded I/O on, as
// PyTorch's cuDNN RNNs run an unpacked input whose hidden size is small: ATen's get_algo and
// use_rnn_persist_small_h, with padded I/O for every unpacked input). The persistent kernel
// keeps the recurrent weights on chip across the steps. On the H200 W9's GRU (H = 100) took
// 3.2 ms forward and 3.2 ms backward through STANDARD, against PyTorch's whole step of 2.2 ms
// (2026-11-28); bench_gpu_rnn_probe times both algorithms on that layer.
#pragma once
#include <string>

#include "../../tensor/backend.h"
#include "env_switch.h"

namespace reel::cuda::rnn_algo {

enum class Path { standard, small_h, invalid };
inline constexpr Choice<Path> kPaths[] = {{"standard", Path::standard}, {"small_h", Path::small_h}};
inline Path path_from_env(const char* value) { return parse_choice(value, kPaths, Path::standard, Path::invalid); }
inline std::string invalid_path_message(const char* value) {
  return choice_message("rnn", "REEL_CUDA_RNN_ALGO", kPaths, value);
}

// Whether a layer takes the small-hidden persistent kernel under `small_h`: PyTorch's bounds
// for the backward, the tighter of its two (a layer's forward and backward use one algorithm
// here, so that the reserve space the forward writes is the one the backward reads): hidden
// size up to 128 for LSTM and GRU, up to 256 for the plain RNNs; float32 only (cuDNN's
// persistent kernels take no double), on compute capability 6.0 or newer.
inline bool small_h_serves(RnnMode mode, int64_t hidden, bool f32, int cc_major) {
  if (!f32 || cc_major < 6 || hidden < 1) return false;
  const bool gated = mode == RnnMode::lstm || mode == RnnMode::gru;
  return hidden <= (gated ? 128 : 256);
}

}  // namespace reel::cuda::rnn_algo
