// W2 in libtorch 1.13: the MLP as convolutions, as bench/w2_conv_mlp.cpp.
#include "torch_bench.h"

int main(int argc, char** argv) {
  namespace nn = torch::nn;
  auto make = [] {
    return nn::Sequential(nn::Conv2d(1, 128, 28), nn::ReLU(), nn::Conv2d(128, 64, 1), nn::ReLU(),
                          nn::Conv2d(64, 10, 1), nn::Flatten());
  };
  return bench::run_fashion(argc, argv, "W2", make, 128, 0.1, 3);
}
