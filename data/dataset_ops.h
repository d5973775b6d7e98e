// Datasets made of datasets, as torch.utils.data's: Subset, ConcatDataset,
// random_split; per-sample transforms (TransformDataset) and Compose, which chains
// transforms for a TransformDataset (per sample) or a DataLoader (per batch).
// Each keeps a reference to the datasets it is made of: they must outlive it.
//
//   auto parts = data::random_split(full, {50000, 10000}, /*seed=*/1);   // train, validation
//   data::TransformDataset aug(parts[0], data::Compose{
//       data::on_data([](Tensor x, uint64_t s) { return data::random_crop(x, 4, s); }),
//       data::on_data([](Tensor x, uint64_t s) { return data::random_horizontal_flip(x, s); })});
//   data::DataLoader loader(aug, {.batch_size = 128, .shuffle = true});
#pragma once
#include <functional>
#include <initializer_list>
#include <vector>

#include "dataset.h"

namespace reel::data {

// Examples base[indices[0]], base[indices[1]], ...
class Subset final : public Dataset {
 public:
  Subset(const Dataset& base, std::vector<int64_t> indices);
  int64_t size() const override { return int64_t(indices_.size()); }
  Example get(int64_t index) const override;
  // base's own get_batch on the mapped indices (TensorDataset's one-copy gather stays)
  Example get_batch(std::span<const int64_t> indices, HostMemory memory = HostMemory::pageable) const override;
  const std::vector<int64_t>& indices() const { return indices_; }

 private:
  const Dataset* base_;
  std::vector<int64_t> indices_;
};

// The examples of each dataset in turn.
class ConcatDataset final : public Dataset {
 public:
  explicit ConcatDataset(std::vector<const Dataset*> datasets);
  int64_t size() const override { return ends_.empty() ? 0 : ends_.back(); }
  Example get(int64_t index) const override;

 private:
  std::vector<const Dataset*> datasets_;
  std::vector<int64_t> ends_;  // cumulative sizes
};

// Splits base into non-overlapping random subsets of the given lengths (summing to
// base.size()), or of the given fractions (summing to 1; the remainder of the floors
// goes one each to the first subsets, as PyTorch 1.13).
std::vector<Subset> random_split(const Dataset& base, const std::vector<int64_t>& lengths, uint64_t seed = 0);
std::vector<Subset> random_split(const Dataset& base, const std::vector<double>& fractions, uint64_t seed = 0);

// A transform of one example or one batch; seed drives its random choices.
using Transform = std::function<Example(Example, uint64_t seed)>;

// Applies a tensor transform to an example's data (the target passes through).
Transform on_data(std::function<Tensor(Tensor, uint64_t seed)> f);

// Applies its transforms in order, each with the same seed (each transform of
// data/transforms.h draws from its own stream of a seed).
class Compose {
 public:
  Compose(std::initializer_list<Transform> transforms) : transforms_(transforms) {}
  explicit Compose(std::vector<Transform> transforms) : transforms_(std::move(transforms)) {}
  Example operator()(Example e, uint64_t seed) const;

 private:
  std::vector<Transform> transforms_;
};

// Example i is transform(base[i], s) with s drawn from (seed, epoch, i): call
// set_epoch(e) at each epoch for fresh random augmentations (the same seed and
// epoch give the same examples, whichever worker asks). Batches are collated from
// the transformed examples.
class TransformDataset final : public Dataset {
 public:
  TransformDataset(const Dataset& base, Transform transform, uint64_t seed = 0);
  int64_t size() const override { return base_->size(); }
  Example get(int64_t index) const override;
  void set_epoch(int64_t epoch) { epoch_ = epoch; }

 private:
  const Dataset* base_;
  Transform transform_;
  uint64_t seed_;
  int64_t epoch_ = 0;
};

}  // namespace reel::data
