// Fused optimizer steps on the CPU: every parameter of one step is cut into chunks
// that one OpenMP region shares out; each chunk reads p, g and the state once and
// writes p and the state once, with no temporaries. Memory-bound: Adam moves 28
// bytes per f32 parameter (read p g m v, write p m v), SGD with momentum 20.
// Arithmetic follows PyTorch 1.13's single-tensor code step for step, in the
// parameter's dtype, with the scalar factors it computes in double.
#include <fmt/format.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <type_traits>

#include "convert.h"
#include "cpu_backend.h"
#include "stream_store.h"
#include "loops.h"
#include "../tensor/optim_step.h"
#include "../tensor/parallel.h"

#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>
#define REEL_ADAM_AVX2 1
#endif
#ifdef __SSE2__
#include <xmmintrin.h>
#endif
#if defined(REEL_ADAM_AVX2) && defined(__F16C__)
#define REEL_ADAM_ROUNDS 1  // Adam's vector loop writes the rounded copies (F16C for f16)
#endif

namespace reel::cpu {

namespace {

// Adam's f32 loop in AVX2 intrinsics: under -fmath-errno GCC keeps std::sqrt scalar
// (a vsqrtss and an errno branch per element, so the loop is not vectorised) and no
// function attribute or pragma lifts that. Scalar Adam ran at 2.4x its memory floor.
// The scalar loop below does the same operations, fused where this one fuses (std::fma;
// the file is compiled with -ffp-contract=off, so nothing else is fused): it remains for
// the tail, f64 and other targets, and cuda/optim.cu does the same, so every device and
// path rounds alike (see the include of <immintrin.h> above).
template <typename T>
struct Ptrs {
  T* p;
  const T* g;
  T* s1;
  T* s2;
  T* s3;
};

// p -= lr d, d = (g + wd p) through momentum b (and nesterov). PyTorch's ops one for one:
// each add with alpha (d.add(p, alpha=wd), buf.mul_(mom).add_(d, alpha=1 - damp),
// d.add(buf, alpha=mom), p.add_(d, alpha=-lr)) is one fused multiply-add in ATen's
// vectorised CPU kernel and in nvcc's contraction of its CUDA kernel; written as std::fma
// here and fma() in cuda/optim.cu (this file is compiled with -ffp-contract=off), the two
// devices give the same bits.
template <typename T>
void sgd(const OptimStep& s, Ptrs<T> x, int64_t n) {
  const T wd = T(s.weight_decay), mom = T(s.momentum), damp1 = T(1 - s.dampening), neg_lr = T(-s.lr);
  const T sign = s.maximize ? T(-1) : T(1);
  T* __restrict p = x.p;
  const T* __restrict g = x.g;
  T* __restrict b = x.s1;
  if (s.momentum == 0) {
#pragma omp simd
    for (int64_t i = 0; i < n; ++i) {
      T d = sign * g[i];
      if (s.weight_decay != 0) d = std::fma(p[i], wd, d);
      p[i] = std::fma(d, neg_lr, p[i]);
    }
    return;
  }
  const bool first = s.first_step, nesterov = s.nesterov;
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) {
    T d = sign * g[i];
    if (s.weight_decay != 0) d = std::fma(p[i], wd, d);
    T buf = first ? d : std::fma(d, damp1, b[i] * mom);
    b[i] = buf;
    d = nesterov ? std::fma(buf, mom, d) : buf;
    p[i] = std::fma(d, neg_lr, p[i]);
  }
}

// Adam / AdamW: m, v moments; p -= lr/bc1 m / (sqrt(v)/sqrt(bc2) + eps). The weight
// decay branches are template arguments, out of the loop. sqrt(v)/sqrt(bc2) is taken as
// sqrt(v) * (1/sqrt(bc2)), fused with + eps: PyTorch divides, but the divides and the
// sqrt share one divider unit. One divide fewer: 0.437 -> 0.327 ns/param with the data
// in L2 (1 thread, Zen 4), margin for machines where the loop's compute nears its
// memory floor (W6 was 1.25x that floor on a Xeon). The product differs by under an ulp.
// Where a step also writes autocast's rounded copy of p (optim_step_rounded), or none.
struct Rounded {
  uint16_t* out = nullptr;
  DType dtype = DType::bf16;  // or f16
};

#ifdef REEL_ADAM_ROUNDS
// 8 floats rounded as convert.cpp's to_bf16 / to_f16 round them (bf16: to nearest even
// on the bits, every NaN the quiet 0x7fc0; f16: F16C), stored at o; `stream` (o 16-byte
// aligned): past the cache, without the read for ownership (28 -> 30 bytes a parameter
// instead of 32; the pass fences once at its end)
inline void store_rounded(uint16_t* o, __m256 v, DType dtype, bool stream) {
  __m128i h;
  if (dtype == DType::f16) {
    h = _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT);
  } else {
    __m256i u = _mm256_castps_si256(v);
    __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
    __m256i r = _mm256_srli_epi32(_mm256_add_epi32(_mm256_add_epi32(u, _mm256_set1_epi32(0x7fff)), lsb), 16);
    __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(u, _mm256_set1_epi32(0x7fffffff)), _mm256_set1_epi32(0x7f800000));
    r = _mm256_blendv_epi8(r, _mm256_set1_epi32(0x7fc0), nan);
    // packus works per 128-bit lane: keep lanes 0 and 2 of the packed result
    h = _mm256_castsi256_si128(_mm256_permute4x64_epi64(_mm256_packus_epi32(r, r), 0x08));
  }
  if (stream) _mm_stream_si128(reinterpret_cast<__m128i*>(o), h);
  else _mm_storeu_si128(reinterpret_cast<__m128i*>(o), h);
}
#endif

