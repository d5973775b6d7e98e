// ResNet-18/34/50 with torchvision's structure and parameter/buffer names, so a
// torchvision state dict saved as safetensors loads with Module::load:
//
//   auto net = nn::models::resnet50({.num_classes = 1000});
//   net->load("resnet50.safetensors");  net->eval();
//   Tensor logits = (*net)(images);           // [N, 3, H, W] -> [N, num_classes]
//   Tensor pooled = net->features(images);    // -> [N, 2048]: stops after global pooling
//
// Names: conv1, bn1, layer1..layer4 (blocks "0", "1", ... with conv1, bn1, conv2, bn2
// [, conv3, bn3] and downsample.0 / downsample.1), fc. Initialisation as torchvision:
// convolutions kaiming_normal(fan_out, relu), batch norms weight 1 and bias 0, fc as Linear.
#pragma once
#include <cstdint>
#include <memory>
#include <optional>

#include "../layers.h"

namespace reel::nn::models {

struct ResNetOptions {
  int64_t num_classes = 1000;
  int64_t in_channels = 3;
  // torchvision's zero_init_residual: the last batch norm of each block starts at 0
  bool zero_init_residual = false;
  // channels of layer1 (each later layer doubles them): torchvision's 64; fewer for small
  // images on a small budget (the names stay torchvision's)
  int64_t width = 64;
  // a 3x3 stride-1 stem without the max pool (the CIFAR variant): torchvision's 7x7/2 stem
  // and pool leave a 28x28 image 7x7 before layer1
  bool small_images = false;
};

// Two 3x3 convolutions (ResNet-18/34); expansion 1.
class BasicBlock : public Module {
 public:
  static constexpr int64_t expansion = 1;
  BasicBlock(int64_t in_planes, int64_t planes, int64_t stride);
  Tensor forward(const Tensor& x) override;
  std::string type_name() const override { return "BasicBlock"; }

  Conv2d conv1, conv2;
  BatchNorm2d bn1, bn2;
  std::optional<Sequential> downsample;  // conv 1x1 + batch norm where the shape changes
};

// 1x1, 3x3 (strided), 1x1 convolutions (ResNet-50); expansion 4.
class Bottleneck : public Module {
 public:
  static constexpr int64_t expansion = 4;
  Bottleneck(int64_t in_planes, int64_t planes, int64_t stride);
  Tensor forward(const Tensor& x) override;
  std::string type_name() const override { return "Bottleneck"; }

  Conv2d conv1, conv2, conv3;
  BatchNorm2d bn1, bn2, bn3;
  std::optional<Sequential> downsample;
};

class ResNet : public Module {
 public:
  // block_counts: the number of blocks in layer1..layer4 ({2, 2, 2, 2} for ResNet-18)
  ResNet(bool bottleneck, const int64_t (&block_counts)[4], ResNetOptions opt = {});
  Tensor forward(const Tensor& x) override;
  // [N, C, H, W] -> [N, 512 expansion]: everything up to and including the global average pool
  Tensor features(const Tensor& x, Site site = {});
  Tensor features_impl(const Tensor& x);  // features() inside a call already open (forward)
  std::string type_name() const override { return "ResNet"; }

  Conv2d conv1;
  BatchNorm2d bn1;
  MaxPool2d maxpool;
  Sequential layer1, layer2, layer3, layer4;
  Linear fc;
  ResNetOptions options;
};

std::unique_ptr<ResNet> resnet18(ResNetOptions opt = {});
std::unique_ptr<ResNet> resnet34(ResNetOptions opt = {});
std::unique_ptr<ResNet> resnet50(ResNetOptions opt = {});

}  // namespace reel::nn::models
