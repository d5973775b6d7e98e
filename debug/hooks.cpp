// The op frames behind every debug tool: OpScope (and the engine's RuleScope) open
// a frame per op while a tool is active; when it ends, the frame goes to the
// profiler, step mode and the user's hooks. Anomaly mode checks outputs as record()
// reports them, and rule gradients as the rule returns. REEL_BREAK_ON and op
// hooks are global; step, anomaly and the profiler belong to one thread.
#include <fmt/format.h>

#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdlib>
#include <exception>
#include <iostream>
#include <memory>
#include <mutex>

#include "internal/frames.h"

namespace reel {

std::atomic<int> g_debug_tools{0};

namespace debug {
namespace {

struct ThreadState {
  std::vector<std::unique_ptr<OpFrame>> frames;  // reused: no allocation per op once warm
  int depth = 0;
  bool in_tool = false;  // a tool is running: ops it calls are not reported
  bool step_on = false;
  std::ostream* step_out = nullptr;
  bool step_nested = true;
  bool anomaly_on = false;
  AnomalyOptions anomaly;
  Profiler::State* profiler = nullptr;
};
thread_local ThreadState tls;

// A tool at work: ops it runs (copies to read values, user hooks) are not watched.
struct InTool {
  bool prev = std::exchange(tls.in_tool, true);
  ~InTool() { tls.in_tool = prev; }
};

// ---- hooks: a snapshot swapped under a mutex, so calling them takes no lock for long
using HookList = std::vector<std::pair<uint64_t, OpHook>>;
std::mutex g_hooks_mutex;
std::shared_ptr<const HookList> g_hooks = std::make_shared<HookList>();
std::atomic<int> g_hook_count{0};
uint64_t g_next_hook_id = 1;

std::shared_ptr<const HookList> hooks_snapshot() {
  std::lock_guard lock(g_hooks_mutex);
  return g_hooks;
}

// ---- breakpoints by op name
std::mutex g_break_mutex;
std::vector<std::string> g_break_names;
std::atomic<bool> g_break_any{false};

bool should_break(const char* op, Phase phase) {
  std::lock_guard lock(g_break_mutex);
  for (const std::string& n : g_break_names) {
    if (phase == Phase::forward && n == op) return true;
    if (phase == Phase::backward && n.size() > 9 && n.ends_with("_backward") && n.compare(0, n.size() - 9, op) == 0)
      return true;
  }
  return false;
}

// REEL_BREAK_ON is read once, when libreel loads.
[[maybe_unused]] const bool g_break_env_read = [] {
  if (const char* v = std::getenv("REEL_BREAK_ON")) set_break_on(v);
  return true;
}();

bool thread_watches() {
  return tls.step_on || tls.anomaly_on || tls.profiler || g_hook_count.load(std::memory_order_relaxed) > 0;
}

OpFrame* push_frame(const char* op, Phase phase, const Site& site) {
  if (tls.depth == int(tls.frames.size())) tls.frames.push_back(std::make_unique<OpFrame>());
  OpFrame* parent = tls.depth ? tls.frames[size_t(tls.depth - 1)].get() : nullptr;
  OpFrame* f = tls.frames[size_t(tls.depth++)].get();
  OpRecord& r = f->rec;
  r.op = op;
  r.phase = phase;
  r.site = site;
  r.module = current_module();  // a backward rule runs in its forward op's module (the engine sets it)
  r.recorded = false;
  r.node = nullptr;
  r.args.clear();
  r.depth = tls.depth - 1;
  r.parent = parent ? &parent->rec : nullptr;
  r.bytes = 0;
  f->io_reported = false;
  f->in_rule = parent && (parent->rec.phase == Phase::backward || parent->in_rule);
  f->uncaught = std::uncaught_exceptions();
  f->t0_ns = tls.profiler ? detail::now_ns() : 0;
  return f;
}

// Pops `f` (and, defensively, anything left above it) off this thread's stack.
void pop_frame(OpFrame* f) {
  while (tls.depth > 0) {
    OpFrame* top = tls.frames[size_t(--tls.depth)].get();
    if (top == f) return;
  }
}

// backward() returns nothing, so its frame keeps no fallback outputs: holding a rule's
// gradients there kept them alive past the engine's hand-over, and the engine then
// copied each leaf's gradient instead of taking it (only while the tools were on).
bool keeps_candidates(const OpFrame& f) { return std::string_view(f.rec.op) != "backward"; }

void clear_frame(OpFrame* f) {
  f->rec.inputs.clear();
  f->rec.outputs.clear();
  f->candidate.clear();
}

// The first NaN (or Inf) of t: its flat index, or -1.
int64_t first_bad(const Tensor& t, bool inf, double& value) {
  if (!t.defined() || !t.is_floating_point() || t.numel() == 0) return -1;
  std::vector<double> v = t.to_vector<double>();
  for (size_t i = 0; i < v.size(); ++i)
    if (std::isnan(v[i]) || (inf && std::isinf(v[i]))) {
      value = v[i];
      return int64_t(i);
    }
  return -1;
}

// "log", or "log (inside log_softmax, inside cross_entropy)"
std::string op_path(const OpRecord& r) {
  std::string s = r.name();
  for (const OpRecord* p = r.parent; p && p->phase == Phase::forward && std::string_view(p->op) != "backward";
       p = p->parent)
    s += fmt::format(" (inside {})", p->name());
  return s;
}

void check_forward(const OpFrame& f) {
  const OpRecord& r = f.rec;
  InTool guard;
  for (size_t i = 0; i < r.outputs.size(); ++i) {
    double bad = 0;
    int64_t at = first_bad(r.outputs[i], tls.anomaly.inf, bad);
    if (at < 0) continue;
    const Tensor& t = r.outputs[i];
    throw Error(fmt::format("anomaly mode: {} gave {} in {} {} {} at index {} (at {})", op_path(r),
                            std::isnan(bad) ? "NaN" : fmt::format("{}", bad),
                            r.outputs.size() > 1 ? fmt::format("output {}", i) : std::string("its output"),
                            t.shape().str(), dtype_name(t.dtype()), detail::index_str(t.shape(), at),
                            detail::where_str(r.site, r.module)));
  }
}

void check_backward(const OpFrame& f) {
  const OpRecord& r = f.rec;
  InTool guard;
  for (size_t i = 0; i < r.outputs.size(); ++i) {
    double bad = 0;
    int64_t at = first_bad(r.outputs[i], tls.anomaly.inf, bad);
    if (at < 0) continue;
    const Tensor& g = r.outputs[i];
    std::string pass = r.parent && r.parent->site.known() ? fmt::format(" (backward called at {})", r.parent->site.str())
                                                           : std::string();
    throw Error(fmt::format(
        "anomaly mode: the backward rule of {} gave {} in the gradient for input {} ({} {}) at index {}; "
        "the forward {} was called at {}{}",
        r.op, std::isnan(bad) ? "NaN" : fmt::format("{}", bad), i, g.shape().str(), dtype_name(g.dtype()),
        detail::index_str(g.shape(), at), r.op, detail::where_str(r.site, r.module), pass));
  }
}

// "min -2.3 max 0.4 mean -0.8 nan 1 inf 0"
std::string stats_str(const Tensor& t) {
  if (!t.defined()) return "-";
  std::string head = fmt::format("{} {} {}", t.shape().str(), dtype_name(t.dtype()), t.device().str());
  if (t.numel() == 0) return head + " (empty)";
  std::vector<double> v = t.to_vector<double>();
  double lo = INFINITY, hi = -INFINITY, sum = 0;
  int64_t nan = 0, inf = 0, finite = 0;
  for (double x : v) {
    if (std::isnan(x)) { ++nan; continue; }
    if (std::isinf(x)) ++inf;
    lo = std::min(lo, x);
    hi = std::max(hi, x);
    if (std::isfinite(x)) { sum += x; ++finite; }
  }
  // the mean of the finite values ("-" when there are none); min and max include infinities
  std::string mean = finite ? fmt::format("{:.4g}", sum / double(finite)) : "-";
  if (nan == int64_t(v.size())) return fmt::format("{}  min - max - mean - nan {} inf 0", head, nan);
  return fmt::format("{}  min {:.4g} max {:.4g} mean {} nan {} inf {}", head, lo, hi, mean, nan, inf);
}

void print_step(const OpRecord& r) {
  if (!tls.step_nested && r.depth > 0 && r.phase == Phase::forward) return;
  std::string outs;
  for (size_t i = 0; i < r.outputs.size(); ++i) outs += (i ? " | " : "") + stats_str(r.outputs[i]);
  if (r.outputs.empty()) outs = "(no outputs)";
  std::ostream& os = tls.step_out ? *tls.step_out : std::cerr;
  os << fmt::format("[step] {:{}}{} at {} -> {}\n", "", tls.step_nested ? 2 * r.depth : 0, r.name(),
                    detail::where_str(r.site, r.module), outs);
}

// What every watched op does at its end (frame already popped).
void finish(OpFrame* f) {
  OpRecord& r = f->rec;
  if (tls.profiler) {
    if (detail::profiler_synchronizes(*tls.profiler)) {
      for (const auto* list : {&r.outputs, &r.inputs})
        for (const Tensor& t : *list)
          if (t.defined() && t.device().is_cuda()) backend_for(t.device()).synchronize();
    }
    detail::profiler_record(*tls.profiler, r, f->t0_ns, detail::now_ns());
  }
  if (tls.depth > 0) {  // the enclosing op: our outputs are its fallback outputs, our bytes its bytes
    OpFrame* parent = tls.frames[size_t(tls.depth - 1)].get();
    if (keeps_candidates(*parent)) parent->candidate = r.outputs;
    parent->rec.bytes += r.bytes;
  }
  InTool guard;
  if (tls.step_on) print_step(r);
  if (g_hook_count.load(std::memory_order_relaxed) > 0) {
    auto hooks = hooks_snapshot();
    for (const auto& [id, hook] : *hooks) hook(r);
  }
}

}  // namespace

// ---- records
std::string OpRecord::name() const { return phase == Phase::backward ? std::string(op) + "_backward" : std::string(op); }

std::string OpRecord::str() const {
  std::string dev;
  for (const auto* list : {&outputs, &inputs})
    for (const Tensor& t : *list)
      if (dev.empty() && t.defined()) dev = t.device().str();
  return fmt::format("{} {} -> {} {} at {}", name(), detail::shapes_str(inputs), detail::shapes_str(outputs), dev,
                     detail::where_str(site, module));
}

// ---- hooks
HookHandle add_op_hook(OpHook hook) {
  std::lock_guard lock(g_hooks_mutex);
  auto next = std::make_shared<HookList>(*g_hooks);
  uint64_t id = g_next_hook_id++;
  next->emplace_back(id, std::move(hook));
  g_hooks = std::move(next);
  g_hook_count.fetch_add(1);
  detail::tools_add(1);
  return {id};
}

void HookHandle::remove() {
  std::lock_guard lock(g_hooks_mutex);
  auto next = std::make_shared<HookList>();
  for (const auto& h : *g_hooks)
    if (h.first != id) next->push_back(h);
  if (next->size() != g_hooks->size()) {
    g_hooks = std::move(next);
    g_hook_count.fetch_sub(1);
    detail::tools_add(-1);
  }
  id = 0;
}

// ---- breakpoints
void set_break_on(const std::string& names) {
  std::lock_guard lock(g_break_mutex);
  g_break_names.clear();
  size_t start = 0;
  while (start <= names.size()) {
    size_t end = names.find(',', start);
    if (end == std::string::npos) end = names.size();
    std::string n = names.substr(start, end - start);
    while (!n.empty() && n.front() == ' ') n.erase(0, 1);
    while (!n.empty() && n.back() == ' ') n.pop_back();
    if (!n.empty()) g_break_names.push_back(n);
    start = end + 1;
  }
  bool any = !g_break_names.empty();
  if (any != g_break_any.exchange(any)) detail::tools_add(any ? 1 : -1);
}

std::string break_on() {
  std::lock_guard lock(g_break_mutex);
  std::string s;
  for (const std::string& n : g_break_names) s += (s.empty() ? "" : ",") + n;
  return s;
}

// ---- step mode
StepMode::StepMode(StepOptions opt) : prev_out_(tls.step_out), prev_nested_(tls.step_nested), prev_on_(tls.step_on) {
  set_step_mode(true, opt);
}
StepMode::~StepMode() { set_step_mode(prev_on_, {.out = prev_out_, .nested = prev_nested_}); }

void set_step_mode(bool on, StepOptions opt) {
  if (on != tls.step_on) detail::tools_add(on ? 1 : -1);
  tls.step_on = on;
  tls.step_out = opt.out;
  tls.step_nested = opt.nested;
}

// ---- anomaly mode
AnomalyMode::AnomalyMode(AnomalyOptions opt) : prev_(tls.anomaly), prev_on_(tls.anomaly_on) {
  if (!tls.anomaly_on) detail::tools_add(1);
  tls.anomaly_on = true;
  tls.anomaly = opt;
}
AnomalyMode::~AnomalyMode() {
  if (!prev_on_) detail::tools_add(-1);
  tls.anomaly_on = prev_on_;
  tls.anomaly = prev_;
}

namespace detail {
int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}
void tools_add(int delta) { g_debug_tools.fetch_add(delta); }
Profiler::State* exchange_thread_profiler(Profiler::State* p) {
  Profiler::State* prev = tls.profiler;
  if (bool(prev) != bool(p)) tools_add(p ? 1 : -1);
  tls.profiler = p;
  return prev;
}
std::string where_str(const Site& site, const ModulePath* module) {
  return module ? fmt::format("{} in {}", site.str(), module->str()) : site.str();
}
int64_t span_begin() { return tls.profiler && !tls.in_tool ? now_ns() : -1; }
void span_end(ProfileSpan::Kind kind, std::string name, const ModulePath* module, int64_t t0_ns) {
  if (tls.profiler) profiler_span(*tls.profiler, kind, std::move(name), module, t0_ns, now_ns());
}
std::string shapes_str(const std::vector<Tensor>& ts) {
  std::string s;
  for (size_t i = 0; i < ts.size(); ++i) {
    if (i) s += ", ";
    s += ts[i].defined() ? fmt::format("{} {}", ts[i].shape().str(), dtype_name(ts[i].dtype())) : "-";
  }
  return s;
}
std::string index_str(const Dims& shape, int64_t flat) {
  Dims idx = Dims::filled(shape.size(), 0);
  for (int d = shape.size() - 1; d >= 0; --d) {
    idx[d] = shape[d] ? flat % shape[d] : 0;
    flat = shape[d] ? flat / shape[d] : 0;
  }
  return idx.str();
}
}  // namespace detail
}  // namespace debug

