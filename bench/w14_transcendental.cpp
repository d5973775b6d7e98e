// W14: transcendental elementwise ops on 4M f32 (4 * 2^20) elements: exp, log, tanh,
// sigmoid, gelu (exact and tanh), erf, softplus, silu. For each, ms per forward call
// (under no-grad: read x, write y) and ms per backward call (autograd::grad of a recorded
// forward with an incoming gradient g: read g and x or y, write the input's gradient).
// Inputs: x uniform in [-6, 6] (log: [1e-3, 10]), g standard normal, as the peers.
//
// Floors, measured in the same run (the working set, 32-48 MiB, streams through memory on
// a 2-core VM rather than sitting in a core's share of L3): the fastest of two plain OpenMP
// loops per traffic pattern. Forward: read one 4M-float buffer, write another (y = 2x:
// 8 B/element); backward: read two, write one (12 B/element). Each loop runs once with
// ordinary stores and once with streaming stores and inputs prefetched 2 KiB ahead (what
// reel's kernels do), and the floor of a repetition is the faster of the two: on the Xeon
// of bench/RESULTS.md the second is ~15% faster, and as fast as memcpy. Reports each op's
// time over the floor of its traffic (target <= 1.5), and the same at the machine probe's
// bandwidth (reel::bench::machine_peak: STREAM on arrays far past the L3, cached per
// machine; "machine_floor_ms", "machine_over_floor" and "probe_*" in the JSON), which
// is the bandwidth every other floor in bench/RESULTS.md is stated against.
#include <immintrin.h>
#include <omp.h>

#include "floors.h"

namespace {

// The bandwidth probes: as plain as a memory-bound loop gets, AVX2 like reel's baseline
// loops (reel builds for x86-64-v3), on the same OpenMP pool.
__attribute__((target("avx2"))) void probe_fwd(float* y, const float* x, int64_t n) {
#pragma omp parallel for simd schedule(static)
  for (int64_t i = 0; i < n; ++i) y[i] = 2.0f * x[i];
}
__attribute__((target("avx2"))) void probe_bwd(float* y, const float* g, const float* x, int64_t n) {
#pragma omp parallel for simd schedule(static)
  for (int64_t i = 0; i < n; ++i) y[i] = g[i] * x[i];
}
// The same with streaming stores and prefetched inputs (y 32-byte aligned, as the probes'
// buffers are); g == nullptr: y = 2x
__attribute__((target("avx2"))) void probe_streaming(float* y, const float* g, const float* x, int64_t n) {
#pragma omp parallel
  {
    const int64_t threads = omp_get_num_threads(), t = omp_get_thread_num();
    const int64_t per = (n / threads) & ~int64_t(7), lo = t * per, hi = t == threads - 1 ? n : lo + per;
    int64_t i = lo;
    for (; i + 8 <= hi; i += 8) {
      if ((i & 15) == 0) {  // an address 2 KiB ahead, never dereferenced
        _mm_prefetch(reinterpret_cast<const char*>(reinterpret_cast<uintptr_t>(x + i) + 2048), _MM_HINT_T0);
        if (g) _mm_prefetch(reinterpret_cast<const char*>(reinterpret_cast<uintptr_t>(g + i) + 2048), _MM_HINT_T0);
      }
      __m256 v = _mm256_loadu_ps(x + i);
      _mm256_stream_ps(y + i, g ? _mm256_mul_ps(_mm256_loadu_ps(g + i), v) : _mm256_add_ps(v, v));
    }
    for (; i < hi; ++i) y[i] = g ? g[i] * x[i] : 2.0f * x[i];
    _mm_sfence();
  }
}

}  // namespace

