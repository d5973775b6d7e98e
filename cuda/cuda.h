// reel::cuda: the CUDA devices as users see them. Includes no CUDA header, and
// every function here exists in every build: in a build without the CUDA backend
// (or on a machine without a driver or a GPU) is_available() is false,
// device_count() is 0, and asking for a CUDA tensor throws reel::Error.
//
//   if (reel::cuda::is_available()) {
//     Tensor x = reel::randn({128, 784}, {.device = reel::Device::cuda()});
//     float s = x.sum().item<float>();   // item() is where the host waits
//   }
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "../tensor/tensor.h"

namespace reel::cuda {

// True when this build has the CUDA backend and a driver and at least one GPU are
// present. Never throws, never crashes without a driver.
bool is_available();
// Number of GPUs (0 without a driver or in a CUDA-less build).
int device_count();
// Why is_available() is false ("" when it is true): no CUDA backend in this build,
// no driver (libcuda.so.1), no device, ...
std::string unavailable_reason();
// The versions this process runs with, for logs and bug reports: "driver CUDA 13.0,
// runtime CUDA 13.0 (built with 13.0), cuBLAS 13.1.0 for CUDA 13.0 (built with 13.1.0),
// cuDNN 9.19.0 for CUDA 13.0 (built with 9.19.0)". Never throws; without a driver it says
// so. A mismatch among them is reported as an Error at first use, saying what to install.
std::string library_versions();
// "NVIDIA H100 80GB HBM3, compute capability 9.0, 132 SMs"; throws Error for a missing device.
std::string device_name(int device = 0);

// Waits until every op queued on the device has finished (a host synchronisation).
void synchronize(int device = 0);

// GPU time between two points of a device's stream, measured by CUDA events: start()
// and stop() queue an event each and return at once; seconds() waits for the stop event
// (one host synchronisation, counted in host_sync_count()) and gives the time the GPU
// spent between them. bench::Timer times each block of runs with one on a GPU, so that
// the host's own clock and the idle time before the first kernel are not counted.
// Throws Error without a usable GPU, and from seconds() when start() and stop() were not
// both called.
class EventTimer {
 public:
  explicit EventTimer(int device = 0);
  ~EventTimer();
  EventTimer(const EventTimer&) = delete;
  EventTimer& operator=(const EventTimer&) = delete;
  void start();
  void stop();
  double seconds();

