// Resuming on another number of ranks, the data side (what train_fashion_mnist does): each
// rank's loader draws from DistributedSampler(n, {W, r, seed}) in batches of global / W, so
// global step b of an epoch is positions [b * global, (b + 1) * global) of the epoch's one
// permutation, whatever W is. A loader position (epoch, batch) saved by W ranks, loaded by
// W' ranks' loaders, continues with exactly the samples not seen yet, each once, and every
// later step sees the same images as in a run that never changed W.
// (No collectives: every rank checks every world size in its own process.)
#include <catch2/catch.hpp>

#include <reel/reel.h>

#include <algorithm>
#include <map>
#include <set>

using namespace reel;

namespace {

constexpr int64_t kN = 576, kGlobal = 48, kSteps = kN / kGlobal;  // n and the batch divide by 1, 2, 3, 4

struct World {
  std::vector<std::unique_ptr<data::DistributedSampler>> samplers;
  std::vector<std::unique_ptr<data::DataLoader>> loaders;
  World(const data::Dataset& set, int w, uint64_t seed) {
    for (int r = 0; r < w; ++r) {
      samplers.push_back(std::make_unique<data::DistributedSampler>(
          kN, data::DistributedSamplerOptions{.num_replicas = w, .rank = r, .seed = seed}));
      loaders.push_back(std::make_unique<data::DataLoader>(
          set, data::DataLoaderOptions{.batch_size = kGlobal / w, .sampler = samplers.back().get()}));
    }
  }
  // The next `steps` global steps: each step's indices over all ranks, sorted.
  std::vector<std::vector<int64_t>> run(int64_t steps) {
    std::vector<std::vector<int64_t>> out(static_cast<size_t>(steps));
    for (auto& l : loaders) {
      int64_t s = 0;
      for (data::Example& b : *l) {
        for (int64_t i : b.target.to_vector<int64_t>()) out[size_t(s)].push_back(i);
        if (++s == steps) break;
      }
      l->load_state(l->state());  // the range-for left early: continue that epoch next time
    }
    for (auto& v : out) std::sort(v.begin(), v.end());
    return out;
  }
};

}  // namespace

TEST_CASE("resize: an epoch resumed on another number of ranks sees each sample once, in the same global steps",
          "[dist][checkpoint]") {
  Tensor idx = arange(0, double(kN), 1, {.dtype = DType::i64});
  data::TensorDataset set(idx.to(DType::f32).reshape({kN, 1}), idx);
  for (auto [w, w2] : std::vector<std::pair<int, int>>{{4, 2}, {2, 3}, {2, 1}, {1, 2}, {3, 4}}) {
    CAPTURE(w, w2);
    World straight(set, w, 7);
    std::vector<std::vector<int64_t>> want = straight.run(kSteps);
    for (int64_t k : {int64_t(1), int64_t(5), kSteps - 1}) {
      CAPTURE(k);
      World before(set, w, 7);
      std::vector<std::vector<int64_t>> got = before.run(k);
      data::DataLoaderState at = before.loaders[0]->state();
      for (auto& l : before.loaders) REQUIRE(l->state() == at);  // every rank at the same place
      CHECK(at.batch == k);
      World after(set, w2, 7);
      for (auto& l : after.loaders) l->load_state(at);
      for (auto& v : after.run(kSteps - k)) got.push_back(v);
      CHECK(got == want);  // the same images in every global step
      std::map<int64_t, int> count;
      for (auto& v : got)
        for (int64_t i : v) count[i]++;
      CHECK(int64_t(count.size()) == kN);
      CHECK(std::all_of(count.begin(), count.end(), [](auto& c) { return c.second == 1; }));
    }
  }
}
