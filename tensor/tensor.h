// Tensor: a handle to an n-dimensional array on a device. Copying a Tensor shares
// its storage (as torch::Tensor does); views share storage through shape,
// strides and offset. Differentiable methods record on the thread's tape.
//
//   Tensor x = reel::randn({64, 784});
//   Tensor w = reel::zeros({10, 784}).requires_grad_();
//   Tensor loss = reel::linear(x, w).relu().sum();
//   loss.backward();            // w.grad() now holds d loss / d w
#pragma once
#include <cstdint>
#include <initializer_list>
#include <iosfwd>
#include <optional>
#include <string>
#include <type_traits>
#include <variant>
#include <vector>

#include "device.h"
#include "dtype.h"
#include "error.h"
#include "generator.h"
#include "ref.h"
#include "shape.h"
#include "storage.h"

namespace reel {

struct Node;  // autograd/node.h: one tape entry
void ref_inc(Node* n);
void ref_dec(Node* n);
struct AutocastCopy;  // autograd/autocast.cpp: a parameter's f16/bf16 copy kept between steps
void ref_inc(AutocastCopy* c);
void ref_dec(AutocastCopy* c);

class TensorImpl : public RefCounted {
 public:
  Dims shape;
  Dims strides;  // in elements
  int64_t offset = 0;  // in elements
  DType dtype = DType::f32;
  bool requires_grad = false;
  uint32_t output_nr = 0;  // which output of grad_fn this is
  Ref<Storage> storage;
  Ref<Node> grad_fn;  // the tape entry that made this tensor; null for leaves
  Ref<TensorImpl> grad;  // accumulated gradient of a leaf
  Ref<TensorImpl> grad_buffer;  // a leaf's: where backward may write its first gradient (autograd/grad_buffer.h)
  Ref<AutocastCopy> autocast_copy;  // set on leaves that require grad, by autocast (guarded there)
  // A view made by a differentiable view op keeps its root (never a view itself), so an
  // in-place write through it can rewrite the root's history (PyTorch's CopySlices).
  Ref<TensorImpl> view_base;
  uint32_t history = 0;       // a root: bumped whenever an in-place op gives it a new grad_fn
  uint32_t base_history = 0;  // a view: the root's history when this view's grad_fn was made
  // A view whose root was rewritten in place since its grad_fn was made: its grad_fn is
  // remade from the root's on next use (autograd/inplace.cpp).
  bool stale_view() const { return view_base && view_base->history != base_history; }
};
inline void ref_inc(TensorImpl* t) { t->refs.fetch_add(1, std::memory_order_relaxed); }
inline void ref_dec(TensorImpl* t) {
  if (t->refs.fetch_sub(1, std::memory_order_acq_rel) == 1) delete t;
}

class Tensor;
struct Options;
struct ValuesIndices;  // autograd/ops_everyday.h: what max(dim), sort and topk return

// A number read out of a tensor by item(), as libtorch's c10::Scalar: exact for every
// dtype (an i64 keeps all 64 bits), and a double wherever one is wanted.
//   double loss = out.item();  int64_t n = correct.sum().item().toLong();
class Scalar {
 public:
  Scalar(double v) : v_(v) {}
  Scalar(int64_t v) : v_(v) {}
  Scalar(bool v) : v_(v) {}
  operator double() const { return toDouble(); }
  double toDouble() const;
  float toFloat() const { return float(toDouble()); }
  int64_t toLong() const;  // a double is truncated toward zero, as libtorch's
  int toInt() const { return int(toLong()); }
  bool toBool() const;
  template <typename T> T to() const {
    if constexpr (std::is_same_v<T, bool>) return toBool();
    else if constexpr (std::is_integral_v<T>) return T(toLong());
    else return T(toDouble());
  }
  bool isFloatingPoint() const { return std::holds_alternative<double>(v_); }
  bool isIntegral() const { return std::holds_alternative<int64_t>(v_); }
  bool isBoolean() const { return std::holds_alternative<bool>(v_); }

