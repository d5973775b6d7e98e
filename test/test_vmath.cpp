// The f32 vector math behind exp, log, tanh, sigmoid, gelu (exact and tanh), erf,
// softplus and silu, forward and backward: error in ulp against libm in f64 over dense
// sweeps of inputs (every binade, and a fine linear grid where the functions bend), on
// each vector ISA this CPU has (AVX-512 and the build's baseline), plus inf and NaN.
#include <cfloat>
#include <cmath>
#include <cstring>
#include <functional>
#include <string>

#include "gradcheck.h"

using namespace reel;

namespace {

constexpr double kSqrt1_2 = 0.70710678118654752440, kInvSqrt2Pi = 0.39894228040143267794;
double max_diff_f32(const Tensor& a, const Tensor& b) { return sub(a, b).abs().max().item<double>(); }
double sigmoid_ref(double x) { return 1 / (1 + std::exp(-x)); }
double gelu_tanh_u2(double x) { return 2 * 0.7978845608028654 * (x + 0.044715 * x * x * x); }

uint32_t bits(float x) {
  uint32_t b;
  std::memcpy(&b, &x, 4);
  return b;
}
float from_bits(uint32_t b) {
  float x;
  std::memcpy(&x, &b, 4);
  return x;
}

// inputs in [lo, hi]: about 2^20 points on a linear grid plus 2^19 per sign spread over
// every binade (from the smallest subnormal) by stepping the bit patterns
std::vector<float> sweep(float lo, float hi) {
  std::vector<float> v;
  const int n = 1 << 20;
  for (int i = 0; i <= n; ++i) v.push_back(lo + (hi - lo) * float(double(i) / n));
  auto binades = [&](float top, float sign) {
    uint32_t end = bits(top), step = std::max<uint32_t>(1, end / (1 << 19));
    for (uint32_t b = 1; b <= end; b += step) v.push_back(sign * from_bits(b));
  };
  if (hi > 0) binades(hi, 1.0f);
  if (lo < 0) binades(-lo, -1.0f);
  return v;
}

struct Worst {
  double ulp = 0;
  float x = 0, got = 0;
  double want = 0;
};

// error of got against want in units of the last place at max(|want|, scale). Results
// below 2^-120 (within 64x of the smallest normal float) pass with an absolute error
// up to 2^-140: there the intermediates (e^x near 1e-38) are subnormal and carry fewer bits.
double ulp_error(float got, double want, double scale) {
  if (std::isnan(want)) return std::isnan(got) ? 0 : 1e30;
  if (std::abs(want) > FLT_MAX) return got == float(want) ? 0 : 1e30;
  if (std::isnan(got) || std::isinf(got)) return 1e30;
  double m = std::max(std::abs(want), scale);
  if (m < 0x1p-120) return std::abs(got - want) <= 0x1p-140 ? 0 : 1e30;
  int e;
  std::frexp(m, &e);
  return std::abs(double(got) - want) / std::ldexp(1.0, e - 24);
}

struct Fn {
  const char* name;
  float lo, hi;
  std::function<Tensor(const Tensor&)> op;         // forward: f(x); backward: d sum(f(x) g) / dx
  std::function<double(double)> ref, scale;  // scale: size of the terms a gradient sums (cancellation)
  double bound;                              // ulp
  bool backward = false;
};

Worst measure(const Fn& f) {
  std::vector<float> xs = sweep(f.lo, f.hi);
  Tensor x = from_vector(xs);
  std::vector<float> got;
  if (f.backward) {
    Tensor xg = x.detach().requires_grad_();
    f.op(xg).sum().backward();  // g = 1: the kernel's product with g is exact
    got = xg.grad().to_vector<float>();
  } else {
    got = f.op(x).to_vector<float>();
  }
  Worst w;
  for (size_t i = 0; i < xs.size(); ++i) {
    double want = f.ref(double(xs[i]));
    double e = ulp_error(got[i], want, f.scale ? f.scale(double(xs[i])) : 0.0);
    if (e > w.ulp) w = {e, xs[i], got[i], want};
  }
  return w;
}

std::vector<Fn> functions() {
  auto sp = [](double x) { return x > 20 ? x : std::log1p(std::exp(x)); };
  return {
      {"exp", -104, 89, [](const Tensor& x) { return exp(x); }, [](double x) { return std::exp(x); }, {}, 1.5},
      {"log", 0, FLT_MAX, [](const Tensor& x) { return log(x); }, [](double x) { return std::log(x); }, {}, 1.5},
      {"tanh", -20, 20, [](const Tensor& x) { return tanh(x); }, [](double x) { return std::tanh(x); }, {}, 2},
      {"sigmoid", -110, 40, [](const Tensor& x) { return sigmoid(x); }, sigmoid_ref, {}, 3},
      {"erf", -6, 6, [](const Tensor& x) { return erf(x); }, [](double x) { return std::erf(x); }, {}, 3},
      {"gelu", -20, 20, [](const Tensor& x) { return gelu(x); },
       [](double x) { return 0.5 * x * std::erfc(-x * kSqrt1_2); }, {}, 5.5},
      {"gelu_tanh", -20, 20, [](const Tensor& x) { return gelu(x, "tanh"); },
       [](double x) { return x * sigmoid_ref(gelu_tanh_u2(x)); }, {}, 4.5},
      {"softplus", -100, 30, [](const Tensor& x) { return softplus(x); }, sp, {}, 3.5},
      {"silu", -100, 100, [](const Tensor& x) { return silu(x); }, [](double x) { return x * sigmoid_ref(x); }, {},
       4},
      // gradients: f'(x), through backward
      {"erf'", -10, 10, [](const Tensor& x) { return erf(x); },
       [](double x) { return 1.1283791670955126 * std::exp(-x * x); }, {}, 3.5, true},
      {"gelu'", -20, 20, [](const Tensor& x) { return gelu(x); },
       [](double x) { return 0.5 * std::erfc(-x * kSqrt1_2) + x * kInvSqrt2Pi * std::exp(-0.5 * x * x); },
       [](double x) { return 0.5 * std::erfc(-x * kSqrt1_2) + std::abs(x) * kInvSqrt2Pi * std::exp(-0.5 * x * x); },
       5, true},
      {"gelu_tanh'", -20, 20, [](const Tensor& x) { return gelu(x, "tanh"); },
       [](double x) {
         double s = sigmoid_ref(gelu_tanh_u2(x));
         return s + x * s * (1 - s) * 2 * 0.7978845608028654 * (1 + 3 * 0.044715 * x * x);
       },
       [](double x) {
         double s = sigmoid_ref(gelu_tanh_u2(x));
         return s + std::abs(x * s * (1 - s) * 2 * 0.7978845608028654 * (1 + 3 * 0.044715 * x * x));
       },
       6.5, true},
      {"softplus'", -100, 30, [](const Tensor& x) { return softplus(x); },
       [](double x) { return x > 20 ? 1.0 : sigmoid_ref(x); }, {}, 3.5, true},
      {"silu'", -100, 100, [](const Tensor& x) { return silu(x); },
       [](double x) { return sigmoid_ref(x) * (1 + x * (1 - sigmoid_ref(x))); },
       [](double x) { return sigmoid_ref(x) + std::abs(x * sigmoid_ref(x) * (1 - sigmoid_ref(x))); }, 4.5, true},
  };
}

// runs body once per vector ISA this CPU has, restoring the default after
void for_each_isa(const std::function<void(const char*)>& body) {
  VectorIsa before = vector_isa();
  set_vector_isa(VectorIsa::baseline);
  body("baseline");
  set_vector_isa(VectorIsa::avx512);
  if (vector_isa() == VectorIsa::avx512) body("avx512");
  else WARN("no AVX-512 on this CPU: its kernels are not tested here");
  set_vector_isa(before);
}

}  // namespace

