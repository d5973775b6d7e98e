// The fused optimizer step: SGD (momentum, dampening, nesterov), Adam, AdamW, Adamax and
// RMSprop (centred, momentum) over every parameter of the device in one launch.
//
// Layout: a table of up to kMaxTensors parameters (pointers to p, g and the state
// tensors, and sizes) passed by value as the kernel argument (Hopper takes 32 KB of
// arguments), with the hyper-parameters; nothing is copied to the device and the host
// never waits. Each tensor is cut into chunks of kChunk elements; blocks take chunks in
// a grid-stride loop and find a chunk's tensor by binary search in the table's prefix
// sums. More parameters than one table holds take more launches.
// Arithmetic: the CPU's operations (cpu/optim.cpp, PyTorch's single-tensor rules) in the
// parameter's dtype. Both files are compiled without FMA contraction (--fmad=false here,
// -ffp-contract=off there) and fuse exactly where they write fma: SGD's adds with alpha
// (as ATen's kernels fuse them), Adam's as the CPU's AVX2 loop. IEEE sqrt and division on
// both sides, so the two devices give the same bits (test_cuda_ops.cpp checks that).
// Launch shape: 256 threads, 4 elements per thread per pass of a chunk.
// Floor: memory bandwidth. Adam moves 28 bytes per f32 parameter, SGD with momentum 20.
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "../tensor/optim_step.h"
#include "elementwise.cuh"
#include "internal/graph.h"
#include "internal/launch_geometry.h"

