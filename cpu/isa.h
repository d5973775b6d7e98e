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
// Whether bf16 products outrun f32 ones here, which is what CPU autocast asks: with AMX
// (tiles), or with AVX512-BF16 where its dot product (vdpbf16ps) runs at twice the f32
// FMA's rate: AMD's Zen 4 and 5 (oneDNN 404 against 209 GFLOP/s on 2 Zen 4 cores). On Intel
// without AMX (Cooper Lake, or a Sapphire/Emerald Rapids whose virtual machine hides AMX)
// vdpbf16ps issues on one port where f32 FMAs issue on two: the same FLOP rate, minus
// f32's Winograd and plus the conversions (W4's bf16 step 2.44x its f32 step there).
bool bf16_products_faster();
// Which of the above decided, in words for autocast's notice ("AMX", ...).
const char* bf16_products_how();

}  // namespace reel::cpu
