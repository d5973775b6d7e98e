// DistributedDataParallel's buckets when every rank runs on one host: each rank's bucket
// lives in one shared-memory segment, and the ranks average them there, each rank its
// 1/W share of every bucket, without MPI (dist/shared_buckets.cpp says why and how).
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "../../tensor/tensor.h"
#include "../process_group.h"

namespace reel::dist {

class SharedBuckets {
 public:
  struct Spec {
    int64_t numel = 0;
    DType dtype = DType::f32;
  };
  // A collective of the group's ranks (every rank calls it with the same specs). Returns
  // nullptr, and in *why the reason, where the ranks cannot share the buckets: fewer than 2
  // ranks, ranks on more than one host, a dtype other than f32 and f64, or a shared-memory
  // file system (/dev/shm) without room for them.
  static std::unique_ptr<SharedBuckets> make(ProcessGroup& pg, const std::vector<Spec>& specs, std::string* why);
  ~SharedBuckets();
  SharedBuckets(const SharedBuckets&) = delete;
  SharedBuckets& operator=(const SharedBuckets&) = delete;

  // This rank's bucket k (zeros at first), in the shared segment: the caller fills it with
  // this rank's values, undivided, and after wait(k) it holds the ranks' average, with the
  // bits of dividing each rank's values by W first and summing them in OpenMPI's ring
  // order. A view of it stays valid after this object ends.
  Tensor slab(size_t k) const { return slabs_[k]; }
  // This rank's bucket k holds this step's values: counts as one collective of the group
  // (its sequence number and bytes, as all_reduce_async); `what` names it after a timeout.
  void start(size_t k, const std::string& what);
  // Sums this rank's share of every started bucket whose ranks have all started it, into
  // every rank's copy; returns at once otherwise.
  void advance();
  // Until every rank has written its share of bucket k (advancing this rank's meanwhile);
  // past the group's timeout the job ends naming the bucket and the ranks missing.
  void wait(size_t k);

 private:
  SharedBuckets() = default;
  void reduce_share(size_t k);
  bool all_at_least(size_t flag_index, uint64_t round) const;

  ProcessGroup* pg_ = nullptr;
  int rank_ = 0, size_ = 1;
  std::vector<Spec> specs_;
  char* base_ = nullptr;  // the whole segment, mapped once (read and write)
  size_t bytes_ = 0;
  size_t region_ = 0;              // bytes per rank: its flags page, then its buckets
  std::vector<size_t> offsets_;    // bucket k's offset in a rank's region
  std::vector<Tensor> slabs_;      // this rank's buckets (each its own mapping)
  std::vector<uint64_t> round_;    // per bucket: steps started here (the flags' values)
  std::vector<uint64_t> seq_;      // per bucket: the collective's sequence number this step
  std::vector<std::string> what_;
  std::vector<bool> pending_;      // started, this rank's share not summed yet
  std::vector<bool> finished_;     // every rank's share written this step (wait returned)
};

}  // namespace reel::dist
