// The layers: construction with PyTorch's default initialisation, argument checks
// that name the layer, and forward calls into the ops of autograd/ops.h.
#include "layers.h"

#include <fmt/format.h>

#include <cmath>
#include <string_view>
#include <typeinfo>

#include "../autograd/grad_mode.h"
#include "../tensor/backend.h"
#include "init.h"
#include "layer_checks.h"

namespace reel::nn {

using namespace detail;

// ---- Linear
Linear::Linear(int64_t in_features, int64_t out_features, LinearOptions opt)
    : in_features(in_features), out_features(out_features) {
  check_positive("Linear", "in_features", in_features);
  check_positive("Linear", "out_features", out_features);
  weight = empty({out_features, in_features});
  if (opt.bias) bias = empty({out_features});
  reset_parameters();
  register_parameter("weight", weight);
  register_parameter("bias", bias);
}

void Linear::reset_parameters() { default_init(weight, bias); }

Tensor Linear::forward(const Tensor& x) { return forward_impl(x, false); }

Tensor Linear::forward_impl(const Tensor& x, bool relu) {
  SiteScope at_caller = at_caller_site();
  if (x.dim() < 1 || x.size(-1) != in_features)
    fail("Linear", fmt::format("expected input [*, {}], got {}", in_features, x.shape().str()), kNoSite);
  return relu ? linear_relu(x, weight, bias) : linear(x, weight, bias);
}

std::string Linear::extra_repr() const {
  return fmt::format("in_features={}, out_features={}, bias={}", in_features, out_features, py_bool(bias.defined()));
}

// ---- Conv2d
Conv2d::Conv2d(int64_t in_channels, int64_t out_channels, Size2 kernel_size, Conv2dOptions opt)
    : in_channels(in_channels), out_channels(out_channels), kernel_size(kernel_size), options(opt) {
  check_positive("Conv2d", "in_channels", in_channels);
  check_positive("Conv2d", "out_channels", out_channels);
  check_positive("Conv2d", "kernel_size", kernel_size);
  check_positive("Conv2d", "stride", opt.stride);
  check_positive("Conv2d", "dilation", opt.dilation);
  check_nonnegative("Conv2d", "padding", opt.padding);
  check_padding_mode("Conv2d", opt.padding.mode, opt.stride.h == 1 && opt.stride.w == 1);
  check_groups("Conv2d", in_channels, out_channels, opt.groups);
  weight = empty({out_channels, in_channels / opt.groups, kernel_size.h, kernel_size.w});
  if (opt.bias) bias = empty({out_channels});
  reset_parameters();
  register_parameter("weight", weight);
  register_parameter("bias", bias);
}

void Conv2d::reset_parameters() { default_init(weight, bias); }

Tensor Conv2d::forward(const Tensor& x) { return forward_impl(x, false); }

namespace {
reel::Conv2dOptions op_options(const Conv2dOptions& options) {
  return {.stride = options.stride, .padding = options.padding, .dilation = options.dilation,
          .groups = options.groups};
}
}  // namespace

Tensor Conv2d::forward_impl(const Tensor& x, bool relu) {
  SiteScope at_caller = at_caller_site();
  if (x.dim() != 4 || x.size(1) != in_channels)
    fail("Conv2d", fmt::format("expected input [N, {}, H, W], got {}", in_channels, x.shape().str()), kNoSite);
  return relu ? conv2d_relu(x, weight, bias, op_options(options)) : conv2d(x, weight, bias, op_options(options));
}

Tensor Conv2d::forward_blocked(const Tensor& xb, Site site) {
  Call call(*this, site);
  SiteScope at_caller = at_caller_site();
  if (xb.dim() != 5 || xb.size(1) * xb.size(4) != in_channels)
    fail("Conv2d", fmt::format("forward_blocked: expected a channel-blocked input [N, {} / B, H, W, B], got {}",
                               in_channels, xb.shape().str()), kNoSite);
  return conv2d_blocked(xb, weight, bias, op_options(options));
}

std::string Conv2d::extra_repr() const {
  std::string s = fmt::format("{}, {}, kernel_size={}, stride={}", in_channels, out_channels, pair_str(kernel_size),
                              pair_str(options.stride));
  if (!options.padding.mode.empty()) s += ", padding=" + options.padding.mode;
  else if (options.padding.h || options.padding.w) s += ", padding=" + pair_str(options.padding);
  if (options.dilation.h != 1 || options.dilation.w != 1) s += ", dilation=" + pair_str(options.dilation);
  if (options.groups != 1) s += fmt::format(", groups={}", options.groups);
  if (!bias.defined()) s += ", bias=False";
  return s;
}

// ---- pooling
namespace {
reel::Pool2dOptions pool_options(const char* layer, Size2 kernel, const Pool2dOptions& o) {
  check_positive(layer, "kernel_size", kernel);
  check_nonnegative(layer, "stride", o.stride);
  check_nonnegative(layer, "padding", o.padding);
  Size2 stride = o.stride.h == 0 && o.stride.w == 0 ? kernel : o.stride;
  check_positive(layer, "stride", stride);
  if (2 * o.padding.h > kernel.h || 2 * o.padding.w > kernel.w)
    throw Error(fmt::format("{}: padding {} must be at most half of kernel_size {}", layer, pair_str(o.padding),
                            pair_str(kernel)));
  reel::Pool2dOptions p;
  p.kernel = kernel;
  p.stride = stride;
  p.padding = o.padding;
  p.count_include_pad = o.count_include_pad;
  p.ceil_mode = o.ceil_mode;
  check_positive(layer, "dilation", o.dilation);
  const bool is_max = std::string_view(layer) == "MaxPool2d";
  if (!is_max && (o.dilation.h != 1 || o.dilation.w != 1))
    throw Error(fmt::format("{}: dilation is MaxPool2d's, got {}", layer, pair_str(o.dilation)));
  if (o.divisor_override < 0 || (is_max && o.divisor_override))
    throw Error(fmt::format("{}: divisor_override is AvgPool2d's, and positive (0: none); got {}", layer,
                            o.divisor_override));
  p.dilation = o.dilation;
  p.divisor_override = o.divisor_override;
  return p;
}
// PyTorch's repr: dilation for max pooling, divisor_override for avg pooling when set
std::string pool_extras(const Pool2dOptions& o) {
  std::string s;
  if (o.dilation.h != 1 || o.dilation.w != 1) s += ", dilation=" + pair_str(o.dilation);
  if (o.ceil_mode) s += ", ceil_mode=True";
  if (o.divisor_override) s += fmt::format(", divisor_override={}", o.divisor_override);
  return s;
}
void check_pool_input(const char* layer, const Tensor& x) {
  if (x.defined() && x.dim() != 3 && x.dim() != 4)
    fail(layer, fmt::format("expected input [N, C, H, W] or [C, H, W], got {}", x.shape().str()), kNoSite);
}
}  // namespace

MaxPool2d::MaxPool2d(Size2 kernel_size, Pool2dOptions opt) : kernel_size(kernel_size), options(opt) {
  pool_options("MaxPool2d", kernel_size, opt);
}
Tensor MaxPool2d::forward(const Tensor& x) {
  SiteScope at_caller = at_caller_site();
  check_pool_input("MaxPool2d", x);
  return max_pool2d(x, pool_options("MaxPool2d", kernel_size, options));
}
PoolWithIndices MaxPool2d::forward_with_indices(const Tensor& x) {
  SiteScope at_caller = at_caller_site();
  check_pool_input("MaxPool2d", x);
  return max_pool2d_with_indices(x, pool_options("MaxPool2d", kernel_size, options));
}
std::string MaxPool2d::extra_repr() const {
  Size2 stride = options.stride.h == 0 && options.stride.w == 0 ? kernel_size : options.stride;
  return fmt::format("kernel_size={}, stride={}, padding={}{}", pair_str(kernel_size), pair_str(stride),
                     pair_str(options.padding), pool_extras(options));
}

AvgPool2d::AvgPool2d(Size2 kernel_size, Pool2dOptions opt) : kernel_size(kernel_size), options(opt) {
  pool_options("AvgPool2d", kernel_size, opt);
}
Tensor AvgPool2d::forward(const Tensor& x) {
  SiteScope at_caller = at_caller_site();
  check_pool_input("AvgPool2d", x);
  return avg_pool2d(x, pool_options("AvgPool2d", kernel_size, options));
}
std::string AvgPool2d::extra_repr() const {
  Size2 stride = options.stride.h == 0 && options.stride.w == 0 ? kernel_size : options.stride;
  return fmt::format("kernel_size={}, stride={}, padding={}{}", pair_str(kernel_size), pair_str(stride),
                     pair_str(options.padding), pool_extras(options));
}

AdaptiveAvgPool2d::AdaptiveAvgPool2d(Size2 output_size) : output_size(output_size) {
  check_positive("AdaptiveAvgPool2d", "output_size", output_size);
}
Tensor AdaptiveAvgPool2d::forward(const Tensor& x) {
  SiteScope at_caller = at_caller_site();
  check_pool_input("AdaptiveAvgPool2d", x);
  return adaptive_avg_pool2d(x, output_size.h, output_size.w);
}
std::string AdaptiveAvgPool2d::extra_repr() const { return "output_size=" + pair_str(output_size); }

// ---- BatchNorm
BatchNorm::BatchNorm(int64_t num_features, BatchNormOptions opt, int min_dim, int max_dim)
    : num_features(num_features), options(opt), min_dim_(min_dim), max_dim_(max_dim) {
  check_positive("BatchNorm", "num_features", num_features);
  if (opt.eps <= 0) throw Error(fmt::format("BatchNorm: eps must be positive, got {}", opt.eps));
  if (opt.momentum && (*opt.momentum < 0 || *opt.momentum > 1))
    throw Error(fmt::format("BatchNorm: momentum must be in [0, 1], got {}", *opt.momentum));
  if (opt.affine) {
    weight = empty({num_features});
    bias = empty({num_features});
  }
  if (opt.track_running_stats) {
    running_mean = empty({num_features});
    running_var = empty({num_features});
    num_batches_tracked = empty({}, {.dtype = DType::i64});
  }
  reset_parameters();
  register_parameter("weight", weight);
  register_parameter("bias", bias);
  register_buffer("running_mean", running_mean);
  register_buffer("running_var", running_var);
  register_buffer("num_batches_tracked", num_batches_tracked);
}

void BatchNorm::reset_running_stats() {
  if (!options.track_running_stats) return;
  NoGradGuard guard;
  running_mean.zero_();
  running_var.fill_(1.0);
  num_batches_tracked.zero_();
}

void BatchNorm::reset_parameters() {
  reset_running_stats();
  if (options.affine) {
    init::ones_(weight);
    init::zeros_(bias);
  }
}

void BatchNorm::check_input(const Dims& shape) const {
  if (shape.size() < min_dim_ || shape.size() > max_dim_ || shape[1] != num_features) {
    std::string expected = min_dim_ == 4 ? fmt::format("[N, {}, H, W]", num_features)
                                         : fmt::format("[N, {}] or [N, {}, L]", num_features, num_features);
    fail(type_name().c_str(), fmt::format("expected input {}, got {}", expected, shape.str()), kNoSite);
  }
}

double BatchNorm::count_batch() {
  if (!is_training() || !options.track_running_stats) return 0.0;
  // counted on the device: no host sync in a training step
  backend_for(num_batches_tracked.device()).unary(UnaryOp::add_scalar, num_batches_tracked, num_batches_tracked, 1.0);
  num_batches_tracked.storage()->bump_version();
  // momentum = None: a cumulative average, which needs the count on the host
  return options.momentum ? *options.momentum : 1.0 / double(num_batches_tracked.item<int64_t>());
}

Tensor BatchNorm::forward(const Tensor& x) {
  SiteScope at_caller = at_caller_site();
  check_input(x.shape());
  double factor = count_batch();
  bool use_batch_stats = is_training() || !options.track_running_stats;
  return batch_norm(x, weight, bias, running_mean, running_var, use_batch_stats, factor, options.eps);
}

void BatchNorm::check_pieces(const std::vector<Tensor>& xs, const char* call) const {
  if (xs.empty() || !xs[0].defined())
    fail(type_name().c_str(), fmt::format("{}: expected a list of defined inputs", call), kNoSite);
  Dims shape = xs[0].shape();
  if (shape.size() >= 2) {  // the rest is batch_norm_relu's to check
    for (size_t j = 1; j < xs.size(); ++j)
      if (xs[j].defined() && xs[j].dim() == int(shape.size())) shape[1] += xs[j].size(1);
    check_input(shape);
  }
}

Tensor BatchNorm::forward_relu(const std::vector<Tensor>& xs, Site site) {
  Call call(*this, site);
  SiteScope at_caller = at_caller_site();
  check_pieces(xs, "forward_relu");
  double factor = count_batch();
  bool use_batch_stats = is_training() || !options.track_running_stats;
  return batch_norm_relu(xs, weight, bias, running_mean, running_var, use_batch_stats, factor, options.eps);
}

Tensor BatchNorm::forward_relu_blocked(const std::vector<Tensor>& xs, int64_t block, Site site) {
  Call call(*this, site);
  SiteScope at_caller = at_caller_site();
  check_pieces(xs, "forward_relu_blocked");
  double factor = count_batch();
  bool use_batch_stats = is_training() || !options.track_running_stats;
  return batch_norm_relu_blocked(xs, weight, bias, running_mean, running_var, use_batch_stats, factor, options.eps,
                                 block);
}

Tensor conv_after_norm_relu(Conv2d& conv, BatchNorm& norm, const std::vector<Tensor>& xs) {
  int64_t block = xs.empty() ? 0 : conv2d_channel_block(xs[0]);
  if (block && norm.num_features % block == 0 && conv.in_channels == norm.num_features)
    return conv.forward_blocked(norm.forward_relu_blocked(xs, block));
  return conv(norm.forward_relu(xs));
}

std::string BatchNorm::extra_repr() const {
  std::string m = options.momentum ? fmt::format("{}", *options.momentum) : "None";
  return fmt::format("{}, eps={}, momentum={}, affine={}, track_running_stats={}", num_features, options.eps, m,
                     py_bool(options.affine), py_bool(options.track_running_stats));
}

// ---- LayerNorm
LayerNorm::LayerNorm(Dims normalized_shape, LayerNormOptions opt) : normalized_shape(normalized_shape), options(opt) {
  if (normalized_shape.empty()) throw Error("LayerNorm: normalized_shape must have at least one dim");
  for (int64_t s : normalized_shape) check_positive("LayerNorm", "normalized_shape", s);
  if (opt.elementwise_affine) {
    weight = ones(normalized_shape);
    bias = zeros(normalized_shape);
  }
  register_parameter("weight", weight);
  register_parameter("bias", bias);
}

Tensor LayerNorm::forward(const Tensor& x) {
  SiteScope at_caller = at_caller_site();
  int n = normalized_shape.size();
  bool ok = x.dim() >= n;
  for (int i = 0; ok && i < n; ++i) ok = x.shape()[x.dim() - n + i] == normalized_shape[i];
  if (!ok)
    fail("LayerNorm", fmt::format("expected input [*, {}], got {}",
                                  normalized_shape.str().substr(1, normalized_shape.str().size() - 2), x.shape().str()),
         kNoSite);
  return layer_norm(x, normalized_shape, weight, bias, options.eps);
}

std::string LayerNorm::extra_repr() const {
  return fmt::format("{}, eps={}, elementwise_affine={}", normalized_shape.str(), options.eps,
                     py_bool(options.elementwise_affine));
}

// ---- Dropout, activations, Flatten
Dropout::Dropout(double p, Generator* generator) : p(p), generator(generator) {
  if (!(p >= 0 && p <= 1)) throw Error(fmt::format("Dropout: p must be in [0, 1], got {}", p));
}
Tensor Dropout::forward(const Tensor& x) {
  SiteScope at_caller = at_caller_site();
  return dropout(x, p, generator ? *generator : default_generator(), is_training());
}
std::string Dropout::extra_repr() const { return fmt::format("p={}", p); }

Tensor ReLU::forward(const Tensor& x) {
  SiteScope at_caller = at_caller_site();
  return relu(x);
}
GELU::GELU(std::string approximate) : approximate(std::move(approximate)) {
  if (this->approximate != "none" && this->approximate != "tanh")
    throw Error(fmt::format("GELU: approximate must be \"none\" or \"tanh\", got \"{}\"", this->approximate));
}
Tensor GELU::forward(const Tensor& x) {
  SiteScope at_caller = at_caller_site();
  return gelu(x, approximate);
}
Tensor Tanh::forward(const Tensor& x) {
  SiteScope at_caller = at_caller_site();
  return tanh(x);
}
Tensor Sigmoid::forward(const Tensor& x) {
  SiteScope at_caller = at_caller_site();
  return sigmoid(x);
}

Tensor Flatten::forward(const Tensor& x) {
  SiteScope at_caller = at_caller_site();
  return x.flatten(start_dim, end_dim);
}
std::string Flatten::extra_repr() const { return fmt::format("start_dim={}, end_dim={}", start_dim, end_dim); }

// ---- Embedding
Embedding::Embedding(int64_t num_embeddings, int64_t embedding_dim, EmbeddingOptions opt)
    : num_embeddings(num_embeddings), embedding_dim(embedding_dim) {
  check_positive("Embedding", "num_embeddings", num_embeddings);
  check_positive("Embedding", "embedding_dim", embedding_dim);
  if (opt.padding_idx) {
    int64_t p = *opt.padding_idx;
    if (p < -num_embeddings || p >= num_embeddings)
      throw Error(fmt::format("Embedding: padding_idx {} is out of range for {} embeddings: expected {} to {}", p,
                              num_embeddings, -num_embeddings, num_embeddings - 1));
    padding_idx = p < 0 ? p + num_embeddings : p;
  }
  weight = empty({num_embeddings, embedding_dim});
  reset_parameters();
  register_parameter("weight", weight);
}
void Embedding::reset_parameters() {
  NoGradGuard guard;
  init::normal_(weight);
  if (padding_idx) weight.select(0, *padding_idx).fill_(0.0);
}
Tensor Embedding::forward(const Tensor& indices) {
  SiteScope at_caller = at_caller_site();
  if (indices.dtype() != DType::i64)
    fail("Embedding", fmt::format("expected i64 indices, got {}", dtype_name(indices.dtype())), kNoSite);
  return embedding(weight, indices, {.padding_idx = padding_idx});
}
std::string Embedding::extra_repr() const {
  return fmt::format("{}, {}{}", num_embeddings, embedding_dim,
                     padding_idx ? fmt::format(", padding_idx={}", *padding_idx) : "");
}

// ---- Sequential
void Sequential::append(std::unique_ptr<Module> module) {
  null_ = false;
  modules_.push_back(&register_module(std::to_string(modules_.size()), std::move(module)));
}

Module& Sequential::operator[](size_t i) const {
  if (i >= modules_.size())
    throw Error(fmt::format("Sequential: index {} is out of range for {} modules", i, modules_.size()));
  return *modules_[i];
}

void Sequential::wrong_type(size_t i) const {
  throw Error(fmt::format("Sequential::at: module {} is a {}, not the type asked for", i, modules_[i]->type_name()));
}

// A Linear or Conv2d directly followed by a ReLU runs as one op with the relu fused
// into the GEMM / convolution (linear_relu, conv2d_relu): one pass over the output
// fewer forward and backward. Exact types only, so a subclass's own forward is kept;
// not when either module has hooks, which must see the two calls. The fused op runs
// as a call of the Linear (module path "0"), every other module through its call
// operator, as PyTorch's Sequential calls module(input).
Tensor Sequential::forward(const Tensor& x) {
  SiteScope at_caller = at_caller_site();
  if (null_)
    throw Error("Sequential: called while null (made from nullptr, as libtorch's empty holder); assign it a "
                "Sequential first, or test it: `downsample ? downsample(x) : x`");
  Tensor y = x;
  for (size_t i = 0; i < modules_.size(); ++i) {
    Module* m = modules_[i];
    bool relu_next = i + 1 < modules_.size() && typeid(*modules_[i + 1]) == typeid(ReLU) && !m->has_hooks() &&
                     !modules_[i + 1]->has_hooks();
    if (relu_next && typeid(*m) == typeid(Linear)) {
      Call call(*m, kNoSite);
      y = static_cast<Linear*>(m)->forward_impl(y, true), ++i;
    } else if (relu_next && typeid(*m) == typeid(Conv2d)) {
      Call call(*m, kNoSite);
      y = static_cast<Conv2d*>(m)->forward_impl(y, true), ++i;
    } else {
      y = (*m)(y, kNoSite);
    }
  }
  return y;
}

}  // namespace reel::nn