template <typename T, bool kDecoupledWd, bool kCoupledWd>
void adam_loop(const OptimStep& s, Ptrs<T> x, int64_t n, Rounded rounded) {
  const T wd = T(s.weight_decay), decay = T(1 - s.lr * s.weight_decay);
  const T b1 = T(s.beta1), b2 = T(s.beta2), one_b1 = T(1 - s.beta1), one_b2 = T(1 - s.beta2);
  const T neg_step = T(-(s.lr / s.bias_correction1)), inv_bc2_sqrt = T(1 / std::sqrt(s.bias_correction2)), eps = T(s.eps);
  const T sign = s.maximize ? T(-1) : T(1);
  T* __restrict p = x.p;
  const T* __restrict g = x.g;
  T* __restrict m = x.s1;
  T* __restrict v = x.s2;
  int64_t i = 0;
#ifdef REEL_ADAM_AVX2
  if constexpr (std::is_same_v<T, float>) {
    const __m256 vwd = _mm256_set1_ps(wd), vdecay = _mm256_set1_ps(decay), vb1 = _mm256_set1_ps(b1),
                 vb2 = _mm256_set1_ps(b2), v1b1 = _mm256_set1_ps(one_b1), v1b2 = _mm256_set1_ps(one_b2),
                 vstep = _mm256_set1_ps(neg_step), vinv_bc2 = _mm256_set1_ps(inv_bc2_sqrt), veps = _mm256_set1_ps(eps),
                 vsign = _mm256_set1_ps(sign);
#ifdef REEL_ADAM_ROUNDS
    const bool stream = (reinterpret_cast<uintptr_t>(rounded.out) & 15u) == 0;
#endif
    for (; i + 8 <= n; i += 8) {
      __m256 pi = _mm256_loadu_ps(p + i);
      if constexpr (kDecoupledWd) pi = _mm256_mul_ps(pi, vdecay);
      __m256 d = _mm256_mul_ps(vsign, _mm256_loadu_ps(g + i));
      if constexpr (kCoupledWd) d = _mm256_fmadd_ps(vwd, pi, d);
      __m256 mi = _mm256_fmadd_ps(_mm256_loadu_ps(m + i), vb1, _mm256_mul_ps(v1b1, d));
      __m256 vi = _mm256_fmadd_ps(_mm256_loadu_ps(v + i), vb2, _mm256_mul_ps(v1b2, _mm256_mul_ps(d, d)));
      _mm256_storeu_ps(m + i, mi);
      _mm256_storeu_ps(v + i, vi);
      __m256 denom = _mm256_fmadd_ps(_mm256_sqrt_ps(vi), vinv_bc2, veps);
      __m256 pn = _mm256_fmadd_ps(vstep, _mm256_div_ps(mi, denom), pi);
      _mm256_storeu_ps(p + i, pn);
#ifdef REEL_ADAM_ROUNDS
      // in the same pass: the conversion's arithmetic hides under the loop's memory stalls
      if (rounded.out) store_rounded(rounded.out + i, pn, rounded.dtype, stream);
#endif
    }
  }
#endif
  const int64_t tail = i;  // the rounded copy's elements from here on are converted after the loop
  // the AVX2 loop's operations (and cuda/optim.cu's), fused where it fuses
  for (; i < n; ++i) {
    T pi = p[i];
    if constexpr (kDecoupledWd) pi = pi * decay;
    T d = sign * g[i];
    if constexpr (kCoupledWd) d = std::fma(wd, pi, d);
    T mi = std::fma(m[i], b1, one_b1 * d);
    T vi = std::fma(v[i], b2, one_b2 * (d * d));
    m[i] = mi;
    v[i] = vi;
    T denom = std::fma(std::sqrt(vi), inv_bc2_sqrt, eps);
    p[i] = std::fma(neg_step, mi / denom, pi);
  }
  if constexpr (std::is_same_v<T, float>)
    if (rounded.out && tail < n) round_span(rounded.dtype, rounded.out + tail, p + tail, n - tail, false);
}

