// W1: dense MLP 784-128-ReLU-64-ReLU-10 on Fashion-MNIST (pixels / 255), softmax
// cross-entropy, SGD lr 0.1 momentum 0.9, batch 128. Reports s per epoch; with
// --epochs 5, test accuracy after 1 and 5 epochs (default: 3 epochs, for time).
#include "reel_bench.h"

int main(int argc, char** argv) {
  using namespace reel;
  auto make = [] {
    return nn::Sequential{nn::Flatten(), nn::Linear(784, 128), nn::ReLU(), nn::Linear(128, 64), nn::ReLU(),
                          nn::Linear(64, 10)};
  };
  return bench::run_fashion(argc, argv, "W1", make, 128, 0.1, 3);
}
