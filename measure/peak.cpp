// The machine's peak (measure/peak.h): STREAM kernels written here (OpenMP on the pool
// reel and oneDNN share) and oneDNN's matmul called directly, so that no figure depends on
// how fast reel's own elementwise loops or GEMM calls are.
#include "peak.h"

#include <fmt/format.h>
#include <omp.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <sstream>
#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "../autograd/ops.h"
#include "../cpu/dnnl_common.h"
#include "../cpu/isa.h"
#include "../cuda/cuda.h"
#include "../debug/internal/frames.h"
#include "../tensor/atomic_file.h"
#include "../tensor/parallel.h"
#include "timer.h"

#ifndef REEL_VERSION_STRING
#define REEL_VERSION_STRING "unknown"
#endif

namespace reel::bench {
namespace {

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

std::string cpu_model() {
  std::ifstream f("/proc/cpuinfo");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind("model name", 0) == 0) {
      size_t c = line.find(':');
      std::string m = c == std::string::npos ? line : line.substr(c + 1);
      while (!m.empty() && m.front() == ' ') m.erase(0, 1);
      return m;
    }
  return "unknown CPU";
}

// The CPU flags that decide the products' speed (and with them bf16's story).
std::string product_flags() {
  std::ifstream f("/proc/cpuinfo");
  std::string line, out;
  while (std::getline(f, line))
    if (line.rfind("flags", 0) == 0) {
      std::istringstream in(line.substr(line.find(':') + 1));
      std::string flag;
      while (in >> flag)
        if (flag == "avx2" || flag == "fma" || flag == "avx512f" || flag == "avx512_bf16" ||
            flag == "avx512_fp16" || flag.rfind("amx_", 0) == 0)
          out += (out.empty() ? "" : " ") + flag;
      break;
    }
  return out;
}

int64_t last_level_cache_bytes() {
  long l3 = sysconf(_SC_LEVEL3_CACHE_SIZE);
  if (l3 <= 0) l3 = sysconf(_SC_LEVEL2_CACHE_SIZE);
  return l3 > 0 ? int64_t(l3) : int64_t(32) << 20;
}

std::string library_string() {
  const dnnl_version_t* v = dnnl_version();
  return fmt::format("reel {}, oneDNN {}.{}.{}", REEL_VERSION_STRING, v->major, v->minor, v->patch);
}

// ---- STREAM: four kernels, each with regular and with non-temporal stores

struct Aligned {
  float* p = nullptr;
  explicit Aligned(int64_t n) {
    p = static_cast<float*>(std::aligned_alloc(64, size_t((n * 4 + 63) / 64 * 64)));
    if (!p) throw Error(fmt::format("bench::machine_peak: cannot allocate {} MiB for the bandwidth probe", n * 4 >> 20));
  }
  ~Aligned() { std::free(p); }
  Aligned(const Aligned&) = delete;
  Aligned& operator=(const Aligned&) = delete;
};

// dst[i] = x * a[i] + y * b[i] over the thread's slice: copy (x 1, no b), scale (x s), add
// (x 1, y 1), triad (x s, y 1): memory-bound by construction (2-3 streams, 0-2 flops each).
// `nt` streams the stores past the cache (no read-for-ownership of dst).
void stream_kernel(float* dst, const float* a, const float* b, float x, float y, int64_t n, bool nt, int threads) {
#pragma omp parallel num_threads(threads)
  {
    const int t = omp_get_thread_num(), nth = omp_get_num_threads();
    // 16-float aligned slices, one per thread, as the first touch placed them
    const int64_t chunk = (n / nth + 15) / 16 * 16;
    const int64_t lo = std::min(n, chunk * t), hi = std::min(n, lo + chunk);
#if defined(__AVX__)
    if (nt) {
      const __m256 vx = _mm256_set1_ps(x), vy = _mm256_set1_ps(y);
      int64_t i = lo;
      for (; i + 8 <= hi; i += 8) {
        __m256 r = _mm256_mul_ps(vx, _mm256_load_ps(a + i));
        if (b) r = _mm256_add_ps(r, _mm256_mul_ps(vy, _mm256_load_ps(b + i)));
        _mm256_stream_ps(dst + i, r);
      }
      for (; i < hi; ++i) dst[i] = x * a[i] + (b ? y * b[i] : 0.f);
      _mm_sfence();
    } else
#endif
    {
      (void)nt;
      if (b) {
#pragma omp simd
        for (int64_t i = lo; i < hi; ++i) dst[i] = x * a[i] + y * b[i];
      } else {
#pragma omp simd
        for (int64_t i = lo; i < hi; ++i) dst[i] = x * a[i];
      }
    }
  }
}

// The sum of a over the thread's slice: read-only traffic, memory-bound by construction
// (32 independent lanes a stream, so the adds' latency never limits it). The slice is read
// as `streams` parts side by side (more misses in flight than one sequential walk), and
// `prefetch` asks for each part's line 16 KiB ahead into L2: a core's own misses (its fill
// buffers) cap a plain read below what the memory gives, and the L2 streamer stops at each
// 4 KiB page. The best of these forms is the floor.
void read_kernel(const float* a, int64_t n, int streams, bool prefetch, int threads, volatile float* sink) {
#pragma omp parallel num_threads(threads)
  {
    const int t = omp_get_thread_num(), nth = omp_get_num_threads();
    const int64_t chunk = (n / nth + 31) / 32 * 32;
    const int64_t lo = std::min(n, chunk * t), hi = std::min(n, lo + chunk);
    const int64_t part = (hi - lo) / streams / 32 * 32;
    float acc[4][32] = {};
    for (int64_t i = 0; i < part; i += 32)
      for (int st = 0; st < streams; ++st) {
        const float* p = a + lo + st * part + i;
        if (prefetch) {  // the address as an integer: a pointer formed past the array would be undefined
          const uintptr_t at = reinterpret_cast<uintptr_t>(p) + 16384;
          __builtin_prefetch(reinterpret_cast<const void*>(at), 0, 2);
          __builtin_prefetch(reinterpret_cast<const void*>(at + 64), 0, 2);
        }
#pragma omp simd
        for (int j = 0; j < 32; ++j) acc[st][j] += p[j];
      }
    float total = 0;
    for (int st = 0; st < streams; ++st)
      for (float v : acc[st]) total += v;
    for (int64_t i = lo + streams * part; i < hi; ++i) total += a[i];
    if (total == -1.f) *sink = total;  // never true (a holds 1s): keeps the loop
  }
}

struct StreamResult {
  double read = 0;  // a read-only sum: the floor of a reduction (not counted in `best`)
  double copy = 0, scale = 0, add = 0, triad = 0, inplace_add = 0, best = 0;
  std::string best_kernel;
};

StreamResult stream_probe(int64_t bytes, int threads, double seconds) {
  const int64_t n = bytes / 4;
  Aligned a(n), b(n), c(n);
  // first touch by the threads that will stream them (pages land near those cores)
#pragma omp parallel for num_threads(threads) schedule(static)
  for (int64_t i = 0; i < n; ++i) a.p[i] = 1.f, b.p[i] = 2.f, c.p[i] = 0.f;
  StreamResult r;
  volatile float sink = 0;
  struct Kernel {
    const char* name;
    double* out;
    std::function<void(bool)> run;  // bool: the variant (non-temporal stores; for a read, the prefetch)
    int streams;    // arrays touched: STREAM counts each once
    bool variant;   // also run with the variant on
    bool sets_best; // a candidate for bandwidth_gbs (the reads are not: see read_gbs)
  };
  const float s = 3.f;
  std::vector<Kernel> kernels = {
      {"copy", &r.copy, [&](bool nt) { stream_kernel(c.p, a.p, nullptr, 1.f, 0.f, n, nt, threads); }, 2, true, true},
      {"scale", &r.scale, [&](bool nt) { stream_kernel(b.p, c.p, nullptr, s, 0.f, n, nt, threads); }, 2, true, true},
      {"add", &r.add, [&](bool nt) { stream_kernel(c.p, a.p, b.p, 1.f, 1.f, n, nt, threads); }, 3, true, true},
      {"triad", &r.triad, [&](bool nt) { stream_kernel(a.p, c.p, b.p, s, 1.f, n, nt, threads); }, 3, true, true},
      // c += b: the in-place pattern (a += b, an optimizer's update); the output is a line
      // just read, so regular stores only (non-temporal ones would evict it to no gain)
      {"add in place", &r.inplace_add, [&](bool nt) { stream_kernel(c.p, c.p, b.p, 1.f, 1.f, n, nt, threads); }, 3,
       false, true},
      {"read", &r.read, [&](bool pf) { read_kernel(a.p, n, 1, pf, threads, &sink); }, 1, true, false},
      {"read, 4 streams", &r.read, [&](bool pf) { read_kernel(a.p, n, 4, pf, threads, &sink); }, 1, true, false},
  };
  for (const Kernel& k : kernels)
    for (bool variant : {false, true}) {
      if (variant && !k.variant) continue;
      k.run(variant);  // warm-up pass
      double best = 1e30, t_end = now_s() + seconds;
      for (int rep = 0; rep < 3 || now_s() < t_end; ++rep) {
        double t0 = now_s();
        k.run(variant);
        best = std::min(best, now_s() - t0);
        if (rep > 200) break;
      }
      double gbs = double(k.streams) * double(n) * 4.0 / best / 1e9;
      if (gbs > *k.out) *k.out = gbs;
      if (k.sets_best && gbs > r.best) {
        r.best = gbs;
        r.best_kernel = fmt::format("{}, {} stores", k.name, variant ? "non-temporal" : "regular");
      }
    }
  return r;
}

// ---- dense products: oneDNN's matmul on square matrices, the best of the weight layouts

double gemm_probe(int64_t size, dnnl::memory::data_type dt, int threads, double seconds) {
  using namespace dnnl;
  using tag = memory::format_tag;
  engine& eng = cpu::dnnl_engine();
  stream& strm = cpu::dnnl_stream();
  const memory::dims d = {size, size};
  const memory::data_type out_dt = dt == memory::data_type::bf16 ? memory::data_type::bf16 : memory::data_type::f32;
  double best_gflops = 0;
  for (tag wtag : {tag::ab, tag::any}) {
    memory::desc a_md(d, dt, tag::ab), b_md(d, dt, wtag), c_md(d, out_dt, tag::ab);
    dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a_md, b_md, c_md), eng);
    memory a(pd.src_desc(), eng), b(pd.weights_desc(), eng), c(pd.dst_desc(), eng);
    // values do not change the speed of a GEMM; zeros would let nothing special happen either,
    // but ones keep denormals and NaNs out of the question
    auto fill = [](memory& m) {
      const size_t bytes = m.get_desc().get_size();
      if (m.get_desc().data_type() == memory::data_type::f32) {
        float* p = static_cast<float*>(m.get_data_handle());
        std::fill(p, p + bytes / 4, 1.f);
      } else {
        uint16_t* p = static_cast<uint16_t*>(m.get_data_handle());
        std::fill(p, p + bytes / 2, uint16_t(0x3f80));  // bf16 1.0
      }
    };
    fill(a), fill(b);
    dnnl::matmul prim(pd);
    auto run = [&] {
      prim.execute(strm, {{DNNL_ARG_SRC, a}, {DNNL_ARG_WEIGHTS, b}, {DNNL_ARG_DST, c}});
      strm.wait();
    };
    (void)threads;  // oneDNN runs on the OpenMP pool at its current size (set by the caller)
    run();
    double best = 1e30, t_end = now_s() + seconds;
    for (int rep = 0; rep < 2 || now_s() < t_end; ++rep) {
      double t0 = now_s();
      run();
      best = std::min(best, now_s() - t0);
      if (rep > 100) break;
    }
    best_gflops = std::max(best_gflops, 2.0 * double(size) * double(size) * double(size) / best / 1e9);
  }
  return best_gflops;
}