template <typename T>
void adam(const OptimStep& s, Ptrs<T> x, int64_t n, Rounded rounded = {}) {
  const bool decoupled = s.kind == OptimStep::adamw, wd = s.weight_decay != 0;
  if (!wd)
    adam_loop<T, false, false>(s, x, n, rounded);
  else if (decoupled)
    adam_loop<T, true, false>(s, x, n, rounded);
  else
    adam_loop<T, false, true>(s, x, n, rounded);
}

// Adamax: m moment, u infinity norm; p -= lr/bc1 m / u
template <typename T>
void adamax(const OptimStep& s, Ptrs<T> x, int64_t n) {
  const T wd = T(s.weight_decay), b1 = T(s.beta1), b2 = T(s.beta2), one_b1 = T(1 - s.beta1), eps = T(s.eps);
  const T neg_clr = T(-(s.lr / s.bias_correction1));
  const T sign = s.maximize ? T(-1) : T(1);
  const bool has_wd = s.weight_decay != 0;
  T* __restrict p = x.p;
  const T* __restrict g = x.g;
  T* __restrict m = x.s1;
  T* __restrict u = x.s2;
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) {
    T d = sign * g[i];
    if (has_wd) d = d + wd * p[i];
    T mi = m[i] * b1 + one_b1 * d;
    T a = u[i] * b2, c = std::abs(d) + eps;
    T ui = a > c || a != a ? a : c;  // amax propagates NaN
    m[i] = mi;
    u[i] = ui;
    p[i] = p[i] + neg_clr * (mi / ui);
  }
}

// RMSprop: v (and centred a) averages, optional momentum b; p -= lr g / (sqrt(v - a^2) + eps)
template <typename T>
void rmsprop(const OptimStep& s, Ptrs<T> x, int64_t n) {
  const T wd = T(s.weight_decay), alpha = T(s.alpha), one_alpha = T(1 - s.alpha), eps = T(s.eps);
  const T mom = T(s.momentum), neg_lr = T(-s.lr);
  const T sign = s.maximize ? T(-1) : T(1);
  const bool has_wd = s.weight_decay != 0, centered = s.centered, has_mom = s.momentum > 0;
  T* __restrict p = x.p;
  const T* __restrict g = x.g;
  T* __restrict v = x.s1;
  T* __restrict a = x.s2;
  T* __restrict b = x.s3;
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) {
    T d = sign * g[i];
    if (has_wd) d = d + wd * p[i];
    T vi = v[i] * alpha + one_alpha * (d * d);
    v[i] = vi;
    T avg;
    if (centered) {
      T ai = a[i] * alpha + one_alpha * d;
      a[i] = ai;
      avg = std::sqrt(vi + T(-1) * (ai * ai));
    } else {
      avg = std::sqrt(vi);
    }
    avg = avg + eps;
    if (has_mom) {
      T bi = b[i] * mom + d / avg;
      b[i] = bi;
      p[i] = p[i] + neg_lr * bi;
    } else {
      p[i] = p[i] + neg_lr * (d / avg);
    }
  }
}

// Adagrad: v sum of squared gradients; p -= clr g / (sqrt(v) + eps), clr = lr / bc1
// with bc1 = 1 + (t - 1) lr_decay (PyTorch 1.13's _single_tensor_adagrad)
template <typename T>
void adagrad(const OptimStep& s, Ptrs<T> x, int64_t n) {
  const T wd = T(s.weight_decay), eps = T(s.eps), neg_clr = T(-(s.lr / s.bias_correction1));
  const T sign = s.maximize ? T(-1) : T(1);
  const bool has_wd = s.weight_decay != 0;
  T* __restrict p = x.p;
  const T* __restrict g = x.g;
  T* __restrict v = x.s1;
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) {
    T d = sign * g[i];
    if (has_wd) d = d + wd * p[i];
    T vi = v[i] + d * d;
    v[i] = vi;
    p[i] = p[i] + neg_clr * (d / (std::sqrt(vi) + eps));
  }
}

