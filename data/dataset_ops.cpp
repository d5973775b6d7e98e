// Subset, ConcatDataset, random_split, Compose and TransformDataset.
#include "dataset_ops.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <numeric>

#include "internal/io.h"

namespace reel::data {

Subset::Subset(const Dataset& base, std::vector<int64_t> indices) : base_(&base), indices_(std::move(indices)) {
  int64_t n = base.size();
  for (int64_t i : indices_)
    if (i < 0 || i >= n) throw Error(fmt::format("Subset: index {} is out of range for a dataset of {} examples", i, n));
}

Example Subset::get(int64_t index) const {
  if (index < 0 || index >= size())
    throw Error(fmt::format("Subset: index {} is out of range for a subset of {} examples", index, size()));
  return base_->get(indices_[size_t(index)]);
}

Example Subset::get_batch(std::span<const int64_t> indices, HostMemory memory) const {
  std::vector<int64_t> mapped;
  mapped.reserve(indices.size());
  for (int64_t i : indices) {
    if (i < 0 || i >= size())
      throw Error(fmt::format("Subset: index {} is out of range for a subset of {} examples", i, size()));
    mapped.push_back(indices_[size_t(i)]);
  }
  return base_->get_batch(mapped, memory);
}

ConcatDataset::ConcatDataset(std::vector<const Dataset*> datasets) : datasets_(std::move(datasets)) {
  int64_t end = 0;
  for (size_t k = 0; k < datasets_.size(); ++k) {
    if (!datasets_[k]) throw Error(fmt::format("ConcatDataset: dataset {} is null", k));
    end += datasets_[k]->size();
    ends_.push_back(end);
  }
}

Example ConcatDataset::get(int64_t index) const {
  if (index < 0 || index >= size())
    throw Error(fmt::format("ConcatDataset: index {} is out of range for {} examples", index, size()));
  size_t k = size_t(std::upper_bound(ends_.begin(), ends_.end(), index) - ends_.begin());
  return datasets_[k]->get(index - (k == 0 ? 0 : ends_[k - 1]));
}

std::vector<Subset> random_split(const Dataset& base, const std::vector<int64_t>& lengths, uint64_t seed) {
  int64_t total = 0;
  for (int64_t l : lengths) {
    if (l < 0) throw Error(fmt::format("random_split: lengths must be >= 0, got {}", l));
    total += l;
  }
  if (total != base.size())
    throw Error(fmt::format("random_split: the lengths sum to {}, the dataset has {} examples", total, base.size()));
  std::vector<int64_t> perm(static_cast<size_t>(total));
  std::iota(perm.begin(), perm.end(), int64_t(0));
  internal::SplitMix rng(seed);
  for (size_t i = perm.size(); i > 1; --i) std::swap(perm[i - 1], perm[rng.below(i)]);
  std::vector<Subset> out;
  size_t at = 0;
  for (int64_t l : lengths) {
    out.emplace_back(base, std::vector<int64_t>(perm.begin() + std::ptrdiff_t(at), perm.begin() + std::ptrdiff_t(at + size_t(l))));
    at += size_t(l);
  }
  return out;
}

std::vector<Subset> random_split(const Dataset& base, const std::vector<double>& fractions, uint64_t seed) {
  double sum = 0;
  for (double f : fractions) {
    if (!(f >= 0 && f <= 1)) throw Error(fmt::format("random_split: fractions must be in [0, 1], got {}", f));
    sum += f;
  }
  if (std::abs(sum - 1) > 1e-9) throw Error(fmt::format("random_split: the fractions sum to {}, expected 1", sum));
  const int64_t n = base.size();
  std::vector<int64_t> lengths;
  int64_t given = 0;
  for (double f : fractions) {
    lengths.push_back(int64_t(std::floor(double(n) * f)));
    given += lengths.back();
  }
  for (int64_t r = 0; r < n - given; ++r) lengths[size_t(r) % lengths.size()] += 1;  // round robin, as PyTorch
  return random_split(base, lengths, seed);
}

Transform on_data(std::function<Tensor(Tensor, uint64_t)> f) {
  if (!f) throw Error("on_data: the function is empty");
  return [f = std::move(f)](Example e, uint64_t seed) {
    e.data = f(std::move(e.data), seed);
    return e;
  };
}

Example Compose::operator()(Example e, uint64_t seed) const {
  for (const Transform& t : transforms_) e = t(std::move(e), seed);
  return e;
}

TransformDataset::TransformDataset(const Dataset& base, Transform transform, uint64_t seed)
    : base_(&base), transform_(std::move(transform)), seed_(seed) {
  if (!transform_) throw Error("TransformDataset: the transform is empty");
}

Example TransformDataset::get(int64_t index) const {
  uint64_t s = internal::derive_seed(internal::derive_seed(seed_, uint64_t(epoch_)), uint64_t(index));
  return transform_(base_->get(index), s);
}

}  // namespace reel::data
