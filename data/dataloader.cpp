// DataLoader: the epoch order, and the workers that make batches ahead of the
// consumer. Batches are numbered; workers claim the next number, make that batch
// and file it under its number; the consumer waits for the number it needs. The
// order of batches is thus fixed by the numbering, never by thread timing.
#include "dataloader.h"

#include <fmt/format.h>

#include <condition_variable>
#include <exception>
#include <map>
#include <mutex>
#include <numeric>
#include <thread>

#include "../autograd/grad_mode.h"
#include "../tensor/parallel.h"
#include "../cuda/cuda.h"
#include "internal/io.h"

namespace reel::data {

struct DataLoader::Run {
  const Dataset& dataset;
  const DataLoaderOptions& opt;
  std::vector<int64_t> order;
  int64_t batches;
  int64_t epoch;
  GeneratorState shuffle;  // the generator's state before it drew `order` (with a generator)
  int64_t taken;           // batches handed to the consumer (those before the first count)

  struct Slot {
    Example batch;
    std::exception_ptr error;
  };
  std::mutex m;
  std::condition_variable space;     // the consumer moved on: workers may make more
  std::condition_variable produced;  // a batch was filed
  std::map<int64_t, Slot> ready;
  int64_t next_make;  // the next batch number a worker claims
  int64_t in_use;     // the batch the consumer holds
  bool stop = false;
  std::vector<std::thread> threads;

  Run(const Dataset& dataset, const DataLoaderOptions& opt, std::vector<int64_t> order, int64_t batches, int64_t epoch,
      GeneratorState shuffle, int64_t first)
      : dataset(dataset), opt(opt), order(std::move(order)), batches(batches), epoch(epoch), shuffle(shuffle),
        taken(first), next_make(first), in_use(first - 1) {
    try {
      // A worker's ops run on the worker alone: an OpenMP team of its own would spin on
      // the cores the training step uses (a crop-flip-normalise transform of 128 28x28
      // images slowed a ResNet step by 15% on 2 cores; with one thread, not measurably).
      for (int w = 0; w < opt.workers; ++w) threads.emplace_back([this] {
        set_num_threads(1);
        work();
      });
    } catch (...) {
      halt();
      throw;
    }
  }
  ~Run() { halt(); }

  void halt() {
    {
      std::lock_guard lock(m);
      stop = true;
    }
    space.notify_all();
    for (auto& t : threads) t.join();
    threads.clear();
  }

  // A tensor bound for a GPU, in pinned memory so that its copy is asynchronous. A
  // transform that made new (pageable) tensors costs one host copy here.
  static Tensor pinned(const Tensor& t) {
    if (!t.defined() || !t.device().is_cpu() || cuda::is_pinned(t)) return t;
    Tensor p = cuda::pinned_empty(t.shape(), t.dtype());
    p.copy_(t);
    return p;
  }

  Example make(int64_t k) const {
    NoGradGuard no_grad;  // a batch is input: nothing to record, on any thread
    int64_t begin = k * opt.batch_size;
    int64_t end = std::min<int64_t>(begin + opt.batch_size, int64_t(order.size()));
    bool gpu = opt.device.is_cuda();
    Example b = dataset.get_batch(std::span<const int64_t>(order.data() + begin, size_t(end - begin)),
                                  gpu ? HostMemory::pinned : HostMemory::pageable);
    if (opt.transform) {
      uint64_t epoch_seed = internal::derive_seed(opt.seed, uint64_t(epoch));
      b = opt.transform(std::move(b), internal::derive_seed(epoch_seed, uint64_t(k)));
    }
    if (gpu && cuda::is_available()) {  // without CUDA, to() says why it cannot copy
      b.data = pinned(b.data);
      b.target = pinned(b.target);
    }
    if (!(opt.device == kCPU)) {
      b.data = b.data.to(opt.device);
      if (b.target.defined()) b.target = b.target.to(opt.device);
    }
    return b;
  }

  void work() {
    for (;;) {
      int64_t k;
      {
        std::unique_lock lock(m);
        space.wait(lock, [&] { return stop || next_make >= batches || next_make <= in_use + opt.prefetch; });
        if (stop || next_make >= batches) return;
        k = next_make++;
      }
      Slot slot;
      try {
        slot.batch = make(k);
      } catch (...) {
        slot.error = std::current_exception();
      }
      {
        std::lock_guard lock(m);
        ready.emplace(k, std::move(slot));
      }
      produced.notify_all();
    }
  }

