// batch_norm_relu on CUDA (cuda/norm.cu, REEL_CUDA_BN_RELU) as far as it needs no GPU: the
// switch and the rule that picks, per call, the kernels that run. Plain values in, plain
// values out, no CUDA header, so that reel_tests checks each rule in every build
// (test/test_cuda_rules.cpp).
//
// separate: Backend's composed path (the default until the H200 measured fused, 2026-11-29): the pieces joined into one
//   tensor, batch norm's kernels, then a relu pass over y; backward a relu_backward pass
//   writing g (y > 0) into a new tensor, then batch norm's backward over it and x (joined
//   again), each piece's gradient copied out of the joined one.
// fused: the relu inside the kernel that writes y; backward reads gy and y and masks
//   (gy where y > 0 or y is NaN, else 0) inside the channel sums and inside the kernel
//   that writes gx, never writing the masked gradient; each piece is read where it lies
//   and its gradient written where it belongs (no joined copy of x or of gx).
//
// cuDNN's fused batch norm + activation (cudnnBatchNormalizationForwardTrainingEx /
// BackwardEx with CUDNN_BATCHNORM_OPS_BN_ACTIVATION) serves only fully packed NHWC tensors
// of half data in CUDNN_BATCHNORM_SPATIAL_PERSISTENT mode (the semi-persistent NHWC kernels;
// float and double, and NCHW, are refused or run the plain kernels), and its backward needs
// the reserve space its forward wrote. Neither holds for reel on CUDA today: the CUDA
// backend lays no tensor out channels-last (CudaBackend::channels_last is false, so autocast
// keeps NCHW), f16/bf16 norms are staged in f32 (cuda/low_precision.cpp), and
// Backend::batch_norm_relu_backward has no slot for a reserve space. So the rule below has
// no cuDNN branch; it gains one with NHWC under autocast on CUDA (issue 46), beside a
// reserve space saved on the tape.
#pragma once
#include <cstdint>
#include <string>

#include "env_switch.h"

namespace reel::cuda::bn_relu {

// ---- REEL_CUDA_BN_RELU: "fused" (the default) or "separate"
enum class Path { separate, fused, invalid };
inline constexpr Choice<Path> kPaths[] = {{"separate", Path::separate}, {"fused", Path::fused}};
inline Path path_from_env(const char* value) { return parse_choice(value, kPaths, Path::fused, Path::invalid); }
inline std::string invalid_path_message(const char* value) {
  return choice_message("batch_norm_relu", "REEL_CUDA_BN_RELU", kPaths, value);
}

// ---- what runs for one call
struct Call {
  Path path = Path::separate;
  bool float_type = true;  // f32 or f64: what reaches CudaBackend (f16/bf16 arrive staged in f32)
  int64_t pieces = 1;      // tensors joined along dim 1 (DenseNet's concatenation)
};
// true: the fused kernels, every piece read in place (norm.cu reads up to 32 pieces a launch
// through geometry::bn_piece_groups, so the joined copy, a write and a read of all of x
// forward and backward and of gx backward, is never made); false: Backend's composed path,
// which also names a dtype it cannot take.
inline bool fused(const Call& c) { return c.path == Path::fused && c.float_type && c.pieces >= 1; }

// ---- the elementwise rules the fused kernels apply (norm.cu calls these, nvcc's relaxed
// constexpr), the same as the separate path's relu (unary.cu) and relu_backward (binary.cu)
// pass: relu keeps NaN and gives +0 at and below 0 (-0 included); the mask passes g where
// y > 0 or y is NaN and gives 0 where y <= 0, whatever g is (NaN or inf too).
template <typename T>
constexpr T relu_output(T v) { return v > T(0) || v != v ? v : T(0); }
template <typename T>
constexpr T masked_gradient(T g, T y) { return y <= T(0) ? T(0) : g; }

}  // namespace reel::cuda::bn_relu
