// f16 and bf16 as compute dtypes on CUDA (tensor/low_precision_backend.h): the registered
// CUDA backend is CudaBackend behind the low-precision layer. Products run natively:
// cuBLASLt reads f16/bf16 operands and writes their dtype or f32 (f32 accumulation), and
// cuDNN convolves in one half dtype with f32 accumulation, so a gradient wanted in f32 (an
// f32 weight read as bf16 under autocast) is computed in the operands' dtype and converted.
// Unary and binary ops run in one pass where REEL_CUDA_HALF_ELEMENTWISE=native takes the call
// (half_elementwise.cu), with the bits of the staged path.
// Every other op computes in f32 on twins of its f16/bf16 tensors and rounds once.
#include "../tensor/low_precision_backend.h"

#include <atomic>
#include <cstdint>

#include "cuda.h"
#include "internal/backend.h"
#include "internal/context.h"
#include "internal/env_switch.h"
#include "internal/half_attention.h"
#include "internal/half_elementwise.h"
#include "internal/half_norm.h"

namespace reel::cuda {
namespace {

using low_precision::any_low;

// f16/bf16 attention: staged (the layer's f32 twins; the default) or cuDNN's fused kernels.
// The H200 measured cuDNN's at 0.17-0.29 of staged on SDPA at T = 1024 and 4096, but W12's
// step (T = 256) at 0.99 and 1.11 of staged (two runs, 2026-11-29): not the default yet
half_attention::Path half_attention_from_env(const char* value) {
  return half_attention::path_from_env(value, half_attention::Path::staged);
}
EnvSwitch<half_attention::Path> g_half_attention("REEL_CUDA_HALF_ATTENTION", half_attention_from_env,
                                                 half_attention::invalid_path_message, half_attention::Path::invalid);
std::atomic<uint64_t> g_cudnn_attention_calls{0};

// Whether f16/bf16 attention goes to cuDNN where it serves the call: REEL_CUDA_HALF_ATTENTION
// (or set_half_attention_path) says cudnn, which a build without the cuDNN frontend refuses.
bool cudnn_attention_chosen() {
  if (g_half_attention.get() != half_attention::Path::cudnn) return false;
#ifdef REEL_HAS_CUDNN_FRONTEND
  return true;
#else
  throw Error("scaled_dot_product_attention: REEL_CUDA_HALF_ATTENTION=cudnn, but this build of reel has no cuDNN "
              "frontend headers (run scripts/fetch-cudnn-frontend.sh, then configure and build again)");
#endif
}

bool aligned16(std::initializer_list<const Tensor*> ts) {
  for (const Tensor* t : ts)
    if (reinterpret_cast<uintptr_t>(t->data_ptr()) % 16 != 0) return false;
  return true;
}

// a and b of one half dtype: cuDNN and cuBLASLt take them as they are
bool same_half(const Tensor& a, const Tensor& b) {
  return is_low_precision(a.dtype()) && a.dtype() == b.dtype();
}

// cuDNN's fused attention, counted where it ran
bool cudnn_forward(Context& c, const Tensor& out, const Tensor& lse, const Tensor& q, const Tensor& k,
                   const Tensor& v, const AttentionParams& p) {
#ifdef REEL_HAS_CUDNN_FRONTEND
  if (!half_attention::cudnn_forward(c, out, lse, q, k, v, p)) return false;
  g_cudnn_attention_calls.fetch_add(1, std::memory_order_relaxed);
  return true;
#else
  (void)c, (void)out, (void)lse, (void)q, (void)k, (void)v, (void)p;
  return false;  // unreachable: cudnn_attention_chosen() refused the path
#endif
}
bool cudnn_backward(Context& c, const Tensor& gq, const Tensor& gk, const Tensor& gv, const Tensor& go,
                    const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out, const Tensor& lse,
                    const AttentionParams& p) {
#ifdef REEL_HAS_CUDNN_FRONTEND
  if (!half_attention::cudnn_backward(c, gq, gk, gv, go, q, k, v, out, lse, p)) return false;
  g_cudnn_attention_calls.fetch_add(1, std::memory_order_relaxed);
  return true;
#else
  (void)c, (void)gq, (void)gk, (void)gv, (void)go, (void)q, (void)k, (void)v, (void)out, (void)lse, (void)p;
  return false;
#endif
}

}  // namespace

class LowPrecisionCuda final : public LowPrecisionBackend<CudaBackend> {
 public:
  explicit LowPrecisionCuda(int device) : LowPrecisionBackend(device) {}