 private:
  std::variant<double, int64_t, bool> v_;
};
std::ostream& operator<<(std::ostream& os, const Scalar& s);

// A tensor argument of an operator: carries the caller's line into `a + b`.
struct TensorArg {
  const Tensor& t;
  Site site;
  TensorArg(const Tensor& t, Site site = {}) : t(t), site(site) {}
};
// A scalar argument of an operator, likewise.
struct ScalarArg {
  double v;
  Site site;
  ScalarArg(double v, Site site = {}) : v(v), site(site) {}
  ScalarArg(const Scalar& s, Site site = {}) : v(s.toDouble()), site(site) {}  // x + y.item(), as libtorch
};

class Tensor {
 public:
  Tensor() = default;
  explicit Tensor(Ref<TensorImpl> impl) : impl_(std::move(impl)) {}

  bool defined() const { return bool(impl_); }
  TensorImpl* impl() const { return impl_.get(); }

  // ---- metadata
  // Every method on an undefined Tensor (default-constructed, or a grad never made)
  // throws Error naming the method, as do the ops given one.
  const Dims& shape() const { return live("shape").shape; }
  const Dims& sizes() const { return live("sizes").shape; }
  int64_t size(int64_t dim) const;  // negative dims count from the end
  int dim() const { return live("dim").shape.size(); }
  int64_t numel() const { return numel_of(live("numel").shape); }
  const Dims& strides() const { return live("strides").strides; }
  int64_t stride(int64_t dim) const;
  int64_t offset() const { return live("offset").offset; }
  DType dtype() const { return live("dtype").dtype; }
  Device device() const { return live("device").storage->device(); }
  size_t element_size() const { return size_t(dtype_size(live("element_size").dtype)); }
  bool is_contiguous() const;
  bool is_floating_point() const { return is_floating(dtype()); }
  const Ref<Storage>& storage() const { return live("storage").storage; }

  // ---- data (CPU tensors only for typed access)
  void* data_ptr() const;  // address of element 0 (storage + offset)
  template <typename T> T* data() const;  // checks dtype and device
  template <typename T> T item() const;  // the value of a one-element tensor; syncs a GPU
  Scalar item() const;  // the same as a Scalar: libtorch's x.item().toDouble(), or a double
  template <typename T> T* data_ptr() const { return data<T>(); }  // libtorch's spelling of data<T>()
  template <typename T> std::vector<T> to_vector() const;  // all values, row-major

  // ---- conversion and copies
  Tensor to(Device device, Site site = {}) const;
  Tensor to(DType dtype, Site site = {}) const;
  Tensor cpu(Site site = {}) const { return to(kCPU, site); }
  Tensor cuda(int index = 0, Site site = {}) const { return to(Device::cuda(index), site); }
  Tensor contiguous(Site site = {}) const;
  Tensor clone(Site site = {}) const;

  // ---- views (share storage; differentiable)
  Tensor reshape(const Dims& shape, Site site = {}) const;
  Tensor view(const Dims& shape, Site site = {}) const;
  Tensor transpose(int64_t d0, int64_t d1, Site site = {}) const;
  Tensor t(Site site = {}) const;  // 2-D transpose
  Tensor permute(const Dims& order, Site site = {}) const;
  Tensor narrow(int64_t dim, int64_t start, int64_t length, Site site = {}) const;
  Tensor slice(int64_t dim, int64_t start, int64_t end, int64_t step = 1, Site site = {}) const;
  Tensor select(int64_t dim, int64_t index, Site site = {}) const;
  Tensor operator[](int64_t index) const { return select(0, index); }
  Tensor expand(const Dims& shape, Site site = {}) const;
  Tensor expand_as(const Tensor& other, Site site = {}) const { return expand(other.shape(), site); }
  Tensor squeeze(Site site = {}) const;
  Tensor squeeze(int64_t dim, Site site = {}) const;
  Tensor unsqueeze(int64_t dim, Site site = {}) const;
  Tensor flatten(int64_t start_dim = 0, int64_t end_dim = -1, Site site = {}) const;

