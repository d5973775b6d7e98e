// The activations (gelu exact and tanh, erf, silu, mish, hardswish, softplus, elu,
// leaky_relu) and their modules: values and gradients against PyTorch 1.13 on the table
// test/reference/activations.py wrote, f64 finite-difference gradient checks (first and
// second order), options and errors.
#include <cmath>
#include <string>

#include "gradcheck.h"

using namespace reel;
using reel::test::input;

namespace {

struct TorchCase {
  const char* op;
  double a, b;
  std::vector<double> x, y, dy, y32, dy32;
};
const std::vector<TorchCase> kTorch = {
#include "reference/activations_torch.inc"
};

Tensor apply(const std::string& op, const Tensor& x, double a, double b) {
  if (op == "gelu") return gelu(x);
  if (op == "gelu_tanh") return gelu(x, "tanh");
  if (op == "erf") return erf(x);
  if (op == "silu") return silu(x);
  if (op == "mish") return mish(x);
  if (op == "hardswish") return hardswish(x);
  if (op == "softplus") return softplus(x, a, b);
  if (op == "elu") return elu(x, a);
  if (op == "leaky_relu") return leaky_relu(x, a);
  if (op == "exp") return exp(x);
  if (op == "log") return log(x);
  if (op == "tanh") return tanh(x);
  if (op == "sigmoid") return sigmoid(x);
  FAIL("no op " << op);
  return x;
}

// reel's f(x) and f'(x) (through backward) in dtype dt
std::pair<std::vector<double>, std::vector<double>> run(const TorchCase& c, DType dt) {
  Tensor x = from_vector(c.x).to(dt).requires_grad_();
  Tensor y = apply(c.op, x, c.a, c.b);
  y.sum().backward();
  return {y.to(DType::f64).to_vector<double>(), x.grad().to(DType::f64).to_vector<double>()};
}

bool close(double got, double want, double rtol, double atol) {
  if (std::isnan(want)) return std::isnan(got);
  if (std::isinf(want)) return got == want;
  return std::abs(got - want) <= atol + rtol * std::abs(want);
}

}  // namespace

TEST_CASE("activations match PyTorch 1.13 in f64, values and gradients", "[activation]") {
  REQUIRE(kTorch.size() >= 17);
  for (const TorchCase& c : kTorch) {
    auto [y, dy] = run(c, DType::f64);
    for (size_t i = 0; i < c.x.size(); ++i) {
      INFO(c.op << "(" << c.x[i] << "; " << c.a << ", " << c.b << ")");
      // 1e-15 absolute: PyTorch's f64 gelu is x (1 + erf(x / sqrt 2)) / 2, which cancels to 0
      // below x = -8 (and its gradient drops Phi(x) there); reel's erfc form keeps them
      CHECK(close(y[i], c.y[i], 1e-13, 1e-15));
      CHECK(close(dy[i], c.dy[i], 1e-12, 1e-15));
    }
  }
}

TEST_CASE("activations match PyTorch 1.13 in f32 within f32 rounding", "[activation]") {
  for (const TorchCase& c : kTorch) {
    auto [y, dy] = run(c, DType::f32);
    // the f64 truth: reel's f64, checked against PyTorch's above (whose f64 gelu cancels to 0 far left)
    auto [y64, dy64] = run(c, DType::f64);
    for (size_t i = 0; i < c.x.size(); ++i) {
      INFO(c.op << "(" << c.x[i] << "; " << c.a << ", " << c.b << ") = " << y[i] << ", f'(x) = " << dy[i]);
      double x32 = double(float(c.x[i]));
      if (x32 != c.x[i] && !std::isnan(c.x[i])) continue;  // 1e-3 and such: f32 rounds the input itself
      // against the f64 truth: a few f32 ulp (values below f32's normal range may flush to 0)
      CHECK(close(y[i], y64[i], 1e-6, 1.2e-38));
      CHECK(close(dy[i], dy64[i], 2e-6, 1e-7));
      // and against PyTorch's own f32 (its vectorised erf is good to about 1e-7 absolute)
      CHECK(close(y[i], c.y32[i], 1e-5, 1e-6));
      // PyTorch's f32 hardswish'(3) is 1.5 or 1 depending on whether 3 falls in its scalar tail
      if (std::string(c.op) != "hardswish" || c.x[i] != 3.0) CHECK(close(dy[i], c.dy32[i], 1e-5, 1e-6));
    }
  }
}

