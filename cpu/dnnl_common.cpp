// oneDNN engine, streams, descriptors and scratch memory for the CPU kernels.
#include "dnnl_common.h"

#include "isa.h"
#include "../tensor/internal/cpu_bf16.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#if defined(__x86_64__)
#include <cpuid.h>
#endif

namespace reel::cpu {

dnnl::engine& dnnl_engine() {
  static dnnl::engine engine(dnnl::engine::kind::cpu, 0);
  return engine;
}

dnnl::stream& dnnl_stream() {
  thread_local dnnl::stream stream(dnnl_engine());
  return stream;
}

// cpu_isa values are bit sets: an ISA has every bit of the ones below it
bool isa_has(dnnl::cpu_isa want) {
  auto have = unsigned(dnnl::get_effective_cpu_isa()), w = unsigned(want);
  return (have & w) == w;
}
bool bf16_products_native() {
  static const bool yes = isa_has(dnnl::cpu_isa::avx512_core_bf16);
  return yes;
}
bool amx_available() {
  static const bool yes = isa_has(dnnl::cpu_isa::avx512_core_amx);
  return yes;
}

namespace {
bool amd_cpu() {
#if defined(__x86_64__)
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (!__get_cpuid(0, &a, &b, &c, &d)) return false;
  char vendor[13] = {};
  std::memcpy(vendor, &b, 4);
  std::memcpy(vendor + 4, &d, 4);
  std::memcpy(vendor + 8, &c, 4);
  return std::strcmp(vendor, "AuthenticAMD") == 0;
#else
  return false;
#endif
}
}  // namespace

bool bf16_products_faster() {
  static const bool yes = amx_available() || (bf16_products_native() && amd_cpu());
  return yes;
}

const char* bf16_products_how() {
  if (amx_available()) return "AMX";
  if (!bf16_products_native()) return "neither AVX512-BF16 nor AMX";
  return amd_cpu() ? "AVX512-BF16 at twice f32's rate" : "AVX512-BF16 without AMX, at f32's rate";
}

namespace {
// CPU autocast asks through tensor/ (autograd/ does not depend on cpu/)
[[maybe_unused]] const bool g_registered = [] {
  reel::internal::register_cpu_bf16_facts([] {
    return reel::internal::CpuBf16Facts{
        .native = bf16_products_native(), .faster = bf16_products_faster(), .how = bf16_products_how()};
  });
  return true;
}();
}  // namespace

bool dnnl_strides_ok(const int64_t* shape, const int64_t* strides, int n) {
  std::array<std::pair<int64_t, int64_t>, kMaxDims> dims;  // (stride, size) of dims with size > 1
  int k = 0;
  for (int i = 0; i < n; ++i)
    if (shape[i] > 1) dims[size_t(k++)] = {strides[i], shape[i]};
  for (int i = 1; i < k; ++i)  // insertion sort by stride, largest first
    for (int j = i; j > 0 && dims[size_t(j - 1)].first < dims[size_t(j)].first; --j)
      std::swap(dims[size_t(j - 1)], dims[size_t(j)]);
  for (int i = 0; i + 1 < k; ++i)
    if (dims[size_t(i)].first < dims[size_t(i + 1)].first * dims[size_t(i + 1)].second) return false;
  return true;
}

dnnl::memory::desc strided_desc(const Dims& shape, const Dims& strides, DType dtype) {
  return dnnl::memory::desc(dnnl::memory::dims(shape.begin(), shape.end()), dnnl_type(dtype),
                            dnnl::memory::dims(strides.begin(), strides.end()));
}

dnnl::memory::desc strided_desc(const Tensor& t) { return strided_desc(t.shape(), t.strides(), t.dtype()); }

dnnl::memory memory_of(const dnnl::memory::desc& md, const Tensor& t) {
  return dnnl::memory(md, dnnl_engine(), t.data_ptr());
}

Scratch scratch(const dnnl::memory::desc& md) {
  Scratch s;
  s.bytes = empty({int64_t(md.get_size())}, {.dtype = DType::u8});
  s.mem = dnnl::memory(md, dnnl_engine(), s.bytes.data_ptr());
  return s;
}

Tensor dense_copy(const Tensor& t) {
  Tensor c = empty(t.shape(), {.dtype = t.dtype(), .device = t.device()});
  if (c.numel()) backend_for(t.device()).copy(c, t);
  return c;
}

Tensor dense_copy_as(const Tensor& t, DType dtype) {
  Tensor c = empty(t.shape(), {.dtype = dtype, .device = t.device()});
  if (c.numel()) backend_for(t.device()).copy(c, t);
  return c;
}

dnnl::memory::data_type dnnl_type(DType t) {
  switch (t) {
    case DType::f32: return dnnl::memory::data_type::f32;
    case DType::bf16: return dnnl::memory::data_type::bf16;
    case DType::f16: return dnnl::memory::data_type::f16;
    default: throw Error(fmt::format("oneDNN: no kernels for dtype {}", dtype_name(t)));
  }
}

Tensor view_of(const Tensor& base, const Dims& shape, const Dims& strides, int64_t offset) {
  return storage_view(base, shape, strides, offset);
}

void PlanKey::add(int64_t x) {
  if (n >= int(v.size())) throw Error(fmt::format("internal: a oneDNN plan key longer than {} words", v.size()));
  v[size_t(n++)] = x;
}

}  // namespace reel::cpu
