// What the machine can do, measured by probes that use none of reel's ops: memory
// bandwidth from STREAM's copy, scale, add and triad (the best of regular and
// non-temporal stores, all the pool's threads, arrays far past the last-level cache) and
// dense peak FLOP/s per dtype from the best of oneDNN's matmul kernels (f32; bf16 where the
// CPU multiplies bf16 natively). Measured once per machine and cached in a small file in
// the user's cache directory ($XDG_CACHE_HOME/reel or ~/.cache/reel), keyed by the CPU
// model (or GPU name), the thread count, oneDNN's ISA cap and reel's version. Every
// "% of peak" of reel::bench and every floor in bench/RESULTS.md is against this probe.
//
//   reel::bench::MachinePeak peak = reel::bench::machine_peak();   // ~3 s the first time
//   std::cout << peak.str();  // "Intel Xeon ... 2 threads: 41.3 GB/s (triad, nt), f32 190 GFLOP/s, ..."
//   double floor_s = bytes / (peak.bandwidth_gbs * 1e9);
#pragma once
#include <string>

#include "../tensor/tensor.h"

namespace reel::bench {

struct PeakOptions {
  bool refresh = false;     // measure again even when a cached result exists (and rewrite it)
  bool use_cache = true;    // false: neither read nor write the cache file
  std::string cache_dir{};    // "" : $XDG_CACHE_HOME/reel, else $HOME/.cache/reel
  int threads = 0;          // 0: the pool's current count
  int64_t stream_bytes = 0; // bytes per STREAM array; 0: 4x the last-level cache, at least 64 MiB
  int64_t gemm_size = 0;    // square GEMM size; 0: the best of 1024 and 2048
  double seconds = 0.25;    // measured time per kernel and store kind (best run kept)
};

struct MachinePeak {
  std::string key{};          // what the cache entry is keyed by
  std::string device = "cpu";
  std::string model{};        // "Intel(R) Xeon(R) Platinum 8488C", or the GPU's name
  std::string flags{};        // "avx512f avx512_bf16 amx_bf16" (those that matter for the products)
  std::string library{};      // "reel 0.1.0, oneDNN 2.6.0"
  int threads = 0;
  // memory bandwidth, GB/s (1e9 bytes), STREAM's counting (no write-allocate traffic)
  double bandwidth_gbs = 0;  // the best of the kernels: the floor for memory-bound work
  std::string bandwidth_kernel{};  // which one set it: "triad, non-temporal stores"
  double copy_gbs = 0, scale_gbs = 0, add_gbs = 0, triad_gbs = 0;  // each the best of both store kinds
  double inplace_add_gbs = 0;  // c[i] += b[i], regular stores: the floor's own form of a += b
  // a read-only sum (the best of 1 or 4 streams a thread, plain and prefetched): a reduction's floor. Not in
  // bandwidth_gbs: STREAM's kernels also write, and a core's reads alone may reach less
  double read_gbs = 0;
  double f32_gflops = 0;   // dense f32 products
  double bf16_gflops = 0;  // bf16 products with f32 accumulation; 0 where the CPU has no native bf16
  std::string probe{};       // how it was measured ("STREAM 3 x 256 MiB, ...; oneDNN matmul 2048^3 ...")
  std::string source{};      // "measured now" or "cache <path> (measured <date>)"

  double gflops(DType dt) const;  // the peak for products in `dt` (f16/bf16: bf16's, else f32's)
  // Arithmetic intensity (FLOP per byte) where memory and compute bounds meet.
  double ridge(DType dt = DType::f32) const;
  std::string str() const;  // two lines: what the machine is, what it reached
};

// The machine's peak for `device` (the CPU, or a CUDA device, whose probe is reel's own
// copy and matmul on that device: no probe apart from reel exists there). Cached as
// described above; a cache file that cannot be read or written is ignored (measured
// again) rather than an error.
MachinePeak machine_peak(Device device = kCPU, PeakOptions opt = {});
// The cache file machine_peak() reads and writes for these options.
std::string peak_cache_path(Device device = kCPU, const PeakOptions& opt = {});

}  // namespace reel::bench
