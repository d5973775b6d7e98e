// Datasets: the default batch path (collate) and TensorDataset's one-copy gather.
#include "dataset.h"

#include <fmt/format.h>

#include <cstring>

#include "../cuda/cuda.h"

namespace reel::data {

namespace {

Tensor host_empty(const Dims& shape, DType dtype, HostMemory memory) {
  return memory == HostMemory::pinned ? cuda::pinned_empty(shape, dtype) : empty(shape, {.dtype = dtype});
}

// Copies rows `indices` of a contiguous [N, ...] tensor into a new [B, ...] tensor.
Tensor gather_rows(const Tensor& src, std::span<const int64_t> indices, HostMemory memory) {
  Dims shape = src.shape();
  shape[0] = int64_t(indices.size());
  Tensor out = host_empty(shape, src.dtype(), memory);
  size_t row = src.numel() / src.size(0) * src.element_size();
  const char* from = static_cast<const char*>(src.data_ptr());
  char* to = static_cast<char*>(out.data_ptr());
  for (size_t k = 0; k < indices.size(); ++k) std::memcpy(to + k * row, from + size_t(indices[k]) * row, row);
  return out;
}

Tensor stack_rows(const std::vector<Example>& examples, bool target, HostMemory memory) {
  const Tensor& first = target ? examples[0].target : examples[0].data;
  const char* what = target ? "target" : "data";
  Dims shape = first.shape();
  shape.insert(0, int64_t(examples.size()));
  Tensor out = host_empty(shape, first.dtype(), memory);
  size_t bytes = size_t(first.numel()) * first.element_size();
  char* to = static_cast<char*>(out.data_ptr());
  for (size_t k = 0; k < examples.size(); ++k) {
    Tensor t = target ? examples[k].target : examples[k].data;
    if (!t.defined() || !(t.shape() == first.shape()) || t.dtype() != first.dtype())
      throw Error(fmt::format("collate: example {} has {} {} {}, example 0 has {} {}", k, what,
                              t.defined() ? t.shape().str() : "undefined", t.defined() ? dtype_name(t.dtype()) : "",
                              first.shape().str(), dtype_name(first.dtype())));
    t = t.cpu().contiguous();
    std::memcpy(to + k * bytes, t.data_ptr(), bytes);
  }
  return out;
}

}  // namespace

Example collate(const std::vector<Example>& examples, HostMemory memory) {
  if (examples.empty()) throw Error("collate: no examples to stack");
  if (!examples[0].data.defined() || !examples[0].target.defined())
    throw Error("collate: example 0 has an undefined data or target tensor");
  return {stack_rows(examples, false, memory), stack_rows(examples, true, memory)};
}

Example Dataset::get_batch(std::span<const int64_t> indices, HostMemory memory) const {
  std::vector<Example> examples;
  examples.reserve(indices.size());
  for (int64_t i : indices) examples.push_back(get(i));
  return collate(examples, memory);
}

TensorDataset::TensorDataset(Tensor data, Tensor targets) {
  if (!data.defined() || !targets.defined()) throw Error("TensorDataset: data and targets must both be defined");
  if (data.dim() == 0 || targets.dim() == 0)
    throw Error(fmt::format("TensorDataset: data {} and targets {} need a first (example) dim", data.shape().str(),
                            targets.shape().str()));
  if (data.size(0) != targets.size(0))
    throw Error(fmt::format("TensorDataset: data has {} examples ({}), targets has {} ({})", data.size(0),
                            data.shape().str(), targets.size(0), targets.shape().str()));
  if (!data.device().is_cpu() || !targets.device().is_cpu())
    throw Error(fmt::format("TensorDataset: data ({}) and targets ({}) must live on the CPU; the DataLoader copies "
                            "batches to the device",
                            data.device().str(), targets.device().str()));
  // detached: a dataset is input, never a path for gradients
  data_ = data.detach().contiguous();
  targets_ = targets.detach().contiguous();
  size_ = data.size(0);
}

Example TensorDataset::get(int64_t index) const {
  if (index < 0 || index >= size_)
    throw Error(fmt::format("TensorDataset::get: index {} is out of range for {} examples", index, size_));
  return {data_.select(0, index), targets_.select(0, index)};
}

Example TensorDataset::get_batch(std::span<const int64_t> indices, HostMemory memory) const {
  for (int64_t i : indices)
    if (i < 0 || i >= size_)
      throw Error(fmt::format("TensorDataset::get_batch: index {} is out of range for {} examples", i, size_));
  return {gather_rows(data_, indices, memory), gather_rows(targets_, indices, memory)};
}

}  // namespace reel::data
