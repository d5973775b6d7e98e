// Initialisers, as torch.nn.init: each fills a tensor in place (without recording,
// even on a parameter that requires grad) and returns it. The random ones draw from
// the Generator given last (as PyTorch's generator=), else from the thread's default
// generator (tensor/generator.h).
//
//   nn::init::kaiming_normal_(conv.weight, {.mode = nn::init::FanMode::fan_out,
//                                          .nonlinearity = nn::init::Nonlinearity::relu});
//   nn::init::zeros_(conv.bias);
// Call uniform_ and normal_ qualified (nn::init::uniform_): unqualified, argument-
// dependent lookup also finds reel::uniform_ and the call is ambiguous.
#pragma once
#include "../tensor/tensor.h"

namespace reel::nn::init {

enum class Nonlinearity { linear, conv, sigmoid, tanh, relu, leaky_relu, selu };
enum class FanMode { fan_in, fan_out };

// The recommended gain for a nonlinearity (param: leaky_relu's negative slope,
// default 0.01): linear/conv/sigmoid 1, tanh 5/3, relu sqrt 2,
// leaky_relu sqrt(2 / (1 + param^2)), selu 3/4.
double calculate_gain(Nonlinearity nonlinearity, double param = 0.01);
// fan_in = size(1) * receptive field, fan_out = size(0) * receptive field, where the
// receptive field is the product of dims 2..; needs at least 2 dims.
struct Fans {
  int64_t fan_in, fan_out;
};
Fans calculate_fans(const Tensor& t);

Tensor& uniform_(Tensor& t, double a = 0.0, double b = 1.0);
Tensor& uniform_(Tensor& t, double a, double b, Generator& gen);
Tensor& normal_(Tensor& t, double mean = 0.0, double std = 1.0);
Tensor& normal_(Tensor& t, double mean, double std, Generator& gen);
Tensor& constant_(Tensor& t, double value);
Tensor& zeros_(Tensor& t);
Tensor& ones_(Tensor& t);

// U(-a, a), a = gain sqrt(6 / (fan_in + fan_out))
Tensor& xavier_uniform_(Tensor& t, double gain = 1.0);
Tensor& xavier_uniform_(Tensor& t, double gain, Generator& gen);
// N(0, std^2), std = gain sqrt(2 / (fan_in + fan_out))
Tensor& xavier_normal_(Tensor& t, double gain = 1.0);
Tensor& xavier_normal_(Tensor& t, double gain, Generator& gen);

struct KaimingOptions {
  double a = 0.0;  // negative slope of the leaky_relu that follows
  FanMode mode = FanMode::fan_in;
  Nonlinearity nonlinearity = Nonlinearity::leaky_relu;
};
// U(-bound, bound), bound = gain(nonlinearity, a) sqrt(3 / fan)
Tensor& kaiming_uniform_(Tensor& t, KaimingOptions opt = {});
Tensor& kaiming_uniform_(Tensor& t, KaimingOptions opt, Generator& gen);
// N(0, std^2), std = gain(nonlinearity, a) / sqrt(fan)
Tensor& kaiming_normal_(Tensor& t, KaimingOptions opt = {});
Tensor& kaiming_normal_(Tensor& t, KaimingOptions opt, Generator& gen);

}  // namespace reel::nn::init
