// What every op definition uses: the op scope (call site, debug hooks), recording
// on the tape, output allocation and the common argument checks. Not for users.
#pragma once
#include <fmt/format.h>

#include <atomic>
#include <initializer_list>
#include <utility>
#include <vector>

#include "../tensor/backend.h"
#include "grad_mode.h"
#include "node.h"
#include "op_args_types.h"

namespace reel {

// ---- the debug tools' hook points (implemented in debug/hooks.cpp). With no tool
// active an op pays one relaxed load and one predictable branch on entry; the
// members tested afterwards (OpScope::frame) are null.
struct OpFrame;  // an op in flight, as the debug tools see it
extern std::atomic<int> g_debug_tools;  // how many tools are active (hooks, step, anomaly, profiler, breaks)
inline bool debug_tools_on() { return g_debug_tools.load(std::memory_order_relaxed) != 0; }
class OpScope;
OpFrame* debug_op_begin(const OpScope& op);
void debug_op_end(OpFrame* frame);  // runs the hooks, which may throw
void debug_rule_end(OpFrame* frame, const std::vector<Tensor>& grad_inputs);  // may throw (anomaly mode)
void debug_op_abandon(OpFrame* frame);  // the op threw: drop the frame silently
OpFrame* debug_rule_begin(const Node& node, const std::vector<Tensor>& grad_outputs);
void debug_op_io(OpFrame* frame, const Tensor* const* inputs, size_t n_in, Tensor* const* outputs, size_t n_out,
                 const Node* node);  // may throw (anomaly mode)
void debug_alloc(const Tensor& t);
// A module call as the profiler sees it (nn::Module::Call): the start time, or -1 when
// no profiler runs on this thread; debug_module_end records the span.
int64_t debug_span_begin();
void debug_module_end(const ModulePath* module, int64_t t0_ns);

// The op the user called, for errors (tensor/core.cpp): the outermost op scope on this
// thread since the user's code last ran (a module's forward, a backward rule), so a check
// failing in an op that a composite calls names the composite; fail() then says which
// inner op complained. enter_user_op: whether `op` became the user's op.
bool enter_user_op(const char* op);
void leave_user_op();

// Opened at the top of every public op: makes the outermost caller's line the
// site of everything the op does, names the op the user called in errors, and gives
// debug tools their hook.
class OpScope {
 public:
  OpScope(const char* op, const Site& site)
      : op(op), site(SiteScope::current(site)), user_op_(enter_user_op(op)), scope_(site) {
    if (debug_tools_on()) [[unlikely]] frame = debug_op_begin(*this);
  }
  // May throw: a user's op hook runs here (a throwing dtor is fine during normal exit;
  // during unwinding the frame is dropped instead).
  ~OpScope() noexcept(false) {
    if (user_op_) leave_user_op();
    if (frame) [[unlikely]] debug_op_end(frame);
  }
  OpScope(const OpScope&) = delete;
  OpScope& operator=(const OpScope&) = delete;
  const char* op;
  Site site;
  OpFrame* frame = nullptr;  // non-null while a debug tool watches this op

 private:
  bool user_op_;
  SiteScope scope_;
};

// Wraps one backward rule in the engine, so the debug tools see it as an op of the
// backward phase: `RuleScope rule(node, grads); node.backward(...); rule.done(grad_inputs);`
class RuleScope {
 public:
  RuleScope(const Node& node, const std::vector<Tensor>& grad_outputs) {
    if (debug_tools_on()) [[unlikely]] frame_ = debug_rule_begin(node, grad_outputs);
  }
  void done(const std::vector<Tensor>& grad_inputs) {
    if (frame_) [[unlikely]] debug_rule_end(std::exchange(frame_, nullptr), grad_inputs);
  }
  ~RuleScope() {
    if (frame_) [[unlikely]] debug_op_abandon(frame_);
  }
  RuleScope(const RuleScope&) = delete;
  RuleScope& operator=(const RuleScope&) = delete;

