// Dataset: a sized collection of examples, each a (data, target) pair of tensors.
// get(i) serves one example; get_batch(indices) serves a whole batch, and is what
// the DataLoader calls. TensorDataset holds everything in two host tensors and
// gathers a batch with one copy per row, so feeding 60000 images an epoch costs
// a few milliseconds.
//
//   data::ImageSet train = data::load_mnist(dir, data::Split::train);
//   data::TensorDataset ds(train.images, train.labels);  // [N,1,28,28] f32, [N] i64
//   data::Example b = ds.get_batch(std::vector<int64_t>{3, 1, 4});  // [3,1,28,28], [3]
#pragma once
#include <cstdint>
#include <span>
#include <vector>

#include "../tensor/tensor.h"

namespace reel::data {

struct Example {
  Tensor data;
  Tensor target;
};

// Which half of a dataset a reader loads.
enum class Split : uint8_t { train, test };

// Images and their class labels, as the readers return them: images [N, C, H, W],
// labels i64 [N].
struct ImageSet {
  Tensor images;
  Tensor labels;
};

// Where a batch's host tensors live: pinned (page-locked) memory lets the copy to a
// GPU run asynchronously; the DataLoader asks for it when it delivers to a GPU.
// Without CUDA, pinned is ordinary memory.
enum class HostMemory : uint8_t { pageable, pinned };

// Implementations must allow get and get_batch to be called from several threads
// at once (the DataLoader's workers do).
class Dataset {
 public:
  virtual ~Dataset() = default;
  virtual int64_t size() const = 0;
  virtual Example get(int64_t index) const = 0;
  // The examples at `indices`, stacked along a new first dim, in `memory`. The
  // default calls get for each index and stacks (collate); override it when a batch
  // can be gathered in one go.
  virtual Example get_batch(std::span<const int64_t> indices, HostMemory memory = HostMemory::pageable) const;
};

// Stacks examples of equal shapes and dtypes along a new first dim: data [B, ...],
// target [B, ...]. Throws Error when shapes or dtypes differ or the list is empty.
Example collate(const std::vector<Example>& examples, HostMemory memory = HostMemory::pageable);

// Example i is (data[i], targets[i]). Both tensors live on the CPU and share their
// first dim; they are made contiguous once here.
class TensorDataset final : public Dataset {
 public:
  TensorDataset(Tensor data, Tensor targets);
  int64_t size() const override { return size_; }
  Example get(int64_t index) const override;  // views into the held tensors
  Example get_batch(std::span<const int64_t> indices,
                    HostMemory memory = HostMemory::pageable) const override;  // fresh tensors
  const Tensor& data() const { return data_; }
  const Tensor& targets() const { return targets_; }

 private:
  Tensor data_, targets_;
  int64_t size_ = 0;
};

}  // namespace reel::data