  // ---- autograd
  bool requires_grad() const {
    return impl_ && (impl_->requires_grad || (impl_->stale_view() && impl_->view_base->requires_grad));
  }
  Tensor& requires_grad_(bool on = true, Site site = {});
  bool is_leaf() const { return !live("is_leaf").grad_fn; }
  Node* grad_fn() const { return live("grad_fn").grad_fn.get(); }
  Tensor grad() const;  // undefined until a backward reaches this leaf
  void set_grad(const Tensor& g);
  Tensor detach() const;  // same storage, off the tape
  // Gradient of this tensor w.r.t. every leaf that requires grad, accumulated into
  // their .grad(). `gradient` defaults to 1 for a one-element tensor.
  void backward(const Tensor& gradient = {}, bool retain_graph = false, Site site = {}) const;

  // ---- in place. Recorded as PyTorch records them (autograd/inplace.h): when this tensor or
  // an operand requires grad under grad mode, the op becomes this tensor's history (through
  // its root, for a view); otherwise one pass, nothing recorded. Refused: a leaf that
  // requires grad, a view of one, a tensor whose elements overlap in memory (an expand),
  // under grad mode; a value saved for backward and overwritten is named at backward.
  Tensor& zero_(Site site = {});
  Tensor& fill_(double value, Site site = {});
  Tensor& copy_(const Tensor& src, Site site = {});
  Tensor& add_(const Tensor& other, double alpha = 1.0, Site site = {});
  Tensor& mul_(double factor, Site site = {});

  // ---- math as methods (the same as the free functions of autograd/ops.h)
  Tensor sum(Site site = {}) const;
  Tensor sum(const Dims& dims, bool keepdim = false, Site site = {}) const;
  Tensor mean(Site site = {}) const;
  Tensor mean(const Dims& dims, bool keepdim = false, Site site = {}) const;
  Tensor max(Site site = {}) const;
  Tensor max(int64_t dim, bool keepdim = false, Site site = {}) const;
  Tensor argmax(int64_t dim, bool keepdim = false, Site site = {}) const;
  Tensor exp(Site site = {}) const;
  Tensor log(Site site = {}) const;
  Tensor sqrt(Site site = {}) const;
  Tensor abs(Site site = {}) const;
  Tensor relu(Site site = {}) const;
  Tensor sigmoid(Site site = {}) const;
  Tensor tanh(Site site = {}) const;
  Tensor pow(double exponent, Site site = {}) const;
  Tensor matmul(const Tensor& other, Site site = {}) const;
  // PyTorch's method spellings (autograd/ops_methods.cpp). float(), long(), int(), bool()
  // and double() are C++ keywords: to_float(), to_long(), to_int(), to_bool(), to_double().
  Tensor sum(int64_t dim, bool keepdim = false, Site site = {}) const;
  Tensor mean(int64_t dim, bool keepdim = false, Site site = {}) const;
  Tensor min(Site site = {}) const;
  Tensor min(int64_t dim, bool keepdim = false, Site site = {}) const;  // values only, as max(dim)
  Tensor argmin(int64_t dim, bool keepdim = false, Site site = {}) const;
  Tensor std(int64_t dim, bool keepdim = false, Site site = {}) const;
  Tensor var(int64_t dim, bool keepdim = false, Site site = {}) const;
  Tensor norm(double p = 2, Site site = {}) const;
  Tensor softmax(int64_t dim, Site site = {}) const;
  Tensor log_softmax(int64_t dim, Site site = {}) const;
  Tensor clamp(double low, double high, Site site = {}) const;
  Tensor clamp_min(double low, Site site = {}) const;
  Tensor clamp_max(double high, Site site = {}) const;
  Tensor masked_fill(const Tensor& mask, double value, Site site = {}) const;
  Tensor cumsum(int64_t dim, Site site = {}) const;
  Tensor flip(const Dims& dims, Site site = {}) const;
  Tensor repeat(const Dims& reps, Site site = {}) const;
  Tensor to_float(Site site = {}) const;   // f32
  Tensor to_double(Site site = {}) const;  // f64
  Tensor to_long(Site site = {}) const;    // i64
  Tensor to_int(Site site = {}) const;     // i32
  Tensor to_bool(Site site = {}) const;

