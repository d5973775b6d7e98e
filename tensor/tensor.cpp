// Tensor metadata, typed access, creation, random numbers and printing.
#include "tensor.h"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <ostream>
#include <sstream>

#include "backend.h"
#include "philox.h"

namespace reel {

namespace {

Tensor make_tensor(const Dims& shape, DType dtype, Device device, const char* op, const Site& site) {
  check_shape(op, shape, dtype_size(dtype), site);
  auto impl = make_ref<TensorImpl>();
  impl->shape = shape;
  impl->strides = contiguous_strides(shape);
  impl->dtype = dtype;
  impl->storage = make_ref<Storage>(size_t(numel_of(shape)) * size_t(dtype_size(dtype)), device);
  return Tensor(std::move(impl));
}

template <typename T>
T read_as(const void* p, DType dt) {
  switch (dt) {
    case DType::f32: return T(*static_cast<const float*>(p));
    case DType::f64: return T(*static_cast<const double*>(p));
    case DType::f16: return T(float(*static_cast<const Half*>(p)));
    case DType::bf16: return T(float(*static_cast<const BFloat16*>(p)));
    case DType::i32: return T(*static_cast<const int32_t*>(p));
    case DType::i64: return T(*static_cast<const int64_t*>(p));
    case DType::u8: return T(*static_cast<const uint8_t*>(p));
    case DType::boolean: return T(*static_cast<const bool*>(p));
  }
  return T();
}

// The values of a tensor as T, row-major, whatever its strides: each element converted
// once from its own dtype (an i64 above 2^53 read as i64 stays exact).
template <typename T>
std::vector<T> values_as(const Tensor& t) {
  Tensor c = t.device().is_cpu() ? t : t.cpu();
  std::vector<T> out(size_t(c.numel()));
  if (out.empty()) return out;
  const char* base = static_cast<const char*>(c.storage()->data()) + c.offset() * int64_t(c.element_size());
  int nd = c.dim();
  Dims idx = Dims::filled(nd, 0);
  for (size_t k = 0; k < out.size(); ++k) {
    int64_t off = 0;
    for (int d = 0; d < nd; ++d) off += idx[d] * c.strides()[d];
    out[k] = read_as<T>(base + off * int64_t(c.element_size()), c.dtype());
    for (int d = nd - 1; d >= 0; --d) {
      if (++idx[d] < c.shape()[d]) break;
      idx[d] = 0;
    }
  }
  return out;
}

}  // namespace

// ---- metadata
void Tensor::undefined(const char* method) {
  fail(method, "called on an undefined Tensor (default-constructed, or a gradient never computed)",
       Site{nullptr, 0});
}

int64_t Tensor::size(int64_t dim) const {
  const TensorImpl& t = live("size");
  return t.shape[wrap_dim("size", dim, t.shape.size(), Site{nullptr, 0})];
}
int64_t Tensor::stride(int64_t dim) const {
  const TensorImpl& t = live("stride");
  return t.strides[wrap_dim("stride", dim, t.shape.size(), Site{nullptr, 0})];
}

bool Tensor::is_contiguous() const {
  live("is_contiguous");
  int64_t expected = 1;
  for (int i = dim() - 1; i >= 0; --i) {
    if (impl_->shape[i] == 1) continue;
    if (impl_->strides[i] != expected) return false;
    expected *= impl_->shape[i];
  }
  return true;
}

void* Tensor::data_ptr() const {
  live("data_ptr");
  return static_cast<char*>(impl_->storage->data()) + impl_->offset * int64_t(element_size());
}

template <typename T>
T* Tensor::data() const {
  if (!defined()) throw Error("data: the tensor is undefined");
  if (dtype() != dtype_of_v<T>)
    throw Error(fmt::format("data: asked for {} elements of a {} tensor", dtype_name(dtype_of_v<T>), dtype_name(dtype())));
  if (!device().is_cpu())
    throw Error(fmt::format("data: the tensor lives on {}; copy it with .cpu() first", device().str()));
  return static_cast<T*>(data_ptr());
}

template <typename T>
T Tensor::item() const {
  if (!defined()) throw Error("item: the tensor is undefined");
  if (numel() != 1)
    throw Error(fmt::format("item: expected a tensor of one element, got shape {}", shape().str()));
  Tensor c = device().is_cpu() ? *this : cpu();
  return read_as<T>(c.data_ptr(), c.dtype());
}

template <typename T>
std::vector<T> Tensor::to_vector() const {
  if (!defined()) throw Error("to_vector: the tensor is undefined");
  return values_as<T>(*this);
}

#define REEL_INSTANTIATE(T)                        \
  template T* Tensor::data<T>() const;            \
  template T Tensor::item<T>() const;             \
  template std::vector<T> Tensor::to_vector<T>() const;
REEL_INSTANTIATE(float)
REEL_INSTANTIATE(double)
REEL_INSTANTIATE(int32_t)
REEL_INSTANTIATE(int64_t)
REEL_INSTANTIATE(uint8_t)
REEL_INSTANTIATE(bool)
#undef REEL_INSTANTIATE
template Half* Tensor::data<Half>() const;
template BFloat16* Tensor::data<BFloat16>() const;

// ---- creation
Tensor empty(const Dims& shape, Options opt, Site site) {
  Tensor t = make_tensor(shape, opt.dtype, opt.device, "empty", site);
  if (opt.requires_grad) t.requires_grad_(true, site);
  return t;
}

namespace {
Tensor filled(const char* op, const Dims& shape, double value, Options opt, Site site) {
  Tensor t = make_tensor(shape, opt.dtype, opt.device, op, site);
  if (t.numel() > 0) backend_for(opt.device).fill(t, value);
  if (opt.requires_grad) t.requires_grad_(true, site);
  return t;
}
}  // namespace
Tensor full(const Dims& shape, double value, Options opt, Site site) { return filled("full", shape, value, opt, site); }
Tensor zeros(const Dims& shape, Options opt, Site site) { return filled("zeros", shape, 0.0, opt, site); }
Tensor ones(const Dims& shape, Options opt, Site site) { return filled("ones", shape, 1.0, opt, site); }
Tensor scalar_tensor(double value, Options opt, Site site) {
  return filled("scalar_tensor", Dims{}, value, opt, site);
}
namespace {
const Tensor& given(const char* op, const Tensor& t, const Site& site) {
  if (!t.defined()) fail(op, "the input is an undefined tensor", site);
  return t;
}
Options like(const Tensor& t) { return {.dtype = t.dtype(), .device = t.device()}; }
}  // namespace
Tensor zeros_like(const Tensor& t, Site site) {
  given("zeros_like", t, site);
  return zeros(t.shape(), {.dtype = t.dtype(), .device = t.device()}, site);
}
Tensor ones_like(const Tensor& t, Site site) {
  given("ones_like", t, site);
  return ones(t.shape(), {.dtype = t.dtype(), .device = t.device()}, site);
}
Tensor empty_like(const Tensor& t, Site site) {
  given("empty_like", t, site);
  return empty(t.shape(), {.dtype = t.dtype(), .device = t.device()}, site);
}
Tensor full_like(const Tensor& t, double value, Site site) {
  given("full_like", t, site);
  return full(t.shape(), value, {.dtype = t.dtype(), .device = t.device()}, site);
}
Tensor Tensor::new_zeros(const Dims& shape, Site site) const {
  return zeros(shape, like(given("new_zeros", *this, site)), site);
}
Tensor Tensor::new_ones(const Dims& shape, Site site) const {
  return ones(shape, like(given("new_ones", *this, site)), site);
}
Tensor Tensor::new_full(const Dims& shape, double value, Site site) const {
  return full(shape, value, like(given("new_full", *this, site)), site);
}
Tensor Tensor::new_empty(const Dims& shape, Site site) const {
  return empty(shape, like(given("new_empty", *this, site)), site);
}

namespace {
template <typename T>
void store(void* dst, DType dt, const std::vector<T>& v) {
  for (size_t i = 0; i < v.size(); ++i) {
    double x = double(v[i]);
    switch (dt) {
      case DType::f32: static_cast<float*>(dst)[i] = float(x); break;
      case DType::f64: static_cast<double*>(dst)[i] = x; break;
      case DType::f16: static_cast<Half*>(dst)[i] = Half(float(x)); break;
      case DType::bf16: static_cast<BFloat16*>(dst)[i] = BFloat16(float(x)); break;
      case DType::i32: static_cast<int32_t*>(dst)[i] = int32_t(x); break;
      case DType::i64: static_cast<int64_t*>(dst)[i] = int64_t(v[i]); break;
      case DType::u8: static_cast<uint8_t*>(dst)[i] = uint8_t(x); break;
      case DType::boolean: static_cast<bool*>(dst)[i] = x != 0; break;
    }
  }
}

Tensor host_tensor(const char* op, const Dims& shape, size_t n, Options opt, const Site& site) {
  Dims s = shape.empty() ? Dims{int64_t(n)} : shape;
  if (check_shape(op, s, dtype_size(opt.dtype), site) != int64_t(n))
    fail(op, fmt::format("{} values do not fill shape {} ({} elements)", n, s.str(), numel_of(s)), site);
  return make_tensor(s, opt.dtype, kCPU, op, site);
}

Tensor finish(Tensor t, Options opt, Site site) {
  if (!opt.device.is_cpu()) t = t.to(opt.device, site);
  if (opt.requires_grad) t.requires_grad_(true, site);
  return t;
}
}  // namespace

template <typename T>
Tensor from_vector(const std::vector<T>& values, const Dims& shape, Options opt, Site site) {
  Tensor t = host_tensor("from_vector", shape, values.size(), opt, site);
  if (opt.dtype == dtype_of_v<T>) {
    if (!values.empty()) std::memcpy(t.data_ptr(), values.data(), values.size() * sizeof(T));
  } else {
    store(t.data_ptr(), opt.dtype, values);
  }
  return finish(std::move(t), opt, site);
}
template Tensor from_vector(const std::vector<float>&, const Dims&, Options, Site);
template Tensor from_vector(const std::vector<double>&, const Dims&, Options, Site);
template Tensor from_vector(const std::vector<int32_t>&, const Dims&, Options, Site);
template Tensor from_vector(const std::vector<int64_t>&, const Dims&, Options, Site);
template Tensor from_vector(const std::vector<uint8_t>&, const Dims&, Options, Site);

Tensor tensor(std::initializer_list<double> values, Options opt, Site site) {
  std::vector<double> v(values);
  Tensor t = host_tensor("tensor", {}, v.size(), opt, site);
  store(t.data_ptr(), opt.dtype, v);
  return finish(std::move(t), opt, site);
}

Tensor tensor(std::initializer_list<std::vector<double>> rows, Options opt, Site site) {
  std::vector<double> v;
  size_t cols = rows.size() ? rows.begin()->size() : 0;
  for (auto& r : rows) {
    if (r.size() != cols)
      fail("tensor", fmt::format("ragged rows: expected {} values in every row, got {}", cols, r.size()), site);
    v.insert(v.end(), r.begin(), r.end());
  }
  Tensor t = host_tensor("tensor", Dims{int64_t(rows.size()), int64_t(cols)}, v.size(), opt, site);
  store(t.data_ptr(), opt.dtype, v);
  return finish(std::move(t), opt, site);
}

Tensor storage_view(const Tensor& base, const Dims& shape, const Dims& strides, int64_t offset) {
  auto impl = make_ref<TensorImpl>();
  impl->shape = shape;
  impl->strides = strides;
  impl->offset = offset;
  impl->dtype = base.dtype();
  impl->storage = base.storage();
  return Tensor(std::move(impl));
}

Tensor from_blob(void* data, const Dims& shape, DType dtype, Site site) {
  check_shape("from_blob", shape, dtype_size(dtype), site);
  auto impl = make_ref<TensorImpl>();
  impl->shape = shape;
  impl->strides = contiguous_strides(shape);
  impl->dtype = dtype;
  impl->storage = make_ref<Storage>(data, size_t(numel_of(shape)) * size_t(dtype_size(dtype)), kCPU);
  return Tensor(std::move(impl));
}

Tensor arange(double start, double end, double step, Options opt, Site site) {
  if (step == 0) fail("arange", "step must not be 0", site);
  double span = (end - start) / step;
  if (!std::isfinite(span) || span > 0x1p62)
    fail("arange", fmt::format("[{}, {}) in steps of {} is {} elements, too many for a tensor", start, end, step, span),
         site);
  int64_t n = span > 0 ? int64_t(std::ceil(span)) : 0;
  std::vector<double> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[size_t(i)] = start + double(i) * step;
  Tensor t = host_tensor("arange", {}, v.size(), opt, site);
  store(t.data_ptr(), opt.dtype, v);
  return finish(std::move(t), opt, site);
}
Tensor arange(int64_t end, Options opt, Site site) { return arange(0.0, double(end), 1.0, opt, site); }

// ---- random numbers
uint64_t Generator::take(Device device, uint64_t blocks) {
  uint64_t& offset = device.is_cpu() ? state_.cpu_offset : state_.cuda_offset;
  uint64_t first = offset;
  offset += blocks;
  return first;
}

namespace {
// SplitMix64's finaliser: unrelated seeds for threads 1, 2, ... from the process seed
uint64_t thread_seed(uint64_t ordinal) {
  if (ordinal == 0) return Generator::kDefaultSeed;
  uint64_t z = Generator::kDefaultSeed + ordinal * 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}
std::atomic<uint64_t> g_threads_drawn{0};  // threads whose default generator exists
}  // namespace

Generator& default_generator() {
  thread_local Generator g(thread_seed(g_threads_drawn.fetch_add(1)));
  return g;
}

void manual_seed(uint64_t seed) { default_generator().manual_seed(seed); }

namespace {
// The backends fill dense memory in element order. A strided view takes the numbers of a
// dense tensor of its shape (element i in row-major order gets number i, on every
// device), copied in; an empty tensor takes none.
template <typename Fill>
void fill_random(Tensor& t, const Fill& fill) {
  if (t.numel() == 0) return;
  if (t.is_contiguous()) return fill(t);
  Tensor dense = make_tensor(t.shape(), t.dtype(), t.device(), "random fill", Site{nullptr, 0});
  fill(dense);
  backend_for(t.device()).copy(t, dense);
}
}  // namespace

Tensor& uniform_(Tensor& t, double low, double high, Generator& gen, Site site) {
  if (!t.is_floating_point())
    fail("uniform_", fmt::format("expected a floating-point tensor, got {}", dtype_name(t.dtype())), site);
  uint64_t off = gen.take(t.device(), philox::uniform_blocks(uint64_t(t.numel())));
  fill_random(t, [&](const Tensor& d) { backend_for(d.device()).fill_uniform(d, low, high, gen.seed(), off); });
  t.storage()->bump_version();
  return t;
}
Tensor& uniform_(Tensor& t, double low, double high, Site site) {
  return uniform_(t, low, high, default_generator(), site);
}

Tensor& normal_(Tensor& t, double mean, double std, Generator& gen, Site site) {
  if (!t.is_floating_point())
    fail("normal_", fmt::format("expected a floating-point tensor, got {}", dtype_name(t.dtype())), site);
  uint64_t off = gen.take(t.device(), philox::normal_blocks(uint64_t(t.numel())));
  fill_random(t, [&](const Tensor& d) { backend_for(d.device()).fill_normal(d, mean, std, gen.seed(), off); });
  t.storage()->bump_version();
  return t;
}
Tensor& normal_(Tensor& t, double mean, double std, Site site) {
  return normal_(t, mean, std, default_generator(), site);
}

Tensor rand(const Dims& shape, Generator& gen, Options opt, Site site) {
  Tensor t = make_tensor(shape, opt.dtype, opt.device, "rand", site);
  uniform_(t, 0.0, 1.0, gen, site);
  if (opt.requires_grad) t.requires_grad_(true, site);
  return t;
}
Tensor rand(const Dims& shape, Options opt, Site site) { return rand(shape, default_generator(), opt, site); }

Tensor randn(const Dims& shape, Generator& gen, Options opt, Site site) {
  Tensor t = make_tensor(shape, opt.dtype, opt.device, "randn", site);
  normal_(t, 0.0, 1.0, gen, site);
  if (opt.requires_grad) t.requires_grad_(true, site);
  return t;
}
Tensor randn(const Dims& shape, Options opt, Site site) { return randn(shape, default_generator(), opt, site); }
Tensor rand_like(const Tensor& t, Generator& gen, Site site) {
  given("rand_like", t, site);
  return rand(t.shape(), gen, like(t), site);
}
Tensor rand_like(const Tensor& t, Site site) { return rand_like(t, default_generator(), site); }
Tensor randn_like(const Tensor& t, Generator& gen, Site site) {
  given("randn_like", t, site);
  return randn(t.shape(), gen, like(t), site);
}
Tensor randn_like(const Tensor& t, Site site) { return randn_like(t, default_generator(), site); }

// Drawn on the host from the CPU stream whatever opt.device is, then copied: the same
// numbers on every device.
Tensor randint(int64_t low, int64_t high, const Dims& shape, Generator& gen, Options opt, Site site) {
  if (high <= low) fail("randint", fmt::format("expected low < high, got [{}, {})", low, high), site);
  int64_t n = check_shape("randint", shape, dtype_size(opt.dtype), site);
  uint64_t off = gen.take(kCPU, philox::uniform_blocks(uint64_t(n)));
  std::vector<int64_t> v(static_cast<size_t>(n));
  uint64_t range = uint64_t(high - low);
  for (int64_t i = 0; i < n; i += 4) {  // element i: word i % 4 of block off + i / 4, each block made once
    philox::Block b = philox::generate(gen.seed(), off + uint64_t(i) / 4);
    for (int64_t k = 0; k < 4 && i + k < n; ++k) v[size_t(i + k)] = low + int64_t(b.w[k] % range);
  }
  Tensor t = make_tensor(shape, opt.dtype, kCPU, "randint", site);
  store(t.data_ptr(), opt.dtype, v);
  return finish(std::move(t), {.dtype = opt.dtype, .device = opt.device}, site);
}
Tensor randint(int64_t low, int64_t high, const Dims& shape, Options opt, Site site) {
  return randint(low, high, shape, default_generator(), opt, site);
}

Tensor randperm(int64_t n, Generator& gen, Options opt, Site site) {
  if (n < 0) fail("randperm", fmt::format("expected n >= 0, got {}", n), site);
  std::vector<int64_t> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[size_t(i)] = i;
  uint64_t off = gen.take(kCPU, uint64_t(n));
  for (int64_t i = n - 1; i > 0; --i) {  // Fisher-Yates
    philox::Block b = philox::generate(gen.seed(), off + uint64_t(i));
    uint64_t r = (uint64_t(b.w[0]) << 32 | b.w[1]) % uint64_t(i + 1);
    std::swap(v[size_t(i)], v[size_t(r)]);
  }
  Tensor t = make_tensor(Dims{n}, opt.dtype, kCPU, "randperm", site);
  store(t.data_ptr(), opt.dtype, v);
  return finish(std::move(t), {.dtype = opt.dtype, .device = opt.device}, site);
}
Tensor randperm(int64_t n, Options opt, Site site) { return randperm(n, default_generator(), opt, site); }

// ---- printing, as PyTorch prints
namespace {
struct Formatter {
  bool integral = true, sci = false, is_float = true;
  int width = 1;
  std::string operator()(double x) const {
    if (!is_float) return fmt::format("{}", int64_t(x));
    if (std::isnan(x)) return "nan";
    if (std::isinf(x)) return x > 0 ? "inf" : "-inf";
    if (sci) return fmt::format("{:.4e}", x);
    if (integral) return fmt::format("{:.0f}.", x);
    return fmt::format("{:.4f}", x);
  }
};

void print_rec(std::ostringstream& os, const std::vector<double>& v, const Dims& shape, int d, int64_t base,
               const Dims& strides, const Formatter& f, int indent, bool summarize) {
  int64_t n = shape[d];
  os << '[';
  auto one = [&](int64_t i) {
    if (d == shape.size() - 1) {
      std::string s = f(v[size_t(base + i * strides[d])]);
      os << std::string(size_t(std::max<int>(0, f.width - int(s.size()))), ' ') << s;
    } else {
      print_rec(os, v, shape, d + 1, base + i * strides[d], strides, f, indent + 1, summarize);
    }
  };
  auto sep = [&](int64_t i) {
    if (i == 0) return;
    if (d == shape.size() - 1) {
      os << ", ";
    } else {
      os << ',' << std::string(size_t(shape.size() - 1 - d), '\n') << std::string(size_t(indent + 1), ' ');
    }
  };
  if (summarize && n > 6) {
    for (int64_t i = 0; i < 3; ++i) { sep(i); one(i); }
    os << (d == shape.size() - 1 ? ", ..." : ",\n" + std::string(size_t(indent + 1), ' ') + "...");
    for (int64_t i = n - 3; i < n; ++i) { sep(1); one(i); }
  } else {
    for (int64_t i = 0; i < n; ++i) { sep(i); one(i); }
  }
  os << ']';
}
}  // namespace

std::string Tensor::str() const {
  if (!defined()) return "tensor(undefined)";
  std::vector<double> v = values_as<double>(*this);
  Formatter f;
  f.is_float = is_floating_point();
  double maxabs = 0, minabs = INFINITY;
  for (double x : v) {
    if (!std::isfinite(x)) continue;
    if (x != std::floor(x)) f.integral = false;
    maxabs = std::max(maxabs, std::abs(x));
    if (x != 0) minabs = std::min(minabs, std::abs(x));
  }
  if (f.is_float && !f.integral && (maxabs >= 1e8 || minabs < 1e-4)) f.sci = true;
  if (f.is_float && f.integral && maxabs >= 1e8) f.sci = true;
  for (double x : v) f.width = std::max<int>(f.width, int(f(x).size()));
  std::ostringstream os;
  os << "tensor(";
  if (dim() == 0) {
    os << f(v.empty() ? 0.0 : v[0]);
  } else if (numel() == 0) {
    os << "[]";
  } else {
    print_rec(os, v, shape(), 0, 0, contiguous_strides(shape()), f, 7, numel() > 1000);
  }
  os << fmt::format(", shape={}, dtype={}, device={}", shape().str(), dtype_name(dtype()), device().str());
  if (requires_grad()) os << ", requires_grad";
  os << ')';
  return os.str();
}

std::ostream& operator<<(std::ostream& os, const Tensor& t) { return os << t.str(); }

}  // namespace reel
