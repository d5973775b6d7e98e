// Channels-last f16/bf16 activations on CUDA (REEL_CUDA_CHANNELS_LAST) as far as it needs no
// GPU: the switch and the rules that pick, per convolution, the layout cuDNN is told. Plain
// values in, plain values out, no CUDA header, so that reel_tests checks each rule in every
// build (test/test_cuda_rules.cpp).
//
// off (the default): CudaBackend::channels_last is false; every 4-D tensor the ops allocate
//   is NCHW, as before the switch existed.
// on: CudaBackend::channels_last(f16 or bf16) is true, so under autocast the ops hand the
//   backend NHWC activations (tensor/backend.h, channels_last): a convolution writes y
//   channels-last, pooling, elementwise ops, dropout and batch norm keep that layout, and the
//   next convolution reads it as it lies. cuDNN's half-precision convolutions run on tensor
//   cores in NHWC; in NCHW they transpose around the kernel (cuDNN's documentation: "NHWC
//   is the preferred layout for tensor core convolutions"), which is what this removes.
//
// A convolution describes all three tensors in one layout: the layout of the tensor it
// writes (y forward, gx for the data gradient, x for the filter gradient, whose gw is always
// the parameter's [O, I, kh, kw]). Operands in the other layout are copied into it first; the
// filter in NHWC is [O, kh, kw, I] (KRSC), a copy of the weight (weights are small beside
// activations: ResNet-50's are 1/40 of its activations at batch 32); the filter gradient is
// written KRSC and copied into gw.
#pragma once
#include <string>

#include "../../tensor/dtype.h"
#include "../../tensor/shape.h"
#include "env_switch.h"

namespace reel::cuda::channels_last {

// ---- REEL_CUDA_CHANNELS_LAST: "off" (the default) or "on"
enum class Path { off, on, invalid };
inline constexpr Choice<Path> kPaths[] = {{"off", Path::off}, {"on", Path::on}};
inline Path path_from_env(const char* value) { return parse_choice(value, kPaths, Path::off, Path::invalid); }
inline std::string invalid_path_message(const char* value) {
  return choice_message("conv2d", "REEL_CUDA_CHANNELS_LAST", kPaths, value);
}

// Whether the CUDA backend keeps 4-D activations of `dtype` channels-last (Backend::channels_last):
// the halves only, where tensor cores read NHWC; f32 and f64 stay NCHW (their FMA kernels
// gain nothing, and PyTorch's f32 CUDA tensors stay NCHW too unless a user asks)
inline bool keeps(Path path, DType dtype) { return path == Path::on && is_low_precision(dtype); }

// The layout one convolution hands cuDNN, from the tensor it writes: NHWC where that one is
// channels-last (tensor/shape.h's is_channels_last, which is false where NCHW and NHWC are
// the same memory: one channel or one pixel) and of a dtype cuDNN convolves in NHWC here;
// f64 stays NCHW (its NHWC kernels are not the ones worth having), its output copied.
enum class Layout { nchw, nhwc };
inline Layout conv_layout(bool written_channels_last, DType dtype) {
  return written_channels_last && dtype != DType::f64 ? Layout::nhwc : Layout::nchw;
}

// Whether a tensor's memory is the packed NHWC layout of its 4-D shape: is_channels_last, or a
// contiguous tensor with one channel or one pixel (NCHW and NHWC are then the same memory).
// A convolution in NHWC takes such an operand as it lies and copies any other into NHWC (one
// read and one write of it); in NCHW it takes contiguous operands as they lie.
inline bool packed_nhwc(const Dims& shape, const Dims& strides) {
  if (shape.size() != 4) return false;
  const Dims cl = channels_last_strides(shape);
  for (int d = 0; d < 4; ++d)
    if (shape[d] != 1 && strides[d] != cl[d]) return false;
  return true;
}

// cuDNN's 4-d tensor descriptors and filter descriptors take a format and the NCHW sizes;
// the key of a cached plan carries the layout, so one shape seen in both layouts keeps two
// plans (each with its own measured algorithms).
inline int64_t key_slot(Layout layout) { return layout == Layout::nhwc ? 1 : 0; }

}  // namespace reel::cuda::channels_last