  void conv2d_forward(const Tensor& out, const Tensor& x, const Tensor& w, const Tensor& bias, const ConvParams& p,
                      bool relu) override {
    if (!any_low(out, x, w, bias) || !same_half(x, w))
      return LowPrecisionBackend::conv2d_forward(out, x, w, bias, p, relu);
    low_precision::Stage s(k);
    k.conv2d_forward(s.out_as(out, x.dtype()), x, w, bias, p, relu);
    s.finish();
  }
  void conv2d_backward_data(const Tensor& gx, const Tensor& gy, const Tensor& w, const ConvParams& p) override {
    if (!any_low(gx, gy, w) || !same_half(gy, w)) return LowPrecisionBackend::conv2d_backward_data(gx, gy, w, p);
    low_precision::Stage s(k);
    k.conv2d_backward_data(s.out_as(gx, gy.dtype()), gy, w, p);
    s.finish();
  }
  // gb is reduced from gy in f32 whatever its dtype (conv.cpp's bias_grad)
  void conv2d_backward_weight(const Tensor& gw, const Tensor& gb, const Tensor& gy, const Tensor& x,
                              const ConvParams& p) override {
    if (!any_low(gw, gb, gy, x) || !same_half(gy, x))
      return LowPrecisionBackend::conv2d_backward_weight(gw, gb, gy, x, p);
    low_precision::Stage s(k);
    k.conv2d_backward_weight(s.out_as(gw, gy.dtype()), gb, gy, x, p);
    s.finish();
  }

  // f16/bf16 attention: cuDNN's fused kernels where chosen and they serve the call (no mask,
  // heads of 8k up to 128, internal/half_attention.h), else the layer's f32 twins
  void attention_forward(const Tensor& out, const Tensor& lse, const Tensor& q, const Tensor& k_, const Tensor& v,
                         const Tensor& mask, const Tensor& mask_offsets, const AttentionParams& p) override {
    if (is_low_precision(q.dtype()) && cudnn_attention_chosen()) {
      k.expect_here("scaled_dot_product_attention", {&out, &lse, &q, &k_, &v, &mask, &mask_offsets});
      Context& c = k.ctx();
      const half_attention::Call call{q.dtype(), k_.dtype(), v.dtype(), out.dtype(), lse.dtype(),
                                      q.size(0), q.size(1), k_.size(1), q.size(2), v.size(2), mask.defined(),
                                      p.dropout_p, c.cc_major, aligned16({&out, &lse, &q, &k_, &v})};
      if (half_attention::refusal(call).empty() && cudnn_forward(c, out, lse, q, k_, v, p)) return;
    }
    LowPrecisionBackend::attention_forward(out, lse, q, k_, v, mask, mask_offsets, p);
  }
  void attention_backward(const Tensor& gq, const Tensor& gk, const Tensor& gv, const Tensor& go, const Tensor& q,
                          const Tensor& k_, const Tensor& v, const Tensor& out, const Tensor& lse, const Tensor& mask,
                          const Tensor& mask_offsets, const AttentionParams& p) override {
    if (is_low_precision(q.dtype()) && cudnn_attention_chosen()) {
      k.expect_here("scaled_dot_product_attention_backward",
                    {&gq, &gk, &gv, &go, &q, &k_, &v, &out, &lse, &mask, &mask_offsets});
      Context& c = k.ctx();
      const bool grads_of_q = gq.dtype() == q.dtype() && gk.dtype() == q.dtype() && gv.dtype() == q.dtype() &&
                              go.dtype() == q.dtype();
      const half_attention::Call call{q.dtype(), k_.dtype(), v.dtype(), grads_of_q ? out.dtype() : DType::f32,
                                      lse.dtype(), q.size(0), q.size(1), k_.size(1), q.size(2), v.size(2),
                                      mask.defined(), p.dropout_p, c.cc_major,
                                      aligned16({&gq, &gk, &gv, &go, &q, &k_, &v, &out, &lse})};
      if (half_attention::refusal(call).empty() && cudnn_backward(c, gq, gk, gv, go, q, k_, v, out, lse, p)) return;
    }
    LowPrecisionBackend::attention_backward(gq, gk, gv, go, q, k_, v, out, lse, mask, mask_offsets, p);
  }
  bool attention_low_precision(DType dtype) const override {
    return is_low_precision(dtype) && cudnn_attention_chosen();
  }

