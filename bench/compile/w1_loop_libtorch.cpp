// The same one-file training loop against libtorch's umbrella header.
#include <torch/torch.h>

struct MlpImpl : torch::nn::Module {
  torch::nn::Linear fc1{784, 128}, fc2{128, 64}, fc3{64, 10};
  MlpImpl() {
    register_module("fc1", fc1);
    register_module("fc2", fc2);
    register_module("fc3", fc3);
  }
  torch::Tensor forward(const torch::Tensor& x) {
    return fc3(torch::relu(fc2(torch::relu(fc1(x.flatten(1))))));
  }
};
TORCH_MODULE(Mlp);

int main() {
  Mlp net;
  torch::optim::SGD opt(net->parameters(), torch::optim::SGDOptions(0.1).momentum(0.9));
  torch::Tensor x = torch::randn({128, 1, 28, 28});
  torch::Tensor y = torch::randint(0, 10, {128});
  for (int step = 0; step < 10; ++step) {
    torch::Tensor loss = torch::nn::functional::cross_entropy(net(x), y);
    opt.zero_grad();
    loss.backward();
    opt.step();
  }
  return 0;
}