template <typename T>
void run(const OptimStep& s, Ptrs<T> x, int64_t n) {
  switch (s.kind) {
    case OptimStep::sgd: sgd(s, x, n); break;
    case OptimStep::adam:
    case OptimStep::adamw: adam(s, x, n); break;
    case OptimStep::adamax: adamax(s, x, n); break;
    case OptimStep::rmsprop: rmsprop(s, x, n); break;
    case OptimStep::adagrad: adagrad(s, x, n); break;
  }
}

// Subnormal inputs and results flushed to zero for the duration of a step (MXCSR
// FTZ + DAZ on each thread, restored after). Adam's second moment of a gradient below
// ~1e-19 is subnormal ((1 - b2) g^2 < 1.2e-38), and x86 takes a microcode assist of
// ~100 cycles per subnormal operand: on W8 (20000-way softmax, where most output
// gradients are tiny) the step grew from 22 ms to 220 ms within 16 steps. Flushing
// changes no parameter: a subnormal m or v moves p by at most lr * 1e-30 / eps.
// (Set inside the step's own parallel region: FlushSubnormalsGuard would add two.)
struct FlushSubnormals {
#ifdef __SSE2__
  unsigned saved = _mm_getcsr();
  bool on = flush_subnormals();
  FlushSubnormals() {
    if (on) _mm_setcsr(saved | 0x8040);
  }
  ~FlushSubnormals() {
    if (on) _mm_setcsr(saved);
  }
#endif
};

template <typename T>
T* at(const std::vector<Tensor>& v, size_t i, int64_t offset) {
  return v.empty() ? nullptr : static_cast<T*>(v[i].data_ptr()) + offset;
}

}  // namespace

