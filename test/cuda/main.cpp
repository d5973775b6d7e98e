// reel_cuda_tests: every op on the GPU against the CPU. Exits 77 (ctest: skipped)
// when no GPU can run them, saying why.
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>
#include <reel/cuda/cuda.h>

#include <cstdio>

int main(int argc, char** argv) {
  if (!reel::cuda::is_available()) {
    std::printf("SKIPPED: no CUDA device (%s)\n", reel::cuda::unavailable_reason().c_str());
    return 77;
  }
  std::printf("reel_cuda_tests on cuda:0: %s (%d device(s))\n", reel::cuda::device_name(0).c_str(),
              reel::cuda::device_count());
  return Catch::Session().run(argc, argv);
}