TEST_CASE("gelu is exact by default and the tanh approximation on request", "[activation]") {
  Tensor x = tensor({1.0}, {.dtype = DType::f64});
  CHECK(gelu(x).item<double>() == Approx(0.8413447460685429).epsilon(1e-14));
  CHECK(gelu(x, "tanh").item<double>() == Approx(0.8411919906082768).epsilon(1e-14));
  CHECK_THROWS_WITH(gelu(x, "erf"), Catch::Contains("gelu") && Catch::Contains("\"none\" or \"tanh\""));
  CHECK_THROWS_WITH(nn::GELU("exact"), Catch::Contains("GELU") && Catch::Contains("approximate"));
  CHECK(nn::GELU()(x).item<double>() == gelu(x).item<double>());
  CHECK(nn::GELU("tanh")(x).item<double>() == gelu(x, "tanh").item<double>());
  CHECK(nn::GELU("tanh").str() == "GELU(approximate='tanh')");
  CHECK(nn::GELU().str() == "GELU(approximate='none')");
}

TEST_CASE("activations: f64 gradients against finite differences", "[activation][grad]") {
  using V = std::vector<Tensor>;
  CHECK_GRADIENTS([](const V& v) { return gelu(v[0]); }, input({3, 4}, -4, 4));
  CHECK_GRADIENTS([](const V& v) { return gelu(v[0], "tanh"); }, input({3, 4}, -4, 4));
  CHECK_GRADIENTS([](const V& v) { return erf(v[0]); }, input({3, 4}, -3, 3));
  CHECK_GRADIENTS([](const V& v) { return silu(v[0]); }, input({3, 4}, -6, 6));
  CHECK_GRADIENTS([](const V& v) { return mish(v[0]); }, input({3, 4}, -6, 6));
  CHECK_GRADIENTS([](const V& v) { return hardswish(v[0]); }, input({3, 4}, -5, 5));
  CHECK_GRADIENTS([](const V& v) { return softplus(v[0]); }, input({3, 4}, -6, 6));
  CHECK_GRADIENTS([](const V& v) { return softplus(v[0], 2.0, 5.0); }, input({3, 4}, -6, 6));  // both sides of x = 2.5
  CHECK_GRADIENTS([](const V& v) { return elu(v[0], 0.7); }, input({3, 4}, -3, 3));
  CHECK_GRADIENTS([](const V& v) { return leaky_relu(v[0], 0.2); }, input({3, 4}, -3, 3));
  // f64 inputs through strided views take the element-by-element path
  CHECK_GRADIENTS([](const V& v) { return gelu(v[0].t()); }, input({4, 3}, -3, 3));
}

TEST_CASE("activations are twice differentiable (create_graph)", "[activation][grad][grad2]") {
  using V = std::vector<Tensor>;
  CHECK_SECOND_GRADIENTS([](const V& v) { return gelu(v[0]); }, input({2, 3}, -3, 3));
  CHECK_SECOND_GRADIENTS([](const V& v) { return gelu(v[0], "tanh"); }, input({2, 3}, -3, 3));
  CHECK_SECOND_GRADIENTS([](const V& v) { return erf(v[0]); }, input({2, 3}, -2, 2));
  CHECK_SECOND_GRADIENTS([](const V& v) { return silu(v[0]); }, input({2, 3}, -4, 4));
  CHECK_SECOND_GRADIENTS([](const V& v) { return mish(v[0]); }, input({2, 3}, -4, 4));
  CHECK_SECOND_GRADIENTS([](const V& v) { return square(hardswish(v[0])); }, input({2, 3}, -2.5, 2.5));
  CHECK_SECOND_GRADIENTS([](const V& v) { return softplus(v[0], 2.0, 20.0); }, input({2, 3}, -4, 4));
  CHECK_SECOND_GRADIENTS([](const V& v) { return elu(v[0], 0.7); }, input({2, 3}, -3, -0.1));
}