  // ---- more of libtorch's method spellings (autograd/ops_methods.cpp, ops_methods_inplace.cpp).
  // Each is the free function of the same name (autograd/ops.h, ops_everyday.h). The list
  // checked against libtorch's tutorials and examples is in docs/from-libtorch.md.
  Tensor add(const Tensor& other, double alpha = 1, Site site = {}) const;  // this + alpha other
  Tensor add(double other, Site site = {}) const;
  Tensor sub(const Tensor& other, double alpha = 1, Site site = {}) const;
  Tensor sub(double other, Site site = {}) const;
  Tensor mul(const Tensor& other, Site site = {}) const;
  Tensor mul(double other, Site site = {}) const;
  Tensor div(const Tensor& other, Site site = {}) const;
  Tensor div(double other, Site site = {}) const;
  Tensor pow(const Tensor& exponent, Site site = {}) const;
  Tensor maximum(const Tensor& other, Site site = {}) const;
  Tensor minimum(const Tensor& other, Site site = {}) const;
  Tensor neg(Site site = {}) const;
  Tensor rsqrt(Site site = {}) const;
  Tensor square(Site site = {}) const;
  Tensor reciprocal(Site site = {}) const;
  Tensor sin(Site site = {}) const;
  Tensor cos(Site site = {}) const;
  Tensor erf(Site site = {}) const;
  Tensor sign(Site site = {}) const;
  Tensor lerp(const Tensor& end, double weight, Site site = {}) const;
  Tensor lerp(const Tensor& end, const Tensor& weight, Site site = {}) const;
  Tensor where(const Tensor& condition, const Tensor& other, Site site = {}) const;  // condition ? this : other
  Tensor nan_to_num(double nan = 0.0, std::optional<double> posinf = {}, std::optional<double> neginf = {},
                    Site site = {}) const;
  // comparisons and logic: bool tensors, no gradient
  Tensor eq(const Tensor& other, Site site = {}) const;
  Tensor ne(const Tensor& other, Site site = {}) const;
  Tensor lt(const Tensor& other, Site site = {}) const;
  Tensor le(const Tensor& other, Site site = {}) const;
  Tensor gt(const Tensor& other, Site site = {}) const;
  Tensor ge(const Tensor& other, Site site = {}) const;
  Tensor eq(double other, Site site = {}) const;
  Tensor ne(double other, Site site = {}) const;
  Tensor lt(double other, Site site = {}) const;
  Tensor le(double other, Site site = {}) const;
  Tensor gt(double other, Site site = {}) const;
  Tensor ge(double other, Site site = {}) const;
  Tensor logical_not(Site site = {}) const;
  Tensor logical_and(const Tensor& other, Site site = {}) const;
  Tensor logical_or(const Tensor& other, Site site = {}) const;
  Tensor isnan(Site site = {}) const;
  Tensor isinf(Site site = {}) const;
  Tensor isfinite(Site site = {}) const;
  Tensor all(Site site = {}) const;
  Tensor all(int64_t dim, bool keepdim = false, Site site = {}) const;
  Tensor any(Site site = {}) const;
  Tensor any(int64_t dim, bool keepdim = false, Site site = {}) const;
  // reductions, scans, sorting
  Tensor prod(Site site = {}) const;
  Tensor prod(int64_t dim, bool keepdim = false, Site site = {}) const;
  Tensor amax(const Dims& dims = {}, bool keepdim = false, Site site = {}) const;
  Tensor amin(const Dims& dims = {}, bool keepdim = false, Site site = {}) const;
  Tensor argmax(Site site = {}) const;  // the flat index of the first maximum
  Tensor argmin(Site site = {}) const;
  Tensor std(Site site = {}) const;  // over all elements, Bessel-corrected
  Tensor var(Site site = {}) const;
  Tensor norm(double p, const Dims& dims, bool keepdim = false, Site site = {}) const;
  Tensor norm(double p, int64_t dim, bool keepdim = false, Site site = {}) const;  // libtorch's x.norm(2, 1)
  Tensor logsumexp(const Dims& dims, bool keepdim = false, Site site = {}) const;
  Tensor cumprod(int64_t dim, Site site = {}) const;
  ValuesIndices sort(int64_t dim = -1, bool descending = false, Site site = {}) const;
  Tensor argsort(int64_t dim = -1, bool descending = false, Site site = {}) const;
  ValuesIndices topk(int64_t k, int64_t dim = -1, bool largest = true, Site site = {}) const;
  Tensor multinomial(int64_t num_samples, bool replacement = false, Site site = {}) const;
  // linear algebra
  Tensor mm(const Tensor& other, Site site = {}) const;  // 2-D only, as libtorch's
  Tensor bmm(const Tensor& other, Site site = {}) const;
  Tensor outer(const Tensor& other, Site site = {}) const;
  Tensor addmm(const Tensor& m1, const Tensor& m2, double beta = 1, double alpha = 1, Site site = {}) const;
  Tensor baddbmm(const Tensor& b1, const Tensor& b2, double beta = 1, double alpha = 1, Site site = {}) const;
  // shape, joining, indexing
  Tensor view_as(const Tensor& other, Site site = {}) const { return view(other.shape(), site); }
  Tensor reshape_as(const Tensor& other, Site site = {}) const { return reshape(other.shape(), site); }
  Tensor type_as(const Tensor& other, Site site = {}) const { return to(other.dtype(), site); }
  Tensor tile(const Dims& reps, Site site = {}) const;
  Tensor roll(const Dims& shifts, const Dims& dims = {}, Site site = {}) const;
  Tensor tril(int64_t diagonal = 0, Site site = {}) const;
  Tensor triu(int64_t diagonal = 0, Site site = {}) const;
  std::vector<Tensor> split(int64_t split_size, int64_t dim = 0, Site site = {}) const;
  std::vector<Tensor> split(const std::vector<int64_t>& sizes, int64_t dim = 0, Site site = {}) const;
  std::vector<Tensor> chunk(int64_t chunks, int64_t dim = 0, Site site = {}) const;
  Tensor index_select(int64_t dim, const Tensor& index, Site site = {}) const;
  Tensor gather(int64_t dim, const Tensor& index, Site site = {}) const;
  Tensor scatter(int64_t dim, const Tensor& index, const Tensor& src, Site site = {}) const;
  Tensor scatter(int64_t dim, const Tensor& index, double value, Site site = {}) const;
  Tensor scatter_add(int64_t dim, const Tensor& index, const Tensor& src, Site site = {}) const;
  Tensor index_add(int64_t dim, const Tensor& index, const Tensor& src, double alpha = 1, Site site = {}) const;
  Tensor index_put(const std::vector<Tensor>& indices, const Tensor& values, bool accumulate = false,
                   Site site = {}) const;
  Tensor masked_fill(const Tensor& mask, const Tensor& value, Site site = {}) const;
  // metadata as libtorch spells it
  Options options() const;  // dtype and device (requires_grad false): zeros(shape, x.options())
  DType scalar_type() const { return dtype(); }
  int64_t ndimension() const { return dim(); }
  bool is_cuda() const { return device().is_cuda(); }
  Tensor& set_requires_grad(bool on, Site site = {}) { return requires_grad_(on, site); }
  // New tensors of this one's dtype and device (libtorch's x.new_zeros({2, 3}))
  Tensor new_zeros(const Dims& shape, Site site = {}) const;
  Tensor new_ones(const Dims& shape, Site site = {}) const;
  Tensor new_full(const Dims& shape, double value, Site site = {}) const;
  Tensor new_empty(const Dims& shape, Site site = {}) const;
  // Takes this tensor off the tape in place (libtorch's detach_): no grad_fn, requires_grad
  // false, for every handle on it; the storage is untouched.
  Tensor& detach_(Site site = {});

