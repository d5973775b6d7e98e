// Two optimizers written as a user writes one, outside the library: subclasses of
// optim::Optimizer through its public header only, their updates in tensor ops (so they
// run on whatever device the parameters are on), their state in ParamState's named
// tensors (so save/load and checkpoint::TrainingState keep it). test_user_optimizer.cpp
// checks them against PyTorch's formulas (test/reference/user_optimizers.py).
#pragma once
#include <reel/reel.h>

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <optional>
#include <utility>
#include <vector>

namespace my_optim {

using reel::Tensor;

// Lion (Chen et al. 2023): m the moving average of the gradients,
//   p *= 1 - lr wd;  p -= lr sign(b1 m + (1 - b1) g);  m = b2 m + (1 - b2) g
struct LionOptions {
  double lr = 1e-4;
  std::pair<double, double> betas{0.9, 0.99};
  double weight_decay = 0;
};

class Lion : public reel::optim::Optimizer {
 public:
  Lion(std::vector<Tensor> params, LionOptions o = {})
      : Optimizer("Lion", std::move(params),
                  {.lr = o.lr, .weight_decay = o.weight_decay, .beta1 = o.betas.first, .beta2 = o.betas.second,
                   .betas = true}) {}
  Lion(std::vector<reel::optim::ParamGroup> groups, LionOptions o = {})
      : Optimizer("Lion", std::move(groups),
                  {.lr = o.lr, .weight_decay = o.weight_decay, .beta1 = o.betas.first, .beta2 = o.betas.second,
                   .betas = true}) {}

  void step(reel::Site site = {}) override {
    for_each_parameter(site, [](Tensor& p, const Tensor& g, reel::optim::ParamState& st, const reel::optim::Hyper& h) {
      Tensor& m = st.buffer("exp_avg", [&] { return reel::zeros_like(p); });
      p.mul_(1 - h.lr * h.weight_decay);
      p.sub_(reel::sign(m * h.beta1 + g * (1 - h.beta1)), h.lr);
      m.mul_(h.beta2).add_(g, 1 - h.beta2);
    });
  }
};

// Adafactor as PyTorch 2.5's torch.optim.Adafactor (its _single_tensor_adafactor): a
// matrix keeps the row and column means of g^2 (factored second moment), a vector all
// of it. With t the step, w = t^beta2_decay:
//   a = max(eps2, rms(p)) min(lr, 1 / sqrt(t));  p *= 1 - lr wd
//   matrix: r = lerp(r, mean_cols(g^2), w), c = lerp(c, mean_rows(g^2), w),
//           v = r c / max(mean(r), eps1);   vector: v = lerp(v, g^2, w)
//   u = g / sqrt(max(v, eps1^2));  p -= a / max(1, rms(u) / d) u
struct AdafactorOptions {
  double lr = 1e-2;
  double beta2_decay = -0.8;
  std::optional<double> eps1 = std::nullopt;  // the parameters' machine epsilon (PyTorch's None)
  double eps2 = 1e-3;
  double d = 1.0;
  double weight_decay = 0;
};

class Adafactor : public reel::optim::Optimizer {
 public:
  Adafactor(std::vector<Tensor> params, AdafactorOptions o = {})
      : Optimizer("Adafactor", std::move(params),
                  {.lr = o.lr,
                   .weight_decay = o.weight_decay,
                   .extra = {{"beta2_decay", o.beta2_decay},
                             {"eps1", o.eps1.value_or(-1)},  // -1: the dtype's epsilon, at each step
                             {"eps2", o.eps2},
                             {"d", o.d}}}) {}

  void step(reel::Site site = {}) override {
    for_each_parameter(site, [](Tensor& p, const Tensor& g, reel::optim::ParamState& st, const reel::optim::Hyper& h) {
      double eps1 = h.get("eps1") >= 0 ? h.get("eps1") : p.dtype() == reel::DType::f64 ? DBL_EPSILON : FLT_EPSILON;
      double t = double(st.step), w = std::pow(t, h.get("beta2_decay"));
      double alpha = std::max(h.get("eps2"), rms(p)) * std::min(h.lr, 1 / std::sqrt(t));
      if (h.weight_decay != 0) p.mul_(1 - h.lr * h.weight_decay);
      Tensor v;
      if (p.dim() > 1) {
        Tensor& r = st.buffer("row_var", [&] { return reel::zeros(row_shape(p), {.dtype = p.dtype(), .device = p.device()}); });
        Tensor& c = st.buffer("col_var", [&] { return reel::zeros(col_shape(p), {.dtype = p.dtype(), .device = p.device()}); });
        Tensor g2 = g * g;
        lerp_(r, reel::mean(g2, {-1}, true), w);
        lerp_(c, reel::mean(g2, {-2}, true), w);
        v = reel::matmul(r, c) / reel::clamp(reel::mean(r, {-2}, true), eps1, INFINITY);
      } else {
        Tensor& var = st.buffer("variance", [&] { return reel::zeros_like(p); });
        lerp_(var, g * g, w);
        v = var;
      }
      Tensor u = reel::rsqrt(reel::clamp(v, eps1 * eps1, INFINITY)) * g;
      double denom = std::max(1.0, rms(u) / h.get("d"));
      p.sub_(u, alpha / denom);
    });
  }

 protected:
  // The factors are [..., rows, 1] and [..., 1, cols], not the parameter's shape.
  std::optional<reel::Dims> state_shape(const std::string& buffer, const Tensor& p) const override {
    if (buffer == "row_var") return row_shape(p);
    if (buffer == "col_var") return col_shape(p);
    return p.shape();
  }

 private:
  static reel::Dims row_shape(const Tensor& p) {
    std::vector<int64_t> s(p.shape().begin(), p.shape().end());
    s.back() = 1;
    return reel::Dims(s);
  }
  static reel::Dims col_shape(const Tensor& p) {
    std::vector<int64_t> s(p.shape().begin(), p.shape().end());
    s[s.size() - 2] = 1;
    return reel::Dims(s);
  }
  // sqrt(mean(x^2)), read back to the host as PyTorch's .item() does
  static double rms(const Tensor& x) { return std::sqrt(reel::mean(x * x).item<double>()); }
  // torch.lerp_: a + w (b - a), or b - (b - a)(1 - w) for |w| >= 0.5 (its two forms)
  static void lerp_(Tensor& a, const Tensor& b, double w) {
    if (std::abs(w) < 0.5) a.add_(b - a, w);
    else a.copy_(b - (b - a) * (1 - w));
  }
};

}  // namespace my_optim
