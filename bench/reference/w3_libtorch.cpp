// W3 in libtorch 1.13: the CNN of bench/w3_cnn.cpp, the same options (--steps, --epochs).
#include "torch_bench.h"

int main(int argc, char** argv) {
  namespace nn = torch::nn;
  auto make = [] {
    return nn::Sequential(nn::Conv2d(1, 32, 3), nn::ReLU(), nn::Conv2d(32, 64, 3), nn::ReLU(), nn::MaxPool2d(2),
                          nn::Dropout(0.25), nn::Flatten(), nn::Linear(9216, 128), nn::ReLU(), nn::Dropout(0.5),
                          nn::Linear(128, 10));
  };
  return bench::run_fashion(argc, argv, "W3", make, 64, 0.01, 1);
}