TEST_CASE("f32 transcendentals are within a few ulp of f64 over dense sweeps", "[vmath]") {
  set_flush_subnormals(false);  // gradients are computed in a backward pass, which would flush them
  for_each_isa([](const char* isa) {
    for (const Fn& f : functions()) {
      Worst w = measure(f);
      INFO(isa << " " << f.name << ": worst " << w.ulp << " ulp at x = " << w.x << " (" << w.got << " against "
               << w.want << ")");
      CHECK(w.ulp <= f.bound);
    }
  });
  set_flush_subnormals(true);
}

TEST_CASE("f32 transcendentals follow IEEE at inf and NaN as PyTorch does", "[vmath]") {
  const float inf = INFINITY, nan = NAN;
  for_each_isa([&](const char* isa) {
    INFO(isa);
    // 40 elements: whole vectors and a remainder on every ISA
    auto at = [](const Tensor& y, int i) { return y.to_vector<float>()[size_t(i)]; };
    std::vector<float> v(40, 0.5f);
    v[0] = inf, v[1] = -inf, v[2] = nan, v[3] = 0.0f, v[4] = -0.0f, v[5] = 89.0f, v[6] = -1.0f;
    Tensor x = from_vector(v);
    CHECK(at(exp(x), 0) == inf);
    CHECK(at(exp(x), 1) == 0);
    CHECK(std::isnan(at(exp(x), 2)));
    CHECK(at(exp(x), 5) == inf);
    CHECK(at(log(x), 0) == inf);
    CHECK(std::isnan(at(log(x), 1)));
    CHECK(at(log(x), 3) == -inf);
    CHECK(at(log(x), 4) == -inf);
    CHECK(std::isnan(at(log(x), 6)));
    CHECK(at(tanh(x), 0) == 1);
    CHECK(at(tanh(x), 1) == -1);
    CHECK(at(sigmoid(x), 0) == 1);
    CHECK(at(sigmoid(x), 1) == 0);
    CHECK(at(erf(x), 0) == 1);
    CHECK(at(erf(x), 1) == -1);
    CHECK(at(gelu(x), 0) == inf);
    CHECK(at(gelu(x, "tanh"), 0) == inf);
    CHECK(at(silu(x), 0) == inf);
    CHECK(at(softplus(x), 0) == inf);
    CHECK(at(softplus(x), 1) == 0);
    for (auto f : {+[](const Tensor& t) { return exp(t); }, +[](const Tensor& t) { return log(t); },
                   +[](const Tensor& t) { return tanh(t); }, +[](const Tensor& t) { return sigmoid(t); },
                   +[](const Tensor& t) { return erf(t); }, +[](const Tensor& t) { return gelu(t); },
                   +[](const Tensor& t) { return gelu(t, "tanh"); }, +[](const Tensor& t) { return silu(t); },
                   +[](const Tensor& t) { return softplus(t); }})
      CHECK(std::isnan(at(f(x), 2)));
  });
}

