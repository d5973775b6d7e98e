// f16 and bf16 as compute dtypes on CUDA (tensor/low_precision_backend.h): the registered
// CUDA backend is CudaBackend behind the low-precision layer. Products run natively:
// cuBLASLt reads f16/bf16 operands and writes their dtype or f32 (f32 accumulation), and
// cuDNN convolves in one half dtype with f32 accumulation, so a gradient wanted in f32 (an
// f32 weight read as bf16 under autocast) is computed in the operands' dtype and converted.
// Every other op computes in f32 on twins of its f16/bf16 tensors and rounds once.
#include "../tensor/low_precision_backend.h"

#include "internal/backend.h"

namespace reel::cuda {
namespace {

using low_precision::any_low;

// a and b of one half dtype: cuDNN and cuBLASLt take them as they are
bool same_half(const Tensor& a, const Tensor& b) {
  return is_low_precision(a.dtype()) && a.dtype() == b.dtype();
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

 protected:
  // matmul: cuBLASLt's f16/bf16 operands with an output of their dtype or f32; a bias of
  // another dtype is added after the product, by the layer's kernels
  bool native_product(const Tensor& out, const Tensor& a, const Tensor& b, const Tensor&) const override {
    return same_half(a, b) && (out.dtype() == a.dtype() || out.dtype() == DType::f32);
  }
};

Backend* make_backend(int device) { return new LowPrecisionCuda(device); }
CudaBackend& inner_backend(Backend& be) { return static_cast<LowPrecisionCuda&>(be).inner(); }

}  // namespace reel::cuda