 private:
  OpFrame* frame_ = nullptr;
};

// Records an op on this thread's tape when grad mode is on and some input requires
// grad: links the outputs to a new node and returns it (else nullptr).
Node* record(const OpScope& op, BackwardFn fn, std::initializer_list<const Tensor*> inputs,
             std::initializer_list<Tensor*> outputs);
Node* record(const OpScope& op, BackwardFn fn, const std::vector<const Tensor*>& inputs,
             const std::vector<Tensor*>& outputs);

// Keeps an op's arguments: on its tape entry `n` when it made one, and on the op record
// a watching debug tool sees (debug::OpRecord::args), so that op hooks read them for
// unrecorded ops too. Call it after record(), n null or not.
void debug_op_args(OpFrame* frame, const OpArgs& args);
template <OpArgsType T>
inline void keep_args(const OpScope& op, Node* n, const T& args) {
  if (n) n->set_args(args);
  if (op.frame) [[unlikely]] debug_op_args(op.frame, OpArgs(args));
}

inline bool should_record(std::initializer_list<const Tensor*> inputs) {
  if (!grad_enabled()) return false;
  for (const Tensor* t : inputs)
    if (t->defined() && t->requires_grad()) return true;
  return false;
}

// A new contiguous tensor, no checks (shapes were checked by the caller).
Tensor new_tensor(const Dims& shape, DType dtype, Device device);
inline Tensor new_like(const Tensor& t) { return new_tensor(t.shape(), t.dtype(), t.device()); }
// A fresh tensor laid out by `strides`, which must be dense (dense_strides)
Tensor new_tensor(const Dims& shape, DType dtype, Device device, const Dims& strides);
// A fresh tensor of `shape` in dtype, channels-last where `like` is 4-D channels-last on a
// backend keeping some dtype's activations so (Backend::channels_last), else contiguous:
// how elementwise ops keep that layout from one convolution to the next
Tensor new_in_layout_of(const Tensor& like, const Dims& shape, DType dtype);
// The backend's pooling parameters of `o` (a stride of 0: the kernel), unchecked (ops_pool.cpp)
struct Pool2dOptions;
PoolParams pool_params(const Pool2dOptions& o);
// A view of base's storage with the given geometry; not recorded.
Tensor make_view(const Tensor& base, const Dims& shape, const Dims& strides, int64_t offset);
// base broadcast to shape through stride-0 dims; not recorded.
Tensor expand_view(const Tensor& base, const Dims& shape);
// base converted to dtype (a copy unless it already is); not recorded.
Tensor cast(const Tensor& base, DType dtype);

inline Backend& backend_of(const Tensor& t) { return backend_for(t.device()); }

// g where y > 0, else 0: the rule of relu and of the fused *_relu ops, y their output.
// Recorded ops under grad mode (a create_graph backward), the kernel otherwise.
Tensor relu_grad(const Tensor& g, const Tensor& y);

// ---- checks: each throws Error naming the op, what it expected and what came
void check_defined(const OpScope& op, const Tensor& t, const char* what);
// Every tensor defined, one dtype, one device, one rank; all shapes equal except in dim
// `except` (-1: all equal). autograd/ops_join.cpp (cat, stack; batch_norm_relu's pieces)
void check_joinable(const OpScope& op, const std::vector<Tensor>& ts, int except);
// x's views of `sizes` along dim d (checked), one recorded node (split, chunk)
std::vector<Tensor> split_views(const OpScope& op, const Tensor& x, int d, const std::vector<int64_t>& sizes);
void check_same_device(const OpScope& op, const Tensor& a, const Tensor& b);
void check_floating(const OpScope& op, const Tensor& t, const char* what);
void check_dim(const OpScope& op, const Tensor& t, int expected, const char* what);
void check_dtype(const OpScope& op, const Tensor& t, DType expected, const char* what);
void check_nonempty(const OpScope& op, const Tensor& t, const char* what);
// Losses: input and target of one shape, device and floating dtype; the reduction.
void check_loss_pair(const OpScope& op, const Tensor& input, const Tensor& target);
enum class Reduction : uint8_t;
Tensor reduce_losses(const Tensor& losses, Reduction r);
// "[2, 3] f32 cpu"
std::string describe(const Tensor& t);

}  // namespace reel
