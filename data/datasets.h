// libtorch's dataset pipeline, for programs ported from it: a dataset written as
// torch::data::datasets::Dataset<Self> (get(size_t), std::optional<size_t> size(), and
// get_batch giving the examples unstacked), .map(...) with libtorch's transforms
// (Normalize<>, TensorLambda<>, Lambda<>, a TensorTransform<> of your own), and
// .map(Stack<>()), which makes it a data::Dataset that a DataLoader takes.
//
//   struct Faces : data::datasets::Dataset<Faces> {
//     Faces(Tensor images, Tensor labels) : images(images), labels(labels) {}
//     data::Example get(size_t i) override { return {images[int64_t(i)], labels[int64_t(i)]}; }
//     std::optional<size_t> size() const override { return size_t(labels.size(0)); }
//     Tensor images, labels;
//   };
//   auto ds = Faces(x, y).map(data::transforms::Normalize<>(0.5, 0.5)).map(data::transforms::Stack<>());
//   data::DataLoader loader(ds, {.batch_size = 64, .shuffle = true});  // ds must outlive loader
//
// What differs from libtorch: an example is data::Example (libtorch's Example<>), the
// indices of get_batch are a std::span<const size_t> (libtorch's ArrayRef<size_t>),
// Stack<> is the batch transform there is (it is data::collate), and the loader keeps a
// reference to the dataset instead of taking it (make_data_loader(std::move(ds), ...)).
// As everywhere in data/, get and get_batch may run on several loader workers at once.
#pragma once
#include <concepts>
#include <cstddef>
#include <functional>
#include <optional>
#include <span>
#include <type_traits>
#include <utility>
#include <vector>

#include "dataset.h"

namespace reel::data {

namespace transforms {

// A transform of an example's data (libtorch's TensorTransform<>): override operator().
// reel's examples hold tensors, so Target is Tensor.
template <typename Target = Tensor>
class TensorTransform {
  static_assert(std::is_same_v<Target, Tensor>, "reel's data::Example holds a Tensor target: TensorTransform<>");

 public:
  virtual ~TensorTransform() = default;
  virtual Tensor operator()(Tensor input) = 0;
  Example apply(Example example) {
    example.data = (*this)(std::move(example.data));
    return example;
  }
};

// A TensorTransform from a function (libtorch's TensorLambda<>).
template <typename Target = Tensor>
class TensorLambda : public TensorTransform<Target> {
 public:
  explicit TensorLambda(std::function<Tensor(Tensor)> function) : function_(std::move(function)) {}
  Tensor operator()(Tensor input) override { return function_(std::move(input)); }

 private:
  std::function<Tensor(Tensor)> function_;
};

namespace detail {
// (x - mean) / stddev: one value for all of x, or one per channel of x [..., C, H, W];
// an integer x is read as f32. Throws Error naming Normalize.
Tensor normalize_example(const Tensor& x, const std::vector<double>& mean, const std::vector<double>& stddev);
void check_normalize(const std::vector<double>& mean, const std::vector<double>& stddev);
}  // namespace detail

// (data - mean) / stddev, libtorch's Normalize<>: Normalize<>(0.5, 0.5) for every element,
// Normalize<>({0.485, 0.456, 0.406}, {0.229, 0.224, 0.225}) per channel of [C, H, W] data.
template <typename Target = Tensor>
class Normalize : public TensorTransform<Target> {
 public:
  Normalize(double mean, double stddev) : Normalize(std::vector<double>{mean}, std::vector<double>{stddev}) {}
  Normalize(std::vector<double> mean, std::vector<double> stddev) : mean(std::move(mean)), stddev(std::move(stddev)) {
    detail::check_normalize(this->mean, this->stddev);
  }
  Tensor operator()(Tensor input) override { return detail::normalize_example(input, mean, stddev); }
  std::vector<double> mean, stddev;
};

// A transform of whole examples from a function (libtorch's Lambda<>).
template <typename Input = Example, typename Output = Input>
class Lambda {
 public:
  explicit Lambda(std::function<Output(Input)> function) : function_(std::move(function)) {}
  Output apply(Input input) { return function_(std::move(input)); }

