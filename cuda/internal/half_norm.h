// Batch norm of f16/bf16 activations through cuDNN (REEL_CUDA_HALF_NORM) as far as it needs
// no GPU: the switch and the rule that says which calls cuDNN takes. Plain values
// in, plain values out, no CUDA header, so that reel_tests checks the rule in every build
// (test/test_cuda_layout_rules.cpp); norm_cudnn.cpp makes the calls.
//
// staged (the default): autocast's mixed batch norm (NHWC half x and y, f32 parameters and
//   statistics: autograd/ops_norm.cpp) runs on f32 twins of x and y (tensor/low_precision_
//   backend.h's Stage): a transposing conversion in, the f32 NCHW kernels, one back out.
// cudnn: autocast's batch norms of halves are mixed in either layout (Backend::
//   mixed_batch_norm: row-major halves too, which staged casts to f32 and back, as PyTorch's
//   CUDA autocast leaves batch norm in the input's dtype), and cuDNN's batch norm reads and
//   writes the half tensors as they lie, NHWC or NCHW, with f32
//   scale, bias and statistics (its "bnScaleBiasMeanVarDesc" for half data is float: the
//   mixed form exactly): cudnnBatchNormalizationForwardTraining in
//   CUDNN_BATCHNORM_SPATIAL_PERSISTENT mode for NHWC (the NHWC half kernels; PyTorch takes the
//   same mode for channels-last training) and SPATIAL for NCHW (as PyTorch), cudnnBatch-
//   NormalizationForwardInference in SPATIAL mode, cudnnBatchNormalizationBackward from the forward's saved mean and inverse standard
//   deviation. batch_norm_relu's relu is a pass over y after (and its mask a pass over the
//   gradient before): cuDNN's fused BN_ACTIVATION form needs its forward's reserve space in
//   the backward, which the Backend contract does not carry. DenseNet's pieces are joined
//   into one tensor of their layout first (cuDNN reads one tensor), their gradients copied out.
//
// Served: 4-D x [N, C, H, W] of f16 or bf16, every piece and y packed NHWC (or one channel or
// one pixel, the same memory) or every one row-major, y of x's dtype; weight, bias, running and saved statistics
// f32 and contiguous where given; training with more than one value a channel (cuDNN's
// unbiased running variance divides by count - 1); the backward only for training (an eval
// backward's statistics are constants: the staged path's one multiply). Anything else runs
// staged, as before.
#pragma once
#include <cstdint>
#include <limits>
#include <span>
#include <string>

#include "../../tensor/dtype.h"
#include "../../tensor/tensor.h"
#include "env_switch.h"

namespace reel::cuda {
class CudaBackend;
}

namespace reel::cuda::half_norm {

// ---- REEL_CUDA_HALF_NORM: "staged" (the default) or "cudnn"
enum class Path { staged, cudnn, invalid };
inline constexpr Choice<Path> kPaths[] = {{"staged", Path::staged}, {"cudnn", Path::cudnn}};
inline Path path_from_env(const char* value) { return parse_choice(value, kPaths, Path::staged, Path::invalid); }
inline std::string invalid_path_message(const char* value) {
  return choice_message("batch_norm", "REEL_CUDA_HALF_NORM", kPaths, value);
}

// ---- one call
struct Call {
  Path path = Path::staged;
  bool backward = false;
  bool training = true;
  bool running = true;        // running statistics given (an evaluation forward reads them)
  int dims = 4;               // x's rank
  DType x = DType::bf16;      // every piece's dtype (first piece; `same_dtypes`: all alike)
  DType y = DType::bf16;      // y forward, gx backward (and gy)
  bool same_dtypes = true;    // every piece, y (and gy, gx) of x's dtype
  bool nhwc = true;           // every piece, y (and gx) packed NHWC (channels_last::packed_nhwc)
  bool nchw = true;           // every piece, y (and gx) row-major (contiguous)
  bool params_f32 = true;     // weight, bias, running and saved statistics f32 where given
  bool params_dense = true;   // ... and contiguous
  int64_t n = 1, c = 1, hw = 1;  // the joined x's N, C (all pieces) and H W
};

// "" when cuDNN takes the call, else why not (the call then runs staged)
inline std::string refusal(const Call& c) {
  if (c.path != Path::cudnn) return "REEL_CUDA_HALF_NORM is not cudnn";
  if (c.dims != 4) return "not a 4-d [N, C, H, W] input";
  if (!is_low_precision(c.x) || !c.same_dtypes || c.y != c.x) return "not f16/bf16 throughout";
  if (!c.nhwc && !c.nchw) return "neither packed NHWC nor row-major throughout";
  if (!c.params_f32 || !c.params_dense) return "parameters or statistics not contiguous f32 (the mixed form)";
  if (c.backward && !c.training) return "an evaluation-mode backward (constant statistics)";
  if (!c.training && !c.running) return "evaluation without running statistics";
  if (c.training && c.n * c.hw < 2) return "one value a channel";
  // cuDNN's descriptors hold sizes and strides as int
  if (c.n * c.c * c.hw > int64_t(std::numeric_limits<int>::max())) return "2^31 elements or more";
  return "";
}

// cuDNN's mode for a call it takes: the persistent NHWC kernels in NHWC training (forward and
// backward alike: the backward reads what that forward saved), plain spatial otherwise
enum class Mode { spatial, spatial_persistent };
inline Mode mode_of(const Call& c) { return c.training && c.nhwc ? Mode::spatial_persistent : Mode::spatial; }
// The layout cuDNN is told: NHWC where every tensor is packed so (a tensor that is both, one
// channel or one pixel, takes it too), else row-major
inline bool nhwc_descriptor(const Call& c) { return c.nhwc; }

// ---- the calls (norm_cudnn.cpp), with the arguments of LowPrecisionBackend's
// native_batch_norm_forward / _backward hooks: true when cuDNN ran the call, false (nothing
// written) when the rule above refuses it
bool forward(CudaBackend& k, const Tensor& out, const Tensor& save_mean, const Tensor& save_invstd,
             std::span<const Tensor> xs, const Tensor& weight, const Tensor& bias, const Tensor& running_mean,
             const Tensor& running_var, bool training, double momentum, double eps, bool relu);
bool backward(CudaBackend& k, std::span<const Tensor> gxs, const Tensor& gw, const Tensor& gb, const Tensor& gy,
              std::span<const Tensor> xs, const Tensor& y, const Tensor& weight, const Tensor& save_mean,
              const Tensor& save_invstd, bool training);

}  // namespace reel::cuda::half_norm
