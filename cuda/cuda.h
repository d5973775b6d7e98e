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
// "NVIDIA H100 80GB HBM3, compute capability 9.0, 132 SMs"; throws Error for a missing device.
std::string device_name(int device = 0);

// Waits until every op queued on the device has finished (a host synchronisation).
void synchronize(int device = 0);

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

// A CPU tensor in page-locked (pinned) host memory: its copy to a GPU is asynchronous.
// Reusing the memory is safe: a freed block is handed out again only after the copies
// that read it have finished. Without CUDA it is an ordinary CPU tensor.
// Writing into a pinned tensor while its copy may still be queued is a race: take a
// fresh pinned_empty() per batch (blocks are cached, so this costs no allocation).
Tensor pinned_empty(const Dims& shape, DType dtype = DType::f32);
// Whether `t`'s storage is pinned host memory from pinned_empty().
bool is_pinned(const Tensor& t);

}  // namespace reel::cuda