// ---- the cache: one small file of "key value" lines per machine key

std::string cache_dir(const PeakOptions& opt) {
  if (!opt.cache_dir.empty()) return opt.cache_dir;
  if (const char* x = std::getenv("XDG_CACHE_HOME"); x && *x) return std::string(x) + "/reel";
  if (const char* h = std::getenv("HOME"); h && *h) return std::string(h) + "/.cache/reel";
  return "/tmp/reel-cache";
}

// What a cached result holds for: the machine, the library, the threads, oneDNN's ISA cap
// and the probe's sizes (a quick probe's figures never stand in for the full one's).
std::string machine_key(Device device, int threads, const PeakOptions& opt) {
  const char* cap = std::getenv("ONEDNN_MAX_CPU_ISA");
  std::string sizes = fmt::format("probe {} B {} GEMM", opt.stream_bytes, opt.gemm_size);
  if (device.is_cuda())
    return fmt::format("{} | {} | {} | {}", cuda::device_name(device.index), library_string(), cuda::library_versions(),
                       sizes);
  return fmt::format("{} | {} | {} threads | isa cap {} | {}", cpu_model(), library_string(), threads,
                     cap ? cap : "none", sizes);
}

std::string file_name(const std::string& key) {
  return fmt::format("machine-peak-{:016x}.txt", std::hash<std::string>{}(key));
}

