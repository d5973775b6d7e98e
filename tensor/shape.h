// Dims: a shape or a stride list, held inline (no allocation; at most kMaxDims).
#pragma once
#include <cstdint>
#include <initializer_list>
#include <string>
#include <vector>

namespace reel {

inline constexpr int kMaxDims = 8;

class Dims {
 public:
  Dims() = default;
  Dims(std::initializer_list<int64_t> v);
  Dims(const std::vector<int64_t>& v);
  static Dims filled(int n, int64_t value);

  int size() const { return n_; }
  bool empty() const { return n_ == 0; }
  int64_t operator[](int i) const { return d_[i]; }
  int64_t& operator[](int i) { return d_[i]; }
  int64_t back() const { return d_[n_ - 1]; }
  const int64_t* begin() const { return d_; }
  const int64_t* end() const { return d_ + n_; }
  int64_t* begin() { return d_; }
  int64_t* end() { return d_ + n_; }
  const int64_t* data() const { return d_; }
  void push_back(int64_t v);
  void insert(int pos, int64_t v);
  void erase(int pos);
  void resize(int n, int64_t fill = 0);
  std::vector<int64_t> vec() const { return {d_, d_ + n_}; }
  std::string str() const;  // "[2, 3]"

  friend bool operator==(const Dims& a, const Dims& b) {
    if (a.n_ != b.n_) return false;
    for (int i = 0; i < a.n_; ++i)
      if (a.d_[i] != b.d_[i]) return false;
    return true;
  }

 private:
  int64_t d_[kMaxDims] = {};
  int n_ = 0;
};

using Shape = Dims;

// Every tensor's shape passed check_shape when it was made (creation, views, op outputs,
// readers), so these cannot overflow for a live tensor; given a shape that never did, they
// still throw Error rather than wrap.
int64_t numel_of(const Dims& shape);
Dims contiguous_strides(const Dims& shape);
// [N, C, H, W]'s channels-last strides {H W C, 1, W C, C} (NHWC memory; other ranks: contiguous)
Dims channels_last_strides(const Dims& shape);
// Whether a 4-D tensor of these strides is laid out channels-last and not also contiguous
// (C > 1 and H W > 1): the layout that bf16 convolutions on AMX and AMD AVX512-BF16 CPUs read and write
bool is_channels_last(const Dims& shape, const Dims& strides);
// Whether `strides` lay `shape` out with neither gaps nor overlaps in some order of its dims
// (positive strides): the tensor is then one flat array of numel elements from element 0
bool dense_strides(const Dims& shape, const Dims& strides);
struct Site;
// Checks that `shape` can be a tensor of `elem_size`-byte elements: no negative size, and
// its element count, its contiguous strides and its byte size all fit in int64 (the
// product of max(size, 1) times elem_size, which bounds each of them). Throws Error
// naming `op` and the shape otherwise; returns the element count.
int64_t check_shape(const char* op, const Dims& shape, int64_t elem_size, const Site& site);
// The NumPy broadcast of two shapes; throws Error naming `op` when they do not broadcast.
Dims broadcast_shapes(const char* op, const Dims& a, const Dims& b, const Site& site);
// Wraps a possibly negative dim into [0, ndim); throws Error naming `op` when out of range.
int wrap_dim(const char* op, int64_t dim, int ndim, const Site& site);

}  // namespace reel
