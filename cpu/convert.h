// f16/bf16 on the CPU: the vector conversions to and from f32, and the elementwise ops
// that run on bf16 data directly (no f32 twin): they round once, as the f32 kernel on
// converted inputs would, so both paths give the same bits. Internal to cpu/.
#pragma once
#include "../tensor/backend.h"

namespace reel::cpu {

// dst = src for contiguous tensors of one shape between f32 and f16/bf16 (either way);
// false when the pair is not one of those.
bool convert_contiguous(const Tensor& dst, const Tensor& src);
// o[0, n) = x[0, n) rounded to `to` (f16 or bf16) as convert_contiguous rounds, on this
// thread; `stream`: bf16 stores bypass the cache (an output too large to stay there),
// weakly ordered: the caller runs _mm_sfence before the result is read (one fence per
// pass, not per span: a fence waits for the stores in flight to drain).
void round_span(DType to, uint16_t* o, const float* x, int64_t n, bool stream);
// out = f(x) for the ops with a bf16 kernel (relu); false for the others.
bool lowp_unary(UnaryOp op, const Tensor& out, const Tensor& x, double a, double b);
// out = f(a, b) for contiguous bf16 operands of one shape (add, sub, mul, relu_backward); false otherwise.
bool lowp_binary(BinaryOp op, const Tensor& out, const Tensor& a, const Tensor& b);

}  // namespace reel::cpu
