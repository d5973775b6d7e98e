// Large f32 gradients from bf16 products with a short inner dim (the batch): the CPU
// computes them with its own AMX kernel where the CPU has AMX (cpu/amx_matmul.cpp),
// else oneDNN. Either way they must equal the f32 product of the same bf16 values up
// to f32 summation order, with ragged edges (M, N not multiples of 32, K not of 32)
// and both layouts of the left operand (g^T for the weight, g for the input). A CPU
// without native bf16 products runs them in f32 (autocast's fallback): the same checks.
#include <reel/cpu/isa.h>

#include <cmath>

#include "gradcheck.h"

using namespace reel;

namespace {

// the products' dtype under bf16 autocast on this CPU
DType product_dtype() { return cpu::bf16_products_native() ? DType::bf16 : DType::f32; }

// largest |a - b| over largest |b|
double rel_diff(const Tensor& a, const Tensor& b) {
  std::vector<float> x = a.to_vector<float>(), y = b.to_vector<float>();
  REQUIRE(x.size() == y.size());
  double worst = 0, scale = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    worst = std::max(worst, std::fabs(double(x[i]) - double(y[i])));
    scale = std::max(scale, std::fabs(double(y[i])));
  }
  return worst / scale;
}

}  // namespace

TEST_CASE("bf16 linear gradients with a short batch match f32 on the rounded values", "[autocast][bf16]") {
  struct Case {
    int64_t batch, in, out;
  };
  // dW [out, in] = g^T x: M = out, N = in, K = batch; dX [batch, in] = g W: K = out
  for (Case c : {Case{100, 4001, 300}, Case{128, 8192, 129}, Case{64, 300, 4000}, Case{256, 4100, 260}}) {
    INFO("batch " << c.batch << " in " << c.in << " out " << c.out);
    manual_seed(7);
    Tensor x = randn({c.batch, c.in}).requires_grad_();
    Tensor w = (randn({c.out, c.in}) * 0.05).requires_grad_();
    Tensor g = randn({c.batch, c.out}).to(DType::bf16).to(product_dtype());
    Tensor y;
    {
      AutocastGuard amp({.dtype = DType::bf16});
      y = linear(x, w);
    }
    REQUIRE(y.dtype() == product_dtype());
    y.backward(g);
    REQUIRE(w.grad().dtype() == DType::f32);
    REQUIRE(x.grad().dtype() == DType::f32);
    Tensor gf = g.to(DType::f32);
    Tensor xr = x.detach().to(product_dtype()).to(DType::f32), wr = w.detach().to(product_dtype()).to(DType::f32);
    Tensor dw = matmul(gf.t(), xr), dx = matmul(gf, wr);
    CHECK(rel_diff(w.grad(), dw) < 1e-5);
    CHECK(rel_diff(x.grad(), dx) < 1e-5);
    // the last row and column (the ragged edges) exactly as the reference computes them, to rounding
    CHECK(rel_diff(w.grad().select(0, c.out - 1), dw.select(0, c.out - 1)) < 1e-5);
    CHECK(rel_diff(w.grad().select(1, c.in - 1), dw.select(1, c.in - 1)) < 1e-5);
  }
}

TEST_CASE("a weight gradient accumulates onto the one already there", "[autocast][bf16]") {
  manual_seed(8);
  Tensor x = randn({64, 5000});
  Tensor w = (randn({256, 5000}) * 0.05).requires_grad_();
  Tensor g = randn({64, 256}).to(DType::bf16).to(product_dtype());
  for (int pass = 0; pass < 2; ++pass) {
    AutocastGuard amp({.dtype = DType::bf16});
    linear(x, w).backward(g);
  }
  Tensor once = matmul(g.to(DType::f32).t(), x.to(product_dtype()).to(DType::f32));
  CHECK(rel_diff(w.grad(), once * 2.0) < 1e-5);
}
