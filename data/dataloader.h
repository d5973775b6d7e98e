// DataLoader: iterates a Dataset in batches, an epoch per range-for loop.
//
//   data::TensorDataset train(images, labels);
//   data::DataLoader loader(train, {.batch_size = 128, .shuffle = true, .seed = 1, .workers = 2});
//   for (int epoch = 0; epoch < 10; ++epoch)
//     for (data::Example& batch : loader) train_step(batch.data, batch.target);
//
// - Order: with shuffle, epoch e visits a permutation drawn from (seed, e): the same
//   seed gives the same sequence of epochs, whatever the number of workers. With a
//   `generator`, each epoch's permutation is instead randperm drawn from it when the
//   epoch begins (as PyTorch's DataLoader(generator=)).
// - Resume: state() is where the loader stands (the next batch: its epoch and index,
//   and what that epoch's order was drawn from); load_state() on a loader made with
//   the same dataset and options makes the next begin() continue from there, in the
//   middle of an epoch too, with the same order and batches. Take state() after the
//   batches it counts have been used: every batch the iterator has handed out counts.
//   (Leaving a range-for early abandons the epoch: the next begin() starts a new one;
//   loader.load_state(loader.state()) first continues the abandoned one instead.)
// - Workers: with workers > 0, background threads gather batches (get_batch), run
//   the transform and copy to `device` while the current batch trains; at most
//   `prefetch` batches are ready or in the making ahead of the one in use. Batches
//   come out in order, identical to workers = 0. An exception thrown while making a
//   batch is rethrown by the iterator when that batch is reached.
// - Device: for a GPU, batches are assembled in pinned host memory (get_batch with
//   HostMemory::pinned) and copied with Tensor::to(device) in the worker; from pinned
//   memory that copy is asynchronous, so the training thread never waits on it.
// - Transform: called on each whole batch, on the host, before the copy, with a seed
//   drawn from (seed, epoch, batch index): random augmentations are reproducible and
//   independent of the worker that ran them. With workers > 0 it runs on several
//   threads at once, so it must not change shared state.
#pragma once
#include <cstdint>
#include <functional>
#include <iterator>
#include <memory>

#include "dataset.h"
#include "sampler.h"

namespace reel::data {

struct DataLoaderOptions {
  int64_t batch_size = 1;
  bool shuffle = false;
  uint64_t seed = 0;
  bool drop_last = false;  // drop a last batch smaller than batch_size
  int workers = 0;         // background threads; 0 makes each batch on the calling thread
  int prefetch = 4;        // batches made ahead of the one in use (with workers > 0)
  Device device = kCPU;    // where batches are delivered
  std::function<Example(Example batch, uint64_t seed)> transform = nullptr;  // optional, per batch
  // Optional: the epoch's order comes from it (not with shuffle); it must outlive the loader.
  const Sampler* sampler = nullptr;
  Generator* generator = nullptr;  // with shuffle: the orders' source (must outlive the loader)
};

// Where a loader stands: the next batch is batch `batch` of epoch `epoch` (0-based).
struct DataLoaderState {
  int64_t epoch = 0;
  int64_t batch = 0;
  // With a generator, mid-epoch (batch > 0): its state just before it drew this
  // epoch's order, to draw the same order again. Otherwise unused.
  GeneratorState shuffle = {};
  bool operator==(const DataLoaderState&) const = default;
};

class DataLoader {
 public:
  // The loader keeps a reference: `dataset` must outlive it.
  DataLoader(const Dataset& dataset, DataLoaderOptions options = {});
  DataLoader(const Dataset&& dataset, DataLoaderOptions options = {}) = delete;  // would dangle
  ~DataLoader();
  DataLoader(const DataLoader&) = delete;
  DataLoader& operator=(const DataLoader&) = delete;

  int64_t size() const { return batches_; }  // batches per epoch
  int64_t epoch() const { return epoch_; }   // epochs started so far
  const DataLoaderOptions& options() const { return opt_; }
  // The example order of epoch `e` (what shuffle gives), for inspection and tests.
  // With a generator, orders exist only once drawn: this throws Error.
  std::vector<int64_t> order(int64_t e) const;

  // Where the loader stands, and going back there (see Resume above). load_state
  // stops an epoch in progress (its iterators are then invalid).
  DataLoaderState state() const;
  void load_state(const DataLoaderState& state);

  struct Run;  // one epoch in progress: its order, its workers and their batches
  class Iterator {
   public:
    using iterator_category = std::input_iterator_tag;
    using value_type = Example;
    using difference_type = std::ptrdiff_t;
    using pointer = Example*;
    using reference = Example&;

    Example& operator*() { return batch_; }
    Example* operator->() { return &batch_; }
    Iterator& operator++();
    bool operator==(const Iterator& other) const { return index_ == other.index_; }
    int64_t index() const { return index_; }  // the batch's position in the epoch

   private:
    friend class DataLoader;
    Iterator(Run* run, int64_t index);
    Run* run_ = nullptr;
    int64_t index_ = 0;
    Example batch_;
  };

  // Starts the next epoch (stopping one still in progress, whose iterators are then
  // invalid) and returns its first batch; after load_state, continues the epoch the
  // state is in from its next batch.
  Iterator begin();
  Iterator end() { return Iterator(nullptr, batches_); }

 private:
  int64_t count_batches() const;
  const Dataset& dataset_;
  DataLoaderOptions opt_;
  int64_t batches_ = 0;
  int64_t epoch_ = 0;
  int64_t resume_batch_ = 0;         // where the next begin() starts epoch_ (load_state)
  GeneratorState resume_shuffle_{};  // and what its order is drawn from, with a generator
  std::unique_ptr<Run> run_;
};

}  // namespace reel::data
