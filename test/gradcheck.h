// Finite-difference gradient checks in f64: every differentiable op is checked by
// comparing its backward rule with central differences of a random projection.
#pragma once
#include <catch2/catch.hpp>
#include <reel/reel.h>

#include <cmath>
#include <functional>
#include <string>
#include <vector>

namespace reel::test {

// What f throws as a reel::Error (its message), or "no error"
template <typename F>
std::string error_message(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "no error";
}

// got against want elementwise: within tol (1 + |want|), NaN matching NaN; one CHECK on
// the count of the elements that are not
inline void check_close_relative(const Tensor& got, const Tensor& want, double tol) {
  REQUIRE(got.shape() == want.shape());
  std::vector<double> g = got.to_vector<double>(), w = want.to_vector<double>();
  int bad = 0;
  for (size_t i = 0; i < g.size(); ++i)
    if (!(std::abs(g[i] - w[i]) <= tol * (1 + std::abs(w[i]))) && !(std::isnan(g[i]) && std::isnan(w[i]))) ++bad;
  CHECK(bad == 0);
}

// f64 tensor of `shape` with values in [lo, hi), requiring grad
inline Tensor input(const Dims& shape, double lo = -1.0, double hi = 1.0) {
  Tensor t = rand(shape, {.dtype = DType::f64});
  Tensor u = (t * (hi - lo) + lo).detach();
  return u.requires_grad_();
}

// Checks d(sum(f(inputs) * w))/d input against central differences for every input
// that requires grad. Returns an empty string on success, else what differed.
inline std::string gradcheck(const std::function<Tensor(const std::vector<Tensor>&)>& f, std::vector<Tensor> inputs,
                             double eps = 1e-6, double atol = 1e-5, double rtol = 1e-3) {
  Tensor out = f(inputs);
  Tensor w = randn(out.shape(), {.dtype = DType::f64});
  Tensor loss = (out * w).sum();
  std::vector<Tensor> wrt;
  for (auto& t : inputs)
    if (t.requires_grad()) wrt.push_back(t);
  std::vector<Tensor> analytic = autograd::grad({loss}, wrt, {}, {.allow_unused = true});
  NoGradGuard guard;
  size_t k = 0;
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (!inputs[i].requires_grad()) continue;
    Tensor x = inputs[i];
    Tensor flat = x.contiguous();
    if (flat.impl() != x.impl()) return "gradcheck: inputs must be contiguous (make views inside f)";
    double* p = x.data<double>();
    std::vector<double> a = analytic[k].defined() ? analytic[k].to_vector<double>()
                                                  : std::vector<double>(size_t(x.numel()), 0.0);
    ++k;
    for (int64_t j = 0; j < x.numel(); ++j) {
      double orig = p[j];
      p[j] = orig + eps;
      double up = (f(inputs) * w).sum().item<double>();
      p[j] = orig - eps;
      double down = (f(inputs) * w).sum().item<double>();
      p[j] = orig;
      double numeric = (up - down) / (2 * eps);
      if (std::abs(numeric - a[size_t(j)]) > atol + rtol * std::abs(numeric))
        return "input " + std::to_string(i) + " element " + std::to_string(j) + ": analytic " +
               std::to_string(a[size_t(j)]) + " vs numeric " + std::to_string(numeric);
    }
  }
  return "";
}

// Second derivatives: with w and v random, s = sum_i <d sum(f(inputs) w) / d input_i, v_i>
// is differentiated through a create_graph backward with respect to every input and
// to w (the incoming gradient), against central differences of s, itself computed
// from first-order gradients. A rule that calls a kernel under create_graph cuts the
// graph, which shows here as a zero or missing second derivative.
inline std::string gradgradcheck(const std::function<Tensor(const std::vector<Tensor>&)>& f,
                                 std::vector<Tensor> inputs, double eps = 1e-6, double atol = 1e-5,
                                 double rtol = 1e-3) {
  std::vector<Tensor> wrt;
  for (auto& t : inputs)
    if (t.requires_grad()) wrt.push_back(t);
  Tensor w = randn(f(inputs).shape(), {.dtype = DType::f64}).requires_grad_();
  std::vector<Tensor> v;
  for (auto& t : wrt) v.push_back(randn(t.shape(), {.dtype = DType::f64}));
  auto s_of = [&](bool create_graph) {
    Tensor loss = (f(inputs) * w).sum();
    std::vector<Tensor> g = autograd::grad({loss}, wrt, {}, {.create_graph = create_graph, .allow_unused = true});
    Tensor s = zeros({}, {.dtype = DType::f64});
    for (size_t k = 0; k < g.size(); ++k)
      if (g[k].defined()) s = s + (g[k] * v[k]).sum();
    return s;
  };
  Tensor s = s_of(true);
  if (!s.requires_grad()) return "gradgradcheck: the first gradient has no graph (create_graph was cut)";
  std::vector<Tensor> vars = wrt;
  vars.push_back(w);
  std::vector<Tensor> analytic = autograd::grad({s}, vars, {}, {.allow_unused = true});
  for (size_t i = 0; i < vars.size(); ++i) {
    Tensor x = vars[i];
    if (x.contiguous().impl() != x.impl()) return "gradgradcheck: inputs must be contiguous (make views inside f)";
    double* p = x.data<double>();
    std::vector<double> a = analytic[i].defined() ? analytic[i].to_vector<double>()
                                                  : std::vector<double>(size_t(x.numel()), 0.0);
    for (int64_t j = 0; j < x.numel(); ++j) {
      double orig = p[j];
      p[j] = orig + eps;
      double up = s_of(false).item<double>();
      p[j] = orig - eps;
      double down = s_of(false).item<double>();
      p[j] = orig;
      double numeric = (up - down) / (2 * eps);
      if (std::abs(numeric - a[size_t(j)]) > atol + rtol * std::abs(numeric))
        return (i + 1 == vars.size() ? std::string("the incoming gradient") : "input " + std::to_string(i)) +
               " element " + std::to_string(j) + ": analytic " + std::to_string(a[size_t(j)]) + " vs numeric " +
               std::to_string(numeric);
    }
  }
  return "";
}

}  // namespace reel::test

#define CHECK_GRADIENTS(f, ...) CHECK(::reel::test::gradcheck(f, {__VA_ARGS__}) == "")
#define CHECK_SECOND_GRADIENTS(f, ...) CHECK(::reel::test::gradgradcheck(f, {__VA_ARGS__}) == "")