// The vector kernels step whole vectors, then a masked tail: every length from 1
// to 80 must give each element the value it has inside a long array.
TEST_CASE("vector kernels give the same values at every length (whole vectors, masked tails)", "[vmath]") {
  manual_seed(12);
  Tensor x = rand({96}) * 12.0 - 6.0, g = randn({96});
  Tensor full = gelu(x), full_exp = exp(x);
  Tensor leaf = x.detach().requires_grad_();
  Tensor full_grad = autograd::grad({silu(leaf)}, {leaf}, {g})[0];
  for (int64_t n = 1; n <= 80; ++n) {
    INFO("n = " << n);
    Tensor xn = x.narrow(0, 0, n).contiguous();
    CHECK(max_diff_f32(gelu(xn), full.narrow(0, 0, n)) == 0);
    CHECK(max_diff_f32(exp(xn), full_exp.narrow(0, 0, n)) == 0);
    Tensor l = xn.detach().requires_grad_();
    CHECK(max_diff_f32(autograd::grad({silu(l)}, {l}, {g.narrow(0, 0, n).contiguous()})[0], full_grad.narrow(0, 0, n)) == 0);
  }
}

// gelu's forward takes its exponential-free path for a vector unless a lane is below
// -5.99 (cpu/vmath_avx512.h's phi_common): each lane's value must not depend on its
// neighbours. Vectors here mix both kinds; each element is checked against itself alone.
TEST_CASE("gelu gives each element its own value whatever the rest of its vector holds", "[vmath]") {
  manual_seed(13);
  const int64_t n = 16 * 20;
  Tensor near = rand({n}) * 11.99 - 5.99, far = rand({n}) * -10.0 - 6.0;
  Tensor pick = rand({n}) < 0.2;  // about 3 far lanes in a vector
  Tensor x = where(pick, far, near);
  std::vector<float> xs = x.to_vector<float>(), ys = gelu(x).to_vector<float>();
  int far_lanes = 0, mixed_vectors = 0;
  for (int64_t v = 0; v < n / 16; ++v) {
    int k = 0;
    for (int64_t i = 16 * v; i < 16 * v + 16; ++i) k += xs[size_t(i)] < -5.99f;
    far_lanes += k;
    mixed_vectors += k > 0 && k < 16;
  }
  REQUIRE(mixed_vectors >= 10);
  for (int64_t i = 0; i < n; ++i) {
    INFO("x = " << xs[size_t(i)]);
    CHECK(gelu(x.narrow(0, i, 1).contiguous()).item<float>() == ys[size_t(i)]);
  }
  CHECK(far_lanes > 0);
}

