// Tools for stepping through ops: the tape as a table or a Graphviz graph, a hook
// on every op, breakpoints by op name, step mode, anomaly mode and a profiler.
// With none of them active an op pays one predictable branch (see OpScope).
//
//   reel::debug::AnomalyMode anomaly;          // throws at the first NaN/Inf, naming op and line
//   reel::debug::Profiler prof;                // times every op on this thread
//   Tensor loss = model(x).sum(); loss.backward();
//   std::cout << prof.summary();               // table sorted by total time
//   prof.write_chrome_trace("trace.json");    // open in ui.perfetto.dev
//   reel::debug::write_dot("tape.dot");        // dot -Tpng tape.dot -o tape.png
//
// Breakpoints: REEL_BREAK_ON=conv2d,log_backward ./train (under gdb) raises SIGTRAP
// when such an op starts. See docs/debugging.md.
#pragma once
#include <cstdint>
#include <functional>
#include <iosfwd>
#include <memory>
#include <string>
#include <vector>

#include "../autograd/op_args.h"
#include "../tensor/tensor.h"

namespace reel::debug {

// ---- the tape, readable

// A table of this thread's live tape entries, oldest first: index, seq, op, inputs and
// outputs (shape and dtype each), device, the op's arguments by name ("stride=[1, 1] ...";
// "-" for none), module path ("feat.fc"; "-" outside modules), call site.
void print_tape(std::ostream& os);
std::string tape_str();
// The recorded graph in Graphviz DOT: one box per tape entry (index, op, site), one
// ellipse per leaf (and per input that does not require grad), edges along the data
// flow labelled with shapes; the entries made inside a module's forward() drawn in a
// cluster per module ("feat.fc (Linear)", nested as the modules are). write_dot writes it atomically (temporary + rename).
std::string tape_dot();
void write_dot(const std::string& path);

// ---- a hook on every op

enum class Phase : uint8_t { forward, backward };

// One op as it ran. Tensors are the op's own handles (valid during the hook only
// unless copied); a backward rule's inputs are the incoming gradients and its outputs
// the gradients it gives the forward op's inputs (undefined where none).
struct OpRecord {
  const char* op = "";  // the op; for a backward rule, the forward op whose rule ran
  Phase phase = Phase::forward;
  Site site{nullptr, 0};  // the user's line; for a rule, the line of the forward call
  const ModulePath* module = nullptr;  // the module whose forward() ran the op (or its forward op); null: none
  std::vector<Tensor> inputs;  // known for ops that reach the tape's record() (all differentiable ops)
  std::vector<Tensor> outputs;
  bool recorded = false;  // forward: a tape entry was made
  const Node* node = nullptr;  // the tape entry made (forward) or replayed (backward)
  // The op's arguments, recorded or not, as the struct its tape entry keeps
  // (autograd/op_args_types.h lists them by op; empty for ops that keep none):
  //   if (const ConvParams* p = rec.args.get_if<ConvParams>()) ... p->stride[0] ...
  OpArgs args;
  int depth = 0;  // 0: called by the user; n: called inside n other ops or rules
  const OpRecord* parent = nullptr;  // the op (or rule, or backward pass) this one ran inside
  int64_t bytes = 0;  // bytes allocated by the op (all its new tensors, nested ops included)

  std::string name() const;  // "log", or "log_backward" for a rule
  std::string str() const;   // "log [2, 3] f32 -> [2, 3] f32 cpu at train.cpp:12 in feat.fc"
};

using OpHook = std::function<void(const OpRecord&)>;

// Removes its hook on remove(); dropping the handle keeps the hook.
struct HookHandle {
  uint64_t id = 0;
  void remove();
};

// Calls `hook` after every op on every thread, forward and backward, recorded or not,
// nested ones included (see OpRecord::depth). A hook may throw reel::Error to stop the
// program at an op; ops it calls itself are not reported.
HookHandle add_op_hook(OpHook hook);

// Raises SIGTRAP when an op of one of these names starts (comma-separated; a rule is
// "<op>_backward"; "" clears), so a debugger stops there. REEL_BREAK_ON sets it at
// startup. Without a debugger attached SIGTRAP ends the program.
void set_break_on(const std::string& names);
std::string break_on();

// ---- step mode: one line per op as it ends, on this thread (the mean is over the
// finite values; NaN and Inf are counted):
//   [step] log at train.cpp:12 in feat.fc -> [2, 3] f32 cpu  min -2.3 max 0.4 mean -0.8 nan 1 inf 0
struct StepOptions {
  std::ostream* out = nullptr;  // std::cerr when null
  bool nested = true;  // also ops called inside other ops (indented)
};
class StepMode {
 public:
  explicit StepMode(StepOptions opt = {});
  ~StepMode();
  StepMode(const StepMode&) = delete;
  StepMode& operator=(const StepMode&) = delete;

