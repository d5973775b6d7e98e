#include "autocast.h"
#include "autocast_products.h"

#include <fmt/format.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <mutex>

#include "../tensor/backend.h"
#include "../tensor/error.h"
#include "../tensor/internal/cpu_bf16.h"
#include "op_support.h"

namespace reel {

// A parameter's low-precision copy, kept from one autocast forward to the next: valid
// while the parameter's handle still points at the same storage, place and strides and
// the storage's version (bumped by every in-place write: copy_, fill_, the in-place
// methods, optimizer steps, load_state_dict's copies) has not moved.
struct AutocastCopy : RefCounted {
  Tensor copy;
  Ref<Storage> of;  // pinned, so a new storage at a freed one's address never matches
  int64_t offset = 0;
  Dims strides;
  uint32_t version = 0;
  bool used = false;  // read by a forward since it was made or last refreshed
  bool matches(const Tensor& t) const {
    return of.get() == t.storage().get() && offset == t.offset() && strides == t.strides() &&
           version == t.storage()->version() && copy.shape() == t.shape();
  }
};
void ref_inc(AutocastCopy* c) { c->refs.fetch_add(1, std::memory_order_relaxed); }
void ref_dec(AutocastCopy* c) {
  if (c->refs.fetch_sub(1, std::memory_order_acq_rel) == 1) delete c;
}

namespace {

struct AutocastState {
  bool enabled[2] = {false, false};  // by DeviceType
  DType dtype[2] = {DType::bf16, DType::f16};  // PyTorch's defaults: bf16 on the CPU, f16 on CUDA
};
thread_local AutocastState tls_autocast;

int slot(DeviceType d) { return d == DeviceType::CUDA ? 1 : 0; }

// Guards every TensorImpl::autocast_copy: threads may run forwards of one model.
std::mutex copies_mutex;

Ref<AutocastCopy> make_copy(const Tensor& source, const Tensor& copy, bool used) {
  Ref<AutocastCopy> c = make_ref<AutocastCopy>();
  c->copy = copy;
  c->of = source.storage();
  c->offset = source.offset();
  c->strides = source.strides();
  c->version = source.storage()->version();
  c->used = used;
  return c;
}

std::atomic<int> cpu_bf16_products{-1};  // a CpuBf16Products, -1 until set or read

CpuBf16Products from_environment() {
  const char* env = std::getenv("REEL_CPU_BF16_PRODUCTS");
  if (!env || !*env) return CpuBf16Products::automatic;
  const std::string v = env;
  if (v == "automatic") return CpuBf16Products::automatic;
  if (v == "native") return CpuBf16Products::native;
  if (v == "f32") return CpuBf16Products::f32;
  throw Error(fmt::format("autocast: REEL_CPU_BF16_PRODUCTS must be automatic, native or f32, got '{}'", v));
}

// Whether the products of an autocast scope to `to` compute in `to` on t's device: on the
// CPU, bf16 as CpuBf16Products chooses (emulated bf16, without AVX512-BF16 or AMX, never);
// elsewhere whenever the backend runs them natively. Said once per process.
bool products_low(const Tensor& t, DType to) {
  if (!t.device().is_cpu() || to != DType::bf16) return backend_for(t.device()).native_products(to);
  const CpuBf16Products how = cpu_autocast_bf16_products();
  const internal::CpuBf16Facts cpu = internal::cpu_bf16_facts();
  const bool low = how == CpuBf16Products::automatic ? cpu.faster
                   : how == CpuBf16Products::native  ? cpu.native
                                                     : false;
  static std::atomic<bool> told{false};
  if (!told.exchange(true)) {
    const char* setting = how == CpuBf16Products::automatic ? "automatic"
                          : how == CpuBf16Products::native  ? "native"
                                                            : "f32";
    std::fprintf(stderr, "reel autocast: bf16 products run in %s on this CPU (%s; CpuBf16Products::%s)\n",
                 low ? "bf16" : "f32", cpu.how, setting);
  }
  return low;
}

}  // namespace

void set_cpu_autocast_bf16_products(CpuBf16Products how) { cpu_bf16_products.store(int(how)); }

CpuBf16Products cpu_autocast_bf16_products() {
  int v = cpu_bf16_products.load();
  if (v < 0) {
    int fresh = int(from_environment());
    cpu_bf16_products.compare_exchange_strong(v, fresh);
    v = cpu_bf16_products.load();
  }
  return CpuBf16Products(v);
}

bool autocast_products_low(const Tensor& t) {
  return autocast_active(t) && products_low(t, tls_autocast.dtype[slot(t.device().type)]);
}

bool autocast_enabled(DeviceType device) { return tls_autocast.enabled[slot(device)]; }
DType autocast_dtype(DeviceType device) { return tls_autocast.dtype[slot(device)]; }

AutocastGuard::AutocastGuard(AutocastOptions opt) : device_(opt.device) {
  if (opt.dtype != DType::bf16 && opt.dtype != DType::f16)
    throw Error(fmt::format("autocast: expected dtype bf16 or f16, got {}", dtype_name(opt.dtype)));
  AutocastState& s = tls_autocast;
  prev_enabled_ = s.enabled[slot(device_)];
  prev_dtype_ = s.dtype[slot(device_)];
  s.enabled[slot(device_)] = opt.enabled;
  s.dtype[slot(device_)] = opt.dtype;
}

AutocastGuard::~AutocastGuard() {
  AutocastState& s = tls_autocast;
  s.enabled[slot(device_)] = prev_enabled_;
  s.dtype[slot(device_)] = prev_dtype_;
}

bool autocast_active(const Tensor& t) {
  return t.defined() && tls_autocast.enabled[slot(t.device().type)];
}

Tensor autocast_lower(const Tensor& t) {
  if (!autocast_active(t) || !t.is_floating_point() || t.dtype() == DType::f64) return t;
  DType to = tls_autocast.dtype[slot(t.device().type)];
  if (!products_low(t, to)) to = DType::f32;
  if (t.dtype() == to) return t;
  if (!(t.is_leaf() && t.requires_grad())) return cast(t, to);
  {
    std::lock_guard lock(copies_mutex);
    if (AutocastCopy* c = t.impl()->autocast_copy.get(); c && c->matches(t) && c->copy.dtype() == to) {
      c->used = true;
      return c->copy;
    }
  }
  // an inner guard of the other dtype converts again (and keeps its copy instead)
  Tensor copy = cast(t, to);
  std::lock_guard lock(copies_mutex);
  t.impl()->autocast_copy = make_copy(t, copy, true);
  return copy;
}

Tensor autocast_copy_target(const Tensor& p) {
  std::lock_guard lock(copies_mutex);
  Ref<AutocastCopy>& slot_ref = p.impl()->autocast_copy;
  AutocastCopy* c = slot_ref.get();
  if (!c) return Tensor();
  if (!c->used || !(c->copy.shape() == p.shape()) || !(c->copy.device() == p.device())) {
    slot_ref.reset();  // not read since the last step: its memory back, no refresh paid
    return Tensor();
  }
  // A copy a recorded graph still holds (retain_graph, a forward not yet backpropagated)
  // keeps the values that graph computed with: the new values go to a new buffer.
  const Tensor& t = c->copy;
  if (t.impl()->refs.load() == 1 && t.storage()->refs.load() == 1 && t.is_contiguous()) return t;
  return empty(p.shape(), {.dtype = t.dtype(), .device = p.device()});
}

void autocast_copy_written(const Tensor& p, const Tensor& copy) {
  std::lock_guard lock(copies_mutex);
  p.impl()->autocast_copy = make_copy(p, copy, false);
}

void autocast_copy_drop(const Tensor& p) {
  std::lock_guard lock(copies_mutex);
  p.impl()->autocast_copy.reset();
}

Tensor autocast_f32(const Tensor& t) {
  if (!autocast_active(t) || (t.dtype() != DType::f16 && t.dtype() != DType::bf16)) return t;
  return t.to(DType::f32);
}

Tensor autocast_attention(const Tensor& t) {
  if (!autocast_active(t) || !t.is_floating_point() || t.dtype() == DType::f64) return t;
  if (backend_for(t.device()).attention_low_precision(tls_autocast.dtype[slot(t.device().type)]))
    return autocast_lower(t);
  return autocast_f32(t);
}

}  // namespace reel