namespace reel::cuda {
namespace {

constexpr int kMaxTensors = 320;  // ~18 KB of table
constexpr int64_t kChunk = 4096;

template <typename T>
struct Table {
  int count;
  T* p[kMaxTensors];
  const T* g[kMaxTensors];
  T* s1[kMaxTensors];
  T* s2[kMaxTensors];
  T* s3[kMaxTensors];
  int64_t numel[kMaxTensors];
  int64_t first_chunk[kMaxTensors + 1];  // prefix sums of chunks per tensor
};

// The step's scalars, converted to T on the host as the CPU converts them.
template <typename T>
struct Hyper {
  T wd, mom, damp1, neg_lr, sign, decay, b1, b2, one_b1, one_b2, neg_step, inv_bc2_sqrt, eps, alpha, one_alpha;
  bool first, nesterov, has_mom, has_wd, coupled_wd, decoupled_wd, centered;
};

template <typename T>
Hyper<T> hyper(const OptimStep& s) {
  Hyper<T> h{};
  bool decoupled = s.kind == OptimStep::adamw;
  h.wd = T(s.weight_decay);
  h.mom = T(s.momentum);
  h.damp1 = T(1 - s.dampening);
  h.neg_lr = T(-s.lr);
  h.sign = s.maximize ? T(-1) : T(1);
  h.decay = T(1 - s.lr * s.weight_decay);
  h.b1 = T(s.beta1);
  h.b2 = T(s.beta2);
  h.one_b1 = T(1 - s.beta1);
  h.one_b2 = T(1 - s.beta2);
  h.neg_step = T(-(s.lr / s.bias_correction1));  // Adam's lr / bc1, Adamax's and Adagrad's clr
  h.inv_bc2_sqrt = T(1 / std::sqrt(s.bias_correction2));  // the CPU's product, see cpu/optim.cpp
  h.eps = T(s.eps);
  h.alpha = T(s.alpha);
  h.one_alpha = T(1 - s.alpha);
  h.first = s.first_step;
  h.nesterov = s.nesterov;
  h.has_mom = s.kind == OptimStep::rmsprop ? s.momentum > 0 : s.momentum != 0;
  h.has_wd = s.weight_decay != 0;
  h.coupled_wd = !decoupled && h.has_wd;
  h.decoupled_wd = decoupled && h.has_wd;
  h.centered = s.centered;
  return h;
}

// One element of one step; the CPU's statement order.
template <OptimStep::Kind K, typename T>
__device__ __forceinline__ void update(const Hyper<T>& h, T* __restrict__ p, const T* __restrict__ g,
                                       T* __restrict__ s1, T* __restrict__ s2, T* __restrict__ s3, int64_t i) {
  if constexpr (K == OptimStep::sgd) {  // PyTorch's adds with alpha, each one fma (cpu/optim.cpp)
    T d = h.sign * g[i];
    if (h.has_wd) d = fma(p[i], h.wd, d);
    if (h.has_mom) {
      T buf = h.first ? d : fma(d, h.damp1, s1[i] * h.mom);
      s1[i] = buf;
      d = h.nesterov ? fma(buf, h.mom, d) : buf;
    }
    p[i] = fma(d, h.neg_lr, p[i]);
  } else if constexpr (K == OptimStep::adam) {  // and AdamW (decoupled decay); the CPU's AVX2 loop
    T pi = p[i];
    if (h.decoupled_wd) pi = pi * h.decay;
    T d = h.sign * g[i];
    if (h.coupled_wd) d = fma(h.wd, pi, d);
    T mi = fma(s1[i], h.b1, h.one_b1 * d);
    T vi = fma(s2[i], h.b2, h.one_b2 * (d * d));
    s1[i] = mi;
    s2[i] = vi;
    T denom = fma(sqrt(vi), h.inv_bc2_sqrt, h.eps);
    p[i] = fma(h.neg_step, mi / denom, pi);
  } else if constexpr (K == OptimStep::adamax) {
    T d = h.sign * g[i];
    if (h.has_wd) d = d + h.wd * p[i];
    T mi = s1[i] * h.b1 + h.one_b1 * d;
    T a = s2[i] * h.b2, c = fabs(d) + h.eps;
    T ui = a > c || a != a ? a : c;  // amax propagates NaN
    s1[i] = mi;
    s2[i] = ui;
    p[i] = p[i] + h.neg_step * (mi / ui);
  } else if constexpr (K == OptimStep::adagrad) {
    T d = h.sign * g[i];
    if (h.has_wd) d = d + h.wd * p[i];
    T vi = s1[i] + d * d;
    s1[i] = vi;
    p[i] = p[i] + h.neg_step * (d / (sqrt(vi) + h.eps));
  } else {  // rmsprop
    T d = h.sign * g[i];
    if (h.has_wd) d = d + h.wd * p[i];
    T vi = s1[i] * h.alpha + h.one_alpha * (d * d);
    s1[i] = vi;
    T avg;
    if (h.centered) {
      T ai = s2[i] * h.alpha + h.one_alpha * d;
      s2[i] = ai;
      avg = sqrt(vi + T(-1) * (ai * ai));
    } else {
      avg = sqrt(vi);
    }
    avg = avg + h.eps;
    if (h.has_mom) {
      T bi = s3[i] * h.mom + d / avg;
      s3[i] = bi;
      p[i] = p[i] + h.neg_lr * bi;
    } else {
      p[i] = p[i] + h.neg_lr * (d / avg);
    }
  }
}

// The tensor that chunk c of a launch table belongs to: the last one whose first chunk
// is <= c (a binary search over the prefix sums).
__device__ __forceinline__ int tensor_of_chunk(const int64_t* first_chunk, int count, int64_t c) {
  int lo = 0, hi = count - 1;
  while (lo < hi) {
    int mid = (lo + hi + 1) / 2;
    if (first_chunk[mid] <= c) lo = mid;
    else hi = mid - 1;
  }
  return lo;
}

// hdev: null in eager steps; in a step captured into a CUDA graph the hyper-parameters
// the graph rewrites before each replay (step count, lr), read from device memory.
template <OptimStep::Kind K, typename T>
__global__ void __launch_bounds__(kThreads)
    optim_kernel(const Table<T> table, const Hyper<T> h_arg, const Hyper<T>* __restrict__ hdev) {
  const Hyper<T> h = hdev ? *hdev : h_arg;
  int64_t chunks = table.first_chunk[table.count];
  for (int64_t c = blockIdx.x; c < chunks; c += gridDim.x) {
    int t = tensor_of_chunk(table.first_chunk, table.count, c);
    int64_t begin = (c - table.first_chunk[t]) * kChunk;
    int64_t end = begin + kChunk < table.numel[t] ? begin + kChunk : table.numel[t];
    T* p = table.p[t];
    const T* g = table.g[t];
    T *s1 = table.s1[t], *s2 = table.s2[t], *s3 = table.s3[t];
#pragma unroll 4
    for (int64_t i = begin + threadIdx.x; i < end; i += kThreads) update<K, T>(h, p, g, s1, s2, s3, i);
  }
}

// ---- steps captured into a CUDA graph (cuda::Graph; rules in internal/graph.h)

template <typename T>
__global__ void store_hyper(Hyper<T>* dst, const Hyper<T> h) {
  *dst = h;
}

// Records a step being captured (graph.cpp checks the warm-up rule) and returns the
// device slot its kernel reads the hyper-parameters from.
template <typename T>
void* capture_step(CaptureState& cs, const OptimStep& step, const Table<T>& table) {
  static_assert(sizeof(Hyper<T>) <= kHyperSlotBytes);
  std::vector<const void*> state;
  for (int i = 0; i < table.count; ++i)
    for (const T* st : {table.s1[i], table.s2[i], table.s3[i]})
      if (st) state.push_back(st);
  return capture_optim(cs, step, std::is_same_v<T, double> ? DType::f64 : DType::f32, state);
}

template <typename T>
void launch(Context& ctx, const OptimStep& step, const Table<T>& table) {
  int64_t chunks = table.first_chunk[table.count];
  if (chunks == 0) return;
  unsigned grid = unsigned(geometry::optim_grid(chunks, ctx.sm_count));
  Hyper<T> h = hyper<T>(step);
  const Hyper<T>* hdev = nullptr;
  if (CaptureState* cs = active_capture(ctx)) hdev = static_cast<const Hyper<T>*>(capture_step<T>(*cs, step, table));
  switch (step.kind) {
    case OptimStep::sgd: optim_kernel<OptimStep::sgd, T><<<grid, kThreads, 0, ctx.stream>>>(table, h, hdev); break;
    case OptimStep::adam:
    case OptimStep::adamw: optim_kernel<OptimStep::adam, T><<<grid, kThreads, 0, ctx.stream>>>(table, h, hdev); break;
    case OptimStep::adamax:
      optim_kernel<OptimStep::adamax, T><<<grid, kThreads, 0, ctx.stream>>>(table, h, hdev);
      break;
    case OptimStep::rmsprop:
      optim_kernel<OptimStep::rmsprop, T><<<grid, kThreads, 0, ctx.stream>>>(table, h, hdev);
      break;
    case OptimStep::adagrad:
      optim_kernel<OptimStep::adagrad, T><<<grid, kThreads, 0, ctx.stream>>>(table, h, hdev);
      break;
  }
  check_launch("optim_step");
}

template <typename T>
T* state_ptr(const std::vector<Tensor>& v, size_t i) {
  return v.empty() ? nullptr : static_cast<T*>(v[i].data_ptr());
}

// Every parameter of dtype T, in tables of kMaxTensors.
template <typename T>
void step_all(Context& ctx, const OptimStep& step, DType dt, const std::vector<Tensor>& params,
              const std::vector<Tensor>& grads, const std::vector<Tensor>& s1, const std::vector<Tensor>& s2,
              const std::vector<Tensor>& s3) {
  auto table = std::make_unique<Table<T>>();
  table->count = 0;
  table->first_chunk[0] = 0;
  for (size_t i = 0; i < params.size(); ++i) {
    if (params[i].dtype() != dt || params[i].numel() == 0) continue;
    int k = table->count;
    table->p[k] = static_cast<T*>(params[i].data_ptr());
    table->g[k] = static_cast<const T*>(grads[i].data_ptr());
    table->s1[k] = state_ptr<T>(s1, i);
    table->s2[k] = state_ptr<T>(s2, i);
    table->s3[k] = state_ptr<T>(s3, i);
    table->numel[k] = params[i].numel();
    table->first_chunk[k + 1] = table->first_chunk[k] + (params[i].numel() + kChunk - 1) / kChunk;
    if (++table->count == kMaxTensors) {
      launch<T>(ctx, step, *table);
      table->count = 0;
    }
  }
  if (table->count) launch<T>(ctx, step, *table);
}

}  // namespace

void write_captured_optim(Context& ctx, const CapturedOptim& o, int64_t t, std::optional<double> lr) {
  OptimStep s = t > 0 ? optim_at_step(o.step, t) : o.step;  // an eager step's expression: a replay rounds alike
  if (lr) s.lr = *lr;
  if (o.dtype == DType::f64)
    store_hyper<double><<<1, 1, 0, ctx.stream>>>(static_cast<Hyper<double>*>(o.slot), hyper<double>(s));
  else
    store_hyper<float><<<1, 1, 0, ctx.stream>>>(static_cast<Hyper<float>*>(o.slot), hyper<float>(s));
  check_launch("cuda::Graph::replay");
}

void CudaBackend::optim_step(const OptimStep& step, const std::vector<Tensor>& params, const std::vector<Tensor>& grads,
                             const std::vector<Tensor>& state1, const std::vector<Tensor>& state2,
                             const std::vector<Tensor>& state3) {
  // The CPU's checks (cpu/optim.cpp), and every tensor on this device.
  size_t n = params.size();
  bool need1 = optim_uses_state(step, 0), need2 = optim_uses_state(step, 1), need3 = optim_uses_state(step, 2);
  auto check_list = [&](const std::vector<Tensor>& v, bool needed, const char* what) {
    if (needed ? v.size() != n : !v.empty() && v.size() != n)
      throw Error(std::string("optim_step: ") + what + " has " + std::to_string(v.size()) + " tensors for " +
                  std::to_string(n) + " parameters");
  };
  check_list(grads, true, "grads");
  check_list(state1, need1, "state1");
  check_list(state2, need2, "state2");
  check_list(state3, need3, "state3");
  bool any32 = false, any64 = false;
  for (size_t i = 0; i < n; ++i) {
    const Tensor& p = params[i];
    expect_here("optim_step", {&p});
    if (p.dtype() != DType::f32 && p.dtype() != DType::f64)
      throw Error("optim_step: parameter " + std::to_string(i) + " is " + dtype_name(p.dtype()) +
                  ", expected f32 or f64");
    for (const std::vector<Tensor>* v : {&grads, &state1, &state2, &state3}) {
      if (v->empty()) continue;
      const Tensor& t = (*v)[i];
      if (!t.defined() || !(t.shape() == p.shape()) || t.dtype() != p.dtype() || !t.is_contiguous() ||
          !(t.device() == p.device()))
        throw Error("optim_step: a gradient or state tensor of parameter " + std::to_string(i) +
                    " does not match it (" + p.shape().str() + " " + dtype_name(p.dtype()) + " on " +
                    p.device().str() + ")");
    }
    if (!p.is_contiguous()) throw Error("optim_step: parameter " + std::to_string(i) + " is not contiguous");
    (p.dtype() == DType::f32 ? any32 : any64) = true;
  }
  Context& c = ctx();
  if (any32) step_all<float>(c, step, DType::f32, params, grads, state1, state2, state3);
  if (any64) step_all<double>(c, step, DType::f64, params, grads, state1, state2, state3);
}

// ---- GradScaler's unscale and scale update (optim/grad_scaler.h; the CPU's in cpu/optim.cpp)
//
// amp_unscale: g *= inv_scale in place over every gradient of the device, and found_inf = 1
// when any element is inf or NaN, in one launch (more when the gradients outnumber a
// table). The same chunked table as the optimizer step, with each tensor's dtype in the
// table (f32, f64, f16 and bf16 in one launch: a chunk has one dtype, so a block never
// diverges on it). inv_scale is read from device memory and found_inf written there (by
// one thread per block that saw a non-finite value, after __syncthreads_or): the host
// never waits. PyTorch's arithmetic: f16/bf16 computed in f32 and rounded back, f64 in
// f64; values are left untouched when inv_scale is 1.
// Launch shape: 256 threads, grid-stride over chunks of kChunk elements. Floor: memory
// bandwidth, 8 bytes per f32 element.
// amp_update_scale: one thread (<<<1, 1>>>), PyTorch's amp_update_scale_cuda_kernel.

namespace {

enum AmpDType : uint8_t { amp_f32, amp_f64, amp_f16, amp_bf16 };

struct AmpTable {
  int count;
  void* g[kMaxTensors];
  AmpDType dtype[kMaxTensors];
  int64_t numel[kMaxTensors];
  int64_t first_chunk[kMaxTensors + 1];  // prefix sums of chunks per tensor
};

// inf or NaN, by the bits (exponent all ones), as the CPU tests them
__device__ __forceinline__ bool non_finite(float v) { return (__float_as_uint(v) & 0x7fffffffu) >= 0x7f800000u; }
__device__ __forceinline__ bool non_finite(double v) {
  return (static_cast<unsigned long long>(__double_as_longlong(v)) & 0x7fffffffffffffffull) >= 0x7ff0000000000000ull;
}

// Whether the element was inf or NaN; scales it in place (the CPU's expression).
template <typename T>
__device__ __forceinline__ bool unscale_one(T* p, int64_t i, float inv) {
  if constexpr (std::is_same_v<T, double>) {
    double v = p[i];
    if (inv != 1.0f) p[i] = v * double(inv);
    return non_finite(v);
  } else if constexpr (std::is_same_v<T, float>) {
    float v = p[i];
    if (inv != 1.0f) p[i] = v * inv;
    return non_finite(v);
  } else {  // __half, __nv_bfloat16: in f32, rounded to nearest even
    float v = half_to_float(p[i]);
    if (inv != 1.0f) p[i] = float_to_half<T>(v * inv);
    return non_finite(v);
  }
}

template <typename T>
__device__ __forceinline__ bool unscale_chunk(void* base, int64_t begin, int64_t end, float inv) {
  T* p = static_cast<T*>(base);
  bool bad = false;
#pragma unroll 4
  for (int64_t i = begin + threadIdx.x; i < end; i += kThreads) bad |= unscale_one<T>(p, i, inv);
  return bad;
}

__global__ void __launch_bounds__(kThreads)
    amp_unscale_kernel(const AmpTable table, float* __restrict__ found_inf, const float* __restrict__ inv_scale) {
  const float inv = *inv_scale;
  const int64_t chunks = table.first_chunk[table.count];
  bool bad = false;
  for (int64_t c = blockIdx.x; c < chunks; c += gridDim.x) {
    const int t = tensor_of_chunk(table.first_chunk, table.count, c);
    const int64_t begin = (c - table.first_chunk[t]) * kChunk;
    const int64_t end = begin + kChunk < table.numel[t] ? begin + kChunk : table.numel[t];
    switch (table.dtype[t]) {
      case amp_f32: bad |= unscale_chunk<float>(table.g[t], begin, end, inv); break;
      case amp_f64: bad |= unscale_chunk<double>(table.g[t], begin, end, inv); break;
      case amp_f16: bad |= unscale_chunk<__half>(table.g[t], begin, end, inv); break;
      case amp_bf16: bad |= unscale_chunk<__nv_bfloat16>(table.g[t], begin, end, inv); break;
    }
  }
  // every thread of the block reaches this (the loop bounds are uniform per block)
  if (__syncthreads_or(bad) && threadIdx.x == 0) *found_inf = 1.0f;
}

void launch_unscale(Context& ctx, const AmpTable& table, float* found_inf, const float* inv_scale) {
  int64_t chunks = table.first_chunk[table.count];
  if (chunks == 0) return;
  unsigned grid = unsigned(geometry::optim_grid(chunks, ctx.sm_count));  // the optimizer's chunked tables
  amp_unscale_kernel<<<grid, kThreads, 0, ctx.stream>>>(table, found_inf, inv_scale);
  check_launch("amp_unscale");
}

__global__ void amp_update_scale_kernel(float* scale, int32_t* growth_tracker, const float* found_inf,
                                        double growth_factor, double backoff_factor, int64_t growth_interval) {
  if (*found_inf != 0.0f) {
    *scale = float(double(*scale) * backoff_factor);
    *growth_tracker = 0;
  } else {
    int64_t successful = int64_t(*growth_tracker) + 1;
    if (successful == growth_interval) {
      float grown = float(double(*scale) * growth_factor);
      if (!non_finite(grown)) *scale = grown;  // never grown past f32's range to inf
      *growth_tracker = 0;
    } else {
      *growth_tracker = int32_t(successful);
    }
  }
}

}  // namespace

void CudaBackend::amp_unscale(const std::vector<Tensor>& grads, const Tensor& found_inf, const Tensor& inv_scale) {
  expect_here("amp_unscale", {&found_inf, &inv_scale});
  for (const Tensor* t : {&found_inf, &inv_scale})
    if (!t->defined() || t->numel() != 1 || t->dtype() != DType::f32)
      throw Error(std::string("amp_unscale: ") + (t == &found_inf ? "found_inf" : "inv_scale") +
                  " must be a one-element f32 tensor");
  std::vector<AmpDType> dtypes(grads.size());
  for (size_t i = 0; i < grads.size(); ++i) {
    const Tensor& g = grads[i];
    if (!g.defined()) throw Error("amp_unscale: gradient " + std::to_string(i) + " is undefined");
    expect_here("amp_unscale", {&g});
    AmpDType dt;
    switch (g.dtype()) {
      case DType::f32: dt = amp_f32; break;
      case DType::f64: dt = amp_f64; break;
      case DType::f16: dt = amp_f16; break;
      case DType::bf16: dt = amp_bf16; break;
      default:
        throw Error("amp_unscale: gradient " + std::to_string(i) + " is " + dtype_name(g.dtype()) +
                    ", expected f32, f64, f16 or bf16");
    }
    if (!g.is_contiguous()) throw Error("amp_unscale: gradient " + std::to_string(i) + " is not contiguous");
    dtypes[i] = dt;
  }
  auto table = std::make_unique<AmpTable>();
  table->count = 0;
  table->first_chunk[0] = 0;
  Context& c = ctx();
  float* fi = static_cast<float*>(found_inf.data_ptr());
  const float* inv = static_cast<const float*>(inv_scale.data_ptr());
  for (size_t i = 0; i < grads.size(); ++i) {
    const Tensor& g = grads[i];
    if (g.numel() == 0) continue;
    int k = table->count;
    table->g[k] = g.data_ptr();
    table->dtype[k] = dtypes[i];
    table->numel[k] = g.numel();
    table->first_chunk[k + 1] = table->first_chunk[k] + (g.numel() + kChunk - 1) / kChunk;
    if (++table->count == kMaxTensors) {
      launch_unscale(c, *table, fi, inv);
      table->count = 0;
    }
  }
  if (table->count) launch_unscale(c, *table, fi, inv);
}

void CudaBackend::amp_update_scale(const Tensor& scale, const Tensor& growth_tracker, const Tensor& found_inf,
                                   double growth_factor, double backoff_factor, int64_t growth_interval) {
  expect_here("amp_update_scale", {&scale, &growth_tracker, &found_inf});
  if (!scale.defined() || scale.numel() != 1 || scale.dtype() != DType::f32 || !growth_tracker.defined() ||
      growth_tracker.numel() != 1 || growth_tracker.dtype() != DType::i32 || !found_inf.defined() ||
      found_inf.numel() != 1 || found_inf.dtype() != DType::f32)
    throw Error("amp_update_scale: expected one-element tensors: scale f32, growth_tracker i32, found_inf f32");
  Context& c = ctx();
  amp_update_scale_kernel<<<1, 1, 0, c.stream>>>(static_cast<float*>(scale.data_ptr()),
                                                 static_cast<int32_t*>(growth_tracker.data_ptr()),
                                                 static_cast<const float*>(found_inf.data_ptr()), growth_factor,
                                                 backoff_factor, growth_interval);
  check_launch("amp_update_scale");
}

}  // namespace reel::cuda
