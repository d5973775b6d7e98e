// Conv1d, ConvTranspose2d, the 1-d pools and Upsample: argument checks that name the
// layer at construction, PyTorch's initialisation, forward through the functional ops.
#include "conv_layers.h"

#include <fmt/format.h>

#include <cmath>
#include <string_view>

#include "layer_checks.h"

namespace reel::nn {
using namespace detail;

// ---- Conv1d
Conv1d::Conv1d(int64_t in_channels, int64_t out_channels, int64_t kernel_size, Conv1dOptions opt)
    : in_channels(in_channels), out_channels(out_channels), kernel_size(kernel_size), options(opt) {
  check_positive("Conv1d", "in_channels", in_channels);
  check_positive("Conv1d", "out_channels", out_channels);
  check_positive("Conv1d", "kernel_size", kernel_size);
  check_positive("Conv1d", "stride", opt.stride);
  check_positive("Conv1d", "dilation", opt.dilation);
  check_nonnegative("Conv1d", "padding", opt.padding.size);
  check_padding_mode("Conv1d", opt.padding.mode, opt.stride == 1);
  check_groups("Conv1d", in_channels, out_channels, opt.groups);
  weight = empty({out_channels, in_channels / opt.groups, kernel_size});
  if (opt.bias) bias = empty({out_channels});
  reset_parameters();
  register_parameter("weight", weight);
  register_parameter("bias", bias);
}

void Conv1d::reset_parameters() { default_init(weight, bias); }

Tensor Conv1d::forward(const Tensor& x) {
  SiteScope at_caller = at_caller_site();
  if (x.dim() != 3 || x.size(1) != in_channels)
    fail("Conv1d", fmt::format("expected input [N, {}, L], got {}", in_channels, x.shape().str()), kNoSite);
  return conv1d(x, weight, bias,
                {.stride = options.stride, .padding = options.padding, .dilation = options.dilation,
                 .groups = options.groups});
}

std::string Conv1d::extra_repr() const {
  std::string s = fmt::format("{}, {}, kernel_size=({},), stride=({},)", in_channels, out_channels, kernel_size,
                              options.stride);
  if (!options.padding.mode.empty()) s += fmt::format(", padding={}", options.padding.mode);
  else if (options.padding.size) s += fmt::format(", padding=({},)", options.padding.size);
  if (options.dilation != 1) s += fmt::format(", dilation=({},)", options.dilation);
  if (options.groups != 1) s += fmt::format(", groups={}", options.groups);
  if (!bias.defined()) s += ", bias=False";
  return s;
}

// ---- ConvTranspose2d
ConvTranspose2d::ConvTranspose2d(int64_t in_channels, int64_t out_channels, Size2 kernel_size,
                                 ConvTranspose2dOptions opt)
    : in_channels(in_channels), out_channels(out_channels), kernel_size(kernel_size), options(opt) {
  const char* layer = "ConvTranspose2d";
  check_positive(layer, "in_channels", in_channels);
  check_positive(layer, "out_channels", out_channels);
  check_positive(layer, "kernel_size", kernel_size);
  check_positive(layer, "stride", opt.stride);
  check_positive(layer, "dilation", opt.dilation);
  check_nonnegative(layer, "padding", opt.padding);
  check_nonnegative(layer, "output_padding", opt.output_padding);
  // PyTorch's rule: the extra rows must be fewer than the stride or the dilation
  if ((opt.output_padding.h >= opt.stride.h && opt.output_padding.h >= opt.dilation.h) ||
      (opt.output_padding.w >= opt.stride.w && opt.output_padding.w >= opt.dilation.w))
    throw Error(fmt::format("{}: output_padding {} must be smaller than either stride {} or dilation {}", layer,
                            pair_str(opt.output_padding), pair_str(opt.stride), pair_str(opt.dilation)));
  check_groups(layer, in_channels, out_channels, opt.groups);
  weight = empty({in_channels, out_channels / opt.groups, kernel_size.h, kernel_size.w});
  if (opt.bias) bias = empty({out_channels});
  reset_parameters();
  register_parameter("weight", weight);
  register_parameter("bias", bias);
}

void ConvTranspose2d::reset_parameters() { default_init(weight, bias); }

Tensor ConvTranspose2d::forward(const Tensor& x) {
  SiteScope at_caller = at_caller_site();
  if (x.dim() != 4 || x.size(1) != in_channels)
    fail("ConvTranspose2d", fmt::format("expected input [N, {}, H, W], got {}", in_channels, x.shape().str()),
         kNoSite);
  return conv_transpose2d(x, weight, bias,
                          {.stride = options.stride, .padding = options.padding,
                           .output_padding = options.output_padding, .groups = options.groups,
                           .dilation = options.dilation});
}

std::string ConvTranspose2d::extra_repr() const {
  std::string s = fmt::format("{}, {}, kernel_size={}, stride={}", in_channels, out_channels, pair_str(kernel_size),
                              pair_str(options.stride));
  if (options.padding.h || options.padding.w) s += ", padding=" + pair_str(options.padding);
  if (options.output_padding.h || options.output_padding.w) s += ", output_padding=" + pair_str(options.output_padding);
  if (options.dilation.h != 1 || options.dilation.w != 1) s += ", dilation=" + pair_str(options.dilation);
  if (options.groups != 1) s += fmt::format(", groups={}", options.groups);
  if (!bias.defined()) s += ", bias=False";
  return s;
}

// ---- 1-d pooling
namespace {
reel::Pool1dOptions pool1d_options(const char* layer, int64_t kernel, const Pool1dOptions& o) {
  check_positive(layer, "kernel_size", kernel);
  check_nonnegative(layer, "stride", o.stride);
  check_nonnegative(layer, "padding", o.padding);
  check_positive(layer, "dilation", o.dilation);
  if (2 * o.padding > kernel)
    throw Error(fmt::format("{}: padding {} must be at most half of kernel_size {}", layer, o.padding, kernel));
  if (o.dilation != 1 && std::string_view(layer) != "MaxPool1d")
    throw Error(fmt::format("{}: dilation is MaxPool1d's, got {}", layer, o.dilation));
  return {.kernel = kernel, .stride = o.stride == 0 ? kernel : o.stride, .padding = o.padding,
          .count_include_pad = o.count_include_pad, .ceil_mode = o.ceil_mode, .dilation = o.dilation};
}
std::string pool1d_repr(int64_t kernel, const Pool1dOptions& o) {
  std::string s =
      fmt::format("kernel_size={}, stride={}, padding={}", kernel, o.stride == 0 ? kernel : o.stride, o.padding);
  if (o.dilation != 1) s += fmt::format(", dilation={}", o.dilation);
  if (o.ceil_mode) s += ", ceil_mode=True";
  return s;
}
void check_pool_input(const char* layer, const Tensor& x) {
  if (x.dim() != 3) fail(layer, fmt::format("expected input [N, C, L], got {}", x.shape().str()), kNoSite);
}
}  // namespace

MaxPool1d::MaxPool1d(int64_t kernel_size, Pool1dOptions opt) : kernel_size(kernel_size), options(opt) {
  pool1d_options("MaxPool1d", kernel_size, opt);
}
Tensor MaxPool1d::forward(const Tensor& x) {
  SiteScope at_caller = at_caller_site();
  check_pool_input("MaxPool1d", x);
  return max_pool1d(x, pool1d_options("MaxPool1d", kernel_size, options));
}
std::string MaxPool1d::extra_repr() const { return pool1d_repr(kernel_size, options); }

AvgPool1d::AvgPool1d(int64_t kernel_size, Pool1dOptions opt) : kernel_size(kernel_size), options(opt) {
  pool1d_options("AvgPool1d", kernel_size, opt);
}
Tensor AvgPool1d::forward(const Tensor& x) {
  SiteScope at_caller = at_caller_site();
  check_pool_input("AvgPool1d", x);
  return avg_pool1d(x, pool1d_options("AvgPool1d", kernel_size, options));
}
std::string AvgPool1d::extra_repr() const { return pool1d_repr(kernel_size, options); }

// ---- Upsample
Upsample::Upsample(InterpolateOptions opt) : options(std::move(opt)) {
  if (options.size.empty() == options.scale_factor.empty())
    throw Error("Upsample: expected either size or scale_factor, not both and not neither");
  for (int64_t s : options.size)
    if (s <= 0) throw Error(fmt::format("Upsample: sizes must be positive, got {}", s));
  for (double f : options.scale_factor)
    if (!(f > 0) || !std::isfinite(f)) throw Error(fmt::format("Upsample: scale factors must be positive, got {}", f));
  if (options.align_corners && options.mode == InterpolateMode::nearest)
    throw Error("Upsample: align_corners applies to linear and bilinear modes only");
}

Tensor Upsample::forward(const Tensor& x) {
  SiteScope at_caller = at_caller_site();
  return interpolate(x, options);
}

std::string Upsample::extra_repr() const {
  const char* modes[] = {"nearest", "linear", "bilinear"};
  std::string s = options.size.empty() ? fmt::format("scale_factor={}", fmt::join(options.scale_factor, ", "))
                                       : fmt::format("size={}", fmt::join(options.size, ", "));
  return s + fmt::format(", mode='{}'", modes[int(options.mode)]);
}

}  // namespace reel::nn