  // ---- in place, libtorch's spellings (autograd/ops_methods_inplace.cpp). Recorded and
  // refused as the in-place methods above.
  // Each writes the out-of-place op's result into this tensor, converted to its dtype
  // (eq_ writes 1 or 0); the result must have this tensor's shape.
  Tensor& eq_(const Tensor& other, Site site = {});
  Tensor& ne_(const Tensor& other, Site site = {});
  Tensor& lt_(const Tensor& other, Site site = {});
  Tensor& le_(const Tensor& other, Site site = {});
  Tensor& gt_(const Tensor& other, Site site = {});
  Tensor& ge_(const Tensor& other, Site site = {});
  Tensor& eq_(double other, Site site = {});
  Tensor& ne_(double other, Site site = {});
  Tensor& lt_(double other, Site site = {});
  Tensor& le_(double other, Site site = {});
  Tensor& gt_(double other, Site site = {});
  Tensor& ge_(double other, Site site = {});
  Tensor& add_(double other, Site site = {});
  Tensor& sub_(const Tensor& other, double alpha = 1.0, Site site = {});
  Tensor& sub_(double other, Site site = {});
  Tensor& mul_(const Tensor& other, Site site = {});
  Tensor& div_(const Tensor& other, Site site = {});
  Tensor& div_(double other, Site site = {});
  Tensor& pow_(double exponent, Site site = {});
  Tensor& neg_(Site site = {});
  Tensor& abs_(Site site = {});
  Tensor& exp_(Site site = {});
  Tensor& log_(Site site = {});
  Tensor& sqrt_(Site site = {});
  Tensor& relu_(Site site = {});
  Tensor& sigmoid_(Site site = {});
  Tensor& tanh_(Site site = {});
  Tensor& clamp_(double low, double high, Site site = {});
  Tensor& clamp_min_(double low, Site site = {});
  Tensor& clamp_max_(double high, Site site = {});
  Tensor& masked_fill_(const Tensor& mask, double value, Site site = {});
  Tensor& index_fill_(int64_t dim, const Tensor& index, double value, Site site = {});
  Tensor& scatter_(int64_t dim, const Tensor& index, const Tensor& src, Site site = {});
  Tensor& scatter_(int64_t dim, const Tensor& index, double value, Site site = {});
  Tensor& scatter_add_(int64_t dim, const Tensor& index, const Tensor& src, Site site = {});
  Tensor& index_add_(int64_t dim, const Tensor& index, const Tensor& src, double alpha = 1, Site site = {});
  Tensor& index_put_(const std::vector<Tensor>& indices, const Tensor& values, bool accumulate = false,
                     Site site = {});
  Tensor& masked_fill_(const Tensor& mask, const Tensor& value, Site site = {});
  // the fills of tensor/tensor.h's free uniform_ and normal_, from gen or the thread's default generator
  Tensor& uniform_(double low = 0, double high = 1, Site site = {});
  Tensor& uniform_(double low, double high, Generator& gen, Site site = {});
  Tensor& normal_(double mean = 0, double std = 1, Site site = {});
  Tensor& normal_(double mean, double std, Generator& gen, Site site = {});

