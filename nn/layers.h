// The layers: each a plain Module whose public tensors are its parameters and
// buffers, initialised as PyTorch initialises them. Shapes in and out are in the
// comment above each class.
//
//   nn::Sequential mlp{nn::Linear(784, 128), nn::ReLU(), nn::Linear(128, 10)};
//   nn::Conv2d conv(1, 32, 3, {.stride = 1, .padding = 1});
//   Tensor y = mlp(x.flatten(1));
#pragma once
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <type_traits>
#include <vector>

#include "../autograd/ops.h"
#include "module.h"

namespace reel::nn {

// A pair of sizes (height, width) written as one number when both are equal:
// `.stride = 2` or `.padding = {1, 2}` (the functional options' type, autograd/ops.h).
using reel::Size2;

// y = x W^T + b. x [*, in] -> y [*, out]; weight [out, in], bias [out].
// Init: weight kaiming_uniform(a = sqrt 5), bias U(-1/sqrt(in), 1/sqrt(in)).
struct LinearOptions {
  bool bias = true;
};
class Linear : public Module {
 public:
  Linear(int64_t in_features, int64_t out_features, LinearOptions opt = {});
  Tensor forward(const Tensor& x) override;
  Tensor forward_impl(const Tensor& x, bool relu);  // relu: y = max(x W^T + b, 0) in one op
  std::string type_name() const override { return "Linear"; }
  std::string extra_repr() const override;
  void reset_parameters();

  Tensor weight, bias;  // bias undefined when opt.bias is false
  int64_t in_features, out_features;
};

// 2-D convolution. x [N, C_in, H, W] -> y [N, C_out, H_out, W_out],
// H_out = (H + 2 padding - dilation (k - 1) - 1) / stride + 1.
// weight [C_out, C_in / groups, kh, kw], bias [C_out]; init as Linear with fan_in = C_in/groups * kh * kw.
struct Conv2dOptions {
  Size2 stride = 1;
  ConvPadding padding = 0;  // or "same" / "valid" (autograd/ops.h)
  Size2 dilation = 1;
  int64_t groups = 1;
  bool bias = true;
};
class Conv2d : public Module {
 public:
  Conv2d(int64_t in_channels, int64_t out_channels, Size2 kernel_size, Conv2dOptions opt = {});
  Tensor forward(const Tensor& x) override;
  Tensor forward_impl(const Tensor& x, bool relu);  // relu: the convolution and max(., 0) in one op
  // forward of x given channel-blocked, xb [N, C_in/B, H, W, B] (conv2d_blocked: what
  // BatchNorm::forward_relu_blocked writes), called as this module
  Tensor forward_blocked(const Tensor& xb, Site site = {});
  std::string type_name() const override { return "Conv2d"; }
  std::string extra_repr() const override;
  void reset_parameters();

