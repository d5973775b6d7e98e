// Samplers on the data folder's SplitMix streams: one stream per (seed, epoch).
#include "sampler.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <utility>

#include "internal/io.h"

namespace reel::data {
namespace {
std::vector<int64_t> permutation(int64_t n, internal::SplitMix& rng) {
  std::vector<int64_t> idx(static_cast<size_t>(n));
  std::iota(idx.begin(), idx.end(), int64_t(0));
  for (size_t i = idx.size(); i > 1; --i) std::swap(idx[i - 1], idx[rng.below(i)]);  // Fisher-Yates
  return idx;
}
}  // namespace

SequentialSampler::SequentialSampler(int64_t n) : n_(n) {
  if (n < 0) throw Error(fmt::format("SequentialSampler: n must be >= 0, got {}", n));
}

std::vector<int64_t> SequentialSampler::indices(int64_t) const {
  std::vector<int64_t> idx(static_cast<size_t>(n_));
  std::iota(idx.begin(), idx.end(), int64_t(0));
  return idx;
}

RandomSampler::RandomSampler(int64_t n, RandomSamplerOptions opt)
    : n_(n), num_samples_(opt.num_samples < 0 ? n : opt.num_samples), opt_(opt) {
  if (n < 0) throw Error(fmt::format("RandomSampler: n must be >= 0, got {}", n));
  if (opt.num_samples == 0 || opt.num_samples < -1)
    throw Error(fmt::format("RandomSampler: num_samples must be positive, got {}", opt.num_samples));
  if (n == 0 && num_samples_ > 0) throw Error("RandomSampler: cannot draw samples from 0 examples");
}

std::vector<int64_t> RandomSampler::indices(int64_t epoch) const {
  internal::SplitMix rng(internal::derive_seed(opt_.seed, uint64_t(epoch)));
  std::vector<int64_t> out;
  out.reserve(size_t(num_samples_));
  if (opt_.replacement) {
    for (int64_t i = 0; i < num_samples_; ++i) out.push_back(int64_t(rng.below(uint64_t(n_))));
    return out;
  }
  while (int64_t(out.size()) < num_samples_) {
    std::vector<int64_t> p = permutation(n_, rng);
    size_t take = std::min(p.size(), size_t(num_samples_) - out.size());
    out.insert(out.end(), p.begin(), p.begin() + std::ptrdiff_t(take));
  }
  return out;
}

SubsetRandomSampler::SubsetRandomSampler(std::vector<int64_t> indices, uint64_t seed)
    : indices_(std::move(indices)), seed_(seed) {
  for (int64_t i : indices_)
    if (i < 0) throw Error(fmt::format("SubsetRandomSampler: indices must be >= 0, got {}", i));
}

std::vector<int64_t> SubsetRandomSampler::indices(int64_t epoch) const {
  internal::SplitMix rng(internal::derive_seed(seed_, uint64_t(epoch)));
  std::vector<int64_t> out;
  out.reserve(indices_.size());
  for (int64_t k : permutation(int64_t(indices_.size()), rng)) out.push_back(indices_[size_t(k)]);
  return out;
}

WeightedRandomSampler::WeightedRandomSampler(std::vector<double> weights, int64_t num_samples,
                                             WeightedRandomSamplerOptions opt)
    : weights_(std::move(weights)), num_samples_(num_samples), opt_(opt) {
  if (num_samples <= 0)
    throw Error(fmt::format("WeightedRandomSampler: num_samples must be positive, got {}", num_samples));
  int64_t positive = 0;
  for (size_t i = 0; i < weights_.size(); ++i) {
    if (!(weights_[i] >= 0) || !std::isfinite(weights_[i]))
      throw Error(fmt::format("WeightedRandomSampler: weight {} is {}, expected finite and >= 0", i, weights_[i]));
    positive += weights_[i] > 0;
  }
  if (positive == 0) throw Error("WeightedRandomSampler: expected some positive weight");
  if (!opt.replacement && num_samples > positive)
    throw Error(fmt::format("WeightedRandomSampler: {} samples without replacement from {} positive weights",
                            num_samples, positive));
}

std::vector<int64_t> WeightedRandomSampler::indices(int64_t epoch) const {
  internal::SplitMix rng(internal::derive_seed(opt_.seed, uint64_t(epoch)));
  std::vector<double> w = weights_;
  std::vector<int64_t> out;
  out.reserve(size_t(num_samples_));
  // inverse-CDF draws over the cumulative weights; without replacement a drawn
  // index's weight is zeroed and the sums rebuilt (O(n) per draw: samplers are small)
  std::vector<double> cdf(w.size());
  auto rebuild = [&] { std::partial_sum(w.begin(), w.end(), cdf.begin()); };
  rebuild();
  for (int64_t k = 0; k < num_samples_; ++k) {
    double u = rng.unit() * cdf.back();
    size_t i = size_t(std::upper_bound(cdf.begin(), cdf.end(), u) - cdf.begin());
    while (i < w.size() && w[i] == 0) ++i;  // u on a boundary: the next index with weight
    if (i >= w.size()) i = w.size() - 1;
    out.push_back(int64_t(i));
    if (!opt_.replacement) {
      w[i] = 0;
      rebuild();
    }
  }
  return out;
}

DistributedSampler::DistributedSampler(int64_t n, DistributedSamplerOptions opt) : n_(n), opt_(opt) {
  if (n < 0) throw Error(fmt::format("DistributedSampler: n must be >= 0, got {}", n));
  if (opt.num_replicas < 1)
    throw Error(fmt::format("DistributedSampler: num_replicas must be at least 1, got {}", opt.num_replicas));
  if (opt.rank < 0 || opt.rank >= opt.num_replicas)
    throw Error(fmt::format("DistributedSampler: rank must be in [0, {}), got {}", opt.num_replicas, opt.rank));
  // PyTorch's rule: with drop_last the tail that cannot be split evenly is dropped,
  // else the epoch is padded up to the next multiple of num_replicas.
  int64_t r = opt.num_replicas;
  num_samples_ = opt.drop_last && n % r != 0 ? (n - r + r - 1) / r : (n + r - 1) / r;
  if (num_samples_ < 0) num_samples_ = 0;
}

std::vector<int64_t> DistributedSampler::indices(int64_t epoch) const {
  if (epoch_ >= 0) epoch = epoch_;
  std::vector<int64_t> all;
  if (opt_.shuffle) {
    internal::SplitMix rng(internal::derive_seed(opt_.seed, uint64_t(epoch)));
    all = permutation(n_, rng);
  } else {
    all.resize(size_t(n_));
    std::iota(all.begin(), all.end(), int64_t(0));
  }
  size_t total = size_t(total_size());
  if (all.size() < total) {  // pad with the head of the permutation, repeated when short
    size_t have = all.size();
    for (size_t i = 0; all.size() < total; ++i) all.push_back(all[i % have]);
  }
  all.resize(total);
  std::vector<int64_t> mine;
  mine.reserve(size_t(num_samples_));
  for (size_t i = size_t(opt_.rank); i < total; i += size_t(opt_.num_replicas)) mine.push_back(all[i]);
  return mine;
}

BatchSampler::BatchSampler(const Sampler& sampler, int64_t batch_size, bool drop_last)
    : sampler_(sampler), batch_size_(batch_size), drop_last_(drop_last) {
  if (batch_size < 1) throw Error(fmt::format("BatchSampler: batch_size must be at least 1, got {}", batch_size));
}

int64_t BatchSampler::size() const {
  int64_t n = sampler_.size();
  return drop_last_ ? n / batch_size_ : (n + batch_size_ - 1) / batch_size_;
}

std::vector<std::vector<int64_t>> BatchSampler::batches(int64_t epoch) const {
  std::vector<int64_t> idx = sampler_.indices(epoch);
  std::vector<std::vector<int64_t>> out;
  for (int64_t b = 0, n = size(); b < n; ++b) {
    size_t begin = size_t(b * batch_size_), end = std::min(idx.size(), begin + size_t(batch_size_));
    out.emplace_back(idx.begin() + std::ptrdiff_t(begin), idx.begin() + std::ptrdiff_t(end));
  }
  return out;
}

}  // namespace reel::data
