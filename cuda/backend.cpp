// The CUDA backend's memory, its copies between the host and devices, synchronize,
// the small tensor helpers, and its registration with the backend registry.
//
// Copies, by direction:
//   host -> device   asynchronous: from the caller's pinned memory directly, otherwise
//                    through a pinned staging block (the host gathers strides there),
//                    then a device kernel converts dtype / scatters strides if needed;
//   device -> host   the device converts and packs first, one copy, then the host waits
//                    (counted in host_sync_count()): the CPU reads the values next;
//   device -> device same device: a kernel (copy.cu); two devices: a peer copy
//                    ordered on both streams with events, never a host wait.
#include "internal/backend.h"

#include <fmt/format.h>

#include <optional>

#include "internal/allocator.h"
#include "internal/graph.h"
#include "cuda.h"

namespace reel::cuda {

// ---- memory
void* CudaBackend::allocate(size_t nbytes) { return device_alloc(ctx(), nbytes); }

void CudaBackend::deallocate(void* ptr, size_t nbytes) {
  // No checks that can throw: this runs in Storage's destructor, possibly after main.
  device_free(ctx(), ptr, nbytes);
}

void CudaBackend::synchronize() { ctx().sync("synchronize"); }

void CudaBackend::expect_here(const char* op, std::initializer_list<const Tensor*> ts) const {
  for (const Tensor* t : ts) {
    if (t->defined() && !(t->device() == device_))
      throw Error(fmt::format("{}: expected every tensor on {}, got a {} tensor of shape {} on {}; move it with .to()",
                              op, device_.str(), dtype_name(t->dtype()), t->shape().str(), t->device().str()));
  }
}

// ---- helpers
Tensor scratch(Context& ctx, const Dims& shape, DType dtype) {
  return empty(shape, {.dtype = dtype, .device = Device::cuda(ctx.device)});
}

Tensor view_of(const Tensor& t, const Dims& shape, const Dims& strides, int64_t offset) {
  return storage_view(t, shape, strides, offset);
}

Tensor contiguous_copy(const Tensor& t) {
  if (t.is_contiguous()) return t;
  CudaBackend& be = backend_of(t);
  Tensor c = scratch(be.ctx(), t.shape(), t.dtype());
  be.copy_same_device(c, t);
  return c;
}

// ---- copies across devices
namespace {
size_t nbytes_of(const Tensor& t) { return size_t(t.numel()) * t.element_size(); }

void copy_from_host(const Tensor& dst, const Tensor& src) {
  CudaBackend& be = backend_of(dst);
  Context& ctx = be.ctx();
  // A captured copy would read the same (staging) host memory at every replay, not the next batch.
  forbid_in_capture(ctx, "copy from cpu",
                    "reads host memory, which a replay would read again as it is then, not your next batch; copy "
                    "inputs into a device tensor made before the capture (x.copy_(batch)) before each replay()");
  size_t bytes = nbytes_of(src);
  const void* host = src.data_ptr();
  std::optional<PinnedBuffer> stage;
  if (!src.is_contiguous() || !pinned_contains(host)) {
    // Pageable (or strided) source: pack it into pinned memory so the copy is asynchronous.
    stage.emplace(bytes);
    backend_for(kCPU).copy(from_blob(stage->get(), src.shape(), src.dtype()), src);
    host = stage->get();
  }
  bool direct = dst.is_contiguous() && dst.dtype() == src.dtype();
  Tensor target = direct ? dst : scratch(ctx, src.shape(), src.dtype());
  check(cudaMemcpyAsync(target.data_ptr(), host, bytes, cudaMemcpyHostToDevice, ctx.stream), "copy",
        "cudaMemcpyAsync (host to device)");
  pinned_record_use(host, ctx);
  sync_if_debugging("copy from cpu");
  if (!direct) be.copy_same_device(dst, target);
}

void copy_to_host(const Tensor& dst, const Tensor& src) {
  CudaBackend& be = backend_of(src);
  Context& ctx = be.ctx();
  forbid_in_capture(ctx, "copy to cpu (item(), printing, .cpu())", "waits for the GPU (a host synchronisation)");
  // Convert and pack on the device, where it is cheap.
  Tensor packed = src;
  if (!src.is_contiguous() || src.dtype() != dst.dtype()) {
    packed = scratch(ctx, src.shape(), dst.dtype());
    be.copy_same_device(packed, src);
  }
  size_t bytes = nbytes_of(packed);
  if (dst.is_contiguous()) {
    check(cudaMemcpyAsync(dst.data_ptr(), packed.data_ptr(), bytes, cudaMemcpyDeviceToHost, ctx.stream), "copy",
          "cudaMemcpyAsync (device to host)");
    ctx.sync("copy to cpu");
    return;
  }
  PinnedBuffer stage(bytes);
  check(cudaMemcpyAsync(stage.get(), packed.data_ptr(), bytes, cudaMemcpyDeviceToHost, ctx.stream), "copy",
        "cudaMemcpyAsync (device to host)");
  stage.use(ctx);
  ctx.sync("copy to cpu");
  backend_for(kCPU).copy(dst, from_blob(stage.get(), dst.shape(), dst.dtype()));
}

// `waiter` runs what follows only after everything queued so far on `signaller`.
void order_after(Context& waiter, Context& signaller) {
  context(signaller.device);  // an event belongs to the current device
  cudaEvent_t ev = nullptr;
  check(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming), "copy", "cudaEventCreateWithFlags");
  check(cudaEventRecord(ev, signaller.stream), "copy", "cudaEventRecord");
  check(cudaStreamWaitEvent(waiter.stream, ev, 0), "copy", "cudaStreamWaitEvent");
  check(cudaEventDestroy(ev), "copy", "cudaEventDestroy");  // released once it has fired
}

void copy_peer(const Tensor& dst, const Tensor& src) {
  CudaBackend& sbe = backend_of(src);
  CudaBackend& dbe = backend_of(dst);
  // The copy orders two devices' streams with events: a capture of one of them would take
  // in the other's work (or fail with an opaque status). Refused like every host wait.
  std::string op = fmt::format("copy from {} to {}", src.device().str(), dst.device().str());
  const char* why = "a copy between GPUs orders both devices' streams with events";
  forbid_in_capture(context(dst.device().index), op.c_str(), why);
  Context& sc = sbe.ctx();
  forbid_in_capture(sc, op.c_str(), why);
  Tensor packed = src;
  if (!src.is_contiguous() || src.dtype() != dst.dtype()) {
    packed = scratch(sc, src.shape(), dst.dtype());
    sbe.copy_same_device(packed, src);
  }
  Context& dc = dbe.ctx();
  Tensor target = dst.is_contiguous() ? dst : scratch(dc, dst.shape(), dst.dtype());
  // target was allocated (and maybe written) on dc's stream; the copy runs on sc's.
  order_after(sc, dc);
  context(sc.device);
  check(cudaMemcpyPeerAsync(target.data_ptr(), dc.device, packed.data_ptr(), sc.device, nbytes_of(packed), sc.stream),
        "copy", "cudaMemcpyPeerAsync");
  sync_if_debugging("copy (between GPUs)");
  order_after(dc, sc);
  if (target.impl() != dst.impl()) dbe.copy_same_device(dst, target);
  context(sc.device);  // scratch on the source device is freed on its own stream
}
}  // namespace

