// nn::functional: the fused layer ops under the names PyTorch users look for. Thin
// wrappers (the ops live in autograd/ops.h, with their backward rules): no state, the
// caller's line and the wrapper's name reported on errors.
//
//   namespace F = reel::nn::functional;
//   Tensor y = F::conv2d_bias_relu(x, w, b, {.padding = {1, 1}});  // x [N, C, H, W], w [O, C/g, KH, KW], b [O]
//   Tensor h = F::linear_bias_relu(x, w, b);                         // x [*, in], w [out, in], b [out]
#pragma once
#include "../autograd/ops.h"

namespace reel::nn::functional {

// relu(conv2d(x, w) + b) in one op: on the GPU cuDNN's cudnnConvolutionBiasActivationForward,
// on the CPU a oneDNN convolution with the bias and a ReLU post-op. b may be undefined (no bias).
// (nn/functional.cpp: its own op, so its errors name it)
Tensor conv2d_bias_relu(const Tensor& x, const Tensor& weight, const Tensor& bias, reel::Conv2dOptions opt = {},
                        Site site = {});

// relu(x wᵀ + b) in one op: cuBLASLt's bias+ReLU epilogue on the GPU, oneDNN's
// matmul with a ReLU post-op on the CPU. b may be undefined (no bias).
Tensor linear_bias_relu(const Tensor& x, const Tensor& weight, const Tensor& bias, Site site = {});

// The everyday ops (autograd/ops_everyday.h) under F:: as well, as PyTorch users spell
// them: F::normalize(x), F::pad(x, {1, 1}), F::interpolate(x, {.scale_factor = {2}}).
using reel::adaptive_avg_pool1d;
using reel::avg_pool1d;
using reel::conv1d;
using reel::conv_transpose2d;
using reel::cosine_similarity;
using reel::interpolate;
using reel::max_pool1d;
using reel::normalize;
using reel::pad;

}  // namespace reel::nn::functional
