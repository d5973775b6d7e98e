// Memory for the CUDA backend. Internal to cuda/.
//
// Device memory is stream-ordered (cudaMallocAsync / cudaFreeAsync on the device's
// compute stream) from the device's default pool, whose release threshold is set to
// "never": freed blocks stay in the pool and the next allocation of that size is a
// pointer bump in the driver, with no cudaMalloc and no synchronisation. Because every
// op of a device runs on its one stream, a block freed by the host while kernels that
// read it are still queued is reused only after them.
//
// Pinned host memory is cached the same way: a freed block is reused only after the
// copies that read it (recorded as events) have completed.
#pragma once
#include <cstddef>

#include "context.h"

namespace reel::cuda {

// Device memory on ctx's stream; nbytes 0 gives nullptr. Throws Error when out of memory
// (after returning the pool's unused memory to the driver and trying once more).
void* device_alloc(Context& ctx, size_t nbytes);
// Returns memory to the pool in stream order. Never throws (called from destructors).
void device_free(Context& ctx, void* ptr, size_t nbytes) noexcept;

// A scratch buffer of device memory for the duration of one op.
class DeviceBuffer {
 public:
  DeviceBuffer(Context& ctx, size_t nbytes) : ctx_(ctx), nbytes_(nbytes), ptr_(device_alloc(ctx, nbytes)) {}
  ~DeviceBuffer() { device_free(ctx_, ptr_, nbytes_); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  void* get() const { return ptr_; }
  template <typename T> T* as() const { return static_cast<T*>(ptr_); }
  size_t size() const { return nbytes_; }

 private:
  Context& ctx_;
  size_t nbytes_;
  void* ptr_;
};

// Pinned host memory (page-locked, usable by every device).
void* pinned_alloc(size_t nbytes);
// Releases a block from pinned_alloc(); it is reused after the copies recorded on it.
void pinned_free(void* ptr, size_t nbytes) noexcept;
// Whether ptr lies inside a live pinned block.
bool pinned_contains(const void* ptr);
// Notes that a copy queued on ctx's stream reads or writes the pinned block holding ptr.
void pinned_record_use(const void* ptr, Context& ctx);

// A pinned staging buffer for one copy; on destruction it is released in stream order
// (after the copies recorded with use()).
class PinnedBuffer {
 public:
  explicit PinnedBuffer(size_t nbytes) : nbytes_(nbytes), ptr_(pinned_alloc(nbytes)) {}
  ~PinnedBuffer() { pinned_free(ptr_, nbytes_); }
  PinnedBuffer(const PinnedBuffer&) = delete;
  PinnedBuffer& operator=(const PinnedBuffer&) = delete;
  void* get() const { return ptr_; }
  void use(Context& ctx) const { pinned_record_use(ptr_, ctx); }

 private:
  size_t nbytes_;
  void* ptr_;
};

}  // namespace reel::cuda
