// The f32 attention kernels on AVX-512 (cpu/attention_flash.cpp), the CPU backend's
// fast path; cpu/attention.cpp keeps the portable kernel (f64, CPUs without AVX-512).
// Arguments as Backend::attention_forward / attention_backward; run where vector_isa() is
// avx512 (tensor/parallel.h: set_vector_isa(baseline) selects the portable kernel). Internal to cpu/.
#pragma once
#include "../tensor/backend.h"

namespace reel::cpu {

void attention_flash_forward(const Tensor& out, const Tensor& lse, const Tensor& q, const Tensor& k, const Tensor& v,
                             const Tensor& mask, const Tensor& mask_offsets, const AttentionParams& p);

void attention_flash_backward(const Tensor& gq, const Tensor& gk, const Tensor& gv, const Tensor& go, const Tensor& q,
                              const Tensor& k, const Tensor& v, const Tensor& out, const Tensor& lse,
                              const Tensor& mask, const Tensor& mask_offsets, const AttentionParams& p);

}  // namespace reel::cpu
