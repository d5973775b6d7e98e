// Activation modules beyond layers.h's ReLU, GELU, Tanh and Sigmoid (and Hardtanh, ReLU6,
// Hardsigmoid, Threshold with PyTorch's zero gradients at their break points): each a plain
// Module with its options as members, y = f(x) with x's shape (Softmax along `dim`).
// Printed as PyTorch prints them.
//
//   nn::Sequential net{nn::Linear(16, 32), nn::SiLU(), nn::Linear(32, 4), nn::Softmax(1)};
//   nn::Softplus sp({.beta = 2, .threshold = 10});
#pragma once
#include <cstdint>
#include <string>

#include "../autograd/ops.h"
#include "module.h"

namespace reel::nn {

// x sigmoid(x)
class SiLU : public Module {
 public:
  Tensor forward(const Tensor& x) override {
    SiteScope at_caller = at_caller_site();
    return silu(x);
  }
  std::string type_name() const override { return "SiLU"; }
};

// x > 0 ? x : alpha (e^x - 1)
class ELU : public Module {
 public:
  explicit ELU(double alpha = 1.0) : alpha(alpha) {}
  Tensor forward(const Tensor& x) override {
    SiteScope at_caller = at_caller_site();
    return elu(x, alpha);
  }
  std::string type_name() const override { return "ELU"; }
  std::string extra_repr() const override;
  double alpha;
};

// x > 0 ? x : negative_slope x
class LeakyReLU : public Module {
 public:
  explicit LeakyReLU(double negative_slope = 0.01) : negative_slope(negative_slope) {}
  Tensor forward(const Tensor& x) override {
    SiteScope at_caller = at_caller_site();
    return leaky_relu(x, negative_slope);
  }
  std::string type_name() const override { return "LeakyReLU"; }
  std::string extra_repr() const override;
  double negative_slope;
};

// ln(1 + e^(beta x)) / beta, x itself where beta x > threshold
struct SoftplusOptions {
  double beta = 1;
  double threshold = 20;
};
class Softplus : public Module {
 public:
  explicit Softplus(SoftplusOptions options = {}) : options(options) {}
  Tensor forward(const Tensor& x) override {
    SiteScope at_caller = at_caller_site();
    return softplus(x, options.beta, options.threshold);
  }
  std::string type_name() const override { return "Softplus"; }
  std::string extra_repr() const override;
  SoftplusOptions options;
};

// x tanh(softplus(x))
class Mish : public Module {
 public:
  Tensor forward(const Tensor& x) override {
    SiteScope at_caller = at_caller_site();
    return mish(x);
  }
  std::string type_name() const override { return "Mish"; }
};

// x relu6(x + 3) / 6
class Hardswish : public Module {
 public:
  Tensor forward(const Tensor& x) override {
    SiteScope at_caller = at_caller_site();
    return hardswish(x);
  }
  std::string type_name() const override { return "Hardswish"; }
};

// clamp(x, min_val, max_val), with a zero gradient at the bounds (PyTorch's)
class Hardtanh : public Module {
 public:
  explicit Hardtanh(double min_val = -1, double max_val = 1) : min_val(min_val), max_val(max_val) {}
  Tensor forward(const Tensor& x) override {
    SiteScope at_caller = at_caller_site();
    return hardtanh(x, min_val, max_val);
  }
  std::string type_name() const override { return "Hardtanh"; }
  std::string extra_repr() const override;
  double min_val, max_val;
};

// min(max(x, 0), 6)
class ReLU6 : public Module {
 public:
  Tensor forward(const Tensor& x) override {
    SiteScope at_caller = at_caller_site();
    return relu6(x);
  }
  std::string type_name() const override { return "ReLU6"; }
};

// relu6(x + 3) / 6
class Hardsigmoid : public Module {
 public:
  Tensor forward(const Tensor& x) override {
    SiteScope at_caller = at_caller_site();
    return hardsigmoid(x);
  }
  std::string type_name() const override { return "Hardsigmoid"; }
};

// x > threshold ? x : value
class Threshold : public Module {
 public:
  Threshold(double threshold, double value) : threshold(threshold), value(value) {}
  Tensor forward(const Tensor& x) override {
    SiteScope at_caller = at_caller_site();
    return reel::threshold(x, threshold, value);
  }
  std::string type_name() const override { return "Threshold"; }
  std::string extra_repr() const override;
  double threshold, value;
};

// softmax along dim (negative counts from the end): rows of exp(x) / sum exp(x)
class Softmax : public Module {
 public:
  explicit Softmax(int64_t dim) : dim(dim) {}
  Tensor forward(const Tensor& x) override {
    SiteScope at_caller = at_caller_site();
    return softmax(x, dim);
  }
  std::string type_name() const override { return "Softmax"; }
  std::string extra_repr() const override { return "dim=" + std::to_string(dim); }
  int64_t dim;
};

}  // namespace reel::nn
