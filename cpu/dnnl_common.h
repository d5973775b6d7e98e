// oneDNN plumbing shared by the CPU kernels: the engine, this thread's stream,
// memory descriptors of strided tensors, a per-thread cache of ready primitives
// keyed by shapes and strides (so a training step creates no primitive
// descriptors after its first run), and the internal matmul that convolution
// lowers onto. Internal to cpu/.
#pragma once
#include <array>
#include <dnnl.hpp>
#include <omp.h>
#include <memory>
#include <unordered_map>

#include "../tensor/backend.h"

namespace reel::cpu {

dnnl::engine& dnnl_engine();
// oneDNN streams are not meant to be shared between threads: one per thread.
dnnl::stream& dnnl_stream();

// Whether oneDNN takes these strides: sorted by stride, each dim must step over the
// whole extent of the dims inside it (views that interleave them, legal for us, are not).
bool dnnl_strides_ok(const int64_t* shape, const int64_t* strides, int n);
// The descriptor of `t` (f32, f16 or bf16) with its own dims and strides (stride 0 too;
// see dnnl_strides_ok).
dnnl::memory::desc strided_desc(const Tensor& t);
dnnl::memory::desc strided_desc(const Dims& shape, const Dims& strides, DType dtype = DType::f32);
// A memory object over t's data (no copy).
dnnl::memory memory_of(const dnnl::memory::desc& md, const Tensor& t);
// A scratch memory object for md, its bytes from the CPU allocator's block cache.
struct Scratch {
  Tensor bytes;
  dnnl::memory mem;
};
Scratch scratch(const dnnl::memory::desc& md);
// A contiguous copy of t (not recorded on the tape), and one converted to dtype.
Tensor dense_copy(const Tensor& t);
Tensor dense_copy_as(const Tensor& t, DType dtype);
// oneDNN's name for f32, f64 (no kernels), f16 and bf16
dnnl::memory::data_type dnnl_type(DType t);
// A view of base's storage with the given geometry (offset in elements from storage start).
Tensor view_of(const Tensor& base, const Dims& shape, const Dims& strides, int64_t offset);

// Up to 72 integers naming one primitive configuration (the last one: the thread count).
struct PlanKey {
  std::array<int64_t, 72> v{};
  int n = 0;
  void add(int64_t x);
  void add(const Dims& d) {
    add(d.size());
    for (int64_t x : d) add(x);
  }
  bool operator==(const PlanKey& o) const {
    if (n != o.n) return false;
    for (int i = 0; i < n; ++i)
      if (v[size_t(i)] != o.v[size_t(i)]) return false;
    return true;
  }
};
struct PlanKeyHash {
  size_t operator()(const PlanKey& k) const {
    uint64_t h = 1469598103934665603ull;  // FNV-1a over the words
    for (int i = 0; i < k.n; ++i) h = (h ^ uint64_t(k.v[size_t(i)])) * 1099511628211ull;
    return size_t(h);
  }
};

// Ready primitives by key. One per thread and plan type (thread_local at the use site):
// lookups take no lock. Bounded: a run that sweeps shapes starts over when full. The
// pool's thread count is part of every key: oneDNN sizes a primitive's work split and
// scratchpad for the count at creation, and the count follows the machine's load
// (tensor/parallel.h), so each count keeps its own primitives.
template <typename Plan>
class PlanCache {
 public:
  template <typename Make>
  Plan& get(const PlanKey& key, Make&& make) {
    PlanKey k = key;
    k.add(omp_get_max_threads());
    auto it = map_.find(k);
    if (it != map_.end()) return *it->second;
    if (map_.size() >= kCapacity) map_.clear();
    return *map_.emplace(k, std::make_unique<Plan>(make())).first->second;
  }

 private:
  static constexpr size_t kCapacity = 512;
  std::unordered_map<PlanKey, std::unique_ptr<Plan>, PlanKeyHash> map_;
};

// out = a @ b, batched: a [Ba, M, K], b [Bb, K, N] with Ba, Bb either 1 or out's B;
// out [B, M, N] contiguous. Optional bias [N] added to every row, or row_bias [M] to
// every column, then an optional relu. a, b any strides; f32 runs on oneDNN, f64 on loops;
// bf16 a and b (oneDNN) with out and the biases bf16 or f32.
struct MatmulArgs {
  Tensor out, a, b;
  Tensor bias;      // [N] or undefined
  Tensor row_bias;  // [M] or undefined
  bool relu = false;
};
void matmul_into(const MatmulArgs& args);

}  // namespace reel::cpu