 protected:
  // matmul: cuBLASLt's f16/bf16 operands with an output of their dtype or f32; a bias of
  // another dtype is added after the product, by the layer's kernels
  bool native_product(const Tensor& out, const Tensor& a, const Tensor& b, const Tensor&) const override {
    return same_half(a, b) && (out.dtype() == a.dtype() || out.dtype() == DType::f32);
  }
  // f16/bf16 elementwise ops in one pass where REEL_CUDA_HALF_ELEMENTWISE=native takes the call
  // (internal/half_elementwise.h: counted there); false: the layer stages it
  bool native_unary(UnaryOp op, const Tensor& out, const Tensor& x, double a, double b) override {
    return half_elementwise::unary(k, op, out, x, a, b);
  }
  bool native_binary(BinaryOp op, const Tensor& out, const Tensor& a, const Tensor& b) override {
    return half_elementwise::binary(k, op, out, a, b);
  }
  // autocast's mixed batch norm of NHWC halves: cuDNN's, where REEL_CUDA_HALF_NORM=cudnn and
  // its rule takes the call (internal/half_norm.h), else the layer's f32 twins
  bool native_batch_norm_forward(const Tensor& out, const Tensor& save_mean, const Tensor& save_invstd,
                                 std::span<const Tensor> xs, const Tensor& weight, const Tensor& bias,
                                 const Tensor& running_mean, const Tensor& running_var, bool training, double momentum,
                                 double eps, bool relu) override {
    return half_norm::forward(k, out, save_mean, save_invstd, xs, weight, bias, running_mean, running_var, training,
                              momentum, eps, relu);
  }
  bool native_batch_norm_backward(std::span<const Tensor> gxs, const Tensor& gw, const Tensor& gb, const Tensor& gy,
                                  std::span<const Tensor> xs, const Tensor& y, const Tensor& weight,
                                  const Tensor& save_mean, const Tensor& save_invstd, bool training) override {
    return half_norm::backward(k, gxs, gw, gb, gy, xs, y, weight, save_mean, save_invstd, training);
  }
};

void set_half_attention_path(HalfAttentionPath path) {
  if (path == HalfAttentionPath::cudnn) {
#ifndef REEL_HAS_CUDNN_FRONTEND
    throw Error("cuda::set_half_attention_path(cudnn): this build of reel has no cuDNN frontend headers (run "
                "scripts/fetch-cudnn-frontend.sh, then configure and build again)");
#endif
  }
  g_half_attention.set(path == HalfAttentionPath::cudnn ? half_attention::Path::cudnn : half_attention::Path::staged);
}
HalfAttentionPath half_attention_path() {
  return cudnn_attention_chosen() ? HalfAttentionPath::cudnn : HalfAttentionPath::staged;
}
uint64_t cudnn_attention_calls() { return g_cudnn_attention_calls.load(std::memory_order_relaxed); }

Backend* make_backend(int device) { return new LowPrecisionCuda(device); }
CudaBackend& inner_backend(Backend& be) { return static_cast<LowPrecisionCuda&>(be).inner(); }

}  // namespace reel::cuda
