// Autocast: mixed precision for a scope, PyTorch's torch.autocast model. Parameters
// stay f32 (the optimizer steps f32 weights, no master copies to keep in sync); inside
// the scope the products (matmul, bmm, linear, conv1d/2d, conv_transpose2d, attention)
// read f16/bf16 copies of their f32 inputs and write low-precision outputs, and the ops
// that lose accuracy in 8 mantissa bits (softmax, log_softmax, the losses, the norms,
// reductions and exponentials) cast low-precision inputs back to f32. Every other op
// runs in the dtype that reaches it. The lists, and why, are in docs/amp.md.
//
//   {
//     reel::AutocastGuard amp({.dtype = reel::DType::bf16});
//     loss = reel::cross_entropy(model(x), y);  // linear/conv in bf16, the loss in f32
//   }
//   loss.backward();  // gradients of the f32 parameters are f32
//
// Guards nest; `.enabled = false` turns autocast off for an inner scope. Backward rules
// never autocast (they run in the dtypes the forward chose). f64 tensors are never cast.
#pragma once
#include "../tensor/device.h"
#include "../tensor/dtype.h"
#include "../tensor/tensor.h"

namespace reel {

struct AutocastOptions {
  DeviceType device = DeviceType::CPU;  // autocast is per device type, as in PyTorch
  DType dtype = DType::bf16;            // bf16 or f16
  bool enabled = true;
};

// The state of autocast for a device type on this thread.
bool autocast_enabled(DeviceType device);
DType autocast_dtype(DeviceType device);

class AutocastGuard {
 public:
  explicit AutocastGuard(AutocastOptions opt = {});
  ~AutocastGuard();
  AutocastGuard(const AutocastGuard&) = delete;
  AutocastGuard& operator=(const AutocastGuard&) = delete;

 private:
  DeviceType device_;
  bool prev_enabled_;
  DType prev_dtype_;
};

// ---- for op definitions (autograd/): what an op of each list does to one input.
// The product ops' policy: a floating input other than f64 as the autocast dtype. The
// copy is not recorded: the op keeps the original as its input (its gradient comes
// back in the original dtype) and computes from the copy. Leaves that require grad
// (the parameters) keep their copy (TensorImpl::autocast_copy) while their version
// stays: a model that reads a weight many times converts it once, and the next step's
// forward reads the copy the optimizer rounded in its own pass (autocast_copy_target)
// instead of converting the weights again (W8: 36.4M parameters, 6 B each a step).
// Writes through data_ptr() bypass the version, as they bypass backward's check of
// saved tensors: call autocast_copy_drop after one.
Tensor autocast_lower(const Tensor& t);
// The f32 policy: an f16/bf16 input as f32, recorded (the gradient flows back as
// f16/bf16). Returns t itself outside autocast.
Tensor autocast_f32(const Tensor& t);
// scaled_dot_product_attention's policy: the products' (autocast_lower: an unrecorded copy
// in the autocast dtype) where t's backend runs attention fused in that dtype
// (Backend::attention_low_precision), else the f32 policy (autocast_f32).
Tensor autocast_attention(const Tensor& t);
// Whether autocast applies to an op on `t`'s device now (false for undefined t).
bool autocast_active(const Tensor& t);

// ---- for optimizers (optim/optimizer.cpp), about a parameter p they step.
// The f16/bf16 tensor of p's shape to write p's next value into, rounded as cast()
// rounds, when a forward read p's copy since the last step: the copy itself when
// nothing else holds it, else a new one (a graph that still holds the old copy keeps
// what it computed with). Undefined otherwise, and an unread copy is dropped (a model
// no longer run under autocast stops paying for it).
Tensor autocast_copy_target(const Tensor& p);
// `copy` (a target, written) is p's copy at p's current version.
void autocast_copy_written(const Tensor& p, const Tensor& copy);
// Forgets p's copy: after a write the version does not see, or when the handle is
// pointed at other storage (Module::to).
void autocast_copy_drop(const Tensor& p);

}  // namespace reel
