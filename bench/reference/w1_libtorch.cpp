// W1 in libtorch 1.13: the same MLP, data order and timing as bench/w1_mlp.cpp.
#include "torch_bench.h"

int main(int argc, char** argv) {
  namespace nn = torch::nn;
  auto make = [] {
    return nn::Sequential(nn::Flatten(), nn::Linear(784, 128), nn::ReLU(), nn::Linear(128, 64), nn::ReLU(),
                          nn::Linear(64, 10));
  };
  return bench::run_fashion(argc, argv, "W1", make, 128, 0.1, 3);
}
