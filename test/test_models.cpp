// nn::models: ResNet-18/34/50 and DenseNet-121. Structure and names against torchvision
// (the [torchvision] cases, run by ctest's models_torchvision with the files
// test/models/torchvision_models.py writes), shapes, features(), a training step, and
// the user-facing options at small input sizes.
#include <catch2/catch.hpp>
#include <reel/reel.h>

#include <cstdlib>
#include <string>

using namespace reel;
namespace models = reel::nn::models;

namespace {
// max |a - b| over max |b|
double rel_diff(const Tensor& a, const Tensor& b) {
  return sub(a, b).abs().max().item<double>() / b.abs().max().item<double>();
}

void check_against_torchvision(nn::Module& net, const std::string& name,
                               const std::function<Tensor(const Tensor&)>& features) {
  const char* dir = std::getenv("REEL_TORCHVISION_DIR");
  REQUIRE(dir != nullptr);  // set by test/models/run.sh
  net.load(std::string(dir) + "/" + name + ".safetensors");  // strict: every name and shape matches
  net.eval();
  safetensors::File ref = safetensors::load(std::string(dir) + "/" + name + ".ref.safetensors");
  NoGradGuard no_grad;
  const Tensor& x = ref.at("input");
  INFO(name);
  CHECK(rel_diff(net(x), ref.at("logits")) < 2e-5);
  CHECK(rel_diff(features(x), ref.at("features")) < 2e-5);
}
}  // namespace

TEST_CASE("torchvision's ResNets load and match", "[.][torchvision]") {
  auto r18 = models::resnet18({.num_classes = 10});
  check_against_torchvision(*r18, "resnet18", [&](const Tensor& x) { return r18->features(x); });
  auto r34 = models::resnet34({.num_classes = 10});
  check_against_torchvision(*r34, "resnet34", [&](const Tensor& x) { return r34->features(x); });
  auto r50 = models::resnet50({.num_classes = 10});
  check_against_torchvision(*r50, "resnet50", [&](const Tensor& x) { return r50->features(x); });
}

TEST_CASE("torchvision's DenseNet-121 loads and matches", "[.][torchvision]") {
  auto d = models::densenet121({.num_classes = 10});
  check_against_torchvision(*d, "densenet121", [&](const Tensor& x) { return d->features(x); });
}

TEST_CASE("ResNet and DenseNet shapes, names and options", "[models]") {
  manual_seed(0);
  auto r18 = models::resnet18({.num_classes = 7, .in_channels = 1});
  Tensor x = randn({2, 1, 32, 32});
  CHECK(r18->features(x).shape() == Dims{2, 512});
  CHECK((*r18)(x).shape() == Dims{2, 7});
  auto names = r18->state_dict();
  CHECK(names.front().first == "conv1.weight");
  CHECK(r18->parameters().size() == 62);  // as torchvision's resnet18
  bool has_downsample = false;
  for (auto& [n, t] : names) has_downsample = has_downsample || n == "layer2.0.downsample.0.weight";
  CHECK(has_downsample);

  auto r50 = models::resnet50({.num_classes = 5});
  r50->eval();
  CHECK(r50->features(randn({1, 3, 32, 32})).shape() == Dims{1, 2048});
  int64_t count = 0;
  for (const Tensor& p : r50->parameters()) count += p.numel();
  CHECK(count == 23518277);  // torchvision's resnet50(num_classes=5)

  auto d = models::densenet121({.num_classes = 3});
  CHECK(d->features(randn({2, 3, 32, 32})).shape() == Dims{2, 1024});
  count = 0;
  for (const Tensor& p : d->parameters()) count += p.numel();
  CHECK(count == 6956931);  // torchvision's densenet121(num_classes=3)
  CHECK(d->state_dict()[0].first == "features.conv0.weight");

  CHECK_THROWS_WITH((*r18)(randn({2, 3, 32, 32})), Catch::Contains("Conv2d: expected input [N, 1, H, W]"));
  // an error deep inside names the user's line and the module path (training-mode batch
  // norm on a 1x1 map of one sample)
  CHECK_THROWS_WITH(r18->features(randn({1, 1, 32, 32})),
                    Catch::Contains("test_models.cpp") && Catch::Contains("layer4.0.bn1"));
}

TEST_CASE("a ResNet-18 training step lowers the loss", "[models]") {
  manual_seed(1);
  auto net = models::resnet18({.num_classes = 4, .in_channels = 1});
  optim::SGD opt(net->parameters(), {.lr = 0.05, .momentum = 0.9});
  Tensor x = randn({8, 1, 16, 16});
  Tensor y = from_vector(std::vector<int64_t>{0, 1, 2, 3, 0, 1, 2, 3}, {8});
  double first = 0, last = 0;
  for (int step = 0; step < 5; ++step) {
    opt.zero_grad();
    Tensor loss = cross_entropy((*net)(x), y);
    loss.backward();
    opt.step();
    (step == 0 ? first : last) = loss.item<double>();
  }
  CHECK(last < first);
}