  std::string str() const;  // as PyTorch prints: values, shape, dtype, device

 private:
  const TensorImpl& live(const char* method) const {
    if (!impl_) [[unlikely]] undefined(method);
    return *impl_;
  }
  [[noreturn]] static void undefined(const char* method);

  Ref<TensorImpl> impl_;
};

std::ostream& operator<<(std::ostream& os, const Tensor& t);
std::ostream& operator<<(std::ostream& os, const Dims& shape);  // "[2, 3]": std::cout << x.shape()

// libtorch's free spellings of the view methods: reshape(x, {2, -1}) is x.reshape({2, -1}).
Tensor reshape(const Tensor& x, const Dims& shape, Site site = {});
Tensor flatten(const Tensor& x, int64_t start_dim = 0, int64_t end_dim = -1, Site site = {});
Tensor transpose(const Tensor& x, int64_t d0, int64_t d1, Site site = {});
Tensor permute(const Tensor& x, const Dims& order, Site site = {});
Tensor unsqueeze(const Tensor& x, int64_t dim, Site site = {});
Tensor squeeze(const Tensor& x, int64_t dim, Site site = {});
Tensor narrow(const Tensor& x, int64_t dim, int64_t start, int64_t length, Site site = {});
Tensor mm(const Tensor& a, const Tensor& b, Site site = {});  // 2-D matmul

// ---- creation. `Options` picks dtype, device and requires_grad:
//   reel::zeros({2, 3}, {.dtype = DType::f64, .device = Device::cuda()})
struct Options {
  DType dtype = DType::f32;
  Device device = kCPU;
  bool requires_grad = false;
};

Tensor empty(const Dims& shape, Options opt = {}, Site site = {});
// A tensor over base's storage with these shape, strides and offset, unchecked and off
// the tape: what the backends' and the autograd ops' internal views are made of.
Tensor storage_view(const Tensor& base, const Dims& shape, const Dims& strides, int64_t offset);
Tensor zeros(const Dims& shape, Options opt = {}, Site site = {});
Tensor ones(const Dims& shape, Options opt = {}, Site site = {});
Tensor full(const Dims& shape, double value, Options opt = {}, Site site = {});
Tensor scalar_tensor(double value, Options opt = {}, Site site = {});
Tensor arange(double start, double end, double step = 1.0, Options opt = {}, Site site = {});
Tensor arange(int64_t end, Options opt = {.dtype = DType::i64}, Site site = {});
Tensor zeros_like(const Tensor& t, Site site = {});
Tensor ones_like(const Tensor& t, Site site = {});
Tensor empty_like(const Tensor& t, Site site = {});
Tensor full_like(const Tensor& t, double value, Site site = {});

// From host values, copied; `shape` defaults to a 1-D tensor of all values.
template <typename T>
Tensor from_vector(const std::vector<T>& values, const Dims& shape = {}, Options opt = {.dtype = dtype_of_v<T>}, Site site = {});
// Note: C++ reads {{1}, {2}} as the 1-D list {1, 2} (a braced scalar is a scalar), so
// a column of single values is tensor({1, 2}).reshape({2, 1}); rows of two or more work.
Tensor tensor(std::initializer_list<double> values, Options opt = {}, Site site = {});
Tensor tensor(std::initializer_list<std::vector<double>> rows, Options opt = {}, Site site = {});
// Wraps caller-owned host memory without copying; the caller keeps it alive.
Tensor from_blob(void* data, const Dims& shape, DType dtype, Site site = {});

// ---- random numbers (Philox: the same seed gives the same numbers on every device).
// Each draws from `gen` when given, else from this thread's default generator
// (manual_seed, default_generator and the per-thread rule: tensor/generator.h).
Tensor rand(const Dims& shape, Options opt = {}, Site site = {});   // U[0, 1)
Tensor rand(const Dims& shape, Generator& gen, Options opt = {}, Site site = {});
Tensor randn(const Dims& shape, Options opt = {}, Site site = {});  // N(0, 1)
Tensor randn(const Dims& shape, Generator& gen, Options opt = {}, Site site = {});
// rand and randn of t's shape, dtype and device (libtorch's rand_like, randn_like)
Tensor rand_like(const Tensor& t, Site site = {});
Tensor rand_like(const Tensor& t, Generator& gen, Site site = {});
Tensor randn_like(const Tensor& t, Site site = {});
Tensor randn_like(const Tensor& t, Generator& gen, Site site = {});
Tensor randint(int64_t low, int64_t high, const Dims& shape, Options opt = {.dtype = DType::i64}, Site site = {});
Tensor randint(int64_t low, int64_t high, const Dims& shape, Generator& gen, Options opt = {.dtype = DType::i64},
               Site site = {});
Tensor randperm(int64_t n, Options opt = {.dtype = DType::i64}, Site site = {});
Tensor randperm(int64_t n, Generator& gen, Options opt = {.dtype = DType::i64}, Site site = {});
Tensor& uniform_(Tensor& t, double low, double high, Site site = {});
Tensor& uniform_(Tensor& t, double low, double high, Generator& gen, Site site = {});
Tensor& normal_(Tensor& t, double mean, double std, Site site = {});
Tensor& normal_(Tensor& t, double mean, double std, Generator& gen, Site site = {});

}  // namespace reel