  Tensor weight, bias;
  int64_t in_channels, out_channels;
  Size2 kernel_size;
  Conv2dOptions options;
};

// Max / average pooling over windows. x [N, C, H, W] -> [N, C, H_out, W_out] (or unbatched
// [C, H, W] -> [C, H_out, W_out]), H_out = (H + 2 padding - dilation (k - 1) - 1) / stride + 1,
// rounded up with ceil_mode. stride 0 means the kernel size (PyTorch's default).
struct Pool2dOptions {
  Size2 stride = 0;
  Size2 padding = 0;
  bool count_include_pad = true;  // AvgPool2d only: padded zeros count in the average
  bool ceil_mode = false;
  Size2 dilation = 1;  // MaxPool2d only
  int64_t divisor_override = 0;  // AvgPool2d only: every window's sum divided by this (0: its count)
};
class MaxPool2d : public Module {
 public:
  explicit MaxPool2d(Size2 kernel_size, Pool2dOptions opt = {});
  Tensor forward(const Tensor& x) override;
  // PyTorch's return_indices = true: the values and the i64 argmax of each window (flat
  // h * W + w within its plane). A separate call, as libtorch's, since forward returns one tensor.
  PoolWithIndices forward_with_indices(const Tensor& x);
  std::string type_name() const override { return "MaxPool2d"; }
  std::string extra_repr() const override;
  Size2 kernel_size;
  Pool2dOptions options;
};
class AvgPool2d : public Module {
 public:
  explicit AvgPool2d(Size2 kernel_size, Pool2dOptions opt = {});
  Tensor forward(const Tensor& x) override;
  std::string type_name() const override { return "AvgPool2d"; }
  std::string extra_repr() const override;
  Size2 kernel_size;
  Pool2dOptions options;
};
// x [N, C, H, W] -> [N, C, out.h, out.w] (or [C, H, W] -> [C, out.h, out.w]), averaging adaptive windows.
class AdaptiveAvgPool2d : public Module {
 public:
  explicit AdaptiveAvgPool2d(Size2 output_size);
  Tensor forward(const Tensor& x) override;
  std::string type_name() const override { return "AdaptiveAvgPool2d"; }
  std::string extra_repr() const override;
  Size2 output_size;
};

// Batch normalisation per channel. BatchNorm1d: x [N, C] or [N, C, L]; BatchNorm2d:
// x [N, C, H, W]; y has x's shape. Training normalises with the batch statistics and
// updates running_mean/running_var (unbiased variance) by `momentum` (nullopt: a
// cumulative average over num_batches_tracked, as PyTorch's momentum=None); eval
// normalises with the running statistics. weight 1, bias 0; running_mean 0, running_var 1.
struct BatchNormOptions {
  double eps = 1e-5;
  std::optional<double> momentum = 0.1;
  bool affine = true;               // learnable weight and bias [C]
  bool track_running_stats = true;  // else batch statistics in eval too, and no buffers
};
class BatchNorm : public Module {
 public:
  Tensor forward(const Tensor& x) override;
  // relu(forward(cat(xs, 1))) as one op (batch_norm_relu: no concatenation, one pass, one
  // saved tensor), called as this module: xs [N, C_j, *] with the C_j summing to num_features.
  Tensor forward_relu(const std::vector<Tensor>& xs, Site site = {});
  // the same written channel-blocked, [N, C/block, H, W, block] (batch_norm_relu_blocked),
  // for a Conv2d's forward_blocked to read without a reorder
  Tensor forward_relu_blocked(const std::vector<Tensor>& xs, int64_t block, Site site = {});
  std::string extra_repr() const override;
  void reset_parameters();
  void reset_running_stats();

  Tensor weight, bias;  // [C], when affine
  Tensor running_mean, running_var;  // [C] f32, when tracking
  Tensor num_batches_tracked;  // [] i64, when tracking
  int64_t num_features;
  BatchNormOptions options;

