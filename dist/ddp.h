// dist::DistributedDataParallel: one model replica per rank, each on its own share of
// the batch, kept identical by averaging their gradients during backward.
//
//   auto& pg = dist::init();
//   Net net;
//   dist::DistributedDataParallel ddp(net, pg);        // rank 0's weights everywhere
//   optim::SGD opt(net.parameters(), {.lr = 0.1});
//   for (auto& [x, y] : loader) {                       // each rank its shard (DistributedSampler)
//     opt.zero_grad();
//     cross_entropy(ddp(x), y).backward();              // gradients averaged over the ranks here
//     opt.step();
//   }
//
// How: at construction the parameters are cut into buckets of about bucket_cap_mb, in
// reverse registration order (roughly the order backward finishes them). A hook on each
// parameter copies its gradient, divided by the number of ranks, into its bucket when
// backward has finished it (as PyTorch's reducer: the division costs no pass of its own);
// a full bucket starts a nonblocking all-reduce at once, so communication runs while
// backward computes the earlier layers. When backward ends, the remaining all-reduces are waited
// for and each .grad() becomes a view of its bucket's averages (no copy back), so
// optimizer.step() right after backward() sees synchronised gradients. Buckets start in bucket order on every
// rank (MPI needs the same order), whatever order their gradients finish in. Ranks that
// all run on one host keep their buckets in one shared-memory segment instead and sum
// them there, each rank its share (DistributedDataParallelOptions::shared_memory), with
// the bits of MPI's ring all-reduce.
//
// Only a backward through an output of ddp(x) synchronises (as PyTorch): calling the
// wrapped module directly, or under no_sync(), accumulates gradients locally; the next
// synchronised backward all-reduces the accumulated sums.
//
// Unused parameters: a parameter that requires grad and got no gradient in a synchronised
// backward is an Error naming it, unless find_unused_parameters, which all-reduces its
// gradient as zeros (so ranks that used it and ranks that did not agree).
#pragma once
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "../nn/module.h"
#include "process_group.h"

namespace reel::dist {

// Who advances the all-reduces in flight. OpenMPI moves a nonblocking collective on
// only inside MPI calls: `hooks` tests them from each gradient hook (no extra thread;
// nothing moves while backward computes a long stretch without finishing a
// parameter; the default), `thread` from a thread that wakes every
// progress_interval_us while any is in flight. Measured on W3/W4 with 2 ranks, one per
// core of an idle 2-core machine (bench/RESULTS.md, W13): hooks 134.5 ms per W4 step
// with 85% of the all-reduce hidden, the thread 144.2 ms (it competes with the ranks
// for the cores); on cores shared with other work the thread was faster. Without MPI
// thread support (threads_may_call()) `thread` falls back to `hooks`.
enum class Progress { hooks, thread };

struct DistributedDataParallelOptions {
  double bucket_cap_mb = 25;  // MiB of gradients per all-reduce
  // The first bucket (the last layers' gradients, the first ready) closes at this size,
  // so that communication starts early in backward (PyTorch's 1 MiB).
  double first_bucket_mb = 1;
  Progress progress = Progress::hooks;
  int progress_interval_us = 200;
  bool broadcast_buffers = true;  // rank 0's buffers (BatchNorm's statistics) before each forward
  bool find_unused_parameters = false;
  // Ranks all on one host sum their buckets in shared memory instead of through MPI
  // (dist/shared_buckets.cpp): half the passes over the gradients, on the cores backward
  // needs. Falls back to MPI where the ranks span hosts, a bucket is not f32 or f64, or
  // /dev/shm lacks room; REEL_DDP_SHARED_MEMORY=0 turns it off for the whole job.
  bool shared_memory = true;
};

// What the last synchronised backward did, for benchmarks.
struct DistributedDataParallelStats {
  int64_t buckets = 0;
  uint64_t bytes = 0;          // gradient bytes all-reduced per step
  double wait_seconds = 0;     // time backward's end spent waiting for all-reduces (the part not hidden)
  int64_t launched_in_backward = 0;  // buckets started before backward ended
  bool shared_memory = false;  // the buckets are summed in shared memory (else MPI all-reduces them)
  // "shared memory", "MPI", "MPI (<why not shared memory>)" or "NCCL"
  std::string transport;
};

class SharedBuckets;  // dist/internal/shared_buckets.h

class DistributedDataParallel {
 public:
  DistributedDataParallel(nn::Module& module, ProcessGroup& pg, DistributedDataParallelOptions opt = {},
                          Site site = {});
  ~DistributedDataParallel();
  DistributedDataParallel(const DistributedDataParallel&) = delete;
  DistributedDataParallel& operator=(const DistributedDataParallel&) = delete;

  // Rank 0's buffers (broadcast_buffers), then module(x); arms the next backward.
  Tensor operator()(const Tensor& x, Site site = {});
  nn::Module& module() { return module_; }

  // While alive, forwards through the wrapper do not synchronise (gradient accumulation):
  //   { auto guard = ddp.no_sync(); loss(ddp(x1)).backward(); }  // local sum
  //   loss(ddp(x2)).backward();                                  // all-reduces the sum
  class NoSync {
   public:
    explicit NoSync(DistributedDataParallel& d) : d_(d), prev_(d.sync_) { d.sync_ = false; }
    ~NoSync() { d_.sync_ = prev_; }
    NoSync(const NoSync&) = delete;
    NoSync& operator=(const NoSync&) = delete;

   private:
    DistributedDataParallel& d_;
    bool prev_;
  };
  [[nodiscard]] NoSync no_sync() { return NoSync(*this); }

  const DistributedDataParallelStats& stats() const { return stats_; }
  int64_t bucket_count() const { return int64_t(buckets_.size()); }
  std::vector<int64_t> bucket_numels() const;  // elements per bucket, in launch order

 private:
  struct Param {
    Tensor t;
    std::string name;
    size_t bucket = 0;
    int64_t offset = 0;  // in the bucket, elements
    bool ready = false;
  };
  struct Bucket {
    Tensor flat;  // the bucket's gradients, contiguous
    std::vector<size_t> params;
    size_t pending = 0;  // parameters not ready yet in this backward
    Work work;
    bool launched = false;
    std::string label;  // "bucket 2 of 5 (1.0 MiB)": named by a timeout
  };
  void on_grad(size_t i);
  void mark_ready(size_t i);
  void launch_ready();
  void launch(Bucket& b);
  void progress();
  void progress_loop();
  void finish();
  void reset();

  nn::Module& module_;
  ProcessGroup& pg_;
  DistributedDataParallelOptions opt_;
  std::vector<Param> params_;
  std::vector<Bucket> buckets_;
  std::vector<uint64_t> hook_ids_;
  std::unique_ptr<SharedBuckets> shared_;  // set: the buckets live in shared memory (same host)
  size_t next_launch_ = 0;
  bool sync_ = true;   // false under no_sync()
  bool armed_ = false;  // a forward through the wrapper with grad mode on and sync
  bool touched_ = false;  // some parameter's hook ran in this backward
  DistributedDataParallelStats stats_;
  // Progress::thread: mu_ serialises MPI calls and the buckets' state between backward's
  // thread and the progress thread, which polls while polling_.
  std::mutex mu_;
  std::condition_variable cv_;
  bool polling_ = false, stop_ = false;
  std::thread progress_thread_;
};

}  // namespace reel::dist
