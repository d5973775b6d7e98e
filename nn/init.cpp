// Initialisers, with torch.nn.init's formulas for gains and fans.
#include "init.h"

#include <fmt/format.h>

#include <cmath>

#include "../autograd/grad_mode.h"

namespace reel::nn::init {

namespace {
void check_floating(const char* fn, const Tensor& t) {
  if (!t.defined()) throw Error(fmt::format("nn::init::{}: the tensor is undefined", fn));
  if (!t.is_floating_point())
    throw Error(fmt::format("nn::init::{}: expected a floating-point tensor, got {}", fn, dtype_name(t.dtype())));
}

int64_t fan(const Tensor& t, FanMode mode) {
  Fans f = calculate_fans(t);
  return mode == FanMode::fan_in ? f.fan_in : f.fan_out;
}
}  // namespace

double calculate_gain(Nonlinearity nonlinearity, double param) {
  switch (nonlinearity) {
    case Nonlinearity::linear:
    case Nonlinearity::conv:
    case Nonlinearity::sigmoid: return 1.0;
    case Nonlinearity::tanh: return 5.0 / 3.0;
    case Nonlinearity::relu: return std::sqrt(2.0);
    case Nonlinearity::leaky_relu: return std::sqrt(2.0 / (1.0 + param * param));
    case Nonlinearity::selu: return 3.0 / 4.0;
  }
  return 1.0;
}

Fans calculate_fans(const Tensor& t) {
  if (!t.defined() || t.dim() < 2)
    throw Error(fmt::format("nn::init: fan in and fan out need a tensor of at least 2 dims, got {}",
                            t.defined() ? t.shape().str() : "an undefined tensor"));
  int64_t receptive = 1;
  for (int d = 2; d < t.dim(); ++d) receptive *= t.shape()[d];
  return {t.shape()[1] * receptive, t.shape()[0] * receptive};
}

Tensor& uniform_(Tensor& t, double a, double b, Generator& gen) {
  check_floating("uniform_", t);
  if (!(a <= b)) throw Error(fmt::format("nn::init::uniform_: expected a <= b, got [{}, {}]", a, b));
  NoGradGuard guard;
  return reel::uniform_(t, a, b, gen);
}
Tensor& uniform_(Tensor& t, double a, double b) { return init::uniform_(t, a, b, default_generator()); }

Tensor& normal_(Tensor& t, double mean, double std, Generator& gen) {
  check_floating("normal_", t);
  if (!(std >= 0)) throw Error(fmt::format("nn::init::normal_: std must be >= 0, got {}", std));
  NoGradGuard guard;
  return reel::normal_(t, mean, std, gen);
}
Tensor& normal_(Tensor& t, double mean, double std) { return init::normal_(t, mean, std, default_generator()); }

Tensor& constant_(Tensor& t, double value) {
  if (!t.defined()) throw Error("nn::init::constant_: the tensor is undefined");
  NoGradGuard guard;
  t.fill_(value);
  return t;
}
Tensor& zeros_(Tensor& t) { return constant_(t, 0.0); }
Tensor& ones_(Tensor& t) { return constant_(t, 1.0); }

Tensor& xavier_uniform_(Tensor& t, double gain, Generator& gen) {
  check_floating("xavier_uniform_", t);
  Fans f = calculate_fans(t);
  double a = gain * std::sqrt(6.0 / double(f.fan_in + f.fan_out));
  return init::uniform_(t, -a, a, gen);
}
Tensor& xavier_uniform_(Tensor& t, double gain) { return xavier_uniform_(t, gain, default_generator()); }

Tensor& xavier_normal_(Tensor& t, double gain, Generator& gen) {
  check_floating("xavier_normal_", t);
  Fans f = calculate_fans(t);
  return init::normal_(t, 0.0, gain * std::sqrt(2.0 / double(f.fan_in + f.fan_out)), gen);
}
Tensor& xavier_normal_(Tensor& t, double gain) { return xavier_normal_(t, gain, default_generator()); }

Tensor& kaiming_uniform_(Tensor& t, KaimingOptions opt, Generator& gen) {
  check_floating("kaiming_uniform_", t);
  int64_t n = fan(t, opt.mode);
  if (n == 0) return t;  // an empty tensor: nothing to fill (PyTorch warns)
  double bound = calculate_gain(opt.nonlinearity, opt.a) * std::sqrt(3.0 / double(n));
  return init::uniform_(t, -bound, bound, gen);
}
Tensor& kaiming_uniform_(Tensor& t, KaimingOptions opt) { return kaiming_uniform_(t, opt, default_generator()); }

Tensor& kaiming_normal_(Tensor& t, KaimingOptions opt, Generator& gen) {
  check_floating("kaiming_normal_", t);
  int64_t n = fan(t, opt.mode);
  if (n == 0) return t;
  return init::normal_(t, 0.0, calculate_gain(opt.nonlinearity, opt.a) / std::sqrt(double(n)), gen);
}
Tensor& kaiming_normal_(Tensor& t, KaimingOptions opt) { return kaiming_normal_(t, opt, default_generator()); }

}  // namespace reel::nn::init
