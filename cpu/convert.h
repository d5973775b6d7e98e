// f16/bf16 on the CPU: the vector conversions to and from f32, and the elementwise ops
// that run on bf16 data directly (no f32 twin): they round once, as the f32 kernel on
// converted inputs would, so both paths give the same bits. Internal to cpu/.
#pragma once
#include <cstring>
#include <span>

#include "../tensor/backend.h"

namespace reel::cpu {

inline float bf16_to_f32(uint16_t b) {
  uint32_t u = uint32_t(b) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
// round to nearest even; every NaN becomes the quiet NaN 0x7fc0 (as BFloat16(float))
inline uint16_t f32_to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  uint32_t r = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
  return (u & 0x7fffffffu) > 0x7f800000u ? uint16_t(0x7fc0) : uint16_t(r);
}

// Whether a and b are one flat array each, element i of one at the same index as in the
// other: both contiguous, or laid out alike in another dense order (channels-last).
bool contiguous_same(const Tensor& a, const Tensor& b);
// dst = src for tensors of one shape and one dense layout (contiguous, or alike in another
// order: channels-last) between f32 and f16/bf16 (either way); false otherwise.
bool convert_contiguous(const Tensor& dst, const Tensor& src);
// o[0, n) = x[0, n) rounded to `to` (f16 or bf16) as convert_contiguous rounds, on this
// thread; `stream`: bf16 stores bypass the cache (an output too large to stay there),
// weakly ordered: the caller runs _mm_sfence before the result is read (one fence per
// pass, not per span: a fence waits for the stores in flight to drain).
void round_span(DType to, uint16_t* o, const float* x, int64_t n, bool stream);
// out = f(x) for the ops with a bf16 kernel (relu), operands laid out alike; false for the others.
bool lowp_unary(UnaryOp op, const Tensor& out, const Tensor& x, double a, double b);
// out = f(a, b) for bf16 operands of one shape and one dense layout (add, sub, mul, add_relu,
// relu_backward), and bf16 a times f32 b into bf16 (rounded once); false otherwise.
bool lowp_binary(BinaryOp op, const Tensor& out, const Tensor& a, const Tensor& b);
// Max pooling of bf16 x whose channels are its contiguous dim (channels-last), out and
// indices likewise (cpu/pool_channels_last.cpp); false for other operands.
bool lowp_max_pool2d_forward(const Tensor& out, const Tensor& indices, const Tensor& x, const PoolParams& p);
// Its gradient: gx (channels-last bf16) from gy (bf16, any strides) and the saved indices.
bool lowp_max_pool2d_backward(const Tensor& gx, const Tensor& gy, const Tensor& indices, const PoolParams& p);
// Average pooling of channels-last bf16 x into channels-last out, and its gradient into
// channels-last gx (gy any strides); false for other operands.
bool lowp_avg_pool2d_forward(const Tensor& out, const Tensor& x, const PoolParams& p);
bool lowp_avg_pool2d_backward(const Tensor& gx, const Tensor& gy, const PoolParams& p);
// Dropout's forward in one pass (tensor/backend.h's dropout_forward) for f32 or bf16 x and
// y with an f32 mask, all three contiguous or all channels-last; false for other operands
// (cpu/dropout.cpp). An undefined mask: y alone (Backend::dropout_apply).
bool dropout_one_pass(const Tensor& y, const Tensor& mask, const Tensor& x, double p, uint64_t seed,
                      uint64_t offset);
// Batch norm (relu: and relu) of bf16 channels-last pieces joined along channels, with
// f32 parameters and statistics, into bf16 channels-last out (cpu/norm_channels_last.cpp);
// false for other operands. Its gradient likewise: y defined for the relu form.
bool lowp_batch_norm_forward(const Tensor& out, const Tensor& save_mean, const Tensor& save_invstd,
                             std::span<const Tensor> xs, const Tensor& weight, const Tensor& bias,
                             const Tensor& running_mean, const Tensor& running_var, bool training, double momentum,
                             double eps, bool relu);
bool lowp_batch_norm_backward(std::span<const Tensor> gxs, const Tensor& gw, const Tensor& gb, const Tensor& gy,
                              std::span<const Tensor> xs, const Tensor& y, const Tensor& weight,
                              const Tensor& save_mean, const Tensor& save_invstd, bool training);

}  // namespace reel::cpu