TEST_CASE("f32 activations agree between contiguous (vector) and strided (scalar) inputs", "[activation]") {
  Tensor base = (rand({64, 33}) * 16.0 - 8.0).detach();
  Tensor t = base.t();  // strided: the scalar path (cpu/vmath.h)
  // The contiguous path on an AVX-512 CPU evaluates other formulas (cpu/vmath_avx512.h);
  // both meet test_vmath's bounds (at most 5.5 ulp forward), so they agree within twice that.
  auto agree = [&](const char* op, double a, double b) {
    INFO(op << "(" << a << ", " << b << ")");
    Tensor strided = apply(op, t, a, b);
    Tensor dense = apply(op, t.contiguous(), a, b);
    std::vector<float> s = strided.contiguous().to_vector<float>(), d = dense.to_vector<float>();
    size_t bad = 0;
    for (size_t i = 0; i < s.size(); ++i) bad += !close(s[i], d[i], 11 * 0x1p-23, 1e-38);
    CHECK(bad == 0);
  };
  for (const char* op : {"gelu", "gelu_tanh", "erf", "silu", "softplus", "exp", "tanh", "sigmoid"}) agree(op, 1.0, 20.0);
  agree("softplus", 2.0, 1.0);  // beta != 1 divides; threshold inside the sampled range
  agree("softplus", 0.5, 3.0);
}

TEST_CASE("activation modules compute their ops and print as PyTorch does", "[activation][nn]") {
  Tensor x = tensor({{-2.0, -0.5, 0.0, 0.5, 3.0}}, {.dtype = DType::f64});
  auto same = [](const Tensor& a, const Tensor& b) { return a.to_vector<double>() == b.to_vector<double>(); };
  CHECK(same(nn::SiLU()(x), silu(x)));
  CHECK(same(nn::ELU(0.5)(x), elu(x, 0.5)));
  CHECK(same(nn::LeakyReLU(0.2)(x), leaky_relu(x, 0.2)));
  CHECK(same(nn::Softplus({.beta = 2, .threshold = 1})(x), softplus(x, 2, 1)));
  CHECK(same(nn::Mish()(x), mish(x)));
  CHECK(same(nn::Hardswish()(x), hardswish(x)));
  CHECK(same(nn::Softmax(1)(x), softmax(x, 1)));
  CHECK(same(nn::Softmax(-1)(x), softmax(x, -1)));
  CHECK(nn::SiLU().str() == "SiLU()");
  CHECK(nn::ELU().str() == "ELU(alpha=1.0)");
  CHECK(nn::LeakyReLU().str() == "LeakyReLU(negative_slope=0.01)");
  CHECK(nn::Softplus().str() == "Softplus(beta=1, threshold=20)");
  CHECK(nn::Softmax(1).str() == "Softmax(dim=1)");
  CHECK(nn::Hardswish().str() == "Hardswish()");
  // in a Sequential, with gradients
  nn::Sequential net{nn::Linear(5, 3), nn::Mish(), nn::Linear(3, 4), nn::Softmax(1)};
  Tensor y = net(x.to(DType::f32));
  CHECK(y.sum().item<float>() == Approx(1.0f));
  y.select(1, 0).sum().backward();
  CHECK(net.parameters()[0].grad().defined());
}

TEST_CASE("activations of integer tensors compute in f32", "[activation]") {
  Tensor i = tensor({-1.0, 0.0, 2.0}).to(DType::i64);
  CHECK(silu(i).dtype() == DType::f32);
  CHECK(erf(i).to_vector<float>()[2] == Approx(std::erf(2.0)));
  CHECK(softplus(tensor({30.0, -30.0})).to_vector<float>()[0] == 30.0f);  // above the threshold: x itself
}