 protected:
  BatchNorm(int64_t num_features, BatchNormOptions opt, int min_dim, int max_dim);
  void check_input(const Dims& shape) const;
  void check_pieces(const std::vector<Tensor>& xs, const char* call) const;  // forward_relu's inputs
  double count_batch();  // training: counts the batch, returns the momentum to use
  int min_dim_, max_dim_;
};
class BatchNorm1d : public BatchNorm {
 public:
  explicit BatchNorm1d(int64_t num_features, BatchNormOptions opt = {}) : BatchNorm(num_features, opt, 2, 3) {}
  std::string type_name() const override { return "BatchNorm1d"; }
};
class BatchNorm2d : public BatchNorm {
 public:
  explicit BatchNorm2d(int64_t num_features, BatchNormOptions opt = {}) : BatchNorm(num_features, opt, 4, 4) {}
  std::string type_name() const override { return "BatchNorm2d"; }
};

// conv(relu(norm(cat(xs, 1)))), each module called as itself: where conv's backend reads a
// channel-blocked input (conv2d_channel_block; oneDNN's nChw16c on AVX-512 CPUs), norm's
// BN-ReLU writes those blocks in its own pass and conv reads them with no reorder
// (forward_relu_blocked, forward_blocked); else forward_relu and conv(x). ResNet's and
// DenseNet's BN-ReLU -> 3x3 convolution steps.
Tensor conv_after_norm_relu(Conv2d& conv, BatchNorm& norm, const std::vector<Tensor>& xs);

// Layer normalisation over the trailing dims `normalized_shape`; y has x's shape.
// weight 1, bias 0, each of shape normalized_shape.
struct LayerNormOptions {
  double eps = 1e-5;
  bool elementwise_affine = true;
};
class LayerNorm : public Module {
 public:
  explicit LayerNorm(Dims normalized_shape, LayerNormOptions opt = {});
  Tensor forward(const Tensor& x) override;
  std::string type_name() const override { return "LayerNorm"; }
  std::string extra_repr() const override;
  Tensor weight, bias;
  Dims normalized_shape;
  LayerNormOptions options;
};

// Zeroes elements with probability p and scales the rest by 1/(1-p) in training;
// the identity in eval.
// Masks come from `generator` when set (it must outlive the module), else from the
// default generator of the thread that calls forward.
class Dropout : public Module {
 public:
  explicit Dropout(double p = 0.5, Generator* generator = nullptr);
  Tensor forward(const Tensor& x) override;
  std::string type_name() const override { return "Dropout"; }
  std::string extra_repr() const override;
  double p;
  Generator* generator;
};

// Activations: elementwise, y has x's shape (more in nn/activations.h). GELU is
// x Phi(x) as PyTorch's default; GELU("tanh") its tanh approximation.
class ReLU : public Module {
 public:
  Tensor forward(const Tensor& x) override;
  std::string type_name() const override { return "ReLU"; }
};
class GELU : public Module {
 public:
  explicit GELU(std::string approximate = "none");  // "none" or "tanh"
  Tensor forward(const Tensor& x) override;
  std::string type_name() const override { return "GELU"; }
  std::string extra_repr() const override { return "approximate='" + approximate + "'"; }
  std::string approximate;
};
class Tanh : public Module {
 public:
  Tensor forward(const Tensor& x) override;
  std::string type_name() const override { return "Tanh"; }
};
class Sigmoid : public Module {
 public:
  Tensor forward(const Tensor& x) override;
  std::string type_name() const override { return "Sigmoid"; }
};

// Merges dims start_dim..end_dim: [N, C, H, W] -> [N, C*H*W] by default.
class Flatten : public Module {
 public:
  explicit Flatten(int64_t start_dim = 1, int64_t end_dim = -1) : start_dim(start_dim), end_dim(end_dim) {}
  Tensor forward(const Tensor& x) override;
  std::string type_name() const override { return "Flatten"; }
  std::string extra_repr() const override;
  int64_t start_dim, end_dim;
};

// A lookup table: indices (i64, any shape S) -> [S..., embedding_dim]. weight
// [num_embeddings, embedding_dim] ~ N(0, 1), except the padding_idx row: zeros, and
// it gets no gradient (a negative padding_idx counts from the end, as in PyTorch).
//   nn::Embedding words(10000, 64, {.padding_idx = 0});
struct EmbeddingOptions {
  std::optional<int64_t> padding_idx;
};
class Embedding : public Module {
 public:
  Embedding(int64_t num_embeddings, int64_t embedding_dim, EmbeddingOptions opt = {});
  Tensor forward(const Tensor& indices) override;
  std::string type_name() const override { return "Embedding"; }
  std::string extra_repr() const override;
  void reset_parameters();  // N(0, 1), the padding row zeroed
  Tensor weight;
  int64_t num_embeddings, embedding_dim;
  std::optional<int64_t> padding_idx;  // wrapped to [0, num_embeddings)
};

// Runs its modules in order, each on the previous one's output. Owns them; they are
// its children "0", "1", ... (checkpoint keys "0.weight", as in PyTorch).
//   nn::Sequential seq{nn::Linear(4, 8), nn::ReLU()};
//   seq.add(nn::Linear(8, 2));
//   nn::Linear& first = seq.at<nn::Linear>(0);
// libtorch's empty holder, `nn::Sequential downsample{nullptr}` (or a parameter
// `nn::Sequential downsample = nullptr`), is a Sequential that tests false until a
// Sequential is assigned to it or a module added: `if (downsample) ...`. Calling it
// before then throws Error.
class Sequential : public Module {
 public:
  Sequential() = default;
  Sequential(std::nullptr_t) : null_(true) {}  // implicit: `nn::Sequential ds = nullptr` as in libtorch
  // false only for a Sequential made from nullptr and given nothing since
  explicit operator bool() const { return !null_; }
  template <typename... M>
    requires(sizeof...(M) > 0 && (std::derived_from<std::remove_cvref_t<M>, Module> && ...) &&
             (!std::is_lvalue_reference_v<M> && ...))
  explicit Sequential(M&&... modules) {
    (add(std::move(modules)), ...);
  }
  template <typename... M>
    requires(sizeof...(M) > 0 && (std::derived_from<std::remove_cvref_t<M>, Module> && ...) &&
             (std::is_lvalue_reference_v<M> || ...))
  explicit Sequential(M&&...) {
    static_assert(!sizeof...(M), "Sequential owns its modules: build it from temporaries, nn::Sequential{nn::Linear(4, "
                                 "8), nn::ReLU()}, or move named ones in with std::move(layer)");
  }
  Sequential(Sequential&&) noexcept = default;
  Sequential& operator=(Sequential&&) noexcept = default;

