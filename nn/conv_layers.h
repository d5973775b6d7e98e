// The convolution-family layers beyond Conv2d: Conv1d, ConvTranspose2d, the 1-d pools and
// Upsample, each a Module over the functional op of autograd/ops_everyday.h with
// PyTorch's parameter names, shapes and default initialisation.
//
//   nn::Conv1d conv(16, 32, 5, {.padding = 2});              // [N, 16, L] -> [N, 32, L]
//   nn::ConvTranspose2d up(32, 16, 4, {.stride = 2, .padding = 1});  // doubles H and W
//   nn::Upsample resize({.scale_factor = {2}, .mode = InterpolateMode::bilinear});
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "../autograd/ops.h"
#include "module.h"

namespace reel::nn {

// 1-D convolution. x [N, C_in, L] -> y [N, C_out, L_out],
// L_out = (L + 2 padding - dilation (k - 1) - 1) / stride + 1.
// weight [C_out, C_in / groups, k], bias [C_out]; init as Conv2d (fan_in = C_in/groups * k).
struct Conv1dOptions {
  int64_t stride = 1;
  ConvPadding1 padding = 0;  // or "same" / "valid" (autograd/ops_everyday.h)
  int64_t dilation = 1;
  int64_t groups = 1;
  bool bias = true;
};
class Conv1d : public Module {
 public:
  Conv1d(int64_t in_channels, int64_t out_channels, int64_t kernel_size, Conv1dOptions opt = {});
  Tensor forward(const Tensor& x) override;
  std::string type_name() const override { return "Conv1d"; }
  std::string extra_repr() const override;
  void reset_parameters();

  Tensor weight, bias;
  int64_t in_channels, out_channels, kernel_size;
  Conv1dOptions options;
};

// 2-D transposed convolution (the gradient of Conv2d with respect to its input).
// x [N, C_in, H, W] -> y [N, C_out, H_out, W_out],
// H_out = (H - 1) stride - 2 padding + dilation (k - 1) + output_padding + 1.
// weight [C_in, C_out / groups, kh, kw] (PyTorch's layout), bias [C_out];
// init as PyTorch: kaiming_uniform(a = sqrt 5) with fan_in = C_out/groups * kh * kw.
struct ConvTranspose2dOptions {
  Size2 stride = 1;
  Size2 padding = 0;
  Size2 output_padding = 0;
  int64_t groups = 1;
  bool bias = true;
  Size2 dilation = 1;
};
class ConvTranspose2d : public Module {
 public:
  ConvTranspose2d(int64_t in_channels, int64_t out_channels, Size2 kernel_size, ConvTranspose2dOptions opt = {});
  Tensor forward(const Tensor& x) override;
  std::string type_name() const override { return "ConvTranspose2d"; }
  std::string extra_repr() const override;
  void reset_parameters();

  Tensor weight, bias;
  int64_t in_channels, out_channels;
  Size2 kernel_size;
  ConvTranspose2dOptions options;
};

// Max / average pooling over windows of the last dim. x [N, C, L] -> [N, C, L_out],
// L_out = (L + 2 padding - dilation (k - 1) - 1) / stride + 1, rounded up with ceil_mode;
// stride 0 means the kernel size.
struct Pool1dOptions {
  int64_t stride = 0;
  int64_t padding = 0;
  bool count_include_pad = true;  // AvgPool1d only
  bool ceil_mode = false;
  int64_t dilation = 1;  // MaxPool1d only
};
class MaxPool1d : public Module {
 public:
  explicit MaxPool1d(int64_t kernel_size, Pool1dOptions opt = {});
  Tensor forward(const Tensor& x) override;
  std::string type_name() const override { return "MaxPool1d"; }
  std::string extra_repr() const override;
  int64_t kernel_size;
  Pool1dOptions options;
};
class AvgPool1d : public Module {
 public:
  explicit AvgPool1d(int64_t kernel_size, Pool1dOptions opt = {});
  Tensor forward(const Tensor& x) override;
  std::string type_name() const override { return "AvgPool1d"; }
  std::string extra_repr() const override;
  int64_t kernel_size;
  Pool1dOptions options;
};

// Resampling to a size or by a factor: interpolate() as a layer (no parameters).
// x [N, C, L] (nearest, linear) or [N, C, H, W] (nearest, bilinear).
class Upsample : public Module {
 public:
  explicit Upsample(InterpolateOptions opt);
  Tensor forward(const Tensor& x) override;
  std::string type_name() const override { return "Upsample"; }
  std::string extra_repr() const override;
  InterpolateOptions options;
};

}  // namespace reel::nn
