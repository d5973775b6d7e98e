// f16 and bf16 as compute dtypes on the CPU (tensor/low_precision_backend.h): the
// registered CPU backend is CpuBackend behind the low-precision layer. What runs natively
// in low precision: bf16 matmul and convolution (oneDNN's avx512_core_bf16 kernels, f32
// accumulation, f32 or bf16 outputs), and relu, add, sub, mul, add_relu and relu's gradient on bf16
// data (cpu/convert.cpp), max and average pooling of channels-last bf16 (cpu/pool_channels_last.cpp) and batch norm of
// channels-last bf16 with f32 parameters (cpu/norm_channels_last.cpp).
// f16 has no oneDNN kernel on CPUs without AVX512-FP16, so its products compute in f32
// on twins, like every other op.
#include "../tensor/low_precision_backend.h"

#include "convert.h"
#include "cpu_backend.h"

namespace reel::cpu {
namespace {

class LowPrecisionCpu final : public LowPrecisionBackend<CpuBackend> {
 protected:
  bool native_product(const Tensor& out, const Tensor& a, const Tensor& b, const Tensor& bias) const override {
    auto f16 = [](const Tensor& t) { return t.defined() && t.dtype() == DType::f16; };
    return !f16(out) && !f16(a) && !f16(b) && !f16(bias);
  }
  bool native_unary(UnaryOp op, const Tensor& out, const Tensor& x, double a, double b) override {
    return lowp_unary(op, out, x, a, b);
  }
  bool native_binary(BinaryOp op, const Tensor& out, const Tensor& a, const Tensor& b) override {
    return lowp_binary(op, out, a, b);
  }
  bool native_max_pool_forward(const Tensor& out, const Tensor& indices, const Tensor& x,
                               const PoolParams& p) override {
    return lowp_max_pool2d_forward(out, indices, x, p);
  }
  bool native_max_pool_backward(const Tensor& gx, const Tensor& gy, const Tensor& indices,
                                const PoolParams& p) override {
    return lowp_max_pool2d_backward(gx, gy, indices, p);
  }
  bool native_dropout_forward(const Tensor& y, const Tensor& mask, const Tensor& x, double p, uint64_t seed,
                              uint64_t offset) override {
    return dropout_one_pass(y, mask, x, p, seed, offset);
  }
  bool native_avg_pool_forward(const Tensor& out, const Tensor& x, const PoolParams& p) override {
    return lowp_avg_pool2d_forward(out, x, p);
  }
  bool native_avg_pool_backward(const Tensor& gx, const Tensor& gy, const PoolParams& p) override {
    return lowp_avg_pool2d_backward(gx, gy, p);
  }
  bool native_batch_norm_forward(const Tensor& out, const Tensor& save_mean, const Tensor& save_invstd,
                                 std::span<const Tensor> xs, const Tensor& weight, const Tensor& bias,
                                 const Tensor& running_mean, const Tensor& running_var, bool training, double momentum,
                                 double eps, bool relu) override {
    return lowp_batch_norm_forward(out, save_mean, save_invstd, xs, weight, bias, running_mean, running_var, training,
                                   momentum, eps, relu);
  }
  bool native_batch_norm_backward(std::span<const Tensor> gxs, const Tensor& gw, const Tensor& gb, const Tensor& gy,
                                  std::span<const Tensor> xs, const Tensor& y, const Tensor& weight,
                                  const Tensor& save_mean, const Tensor& save_invstd, bool training) override {
    return lowp_batch_norm_backward(gxs, gw, gb, gy, xs, y, weight, save_mean, save_invstd, training);
  }
};

Backend* get_cpu(int) {
  static LowPrecisionCpu backend;
  return &backend;
}
struct Registrar {
  Registrar() { register_backend(DeviceType::CPU, get_cpu); }
} registrar;

}  // namespace
}  // namespace reel::cpu
