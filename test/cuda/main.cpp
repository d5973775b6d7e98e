// reel_cuda_tests: every op on the GPU against the CPU. Exits 77 (ctest: skipped)
// when no GPU can run them, saying why, except where a GPU is expected: with
// REEL_CUDA_REQUIRED=1 (scripts/gpu-check.sh sets it), or when a driver is there but too
// old for the runtime (context.cpp's probe says "CUDA driver too old"), the tests fail.
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>
#include <reel/cuda/cuda.h>

#include <cstdio>
#include <cstdlib>
#include <string>

int main(int argc, char** argv) {
  std::printf("versions: %s\n", reel::cuda::library_versions().c_str());
  if (!reel::cuda::is_available()) {
    std::string reason = reel::cuda::unavailable_reason();
    const char* required = std::getenv("REEL_CUDA_REQUIRED");
    if ((required && std::string(required) == "1") || reason.find("CUDA driver too old") != std::string::npos) {
      std::printf("FAILED: a GPU is expected here, but %s\n", reason.c_str());
      return 1;
    }
    std::printf("SKIPPED: no CUDA device (%s)\n", reason.c_str());
    return 77;
  }
  std::printf("reel_cuda_tests on cuda:0: %s (%d device(s))\n", reel::cuda::device_name(0).c_str(),
              reel::cuda::device_count());
  return Catch::Session().run(argc, argv);
}
