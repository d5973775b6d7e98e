// W2: W1's MLP written as convolutions: Conv2d(1,128,k=28)-ReLU-Conv2d(128,64,1)-
// ReLU-Conv2d(64,10,1)-Flatten on N x 1 x 28 x 28, the same training as W1. The
// whole-input and 1x1 kernels lower to GEMMs, so W2 should cost what W1 costs.
#include "reel_bench.h"

int main(int argc, char** argv) {
  using namespace reel;
  auto make = [] {
    return nn::Sequential{nn::Conv2d(1, 128, 28), nn::ReLU(), nn::Conv2d(128, 64, 1), nn::ReLU(),
                          nn::Conv2d(64, 10, 1), nn::Flatten()};
  };
  return bench::run_fashion(argc, argv, "W2", make, 128, 0.1, 3);
}
