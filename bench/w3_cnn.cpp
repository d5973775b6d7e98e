// W3: CNN Conv2d(1,32,3)-ReLU-Conv2d(32,64,3)-ReLU-MaxPool2d(2)-Dropout(.25)-Flatten-
// Linear(9216,128)-ReLU-Dropout(.5)-Linear(128,10) on Fashion-MNIST, batch 64, SGD
// lr 0.01 momentum 0.9. An epoch is 938 steps: `--steps N` times N steps per
// repetition and extrapolates s/epoch (the output says so); `--epochs N` runs
// whole epochs and reports test accuracy.
#include "reel_bench.h"

int main(int argc, char** argv) {
  using namespace reel;
  auto make = [] {
    return nn::Sequential{nn::Conv2d(1, 32, 3), nn::ReLU(),          nn::Conv2d(32, 64, 3),  nn::ReLU(),
                          nn::MaxPool2d(2),     nn::Dropout(0.25),   nn::Flatten(),          nn::Linear(9216, 128),
                          nn::ReLU(),           nn::Dropout(0.5),    nn::Linear(128, 10)};
  };
  return bench::run_fashion(argc, argv, "W3", make, 64, 0.01, 1);
}
