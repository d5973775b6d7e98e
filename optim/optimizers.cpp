// The optimizers' constructors: option checks (PyTorch's), then the base with the
// hyper-parameters of their kind. The update rules live in the backends' optim_step.
#include "optimizers.h"

#include <fmt/format.h>

namespace reel::optim {

namespace {
void check(bool ok, const char* opt, const char* what, double v) {
  if (!ok) throw Error(fmt::format("{}: invalid {} {}", opt, what, v));
}
void check_betas(const char* opt, std::pair<double, double> b) {
  check(b.first >= 0 && b.first < 1, opt, "beta1 (expected in [0, 1))", b.first);
  check(b.second >= 0 && b.second < 1, opt, "beta2 (expected in [0, 1))", b.second);
}

OptimStep sgd(const SGDOptions& o) {
  check(o.lr >= 0, "SGD", "lr", o.lr);
  check(o.momentum >= 0, "SGD", "momentum", o.momentum);
  check(o.weight_decay >= 0, "SGD", "weight_decay", o.weight_decay);
  if (o.nesterov && (o.momentum <= 0 || o.dampening != 0))
    throw Error(fmt::format("SGD: nesterov needs momentum > 0 and dampening 0, got momentum {} and dampening {}",
                            o.momentum, o.dampening));
  OptimStep s;
  s.kind = OptimStep::sgd;
  s.lr = o.lr, s.momentum = o.momentum, s.dampening = o.dampening, s.weight_decay = o.weight_decay;
  s.nesterov = o.nesterov, s.maximize = o.maximize;
  return s;
}

template <typename Options>
OptimStep adam_like(const char* name, OptimStep::Kind kind, const Options& o) {
  check(o.lr >= 0, name, "lr", o.lr);
  check(o.eps >= 0, name, "eps", o.eps);
  check(o.weight_decay >= 0, name, "weight_decay", o.weight_decay);
  check_betas(name, o.betas);
  OptimStep s;
  s.kind = kind;
  s.lr = o.lr, s.beta1 = o.betas.first, s.beta2 = o.betas.second, s.eps = o.eps;
  s.weight_decay = o.weight_decay, s.maximize = o.maximize;
  return s;
}

OptimStep rmsprop(const RMSpropOptions& o) {
  check(o.lr >= 0, "RMSprop", "lr", o.lr);
  check(o.eps >= 0, "RMSprop", "eps", o.eps);
  check(o.momentum >= 0, "RMSprop", "momentum", o.momentum);
  check(o.weight_decay >= 0, "RMSprop", "weight_decay", o.weight_decay);
  check(o.alpha >= 0, "RMSprop", "alpha", o.alpha);
  OptimStep s;
  s.kind = OptimStep::rmsprop;
  s.lr = o.lr, s.alpha = o.alpha, s.eps = o.eps, s.weight_decay = o.weight_decay;
  s.momentum = o.momentum, s.centered = o.centered, s.maximize = o.maximize;
  return s;
}

OptimStep adagrad(const AdagradOptions& o) {
  check(o.lr >= 0, "Adagrad", "lr", o.lr);
  check(o.lr_decay >= 0, "Adagrad", "lr_decay", o.lr_decay);
  check(o.weight_decay >= 0, "Adagrad", "weight_decay", o.weight_decay);
  check(o.initial_accumulator_value >= 0, "Adagrad", "initial_accumulator_value", o.initial_accumulator_value);
  check(o.eps >= 0, "Adagrad", "eps", o.eps);
  OptimStep s;
  s.kind = OptimStep::adagrad;
  s.lr = o.lr, s.lr_decay = o.lr_decay, s.weight_decay = o.weight_decay;
  s.initial_accumulator = o.initial_accumulator_value, s.eps = o.eps, s.maximize = o.maximize;
  return s;
}

std::vector<ParamGroup> one_group(std::vector<Tensor> params) {
  std::vector<ParamGroup> g(1);
  g[0].params = std::move(params);
  return g;
}
}  // namespace

SGD::SGD(std::vector<Tensor> params, SGDOptions opt) : SGD(one_group(std::move(params)), opt) {}
SGD::SGD(std::vector<ParamGroup> groups, SGDOptions opt) : Optimizer("SGD", std::move(groups), sgd(opt)) {}

Adam::Adam(std::vector<Tensor> params, AdamOptions opt) : Adam(one_group(std::move(params)), opt) {}
Adam::Adam(std::vector<ParamGroup> groups, AdamOptions opt)
    : Optimizer("Adam", std::move(groups), adam_like("Adam", OptimStep::adam, opt)) {}

AdamW::AdamW(std::vector<Tensor> params, AdamWOptions opt) : AdamW(one_group(std::move(params)), opt) {}
AdamW::AdamW(std::vector<ParamGroup> groups, AdamWOptions opt)
    : Optimizer("AdamW", std::move(groups), adam_like("AdamW", OptimStep::adamw, opt)) {}

Adamax::Adamax(std::vector<Tensor> params, AdamaxOptions opt) : Adamax(one_group(std::move(params)), opt) {}
Adamax::Adamax(std::vector<ParamGroup> groups, AdamaxOptions opt)
    : Optimizer("Adamax", std::move(groups), adam_like("Adamax", OptimStep::adamax, opt)) {}

RMSprop::RMSprop(std::vector<Tensor> params, RMSpropOptions opt) : RMSprop(one_group(std::move(params)), opt) {}
RMSprop::RMSprop(std::vector<ParamGroup> groups, RMSpropOptions opt)
    : Optimizer("RMSprop", std::move(groups), rmsprop(opt)) {}

Adagrad::Adagrad(std::vector<Tensor> params, AdagradOptions opt) : Adagrad(one_group(std::move(params)), opt) {}
Adagrad::Adagrad(std::vector<ParamGroup> groups, AdagradOptions opt)
    : Optimizer("Adagrad", std::move(groups), adagrad(opt)) {}

}  // namespace reel::optim
