// cuda/cuda.h in a build without the CUDA backend (REEL_CUDA off): there is no CUDA
// device, every query says so, and pinned_empty() gives ordinary host memory, so code
// written for both kinds of build (a DataLoader, a test) needs no #ifdef.
#include <fmt/format.h>

#include "cuda.h"

namespace reel::cuda {
namespace {
constexpr const char* kReason = "no CUDA device: this build of reel has no CUDA backend (configure with -DREEL_CUDA=ON)";
[[noreturn]] void absent(const char* op, int device) {
  throw Error(fmt::format("{}: cuda:{}: {}", op, device, kReason));
}
bool g_allow_tf32 = false;  // kept so that allow_tf32() returns what was set
CudnnRnn g_cudnn_rnn = CudnnRnn::layers;  // likewise: no cuDNN here, nothing reads it
BnReluPath g_bn_relu = BnReluPath::fused;  // likewise
HalfAttentionPath g_half_attention = HalfAttentionPath::staged;  // likewise
bool g_half_channels_last = false;                              // likewise
HalfElementwisePath g_half_elementwise = HalfElementwisePath::staged;  // likewise
HalfNormPath g_half_norm = HalfNormPath::staged;                 // likewise
}  // namespace

bool is_available() { return false; }
int device_count() { return 0; }
std::string unavailable_reason() { return kReason; }
std::string library_versions() { return "no CUDA backend in this build"; }
std::string device_name(int device) { absent("device_name", device); }
void synchronize(int device) { absent("synchronize", device); }
uint64_t host_sync_count() { return 0; }
MemoryStats memory_stats(int device) { absent("memory_stats", device); }
void reset_peak_memory_stats(int device) { absent("reset_peak_memory_stats", device); }
void empty_cache(int device) { absent("empty_cache", device); }
void set_allow_tf32(bool allow) { g_allow_tf32 = allow; }
bool allow_tf32() { return g_allow_tf32; }
void set_cudnn_rnn(CudnnRnn path) { g_cudnn_rnn = path; }
CudnnRnn cudnn_rnn() { return g_cudnn_rnn; }
uint64_t rnn_stack_packs() { return 0; }
void set_bn_relu_path(BnReluPath path) { g_bn_relu = path; }
BnReluPath bn_relu_path() { return g_bn_relu; }
uint64_t bn_relu_fused_calls() { return 0; }
void set_half_attention_path(HalfAttentionPath path) { g_half_attention = path; }
HalfAttentionPath half_attention_path() { return g_half_attention; }
uint64_t cudnn_attention_calls() { return 0; }
void set_half_channels_last(bool on) { g_half_channels_last = on; }
bool half_channels_last() { return g_half_channels_last; }
uint64_t nhwc_convolutions() { return 0; }
void set_half_elementwise_path(HalfElementwisePath path) { g_half_elementwise = path; }
HalfElementwisePath half_elementwise_path() { return g_half_elementwise; }
uint64_t native_half_elementwise_calls() { return 0; }
void set_half_norm_path(HalfNormPath path) { g_half_norm = path; }
HalfNormPath half_norm_path() { return g_half_norm; }
uint64_t cudnn_norm_calls() { return 0; }
Tensor pinned_empty(const Dims& shape, DType dtype) { return empty(shape, {.dtype = dtype}); }
bool is_pinned(const Tensor&) { return false; }

struct EventTimer::State {};
EventTimer::EventTimer(int device) : device_(device) { absent("cuda::EventTimer", device); }
EventTimer::~EventTimer() = default;
void EventTimer::start() { absent("cuda::EventTimer::start", device_); }
void EventTimer::stop() { absent("cuda::EventTimer::stop", device_); }
double EventTimer::seconds() { absent("cuda::EventTimer::seconds", device_); }

struct Graph::State {};
Graph::Graph(int device) : device_(device) {}
Graph::~Graph() = default;
Graph::Graph(Graph&&) noexcept = default;
Graph& Graph::operator=(Graph&&) noexcept = default;
void Graph::capture(const std::function<void()>&) { absent("cuda::Graph::capture", device_); }
void Graph::replay() { absent("cuda::Graph::replay", device_); }
void Graph::set_lr(double) { absent("cuda::Graph::set_lr", device_); }
bool Graph::captured() const { return false; }
int64_t Graph::replays() const { return 0; }
void Graph::reset() noexcept {}

}  // namespace reel::cuda
