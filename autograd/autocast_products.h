// How CPU autocast to bf16 computes its products (matmul, bmm, linear, the convolutions,
// the recurrent layers), for the whole process: bf16 only where the CPU multiplies bf16
// faster than f32 (docs/amp.md, "Which CPUs compute bf16 products in bf16"). Where the
// products stay f32 every op of an autocast scope computes in f32 (the ops of the f32
// list do anyway, the others follow their inputs): bf16 then buys nothing and costs
// nothing. The first autocast product says once, on stderr, what was chosen and why.
//
//   reel::set_cpu_autocast_bf16_products(reel::CpuBf16Products::native);  // the old rule
#pragma once
#include "../tensor/tensor.h"

namespace reel {

enum class CpuBf16Products {
  automatic,  // bf16 where it is faster than f32 (AMX; AVX512-BF16 at twice f32's rate:
              // AMD Zen 4/5), f32 elsewhere (Intel without AMX; no bf16 instructions)
  native,     // bf16 wherever the CPU has bf16 instructions (AVX512-BF16 or AMX)
  f32,        // always f32
};
// The initial setting is automatic, or REEL_CPU_BF16_PRODUCTS=automatic|native|f32.
void set_cpu_autocast_bf16_products(CpuBf16Products how);
CpuBf16Products cpu_autocast_bf16_products();

// For op definitions (autograd/): whether, autocast being active for t, its products
// compute in the autocast dtype now (false where they stay f32).
bool autocast_products_low(const Tensor& t);

}  // namespace reel
