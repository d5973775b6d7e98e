// Between dist/'s files: a process group's MPI state and the NCCL path's entry points.
// Includes mpi.h: internal to dist/.
#pragma once
// MPI's C API only: its deprecated C++ bindings do not compile warning-free
#ifndef OMPI_SKIP_MPICXX
#define OMPI_SKIP_MPICXX 1
#endif
#ifndef MPICH_SKIP_MPICXX
#define MPICH_SKIP_MPICXX 1
#endif
#include <mpi.h>

#include <string>

#include "../process_group.h"

namespace reel::dist {

struct NcclState;  // dist/nccl.cpp

struct GroupState {
  MPI_Comm comm = MPI_COMM_NULL;        // blocking collectives
  MPI_Comm async_comm = MPI_COMM_NULL;  // all_reduce_async (DDP's buckets)
  int rank = 0, size = 1, local_rank = 0, local_size = 1;
  int thread_level = MPI_THREAD_SINGLE;  // what MPI_Init_thread provided
  InitOptions opt;
  double timeout_s = 600;  // opt.timeout_s, $REEL_DIST_TIMEOUT or 600
  MPI_Comm fault_comm = MPI_COMM_NULL;  // the exchange after a timeout (who is where)
  uint64_t seq = 0;  // collectives this rank entered (blocking and async, program order)
  CommStats stats;
  NcclState* nccl = nullptr;
};

// Throws Error "op: <MPI's message> (at site)" when rc is not MPI_SUCCESS.
void check_mpi(int rc, const char* op, const Site& site);

// Polls `req` (MPI_Test) until it completes; past g.timeout_s it learns from the other
// ranks which collective each is in (timeout_report) and ends the job (dist::abort)
// naming the collective `op`, `what` (a bucket) and the ranks that did not arrive.
void wait_request(GroupState& g, MPI_Request& req, const char* op, const std::string& what, uint64_t seq);

// After `op` (`what`: a bucket) waited past g.timeout_s: learns from the other ranks which
// collective each is in and ends the job (dist::abort) naming those that did not arrive.
[[noreturn]] void report_timeout(GroupState& g, const char* op, const std::string& what, uint64_t seq);

namespace nccl {
// The CUDA collectives: NCCL on a stream of its own, ordered after the tensor's compute
// stream by events. Without NCCL in the build each throws Error naming the op.
void all_reduce(GroupState& g, const Tensor& t, ReduceOp op, const Site& site);
void broadcast(GroupState& g, const Tensor& t, int root, const Site& site);
void all_gather(GroupState& g, const Tensor& in, const Tensor& out, const Site& site);
void reduce_scatter(GroupState& g, const Tensor& in, const Tensor& out, ReduceOp op, const Site& site);
void destroy(GroupState& g);
}  // namespace nccl

}  // namespace reel::dist
