// What every op definition uses: the op scope (call site, debug hooks), recording
// on the tape, output allocation and the common argument checks. Not for users.
#pragma once
#include <fmt/format.h>

#include <initializer_list>
#include <vector>

#include "../tensor/backend.h"
#include "grad_mode.h"
#include "node.h"

namespace reel {

// Opened at the top of every public op: makes the outermost caller's line the
// site of everything the op does, and gives debug tools their hook.
class OpScope {
 public:
  OpScope(const char* op, const Site& site) : op(op), site(SiteScope::current(site)), scope_(site) {}
  const char* op;
  Site site;

 private:
  SiteScope scope_;
};

// Records an op on this thread's tape when grad mode is on and some input requires
// grad: links the outputs to a new node and returns it (else nullptr).
Node* record(const OpScope& op, BackwardFn fn, std::initializer_list<const Tensor*> inputs,
             std::initializer_list<Tensor*> outputs);
Node* record(const OpScope& op, BackwardFn fn, const std::vector<const Tensor*>& inputs,
             const std::vector<Tensor*>& outputs);

inline bool should_record(std::initializer_list<const Tensor*> inputs) {
  if (!grad_enabled()) return false;
  for (const Tensor* t : inputs)
    if (t->defined() && t->requires_grad()) return true;
  return false;
}

// A new contiguous tensor, no checks (shapes were checked by the caller).
Tensor new_tensor(const Dims& shape, DType dtype, Device device);
inline Tensor new_like(const Tensor& t) { return new_tensor(t.shape(), t.dtype(), t.device()); }
// A view of base's storage with the given geometry; not recorded.
Tensor make_view(const Tensor& base, const Dims& shape, const Dims& strides, int64_t offset);
// base broadcast to shape through stride-0 dims; not recorded.
Tensor expand_view(const Tensor& base, const Dims& shape);
// base converted to dtype (a copy unless it already is); not recorded.
Tensor cast(const Tensor& base, DType dtype);

inline Backend& backend_of(const Tensor& t) { return backend_for(t.device()); }

// ---- checks: each throws Error naming the op, what it expected and what came
void check_defined(const OpScope& op, const Tensor& t, const char* what);
void check_same_device(const OpScope& op, const Tensor& a, const Tensor& b);
void check_floating(const OpScope& op, const Tensor& t, const char* what);
void check_dim(const OpScope& op, const Tensor& t, int expected, const char* what);
void check_dtype(const OpScope& op, const Tensor& t, DType expected, const char* what);
void check_nonempty(const OpScope& op, const Tensor& t, const char* what);
// "[2, 3] f32 cpu"
std::string describe(const Tensor& t);

}  // namespace reel