namespace {
// Rounded copies cost 2 bytes more per parameter, against a 4 + 2 byte conversion
// pass in the next forward. Adam's vector loop writes them as it writes p; the other
// kinds convert a block at a time right after the block's update, the new values
// still in L1 or L2.
constexpr int64_t kRoundBlock = 4096;
#ifdef REEL_ADAM_ROUNDS
constexpr bool kFusedAdamRounding = true;
#else
constexpr bool kFusedAdamRounding = false;
#endif

// round_span's streamed stores complete before the copies are read
void fence_streamed_stores() {
#ifdef __SSE2__
  _mm_sfence();
#endif
}

// optim_step's pass; `rounded` as optim_step_rounded's, or null.
void step_pass(const OptimStep& step, const std::vector<Tensor>& params, const std::vector<Tensor>& grads,
               const std::vector<Tensor>& state1, const std::vector<Tensor>& state2,
               const std::vector<Tensor>& state3, const std::vector<Tensor>* rounded) {
  // Everything is checked here, outside the parallel region (an exception must not cross it).
  size_t n = params.size();
  bool need1 = optim_uses_state(step, 0), need2 = optim_uses_state(step, 1), need3 = optim_uses_state(step, 2);
  auto check_list = [&](const std::vector<Tensor>& v, bool needed, const char* what) {
    if (needed ? v.size() != n : !v.empty() && v.size() != n)
      throw Error(fmt::format("optim_step: {} has {} tensors for {} parameters", what, v.size(), n));
  };
  check_list(grads, true, "grads");
  check_list(state1, need1, "state1");
  check_list(state2, need2, "state2");
  check_list(state3, need3, "state3");
  std::vector<int64_t> starts(n + 1, 0);  // parameter i holds elements [starts[i], starts[i + 1]) of the step
  for (size_t i = 0; i < n; ++i) {
    const Tensor& p = params[i];
    if (p.dtype() != DType::f32 && p.dtype() != DType::f64)
      throw Error(fmt::format("optim_step: parameter {} is {}, expected f32 or f64", i, dtype_name(p.dtype())));
    for (const std::vector<Tensor>* v : {&grads, &state1, &state2, &state3}) {
      if (v->empty()) continue;
      const Tensor& t = (*v)[i];
      if (!t.defined() || !(t.shape() == p.shape()) || t.dtype() != p.dtype() || !t.is_contiguous() ||
          !t.device().is_cpu())
        throw Error(fmt::format("optim_step: a gradient or state tensor of parameter {} does not match it ({})", i,
                                p.shape().str()));
    }
    if (!p.is_contiguous()) throw Error(fmt::format("optim_step: parameter {} is not contiguous", i));
    if (rounded && (*rounded)[i].defined()) {
      const Tensor& r = (*rounded)[i];
      if (p.dtype() != DType::f32 || (r.dtype() != DType::bf16 && r.dtype() != DType::f16) ||
          !(r.shape() == p.shape()) || !r.is_contiguous() || !r.device().is_cpu())
        throw Error(fmt::format("optim_step_rounded: the rounded copy of parameter {} ({} {}) must be a contiguous "
                                "f16/bf16 CPU tensor of an f32 parameter's shape, got {} {}",
                                i, p.shape().str(), dtype_name(p.dtype()), r.shape().str(), dtype_name(r.dtype())));
    }
    starts[i + 1] = starts[i] + p.numel();
  }
  const int64_t total = starts[n];
  // Elements [begin, end) of the step, across parameter boundaries.
  auto range = [&](int64_t begin, int64_t end) {
    size_t i = size_t(std::upper_bound(starts.begin(), starts.end(), begin) - starts.begin()) - 1;
    for (; begin < end && i < n; ++i) {
      int64_t lo = begin - starts[i], hi = std::min(end, starts[i + 1]) - starts[i];
      if (hi <= lo) continue;
      if (rounded && (*rounded)[i].defined()) {
        const Tensor& r = (*rounded)[i];
        auto* out = static_cast<uint16_t*>(r.data_ptr());
        bool stream = r.numel() * 2 >= kStreamingStoreBytes;
        if (kFusedAdamRounding && (step.kind == OptimStep::adam || step.kind == OptimStep::adamw)) {
          adam<float>(step, {at<float>(params, i, lo), at<float>(grads, i, lo), at<float>(state1, i, lo),
                             at<float>(state2, i, lo), at<float>(state3, i, lo)}, hi - lo, {out + lo, r.dtype()});
          begin = starts[i + 1];
          continue;
        }
        for (int64_t b = lo; b < hi; b += kRoundBlock) {
          int64_t e = std::min(hi, b + kRoundBlock);
          run<float>(step, {at<float>(params, i, b), at<float>(grads, i, b), at<float>(state1, i, b),
                            at<float>(state2, i, b), at<float>(state3, i, b)}, e - b);
          round_span(r.dtype(), out + b, at<float>(params, i, b), e - b, stream);
        }
      } else if (params[i].dtype() == DType::f32)
        run<float>(step, {at<float>(params, i, lo), at<float>(grads, i, lo), at<float>(state1, i, lo),
                          at<float>(state2, i, lo), at<float>(state3, i, lo)}, hi - lo);
      else
        run<double>(step, {at<double>(params, i, lo), at<double>(grads, i, lo), at<double>(state1, i, lo),
                           at<double>(state2, i, lo), at<double>(state3, i, lo)}, hi - lo);
      begin = starts[i + 1];
    }
  };
  // Every thread takes an equal share of all the elements, cut at multiples of 16. (Cutting
  // into fixed chunks dealt out in turn gave W1's first thread 90% of the step: its
  // 100K-element weight is 6 of the 12 chunks.)
  if (total >= kParallelGrain) {
#pragma omp parallel
    {
      FlushSubnormals flush;
      int64_t t = omp_get_thread_num(), nt = omp_get_num_threads();
      auto cut = [&](int64_t k) { return k == nt ? total : total * k / nt / 16 * 16; };
      range(cut(t), cut(t + 1));
      if (rounded) fence_streamed_stores();
    }
  } else {
    FlushSubnormals flush;
    range(0, total);
    if (rounded) fence_streamed_stores();
  }
}
}  // namespace

void CpuBackend::optim_step(const OptimStep& step, const std::vector<Tensor>& params, const std::vector<Tensor>& grads,
                            const std::vector<Tensor>& state1, const std::vector<Tensor>& state2,
                            const std::vector<Tensor>& state3) {
  step_pass(step, params, grads, state1, state2, state3, nullptr);
}

bool CpuBackend::optim_step_rounded(const OptimStep& step, const std::vector<Tensor>& params,
                                    const std::vector<Tensor>& grads, const std::vector<Tensor>& state1,
                                    const std::vector<Tensor>& state2, const std::vector<Tensor>& state3,
                                    const std::vector<Tensor>& rounded) {
  if (rounded.size() != params.size())
    throw Error(fmt::format("optim_step_rounded: {} rounded copies for {} parameters", rounded.size(), params.size()));
  step_pass(step, params, grads, state1, state2, state3, &rounded);
  return true;
}

}  // namespace reel::cpu
