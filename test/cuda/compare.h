// Runs one computation on the CPU and on the GPU from the same inputs and compares
// the outputs and the gradients of every input that requires grad. The CPU backend is
// the reference; float32 with TF32 off (the default) agrees to rounding.
#pragma once
#include <catch2/catch.hpp>
#include <reel/cuda/cuda.h>
#include <reel/reel.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

namespace reel::cuda_test {

inline const Device kGpu = Device::cuda(0);

// "" when a and b (same shape) agree elementwise within atol + rtol |b| (NaN equals NaN),
// else the first difference.
inline std::string close(const Tensor& a, const Tensor& b, double rtol, double atol) {
  if (!(a.shape() == b.shape())) return "shapes differ: " + a.shape().str() + " vs " + b.shape().str();
  if (a.dtype() != b.dtype())
    return std::string("dtypes differ: ") + dtype_name(a.dtype()) + " vs " + dtype_name(b.dtype());
  std::vector<double> x = a.to_vector<double>(), y = b.to_vector<double>();
  for (size_t i = 0; i < x.size(); ++i) {
    if (std::isnan(x[i]) && std::isnan(y[i])) continue;
    if (x[i] == y[i]) continue;  // equal infinities too
    if (!(std::abs(x[i] - y[i]) <= atol + rtol * std::abs(y[i])))
      return "element " + std::to_string(i) + " of " + a.shape().str() + ": gpu " + std::to_string(x[i]) +
             " vs cpu " + std::to_string(y[i]);
  }
  return "";
}

// t on the CPU: an NHWC tensor through its contiguous NHWC view, so that no GPU copy kernel
// stands between a test and the kernel it checks; any other layout through contiguous()
inline Tensor host(const Tensor& t) {
  if (t.dim() == 4 && !t.is_contiguous() && t.permute({0, 2, 3, 1}).is_contiguous())
    return t.permute({0, 2, 3, 1}).cpu().permute({0, 3, 1, 2});
  return t.contiguous().cpu();
}

// "" when a and b hold the same bits element for element (any layouts), else the first difference
inline std::string same_bits(const Tensor& a, const Tensor& b) {
  if (!(a.shape() == b.shape())) return "shapes differ: " + a.shape().str() + " vs " + b.shape().str();
  if (a.dtype() != b.dtype())
    return std::string("dtypes differ: ") + dtype_name(a.dtype()) + " vs " + dtype_name(b.dtype());
  const Tensor x = host(a).contiguous(), y = host(b).contiguous();
  const size_t es = dtype_size(a.dtype());
  const auto* p = static_cast<const unsigned char*>(x.data_ptr());
  const auto* q = static_cast<const unsigned char*>(y.data_ptr());
  for (int64_t i = 0; i < x.numel(); ++i)
    if (std::memcmp(p + i * es, q + i * es, es) != 0) {
      const std::vector<double> u = x.to_vector<double>(), v = y.to_vector<double>();
      return "element " + std::to_string(i) + " (row-major) of " + a.shape().str() + ": " +
             std::to_string(u[size_t(i)]) + " vs " + std::to_string(v[size_t(i)]) + " (reference)";
    }
  return "";
}

using Fn = std::function<Tensor(const std::vector<Tensor>&)>;

// f on `inputs` (CPU leaves) and on copies of them on the GPU; outputs and input
// gradients (through sum(f * w) for a random w) must agree.
inline std::string same_on_gpu(const Fn& f, const std::vector<Tensor>& inputs, double rtol = 1e-5,
                               double atol = 1e-6) {
  std::vector<Tensor> cpu_in, gpu_in;
  bool grads = false;
  for (const Tensor& t : inputs) {
    bool rg = t.requires_grad();
    grads = grads || rg;
    Tensor c = t.detach().clone();
    Tensor g = t.detach().to(kGpu);
    if (rg) {
      c.requires_grad_();
      g.requires_grad_();
    }
    cpu_in.push_back(c);
    gpu_in.push_back(g);
  }
  Tensor yc = f(cpu_in), yg = f(gpu_in);
  if (!yg.device().is_cuda()) return "the GPU result lives on " + yg.device().str();
  if (std::string d = close(yg.cpu(), yc, rtol, atol); !d.empty()) return "forward: " + d;
  if (!grads || !yc.requires_grad()) return "";  // comparisons, argmax, sign: nothing to differentiate
  Tensor w = randn(yc.shape(), {.dtype = yc.dtype()});
  (yc * w).sum().backward();
  (yg * w.to(kGpu)).sum().backward();
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (!inputs[i].requires_grad()) continue;
    Tensor gc = cpu_in[i].grad(), gg = gpu_in[i].grad();
    if (gc.defined() != gg.defined()) return "input " + std::to_string(i) + ": gradient defined on one device only";
    if (!gc.defined()) continue;
    if (!gg.device().is_cuda()) return "input " + std::to_string(i) + ": the GPU gradient lives on the CPU";
    if (std::string d = close(gg.cpu(), gc, rtol, atol * 10); !d.empty())
      return "gradient of input " + std::to_string(i) + ": " + d;
  }
  return "";
}

// a CPU f32 (or `dtype`) leaf with values in [lo, hi), requiring grad when floating
inline Tensor leaf(const Dims& shape, double lo = -2, double hi = 2, DType dtype = DType::f32, bool grad = true) {
  Tensor t = (rand(shape, {.dtype = is_floating(dtype) ? dtype : DType::f64}) * (hi - lo) + lo).detach();
  if (!is_floating(dtype)) return t.to(dtype);
  return grad ? t.requires_grad_() : t;
}

}  // namespace reel::cuda_test

#define CHECK_SAME_ON_GPU(...) CHECK(::reel::cuda_test::same_on_gpu(__VA_ARGS__) == "")
