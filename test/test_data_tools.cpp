// Subset, ConcatDataset, random_split, samplers (alone and driving a DataLoader),
// Compose and per-sample transforms.
#include <catch2/catch.hpp>
#include <reel/reel.h>

#include <algorithm>
#include <map>
#include <numeric>
#include <set>
#include <vector>

using namespace reel;

namespace {
// example i: data [2] = {i, -i}, target i
data::TensorDataset numbered(int64_t n, int64_t offset = 0) {
  std::vector<float> d;
  std::vector<int64_t> t;
  for (int64_t i = 0; i < n; ++i) {
    d.push_back(float(i + offset));
    d.push_back(-float(i + offset));
    t.push_back(i + offset);
  }
  return data::TensorDataset(from_vector(d, {n, 2}), from_vector(t, {n}));
}
std::vector<int64_t> targets(const data::Example& e) { return e.target.to_vector<int64_t>(); }
}  // namespace

TEST_CASE("Subset, ConcatDataset and random_split", "[data][data_tools]") {
  data::TensorDataset ds = numbered(10);
  data::Subset sub(ds, {7, 2, 5});
  CHECK(sub.size() == 3);
  CHECK(sub.get(1).target.item<int64_t>() == 2);
  CHECK(targets(sub.get_batch(std::vector<int64_t>{2, 0})) == std::vector<int64_t>{5, 7});
  CHECK_THROWS_WITH(data::Subset(ds, {10}), Catch::Contains("out of range"));
  CHECK_THROWS_WITH(sub.get(3), Catch::Contains("out of range"));

  data::TensorDataset more = numbered(4, 100);
  data::ConcatDataset cat({&ds, &more});
  CHECK(cat.size() == 14);
  CHECK(cat.get(9).target.item<int64_t>() == 9);
  CHECK(cat.get(10).target.item<int64_t>() == 100);
  CHECK(targets(cat.get_batch(std::vector<int64_t>{13, 0})) == std::vector<int64_t>{103, 0});
  CHECK_THROWS(cat.get(14));

  std::vector<data::Subset> parts = data::random_split(ds, std::vector<int64_t>{6, 4}, 1);
  REQUIRE(parts.size() == 2);
  CHECK(parts[0].size() == 6);
  CHECK(parts[1].size() == 4);
  std::vector<int64_t> all = parts[0].indices();
  all.insert(all.end(), parts[1].indices().begin(), parts[1].indices().end());
  std::sort(all.begin(), all.end());
  std::vector<int64_t> expect(10);
  std::iota(expect.begin(), expect.end(), 0);
  CHECK(all == expect);  // a partition
  CHECK(data::random_split(ds, std::vector<int64_t>{6, 4}, 1)[0].indices() == parts[0].indices());  // seeded
  CHECK(data::random_split(ds, std::vector<int64_t>{6, 4}, 2)[0].indices() != parts[0].indices());
  auto frac = data::random_split(ds, std::vector<double>{0.33, 0.33, 0.34}, 0);
  CHECK(frac[0].size() == 4);  // floors 3, 3, 3; the remainder 1 to the first
  CHECK(frac[1].size() == 3);
  CHECK(frac[2].size() == 3);
  CHECK_THROWS_WITH(data::random_split(ds, std::vector<int64_t>{6, 5}), Catch::Contains("sum to 11"));
}