 private:
  std::ostream* prev_out_;
  bool prev_nested_, prev_on_;
};
// Step mode on or off without a scope (as a guard would, but until switched back).
void set_step_mode(bool on, StepOptions opt = {});

// ---- anomaly mode: on this thread, the first op whose output (forward) or input
// gradient (backward) holds NaN or Inf throws reel::Error naming the op, its call site,
// its module path and the first bad element's index; for a backward rule, the forward
// op, its line and its module.
struct AnomalyOptions {
  bool forward = true;  // check op outputs
  bool backward = true;  // check the gradients each rule gives
  bool inf = true;  // Inf is an anomaly too (else NaN only)
};
class AnomalyMode {
 public:
  explicit AnomalyMode(AnomalyOptions opt = {});
  ~AnomalyMode();
  AnomalyMode(const AnomalyMode&) = delete;
  AnomalyMode& operator=(const AnomalyMode&) = delete;

 private:
  AnomalyOptions prev_;
  bool prev_on_;
};

// ---- profiler: every op on the constructing thread from construction to stop().
// Times are CPU wall clock. For an op on a CUDA device the profiler calls
// Backend::synchronize() before reading the clock at the op's end, so an op's time
// includes its kernels (ops become synchronous while profiling, as with
// CUDA_LAUNCH_BLOCKING=1; the timeline is exact, overlap is lost).
struct ProfilerOptions {
  bool synchronize = true;  // synchronise CUDA devices at each op's end (see above)
};
struct ProfileEvent {
  const char* op = "";
  Phase phase = Phase::forward;
  Site site{nullptr, 0};
  const ModulePath* module = nullptr;  // as OpRecord::module
  int depth = 0;
  int64_t start_ns = 0;  // since the profiler started
  int64_t dur_ns = 0;
  int64_t bytes = 0;  // allocated by the op, nested ops included
  std::string inputs, outputs;  // "[2, 3] f32, [3] f32"
  std::string name() const;  // "log" or "log_backward"
};
struct ProfileRow {
  std::string op;  // name(): forward ops and "<op>_backward" rules apart
  int64_t calls = 0;
  double total_ms = 0, self_ms = 0, mean_us = 0;  // self: minus nested ops
  double percent = 0;  // total as a share of the profiled wall time
  int64_t bytes = 0;
};
// A module's forward() call, or a user's Range, as the profiler saw it.
struct ProfileSpan {
  enum Kind : uint8_t { module_call, range } kind = range;
  std::string name;  // the range's label, or the module path ("feat.fc"; the type for the root)
  const ModulePath* module = nullptr;  // a module call: the module; a range: the module it was opened in
  int64_t start_ns = 0;  // since the profiler started
  int64_t dur_ns = 0;
};
// One row of Profiler::module_table(): a module (op empty) or one op name inside it.
struct ModuleRow {
  std::string module;  // "feat.fc"; the type for the root module ("Net"); "-" for ops outside any module
  std::string op;  // empty: the module's forward() calls; else an op (or "<op>_backward" rule) inside it
  int64_t calls = 0;
  double total_ms = 0;
  double self_ms = 0;  // a module: minus the calls of modules inside it; an op: minus nested ops
};

// A labelled stretch of the user's code, from construction to destruction, shown in
// the profiler's table (one row per label, beside the ops) and its Chrome trace, as
// PyTorch's record_function. Costs nothing but a branch while no profiler runs.
//   { reel::debug::Range r("augment"); x = augment(x); }
class Range {
 public:
  explicit Range(std::string name);
  ~Range();
  Range(const Range&) = delete;
  Range& operator=(const Range&) = delete;

 private:
  std::string name_;
  int64_t t0_ns_ = -1;  // -1: no profiler was running when the range opened
};
// PyTorch's spelling: auto r = reel::debug::record_function("augment");
[[nodiscard]] inline Range record_function(std::string name) { return Range(std::move(name)); }

class Profiler {
 public:
  explicit Profiler(ProfilerOptions opt = {});
  ~Profiler();
  Profiler(const Profiler&) = delete;
  Profiler& operator=(const Profiler&) = delete;
  void stop();  // stops recording (the destructor does it too)

  const std::vector<ProfileEvent>& events() const;
  double wall_ms() const;  // from construction to stop (or now)
  const std::vector<ProfileSpan>& spans() const;  // module calls and ranges, in the order they ended
  // One row per op name and per Range label, by total time, largest first (a range's
  // self time: minus the ops and ranges directly inside it).
  std::vector<ProfileRow> table() const;
  // The table as text: op, calls, total ms, self ms, mean µs, % of the profiled time, MB.
  std::string summary(size_t max_rows = 30) const;
  // Time per module: each module's forward() calls (total, and self: minus the modules
  // it calls), by total time, each followed by the ops that ran inside it (forward ops,
  // and the backward rules of its forward ops), as PyTorch's profiler with_modules.
  std::vector<ModuleRow> module_table() const;
  std::string module_summary(size_t max_rows = 40) const;
  // Chrome trace JSON ("X" events, µs): open in ui.perfetto.dev or chrome://tracing.
  std::string chrome_trace() const;
  void write_chrome_trace(const std::string& path) const;

  struct State;  // internal (debug/profiler.cpp)

 private:
  std::unique_ptr<State> state_;
};

}  // namespace reel::debug
