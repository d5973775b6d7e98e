// nn::functional: the fused layer ops under the names PyTorch users look for. Thin
// wrappers (the ops live in autograd/ops.h, with their backward rules): no state, the
// caller's line and the wrapper's name reported on errors.
//
//   namespace F = reel::nn::functional;
//   Tensor y = F::conv2d_bias_relu(x, w, b, {.padding = {1, 1}});  // x [N, C, H, W], w [O, C/g, KH, KW], b [O]
//   Tensor h = F::linear_bias_relu(x, w, b);                         // x [*, in], w [out, in], b [out]
#pragma once
#include "../autograd/ops.h"
#include "../autograd/ops_attention.h"
#include "losses.h"  // l1_loss, smooth_l1_loss, huber_loss, kl_div, binary_cross_entropy, cosine_embedding_loss

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

// torch::nn::functional's common names, each the op of autograd/ops.h. libtorch's option
// builders become reel's option structs: F::max_pool2d(x, F::MaxPool2dFuncOptions(2))
// is F::max_pool2d(x, {.kernel = 2}); F::dropout(x, F::DropoutFuncOptions().p(0.2).training(t))
// is F::dropout(x, 0.2, t) (docs/from-libtorch.md).
using reel::adaptive_avg_pool2d;
using reel::avg_pool2d;
using reel::batch_norm;
using reel::binary_cross_entropy_with_logits;
using reel::conv2d;
using reel::cross_entropy;
using reel::dropout;
using reel::elu;
using reel::embedding;
using reel::gelu;
using reel::hardswish;
using reel::layer_norm;
using reel::leaky_relu;
using reel::linear;
using reel::log_softmax;
using reel::max_pool2d;
using reel::mish;
using reel::mse_loss;
using reel::nll_loss;
using reel::one_hot;
using reel::relu;
using reel::scaled_dot_product_attention;
using reel::sigmoid;
using reel::silu;
using reel::softmax;
using reel::softplus;
using reel::tanh;

// hardtanh and relu6 have PyTorch's gradients at their break points (0 at the bounds,
// where clamp passes g), so F:: names the ops themselves, not clamps
using reel::hardsigmoid;
using reel::hardtanh;
using reel::relu6;

}  // namespace reel::nn::functional
