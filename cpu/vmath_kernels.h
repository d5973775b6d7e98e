// The activations' vector kernels over contiguous f32 arrays (cpu/vmath_kernels.cpp):
// one pass, no threads (the callers split the work). Built twice, for the build's
// baseline ISA (AVX2 with x86-64-v3, or whatever the target compiles to elsewhere) and
// for AVX-512 (x86-64-v4), chosen per call by reel::vector_isa(). Internal to cpu/.
#pragma once
#include <cstdint>

#include "../tensor/backend.h"

namespace reel::cpu {

// Whether `op` has a kernel: exp, log, tanh, sigmoid, gelu, gelu_tanh, erf, softplus,
// silu forward; gelu, gelu_tanh, erf, softplus, silu backward.
bool has_vector_kernel(UnaryOp op, bool backward);
// out[i] = f(x[i]; a, b); stream: write `out` with streaming stores (a large output, cpu/stream_store.h)
void vector_unary(UnaryOp op, float* out, const float* x, int64_t n, float a, float b, bool stream);
// out[i] = g[i] f'(x[i]; a, b)
void vector_unary_backward(UnaryOp op, float* out, const float* g, const float* x, int64_t n, float a, float b,
                           bool stream);

}  // namespace reel::cpu