 private:
  std::function<Output(Input)> function_;
};

// Stacks a batch's examples along a new first dim (libtorch's Stack<>): data::collate.
template <typename T = Example>
struct Stack {
  static_assert(std::is_same_v<T, Example>, "reel's Stack<> stacks data::Example: Stack<>");
  Example operator()(const std::vector<Example>& examples, HostMemory memory = HostMemory::pageable) const {
    return collate(examples, memory);
  }
};

}  // namespace transforms

namespace datasets {

template <typename Source, typename Transform>
class MapDataset;
namespace detail {
[[noreturn]] void throw_stack_index(int64_t index, int64_t size);
}  // namespace detail

// libtorch's Dataset<Self>: write get and size; get_batch defaults to one get per index.
// map() moves the dataset into a MapDataset (or copies it, called on a named dataset).
template <typename Self>
class Dataset {
 public:
  virtual ~Dataset() = default;
  virtual Example get(size_t index) = 0;
  virtual std::optional<size_t> size() const = 0;
  // The examples at `indices`, unstacked (Stack<> stacks them).
  virtual std::vector<Example> get_batch(std::span<const size_t> indices) {
    std::vector<Example> examples;
    examples.reserve(indices.size());
    for (size_t i : indices) examples.push_back(get(i));
    return examples;
  }
  template <typename Transform>
  MapDataset<Self, Transform> map(Transform transform) && {
    return MapDataset<Self, Transform>(std::move(static_cast<Self&>(*this)), std::move(transform));
  }
  template <typename Transform>
  MapDataset<Self, Transform> map(Transform transform) & {
    return MapDataset<Self, Transform>(static_cast<Self&>(*this), std::move(transform));
  }
};

// A dataset whose examples pass through an example transform: a TensorTransform<>
// (Normalize<>, TensorLambda<>, your own), a Lambda<>, or a function Example(Example).
template <typename Source, typename Transform>
class MapDataset : public Dataset<MapDataset<Source, Transform>> {
 public:
  MapDataset(Source source, Transform transform) : source_(std::move(source)), transform_(std::move(transform)) {}
  Example get(size_t index) override { return apply(source_.get(index)); }
  std::optional<size_t> size() const override { return source_.size(); }
  std::vector<Example> get_batch(std::span<const size_t> indices) override {
    std::vector<Example> examples = source_.get_batch(indices);
    for (Example& e : examples) e = apply(std::move(e));
    return examples;
  }
  Source& dataset() { return source_; }
  Transform& transform() { return transform_; }

 private:
  Example apply(Example e) {
    if constexpr (requires { transform_.apply(std::move(e)); })
      return transform_.apply(std::move(e));
    else
      return transform_(std::move(e));
  }
  Source source_;
  Transform transform_;
};

// .map(Stack<>()): a data::Dataset, which a DataLoader takes. get(i) is one example of
// the source; get_batch stacks the source's get_batch (pinned when the loader asks).
template <typename Source, typename T>
class MapDataset<Source, transforms::Stack<T>> final : public data::Dataset {
 public:
  MapDataset(Source source, transforms::Stack<T> stack) : source_(std::move(source)), stack_(stack) {}
  int64_t size() const override {
    std::optional<size_t> n = source_.size();
    if (!n) throw Error("Stack: the dataset's size() is std::nullopt; a DataLoader needs a dataset of known size");
    return int64_t(*n);
  }
  Example get(int64_t index) const override {
    check_index(index);
    return source_.get(size_t(index));
  }
  Example get_batch(std::span<const int64_t> indices, HostMemory memory = HostMemory::pageable) const override {
    std::vector<size_t> at;
    at.reserve(indices.size());
    for (int64_t i : indices) {
      check_index(i);
      at.push_back(size_t(i));
    }
    return stack_(source_.get_batch(at), memory);
  }
  Source& dataset() { return source_; }

 private:
  void check_index(int64_t index) const {
    int64_t n = size();
    if (index < 0 || index >= n) detail::throw_stack_index(index, n);
  }
  mutable Source source_;  // libtorch's get is not const; the loader calls it from const get
  transforms::Stack<T> stack_;
};

}  // namespace datasets

}  // namespace reel::data
