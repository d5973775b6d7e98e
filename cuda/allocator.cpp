// Stream-ordered device memory, pinned host memory with reuse after the copies that
// read it, and the memory statistics of cuda/cuda.h. See internal/allocator.h for the design.
#include "internal/allocator.h"
#include "internal/graph.h"

#include <fmt/format.h>

#include <map>
#include <vector>

#include "cuda.h"

namespace reel::cuda {

// ---- device memory
namespace {
size_t pool_attribute(Context& ctx, cudaMemPoolAttr attr) {
  uint64_t v = 0;
  check(cudaMemPoolGetAttribute(ctx.pool, attr, &v), "memory_stats", "cudaMemPoolGetAttribute");
  return size_t(v);
}

void note_alloc(Context& ctx, size_t nbytes) {
  size_t now = ctx.allocated.fetch_add(nbytes, std::memory_order_relaxed) + nbytes;
  size_t peak = ctx.peak_allocated.load(std::memory_order_relaxed);
  while (now > peak && !ctx.peak_allocated.compare_exchange_weak(peak, now, std::memory_order_relaxed)) {}
}
}  // namespace

void* device_alloc(Context& ctx, size_t nbytes) {
  if (nbytes == 0) return nullptr;
  void* p = nullptr;
  cudaError_t e = cudaMallocAsync(&p, nbytes, ctx.stream);
  if (e == cudaErrorMemoryAllocation) {
    (void)cudaGetLastError();
    // Waiting for the stream is impossible inside a graph capture: no second try there.
    forbid_in_capture(ctx, "allocate", fmt::format("ran out of memory for {} bytes and would wait for the GPU "
                                                   "to trim the pool", nbytes).c_str());
    // The pool holds freed blocks of other sizes: wait for the stream, hand them back
    // to the driver, and try once more before giving up.
    count_host_sync();
    check(cudaStreamSynchronize(ctx.stream), "allocate", "cudaStreamSynchronize");
    check(cudaMemPoolTrimTo(ctx.pool, 0), "allocate", "cudaMemPoolTrimTo");
    e = cudaMallocAsync(&p, nbytes, ctx.stream);
    if (e == cudaErrorMemoryAllocation) {
      (void)cudaGetLastError();
      throw Error(fmt::format("cuda:{}: out of memory allocating {} bytes ({:.1f} MiB held by tensors, {:.1f} MiB "
                              "reserved, {:.1f} MiB on the device)",
                              ctx.device, nbytes, double(ctx.allocated.load()) / 1048576.0,
                              double(pool_attribute(ctx, cudaMemPoolAttrReservedMemCurrent)) / 1048576.0,
                              double(ctx.total_memory) / 1048576.0));
    }
  }
  check(e, "allocate", "cudaMallocAsync");
  note_alloc(ctx, nbytes);
  if (CaptureState* cs = active_capture(ctx)) {  // an allocation node: the graph's until freed in it
    std::lock_guard<std::mutex> lock(ctx.graph_mu);
    cs->persistent.emplace(p, nbytes);
    for (CaptureState* g : ctx.graphs)  // an address a dead capture once handed out is this graph's now
      if (g->dead) g->persistent.erase(p);
  }
  return p;
}

void device_free(Context& ctx, void* ptr, size_t nbytes) noexcept {
  if (!ptr) return;
  ctx.allocated.fetch_sub(nbytes, std::memory_order_relaxed);
  // The rules of internal/graph.h: a live graph's allocation and a block freed during a
  // capture that did not allocate it stay until the graph that may read them is destroyed.
  if (ctx.graph_count.load(std::memory_order_acquire) > 0 || active_capture(ctx)) {
    std::lock_guard<std::mutex> lock(ctx.graph_mu);
    for (CaptureState* g : ctx.graphs) {
      auto it = g->persistent.find(ptr);
      if (it == g->persistent.end()) continue;
      if (!g->dead) {
        g->owner_gone.insert(ptr);
        return;
      }
      g->persistent.erase(it);
      if (g->persistent.empty()) {  // the last tensor of a dead capture: stop looking
        std::erase(ctx.graphs, g);
        ctx.graph_count.fetch_sub(1, std::memory_order_acq_rel);
      }
      return;
    }
    if (CaptureState* cs = ctx.capture.load(std::memory_order_acquire)) {
      auto it = cs->persistent.find(ptr);
      if (it == cs->persistent.end()) {
        cs->deferred.emplace_back(ptr, nbytes);
        return;
      }
      cs->persistent.erase(it);  // freed in the graph: a free node
    }
  }
  // After main returns the runtime may already be unloading: the memory goes with the process.
  if (cudaFreeAsync(ptr, ctx.stream) != cudaSuccess) (void)cudaGetLastError();
}

MemoryStats memory_stats(int device) {
  Context& ctx = context(device);
  MemoryStats s;
  s.allocated = ctx.allocated.load(std::memory_order_relaxed);
  s.peak_allocated = ctx.peak_allocated.load(std::memory_order_relaxed);
  s.reserved = pool_attribute(ctx, cudaMemPoolAttrReservedMemCurrent);
  s.peak_reserved = pool_attribute(ctx, cudaMemPoolAttrReservedMemHigh);
  return s;
}

void reset_peak_memory_stats(int device) {
  Context& ctx = context(device);
  ctx.peak_allocated.store(ctx.allocated.load(std::memory_order_relaxed), std::memory_order_relaxed);
  uint64_t zero = 0;  // resets the high-water mark to the current value
  check(cudaMemPoolSetAttribute(ctx.pool, cudaMemPoolAttrReservedMemHigh, &zero), "reset_peak_memory_stats",
        "cudaMemPoolSetAttribute");
}

void empty_cache(int device) {
  Context& ctx = context(device);
  ctx.sync("empty_cache");
  check(cudaMemPoolTrimTo(ctx.pool, 0), "empty_cache", "cudaMemPoolTrimTo");
}

// ---- pinned host memory
namespace {
constexpr size_t kPinnedCacheLimit = size_t(1) << 30;  // free pinned bytes kept for reuse

struct PinnedBlock {
  void* ptr = nullptr;
  size_t size = 0;
  bool in_use = false;
  std::vector<Context*> users;                      // streams that copied from or to it
  std::vector<std::pair<int, cudaEvent_t>> pending;  // (device, event) recorded at its release
};

struct PinnedCache {
  std::mutex mu;
  std::map<uintptr_t, PinnedBlock*> blocks;        // by address, for interior pointers
  std::multimap<size_t, PinnedBlock*> free_blocks;  // by size
  size_t free_bytes = 0;
  std::vector<std::pair<int, cudaEvent_t>> spare_events;
};
PinnedCache& pinned_cache() {
  static PinnedCache* c = new PinnedCache();  // never destroyed: tensors may die after main
  return *c;
}

// Power-of-two classes up to 16 MiB, then multiples of 2 MiB: a DataLoader's batches reuse exactly.
size_t size_class(size_t n) {
  if (n <= 4096) return 4096;
  if (n <= (size_t(16) << 20)) {
    size_t c = 4096;
    while (c < n) c <<= 1;
    return c;
  }
  size_t step = size_t(2) << 20;
  return (n + step - 1) / step * step;
}

// Whether every copy recorded on b has finished; recycles its events when so. Caller holds the lock.
bool settled(PinnedCache& c, PinnedBlock* b) {
  for (auto& [device, ev] : b->pending) {
    cudaError_t e = cudaEventQuery(ev);
    if (e == cudaErrorNotReady) {
      (void)cudaGetLastError();
      return false;
    }
  }
  for (auto& pe : b->pending) c.spare_events.push_back(pe);
  b->pending.clear();
  return true;
}

cudaEvent_t take_event(PinnedCache& c, int device) {
  for (size_t i = 0; i < c.spare_events.size(); ++i) {
    if (c.spare_events[i].first == device) {
      cudaEvent_t ev = c.spare_events[i].second;
      c.spare_events[i] = c.spare_events.back();
      c.spare_events.pop_back();
      return ev;
    }
  }
  cudaEvent_t ev = nullptr;
  check(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming), "pinned memory", "cudaEventCreateWithFlags");
  return ev;
}

PinnedBlock* find_block(PinnedCache& c, const void* ptr) {
  auto it = c.blocks.upper_bound(uintptr_t(ptr));
  if (it == c.blocks.begin()) return nullptr;
  --it;
  PinnedBlock* b = it->second;
  return uintptr_t(ptr) < it->first + b->size ? b : nullptr;
}
}  // namespace

