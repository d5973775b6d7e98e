// DenseNet-121 (and the family, by its growth rate and block sizes) with torchvision's
// structure and names: features.conv0, norm0, denseblock1..4 (denselayer1.. with norm1,
// conv1, norm2, conv2), transition1..3 (norm, conv), norm5, then classifier.
//
//   auto net = nn::models::densenet121({.num_classes = 10, .in_channels = 1});
//   Tensor pooled = net->features(x);   // [N, 1024] after global average pooling
//
// A dense layer reads the block's input and every earlier layer's output through
// batch_norm_relu, which normalises their channel concatenation without making it: no
// O(L^2) copying, and per layer one saved tensor (the BN-ReLU output conv1 reads) where
// torch.cat + BatchNorm + ReLU keep two. A block's features go to the next transition
// (or norm5) as they are: DenseNet concatenates nothing (DenseBlock::forward, called on
// its own, concatenates once).
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

#include "../containers.h"  // ModuleDict
#include "../layers.h"

namespace reel::nn::models {

struct DenseNetOptions {
  int64_t growth_rate = 32;
  std::vector<int64_t> block_config = {6, 12, 24, 16};
  int64_t num_init_features = 64;
  int64_t bn_size = 4;  // the bottleneck width, in multiples of the growth rate
  double drop_rate = 0;
  int64_t num_classes = 1000;
  int64_t in_channels = 3;
};

// BN-ReLU-Conv1x1-BN-ReLU-Conv3x3: [N, C_in, H, W] -> [N, growth_rate, H, W]
class DenseLayer : public Module {
 public:
  DenseLayer(int64_t in_features, int64_t growth_rate, int64_t bn_size, double drop_rate);
  using Module::operator();
  // The layer over the block's features so far (their channels sum to C_in), as a call of this module
  Tensor operator()(const std::vector<Tensor>& features, Site site = {});
  Tensor forward(const Tensor& x) override;
  Tensor forward_features(const std::vector<Tensor>& features);
  std::string type_name() const override { return "_DenseLayer"; }
  BatchNorm2d norm1;
  Conv2d conv1;
  BatchNorm2d norm2;
  Conv2d conv2;
  double drop_rate;
};

// num_layers DenseLayers, each fed every earlier output: [N, C, H, W] -> [N, C + L k, H, W]
class DenseBlock : public Module {
 public:
  DenseBlock(int64_t num_layers, int64_t in_features, int64_t growth_rate, int64_t bn_size, double drop_rate);
  Tensor forward(const Tensor& x) override;  // cat(features_of(x), 1)
  // x and each layer's output, unconcatenated, as a call of this module
  std::vector<Tensor> features_of(const Tensor& x, Site site = {});
  std::vector<Tensor> features_impl(const Tensor& x);
  std::string type_name() const override { return "_DenseBlock"; }
  std::vector<DenseLayer*> layers;  // owned children denselayer1, denselayer2, ...
  int64_t in_features, growth_rate;
};

// BN-ReLU-Conv1x1-AvgPool2: halves the channels and the resolution
class Transition : public Module {
 public:
  Transition(int64_t in_features, int64_t out_features);
  using Module::operator();
  // over a dense block's features (their channels sum to in_features), as a call of this module
  Tensor operator()(const std::vector<Tensor>& features, Site site = {});
  Tensor forward(const Tensor& x) override;
  Tensor forward_features(const std::vector<Tensor>& features);
  std::string type_name() const override { return "_Transition"; }
  BatchNorm2d norm;
  Conv2d conv;
};

class DenseNet : public Module {
 public:
  explicit DenseNet(DenseNetOptions opt = {});
  Tensor forward(const Tensor& x) override;
  // through norm5, ReLU and the global average pool: [N, C]
  Tensor features(const Tensor& x, Site site = {});
  Tensor features_impl(const Tensor& x);  // features() inside a call already open (forward)
  std::string type_name() const override { return "DenseNet"; }
  ModuleDict features_;  // registered as "features": conv0, norm0, denseblock1, transition1, ..., norm5
  Linear classifier;
  DenseNetOptions options;
};

std::unique_ptr<DenseNet> densenet121(DenseNetOptions opt = {});

}  // namespace reel::nn::models
