// Samplers: which examples an epoch visits, in which order, as torch.utils.data's.
// A DataLoader given `.sampler` takes each epoch's order from it (instead of
// 0..N-1 or its own shuffle) and cuts it into batches of batch_size; BatchSampler
// gives the same batches to a loop of one's own. Each sampler draws from (seed,
// epoch), so the same seed gives the same epochs.
//
//   data::WeightedRandomSampler balanced(class_weights_per_example, n, {.seed = 3});
//   data::DataLoader loader(train, {.batch_size = 64, .sampler = &balanced});
#pragma once
#include <cstdint>
#include <vector>

#include "../tensor/tensor.h"

namespace reel::data {

class Sampler {
 public:
  virtual ~Sampler() = default;
  // The dataset indices of epoch `epoch`, in visiting order.
  virtual std::vector<int64_t> indices(int64_t epoch) const = 0;
  virtual int64_t size() const = 0;  // how many indices an epoch has
};

// 0, 1, ..., n - 1
class SequentialSampler final : public Sampler {
 public:
  explicit SequentialSampler(int64_t n);
  std::vector<int64_t> indices(int64_t epoch) const override;
  int64_t size() const override { return n_; }

 private:
  int64_t n_;
};

// A random permutation of 0..n-1 each epoch, or (replacement) num_samples uniform
// draws from it. num_samples defaults to n; without replacement it may exceed n (a
// new permutation is appended for the rest, as PyTorch).
struct RandomSamplerOptions {
  bool replacement = false;
  int64_t num_samples = -1;  // -1: n
  uint64_t seed = 0;
};
class RandomSampler final : public Sampler {
 public:
  explicit RandomSampler(int64_t n, RandomSamplerOptions opt = {});
  std::vector<int64_t> indices(int64_t epoch) const override;
  int64_t size() const override { return num_samples_; }

 private:
  int64_t n_, num_samples_;
  RandomSamplerOptions opt_;
};

// The given indices in a random order each epoch.
class SubsetRandomSampler final : public Sampler {
 public:
  explicit SubsetRandomSampler(std::vector<int64_t> indices, uint64_t seed = 0);
  std::vector<int64_t> indices(int64_t epoch) const override;
  int64_t size() const override { return int64_t(indices_.size()); }

 private:
  std::vector<int64_t> indices_;
  uint64_t seed_;
};

// num_samples indices drawn with probability proportional to weights[i] (weights need
// not sum to 1; all >= 0, some > 0); without replacement each index at most once
// (num_samples <= the number of positive weights).
struct WeightedRandomSamplerOptions {
  bool replacement = true;
  uint64_t seed = 0;
};
class WeightedRandomSampler final : public Sampler {
 public:
  WeightedRandomSampler(std::vector<double> weights, int64_t num_samples, WeightedRandomSamplerOptions opt = {});
  std::vector<int64_t> indices(int64_t epoch) const override;
  int64_t size() const override { return num_samples_; }

 private:
  std::vector<double> weights_;
  int64_t num_samples_;
  WeightedRandomSamplerOptions opt_;
};

// Each of num_replicas processes (ranks) visits its own shard of 0..n-1, as PyTorch's
// DistributedSampler: one permutation of (seed, epoch) shared by every rank (or 0..n-1
// without shuffle), padded by repeating its head up to a multiple of num_replicas (or,
// with drop_last, cut down to one), and rank r takes positions r, r + num_replicas, ...
// So the shards are disjoint (up to the padding) and together cover every index. The
// epoch is the one the DataLoader passes, or the last set_epoch() given (PyTorch's way:
// call it before each epoch when the loader is made anew).
//
//   data::DistributedSampler shard(train.size(), {.num_replicas = pg.size(), .rank = pg.rank()});
//   data::DataLoader loader(train, {.batch_size = 64, .sampler = &shard});
struct DistributedSamplerOptions {
  int64_t num_replicas = 1;
  int64_t rank = 0;
  bool shuffle = true;
  uint64_t seed = 0;
  bool drop_last = false;
};
class DistributedSampler final : public Sampler {
 public:
  DistributedSampler(int64_t n, DistributedSamplerOptions opt);
  std::vector<int64_t> indices(int64_t epoch) const override;
  int64_t size() const override { return num_samples_; }  // per rank
  int64_t total_size() const { return num_samples_ * opt_.num_replicas; }
  void set_epoch(int64_t epoch) { epoch_ = epoch; }

 private:
  int64_t n_, num_samples_;
  DistributedSamplerOptions opt_;
  int64_t epoch_ = -1;  // -1: the epoch indices() is given
};

// Cuts a sampler's epoch into batches of batch_size (the last one shorter, or
// dropped with drop_last): what the DataLoader does with its sampler.
class BatchSampler {
 public:
  BatchSampler(const Sampler& sampler, int64_t batch_size, bool drop_last = false);
  std::vector<std::vector<int64_t>> batches(int64_t epoch) const;
  int64_t size() const;  // batches per epoch

 private:
  const Sampler& sampler_;
  int64_t batch_size_;
  bool drop_last_;
};

}  // namespace reel::data
