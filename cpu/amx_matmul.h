// The CPU's own AMX product for weight gradients (cpu/amx_matmul.cpp). Internal to cpu/.
#pragma once
#include <cstdint>

namespace reel::cpu {

// The longest K it takes: the batch of a weight gradient g^T x.
inline constexpr int64_t kAmxShortK = 256;

// c [M, N] (row stride ldc, f32) = a [M, K] (strides sam, sak; bf16 bits; row- or
// column-major reads are vectorised) x b [K, N] (row stride sbk, columns contiguous),
// accumulated in f32. False, with c untouched or partly written, where the CPU or the
// kernel cannot take it (no AMX, K past kAmxShortK, no memory): the caller computes it.
bool amx_short_k_matmul(float* c, int64_t ldc, const uint16_t* a, int64_t sam, int64_t sak, const uint16_t* b,
                        int64_t sbk, int64_t M, int64_t N, int64_t K);

}  // namespace reel::cpu
