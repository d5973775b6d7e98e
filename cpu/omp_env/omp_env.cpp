// libreel_omp_env.so: sets libgomp's spin count before libgomp reads its environment.
//
// libgomp reads OMP_WAIT_POLICY and GOMP_SPINCOUNT once, in its own initialiser, so
// libreel's initialisers run too late to change how idle pool threads wait. This
// library has no dependency but libc and is the last entry of libreel's DT_NEEDED
// (after libgomp): the loader initialises later-loaded objects first, so it runs
// before libgomp's initialiser (checked by the omp_wait_policy ctest).
//
// Why 10000 spins (about 0.1 ms) instead of libgomp's 300000: on a quiet machine the
// pool's threads still catch the next op of a training step while spinning (W1 epoch
// the same within 2%), and on a loaded one they give their core back 30x sooner. With
// libgomp's default a 2-thread W1 epoch took 2.2 s next to four busy processes on 2
// cores, 0.74 s with 10000 and 1.4 s with OMP_WAIT_POLICY=passive (0.20 s quiet).
// A user's own OMP_WAIT_POLICY or GOMP_SPINCOUNT is left alone.
#include <cstdlib>

extern "C" {

int reel_omp_env_spincount_set = 0;  // whether this library set GOMP_SPINCOUNT

__attribute__((constructor)) static void reel_omp_env_init() {
  if (std::getenv("OMP_WAIT_POLICY") || std::getenv("GOMP_SPINCOUNT")) return;
  reel_omp_env_spincount_set = setenv("GOMP_SPINCOUNT", "10000", 0) == 0;
}
}
