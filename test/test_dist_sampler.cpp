// data::DistributedSampler against PyTorch's DistributedSampler (the shards below are
// what torch.utils.data.DistributedSampler(range(n), shuffle=False) gives), and its
// shuffled shards: disjoint, complete, the same on every rank for a (seed, epoch).
#include <catch2/catch.hpp>

#include <algorithm>
#include <reel/reel.h>

using namespace reel;
using Shards = std::vector<std::vector<int64_t>>;

namespace {
Shards shards(int64_t n, int64_t replicas, bool shuffle, bool drop_last, int64_t epoch = 0, uint64_t seed = 0) {
  Shards out;
  for (int64_t r = 0; r < replicas; ++r)
    out.push_back(data::DistributedSampler(n, {.num_replicas = replicas, .rank = r, .shuffle = shuffle,
                                               .seed = seed, .drop_last = drop_last})
                      .indices(epoch));
  return out;
}
}  // namespace

TEST_CASE("DistributedSampler: PyTorch's padding and drop_last rules", "[data][sampler]") {
  CHECK(shards(10, 3, false, false) == Shards{{0, 3, 6, 9}, {1, 4, 7, 0}, {2, 5, 8, 1}});
  CHECK(shards(10, 3, false, true) == Shards{{0, 3, 6}, {1, 4, 7}, {2, 5, 8}});
  CHECK(shards(2, 5, false, false) == Shards{{0}, {1}, {0}, {1}, {0}});  // padding repeats the head
  CHECK(shards(7, 2, false, true) == Shards{{0, 2, 4}, {1, 3, 5}});
  CHECK(shards(7, 2, false, false) == Shards{{0, 2, 4, 6}, {1, 3, 5, 0}});
  CHECK(data::DistributedSampler(10, {.num_replicas = 3, .rank = 0}).size() == 4);
  CHECK(data::DistributedSampler(10, {.num_replicas = 3, .rank = 0, .drop_last = true}).size() == 3);
  CHECK(data::DistributedSampler(0, {.num_replicas = 2, .rank = 1}).indices(0).empty());
}

TEST_CASE("DistributedSampler: shuffled shards are disjoint and complete, reshuffled per epoch", "[data][sampler]") {
  const int64_t n = 1000, replicas = 4;
  Shards e0 = shards(n, replicas, true, false, 0, 42);
  std::vector<int64_t> all;
  for (auto& s : e0) {
    CHECK(int64_t(s.size()) == n / replicas);
    all.insert(all.end(), s.begin(), s.end());
  }
  std::sort(all.begin(), all.end());
  std::vector<int64_t> expect(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) expect[size_t(i)] = i;
  CHECK(all == expect);  // each index exactly once: disjoint and complete
  CHECK(shards(n, replicas, true, false, 0, 42) == e0);   // the same (seed, epoch), the same shards
  CHECK(shards(n, replicas, true, false, 1, 42) != e0);   // another epoch
  CHECK(shards(n, replicas, true, false, 0, 43) != e0);   // another seed
  // set_epoch wins over the epoch the loader passes (PyTorch's way)
  data::DistributedSampler s(n, {.num_replicas = replicas, .rank = 2, .seed = 42});
  s.set_epoch(1);
  CHECK(s.indices(0) == shards(n, replicas, true, false, 1, 42)[2]);
  // an uneven count: padded shards of equal size that still cover everything
  Shards odd = shards(10, 4, true, false, 3, 1);
  std::vector<int64_t> seen;
  for (auto& sh : odd) {
    CHECK(sh.size() == 3u);
    seen.insert(seen.end(), sh.begin(), sh.end());
  }
  std::sort(seen.begin(), seen.end());
  seen.erase(std::unique(seen.begin(), seen.end()), seen.end());
  CHECK(seen.size() == 10u);
}

TEST_CASE("DistributedSampler: bad options are Errors", "[data][sampler]") {
  CHECK_THROWS_WITH(data::DistributedSampler(5, {.num_replicas = 2, .rank = 2}),
                    Catch::Contains("rank must be in [0, 2), got 2"));
  CHECK_THROWS_WITH(data::DistributedSampler(5, {.num_replicas = 0}), Catch::Contains("num_replicas must be at least 1"));
}

TEST_CASE("DistributedSampler: a DataLoader over it yields the rank's shard", "[data][sampler]") {
  data::TensorDataset ds(arange(int64_t(10)).reshape({10, 1}), arange(int64_t(10)));
  data::DistributedSampler shard(10, {.num_replicas = 2, .rank = 1, .shuffle = false});
  data::DataLoader loader(ds, {.batch_size = 5, .sampler = &shard});
  std::vector<int64_t> got;
  for (auto& batch : loader) {
    auto v = batch.target.to_vector<int64_t>();
    got.insert(got.end(), v.begin(), v.end());
  }
  CHECK(got == std::vector<int64_t>{1, 3, 5, 7, 9});
}
