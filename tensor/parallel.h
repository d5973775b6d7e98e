// The CPU's worker threads and floating-point environment, as users set them.
//
//   reel::set_num_threads(2);          // the one pool that reel's loops and oneDNN share, fixed
//   reel::set_flush_subnormals(false); // IEEE gradual underflow everywhere (slower)
//   reel::set_conv_algorithm(reel::ConvAlgorithm::direct);  // no Winograd convolutions
#pragma once

namespace reel {

// Threads of the one OpenMP pool that reel's loops and oneDNN share.
//
// By default the count follows the machine's load: every quarter second reel measures
// how much of its cores other processes used (/proc/stat) and runs its ops on the cores
// they leave, all of them on an idle machine. A team that waits at each op's end for a
// thread the scheduler parked behind another job runs slower than one thread alone: with
// one busy process beside it on 2 cores, a GRU epoch took 4.3x its idle time on 2 fixed
// threads. A count someone chose is kept exactly: set_num_threads(n), OMP_NUM_THREADS=n
// at start (and omp_set_num_threads(n) called between reel's ops).
//
// Results are the same for the same thread count; reductions split by thread round
// differently for another count, so a run whose count changed (a busy machine) can
// differ from an idle run in the last bits. Fix the count for bit-exact reruns.
void set_num_threads(int n);  // the calling thread's later ops run on exactly n threads
int num_threads();            // the threads the calling thread's next op runs on
// Back to following the load (on), or keep the current count (off). Per thread.
void set_threads_follow_load(bool on);
bool threads_follow_load();

// Subnormal floats (|x| < 1.2e-38 in f32) flushed to zero during backward passes and
// optimizer steps, on the calling thread and the pool's threads. On by default: x86
// takes a ~100-cycle microcode assist per subnormal operand, and a classifier over
// many classes feeds its weight-gradient GEMMs tiny products (W8's backward ran 3x
// slower). A flushed value moves no parameter by more than rounding. Turn it off
// for IEEE gradual underflow.
void set_flush_subnormals(bool on);
bool flush_subnormals();

// How CPU convolutions choose their algorithm. `fastest` (the default) lets oneDNN
// choose, and it takes Winograd F(4x4, 3x3) for 3x3 stride-1 convolutions where that is
// faster (a VGG-style CIFAR-10 training step 184 -> 123 ms on 2 Zen 4 cores): its
// transforms round differently from the direct sums, about 1e-5 relative in f32, as
// cuDNN's Winograd algorithms do on GPUs. `direct` always sums the products as written
// (PyTorch's CPU convolutions do). For convolutions planned afterwards, on every thread;
// CUDA convolutions take cuDNN's fastest algorithm either way.
enum class ConvAlgorithm { fastest, direct };
void set_conv_algorithm(ConvAlgorithm algorithm);
ConvAlgorithm conv_algorithm();

// The widest vectors of reel's own CPU math kernels (exp, log, tanh, sigmoid, gelu, erf,
// softplus, silu): `avx512` (the default where the CPU has AVX-512) or `baseline`, the
// ISA the library was built for (AVX2 with the default x86-64-v3). Results agree to the
// last few ulp either way; for testing both paths and for comparing them. Process-wide.
enum class VectorIsa { baseline, avx512 };
void set_vector_isa(VectorIsa isa);  // avx512 on a CPU without it gives baseline
VectorIsa vector_isa();

// Flushes subnormals on this thread and the pool's threads until destroyed, when
// flush_subnormals() is on (x86 MXCSR FTZ and DAZ); a no-op elsewhere or when nested.
class FlushSubnormalsGuard {
 public:
  FlushSubnormalsGuard();
  ~FlushSubnormalsGuard();
  FlushSubnormalsGuard(const FlushSubnormalsGuard&) = delete;
  FlushSubnormalsGuard& operator=(const FlushSubnormalsGuard&) = delete;

 private:
  bool active_ = false;
};

}  // namespace reel