void write_cache(const std::string& path, const MachinePeak& p) {
  std::time_t now = std::time(nullptr);
  char date[32];
  std::strftime(date, sizeof date, "%Y-%m-%d %H:%M UTC", std::gmtime(&now));
  std::string text = fmt::format(
      "key {}\ndevice {}\nmodel {}\nflags {}\nlibrary {}\nthreads {}\nbandwidth_gbs {}\ncopy_gbs {}\nscale_gbs {}\n"
      "add_gbs {}\ntriad_gbs {}\ninplace_add_gbs {}\nread_gbs {}\nbandwidth_kernel {}\nf32_gflops {}\nbf16_gflops {}\nprobe {}\nmeasured {}\n",
      p.key, p.device, p.model, p.flags, p.library, p.threads, p.bandwidth_gbs, p.copy_gbs, p.scale_gbs, p.add_gbs,
      p.triad_gbs, p.inplace_add_gbs, p.read_gbs, p.bandwidth_kernel, p.f32_gflops, p.bf16_gflops, p.probe, date);
  std::error_code ec;
  std::filesystem::create_directories(std::filesystem::path(path).parent_path(), ec);
  try {  // a cache that cannot be written is no error: the next call measures again
    write_file_atomically(path, text, "bench::machine_peak");
  } catch (const Error&) {
  }
}

