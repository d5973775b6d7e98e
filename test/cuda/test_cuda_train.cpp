// W1 (BENCH.md) trained for one epoch on the GPU and on the CPU from the same initial
// weights and the same batch order reaches the same test accuracy within 0.5 points.
// Data: $REEL_FASHION_MNIST, else /usr/share/datasets/fashion-mnist (Debian's
// dataset-fashion-mnist; scripts/gpu-check.sh unpacks it when the .deb is in .gpu-deps).
#include <cstdlib>
#include <filesystem>

#include <reel/data/dataloader.h>
#include <reel/data/mnist.h>

#include "compare.h"

using namespace reel;

namespace {
std::string data_dir() {
  const char* env = std::getenv("REEL_FASHION_MNIST");
  return env && *env ? env : "/usr/share/datasets/fashion-mnist";
}

// Test accuracy in percent after one epoch of W1 on `dev`.
double w1_accuracy(Device dev, const data::ImageSet& train, const data::ImageSet& test) {
  manual_seed(2024);  // the same initial weights on both devices: made on the CPU, then moved
  nn::Sequential mlp{nn::Flatten(), nn::Linear(784, 128), nn::ReLU(), nn::Linear(128, 64), nn::ReLU(),
                     nn::Linear(64, 10)};
  mlp.to(dev);
  optim::SGD opt(mlp.parameters(), {.lr = 0.1, .momentum = 0.9});
  data::TensorDataset ds(train.images, train.labels);
  data::DataLoader loader(ds, {.batch_size = 128, .shuffle = true, .seed = 7, .device = dev});
  mlp.train();
  for (data::Example& batch : loader) {
    opt.zero_grad();
    Tensor loss = cross_entropy(mlp(batch.data), batch.target);
    loss.backward();
    opt.step();
  }
  mlp.eval();
  NoGradGuard no_grad;
  Tensor pred = argmax(mlp(test.images.to(dev)), 1);
  double correct = (pred == test.labels.to(dev)).to(DType::i64).sum().item<int64_t>();
  return 100.0 * correct / double(test.labels.numel());
}
}  // namespace

TEST_CASE("W1 trained one epoch on the GPU reaches the CPU's test accuracy", "[cuda][train]") {
  std::string dir = data_dir();
  if (!std::filesystem::exists(dir + "/train-images-idx3-ubyte.gz") &&
      !std::filesystem::exists(dir + "/train-images-idx3-ubyte"))
    FAIL("Fashion-MNIST is not in " << dir << ": set REEL_FASHION_MNIST to its folder");
  data::ImageSet train = data::load_mnist(dir, data::Split::train);
  data::ImageSet test = data::load_mnist(dir, data::Split::test);
  double cpu = w1_accuracy(kCPU, train, test);
  double gpu = w1_accuracy(cuda_test::kGpu, train, test);
  INFO("test accuracy: cpu " << cpu << "%, gpu " << gpu << "%");
  CHECK(cpu > 80.0);
  CHECK(std::abs(gpu - cpu) <= 0.5);
}
