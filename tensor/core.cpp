// DType, Device, Site, Error, Dims, Storage and the backend registry: the small
// pieces every other file leans on.
#include <fmt/format.h>

#include <cmath>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <tuple>
#include <vector>

#include "backend.h"
#include "check.h"
#include "internal/core_load.h"

namespace reel {

// ---- dtype
Half::Half(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  uint32_t sign = (x >> 16) & 0x8000u;
  int32_t exp = int32_t((x >> 23) & 0xff) - 127 + 15;
  uint32_t mant = x & 0x7fffffu;
  if (((x >> 23) & 0xff) == 0xff) {  // inf or nan
    bits = uint16_t(sign | 0x7c00u | (mant ? 0x200u : 0u));
  } else if (exp >= 31) {
    bits = uint16_t(sign | 0x7c00u);
  } else if (exp <= 0) {
    if (exp < -10) { bits = uint16_t(sign); return; }
    mant |= 0x800000u;
    uint32_t shift = uint32_t(14 - exp);
    uint32_t half = mant >> shift;
    uint32_t rem = mant & ((1u << shift) - 1);
    uint32_t mid = 1u << (shift - 1);
    if (rem > mid || (rem == mid && (half & 1))) ++half;
    bits = uint16_t(sign | half);
  } else {
    uint32_t half = sign | (uint32_t(exp) << 10) | (mant >> 13);
    uint32_t rem = mant & 0x1fffu;
    if (rem > 0x1000u || (rem == 0x1000u && (half & 1))) ++half;
    bits = uint16_t(half);
  }
}

Half::operator float() const {
  uint32_t sign = uint32_t(bits & 0x8000u) << 16;
  uint32_t exp = (bits >> 10) & 0x1f;
  uint32_t mant = bits & 0x3ffu;
  uint32_t x;
  if (exp == 0) {
    if (mant == 0) {
      x = sign;
    } else {  // subnormal: normalise
      int e = -1;
      do { mant <<= 1; ++e; } while (!(mant & 0x400u));
      x = sign | (uint32_t(127 - 15 - e) << 23) | ((mant & 0x3ffu) << 13);
    }
  } else if (exp == 31) {
    x = sign | 0x7f800000u | (mant << 13);
  } else {
    x = sign | ((exp + 127 - 15) << 23) | (mant << 13);
  }
  float f;
  std::memcpy(&f, &x, 4);
  return f;
}

DType promote(DType a, DType b) {
  if (a == b) return a;
  auto rank = [](DType t) {
    switch (t) {
      case DType::boolean: return 0;
      case DType::u8: return 1;
      case DType::i32: return 2;
      case DType::i64: return 3;
      case DType::f16: return 4;
      case DType::bf16: return 5;
      case DType::f32: return 6;
      case DType::f64: return 7;
    }
    return 0;
  };
  if ((a == DType::f16 && b == DType::bf16) || (a == DType::bf16 && b == DType::f16)) return DType::f32;
  return rank(a) >= rank(b) ? a : b;
}

// ---- device
std::string Device::str() const {
  return is_cpu() ? std::string("cpu") : fmt::format("cuda:{}", int(index));
}

// ---- site and error
std::string Site::str() const {
  if (!known()) return "unknown site";
  return fmt::format("{}:{}", file, line);
}

namespace {
thread_local Site tls_outer_site{nullptr, 0};
thread_local bool tls_site_active = false;
// The op the user called (autograd/op_support.h), and the ones saved by the scopes in
// which user code runs (UserCode, Replace): there the next op is the user's again.
thread_local const char* tls_user_op = nullptr;
thread_local std::vector<const char*> tls_saved_user_ops;
void save_user_op() {
  tls_saved_user_ops.push_back(tls_user_op);
  tls_user_op = nullptr;
}
void restore_user_op() {
  tls_user_op = tls_saved_user_ops.back();
  tls_saved_user_ops.pop_back();
}
}  // namespace

bool enter_user_op(const char* op) {
  if (tls_user_op) return false;
  tls_user_op = op;
  internal::follow_load_tick();  // between the user's ops, never inside one
  return true;
}
void leave_user_op() { tls_user_op = nullptr; }

SiteScope::SiteScope(const Site& site) : owner_(!tls_site_active) {
  if (owner_) {
    tls_outer_site = site;
    tls_site_active = true;
  }
}
SiteScope::SiteScope(const Site& site, Replace)
    : owner_(false), replaced_(true), saved_active_(tls_site_active), saved_(tls_outer_site) {
  tls_outer_site = site;
  tls_site_active = true;
  save_user_op();
}
SiteScope::SiteScope(UserCode)
    : owner_(false), replaced_(true), saved_active_(tls_site_active), saved_(tls_outer_site) {
  tls_site_active = false;
  save_user_op();
}
SiteScope::~SiteScope() {
  if (replaced_) {
    tls_outer_site = saved_;
    tls_site_active = saved_active_;
    restore_user_op();
  } else if (owner_) {
    tls_site_active = false;
  }
}
Site SiteScope::current(const Site& fallback) { return tls_site_active ? tls_outer_site : fallback; }

// ---- module paths
namespace {
thread_local const ModulePath* tls_module = nullptr;
}  // namespace

const ModulePath* current_module() { return tls_module; }
ModuleScope::ModuleScope(const ModulePath* module) : saved_(tls_module) { tls_module = module; }
ModuleScope::~ModuleScope() { tls_module = saved_; }

const ModulePath* ModulePath::intern(const ModulePath* parent, const std::string& name, const std::string& type) {
  // Never freed: a program has as many distinct paths as its models have modules.
  static std::mutex mutex;
  static std::map<std::tuple<const ModulePath*, std::string, std::string>, std::unique_ptr<ModulePath>> paths;
  std::lock_guard lock(mutex);
  auto& slot = paths[{parent, name, type}];
  if (!slot) {
    slot = std::make_unique<ModulePath>();
    slot->parent = parent;
    slot->name = name;
    slot->type = type;
    slot->path = parent && !parent->path.empty() ? parent->path + "." + name : name;
  }
  return slot.get();
}

void fail(const char* op_in, const std::string& message_in, const Site& site) {
  Site where = SiteScope::current(site);
  // An op that the user's op called complained: the error names the user's op first.
  const bool inner = tls_user_op && std::strcmp(tls_user_op, op_in) != 0;
  const char* op = inner ? tls_user_op : op_in;
  std::string message = inner ? fmt::format("{}: {}", op_in, message_in) : message_in;
  std::string in = tls_module ? " in " + tls_module->str() : std::string();
  if (where.known()) throw Error(fmt::format("{}: {} (at {}{})", op, message, where.str(), in));
  if (tls_module) throw Error(fmt::format("{}: {} (in {})", op, message, tls_module->str()));
  throw Error(fmt::format("{}: {}", op, message));
}

void detail::check_failed(const char* function, const char* condition, const std::string& message,
                          const Site& site) {
  fail(function, message.empty() ? fmt::format("`{}` is false", condition)
                                 : fmt::format("{}; `{}` is false", message, condition), site);
}

// ---- dims
Dims::Dims(std::initializer_list<int64_t> v) {
  if (v.size() > size_t(kMaxDims))
    throw Error(fmt::format("Dims: at most {} dims are supported, got {}", kMaxDims, v.size()));
  for (int64_t x : v) d_[n_++] = x;
}
Dims::Dims(const std::vector<int64_t>& v) {
  if (v.size() > size_t(kMaxDims))
    throw Error(fmt::format("Dims: at most {} dims are supported, got {}", kMaxDims, v.size()));
  for (int64_t x : v) d_[n_++] = x;
}
Dims Dims::filled(int n, int64_t value) {
  Dims d;
  d.resize(n, value);
  return d;
}
void Dims::push_back(int64_t v) {
  if (n_ == kMaxDims) throw Error(fmt::format("Dims: at most {} dims are supported", kMaxDims));
  d_[n_++] = v;
}
void Dims::insert(int pos, int64_t v) {
  if (n_ == kMaxDims) throw Error(fmt::format("Dims: at most {} dims are supported", kMaxDims));
  for (int i = n_; i > pos; --i) d_[i] = d_[i - 1];
  d_[pos] = v;
  ++n_;
}
void Dims::erase(int pos) {
  for (int i = pos; i + 1 < n_; ++i) d_[i] = d_[i + 1];
  --n_;
}
void Dims::resize(int n, int64_t fill) {
  if (n > kMaxDims) throw Error(fmt::format("Dims: at most {} dims are supported, got {}", kMaxDims, n));
  for (int i = n_; i < n; ++i) d_[i] = fill;
  n_ = n;
}
std::string Dims::str() const { return fmt::format("[{}]", fmt::join(begin(), end(), ", ")); }

int64_t numel_of(const Dims& shape) {
  int64_t n = 1;
  for (int64_t s : shape)
    if (__builtin_mul_overflow(n, s, &n)) [[unlikely]]
      fail("numel", fmt::format("the element count of shape {} overflows int64", shape.str()), Site{nullptr, 0});
  return n;
}

Dims contiguous_strides(const Dims& shape) {
  Dims s = Dims::filled(shape.size(), 1);
  for (int i = shape.size() - 2; i >= 0; --i)
    if (__builtin_mul_overflow(s[i + 1], std::max<int64_t>(shape[i + 1], 1), &s[i])) [[unlikely]]
      fail("contiguous_strides", fmt::format("the strides of shape {} overflow int64", shape.str()),
           Site{nullptr, 0});
  return s;
}

Dims channels_last_strides(const Dims& shape) {
  if (shape.size() != 4) return contiguous_strides(shape);
  const int64_t C = std::max<int64_t>(shape[1], 1), W = std::max<int64_t>(shape[3], 1);
  const int64_t H = std::max<int64_t>(shape[2], 1);
  return Dims{H * W * C, 1, W * C, C};
}

bool is_channels_last(const Dims& shape, const Dims& strides) {
  if (shape.size() != 4 || shape[1] == 1 || shape[2] * shape[3] == 1) return false;
  const Dims cl = channels_last_strides(shape);
  for (int d = 0; d < 4; ++d)
    if (shape[d] != 1 && strides[d] != cl[d]) return false;
  return true;
}

bool dense_strides(const Dims& shape, const Dims& strides) {
  // the dims that step, innermost first: each must step over exactly the ones inside it
  std::pair<int64_t, int64_t> by_stride[kMaxDims];  // (stride, size)
  int n = 0;
  for (int d = 0; d < shape.size(); ++d) {
    if (shape[d] == 0) return true;
    if (shape[d] == 1) continue;
    int i = n++;
    for (; i > 0 && by_stride[i - 1].first > strides[d]; --i) by_stride[i] = by_stride[i - 1];
    by_stride[i] = {strides[d], shape[d]};
  }
  int64_t expected = 1;
  for (int i = 0; i < n; ++i) {
    if (by_stride[i].first != expected) return false;
    expected *= by_stride[i].second;
  }
  return true;
}

int64_t check_shape(const char* op, const Dims& shape, int64_t elem_size, const Site& site) {
  int64_t extent = std::max<int64_t>(elem_size, 1), n = 1;
  for (int64_t s : shape) {
    if (s < 0) fail(op, fmt::format("shape {} has a negative size", shape.str()), site);
    if (__builtin_mul_overflow(extent, std::max<int64_t>(s, 1), &extent))
      fail(op, fmt::format("shape {} is too large: its element count, strides or size in bytes ({} bytes an "
                           "element) overflow int64", shape.str(), elem_size), site);
    n *= s;  // bounded by extent, which did not overflow
  }
  return n;
}

Dims broadcast_shapes(const char* op, const Dims& a, const Dims& b, const Site& site) {
  int n = std::max(a.size(), b.size());
  Dims out = Dims::filled(n, 1);
  for (int i = 0; i < n; ++i) {
    int ia = a.size() - n + i, ib = b.size() - n + i;
    int64_t da = ia >= 0 ? a[ia] : 1, db = ib >= 0 ? b[ib] : 1;
    if (da != db && da != 1 && db != 1)
      fail(op, fmt::format("shapes {} and {} do not broadcast (dim {}: {} vs {})", a.str(), b.str(), i, da, db),
           site);
    out[i] = da == 1 ? db : da;
  }
  check_shape(op, out, 1, site);
  return out;
}

int wrap_dim(const char* op, int64_t dim, int ndim, const Site& site) {
  int64_t n = std::max(ndim, 1);
  if (dim < -n || dim >= n)
    fail(op, fmt::format("dim {} is out of range for a tensor of {} dims (expected {} to {})", dim, ndim, -n, n - 1),
         site);
  return int(dim < 0 ? dim + n : dim);
}

// ---- storage
Storage::Storage(size_t nbytes, Device device) : nbytes_(nbytes), device_(device) {
  data_ = backend_for(device).allocate(nbytes);
}
Storage::Storage(void* borrowed, size_t nbytes, Device device)
    : data_(borrowed), nbytes_(nbytes), device_(device), owned_(false) {}
Storage::Storage(void* data, size_t nbytes, Device device, Release release)
    : data_(data), nbytes_(nbytes), device_(device), owned_(false), release_(release) {}
Storage::~Storage() {
  if (release_) release_(data_, nbytes_);
  else if (owned_ && data_) backend_for(device_).deallocate(data_, nbytes_);
}

// ---- backend registry
namespace {
using BackendGetter = Backend* (*)(int);
BackendGetter& getter(DeviceType t) {
  static BackendGetter getters[2] = {nullptr, nullptr};
  return getters[int(t)];
}
}  // namespace

void register_backend(DeviceType type, Backend* (*get)(int index)) { getter(type) = get; }

Backend& backend_for(Device device) {
  BackendGetter g = getter(device.type);
  if (!g) {
    if (device.is_cuda())
      throw Error(fmt::format("{}: no CUDA device: this build of reel has no CUDA backend "
                              "(configure with -DREEL_CUDA=ON)",
                              device.str()));
    throw Error("cpu: the CPU backend is not registered");
  }
  return *g(device.index);  // a getter throws Error for a device that is not present
}

}  // namespace reel