bool read_cache(const std::string& path, const std::string& key, MachinePeak& p) {
  std::ifstream f(path);
  if (!f) return false;
  std::map<std::string, std::string> kv;
  std::string line;
  while (std::getline(f, line)) {
    size_t sp = line.find(' ');
    if (sp != std::string::npos) kv[line.substr(0, sp)] = line.substr(sp + 1);
  }
  if (kv["key"] != key) return false;  // another machine's (or version's) numbers: measure again
  try {
    p.key = key;
    p.device = kv["device"], p.model = kv["model"], p.flags = kv["flags"], p.library = kv["library"];
    p.threads = std::stoi(kv.at("threads"));
    p.bandwidth_gbs = std::stod(kv.at("bandwidth_gbs"));
    p.copy_gbs = std::stod(kv.at("copy_gbs")), p.scale_gbs = std::stod(kv.at("scale_gbs"));
    p.add_gbs = std::stod(kv.at("add_gbs")), p.triad_gbs = std::stod(kv.at("triad_gbs"));
    p.inplace_add_gbs = std::stod(kv.at("inplace_add_gbs"));  // absent from older files: measured again
    p.read_gbs = std::stod(kv.at("read_gbs"));
    p.bandwidth_kernel = kv["bandwidth_kernel"];
    p.f32_gflops = std::stod(kv.at("f32_gflops")), p.bf16_gflops = std::stod(kv.at("bf16_gflops"));
    p.probe = kv["probe"];
    p.source = fmt::format("cache {} (measured {})", path, kv["measured"]);
  } catch (const std::exception&) {
    return false;  // a damaged file: measure again
  }
  return p.bandwidth_gbs > 0 && p.f32_gflops > 0;
}