void* pinned_alloc(size_t nbytes) {
  PinnedCache& c = pinned_cache();
  size_t want = size_class(std::max<size_t>(nbytes, 1));
  std::lock_guard<std::mutex> lock(c.mu);
  // a settled free block of this class, or of the next one up
  for (auto it = c.free_blocks.lower_bound(want); it != c.free_blocks.end() && it->first <= 2 * want; ++it) {
    PinnedBlock* b = it->second;
    if (!settled(c, b)) continue;
    c.free_blocks.erase(it);
    c.free_bytes -= b->size;
    b->in_use = true;
    return b->ptr;
  }
  void* p = nullptr;
  cudaError_t e = cudaHostAlloc(&p, want, cudaHostAllocPortable);
  if (e != cudaSuccess) fail_cuda("pinned memory", e, fmt::format("cudaHostAlloc of {} bytes", want).c_str());
  auto* b = new PinnedBlock{p, want, true, {}, {}};
  c.blocks.emplace(uintptr_t(p), b);
  return p;
}

void pinned_free(void* ptr, size_t) noexcept {
  if (!ptr) return;
  PinnedCache& c = pinned_cache();
  std::lock_guard<std::mutex> lock(c.mu);
  PinnedBlock* b = find_block(c, ptr);
  if (!b || !b->in_use) return;
  // An event recorded on a capturing stream would become part of the graph: release the
  // block once the capture has ended (Graph::capture calls back).
  for (Context* ctx : b->users) {
    if (!active_capture(*ctx)) continue;
    std::lock_guard<std::mutex> glock(ctx->graph_mu);
    if (CaptureState* cs = ctx->capture.load(std::memory_order_acquire)) {
      cs->pinned_deferred.emplace_back(ptr, b->size);
      return;
    }
  }
  try {
    for (Context* ctx : b->users) {
      context(ctx->device);  // events belong to the current device
      cudaEvent_t ev = take_event(c, ctx->device);
      check(cudaEventRecord(ev, ctx->stream), "pinned memory", "cudaEventRecord");
      b->pending.emplace_back(ctx->device, ev);
    }
  } catch (const Error&) {
    // Cannot order the reuse after the copies (the runtime is failing or unloading): never reuse it.
    return;
  }
  b->users.clear();
  b->in_use = false;
  c.free_blocks.emplace(b->size, b);
  c.free_bytes += b->size;
  // Over the limit: give settled blocks back to the driver, largest first.
  for (auto it = c.free_blocks.end(); c.free_bytes > kPinnedCacheLimit && it != c.free_blocks.begin();) {
    --it;
    PinnedBlock* f = it->second;
    if (!settled(c, f)) continue;
    c.free_bytes -= f->size;
    c.blocks.erase(uintptr_t(f->ptr));
    (void)cudaFreeHost(f->ptr);
    delete f;
    it = c.free_blocks.erase(it);
  }
}