  // Appends a module (moved in) and returns a reference to it, stable for the
  // Sequential's lifetime.
  template <typename M>
    requires(std::derived_from<std::remove_cvref_t<M>, Module> && !std::is_lvalue_reference_v<M>)
  std::remove_cvref_t<M>& add(M&& module) {
    module.check_extent(typeid(module) == typeid(M) ? sizeof(M) : 0, "Sequential::add");
    auto owned = std::make_unique<std::remove_cvref_t<M>>(std::move(module));
    auto& ref = *owned;
    append(std::move(owned));
    return ref;
  }
  void append(std::unique_ptr<Module> module);  // (a Sequential made from nullptr becomes non-null)
  template <typename M>
    requires(std::derived_from<std::remove_cvref_t<M>, Module> && !std::is_lvalue_reference_v<M>)
  std::remove_cvref_t<M>& push_back(M&& module) {  // libtorch's spelling of add
    return add(std::move(module));
  }
  // A named module (an lvalue) cannot be owned without moving it: the first error says so.
  template <typename M>
    requires(std::derived_from<std::remove_cvref_t<M>, Module> && std::is_lvalue_reference_v<M>)
  void add(M&&) {
    static_assert(!sizeof(M), "Sequential owns its modules: pass a temporary, seq.add(nn::Linear(4, 8)), or move a "
                              "named one in, seq.add(std::move(layer)), then reach it as seq.at<nn::Linear>(i)");
  }

  Tensor forward(const Tensor& x) override;
  std::string type_name() const override { return "Sequential"; }
  size_t size() const { return modules_.size(); }
  Module& operator[](size_t i) const;  // throws Error when out of range
  // The i-th module as its own type; throws Error when it is another type.
  template <typename M>
  M& at(size_t i) const {
    auto* m = dynamic_cast<M*>(&(*this)[i]);
    if (!m) wrong_type(i);
    return *m;
  }

 private:
  [[noreturn]] void wrong_type(size_t i) const;
  std::vector<Module*> modules_;
  bool null_ = false;  // made from nullptr, nothing added or assigned since
};

}  // namespace reel::nn