// Outputs of 16 MiB and more are written with streaming stores (cpu/stream_store.h), 16
// results at a time: every element must equal the normal-store path's result,
// including the unaligned heads and the tails of each thread's chunk.
TEST_CASE("large outputs written with streaming stores equal the cached path", "[vmath][stream]") {
  const int64_t n = (int64_t(4) << 20) + 1237;  // > 16 MiB of f32, odd length
  manual_seed(11);
  Tensor x = rand({n}) * 8.0 - 4.0, g = randn({n});
  auto check_equal = [&](const char* what, const Tensor& big, auto small_of) {
    INFO(what);
    // pieces below the threshold, from offsets that are not 32-byte aligned
    for (int64_t start : {int64_t(0), int64_t(3), n / 2 + 5, n - 4100}) {
      Tensor piece = small_of(start, int64_t(4099));
      CHECK(max_diff_f32(big.narrow(0, start, 4099), piece) == 0);
    }
  };
  Tensor xs = x.narrow(0, 1, n - 1), gs = g.narrow(0, 1, n - 1);  // inputs off alignment too
  Tensor e = exp(xs);
  check_equal("exp", e, [&](int64_t s, int64_t m) { return exp(xs.narrow(0, s, m).contiguous()); });
  Tensor ge = gelu(xs);
  check_equal("gelu", ge, [&](int64_t s, int64_t m) { return gelu(xs.narrow(0, s, m).contiguous()); });
  Tensor p = mul(gs, xs);
  check_equal("mul", p, [&](int64_t s, int64_t m) { return mul(gs.narrow(0, s, m).contiguous(), xs.narrow(0, s, m).contiguous()); });
  Tensor leaf = xs.detach().requires_grad_();
  Tensor gx = autograd::grad({silu(leaf)}, {leaf}, {gs})[0];
  check_equal("silu backward", gx, [&](int64_t s, int64_t m) {
    Tensor l = xs.narrow(0, s, m).contiguous().requires_grad_();
    return autograd::grad({silu(l)}, {l}, {gs.narrow(0, s, m).contiguous()})[0];
  });
}
