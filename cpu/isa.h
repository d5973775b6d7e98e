// What the CPU's matrix kernels offer, as oneDNN dispatches them (ONEDNN_MAX_CPU_ISA
// caps it). Kept apart from dnnl_common.h so autocast can ask without oneDNN's headers.
#pragma once

namespace reel::cpu {

// bf16 products at bf16 speed: AVX512-BF16 (Zen 4/5, Cooper Lake on) or AMX (Sapphire
// Rapids on). Without either oneDNN's bf16 kernels convert in software and run slower
// than f32, so CPU autocast computes the products in f32 instead.
bool bf16_products_native();
// AMX tiles (brg:avx512_core_amx kernels)
bool amx_available();

}  // namespace reel::cpu
