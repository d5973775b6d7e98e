#include "autocast.h"

#include <fmt/format.h>

#include <atomic>
#include <cstdio>
#include <unordered_map>

#include "../tensor/backend.h"
#include "../tensor/error.h"
#include "op_support.h"

namespace reel {
namespace {

struct AutocastState {
  bool enabled[2] = {false, false};  // by DeviceType
  DType dtype[2] = {DType::bf16, DType::f16};  // PyTorch's defaults: bf16 on the CPU, f16 on CUDA
  int depth = 0;  // guards open on this thread
  // Low-precision copies of parameters made in the outermost scope: a model that
  // reads a weight many times (a recurrent loop, tied embeddings) converts it once.
  struct Cached {
    Tensor source;  // pins the key's address
    uint32_t version;
    Tensor copy;
  };
  std::unordered_map<const TensorImpl*, Cached> cache;
};
thread_local AutocastState tls_autocast;

int slot(DeviceType d) { return d == DeviceType::CUDA ? 1 : 0; }

// A dtype the device's backend would emulate (bf16 on a CPU without AVX512-BF16 or AMX:
// slower than f32): the products compute in f32 (inputs converted up, outputs f32); said
// once per process.
bool products_fall_back(const Tensor& t, DType to) {
  if (backend_for(t.device()).native_products(to)) return false;
  static std::atomic<bool> told{false};
  if (!told.exchange(true))
    std::fputs("reel autocast: this CPU has neither AVX512-BF16 nor AMX; bf16 products run in f32\n", stderr);
  return true;
}

}  // namespace

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
  ++s.depth;
}

AutocastGuard::~AutocastGuard() {
  AutocastState& s = tls_autocast;
  s.enabled[slot(device_)] = prev_enabled_;
  s.dtype[slot(device_)] = prev_dtype_;
  if (--s.depth == 0) s.cache.clear();
}

bool autocast_active(const Tensor& t) {
  return t.defined() && tls_autocast.enabled[slot(t.device().type)];
}

Tensor autocast_lower(const Tensor& t) {
  if (!autocast_active(t) || !t.is_floating_point() || t.dtype() == DType::f64) return t;
  DType to = tls_autocast.dtype[slot(t.device().type)];
  if (products_fall_back(t, to)) to = DType::f32;
  if (t.dtype() == to) return t;
  bool cacheable = t.is_leaf() && t.requires_grad();
  if (cacheable) {
    auto it = tls_autocast.cache.find(t.impl());
    // an inner guard of the other dtype converts again (and keeps its copy instead)
    if (it != tls_autocast.cache.end() && it->second.version == t.storage()->version() &&
        it->second.copy.dtype() == to)
      return it->second.copy;
  }
  Tensor copy = cast(t, to);
  if (cacheable) tls_autocast.cache[t.impl()] = {t, t.storage()->version(), copy};
  return copy;
}

Tensor autocast_f32(const Tensor& t) {
  if (!autocast_active(t) || (t.dtype() != DType::f16 && t.dtype() != DType::bf16)) return t;
  return t.to(DType::f32);
}

}  // namespace reel