void CudaBackend::copy(const Tensor& dst, const Tensor& src) {
  if (dst.numel() == 0) return;
  Device dd = dst.device(), sd = src.device();
  if (dd == sd) {
    expect_here("copy", {&dst, &src});
    copy_same_device(dst, src);
  } else if (dd.is_cuda() && sd.is_cuda()) {
    copy_peer(dst, src);
  } else if (dd.is_cuda()) {
    copy_from_host(dst, src);
  } else {
    copy_to_host(dst, src);
  }
}

// ---- registration
// the registered backend is the low-precision layer around the device's CudaBackend
CudaBackend& backend_of(const Tensor& t) { return inner_backend(backend_for(t.device())); }

namespace {
Backend* get_cuda(int index) {
  Context& ctx = context(index);  // throws Error when CUDA or the device is absent
  Backend* be = ctx.backend.load(std::memory_order_acquire);
  if (!be) {
    std::lock_guard<std::mutex> lock(ctx.mu);
    be = ctx.backend.load(std::memory_order_acquire);
    if (!be) {
      be = make_backend(index);  // lives as long as the process, like the context
      ctx.backend.store(be, std::memory_order_release);
    }
  }
  return be;
}
struct Registrar {
  Registrar() { register_backend(DeviceType::CUDA, get_cuda); }
} registrar;
}  // namespace

}  // namespace reel::cuda
