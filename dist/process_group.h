// dist::ProcessGroup: the processes of one training job and the collectives between
// them. The processes are MPI's (mpirun, srun): CPU tensors travel through MPI, CUDA
// tensors through NCCL on a stream of its own (ordered after the compute stream's work
// by events: the host never waits). Includes no MPI or NCCL header.
//
//   auto& pg = dist::init();                 // once per process, under mpirun -np 2 ./train
//   Tensor g = ...;                          // the same shape on every rank
//   pg.all_reduce(g, dist::ReduceOp::avg);   // in place: the mean over the ranks
//   if (pg.rank() == 0) model.save("model.safetensors");
//
// Every rank must call the same collectives in the same order with tensors of the same
// shape and dtype. With check_shapes (the default) each collective first exchanges a
// small descriptor (collective, shape, dtype, root), so a mismatch is a reel::Error on
// every rank naming the collective and both shapes, not a hang or garbage.
//
// Faults: an exception that escapes main() on any rank (and any failure inside MPI)
// ends the whole job through MPI_Abort with the message on stderr; mpirun ends the job
// when a rank dies (its message names the rank and the signal). A collective that has
// not completed after InitOptions::timeout_s (default $REEL_DIST_TIMEOUT, else 600 s)
// ends the job too: the rank says which collective (and which of DistributedDataParallel's
// buckets) it waited in and which ranks did not arrive (each rank that timed out tells
// the others where it waits; a rank that says nothing is stuck outside the collectives
// or gone). A rank that catches an error it cannot recover from should call
// dist::abort(message) rather than return, as its peers wait in their next collective.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "../tensor/tensor.h"

namespace reel::dist {

enum class ReduceOp { sum, avg, max, min };
const char* reduce_op_name(ReduceOp op);

struct InitOptions {
  bool check_shapes = true;  // exchange a descriptor before each collective (a few µs)
  // Seconds a collective may wait for the other ranks before the job ends; 0: the
  // environment's REEL_DIST_TIMEOUT, else 600 (generous: a slow rank's checkpoint or
  // evaluation must not trip it).
  double timeout_s = 0;
};

// Bytes this process handed to collectives as payload (what the benchmarks report).
struct CommStats {
  uint64_t all_reduce_bytes = 0, broadcast_bytes = 0, all_gather_bytes = 0, reduce_scatter_bytes = 0;
  uint64_t collectives = 0;
};

struct WorkState;
// A collective in flight (all_reduce_async). test() lets MPI progress it and says
// whether it is done; wait() blocks until it is. Both finish the work (an avg's
// division) once. A Work destroyed while in flight waits for it.
class Work {
 public:
  Work() = default;
  explicit Work(std::shared_ptr<WorkState> s) : s_(std::move(s)) {}
  bool test();
  void wait();
  bool defined() const { return bool(s_); }

 private:
  std::shared_ptr<WorkState> s_;
};

struct GroupState;
class ProcessGroup {
 public:
  int rank() const;
  int size() const;
  int local_rank() const;  // among the ranks on this machine
  int local_size() const;
  // Whether MPI lets a second thread call it (one at a time at least): what
  // DistributedDataParallel's progress thread needs.
  bool threads_may_call() const;

  // In place on `t` (CPU or CUDA; any layout, any dtype; avg needs floating point).
  void all_reduce(const Tensor& t, ReduceOp op = ReduceOp::sum, Site site = {});
  // `t` on every rank becomes root's values.
  void broadcast(const Tensor& t, int root = 0, Site site = {});
  // Every rank's `t`, in rank order (each rank passes the same shape).
  std::vector<Tensor> all_gather(const Tensor& t, Site site = {});
  // t: [size() * n, ...] on every rank; returns this rank's block [n, ...] of the
  // reduction over the ranks (block r of the reduced tensor goes to rank r).
  Tensor reduce_scatter(const Tensor& t, ReduceOp op = ReduceOp::sum, Site site = {});
  void barrier(Site site = {});

  // A nonblocking in-place all-reduce of a contiguous CPU tensor on a communicator of
  // its own (so it never interleaves with the collectives above), without the
  // descriptor check: for callers that checked the layout once (DistributedDataParallel).
  // `what` names it in a timeout's report ("bucket 2 of 5, 1.0 MiB").
  Work all_reduce_async(const Tensor& t, ReduceOp op, std::string what = {});
  // Seconds a collective waits for the others before the job ends (InitOptions::timeout_s).
  double timeout_s() const;
  // Checks once that every rank passes the same `what` (a layout description), else
  // throws Error from `op` naming the first rank that differs and both descriptions.
  void check_same(const char* op, const std::string& what, Site site = {});

  const CommStats& stats() const;
  void reset_stats();

  explicit ProcessGroup(std::unique_ptr<GroupState> s);
  ~ProcessGroup();
  ProcessGroup(const ProcessGroup&) = delete;
  ProcessGroup& operator=(const ProcessGroup&) = delete;
  GroupState& state() const { return *s_; }

 private:
  std::unique_ptr<GroupState> s_;
};

// Initialises MPI (once; later calls return the same group) and returns the group of
// all processes. Under mpirun/srun the world is the launched ranks; a process started
// alone is a world of one. torchrun-style variables (WORLD_SIZE > 1 without an MPI
// launcher) are refused with an Error: reel's processes come from MPI.
ProcessGroup& init(InitOptions opt = {});
bool is_initialized();
ProcessGroup& world();  // the group init() made; Error before init()
// Ends the job on every rank: the message on stderr, then MPI_Abort. Never returns.
[[noreturn]] void abort(const std::string& message, int code = 1);
// MPI_Finalize, once (also run at exit when the program did not call it).
void finalize();

// Checkpoints by one rank: rank 0 runs `write` (model.save(path), checkpoint::save(...)),
// and every rank returns only after it finished, so a load() after it reads the whole
// file. When the write throws on rank 0, every rank throws Error with its message.
//   dist::save_on_rank0(pg, [&] { model.save("model.safetensors"); });
//   model.load("model.safetensors");  // on every rank
void save_on_rank0(ProcessGroup& pg, const std::function<void()>& write, Site site = {});

}  // namespace reel::dist