// ---- the hook points declared in autograd/op_support.h
using debug::Phase;
using debug::tls;

OpFrame* debug_op_begin(const OpScope& op) {
  if (tls.in_tool) return nullptr;
  if (debug::g_break_any.load(std::memory_order_relaxed) && debug::should_break(op.op, Phase::forward))
    std::raise(SIGTRAP);  // REEL_BREAK_ON: the debugger stops here; `up` reaches the op, then your line
  if (!debug::thread_watches()) return nullptr;
  return debug::push_frame(op.op, Phase::forward, op.site);
}

OpFrame* debug_rule_begin(const Node& node, const std::vector<Tensor>& grad_outputs) {
  if (tls.in_tool) return nullptr;
  if (debug::g_break_any.load(std::memory_order_relaxed) && debug::should_break(node.label(), Phase::backward))
    std::raise(SIGTRAP);  // REEL_BREAK_ON=<op>_backward: stopped before the rule of <op> runs
  if (!debug::thread_watches()) return nullptr;
  OpFrame* f = debug::push_frame(node.label(), Phase::backward, node.site);
  f->rec.inputs = grad_outputs;
  f->rec.node = &node;
  f->rec.args = node.op_args;
  f->io_reported = true;
  return f;
}

void debug_op_io(OpFrame* f, const Tensor* const* inputs, size_t n_in, Tensor* const* outputs, size_t n_out,
                 const Node* node) {
  f->io_reported = true;
  f->rec.inputs.clear();
  for (size_t i = 0; i < n_in; ++i) f->rec.inputs.push_back(*inputs[i]);
  f->rec.outputs.clear();
  for (size_t i = 0; i < n_out; ++i) f->rec.outputs.push_back(*outputs[i]);
  f->rec.recorded = node != nullptr;
  f->rec.node = node;
  // Checked here rather than at the op's end: a throw from a normal call unwinds cleanly.
  if (tls.anomaly_on && tls.anomaly.forward && !f->in_rule) debug::check_forward(*f);
}

