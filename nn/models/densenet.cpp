// DenseNet: torchvision's densenet.py structure and initialisation (convolutions
// kaiming_normal, batch norms weight 1 and bias 0, the classifier's bias 0).
#include "densenet.h"

#include <fmt/format.h>

#include "../init.h"

namespace reel::nn::models {

DenseLayer::DenseLayer(int64_t in_features, int64_t growth_rate, int64_t bn_size, double drop_rate)
    : norm1(in_features),
      conv1(in_features, bn_size * growth_rate, 1, {.bias = false}),
      norm2(bn_size * growth_rate),
      conv2(bn_size * growth_rate, growth_rate, 3, {.padding = 1, .bias = false}),
      drop_rate(drop_rate) {
  register_module("norm1", norm1);
  register_module("conv1", conv1);
  register_module("norm2", norm2);
  register_module("conv2", conv2);
}

Tensor DenseLayer::operator()(const std::vector<Tensor>& features, Site site) {
  Call call(*this, site);
  SiteScope at_caller = at_caller_site();
  return forward_features(features);
}

Tensor DenseLayer::forward(const Tensor& x) {
  SiteScope at_caller = at_caller_site();
  return forward_features({x});
}

// The 3x3 convolution reads oneDNN's blocked layout (nChw16c) on AVX-512 CPUs: norm2's
// BN-ReLU writes it there in its own pass, so neither conv2's forward nor its weight
// gradient reorders the 128-channel input, and its input gradient comes back blocked.
Tensor DenseLayer::forward_features(const std::vector<Tensor>& features) {
  Tensor y = conv_after_norm_relu(conv2, norm2, {conv1(norm1.forward_relu(features))});
  return drop_rate > 0 ? dropout(y, drop_rate, is_training()) : y;
}

DenseBlock::DenseBlock(int64_t num_layers, int64_t in_features, int64_t growth_rate, int64_t bn_size,
                       double drop_rate)
    : in_features(in_features), growth_rate(growth_rate) {
  for (int64_t i = 0; i < num_layers; ++i) {
    auto layer = std::make_unique<DenseLayer>(in_features + i * growth_rate, growth_rate, bn_size, drop_rate);
    layers.push_back(layer.get());
    register_module(fmt::format("denselayer{}", i + 1), std::move(layer));
  }
}

std::vector<Tensor> DenseBlock::features_of(const Tensor& x, Site site) {
  Call call(*this, site);
  SiteScope at_caller = at_caller_site();
  return features_impl(x);
}

std::vector<Tensor> DenseBlock::features_impl(const Tensor& x) {
  std::vector<Tensor> features{x};
  for (DenseLayer* layer : layers) features.push_back((*layer)(features));
  return features;
}

Tensor DenseBlock::forward(const Tensor& x) {
  SiteScope at_caller = at_caller_site();
  return cat(features_impl(x), 1);
}

Transition::Transition(int64_t in_features, int64_t out_features)
    : norm(in_features), conv(in_features, out_features, 1, {.bias = false}) {
  register_module("norm", norm);
  register_module("conv", conv);
}

Tensor Transition::operator()(const std::vector<Tensor>& features, Site site) {
  Call call(*this, site);
  SiteScope at_caller = at_caller_site();
  return forward_features(features);
}

Tensor Transition::forward(const Tensor& x) {
  SiteScope at_caller = at_caller_site();
  return forward_features({x});
}

Tensor Transition::forward_features(const std::vector<Tensor>& features) {
  return avg_pool2d(conv(norm.forward_relu(features)), {.kernel = 2, .stride = 2});
}

namespace {
int64_t final_channels(const DenseNetOptions& opt) {
  int64_t channels = opt.num_init_features;
  for (size_t i = 0; i < opt.block_config.size(); ++i) {
    channels += opt.block_config[i] * opt.growth_rate;
    if (i + 1 != opt.block_config.size()) channels /= 2;
  }
  return channels;
}
}  // namespace

DenseNet::DenseNet(DenseNetOptions opt) : classifier(final_channels(opt), opt.num_classes), options(opt) {
  features_.insert("conv0", Conv2d(opt.in_channels, opt.num_init_features, 7, {.stride = 2, .padding = 3, .bias = false}));
  features_.insert("norm0", BatchNorm2d(opt.num_init_features));
  features_.insert("relu0", ReLU());
  features_.insert("pool0", MaxPool2d(3, {.stride = 2, .padding = 1}));
  int64_t channels = opt.num_init_features;
  for (size_t i = 0; i < opt.block_config.size(); ++i) {
    features_.insert(fmt::format("denseblock{}", i + 1),
                     DenseBlock(opt.block_config[i], channels, opt.growth_rate, opt.bn_size, opt.drop_rate));
    channels += opt.block_config[i] * opt.growth_rate;
    if (i + 1 != opt.block_config.size()) {
      features_.insert(fmt::format("transition{}", i + 1), Transition(channels, channels / 2));
      channels /= 2;
    }
  }
  features_.insert("norm5", BatchNorm2d(channels));
  register_module("features", features_);
  register_module("classifier", classifier);

  apply([](Module& m) {
    if (auto* c = dynamic_cast<Conv2d*>(&m)) init::kaiming_normal_(c->weight);
    if (auto* b = dynamic_cast<BatchNorm2d*>(&m)) {
      init::ones_(b->weight);
      init::zeros_(b->bias);
    }
  });
  init::zeros_(classifier.bias);
}

Tensor DenseNet::features(const Tensor& x, Site site) {
  Call call(*this, site);  // a call of the model, as operator() opens
  SiteScope at_caller = at_caller_site();
  return features_impl(x);
}

// The modules of features_ in order, with each BatchNorm and the ReLU after it as one
// batch_norm_relu (norm0 + relu0; norm5 + the final relu), and each dense block's
// features handed to the next transition (or norm5) unconcatenated.
Tensor DenseNet::features_impl(const Tensor& x) {
  Tensor y = features_["conv0"](x);
  y = features_.at<BatchNorm2d>("norm0").forward_relu({y});
  y = features_["pool0"](y);
  const size_t blocks = options.block_config.size();
  for (size_t i = 0; i < blocks; ++i) {
    std::vector<Tensor> f = features_.at<DenseBlock>(fmt::format("denseblock{}", i + 1)).features_of(y);
    y = i + 1 < blocks ? features_.at<Transition>(fmt::format("transition{}", i + 1))(f)
                       : features_.at<BatchNorm2d>("norm5").forward_relu(f);
  }
  return adaptive_avg_pool2d(y, 1, 1).flatten(1);
}

Tensor DenseNet::forward(const Tensor& x) {
  SiteScope at_caller = at_caller_site();
  return classifier(features_impl(x));
}

std::unique_ptr<DenseNet> densenet121(DenseNetOptions opt) {
  opt.growth_rate = 32;
  opt.block_config = {6, 12, 24, 16};
  opt.num_init_features = 64;
  return std::make_unique<DenseNet>(opt);
}

}  // namespace reel::nn::models