bool pinned_contains(const void* ptr) {
  PinnedCache& c = pinned_cache();
  std::lock_guard<std::mutex> lock(c.mu);
  PinnedBlock* b = find_block(c, ptr);
  return b && b->in_use;
}

void pinned_record_use(const void* ptr, Context& ctx) {
  PinnedCache& c = pinned_cache();
  std::lock_guard<std::mutex> lock(c.mu);
  PinnedBlock* b = find_block(c, ptr);
  if (!b) return;
  for (Context* u : b->users)
    if (u == &ctx) return;
  b->users.push_back(&ctx);
}

// ---- public API
namespace {
void release_pinned(void* data, size_t nbytes) { pinned_free(data, nbytes); }
}  // namespace

Tensor pinned_empty(const Dims& shape, DType dtype) {
  for (int64_t s : shape)
    if (s < 0) throw Error(fmt::format("pinned_empty: shape {} has a negative size", shape.str()));
  check_shape("pinned_empty", shape, dtype_size(dtype), Site{nullptr, 0});
  if (!is_available()) return empty(shape, {.dtype = dtype});  // nothing to pin for
  size_t nbytes = size_t(numel_of(shape)) * size_t(dtype_size(dtype));
  void* p = pinned_alloc(nbytes);
  auto impl = make_ref<TensorImpl>();
  impl->shape = shape;
  impl->strides = contiguous_strides(shape);
  impl->dtype = dtype;
  impl->storage = make_ref<Storage>(p, nbytes, kCPU, &release_pinned);
  return Tensor(std::move(impl));
}

bool is_pinned(const Tensor& t) {
  return t.defined() && t.device().is_cpu() && t.storage()->data() && is_available() &&
         pinned_contains(t.storage()->data());
}

}  // namespace reel::cuda
