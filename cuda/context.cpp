// Device discovery, the per-device contexts, host synchronisation, deferred device
// faults, and the error messages of the CUDA runtime, cuBLAS and cuDNN.
//
// Nothing here runs at static-initialisation time: the runtime loads the driver
// (libcuda.so.1) lazily on the first call, so a CUDA build starts and runs its CPU
// work on a machine without a driver; the first call finds it missing and
// is_available() says why.
#include <cublasLt.h>
#include <cudnn.h>
#include <fmt/format.h>

#include <cstdlib>
#include <memory>
#include <vector>

#include "internal/context.h"
#include "internal/decide.h"
#include "internal/dnn.h"
#include "internal/launch_geometry.h"
#include "internal/graph.h"
#include "cuda.h"

namespace reel::cuda {

namespace {
std::atomic<uint64_t> g_host_syncs{0};
std::atomic<bool> g_allow_tf32{false};

// What the process learned about its devices, once; contexts are created on first use
// and never destroyed (tensors may be freed after main returns).
struct Registry {
  std::once_flag probed;
  int count = 0;
  std::string reason;
  std::mutex mu;
  std::unique_ptr<std::atomic<Context*>[]> contexts;
};
Registry& registry() {
  static Registry* r = new Registry();
  return *r;
}

Registry& probe() {
  Registry& r = registry();
  std::call_once(r.probed, [&r] {
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    // The driver's CUDA version against the runtime's, first: a driver too old for the
    // runtime fails every call with an opaque status, so say what to install.
    int driver = 0, runtime = 0;
    if (cudaDriverGetVersion(&driver) != cudaSuccess) (void)cudaGetLastError();
    if (cudaRuntimeGetVersion(&runtime) != cudaSuccess) (void)cudaGetLastError();
    std::string version_problem = driver ? decide::driver_problem(driver, runtime) : "";
    if (!version_problem.empty()) {
      r.reason = "CUDA driver too old: " + version_problem;  // test/cuda/main.cpp fails on these words
      n = 0;
    } else if (e != cudaSuccess) {
      (void)cudaGetLastError();  // a failed probe must not poison later calls
      bool no_driver = e == cudaErrorInsufficientDriver || e == cudaErrorNoDevice ||
                       e == cudaErrorInitializationError || e == cudaErrorSystemDriverMismatch;
      r.reason = fmt::format("no CUDA device/driver usable: cudaGetDeviceCount failed: {} ({}){}",
                             cudaGetErrorString(e), cudaGetErrorName(e),
                             no_driver ? "; the CUDA driver (libcuda.so.1) or a GPU is missing" : "");
      n = 0;
    } else if (n == 0) {
      r.reason = "no CUDA device: the driver reports no GPU";
    }
    r.count = n;
    r.contexts.reset(new std::atomic<Context*>[size_t(std::max(n, 1))]);
    for (int i = 0; i < std::max(n, 1); ++i) r.contexts[size_t(i)] = nullptr;
  });
  return r;
}

template <typename T>
T attribute(cudaDeviceAttr a, int device) {
  int v = 0;
  check(cudaDeviceGetAttribute(&v, a, device), "cuda context", "cudaDeviceGetAttribute");
  return T(v);
}

Context* create_context(int device) {
  auto ctx = std::make_unique<Context>();
  ctx->device = device;
  const char* op = "cuda context";
  check(cudaSetDevice(device), op, "cudaSetDevice");
  cudaDeviceProp prop{};
  check(cudaGetDeviceProperties(&prop, device), op, "cudaGetDeviceProperties");
  ctx->name = prop.name;
  ctx->sm_count = prop.multiProcessorCount;
  ctx->cc_major = prop.major;
  ctx->cc_minor = prop.minor;
  ctx->max_threads_per_sm = prop.maxThreadsPerMultiProcessor;
  ctx->smem_optin = prop.sharedMemPerBlockOptin;
  ctx->total_memory = prop.totalGlobalMem;
  if (!attribute<int>(cudaDevAttrMemoryPoolsSupported, device))
    throw Error(fmt::format("cuda:{}: {} does not support stream-ordered memory pools (cudaMallocAsync), "
                            "which reel's CUDA backend needs",
                            device, ctx->name));
  // Non-blocking: the legacy default stream (used by other libraries) never serialises with ours.
  check(cudaStreamCreateWithFlags(&ctx->stream, cudaStreamNonBlocking), op, "cudaStreamCreateWithFlags");
  check(cudaDeviceGetDefaultMemPool(&ctx->pool, device), op, "cudaDeviceGetDefaultMemPool");
  // Keep freed memory in the pool for good: a training step then allocates without the driver.
  uint64_t keep = UINT64_MAX;
  check(cudaMemPoolSetAttribute(ctx->pool, cudaMemPoolAttrReleaseThreshold, &keep), op, "cudaMemPoolSetAttribute");
  void* fault = nullptr;
  check(cudaHostAlloc(&fault, sizeof(DeviceFault), cudaHostAllocMapped | cudaHostAllocPortable), op,
        "cudaHostAlloc (fault flag)");
  ctx->fault = static_cast<DeviceFault*>(fault);
  *ctx->fault = DeviceFault{};
  void* mapped = nullptr;
  check(cudaHostGetDevicePointer(&mapped, fault, 0), op, "cudaHostGetDevicePointer (fault flag)");
  ctx->fault_device = static_cast<DeviceFault*>(mapped);
  return ctx.release();
}
}  // namespace

Context& context(int device) {
  Registry& r = probe();
  if (device < 0 || device >= r.count) {
    if (r.count == 0) throw Error(fmt::format("cuda:{}: {}", device, r.reason));
    throw Error(fmt::format("cuda:{}: no such CUDA device: this machine has {} (cuda:0 to cuda:{})", device,
                            r.count, r.count - 1));
  }
  std::atomic<Context*>& slot = r.contexts[size_t(device)];
  Context* ctx = slot.load(std::memory_order_acquire);
  if (!ctx) {
    std::lock_guard<std::mutex> lock(r.mu);
    ctx = slot.load(std::memory_order_acquire);
    if (!ctx) {
      ctx = create_context(device);
      slot.store(ctx, std::memory_order_release);
    }
  }
  // Kernels launch on the current device: make it ours (cheap when it already is).
  int current = -1;
  if (cudaGetDevice(&current) != cudaSuccess || current != device) {
    cudaError_t e = cudaSetDevice(device);
    // At process exit the runtime unloads before the last tensors die: their frees are dropped.
    if (e == cudaErrorCudartUnloading) (void)cudaGetLastError();
    else check(e, "cuda context", "cudaSetDevice");
  }
  return *ctx;
}

void count_host_sync() { g_host_syncs.fetch_add(1, std::memory_order_relaxed); }

bool launch_sync_enabled() {
  static const bool on = decide::sync_mode_from_env(std::getenv("REEL_CUDA_SYNC"));
  return on;
}

void launch_sync(const char* op) {
  int device = 0;
  check(cudaGetDevice(&device), op, "cudaGetDevice (REEL_CUDA_SYNC)");
  Context& ctx = context(device);
  if (active_capture(ctx) || stream_capturing(ctx)) return;
  check(cudaStreamSynchronize(ctx.stream), op, "cudaStreamSynchronize after its launch (REEL_CUDA_SYNC=1)");
  ctx.raise_fault(op);
}

void Context::sync(const char* op) {
  // Inside a graph capture a wait would fail and invalidate the capture: say which op it was.
  forbid_in_capture(*this, op, "waits for the GPU (a host synchronisation)");
  count_host_sync();
  check(cudaStreamSynchronize(stream), op, "cudaStreamSynchronize");
  raise_fault(op);
}

void Context::raise_fault(const char* op) {
  volatile DeviceFault* f = fault;
  if (f->code == kFaultNone) return;
  DeviceFault got{f->code, 0, f->value, f->bound};
  f->code = kFaultNone;
  const char* what = "an op";
  switch (got.code) {
    case kFaultCrossEntropyLabel: what = "cross_entropy: label"; break;
    case kFaultIndexSelect: what = "index_select: index"; break;
    case kFaultIndexAdd: what = "index_add: index"; break;
    case kFaultGather: what = "gather: index"; break;
    case kFaultScatterAdd: what = "scatter_add: index"; break;
    case kFaultScatter: what = "scatter: index"; break;
    default: break;
  }
  throw Error(fmt::format("{} {} is out of range [0, {}) on cuda:{} (found by the kernel, reported at the next "
                          "host synchronisation: {}; the results of that op are undefined)",
                          what, got.value, got.bound, device, op));
}

unsigned Context::grid_for(int64_t n, int threads, int per_thread) const {
  return unsigned(geometry::grid_for(n, threads, per_thread, sm_count, max_threads_per_sm));
}

void fail_cuda(const char* op, cudaError_t e, const char* what) {
  (void)cudaGetLastError();
  throw Error(fmt::format("{}: CUDA error{}{}: {} ({})", op, what ? " in " : "", what ? what : "",
                          cudaGetErrorString(e), cudaGetErrorName(e)));
}

void fail_cublas(const char* op, int status, const char* what) {
  throw Error(fmt::format("{}: cuBLAS error in {}: {} (status {})", op, what,
                          cublasGetStatusString(cublasStatus_t(status)), status));
}

void fail_cudnn(const char* op, int status, const char* what) {
  char detail[512] = {0};
  cudnnGetLastErrorString(detail, sizeof(detail));
  throw Error(fmt::format("{}: cuDNN error in {}: {}{}{}", op, what, cudnnGetErrorString(cudnnStatus_t(status)),
                          detail[0] ? ": " : "", detail));
}

cudnnHandle_t create_dnn_handle(Context& ctx, const char* op) {
  int runtime = 0;
  check(cudaRuntimeGetVersion(&runtime), op, "cudaRuntimeGetVersion");
  std::string problem = decide::library_problem("cuDNN", long(cudnnGetVersion()), long(cudnnGetCudartVersion()),
                                                CUDNN_VERSION, runtime);
  if (!problem.empty()) throw Error(std::string(op) + ": " + problem);
  cudnnHandle_t h = nullptr;
  check_dnn(cudnnCreate(&h), op, "cudnnCreate");
  check_dnn(cudnnSetStream(h, ctx.stream), op, "cudnnSetStream");
  return h;
}

// ---- public API (cuda/cuda.h)
bool is_available() { return probe().count > 0; }
int device_count() { return probe().count; }
std::string unavailable_reason() { return probe().reason; }

std::string library_versions() {
  int driver = 0, runtime = 0;
  if (cudaDriverGetVersion(&driver) != cudaSuccess) (void)cudaGetLastError();
  if (cudaRuntimeGetVersion(&runtime) != cudaSuccess) (void)cudaGetLastError();
  using decide::cuda_version_str, decide::lib_version_str;
  return fmt::format("driver {}, runtime CUDA {} (built with {}), cuBLAS {} for CUDA {} (built with {}), cuDNN {} "
                     "for CUDA {} (built with {})",
                     driver ? "CUDA " + cuda_version_str(driver) : std::string("none (no libcuda.so.1)"),
                     cuda_version_str(runtime), cuda_version_str(CUDART_VERSION),
                     lib_version_str(long(cublasLtGetVersion())), cuda_version_str(long(cublasLtGetCudartVersion())),
                     lib_version_str(CUBLAS_VERSION), lib_version_str(long(cudnnGetVersion())),
                     cuda_version_str(long(cudnnGetCudartVersion())), lib_version_str(CUDNN_VERSION));
}

std::string device_name(int device) {
  Context& ctx = context(device);
  return fmt::format("{}, compute capability {}.{}, {} SMs", ctx.name, ctx.cc_major, ctx.cc_minor, ctx.sm_count);
}

void synchronize(int device) { context(device).sync("synchronize"); }
uint64_t host_sync_count() { return g_host_syncs.load(std::memory_order_relaxed); }
void set_allow_tf32(bool allow) { g_allow_tf32.store(allow, std::memory_order_relaxed); }
bool allow_tf32() { return g_allow_tf32.load(std::memory_order_relaxed); }

}  // namespace reel::cuda
