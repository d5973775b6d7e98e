// CUDA tensors' collectives through NCCL. One NCCL communicator per process group,
// made on the first CUDA collective from an id that rank 0 draws and MPI broadcasts.
// NCCL runs on a stream of its own: an event orders it after the compute stream's work
// on the tensor, and another orders the compute stream's later work after it, so the
// host never waits and communication can overlap computation that does not need it.
#include <fmt/format.h>

#include "../autograd/grad_mode.h"
#include "internal/state.h"

#if REEL_DIST_NCCL
#include <cuda_runtime.h>
#include <nccl.h>

#include "../cuda/internal/context.h"
#endif

namespace reel::dist {

#if REEL_DIST_NCCL

struct NcclState {
  int device = -1;
  ncclComm_t comm = nullptr;
  cudaStream_t stream = nullptr;
  cudaEvent_t before = nullptr, after = nullptr;
};

namespace nccl {
namespace {

void check_cuda(cudaError_t rc, const char* op, const Site& site) {
  if (rc != cudaSuccess) fail(op, fmt::format("CUDA failed: {}", cudaGetErrorString(rc)), site);
}
void check_nccl(ncclResult_t rc, const char* op, const Site& site) {
  if (rc != ncclSuccess) fail(op, fmt::format("NCCL failed: {}", ncclGetErrorString(rc)), site);
}

ncclDataType_t nccl_type(DType d) {
  switch (d) {
    case DType::f32: return ncclFloat32;
    case DType::f64: return ncclFloat64;
    case DType::f16: return ncclFloat16;
    case DType::bf16: return ncclBfloat16;
    case DType::i32: return ncclInt32;
    case DType::i64: return ncclInt64;
    case DType::u8:
    case DType::boolean: return ncclUint8;
  }
  return ncclFloat32;
}

ncclRedOp_t nccl_op(ReduceOp op, DType d, const char* name, const Site& site) {
  if (op == ReduceOp::avg && !is_floating(d))
    fail(name, fmt::format("avg needs a floating-point tensor, got {}", dtype_name(d)), site);
  switch (op) {
    case ReduceOp::sum: return d == DType::boolean ? ncclMax : ncclSum;  // or
    case ReduceOp::avg: return ncclAvg;
    case ReduceOp::max: return ncclMax;
    case ReduceOp::min: return ncclMin;
  }
  return ncclSum;
}

// The group's communicator on t's device, made on first use (a collective call: every
// rank gets here together).
NcclState& comm_for(GroupState& g, const Tensor& t, const char* op, const Site& site) {
  int device = t.device().index;
  if (g.nccl) {
    if (g.nccl->device != device)
      fail(op, fmt::format("this process group's NCCL communicator is on cuda:{}, the tensor on {}: one GPU per "
                           "process (pick it with the local rank)", g.nccl->device, t.device().str()), site);
    return *g.nccl;
  }
  ncclUniqueId id;
  if (g.rank == 0) check_nccl(ncclGetUniqueId(&id), op, site);
  check_mpi(MPI_Bcast(&id, sizeof(id), MPI_BYTE, 0, g.comm), op, site);
  auto s = std::make_unique<NcclState>();
  s->device = device;
  check_cuda(cudaSetDevice(device), op, site);
  check_nccl(ncclCommInitRank(&s->comm, g.size, id, g.rank), op, site);
  check_cuda(cudaStreamCreateWithFlags(&s->stream, cudaStreamNonBlocking), op, site);
  check_cuda(cudaEventCreateWithFlags(&s->before, cudaEventDisableTiming), op, site);
  check_cuda(cudaEventCreateWithFlags(&s->after, cudaEventDisableTiming), op, site);
  g.nccl = s.release();
  return *g.nccl;
}

// Runs `launch` on NCCL's stream between the two events.
template <typename F> void on_nccl_stream(NcclState& n, const Tensor& t, const char* op, const Site& site, F&& launch) {
  cudaStream_t compute = cuda::context(t).stream;
  check_cuda(cudaEventRecord(n.before, compute), op, site);
  check_cuda(cudaStreamWaitEvent(n.stream, n.before, 0), op, site);
  check_nccl(launch(n.stream), op, site);
  check_cuda(cudaEventRecord(n.after, n.stream), op, site);
  check_cuda(cudaStreamWaitEvent(compute, n.after, 0), op, site);
}

}  // namespace

void all_reduce(GroupState& g, const Tensor& t, ReduceOp op, const Site& site) {
  NcclState& n = comm_for(g, t, "all_reduce", site);
  Tensor buf = t.is_contiguous() ? t : t.contiguous();
  ncclRedOp_t rop = nccl_op(op, t.dtype(), "all_reduce", site);
  on_nccl_stream(n, t, "all_reduce", site, [&](cudaStream_t s) {
    return ncclAllReduce(buf.data_ptr(), buf.data_ptr(), size_t(buf.numel()), nccl_type(buf.dtype()), rop, n.comm, s);
  });
  if (buf.impl() != t.impl()) {
    NoGradGuard no_grad;
    Tensor(t).copy_(buf);
  }
}

void broadcast(GroupState& g, const Tensor& t, int root, const Site& site) {
  NcclState& n = comm_for(g, t, "broadcast", site);
  Tensor buf = t.is_contiguous() ? t : t.contiguous();
  on_nccl_stream(n, t, "broadcast", site, [&](cudaStream_t s) {
    return ncclBroadcast(buf.data_ptr(), buf.data_ptr(), size_t(buf.numel()), nccl_type(buf.dtype()), root, n.comm, s);
  });
  if (buf.impl() != t.impl()) {
    NoGradGuard no_grad;
    Tensor(t).copy_(buf);
  }
}

void all_gather(GroupState& g, const Tensor& in, const Tensor& out, const Site& site) {
  NcclState& n = comm_for(g, in, "all_gather", site);
  on_nccl_stream(n, in, "all_gather", site, [&](cudaStream_t s) {
    return ncclAllGather(in.data_ptr(), out.data_ptr(), size_t(in.numel()), nccl_type(in.dtype()), n.comm, s);
  });
}

void reduce_scatter(GroupState& g, const Tensor& in, const Tensor& out, ReduceOp op, const Site& site) {
  NcclState& n = comm_for(g, in, "reduce_scatter", site);
  ncclRedOp_t rop = nccl_op(op, in.dtype(), "reduce_scatter", site);
  on_nccl_stream(n, in, "reduce_scatter", site, [&](cudaStream_t s) {
    return ncclReduceScatter(in.data_ptr(), out.data_ptr(), size_t(out.numel()), nccl_type(in.dtype()), rop, n.comm,
                             s);
  });
}

void destroy(GroupState& g) {
  if (!g.nccl) return;
  ncclCommDestroy(g.nccl->comm);
  cudaEventDestroy(g.nccl->before);
  cudaEventDestroy(g.nccl->after);
  cudaStreamDestroy(g.nccl->stream);
  delete g.nccl;
  g.nccl = nullptr;
}

}  // namespace nccl

#else  // built without NCCL

struct NcclState {};

namespace nccl {
namespace {
[[noreturn]] void absent(const char* op, const Site& site) {
  fail(op, "CUDA tensors travel through NCCL, and this build of reel has no NCCL (no CUDA, or no nccl.h found); "
           "move the tensor to the CPU or rebuild with NCCL", site);
}
}  // namespace
void all_reduce(GroupState&, const Tensor&, ReduceOp, const Site& site) { absent("all_reduce", site); }
void broadcast(GroupState&, const Tensor&, int, const Site& site) { absent("broadcast", site); }
void all_gather(GroupState&, const Tensor&, const Tensor&, const Site& site) { absent("all_gather", site); }
void reduce_scatter(GroupState&, const Tensor&, const Tensor&, ReduceOp, const Site& site) {
  absent("reduce_scatter", site);
}
void destroy(GroupState&) {}
}  // namespace nccl

#endif

}  // namespace reel::dist
