// The one-file training loop whose compile time bench/compile_time.sh measures:
// the W1 MLP with SGD, written against reel's umbrella header.
#include <reel/reel.h>

using namespace reel;

struct Mlp : nn::Module {
  nn::Linear fc1{784, 128}, fc2{128, 64}, fc3{64, 10};
  Mlp() {
    register_module("fc1", fc1);
    register_module("fc2", fc2);
    register_module("fc3", fc3);
  }
  Tensor forward(const Tensor& x) override { return fc3(relu(fc2(relu(fc1(x.flatten(1)))))); }
};

int main() {
  Mlp net;
  optim::SGD opt(net.parameters(), {.lr = 0.1, .momentum = 0.9});
  Tensor x = randn({128, 1, 28, 28});
  Tensor y = randint(0, 10, {128});
  for (int step = 0; step < 10; ++step) {
    Tensor loss = cross_entropy(net(x), y);
    opt.zero_grad();
    loss.backward();
    opt.step();
  }
  return 0;
}
