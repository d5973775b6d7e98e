// TEMPORARY during development: methods whose kernels are being written in other files.
#include "cpu_backend.h"
namespace reel::cpu {
#define PENDING(name) throw Error(#name ": pending")
void CpuBackend::batch_norm_forward(const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&, bool, double, double) { PENDING(bn); }
void CpuBackend::batch_norm_backward(const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&, bool) { PENDING(bn); }
void CpuBackend::layer_norm_forward(const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&, double) { PENDING(ln); }
void CpuBackend::layer_norm_backward(const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&) { PENDING(ln); }
void CpuBackend::softmax_forward(const Tensor&, const Tensor&, int, bool) { PENDING(softmax); }
void CpuBackend::softmax_backward(const Tensor&, const Tensor&, const Tensor&, int, bool) { PENDING(softmax); }
}
