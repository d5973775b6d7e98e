// The examples of docs/from-libtorch.md, compiled from the guide's own text (the ```cpp
// blocks, extracted by test/CMakeLists.txt into from_libtorch_examples.inc) and run
// with their values checked: the guide's code builds and does what it says.
#include <catch2/catch.hpp>
#include <reel/reel.h>

#include <filesystem>
#include <sstream>
#include <string>
#include <unistd.h>

#include "gradcheck.h"

namespace guide {
namespace torch = reel;
#include "from_libtorch_examples.inc"
}  // namespace guide

using namespace reel;

TEST_CASE("porting guide: the spellings example", "[libtorch][guide]") {
  CHECK(guide::spellings_example() == 36.0);  // 24 + 3 masked + 3 picked + "[2, 2]"
}

TEST_CASE("porting guide: options, modules, save and load, models, loaders", "[libtorch][guide]") {
  guide::Net net;
  data::TensorDataset ds(zeros({8, 784}), zeros({8}, {.dtype = DType::i64}));
  guide::options_example(net, ds);
  manual_seed(0);
  Tensor out = net(randn({3, 1, 28, 28}));
  CHECK(out.shape() == Dims{3, 10});
  CHECK(allclose(out.exp().sum(1), ones({3}), 1e-5, 1e-5));  // log-probabilities
  CHECK(net.named_parameters().front().first == "fc1.weight");

  std::string path = (std::filesystem::temp_directory_path() / ("reel_guide_" + std::to_string(getpid()) + ".safetensors")).string();
  guide::save_load_example(path);
  guide::Net a, b;
  a.save(path);
  b.load(path);
  CHECK(a.fc2.bias.to_vector<float>() == b.fc2.bias.to_vector<float>());
  std::filesystem::remove(path);

  CHECK(guide::models_example() == 62);
  CHECK(guide::loader_example() == 45.0);
}

TEST_CASE("porting guide: the custom function as libtorch writes it", "[libtorch][guide][function]") {
  Tensor x = tensor({1.0, -2.0}).requires_grad_();
  Tensor y = guide::MulConstant::apply(x, 3.0);
  y.sum().backward();
  CHECK(y.to_vector<float>() == std::vector<float>{3, -6});
  CHECK(x.grad().to_vector<float>() == std::vector<float>{3, 3});
  CHECK(y.grad_fn()->name() == "MulConstantBackward");
  CHECK(reel::test::gradcheck([](const std::vector<Tensor>& in) { return guide::MulConstant::apply(in[0], -1.5); },
                              {reel::test::input({3, 2})}) == "");
}

TEST_CASE("porting guide: the ResNet block with a by-value forward and an optional downsampler",
          "[libtorch][guide][port]") {
  manual_seed(6);
  Tensor x = randn({2, 2, 8, 8});
  guide::ResidualBlock plain(2, 2);
  CHECK(!plain.downsample);
  CHECK(plain.named_parameters().size() == 6);  // two convs without bias, two batch norms
  Tensor y = plain(x);
  CHECK(y.shape() == Dims{2, 2, 8, 8});
  CHECK(y.min().item<double>() >= 0);  // relu(out + residual)
  guide::ResidualBlock down(2, 4, 2, nn::Sequential(nn::Conv2d(2, 4, 1, {.stride = 2, .bias = false}), nn::BatchNorm2d(4)));
  CHECK(down.downsample);
  CHECK(down(x).shape() == Dims{2, 4, 4, 4});
  CHECK(down.named_parameters()[6].first == "downsample.0.weight");
  down(x).sum().backward();
  CHECK(down.downsample.at<nn::Conv2d>(0).weight.grad().defined());  // the skip path gets its gradient
  CHECK(down.conv1.weight.grad().defined());
}

TEST_CASE("porting guide: libtorch's dataset pipeline, LSTM state tuples, the small things", "[libtorch][guide][port]") {
  CHECK(guide::dataset_example() == 10);
  CHECK(guide::lstm_state_example() == 19);
  guide::Net net;
  manual_seed(7);
  Tensor x = randn({3, 784});
  Tensor out = guide::small_things_example(net, x);
  CHECK(out.shape() == Dims{3, 10});
  CHECK(!out.requires_grad());
  CHECK(grad_enabled());  // InferenceMode ended with the function
  std::string e = reel::test::error_message([&] { guide::small_things_example(net, x[0]); });
  CHECK(e.rfind("small_things_example: expected a batch of rows, got [784]; `x.dim() == 2` is false (at ", 0) == 0);
}

TEST_CASE("porting guide: the custom optimizer as reel writes it", "[libtorch][guide][optim]") {
  Tensor w = tensor({1.0, -2.0}).requires_grad_();
  guide::SignSGD opt({w}, {.lr = 0.1});
  w.set_grad(tensor({0.5, -0.25}));
  opt.step();  // buf = 0.1 g; p -= 0.1 sign(buf)
  CHECK(allclose(w, tensor({0.9, -1.9}), 1e-6, 0));
  CHECK(allclose(*opt.state(0, 0).find("momentum_buffer"), tensor({0.05, -0.025}), 1e-6, 0));
  Tensor w2 = w.detach().clone().requires_grad_();
  guide::SignSGD again({w2}, {.lr = 0.5});
  again.load_state_dict(opt.state_dict());
  CHECK(again.lr() == 0.1);
  CHECK(again.param_groups()[0].hyper.momentum == 0.9);
  optim::StepLR sched(again, {.step_size = 1, .gamma = 0.5});
  sched.step();
  CHECK(again.lr() == 0.05);
}