  Example take(int64_t k) {
    taken = k + 1;
    if (threads.empty()) return make(k);
    Slot slot;
    {
      std::unique_lock lock(m);
      in_use = k;
      space.notify_all();
      produced.wait(lock, [&] { return ready.count(k) != 0; });
      auto it = ready.find(k);
      slot = std::move(it->second);
      ready.erase(it);
    }
    if (slot.error) std::rethrow_exception(slot.error);
    return std::move(slot.batch);
  }
};

DataLoader::DataLoader(const Dataset& dataset, DataLoaderOptions options) : dataset_(dataset), opt_(std::move(options)) {
  if (opt_.batch_size < 1) throw Error(fmt::format("DataLoader: batch_size must be at least 1, got {}", opt_.batch_size));
  if (opt_.workers < 0) throw Error(fmt::format("DataLoader: workers must be 0 or more, got {}", opt_.workers));
  if (opt_.workers > 0 && opt_.prefetch < 1)
    throw Error(fmt::format("DataLoader: prefetch must be at least 1 with {} workers, got {}", opt_.workers, opt_.prefetch));
  if (opt_.sampler && opt_.shuffle)
    throw Error("DataLoader: give either shuffle or a sampler (the sampler decides the order)");
  batches_ = count_batches();
}

int64_t DataLoader::count_batches() const {
  int64_t n = opt_.sampler ? opt_.sampler->size() : dataset_.size();
  return opt_.drop_last ? n / opt_.batch_size : (n + opt_.batch_size - 1) / opt_.batch_size;
}

DataLoader::~DataLoader() = default;

std::vector<int64_t> DataLoader::order(int64_t e) const {
  if (opt_.sampler) {
    std::vector<int64_t> idx = opt_.sampler->indices(e);
    for (int64_t i : idx)
      if (i < 0 || i >= dataset_.size())
        throw Error(fmt::format("DataLoader: the sampler gave index {} for a dataset of {} examples", i,
                                dataset_.size()));
    return idx;
  }
  if (opt_.shuffle && opt_.generator)
    throw Error(fmt::format("DataLoader::order({}): with a generator, an epoch's order is drawn from it when the "
                            "epoch begins and cannot be computed ahead", e));
  std::vector<int64_t> idx(size_t(dataset_.size()));
  std::iota(idx.begin(), idx.end(), int64_t(0));
  if (opt_.shuffle) {
    internal::SplitMix rng(internal::derive_seed(opt_.seed, uint64_t(e)));
    for (size_t i = idx.size(); i > 1; --i) std::swap(idx[i - 1], idx[rng.below(i)]);  // Fisher-Yates
  }
  return idx;
}

DataLoader::Iterator DataLoader::begin() {
  run_.reset();  // joins the workers of an epoch left unfinished
  batches_ = count_batches();  // the dataset may have changed size since the last epoch
  int64_t first = resume_batch_;
  if (first > batches_)
    throw Error(fmt::format("DataLoader: the loaded state resumes epoch {} at batch {}, but an epoch has {} batches "
                            "(a different dataset or batch size?)", epoch_, first, batches_));
  std::vector<int64_t> idx;
  GeneratorState shuffle{};
  if (opt_.shuffle && opt_.generator) {
    // mid-epoch resume: the same order again from a copy, leaving the user's generator
    // where the checkpoint put it (after the draw); else a fresh draw from it
    Generator resumed;
    resumed.set_state(resume_shuffle_);
    Generator& gen = first > 0 ? resumed : *opt_.generator;
    shuffle = gen.get_state();
    idx = randperm(dataset_.size(), gen).to_vector<int64_t>();
  } else {
    idx = order(epoch_);
  }
  run_ = std::make_unique<Run>(dataset_, opt_, std::move(idx), batches_, epoch_, shuffle, first);
  ++epoch_;
  resume_batch_ = 0;
  return Iterator(run_.get(), first);
}

DataLoaderState DataLoader::state() const {
  if (!run_) return {.epoch = epoch_, .batch = resume_batch_, .shuffle = resume_batch_ ? resume_shuffle_ : GeneratorState{}};
  if (run_->taken >= run_->batches) return {.epoch = run_->epoch + 1, .batch = 0};
  return {.epoch = run_->epoch, .batch = run_->taken, .shuffle = run_->shuffle};
}

void DataLoader::load_state(const DataLoaderState& state) {
  if (state.epoch < 0 || state.batch < 0)
    throw Error(fmt::format("DataLoader::load_state: expected epoch and batch >= 0, got epoch {} batch {}", state.epoch,
                            state.batch));
  run_.reset();
  epoch_ = state.epoch;
  resume_batch_ = state.batch;
  resume_shuffle_ = state.shuffle;
}

DataLoader::Iterator::Iterator(Run* run, int64_t index) : run_(run), index_(index) {
  if (run_ && index_ < run_->batches) batch_ = run_->take(index_);
}

DataLoader::Iterator& DataLoader::Iterator::operator++() {
  ++index_;
  batch_ = {};  // drop the last batch before waiting for the next: one fewer batch alive
  if (run_ && index_ < run_->batches) batch_ = run_->take(index_);
  return *this;
}

}  // namespace reel::data
