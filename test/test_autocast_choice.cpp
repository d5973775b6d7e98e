// CPU autocast's choice of the products' form (CpuBf16Products, docs/amp.md): bf16 where
// the CPU runs bf16 products faster than f32 (AMX; AVX512-BF16 on AMD), f32 elsewhere, and
// the f32 form bit for bit reel's f32 step. The ctest autocast_bf16_choice_capped runs these
// with ONEDNN_MAX_CPU_ISA=AVX512_CORE_BF16: on an AMX machine, the AVX512-BF16-only class.
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <string>

#include <reel/autograd/autocast_products.h>
#include <reel/cpu/isa.h>

#include "gradcheck.h"
#include "low_precision_check.h"

using namespace reel;

namespace {

// The other autocast tests check bf16's kernels and semantics wherever the CPU has bf16
// instructions, so the test program runs with CpuBf16Products::native unless
// REEL_CPU_BF16_PRODUCTS says otherwise; the cases below set each choice themselves.
[[maybe_unused]] const bool g_native_for_tests = [] {
  if (!std::getenv("REEL_CPU_BF16_PRODUCTS")) set_cpu_autocast_bf16_products(CpuBf16Products::native);
  return true;
}();

struct ProductsSetting {
  CpuBf16Products before = cpu_autocast_bf16_products();
  explicit ProductsSetting(CpuBf16Products how) { set_cpu_autocast_bf16_products(how); }
  ~ProductsSetting() { set_cpu_autocast_bf16_products(before); }
};

bool amd_cpu() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("vendor_id", 0) == 0) return line.find("AuthenticAMD") != std::string::npos;
  return false;
}

bool same_bits(const Tensor& a, const Tensor& b) {
  if (a.dtype() != b.dtype() || !(a.shape() == b.shape())) return false;
  std::vector<float> x = a.to_vector<float>(), y = b.to_vector<float>();
  for (size_t i = 0; i < x.size(); ++i)
    if (!(x[i] == y[i] || (std::isnan(x[i]) && std::isnan(y[i])))) return false;
  return true;
}

// A small training step's products and gradients: linear, conv2d, matmul, a GRU.
struct Step {
  Tensor y, c, m, r, gw, gk;
};
Step run_step(bool amp) {
  manual_seed(21);
  Tensor x = randn({16, 24}), w = randn({12, 24}).requires_grad_(), b = randn({12});
  Tensor img = randn({2, 3, 10, 10}), k = randn({6, 3, 3, 3}).requires_grad_();
  nn::GRU gru(5, 7);
  Tensor seq = randn({4, 3, 5});
  Step s;
  {
    AutocastGuard guard({.enabled = amp});
    s.y = linear(x, w, b);
    s.c = conv2d(img, k, {}, {.padding = {1, 1}});
    s.m = matmul(x, w.t());
    s.r = gru(seq, Tensor()).output;
  }
  (s.y.to(DType::f32).sum() + s.c.to(DType::f32).sum()).backward();
  s.gw = w.grad(), s.gk = k.grad();
  return s;
}

}  // namespace

TEST_CASE("CPU autocast's automatic choice: bf16 products where they outrun f32, else f32 bit for bit",
          "[autocast][autocast_choice]") {
  ProductsSetting automatic(CpuBf16Products::automatic);
  const bool want_bf16 = cpu::amx_available() || (cpu::bf16_products_native() && amd_cpu());
  CHECK(cpu::bf16_products_faster() == want_bf16);
  INFO("this CPU: " << cpu::bf16_products_how());
  const Step f32 = run_step(false), amp = run_step(true);
  if (want_bf16) {
    CHECK(amp.y.dtype() == DType::bf16);
    CHECK(amp.c.dtype() == DType::bf16);
    CHECK(amp.m.dtype() == DType::bf16);
    CHECK(test::rel_error(amp.y, f32.y) < 1.6e-2);
  } else {
    // PyTorch's lists still hold (nothing of the f32 list is lowered); the products are
    // reel's f32 products, so the step is the f32 step
    CHECK(same_bits(amp.y, f32.y));
    CHECK(same_bits(amp.c, f32.c));
    CHECK(same_bits(amp.m, f32.m));
    CHECK(same_bits(amp.r, f32.r));
    CHECK(same_bits(amp.gw, f32.gw));
    CHECK(same_bits(amp.gk, f32.gk));
  }
  {
    AutocastGuard guard;
    CHECK(softmax(randn({3, 5}), 1).dtype() == DType::f32);
    // f16 autocast is not this choice's
    AutocastGuard half({.dtype = DType::f16});
    CHECK(linear(randn({4, 6}), randn({3, 6})).dtype() == DType::f16);
  }
}

TEST_CASE("CPU autocast's products: f32 always f32, native wherever bf16 instructions are",
          "[autocast][autocast_choice]") {
  const Step f32 = run_step(false);
  {
    ProductsSetting never(CpuBf16Products::f32);
    const Step amp = run_step(true);
    CHECK(same_bits(amp.y, f32.y));
    CHECK(same_bits(amp.c, f32.c));
    CHECK(same_bits(amp.r, f32.r));
    CHECK(same_bits(amp.gk, f32.gk));
  }
  {
    ProductsSetting native(CpuBf16Products::native);
    CHECK(cpu_autocast_bf16_products() == CpuBf16Products::native);
    const Step amp = run_step(true);
    CHECK((amp.y.dtype() == DType::bf16) == cpu::bf16_products_native());
    CHECK((amp.c.dtype() == DType::bf16) == cpu::bf16_products_native());
  }
}
