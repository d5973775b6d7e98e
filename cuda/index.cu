// Indexing along one dim: index_select, gather (reads through an index) and their
// gradients index_add, scatter_add (accumulate through an index, atomically); scatter
// (writes through an index; among repeated positions one write lands, unspecified which).
//
// Layout: any strides. Each op walks one tensor elementwise (out for the reads, src
// for the accumulations) with three operands in one offset calculator: the walked
// tensor, the indexed tensor with stride 0 along `dim` (the index supplies that
// coordinate) and the index (index_select/index_add: stride 1 along dim and 0
// elsewhere, as the index is 1-D; gather/scatter_add: its own strides).
// Launch shape: 256 threads, grid-stride, one element per iteration.
// Repeated indices in index_add/scatter_add add up through atomicAdd, so their order
// (and a float sum's last bits) varies from run to run; the CPU adds them in order.
// An index outside [0, size) cannot throw from a kernel: it is reported as a
// DeviceFault, raised as reel::Error at the next host synchronisation, and the
// element is skipped. (The autograd layer checks CPU indices before the kernel.)
// Floor: memory bandwidth, with gathered reads.
#include "elementwise.cuh"

namespace reel::cuda {
namespace {

template <typename T>
__device__ __forceinline__ void atomic_add(T* p, T v) {
  if constexpr (std::is_same_v<T, int64_t>) {
    atomicAdd(reinterpret_cast<unsigned long long*>(p), static_cast<unsigned long long>(v));  // two's complement
  } else if constexpr (std::is_same_v<T, uint8_t>) {
    // no 8-bit atomics: compare-and-swap the aligned 32-bit word holding the byte
    uintptr_t addr = reinterpret_cast<uintptr_t>(p);
    unsigned int* word = reinterpret_cast<unsigned int*>(addr & ~uintptr_t(3));
    unsigned int shift = unsigned(addr & 3) * 8;
    unsigned int old = *word, assumed;
    do {
      assumed = old;
      unsigned int byte = ((assumed >> shift) + unsigned(v)) & 0xffu;
      old = atomicCAS(word, assumed, (assumed & ~(0xffu << shift)) | (byte << shift));
    } while (old != assumed);
  } else {
    atomicAdd(p, v);
  }
}

__device__ __forceinline__ void report(DeviceFault* f, int code, long long value, long long bound) {
  if (atomicCAS(&f->code, int(kFaultNone), code) == int(kFaultNone)) {
    f->value = value;
    f->bound = bound;
  }
}

// Reads: walked[o0] = indexed[o1 + index[o2] * step]; accumulations: indexed[o1 + index[o2] * step] += walked[o0]
template <typename T, bool Accumulate, bool Set = false>
__global__ void __launch_bounds__(kThreads) index_kernel(uint32_t n, OffsetCalc<3> calc, std::array<char*, 3> base,
                                                         int64_t step, int64_t bound, DeviceFault* fault, int code) {
  T* walked = reinterpret_cast<T*>(base[0]);
  T* indexed = reinterpret_cast<T*>(base[1]);
  const int64_t* index = reinterpret_cast<const int64_t*>(base[2]);
  for (uint32_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
    int64_t off[3];
    calc.offsets(i, off);
    int64_t v = index[off[2]];
    if (v < 0 || v >= bound) {
      report(fault, code, v, bound);
      continue;
    }
    if constexpr (Set) indexed[off[1] + v * step] = walked[off[0]];
    else if constexpr (Accumulate) atomic_add(indexed + off[1] + v * step, walked[off[0]]);
    else walked[off[0]] = indexed[off[1] + v * step];
  }
}

// The walked tensor's shape with the three operands' strides, coalesced.
struct Operands {
  Geometry<3> g;
  std::array<char*, 3> base;
};

Operands operands(const Tensor& walked, const Tensor& indexed, const Tensor& index, int dim, bool index_is_1d) {
  // Views with the strides described above, so that coalesce() can merge what it may.
  Dims xs = indexed.strides(), is = Dims::filled(walked.dim(), 0);
  xs[dim] = 0;
  if (index_is_1d) is[dim] = index.strides().size() ? index.strides()[0] : 1;
  else is = index.strides();
  Tensor x = view_of(indexed, walked.shape(), xs, indexed.offset());
  Tensor ix = view_of(index, walked.shape(), is, index.offset());
  Operands o;
  o.g = coalesce<3>(walked.shape(), {&walked, &x, &ix});
  o.base = {static_cast<char*>(walked.data_ptr()), static_cast<char*>(indexed.data_ptr()),
            static_cast<char*>(index.data_ptr())};
  if (o.g.ndim == 0) {
    o.g.ndim = 1;
    o.g.shape[0] = 1;
    for (int k = 0; k < 3; ++k) o.g.strides[k][0] = 0;
  }
  return o;
}

template <typename T, bool Accumulate, bool Set = false>
void run(Context& ctx, const char* op, int code, const Tensor& walked, const Tensor& indexed, const Tensor& index,
         int dim, bool index_is_1d) {
  if (walked.numel() == 0) return;
  Operands o = operands(walked, indexed, index, dim, index_is_1d);
  int64_t step = indexed.strides()[dim], bound = indexed.shape()[dim];
  for_each_piece<3>(o.g, o.base, {sizeof(T), sizeof(T), sizeof(int64_t)},
                    [&](const OffsetCalc<3>& calc, uint32_t n, std::array<char*, 3> b) {
                      index_kernel<T, Accumulate, Set><<<ctx.grid_for(n, kThreads), kThreads, 0, ctx.stream>>>(
                          n, calc, b, step, bound, ctx.fault_device, code);
                      check_launch(op);
                    });
}

void expect_index(const char* op, const Tensor& index) {
  if (index.dtype() != DType::i64)
    throw Error(std::string(op) + ": expected an i64 index, got " + dtype_name(index.dtype()));
}

}  // namespace

void CudaBackend::index_select(const Tensor& out, const Tensor& x, int dim, const Tensor& index) {
  expect_here("index_select", {&out, &x, &index});
  expect_index("index_select", index);
  Context& c = ctx();
  dispatch(x.dtype(), "index_select", [&]<typename T>() {
    run<T, false>(c, "index_select", kFaultIndexSelect, out, x, index, dim, true);
  });
}

void CudaBackend::index_add(const Tensor& out, int dim, const Tensor& index, const Tensor& src) {
  expect_here("index_add", {&out, &index, &src});
  expect_index("index_add", index);
  Context& c = ctx();
  dispatch(out.dtype(), "index_add", [&]<typename T>() {
    if constexpr (std::is_same_v<T, bool>) throw Error("index_add: bool tensors cannot be summed");
    else run<T, true>(c, "index_add", kFaultIndexAdd, src, out, index, dim, true);
  });
}

void CudaBackend::gather(const Tensor& out, const Tensor& x, int dim, const Tensor& index) {
  expect_here("gather", {&out, &x, &index});
  expect_index("gather", index);
  Context& c = ctx();
  dispatch(x.dtype(), "gather", [&]<typename T>() {
    run<T, false>(c, "gather", kFaultGather, out, x, index, dim, false);
  });
}

void CudaBackend::scatter_add(const Tensor& out, int dim, const Tensor& index, const Tensor& src) {
  expect_here("scatter_add", {&out, &index, &src});
  expect_index("scatter_add", index);
  Context& c = ctx();
  dispatch(out.dtype(), "scatter_add", [&]<typename T>() {
    if constexpr (std::is_same_v<T, bool>) {
      throw Error("scatter_add: bool tensors cannot be summed");
    } else {
      // walk index's positions, reading src with its own strides
      Tensor s = view_of(src, index.shape(), src.strides(), src.offset());
      run<T, true>(c, "scatter_add", kFaultScatterAdd, s, out, index, dim, false);
    }
  });
}

void CudaBackend::scatter(const Tensor& out, int dim, const Tensor& index, const Tensor& src) {
  expect_here("scatter", {&out, &index, &src});
  expect_index("scatter", index);
  Context& c = ctx();
  dispatch(out.dtype(), "scatter", [&]<typename T>() {
    Tensor s = view_of(src, index.shape(), src.strides(), src.offset());
    run<T, false, true>(c, "scatter", kFaultScatter, s, out, index, dim, false);
  });
}

}  // namespace reel::cuda
