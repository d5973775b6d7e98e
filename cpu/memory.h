// The CPU allocator's counters, as cuda::memory_stats gives them for a GPU: bytes held
// by live tensors (rounded up to the allocator's size classes) and the most held at once.
//
//   reel::cpu::reset_peak_memory_stats();
//   Tensor y = scaled_dot_product_attention(q, k, v);
//   size_t extra = reel::cpu::memory_stats().peak_allocated - before;
#pragma once
#include <cstddef>

namespace reel::cpu {

struct MemoryStats {
  size_t allocated = 0;       // bytes in live CPU tensors now
  size_t peak_allocated = 0;  // the most at once since start or reset_peak_memory_stats()
  size_t cached = 0;          // bytes of freed blocks kept for reuse (see empty_cache)
};
MemoryStats memory_stats();
// Sets the peak to what is allocated now.
void reset_peak_memory_stats();
// Gives every cached block back to the system, as torch.cuda.empty_cache does for a GPU.
// Freed tensors' blocks are kept for reuse (up to 2 GiB, or twice the most ever live)
// so that a training step allocates nothing; after a one-off peak (a big evaluation)
// this returns that memory.
void empty_cache();

}  // namespace reel::cpu