int main(int argc, char** argv) {
  using namespace reel;
  ::bench::Args args = ::bench::parse_args(argc, argv);
  ::bench::Target t = ::bench::setup(args);
  const int64_t n = args.get("--numel", int64_t(4) << 20), calls = args.get("--steps", 10);
  manual_seed(1);
  Tensor x = (rand({n}, {.device = t.device}) * 12.0 - 6.0).detach();
  Tensor xpos = (rand({n}, {.device = t.device}) * 10.0 + 1e-3).detach();
  Tensor g = randn({n}, {.device = t.device});
  struct Op {
    const char* name;
    Tensor (*f)(const Tensor&);
  };
  const Op ops[] = {
      {"exp", [](const Tensor& v) { return exp(v); }},
      {"log", [](const Tensor& v) { return log(v); }},
      {"tanh", [](const Tensor& v) { return tanh(v); }},
      {"sigmoid", [](const Tensor& v) { return sigmoid(v); }},
      {"gelu", [](const Tensor& v) { return gelu(v); }},
      {"gelu_tanh", [](const Tensor& v) { return gelu(v, "tanh"); }},
      {"erf", [](const Tensor& v) { return erf(v); }},
      {"softplus", [](const Tensor& v) { return softplus(v); }},
      {"silu", [](const Tensor& v) { return silu(v); }},
  };
  constexpr size_t kOps = sizeof ops / sizeof ops[0];
  std::vector<double> fwd[kOps], bwd[kOps], cached[kOps], floor_fwd, floor_bwd;

  auto forward_ms = [&](const Op& op, const Tensor& in) {
    NoGradGuard ng;
    t.sync();
    double t0 = ::bench::now_s();
    for (int64_t i = 0; i < calls; ++i) (void)op.f(in);
    t.sync();
    return 1e3 * (::bench::now_s() - t0) / double(calls);
  };
  auto backward_ms = [&](const Op& op, const Tensor& in) {
    Tensor leaf = in.detach().requires_grad_();
    double total = 0;
    for (int64_t i = 0; i < calls; ++i) {
      Tensor y = op.f(leaf);
      t.sync();
      double t0 = ::bench::now_s();
      (void)autograd::grad({y}, {leaf}, {g});
      t.sync();
      total += ::bench::now_s() - t0;
    }
    return 1e3 * total / double(calls);
  };
  Tensor out = empty({n}, {.device = t.device});
  auto probe_ms = [&](bool backward) {
    if (t.device.is_cuda()) return 0.0;  // CPU floors only
    float* y = out.data<float>();
    const float* gp = backward ? g.data<float>() : nullptr;
    auto loop = [&](bool streaming) {
      if (streaming) probe_streaming(y, gp, x.data<float>(), n);
      else if (backward) probe_bwd(y, gp, x.data<float>(), n);
      else probe_fwd(y, x.data<float>(), n);
    };
    double best = 1e300;
    for (bool streaming : {true, false}) {
      loop(streaming);  // untimed: the caches as this loop leaves them
      double t0 = ::bench::now_s();
      for (int64_t i = 0; i < calls; ++i) loop(streaming);
      best = std::min(best, ::bench::now_s() - t0);
    }
    return 1e3 * best / double(calls);
  };
  // The same element count from cache: n / m calls on the first m = 128K elements (512 KiB in,
  // 512 KiB out: each core's half within its 2 MiB L2). Where this takes as long as the
  // streaming call, the op is bound by its instructions, not by memory, and no memory
  // tuning reaches the bandwidth floor ("from_cache_ms" in the JSON).
  const int64_t m = std::min<int64_t>(n, 131072);
  auto from_cache_ms = [&](const Op& op, const Tensor& in) {
    NoGradGuard ng;
    Tensor part = in.narrow(0, 0, m);
    (void)op.f(part);
    t.sync();
    double t0 = ::bench::now_s();
    for (int64_t i = 0; i < n / m; ++i) (void)op.f(part);
    t.sync();
    return 1e3 * (::bench::now_s() - t0) * double(n) / double(n / m * m);
  };
  for (size_t k = 0; k < kOps; ++k) {  // warm-up: every op once, both ways
    const Tensor& in = std::string(ops[k].name) == "log" ? xpos : x;
    forward_ms(ops[k], in);
    backward_ms(ops[k], in);
  }
  probe_ms(false);
  probe_ms(true);
  for (int rep = 0; rep < args.reps; ++rep) {
    floor_fwd.push_back(probe_ms(false));
    floor_bwd.push_back(probe_ms(true));
    for (size_t k = 0; k < kOps; ++k) {
      const Tensor& in = std::string(ops[k].name) == "log" ? xpos : x;
      fwd[k].push_back(forward_ms(ops[k], in));
      bwd[k].push_back(backward_ms(ops[k], in));
      if (!t.device.is_cuda()) cached[k].push_back(from_cache_ms(ops[k], in));
    }
  }

  const char* dev = t.name.c_str();
  double ff = ::bench::stats_of(floor_fwd).median, fb = ::bench::stats_of(floor_bwd).median;
  if (!t.device.is_cuda()) {
    char s[200];
    std::snprintf(s, sizeof s, "\"gbs\": %.2f", 8.0 * double(n) / (ff * 1e-3) / 1e9);
    ::bench::report(args, "W14", "reel", dev, "floor_fwd_ms", floor_fwd, s);
    std::snprintf(s, sizeof s, "\"gbs\": %.2f", 12.0 * double(n) / (fb * 1e-3) / 1e9);
    ::bench::report(args, "W14", "reel", dev, "floor_bwd_ms", floor_bwd, s);
  }
  for (size_t k = 0; k < kOps; ++k) {
    for (int way = 0; way < 2; ++way) {
      std::string metric = std::string(ops[k].name) + (way ? "_bwd_ms" : "_fwd_ms");
      const std::vector<double>& v = way ? bwd[k] : fwd[k];
      std::string extra = t.extra;
      if (!t.device.is_cuda()) {
        const reel::bench::MachinePeak& peak = ::bench::machine(t);
        const double machine_floor = (way ? 12.0 : 8.0) * double(n) / (peak.bandwidth_gbs * 1e6);
        char s[480];
        std::snprintf(s, sizeof s,
                      "\"floor_ms\": %.4g, \"over_floor\": %.3f, \"machine_floor_ms\": %.4g, "
                      "\"machine_over_floor\": %.3f, %s",
                      way ? fb : ff, ::bench::stats_of(v).median / (way ? fb : ff), machine_floor,
                      ::bench::stats_of(v).median / machine_floor, ::bench::probe_fields(peak).c_str());
        extra = s;
      }
      ::bench::report(args, "W14", "reel", dev, metric.c_str(), v, extra);
    }
    if (!t.device.is_cuda()) {
      char s[96];
      std::snprintf(s, sizeof s, "\"cache_over_stream\": %.3f, \"elements\": %lld",
                    ::bench::stats_of(cached[k]).median / ::bench::stats_of(fwd[k]).median, (long long)m);
      ::bench::report(args, "W14", "reel", dev, (std::string(ops[k].name) + "_fwd_from_cache_ms").c_str(), cached[k], s);
    }
  }
  return 0;
}
