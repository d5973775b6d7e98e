// TEMPORARY during development: methods whose kernels are being written in other files.
#include "cpu_backend.h"
namespace reel::cpu {
#define PENDING(name) throw Error(#name ": pending")
void CpuBackend::softmax_forward(const Tensor&, const Tensor&, int, bool) { PENDING(softmax); }
void CpuBackend::softmax_backward(const Tensor&, const Tensor&, const Tensor&, int, bool) { PENDING(softmax); }
}
