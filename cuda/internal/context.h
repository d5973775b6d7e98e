// The per-device context: the one place that holds a device's stream, library
// handles, properties, workspace and caches. Internal to cuda/ (it includes the CUDA
// runtime header; the public cuda/cuda.h does not).
//
// One compute stream per device, created non-blocking: every kernel, library call,
// stream-ordered allocation and copy of that device is queued on it, so ops are
// ordered among themselves without the host ever waiting. The host waits only in
// Context::sync() (item(), printing, copies to the CPU, synchronize()).
#pragma once
#include <cuda_runtime.h>

#include <atomic>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "../../tensor/backend.h"

// Library handles, declared here so that this header needs neither cuBLAS nor cuDNN.
struct cublasLtContext;
struct cudnnContext;

namespace reel::cuda {

// A fault a kernel found in its data (an index out of range) and cannot throw: it is
// written to pinned host memory and turned into a reel::Error at the next host
// synchronisation of the device, naming the op.
struct DeviceFault {
  int code;       // FaultCode, 0 = none
  int pad;
  long long value;  // the offending index
  long long bound;  // the valid range is [0, bound)
};
enum FaultCode : int {
  kFaultNone = 0,
  kFaultCrossEntropyLabel,
  kFaultIndexSelect,
  kFaultIndexAdd,
  kFaultGather,
  kFaultScatterAdd,
  kFaultScatter,
};

struct MatmulCache;   // cuda/matmul.cpp
struct ConvCache;     // cuda/conv.cpp
struct CaptureState;  // cuda/internal/graph.h

struct Context {
  int device = 0;
  cudaStream_t stream = nullptr;
  cudaMemPool_t pool = nullptr;
  // properties, read once
  std::string name;
  int sm_count = 1, cc_major = 0, cc_minor = 0, max_threads_per_sm = 2048;
  size_t smem_optin = 48 * 1024;  // shared memory a block may take with the opt-in (cudaFuncSetAttribute)
  size_t total_memory = 0;

  // pinned and mapped: kernels write through `fault_device`, the host reads `fault` after a sync
  DeviceFault* fault = nullptr;
  DeviceFault* fault_device = nullptr;

  std::atomic<Backend*> backend{nullptr};  // this device's CudaBackend, made on first use

  // memory statistics (bytes handed out through allocate())
  std::atomic<size_t> allocated{0}, peak_allocated{0};

  // Library state, created on first use under `mu`. cuDNN handles are not safe to
  // use from two threads at once, so conv calls hold `mu` while they use `dnn`.
  std::mutex mu;
  cublasLtContext* lt = nullptr;
  void* lt_workspace = nullptr;  // cuBLASLt's workspace: one buffer, reused in stream order
  size_t lt_workspace_bytes = 0;
  cudnnContext* dnn = nullptr;
  MatmulCache* matmul_cache = nullptr;
  ConvCache* conv_cache = nullptr;

  // CUDA graphs (graph.cpp): the capture in progress on `stream` (read without the lock
  // on every allocation), and the graphs alive, whose allocations device_free must not
  // hand back while they may be replayed. `graphs` and every CaptureState under graph_mu.
  std::mutex graph_mu;
  std::atomic<CaptureState*> capture{nullptr};
  std::vector<CaptureState*> graphs;
  std::atomic<int> graph_count{0};

  // Blocks until the stream is idle (counted in host_sync_count()), then reports any
  // DeviceFault as an Error naming `op`.
  void sync(const char* op);
  // Throws the pending DeviceFault, if any (call only after a sync).
  void raise_fault(const char* op);
  // Grid size for a grid-stride loop of n items at `threads` per block, `per_thread` each.
  unsigned grid_for(int64_t n, int threads, int per_thread = 1) const;
};

// The context of `device`, made current on this thread; created on first use.
// Throws Error when CUDA or that device is absent.
Context& context(int device);
inline Context& context(const Tensor& t) { return context(t.device().index); }

// Counts one host synchronisation (for host_sync_count()).
void count_host_sync();

// Error checks: each turns a failure into reel::Error("op: <library> error: <message>").
[[noreturn]] void fail_cuda(const char* op, cudaError_t e, const char* what = nullptr);
inline void check(cudaError_t e, const char* op, const char* what = nullptr) {
  if (e != cudaSuccess) fail_cuda(op, e, what);
}
// REEL_CUDA_SYNC=1 (read once): after every launch and library call, wait for the stream
// and check, so that an asynchronous fault (an illegal address, a bad index found by a
// kernel) is an Error naming the op that caused it instead of a later one. For debugging:
// it serialises host and device. These waits are not counted in host_sync_count().
bool launch_sync_enabled();
// Waits for the current device's stream and raises what it found, naming `op`; nothing
// while the stream is being captured (a graph runs nothing then).
void launch_sync(const char* op);
inline void sync_if_debugging(const char* op) {
  if (launch_sync_enabled()) launch_sync(op);
}

// After every kernel launch: a bad launch configuration or an earlier asynchronous
// fault becomes an Error naming the op.
inline void check_launch(const char* op) {
  cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) fail_cuda(op, e, "kernel launch");
  sync_if_debugging(op);
}
[[noreturn]] void fail_cublas(const char* op, int status, const char* what);
[[noreturn]] void fail_cudnn(const char* op, int status, const char* what);

}  // namespace reel::cuda