 private:
  struct State;
  std::unique_ptr<State> state_;
  int device_ = 0;
};

// Times the host waited for a GPU, over all devices: item(), printing, copies to the
// CPU, synchronize() and cuDNN's one-off algorithm search. A training step after
// warm-up must not move it until its loss is read.
uint64_t host_sync_count();

// Memory of one device's stream-ordered pool, in bytes.
struct MemoryStats {
  size_t allocated = 0;       // held by live tensors and workspaces
  size_t peak_allocated = 0;  // since start or reset_peak_memory_stats()
  size_t reserved = 0;        // taken from the driver by the pool (>= allocated)
  size_t peak_reserved = 0;
};
MemoryStats memory_stats(int device = 0);
void reset_peak_memory_stats(int device = 0);
// Returns the pool's unused memory to the driver (synchronises the device).
void empty_cache(int device = 0);

// TF32 tensor cores for float32 matmul and convolution: off by default, so that GPU
// results match the CPU's to float32 rounding. Turning it on trades ~3 decimal digits
// of each product for speed.
void set_allow_tf32(bool allow);
bool allow_tf32();

// The cuDNN path of multi-layer recurrent modules (nn::RNN/GRU/LSTM, rnn()): `layers` (the
// default: one cuDNN call per layer and direction) or `stack` (every layer and direction in
// one call, the weights packed once per optimizer step; not yet measured, docs/cuda.md,
// "Switches"). REEL_CUDNN_RNN=layers|stack chooses it at the first recurrent call;
// set_cudnn_rnn() overrides that from then on (tests run both paths in one process).
// cudnn_rnn() throws Error when REEL_CUDNN_RNN holds another value.
enum class CudnnRnn { layers, stack };
void set_cudnn_rnn(CudnnRnn path);
CudnnRnn cudnn_rnn();
// Times the stack path wrote weights into cuDNN's weight space, over all devices: once per
// optimizer step in a training loop (a forward whose weights did not change reuses them).
uint64_t rnn_stack_packs();

// batch_norm_relu on CUDA (and so nn::BatchNorm2d's relu form, DenseNet's norms): `fused`
// (the default since the H200 measured W11 at 0.74-0.80 of separate: the relu inside the kernel
// that writes y, the mask inside batch norm's backward sums and gx write, DenseNet's pieces
// read where they lie; docs/cuda.md, "Switches") or `separate` (batch norm's kernels, then a
// relu pass; backward a relu_backward pass, then batch norm's backward). REEL_CUDA_BN_RELU=separate|fused chooses it at
// the first batch_norm_relu on a GPU; set_bn_relu_path() overrides that from then on (tests
// run both paths in one process). bn_relu_path() throws Error when REEL_CUDA_BN_RELU holds
// another value.
enum class BnReluPath { separate, fused };
void set_bn_relu_path(BnReluPath path);
BnReluPath bn_relu_path();
// Forward and backward calls the fused path ran, over all devices (tests check it ran).
uint64_t bn_relu_fused_calls();

// f16/bf16 scaled_dot_product_attention on CUDA: `staged` (the default: reel's f32 kernels on
// f32 twins of the inputs, rounded once) or `cudnn` (cuDNN's fused attention through the
// cuDNN frontend: products in the half dtype on tensor cores, f32 softmax statistics; under
// autocast attention then runs in the autocast dtype, as PyTorch's; dropout masks are drawn
// by cuDNN's Philox from reel's seed and offset, repeatable but not the CPU's bits; calls
// with a mask or a head it does not serve stay staged; not yet measured, docs/cuda.md,
// "Switches"). REEL_CUDA_HALF_ATTENTION=staged|cudnn chooses at the first call that asks;
// set_half_attention_path() overrides that from then on. Both throw Error for cudnn in a
// build without the cuDNN frontend's headers (scripts/fetch-cudnn-frontend.sh), and
// half_attention_path() for any other value of the variable.
enum class HalfAttentionPath { staged, cudnn };
void set_half_attention_path(HalfAttentionPath path);
HalfAttentionPath half_attention_path();
// Forward and backward calls cuDNN's fused attention ran, over all devices (tests check it ran).
uint64_t cudnn_attention_calls();

// f16/bf16 4-D activations on CUDA: NCHW (the default) or channels-last, NHWC memory behind
// the [N, C, H, W] shape as on AMX CPUs (Backend::channels_last; docs/amp.md): under autocast a
// convolution then writes y channels-last, cuDNN convolves NHWC on tensor cores without
// transposing around each call, and pooling, elementwise ops, dropout and batch norm keep the
// layout to the next convolution (not yet measured, docs/cuda.md, "Switches").
// REEL_CUDA_CHANNELS_LAST=off|on chooses at the first op that asks; set_half_channels_last()
// overrides that from then on (tensors made before keep their layout). half_channels_last()
// throws Error when REEL_CUDA_CHANNELS_LAST holds another value.
void set_half_channels_last(bool on);
bool half_channels_last();
// Convolution calls (forward, data and filter gradients) that ran NHWC, over all devices.
uint64_t nhwc_convolutions();

// f16/bf16 elementwise ops on CUDA (autocast's relu, residual and bias adds, relu's gradient,
// dropout's multiply, ...): `staged` (the default: the low-precision layer writes an f32 twin
// of each half operand, runs the f32 kernel and rounds its output back, three passes or more)
// or `native` (one pass: each element widened, the f32 kernel's formula, one rounding; the
// staged path's bits; not yet measured, docs/cuda.md, "Switches"). Comparisons and calls
// mixing dtypes stay staged. REEL_CUDA_HALF_ELEMENTWISE=staged|native chooses at the first
// f16/bf16 elementwise op on a GPU; set_half_elementwise_path() overrides that from then on
// (tests run both paths in one process). half_elementwise_path() throws Error when
// REEL_CUDA_HALF_ELEMENTWISE holds another value.
enum class HalfElementwisePath { staged, native };
void set_half_elementwise_path(HalfElementwisePath path);
HalfElementwisePath half_elementwise_path();
// Unary and binary calls the native path ran, over all devices (tests check it ran).
uint64_t native_half_elementwise_calls();

// Batch norm of those channels-last f16/bf16 activations (autocast's mixed form: half x and
// y, f32 parameters and statistics): `staged` (the default: f32 twins of x and y around the
// f32 kernels) or `cudnn` (cuDNN's batch norm reading and writing the halves NHWC as they lie,
// persistent kernels in training; not yet measured, docs/cuda.md, "Switches").
// REEL_CUDA_HALF_NORM=staged|cudnn chooses at the first such norm; set_half_norm_path()
// overrides that from then on. half_norm_path() throws Error for any other value.
enum class HalfNormPath { staged, cudnn };
void set_half_norm_path(HalfNormPath path);
HalfNormPath half_norm_path();
// Forward and backward batch norms cuDNN ran on that path, over all devices.
uint64_t cudnn_norm_calls();

// A CPU tensor in page-locked (pinned) host memory: its copy to a GPU is asynchronous.
// Reusing the memory is safe: a freed block is handed out again only after the copies
// that read it have finished. Without CUDA it is an ordinary CPU tensor.
// Writing into a pinned tensor while its copy may still be queued is a race: take a
// fresh pinned_empty() per batch (blocks are cached, so this costs no allocation).
Tensor pinned_empty(const Dims& shape, DType dtype = DType::f32);
// Whether `t`'s storage is pinned host memory from pinned_empty().
bool is_pinned(const Tensor& t);

// A training step captured once as a CUDA graph and replayed with one launch, which
// removes the host's per-op launch and bookkeeping cost (W1-sized models are bound by it).
//
//   Tensor x = zeros({128, 784}, {.device = Device::cuda()});       // static inputs, made before
//   Tensor y = zeros({128}, {.dtype = DType::i64, .device = Device::cuda()});
//   auto step = [&] { opt.zero_grad(); loss = cross_entropy(net(x), y); loss.backward(); opt.step(); };
//   step();                                   // warm-up: at least one eager step
//   cuda::Graph graph;
//   graph.capture(step);                      // records, runs nothing
//   for (auto& b : loader) { x.copy_(b.data); y.copy_(b.target); graph.replay(); }
//   float last = loss.item<float>();          // the last replay's loss
//
// The rules (docs/cuda.md, "CUDA graphs"):
// - Static shapes and addresses: a replay runs the captured kernels on the captured
//   tensors. Feed data by copying into tensors made before the capture. Tensors made
//   during the capture (gradients, the loss, outputs) keep their addresses: each replay
//   rewrites them, and they hold values only after the first replay.
// - Warm-up: run the step eagerly at least once before capturing, so that cuDNN's
//   algorithm search, cuBLASLt's and cuDNN's handles and the optimizer's state exist;
//   doing any of these during the capture throws Error naming the op.
// - No host synchronisation inside: item(), printing, copies to or from the CPU,
//   synchronize() and cuDNN's algorithm search throw Error naming the op, and the capture
//   is abandoned. After a capture that threw, tensors it made are invalid (zero_grad()).
// - Optimizer: a captured step reads its hyper-parameters from device memory that each
//   replay() rewrites: the step count advances with every replay (Adam's bias
//   corrections match eager steps), the lr is the capture's unless set_lr() sets another.
//   optim::Optimizer::set_lr() and schedulers do not reach a captured graph (the host
//   code of the step does not run at replay): call graph.set_lr(opt.lr()) after them.
//   The optimizer object's own step counters stay where the capture left them.
// - Random numbers (dropout, randn in the step) are drawn once at capture: every replay
//   uses the same numbers.
// - While capturing, no other thread may queue work on this device.
// In a build without CUDA, or without a usable GPU, capture() and replay() throw Error
// saying why.
class Graph {
 public:
  explicit Graph(int device = 0);
  ~Graph();
  Graph(Graph&& other) noexcept;
  Graph& operator=(Graph&& other) noexcept;
  Graph(const Graph&) = delete;
  Graph& operator=(const Graph&) = delete;

  // Records `step` (any reel ops on this device, forward, backward, optimizer step) into
  // a graph, replacing any graph captured before. The ops run on the host as usual, but
  // nothing runs on the GPU until replay().
  void capture(const std::function<void()>& step);
  // Launches the graph on the device's stream (asynchronous, like any op).
  void replay();
  // The lr of every optimizer step captured, from the next replay on.
  void set_lr(double lr);
  bool captured() const;
  int64_t replays() const;
  // Drops the graph (waits for nothing; replays still queued complete).
  void reset() noexcept;

 private:
  struct State;
  std::unique_ptr<State> state_;
  int device_ = 0;
};

}  // namespace reel::cuda