void debug_op_args(OpFrame* f, const OpArgs& args) { f->rec.args = args; }

int64_t debug_span_begin() { return debug::detail::span_begin(); }
void debug_module_end(const ModulePath* module, int64_t t0_ns) {
  if (t0_ns >= 0) debug::detail::span_end(debug::ProfileSpan::module_call, module->str(), module, t0_ns);
}

void debug_alloc(const Tensor& t) {
  if (tls.depth == 0 || tls.in_tool) return;
  OpFrame* f = tls.frames[size_t(tls.depth - 1)].get();
  f->rec.bytes += int64_t(t.numel()) * int64_t(t.element_size());
  if (debug::keeps_candidates(*f)) f->candidate.assign(1, t);
}

void debug_op_end(OpFrame* f) {
  debug::pop_frame(f);
  if (std::uncaught_exceptions() > f->uncaught) {  // the op threw: nothing to report
    debug::clear_frame(f);
    return;
  }
  if (!f->io_reported) f->rec.outputs = std::move(f->candidate);
  try {
    debug::finish(f);
  } catch (...) {
    debug::clear_frame(f);
    throw;
  }
  debug::clear_frame(f);
}

void debug_rule_end(OpFrame* f, const std::vector<Tensor>& grad_inputs) {
  debug::pop_frame(f);
  f->rec.outputs = grad_inputs;
  try {
    if (tls.anomaly_on && tls.anomaly.backward) debug::check_backward(*f);
    debug::finish(f);
  } catch (...) {
    debug::clear_frame(f);
    throw;
  }
  debug::clear_frame(f);
}

void debug_op_abandon(OpFrame* f) {
  debug::pop_frame(f);
  debug::clear_frame(f);
}

}  // namespace reel
