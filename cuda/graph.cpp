// reel::cuda::Graph: a training step captured from the device's one stream into a CUDA
// graph and replayed with one launch. The memory rules are in internal/graph.h, the
// user's rules in cuda/cuda.h; this file runs the capture, the replays and the teardown.
//
// Capture mode: ThreadLocal. The capturing thread may not call APIs that could wait
// for the GPU (they fail instead of corrupting the capture; reel's own host waits raise a
// reel::Error naming the op before they get that far), while other threads keep using
// CUDA for other devices and pinned memory. Work other threads queue on this device's
// stream during the capture would be captured too: keep them off this device meanwhile.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <exception>

#include "../tensor/optim_step.h"
#include "internal/allocator.h"
#include "internal/graph.h"
#include "cuda.h"

namespace reel::cuda {

namespace {
std::atomic<uint64_t> g_replays{0};
constexpr size_t kMaxCapturedOptims = 64;  // optimizer launches per graph (one per device, group and 320 tensors)

// Blocks whose release waited for the capture to end: the graph is gone (failed capture or teardown).
void release_deferred(Context& ctx, std::vector<std::pair<void*, size_t>>& blocks) {
  for (auto& [ptr, n] : blocks)
    if (cudaFreeAsync(ptr, ctx.stream) != cudaSuccess) (void)cudaGetLastError();
  blocks.clear();
}

// A failed capture's allocations never become memory anyone may touch, but tensors made
// during it may still hold their addresses: keep them registered (as `dead`, never freed)
// so that device_free ignores them. Owned here, for the process's life.
void keep_dead(std::unique_ptr<CaptureState> cs) {
  static auto* mu = new std::mutex();
  static auto* kept = new std::vector<std::unique_ptr<CaptureState>>();
  std::lock_guard<std::mutex> lock(*mu);
  kept->push_back(std::move(cs));
}
}  // namespace

uint64_t graph_replay_count() { return g_replays.load(std::memory_order_relaxed); }

bool stream_capturing(Context& ctx) {
  cudaStreamCaptureStatus st = cudaStreamCaptureStatusNone;
  if (cudaStreamIsCapturing(ctx.stream, &st) != cudaSuccess) {
    (void)cudaGetLastError();
    return false;
  }
  return st != cudaStreamCaptureStatusNone;
}

void forbid_in_capture(Context& ctx, const char* op, const char* what) {
  if (!active_capture(ctx) && !stream_capturing(ctx)) return;
  throw Error(fmt::format("{}: {}, which cannot happen while cuda::Graph::capture records cuda:{}'s stream; keep "
                          "item(), printing, copies to or from the CPU and synchronize() out of the captured step, "
                          "and run the step once before capturing it",
                          op, what, ctx.device));
}

namespace {
// optim/ hands the backend 1 - beta^t, not t: recover t (checked exactly against optim_at_step,
// the expression optim/ used), so that every replay can step it. 0: the kind uses no step count; -1: both
// corrections have reached 1 in double and stay there.
int64_t step_count_of(const OptimStep& s) {
  bool uses1 = s.kind == OptimStep::adam || s.kind == OptimStep::adamw || s.kind == OptimStep::adamax;
  bool uses2 = s.kind == OptimStep::adam || s.kind == OptimStep::adamw;
  if (!uses1) return 0;
  auto matches = [&](int64_t t) {
    OptimStep at = optim_at_step(s, t);
    return at.bias_correction1 == s.bias_correction1 && (!uses2 || at.bias_correction2 == s.bias_correction2);
  };
  double est = -1;
  if (uses2 && s.beta2 > 0 && s.beta2 < 1 && s.bias_correction2 < 1)
    est = std::log1p(-s.bias_correction2) / std::log(s.beta2);
  else if (s.beta1 > 0 && s.beta1 < 1 && s.bias_correction1 < 1)
    est = std::log1p(-s.bias_correction1) / std::log(s.beta1);
  if (est >= 0 && est < 9e15) {
    int64_t guess = std::llround(est);
    for (int64_t t = std::max<int64_t>(1, guess - 2); t <= guess + 2; ++t)
      if (matches(t)) return t;
  }
  if (s.bias_correction1 == 1 && (!uses2 || s.bias_correction2 == 1)) return -1;
  throw Error(fmt::format("cuda::Graph::capture: optim_step: cannot tell the optimizer's step count from its bias "
                          "corrections ({}, {}) for betas ({}, {})",
                          s.bias_correction1, s.bias_correction2, s.beta1, s.beta2));
}
}  // namespace

void* capture_optim(CaptureState& cs, const OptimStep& step, DType dtype, const std::vector<const void*>& state) {
  const char* op = "cuda::Graph::capture: optim_step";
  const char* warm = "run one optimizer step before capturing (the warm-up rule of cuda::Graph)";
  if (step.first_step)
    throw Error(fmt::format("{}: SGD's first step with momentum would be captured, and every replay would repeat "
                            "it; {}", op, warm));
  std::lock_guard<std::mutex> lock(cs.ctx->graph_mu);
  for (const void* p : state)
    if (cs.persistent.count(const_cast<void*>(p)))
      throw Error(fmt::format("{}: the optimizer's state is created during the capture, and every replay would "
                              "reset it; {}", op, warm));
  int64_t t = step_count_of(step);
  if (t == 1) throw Error(fmt::format("{}: the optimizer's first step would be captured; {}", op, warm));
  if (cs.optims.size() >= cs.hyper_slot_count)
    throw Error(fmt::format("{}: more than {} optimizer launches in one captured step", op, cs.hyper_slot_count));
  void* slot = static_cast<char*>(cs.hyper_slots) + cs.optims.size() * kHyperSlotBytes;
  cs.optims.push_back(CapturedOptim{step, dtype, slot, t});
  return slot;
}

struct Graph::State {
  Context* ctx = nullptr;
  std::unique_ptr<CaptureState> cs = std::make_unique<CaptureState>();
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  int64_t replays = 0;
  std::optional<double> lr;
};

Graph::Graph(int device) : device_(device) {}
Graph::~Graph() { reset(); }
Graph::Graph(Graph&& other) noexcept = default;
Graph& Graph::operator=(Graph&& other) noexcept {
  if (this != &other) {
    reset();
    state_ = std::move(other.state_);
    device_ = other.device_;
  }
  return *this;
}

bool Graph::captured() const { return state_ != nullptr; }
int64_t Graph::replays() const { return state_ ? state_->replays : 0; }

void Graph::set_lr(double lr) {
  if (!state_) throw Error("cuda::Graph::set_lr: nothing captured yet");
  if (state_->cs->optims.empty()) throw Error("cuda::Graph::set_lr: the captured step has no optimizer step");
  if (!(lr >= 0)) throw Error(fmt::format("cuda::Graph::set_lr: lr {} is not >= 0", lr));
  state_->lr = lr;
}

void Graph::reset() noexcept {
  if (!state_) return;
  std::unique_ptr<State> st = std::move(state_);
  Context& ctx = *st->ctx;
  try {
    context(ctx.device);
  } catch (...) {
    return;  // the runtime is going away with the process, and the memory with it
  }
  // An exec still running is freed when it completes; the frees below queue after it.
  if (st->exec) (void)cudaGraphExecDestroy(st->exec);
  if (st->graph) (void)cudaGraphDestroy(st->graph);
  CaptureState& cs = *st->cs;
  std::vector<std::pair<void*, size_t>> gone;
  {
    std::lock_guard<std::mutex> lock(ctx.graph_mu);
    if (cs.launched) {
      // Allocations whose tensors died are live after a launch (AutoFreeOnLaunch re-made
      // them) and nobody else will free them; those still held are freed by their tensors.
      std::erase(ctx.graphs, &cs);
      ctx.graph_count.fetch_sub(1, std::memory_order_acq_rel);
      for (void* p : cs.owner_gone) gone.emplace_back(p, cs.persistent[p]);
    } else {
      // Never launched: its allocations never held memory; keep ignoring their tensors' frees.
      for (void* p : cs.owner_gone) cs.persistent.erase(p);
      cs.owner_gone.clear();
      cs.dead = true;
      if (cs.persistent.empty()) {
        std::erase(ctx.graphs, &cs);
        ctx.graph_count.fetch_sub(1, std::memory_order_acq_rel);
      }
    }
  }
  release_deferred(ctx, gone);
  release_deferred(ctx, cs.deferred);
  device_free(ctx, cs.hyper_slots, cs.hyper_slot_count * kHyperSlotBytes);
  (void)cudaGetLastError();
  if (cs.dead && !cs.persistent.empty()) keep_dead(std::move(st->cs));
}

void Graph::capture(const std::function<void()>& step) {
  const char* op = "cuda::Graph::capture";
  Context* ctxp = nullptr;
  try {
    ctxp = &context(device_);
  } catch (const Error& e) {
    throw Error(fmt::format("{}: {}", op, e.what()));
  }
  Context& ctx = *ctxp;
  if (active_capture(ctx) || stream_capturing(ctx))
    throw Error(fmt::format("{}: cuda:{}'s stream is already being captured (captures do not nest)", op, device_));
  reset();
  auto st = std::make_unique<State>();
  st->ctx = &ctx;
  CaptureState& cs = *st->cs;
  cs.ctx = &ctx;
  cs.thread = std::this_thread::get_id();
  // Outside the graph: replays must not re-create (and so forget) what replay() writes there.
  cs.hyper_slot_count = kMaxCapturedOptims;
  cs.hyper_slots = device_alloc(ctx, kMaxCapturedOptims * kHyperSlotBytes);
  {
    std::lock_guard<std::mutex> lock(ctx.graph_mu);
    cs.capturing = true;
    ctx.capture.store(&cs, std::memory_order_release);
  }
  std::exception_ptr failure;
  cudaError_t begun = cudaStreamBeginCapture(ctx.stream, cudaStreamCaptureModeThreadLocal);
  cudaGraph_t graph = nullptr;
  cudaError_t ended = cudaSuccess;
  if (begun == cudaSuccess) {
    try {
      step();
    } catch (...) {
      failure = std::current_exception();
    }
    ended = cudaStreamEndCapture(ctx.stream, &graph);
  }
  std::vector<std::pair<void*, size_t>> pinned;
  {
    std::lock_guard<std::mutex> lock(ctx.graph_mu);
    ctx.capture.store(nullptr, std::memory_order_release);
    cs.capturing = false;
    pinned.swap(cs.pinned_deferred);
  }
  for (auto& [p, n] : pinned) pinned_free(p, n);

  cudaError_t made = cudaSuccess;
  if (!failure && begun == cudaSuccess && ended == cudaSuccess)
    made = cudaGraphInstantiate(&st->exec, graph, cudaGraphInstantiateFlagAutoFreeOnLaunch);
  if (failure || begun != cudaSuccess || ended != cudaSuccess || made != cudaSuccess) {
    (void)cudaGetLastError();
    if (graph) (void)cudaGraphDestroy(graph);
    // Nothing will replay: blocks freed during the capture go back now; the capture's own
    // allocations stay registered (dead) so that their tensors' frees are ignored.
    release_deferred(ctx, cs.deferred);
    device_free(ctx, cs.hyper_slots, cs.hyper_slot_count * kHyperSlotBytes);
    cs.hyper_slots = nullptr;
    cs.optims.clear();
    if (!cs.persistent.empty()) {
      std::lock_guard<std::mutex> lock(ctx.graph_mu);
      cs.dead = true;
      ctx.graphs.push_back(&cs);
      ctx.graph_count.fetch_add(1, std::memory_order_acq_rel);
    }
    if (cs.dead) keep_dead(std::move(st->cs));
    if (failure) std::rethrow_exception(failure);
    cudaError_t e = begun != cudaSuccess ? begun : ended != cudaSuccess ? ended : made;
    const char* stage = begun != cudaSuccess ? "cudaStreamBeginCapture"
                        : ended != cudaSuccess ? "cudaStreamEndCapture"
                                               : "cudaGraphInstantiate";
    throw Error(fmt::format("{}: {} failed on cuda:{}: {} ({}); an op of the step did what a CUDA graph cannot hold "
                            "(waited for the GPU, used another stream, or allocated outside the stream)",
                            op, stage, device_, cudaGetErrorString(e), cudaGetErrorName(e)));
  }
  st->graph = graph;
  {
    std::lock_guard<std::mutex> lock(ctx.graph_mu);
    ctx.graphs.push_back(&cs);
    ctx.graph_count.fetch_add(1, std::memory_order_acq_rel);
  }
  state_ = std::move(st);
}

void Graph::replay() {
  const char* op = "cuda::Graph::replay";
  if (!state_) throw Error(fmt::format("{}: nothing captured (call capture() first)", op));
  Context& ctx = context(device_);
  if (active_capture(ctx)) throw Error(fmt::format("{}: cuda:{}'s stream is being captured", op, device_));
  State& st = *state_;
  // Stream-ordered before the launch, so a replay still queued keeps its own values.
  for (const CapturedOptim& o : st.cs->optims)
    write_captured_optim(ctx, o, o.t0 > 0 ? o.t0 + st.replays : o.t0, st.lr);
  // The allocations the last replay left live are freed here, in stream order, rather than
  // by AutoFreeOnLaunch: the launch re-makes them at the same addresses either way, but
  // the graph may hand an address to a scratch buffer before the allocation that holds it
  // at the end (the forward's batch-norm sums before a bias gradient, in the first GPU
  // run), and compute-sanitizer, which sees this free and not the implicit one, then
  // measured the scratch writes against the old, smaller allocation. The flag stays as a
  // net.
  if (st.cs->launched) {
    std::lock_guard<std::mutex> lock(ctx.graph_mu);
    for (const auto& held : st.cs->persistent) check(cudaFreeAsync(held.first, ctx.stream), op, "cudaFreeAsync");
  }
  check(cudaGraphLaunch(st.exec, ctx.stream), op, "cudaGraphLaunch");
  g_replays.fetch_add(1, std::memory_order_relaxed);
  {
    std::lock_guard<std::mutex> lock(ctx.graph_mu);
    st.cs->launched = true;
  }
  ++st.replays;
}

}  // namespace reel::cuda