MachinePeak measure_cpu(const PeakOptions& opt, int threads) {
  MachinePeak p;
  p.device = "cpu";
  p.model = cpu_model();
  p.flags = product_flags();
  p.library = library_string();
  p.threads = threads;
  int64_t bytes = opt.stream_bytes;
  if (bytes <= 0) bytes = std::clamp<int64_t>(2 * last_level_cache_bytes(), int64_t(64) << 20, int64_t(512) << 20);
  StreamResult s = stream_probe(bytes, threads, opt.seconds);
  p.copy_gbs = s.copy, p.scale_gbs = s.scale, p.add_gbs = s.add, p.triad_gbs = s.triad;
  p.inplace_add_gbs = s.inplace_add;
  p.read_gbs = s.read;
  p.bandwidth_gbs = s.best;
  p.bandwidth_kernel = s.best_kernel;
  std::vector<int64_t> sizes = opt.gemm_size > 0 ? std::vector<int64_t>{opt.gemm_size} : std::vector<int64_t>{1024, 2048};
  for (int64_t n : sizes) p.f32_gflops = std::max(p.f32_gflops, gemm_probe(n, dnnl::memory::data_type::f32, threads, opt.seconds));
  if (cpu::bf16_products_native())
    for (int64_t n : sizes)
      p.bf16_gflops = std::max(p.bf16_gflops, gemm_probe(n, dnnl::memory::data_type::bf16, threads, opt.seconds));
  std::string sz;
  for (int64_t n : sizes) sz += (sz.empty() ? "" : ", ") + std::to_string(n) + "^3";
  p.probe = fmt::format("STREAM copy/scale/add/triad on 3 x {} MiB arrays (LLC {} MiB), regular and non-temporal "
                        "stores, add in place (regular stores) and a read-only sum (1 or 4 streams a thread, plain and prefetched), best run, {} threads; oneDNN matmul {} (plain and blocked weights), best run",
                        bytes >> 20, last_level_cache_bytes() >> 20, threads, sz);
  return p;
}