TEST_CASE("samplers give seeded epochs of the right indices", "[data][data_tools]") {
  data::RandomSampler perm(8, {.seed = 4});
  std::vector<int64_t> e0 = perm.indices(0), e1 = perm.indices(1);
  std::vector<int64_t> sorted = e0;
  std::sort(sorted.begin(), sorted.end());
  CHECK(sorted == data::SequentialSampler(8).indices(0));
  CHECK(e0 != e1);
  CHECK(perm.indices(0) == e0);
  data::RandomSampler longer(3, {.num_samples = 7});
  std::vector<int64_t> l = longer.indices(0);
  CHECK(l.size() == 7);
  CHECK(std::set<int64_t>(l.begin(), l.begin() + 3).size() == 3);  // a whole permutation first
  data::RandomSampler repl(5, {.replacement = true, .num_samples = 1000});
  for (int64_t i : repl.indices(2)) CHECK((i >= 0 && i < 5));

  data::SubsetRandomSampler subset({9, 3, 6}, 1);
  std::vector<int64_t> s = subset.indices(0);
  std::sort(s.begin(), s.end());
  CHECK(s == std::vector<int64_t>{3, 6, 9});

  // weights 0, 1, 3: index 0 never, index 2 about three times as often as index 1
  data::WeightedRandomSampler weighted({0.0, 1.0, 3.0}, 20000, {.seed = 7});
  std::map<int64_t, int> count;
  for (int64_t i : weighted.indices(0)) ++count[i];
  CHECK(count[0] == 0);
  CHECK(double(count[2]) / double(count[1]) == Approx(3.0).epsilon(0.08));
  data::WeightedRandomSampler unique({1.0, 0.0, 2.0, 5.0}, 3, {.replacement = false});
  std::vector<int64_t> u = unique.indices(0);
  std::sort(u.begin(), u.end());
  CHECK(u == std::vector<int64_t>{0, 2, 3});
  CHECK_THROWS_WITH(data::WeightedRandomSampler({1.0, 0.0}, 2, {.replacement = false}), Catch::Contains("positive"));
  CHECK_THROWS_WITH(data::WeightedRandomSampler({1.0, -1.0}, 2), Catch::Contains(">= 0"));

  data::BatchSampler batches(subset, 2);
  auto b = batches.batches(0);
  REQUIRE(b.size() == 2);
  CHECK(b[0].size() == 2);
  CHECK(b[1].size() == 1);
  CHECK(data::BatchSampler(subset, 2, true).batches(0).size() == 1);
}

TEST_CASE("a DataLoader takes its epochs from a sampler", "[data][data_tools]") {
  data::TensorDataset ds = numbered(10);
  data::SubsetRandomSampler sampler({1, 3, 5, 7, 9}, 3);
  data::DataLoader loader(ds, {.batch_size = 2, .sampler = &sampler});
  CHECK(loader.size() == 3);
  for (int epoch = 0; epoch < 2; ++epoch) {
    std::vector<int64_t> seen;
    for (data::Example& b : loader)
      for (int64_t t : targets(b)) seen.push_back(t);
    CHECK(seen == sampler.indices(epoch));
  }
  data::DataLoader threaded(ds, {.batch_size = 2, .workers = 2, .sampler = &sampler});
  std::vector<int64_t> seen;
  for (data::Example& b : threaded)
    for (int64_t t : targets(b)) seen.push_back(t);
  CHECK(seen == sampler.indices(0));
  CHECK_THROWS_WITH(data::DataLoader(ds, {.shuffle = true, .sampler = &sampler}), Catch::Contains("sampler"));
  data::SubsetRandomSampler bad({3, 12});
  data::DataLoader wrong(ds, {.sampler = &bad});
  CHECK_THROWS_WITH(wrong.begin(), Catch::Contains("index 12"));
}

TEST_CASE("Compose and per-sample transforms", "[data][data_tools]") {
  data::TensorDataset ds = numbered(6);
  data::Compose plus_then_double{data::on_data([](Tensor x, uint64_t) { return x + 1.0; }),
                                 data::on_data([](Tensor x, uint64_t) { return x * 2.0; })};
  data::Example e = plus_then_double(ds.get(3), 0);
  CHECK(e.data.to_vector<float>() == std::vector<float>{8.0f, -4.0f});  // (3 + 1) 2, (-3 + 1) 2
  CHECK(e.target.item<int64_t>() == 3);

  // per sample: each example gets its own seed from (seed, epoch, index)
  data::TransformDataset noisy(ds, [](data::Example ex, uint64_t seed) {
    ex.data = ex.data + double(seed % 1000);
    return ex;
  }, 5);
  data::Example a = noisy.get(2), b = noisy.get(2), c = noisy.get(4);
  CHECK(a.data.to_vector<float>() == b.data.to_vector<float>());  // the same seed for the same example and epoch
  CHECK(a.data.to_vector<float>()[0] - 2.0f != c.data.to_vector<float>()[0] - 4.0f);
  noisy.set_epoch(1);
  CHECK(noisy.get(2).data.to_vector<float>() != a.data.to_vector<float>());
  // batches collate the transformed examples; a per-batch transform runs after them
  data::DataLoader loader(noisy, {.batch_size = 3, .transform = plus_then_double});
  data::Example first = *loader.begin();
  CHECK(first.data.shape() == Dims{3, 2});
  noisy.set_epoch(1);  // the epoch the loader's batch was made in
  Tensor expect = (stack({noisy.get(0).data, noisy.get(1).data, noisy.get(2).data}) + 1.0) * 2.0;
  CHECK(allclose(first.data, expect));
}
