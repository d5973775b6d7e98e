// Loads a checkpoint written by train_fashion_mnist and prints its test accuracy.
//
//   evaluate_fashion_mnist --model cnn                     # reads out/cnn/cnn.safetensors
//   evaluate_fashion_mnist --model cnn --out runs/cnn      # reads runs/cnn/cnn.safetensors
//   evaluate_fashion_mnist --model mlp --checkpoint my.safetensors
#include <reel/reel.h>

#include <cstdio>
#include <filesystem>

#include "fashion_mnist.h"

using namespace reel;

namespace {

const char* kUsage =
    "usage: evaluate_fashion_mnist [--model mlp|cnn|resnet] [--out DIR | --checkpoint PATH] [--data DIR]\n"
    "                              [--device cpu|cuda]\n"
    "  --out: the training run's folder, read <out>/<model>.safetensors (default out/<model>)\n";

int run(int argc, char** argv) {
  auto args = fashion::parse_args(argc, argv,
                                  {{"model", "mlp"}, {"out", ""}, {"checkpoint", ""},
                                   {"data", "/usr/share/datasets/fashion-mnist"}, {"device", "cpu"}},
                                  kUsage);
  if (args["out"].empty()) args["out"] = "out/" + args["model"];  // train_fashion_mnist's default
  std::string checkpoint = args["checkpoint"].empty()
                               ? (std::filesystem::path(args["out"]) / (args["model"] + ".safetensors")).string()
                               : args["checkpoint"];
  Device device = fashion::parse_device(args["device"]);
  std::unique_ptr<nn::Module> made = fashion::make_model(args["model"]);
  nn::Module& model = *made;
  model.load(checkpoint);
  model.to(device);

  data::ImageSet test = data::load_mnist(args["data"], data::Split::test);
  test.images = data::normalize(test.images, {fashion::kMean}, {fashion::kStd});
  data::TensorDataset test_set(test.images, test.labels);
  data::DataLoader loader(test_set, {.batch_size = 1000, .device = device});
  fashion::Score score = fashion::evaluate(model, loader);
  std::printf("%s: test accuracy %.2f%% (%lld images), mean loss %.4f\n", checkpoint.c_str(), 100 * score.accuracy,
              (long long)test_set.size(), score.loss);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "evaluate_fashion_mnist: %s\n", e.what());
    return 1;
  }
}
