// Batch norm of f16/bf16 activations through cuDNN's batch norm (REEL_CUDA_HALF_NORM=cudnn;
// the rule and why: internal/half_norm.h). The halves are read and written as they lie, NHWC
// or NCHW, with f32 scale, bias and statistics, instead of staging them through f32 twins (a
// conversion each way around the f32 kernels, and a transpose each way for NHWC).
// Floor: memory bandwidth (cuDNN's persistent kernels read x twice forward, x and g backward).
#include <cudnn.h>

#include <atomic>
#include <cstdio>
#include <map>
#include <memory>
#include <mutex>
#include <vector>

#include "internal/backend.h"
#include "internal/channels_last.h"
#include "internal/dnn.h"
#include "internal/graph.h"
#include "internal/half_norm.h"
#include "cuda.h"

namespace reel::cuda {
namespace {

EnvSwitch<half_norm::Path> g_half_norm("REEL_CUDA_HALF_NORM", half_norm::path_from_env,
                                       half_norm::invalid_path_message, half_norm::Path::invalid);
std::atomic<uint64_t> g_cudnn_norm_calls{0};

// What cuDNN refused with NOT_SUPPORTED (a dtype or mode this cuDNN or GPU lacks), per dtype,
// mode and direction: those calls run staged from then on, said once on stderr. Any other
// failure is an Error naming the op.
std::atomic<uint32_t> g_refused{0};
uint32_t refusal_bit(DType dtype, half_norm::Mode mode, bool backward) {
  return 1u << ((dtype == DType::f16 ? 4 : 0) + (mode == half_norm::Mode::spatial ? 2 : 0) + (backward ? 1 : 0));
}
// true: cuDNN ran; false: it refused (remembered); else throws
bool ran(cudnnStatus_t st, uint32_t bit, const char* op, const char* what) {
  if (st == CUDNN_STATUS_SUCCESS) return true;
  if (st != CUDNN_STATUS_NOT_SUPPORTED) check_dnn(st, op, what);
  if (!(g_refused.fetch_or(bit) & bit))
    std::fprintf(stderr, "reel: %s: cuDNN refused it (%s: CUDNN_STATUS_NOT_SUPPORTED); such calls run staged\n", op,
                 what);
  return false;
}

// x's descriptor in the call's layout and the per-channel one cuDNN derives from it (float
// for half x)
struct Descriptors {
  cudnnTensorDescriptor_t x = nullptr, params = nullptr;
  Descriptors(const Dims& shape, DType dtype, bool nhwc, cudnnBatchNormMode_t mode, const char* op) {
    check_dnn(cudnnCreateTensorDescriptor(&x), op, "cudnnCreateTensorDescriptor");
    check_dnn(cudnnCreateTensorDescriptor(&params), op, "cudnnCreateTensorDescriptor");
    check_dnn(cudnnSetTensor4dDescriptor(x, nhwc ? CUDNN_TENSOR_NHWC : CUDNN_TENSOR_NCHW,
                                         dtype == DType::f16 ? CUDNN_DATA_HALF : CUDNN_DATA_BFLOAT16, int(shape[0]),
                                         int(shape[1]), int(shape[2]), int(shape[3])),
              op, "x descriptor");
    check_dnn(cudnnDeriveBNTensorDescriptor(params, x, mode), op, "cudnnDeriveBNTensorDescriptor");
  }
  ~Descriptors() {
    cudnnDestroyTensorDescriptor(params);
    cudnnDestroyTensorDescriptor(x);
  }
  Descriptors(const Descriptors&) = delete;
  Descriptors& operator=(const Descriptors&) = delete;
};

// A device's cuDNN handle for batch norm, on its stream, and the descriptors of each shape,
// dtype, layout and mode met, made once (a network's norms repeat every step); used under
// `mu` (a handle is not for two threads at once)
struct State {
  std::mutex mu;
  cudnnHandle_t handle = nullptr;
  std::map<std::vector<int64_t>, std::unique_ptr<Descriptors>> descriptors;
  const Descriptors& of(const Dims& shape, DType dtype, bool nhwc, cudnnBatchNormMode_t mode, const char* op) {
    std::vector<int64_t> key{shape[0], shape[1], shape[2], shape[3], int64_t(dtype), nhwc, int64_t(mode)};
    std::unique_ptr<Descriptors>& d = descriptors[key];
    if (!d) d = std::make_unique<Descriptors>(shape, dtype, nhwc, mode, op);
    return *d;
  }
};
State& state_of(Context& c, const char* op) {
  return dnn_state_of<State>(c, op,
                             "would create cuDNN's batch norm handle (the first half batch norm on this device); run "
                             "the step once before capturing it (the warm-up rule of cuda::Graph)");
}

bool packed(const Tensor& t) { return channels_last::packed_nhwc(t.shape(), t.strides()); }
// whether t lies as the call's descriptor says: packed NHWC, or row-major
bool in_layout(const Tensor& t, bool nhwc) { return t.dim() == 4 && (nhwc ? packed(t) : t.is_contiguous()); }

// The rule's view of one call: `halves` x's pieces and every other half tensor of the call,
// `params` the f32 ones (undefined: not given)
half_norm::Call call_of(bool backward, bool training, bool running, std::span<const Tensor> xs,
                        std::initializer_list<const Tensor*> halves, std::initializer_list<const Tensor*> params) {
  half_norm::Call c;
  c.path = g_half_norm.get();
  c.backward = backward;
  c.training = training;
  c.running = running;
  const Tensor& x0 = xs[0];
  c.dims = x0.dim();
  c.x = x0.dtype();
  c.y = c.x;
  if (c.dims != 4) return c;
  c.n = x0.size(0);
  c.hw = x0.size(2) * x0.size(3);
  c.c = 0;
  for (const Tensor& x : xs) {
    c.same_dtypes = c.same_dtypes && x.dtype() == c.x && x.dim() == 4;
    c.nhwc = c.nhwc && x.dim() == 4 && packed(x);
    c.nchw = c.nchw && x.dim() == 4 && x.is_contiguous();
    if (x.dim() == 4) c.c += x.size(1);
  }
  for (const Tensor* t : halves) {
    if (!t->defined()) continue;
    c.same_dtypes = c.same_dtypes && t->dtype() == c.x;
    c.nhwc = c.nhwc && t->dim() == 4 && packed(*t);
    c.nchw = c.nchw && t->dim() == 4 && t->is_contiguous();
  }
  for (const Tensor* t : params) {
    if (!t->defined()) continue;
    c.params_f32 = c.params_f32 && t->dtype() == DType::f32;
    c.params_dense = c.params_dense && t->is_contiguous();
  }
  return c;
}

cudnnBatchNormMode_t dnn_mode(half_norm::Mode m) {
  return m == half_norm::Mode::spatial_persistent ? CUDNN_BATCHNORM_SPATIAL_PERSISTENT : CUDNN_BATCHNORM_SPATIAL;
}

// Channel slice [c0, c0 + c) of an NHWC or NCHW tensor t: the same strides, the offset moved
Tensor channels_of(const Tensor& t, int64_t c0, int64_t c) {
  return view_of(t, {t.size(0), c, t.size(2), t.size(3)}, t.strides(), t.offset() + c0 * t.strides()[1]);
}
// A fresh tensor of `shape` in `dtype`, packed NHWC or row-major
Tensor layout_scratch(Context& ctx, const Dims& shape, DType dtype, bool nhwc) {
  int64_t n = 1;
  for (int64_t s : shape) n *= s;
  return view_of(scratch(ctx, {n}, dtype), shape, nhwc ? channels_last_strides(shape) : contiguous_strides(shape), 0);
}
// The pieces as one tensor of the call's layout: the one piece itself, else their channels
// copied side by side
Tensor joined(CudaBackend& k, std::span<const Tensor> xs, const Dims& shape, bool nhwc) {
  if (xs.size() == 1) return xs[0];
  Tensor all = layout_scratch(k.ctx(), shape, xs[0].dtype(), nhwc);
  int64_t c0 = 0;
  for (const Tensor& x : xs) {
    k.copy_same_device(channels_of(all, c0, x.size(1)), x);
    c0 += x.size(1);
  }
  return all;
}
// t when given, else a scratch [c] f32 filled with `value` (cuDNN reads a scale and a bias always)
Tensor or_filled(CudaBackend& k, const Tensor& t, int64_t c, double value) {
  if (t.defined()) return t;
  Tensor s = scratch(k.ctx(), {c}, DType::f32);
  k.fill(s, value);
  return s;
}
// t when given, else a scratch [c] f32 for cuDNN to write and nobody to read
Tensor or_scratch(CudaBackend& k, const Tensor& t, int64_t c) {
  return t.defined() ? t : scratch(k.ctx(), {c}, DType::f32);
}
void* ptr_or_null(const Tensor& t) { return t.defined() ? t.data_ptr() : nullptr; }

}  // namespace

namespace half_norm {

bool forward(CudaBackend& k, const Tensor& out, const Tensor& save_mean, const Tensor& save_invstd,
             std::span<const Tensor> xs, const Tensor& weight, const Tensor& bias, const Tensor& running_mean,
             const Tensor& running_var, bool training, double momentum, double eps, bool relu) {
  constexpr const char* op = "batch_norm";
  if (xs.empty()) return false;
  const bool running = running_mean.defined() && running_var.defined();
  const Call call = call_of(false, training, running, xs, {&out},
                            {&weight, &bias, &running_mean, &running_var, &save_mean, &save_invstd});
  const uint32_t bit = refusal_bit(call.x, mode_of(call), false);
  if (!refusal(call).empty() || (g_refused.load() & bit)) return false;
  Context& c = k.ctx();
  const Dims shape{call.n, call.c, xs[0].size(2), xs[0].size(3)};
  const bool nhwc = half_norm::nhwc_descriptor(call);
  const Tensor x = joined(k, xs, shape, nhwc);
  const Tensor w = or_filled(k, weight, call.c, 1.0), b = or_filled(k, bias, call.c, 0.0);
  const cudnnBatchNormMode_t mode = dnn_mode(mode_of(call));
  const float one = 1, zero = 0;
  {
    State& s = state_of(c, op);
    std::lock_guard<std::mutex> lock(s.mu);
    const Descriptors& d = s.of(shape, call.x, nhwc, mode, op);
    if (training) {
      const Tensor sm = or_scratch(k, save_mean, call.c), si = or_scratch(k, save_invstd, call.c);
      if (!ran(cudnnBatchNormalizationForwardTraining(s.handle, mode, &one, &zero, d.x, x.data_ptr(), d.x,
                                                      out.data_ptr(), d.params, w.data_ptr(), b.data_ptr(), momentum,
                                                      ptr_or_null(running_mean), ptr_or_null(running_var), eps,
                                                      sm.data_ptr(), si.data_ptr()),
               bit, op, "cudnnBatchNormalizationForwardTraining"))
        return false;
    } else {
      if (!ran(cudnnBatchNormalizationForwardInference(s.handle, mode, &one, &zero, d.x, x.data_ptr(), d.x,
                                                       out.data_ptr(), d.params, w.data_ptr(), b.data_ptr(),
                                                       running_mean.data_ptr(), running_var.data_ptr(), eps),
               bit, op, "cudnnBatchNormalizationForwardInference"))
        return false;
    }
  }
  sync_if_debugging(op);
  if (!training) {  // what an evaluation backward reads: the running statistics, as invstd
    if (save_mean.defined()) k.copy_same_device(save_mean, running_mean);
    if (save_invstd.defined()) {
      k.unary(UnaryOp::add_scalar, save_invstd, running_var, eps, 0);
      k.unary(UnaryOp::rsqrt, save_invstd, save_invstd, 0, 0);
    }
  }
  // through the registered backend: its f16/bf16 elementwise path (REEL_CUDA_HALF_ELEMENTWISE)
  if (relu) backend_for(out.device()).unary(UnaryOp::relu, out, out, 0, 0);
  g_cudnn_norm_calls.fetch_add(1, std::memory_order_relaxed);
  return true;
}

bool backward(CudaBackend& k, std::span<const Tensor> gxs, const Tensor& gw, const Tensor& gb, const Tensor& gy,
              std::span<const Tensor> xs, const Tensor& y, const Tensor& weight, const Tensor& save_mean,
              const Tensor& save_invstd, bool training) {
  constexpr const char* op = "batch_norm_backward";
  if (xs.empty() || gxs.size() != xs.size()) return false;
  std::vector<const Tensor*> halves{&y};
  for (const Tensor& g : gxs) halves.push_back(&g);
  half_norm::Call call = call_of(true, training, true, xs, {}, {&gw, &gb, &weight, &save_mean, &save_invstd});
  // y and the input gradients: one more pass of the same rule over them; gy may come in any
  // layout (an adaptive pool's gradient is NCHW) and is laid out as the call's below
  for (const Tensor* t : halves) {
    if (!t->defined()) continue;
    call.same_dtypes = call.same_dtypes && t->dtype() == call.x;
    call.nhwc = call.nhwc && t->dim() == 4 && packed(*t);
    call.nchw = call.nchw && t->dim() == 4 && t->is_contiguous();
  }
  call.same_dtypes = call.same_dtypes && gy.dtype() == call.x && gy.dim() == 4;
  const uint32_t bit = refusal_bit(call.x, mode_of(call), true);
  if (!refusal(call).empty() || !save_mean.defined() || !save_invstd.defined() || (g_refused.load() & bit))
    return false;
  Context& c = k.ctx();
  const Dims shape{call.n, call.c, xs[0].size(2), xs[0].size(3)};
  const bool nhwc = half_norm::nhwc_descriptor(call);
  const Tensor x = joined(k, xs, shape, nhwc);
  Backend& be = backend_for(gy.device());
  Tensor g = gy;
  if (y.defined()) {  // batch_norm_relu: relu's mask first, g (y > 0), written in the call's layout
    g = layout_scratch(c, shape, gy.dtype(), nhwc);
    be.binary(BinaryOp::relu_backward, g, gy, y);
  } else if (!in_layout(gy, nhwc)) {
    g = layout_scratch(c, shape, gy.dtype(), nhwc);
    k.copy_same_device(g, gy);
  }
  const bool direct = xs.size() == 1 && gxs[0].defined();
  const Tensor gx = direct ? gxs[0] : layout_scratch(c, shape, call.x, nhwc);
  const Tensor w = or_filled(k, weight, call.c, 1.0);
  const Tensor dw = or_scratch(k, gw, call.c), db = or_scratch(k, gb, call.c);
  const cudnnBatchNormMode_t mode = dnn_mode(mode_of(call));
  const float one = 1, zero = 0;
  {
    State& s = state_of(c, op);
    std::lock_guard<std::mutex> lock(s.mu);
    const Descriptors& d = s.of(shape, call.x, nhwc, mode, op);
    // epsilon: the backward does not carry the forward's; cuDNN reads the saved inverse
    // standard deviation, which holds it, and uses epsilon only where none is given
    if (!ran(cudnnBatchNormalizationBackward(s.handle, mode, &one, &zero, &one, &zero, d.x, x.data_ptr(), d.x,
                                             g.data_ptr(), d.x, gx.data_ptr(), d.params, w.data_ptr(), dw.data_ptr(),
                                             db.data_ptr(), 1e-5, save_mean.data_ptr(), save_invstd.data_ptr()),
             bit, op, "cudnnBatchNormalizationBackward"))
      return false;
  }
  sync_if_debugging(op);
  if (!direct) {
    int64_t c0 = 0;
    for (size_t j = 0; j < xs.size(); ++j) {
      if (gxs[j].defined()) k.copy_same_device(gxs[j], channels_of(gx, c0, xs[j].size(1)));
      c0 += xs[j].size(1);
    }
  }
  g_cudnn_norm_calls.fetch_add(1, std::memory_order_relaxed);
  return true;
}

}  // namespace half_norm

// Autocast's batch norm keeps halves mixed where they are channels-last and kept so (the CPU's
// rule), and in row-major too where cuDNN runs them (internal/half_norm.h)
bool CudaBackend::mixed_batch_norm(DType dtype, bool x_channels_last) const {
  if (x_channels_last) return channels_last(dtype);
  return is_low_precision(dtype) && g_half_norm.get() == half_norm::Path::cudnn;
}

void set_half_norm_path(HalfNormPath path) {
  g_half_norm.set(path == HalfNormPath::cudnn ? half_norm::Path::cudnn : half_norm::Path::staged);
}
HalfNormPath half_norm_path() {
  return g_half_norm.get() == half_norm::Path::cudnn ? HalfNormPath::cudnn : HalfNormPath::staged;
}
uint64_t cudnn_norm_calls() { return g_cudnn_norm_calls.load(std::memory_order_relaxed); }

}  // namespace reel::cuda
