// The small modules libtorch users put in a Sequential beside the layers: a callable
// wrapped as a module (Functional), Unflatten, channel dropout for 1-d and 3-d inputs,
// alpha dropout, LogSoftmax and the 2-d padding layers (Hardtanh and ReLU6 are in
// nn/activations.h). Each is a plain Module, printed as PyTorch prints it; y has x's
// shape except where the comment says.
//
//   nn::Sequential net{nn::Linear(784, 64), nn::Functional(reel::relu), nn::Unflatten(1, {4, 16}),
//                      nn::Functional([](const Tensor& x) { return x.pow(2.0); })};
//   nn::Sequential gen{nn::Functional(reel::leaky_relu, 0.2)};   // extra arguments bound, as libtorch's
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "../autograd/ops.h"
#include "module.h"

namespace reel::nn {

// y = fn(x, bound...): a function, lambda or functor as a module (no parameters). The
// function may take reel's trailing Site (it gets the caller's line through the module).
class Functional : public Module {
 public:
  template <typename F, typename... Bound>
    requires(!std::is_same_v<std::remove_cvref_t<F>, Functional> &&
             (std::is_invocable_v<F&, const Tensor&, Bound&...> ||
              std::is_invocable_v<F&, const Tensor&, Bound&..., Site>))
  explicit Functional(F fn, Bound... bound)
      : fn_([fn = std::move(fn), ... bound = std::move(bound)](const Tensor& x) mutable -> Tensor {
          if constexpr (std::is_invocable_v<F&, const Tensor&, Bound&...>) {
            return std::invoke(fn, x, bound...);
          } else {
            return std::invoke(fn, x, bound..., Site{nullptr, 0});  // the module's scope names the caller
          }
        }) {}
  Tensor forward(const Tensor& x) override;
  std::string type_name() const override { return "Functional"; }

 private:
  std::function<Tensor(const Tensor&)> fn_;
};

// Splits dim into `sizes` (one may be -1): [N, 64] -> [N, 4, 16] with Unflatten(1, {4, 16}).
class Unflatten : public Module {
 public:
  Unflatten(int64_t dim, Dims sizes);
  Tensor forward(const Tensor& x) override;
  std::string type_name() const override { return "Unflatten"; }
  std::string extra_repr() const override;
  int64_t dim;
  Dims sizes;
};

// Zeroes whole channels with probability p in training and scales the rest by 1/(1-p);
// the identity in eval. Dropout1d: x [N, C, L] or [C, L]; Dropout3d: x [N, C, D, H, W] or
// [C, D, H, W]; one draw per (n, c), as Dropout2d (nn/norm_layers.h).
class Dropout1d : public Module {
 public:
  explicit Dropout1d(double p = 0.5);
  Tensor forward(const Tensor& x) override;
  std::string type_name() const override { return "Dropout1d"; }
  std::string extra_repr() const override;
  double p;
};
class Dropout3d : public Module {
 public:
  explicit Dropout3d(double p = 0.5);
  Tensor forward(const Tensor& x) override;
  std::string type_name() const override { return "Dropout3d"; }
  std::string extra_repr() const override;
  double p;
};

// Dropout for SELU networks: keeps mean 0 and variance 1 of its input. In training each
// element (AlphaDropout) or each channel of [N, C, *] (FeatureAlphaDropout) is kept with
// probability 1 - p; y = a (x keep + alpha' (1 - keep)) + b with alpha' = -1.7581 (SELU's
// negative saturation), a = ((1 - p)(1 + p alpha'^2))^(-1/2), b = -a alpha' p, as PyTorch.
// The identity in eval.
class AlphaDropout : public Module {
 public:
  explicit AlphaDropout(double p = 0.5);
  Tensor forward(const Tensor& x) override;
  std::string type_name() const override { return "AlphaDropout"; }
  std::string extra_repr() const override;
  double p;
};
class FeatureAlphaDropout : public Module {
 public:
  explicit FeatureAlphaDropout(double p = 0.5);
  Tensor forward(const Tensor& x) override;
  std::string type_name() const override { return "FeatureAlphaDropout"; }
  std::string extra_repr() const override;
  double p;
};

// log_softmax along dim
class LogSoftmax : public Module {
 public:
  explicit LogSoftmax(int64_t dim) : dim(dim) {}
  Tensor forward(const Tensor& x) override;
  std::string type_name() const override { return "LogSoftmax"; }
  std::string extra_repr() const override { return "dim=" + std::to_string(dim); }
  int64_t dim;
};

// Pads the last two dims of x [N, C, H, W] or [C, H, W] by {left, right, top, bottom}
// (one number: all four): H + top + bottom, W + left + right. ZeroPad2d and ConstantPad2d
// write a constant, ReflectionPad2d mirrors (without the edge), ReplicationPad2d repeats
// the edge (reel::pad's modes).
class Pad2d : public Module {
 public:
  Tensor forward(const Tensor& x) override;
  std::string extra_repr() const override;
  std::vector<int64_t> padding;  // left, right, top, bottom
  PadOptions options;

 protected:
  Pad2d(const char* name, std::vector<int64_t> padding, PadOptions opt);
};
class ZeroPad2d : public Pad2d {
 public:
  explicit ZeroPad2d(int64_t padding) : ZeroPad2d(std::vector<int64_t>{padding}) {}
  explicit ZeroPad2d(std::vector<int64_t> padding) : Pad2d("ZeroPad2d", std::move(padding), {}) {}
  std::string type_name() const override { return "ZeroPad2d"; }
};
class ConstantPad2d : public Pad2d {
 public:
  ConstantPad2d(int64_t padding, double value) : ConstantPad2d(std::vector<int64_t>{padding}, value) {}
  ConstantPad2d(std::vector<int64_t> padding, double value)
      : Pad2d("ConstantPad2d", std::move(padding), {.mode = PadMode::constant, .value = value}) {}
  std::string type_name() const override { return "ConstantPad2d"; }
};
class ReflectionPad2d : public Pad2d {
 public:
  explicit ReflectionPad2d(int64_t padding) : ReflectionPad2d(std::vector<int64_t>{padding}) {}
  explicit ReflectionPad2d(std::vector<int64_t> padding)
      : Pad2d("ReflectionPad2d", std::move(padding), {.mode = PadMode::reflect}) {}
  std::string type_name() const override { return "ReflectionPad2d"; }
};
class ReplicationPad2d : public Pad2d {
 public:
  explicit ReplicationPad2d(int64_t padding) : ReplicationPad2d(std::vector<int64_t>{padding}) {}
  explicit ReplicationPad2d(std::vector<int64_t> padding)
      : Pad2d("ReplicationPad2d", std::move(padding), {.mode = PadMode::replicate}) {}
  std::string type_name() const override { return "ReplicationPad2d"; }
};

}  // namespace reel::nn