// A GPU: no probe apart from reel's kernels exists in this library, so the device's own
// copy (x.copy_(y), 2 x 1 GiB) and matmul (TF32 off) stand in; `probe` says so.
MachinePeak measure_cuda(Device device, const PeakOptions& opt) {
  MachinePeak p;
  p.device = device.str();
  p.model = cuda::device_name(device.index);
  p.library = library_string();
  const int64_t n = (opt.stream_bytes > 0 ? opt.stream_bytes : int64_t(1) << 30) / 4;
  Tensor x = zeros({n}, {.device = device}), y = ones({n}, {.device = device});
  auto time_best = [&](const std::function<void()>& f) {
    f();
    cuda::synchronize(device.index);
    double best = 1e30, t_end = now_s() + opt.seconds;
    for (int rep = 0; rep < 3 || now_s() < t_end; ++rep) {
      double t0 = now_s();
      f();
      cuda::synchronize(device.index);
      best = std::min(best, now_s() - t0);
      if (rep > 200) break;
    }
    return best;
  };
  double t = time_best([&] { x.copy_(y); });
  p.copy_gbs = p.bandwidth_gbs = 2.0 * double(n) * 4 / t / 1e9;
  p.bandwidth_kernel = "copy (reel's copy_ on the device)";
  const int64_t m = opt.gemm_size > 0 ? opt.gemm_size : 8192;
  bool tf32 = cuda::allow_tf32();
  cuda::set_allow_tf32(false);
  for (DType dt : {DType::f32, DType::bf16}) {
    Tensor a = ones({m, m}, {.dtype = dt, .device = device}), b = ones({m, m}, {.dtype = dt, .device = device});
    double tt = time_best([&] { (void)matmul(a, b); });
    (dt == DType::f32 ? p.f32_gflops : p.bf16_gflops) = 2.0 * double(m) * double(m) * double(m) / tt / 1e9;
  }
  cuda::set_allow_tf32(tf32);
  p.probe = fmt::format("reel's copy_ of {} MiB and matmul {}^3 (f32 with TF32 off, bf16) on the device, best run",
                        n * 4 >> 20, m);
  return p;
}

}  // namespace

double MachinePeak::gflops(DType dt) const {
  if ((dt == DType::bf16 || dt == DType::f16) && bf16_gflops > 0) return bf16_gflops;
  return f32_gflops;
}

double MachinePeak::ridge(DType dt) const { return bandwidth_gbs > 0 ? gflops(dt) / bandwidth_gbs : 0; }

std::string MachinePeak::str() const {
  std::string s = fmt::format("{} ({}), {} threads, {}\n", model, flags.empty() ? device : flags, threads, library);
  s += fmt::format("  memory {} GB/s ({}; copy {}, scale {}, add {}, triad {}, add in place {}; read alone {}), f32 {} GFLOP/s",
                   format_sig(bandwidth_gbs), bandwidth_kernel, format_sig(copy_gbs), format_sig(scale_gbs),
                   format_sig(add_gbs), format_sig(triad_gbs), format_sig(inplace_add_gbs), format_sig(read_gbs), format_sig(f32_gflops));
  s += bf16_gflops > 0 ? fmt::format(", bf16 {} GFLOP/s", format_sig(bf16_gflops)) : std::string(", no native bf16");
  s += "\n  source: " + source + "\n";
  return s;
}

std::string peak_cache_path(Device device, const PeakOptions& opt) {
  int threads = opt.threads > 0 ? opt.threads : num_threads();
  return cache_dir(opt) + "/" + file_name(machine_key(device, threads, opt));
}

MachinePeak machine_peak(Device device, PeakOptions opt) {
  if (opt.seconds <= 0) throw Error(fmt::format("bench::machine_peak: expected seconds > 0, got {}", opt.seconds));
  if (device.is_cuda() && !cuda::is_available())
    throw Error(fmt::format("bench::machine_peak: {} asked for, but {}", device.str(), cuda::unavailable_reason()));
  const int threads = opt.threads > 0 ? opt.threads : num_threads();
  const std::string key = machine_key(device, threads, opt);
  const std::string path = cache_dir(opt) + "/" + file_name(key);
  MachinePeak p;
  if (opt.use_cache && !opt.refresh && read_cache(path, key, p)) return p;
  // the pool held at `threads` while probing (oneDNN reads the count at each call)
  const bool follow = threads_follow_load();
  const int prev = num_threads();
  set_num_threads(threads);
  try {
    p = device.is_cuda() ? measure_cuda(device, opt) : measure_cpu(opt, threads);
  } catch (...) {
    follow ? set_threads_follow_load(true) : set_num_threads(prev);
    throw;
  }
  follow ? set_threads_follow_load(true) : set_num_threads(prev);
  p.threads = threads;
  p.key = key;
  p.source = "measured now";
  if (opt.use_cache) {
    write_cache(path, p);
    p.source = "measured now (cached in " + path + ")";
  }
  return p;
}

}  // namespace reel::bench
