// CUDA graphs inside the backend: what the allocator, the host-sync paths and the
// optimizer need to know about a capture in progress and the graphs alive. Internal to
// cuda/; the public side is reel::cuda::Graph in cuda/cuda.h (graph.cpp).
//
// Memory (the rule Graph's documentation states):
//   - cudaMallocAsync during capture makes an allocation node: its address is fixed for
//     the graph's life. An allocation the capture did not free (a gradient, the loss) is
//     freed by replay() before each launch after the first (cudaFreeAsync; AutoFreeOnLaunch
//     would do the same unseen by compute-sanitizer) and made again, at the same address,
//     by the launch: the tensors holding it see each replay's values. Within a replay its
//     memory may serve as another op's scratch before the op that fills it runs.
//   - A tensor made during capture whose owner dies while the graph lives is not freed
//     (cudaFreeAsync of a live graph allocation would race the next replay's re-creation):
//     the graph frees it when it is destroyed.
//   - A block allocated before the capture and freed during it cannot become a free node
//     (CUDA allows only graph allocations there) and may still be read by captured
//     kernels at every replay: the graph keeps it until it is destroyed.
//   - Pinned host blocks released during capture are released after it ends.
#pragma once
#include <cstddef>
#include <cstdint>
#include <optional>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "context.h"

namespace reel::cuda {

// One optimizer launch captured into a graph: its hyper-parameters are read from
// `slot` (device memory the graph owns), rewritten before every replay.
struct CapturedOptim {
  OptimStep step;        // as at capture; lr may be overridden by Graph::set_lr
  DType dtype = DType::f32;
  void* slot = nullptr;  // device memory for the kernel's Hyper<T>
  int64_t t0 = 0;        // the step count the capture was made with (0: not needed or saturated)
};

struct CaptureState {
  Context* ctx = nullptr;
  bool capturing = false;
  std::thread::id thread;
  // device memory: allocated during capture and not freed in it (graph allocations that
  // outlive each replay), and which of those lost their owner
  std::unordered_map<void*, size_t> persistent;
  std::unordered_set<void*> owner_gone;
  std::vector<std::pair<void*, size_t>> deferred;         // pre-capture blocks freed during capture
  std::vector<std::pair<void*, size_t>> pinned_deferred;  // pinned host blocks released during capture
  // optimizer launches and the device slots for their hyper-parameters
  void* hyper_slots = nullptr;
  size_t hyper_slot_count = 0;
  std::vector<CapturedOptim> optims;
  int random_ops = 0;  // Philox fills captured (their numbers repeat at every replay)
  bool launched = false;
  // A capture that failed, or a graph destroyed before any replay: its allocations never
  // held memory, and the frees of the tensors still holding their addresses are dropped.
  bool dead = false;
};

// The capture in progress on ctx's stream, or nullptr.
inline CaptureState* active_capture(Context& ctx) { return ctx.capture.load(std::memory_order_acquire); }

// Graph replays launched so far, on every device: caches of values a replay may rewrite
// without running host code (the whole-stack RNN's packed weights) compare it.
uint64_t graph_replay_count();

// Whether work queued on ctx's stream now would be captured (also true when another
// library began a capture on it).
bool stream_capturing(Context& ctx);

// Throws Error when ctx's stream is being captured: `op` would wait for the GPU (or read
// host memory whose contents a replay would not see), which a graph cannot hold.
void forbid_in_capture(Context& ctx, const char* op, const char* what);

// One captured optimizer launch (optim.cu): checks the warm-up rule (no first step, no
// state made during the capture: a replay would redo either), recovers the step count,
// records it, and returns the device slot its kernel reads the hyper-parameters from
// (kHyperSlotBytes each). `state`: the addresses of the state tensors it updates.
constexpr size_t kHyperSlotBytes = 256;
void* capture_optim(CaptureState& cs, const OptimStep& step, DType dtype, const std::vector<const void*>& state);

// Writes the hyper-parameters of `o` for step count t (and lr) into its slot, in stream
// order (optim.cu).
void write_captured_optim(Context& ctx, const CapturedOptim& o, int64_t t, std::optional<double> lr);

}  // namespace reel::cuda
