// ResNet: torchvision's resnet.py structure (v1.5: the stride on the 3x3 convolution of a
// bottleneck), forward written as the blocks compute it.
#include "resnet.h"

#include <fmt/format.h>

#include "../init.h"

namespace reel::nn::models {
namespace {
Conv2d conv3x3(int64_t in, int64_t out, int64_t stride) {
  return Conv2d(in, out, 3, {.stride = stride, .padding = 1, .bias = false});
}
Conv2d conv1x1(int64_t in, int64_t out, int64_t stride = 1) {
  return Conv2d(in, out, 1, {.stride = stride, .bias = false});
}
std::optional<Sequential> make_downsample(int64_t in, int64_t out, int64_t stride) {
  if (stride == 1 && in == out) return std::nullopt;
  return Sequential(conv1x1(in, out, stride), BatchNorm2d(out));
}
}  // namespace

BasicBlock::BasicBlock(int64_t in_planes, int64_t planes, int64_t stride)
    : conv1(conv3x3(in_planes, planes, stride)),
      conv2(conv3x3(planes, planes, 1)),
      bn1(planes),
      bn2(planes),
      downsample(make_downsample(in_planes, planes, stride)) {
  register_module("conv1", conv1);
  register_module("bn1", bn1);
  register_module("conv2", conv2);
  register_module("bn2", bn2);
  if (downsample) register_module("downsample", *downsample);
}

// y = relu(bn2(conv2(relu(bn1(conv1 x)))) + shortcut(x))
Tensor BasicBlock::forward(const Tensor& x) {
  SiteScope at_caller = at_caller_site();
  Tensor out = bn2(conv_after_norm_relu(conv2, bn1, {conv1(x)}));
  return add_relu(out, downsample ? (*downsample)(x) : x);
}

Bottleneck::Bottleneck(int64_t in_planes, int64_t planes, int64_t stride)
    : conv1(conv1x1(in_planes, planes)),
      conv2(conv3x3(planes, planes, stride)),
      conv3(conv1x1(planes, planes * expansion)),
      bn1(planes),
      bn2(planes),
      bn3(planes * expansion),
      downsample(make_downsample(in_planes, planes * expansion, stride)) {
  register_module("conv1", conv1);
  register_module("bn1", bn1);
  register_module("conv2", conv2);
  register_module("bn2", bn2);
  register_module("conv3", conv3);
  register_module("bn3", bn3);
  if (downsample) register_module("downsample", *downsample);
}

// y = relu(bn3(conv3(relu(bn2(conv2(relu(bn1(conv1 x))))))) + shortcut(x))
Tensor Bottleneck::forward(const Tensor& x) {
  SiteScope at_caller = at_caller_site();
  Tensor out = bn2.forward_relu({conv_after_norm_relu(conv2, bn1, {conv1(x)})});
  out = bn3(conv3(out));
  return add_relu(out, downsample ? (*downsample)(x) : x);
}

namespace {
template <typename Block>
Sequential make_layer(int64_t& in_planes, int64_t planes, int64_t blocks, int64_t stride) {
  Sequential layer;
  layer.add(Block(in_planes, planes, stride));
  in_planes = planes * Block::expansion;
  for (int64_t i = 1; i < blocks; ++i) layer.add(Block(in_planes, planes, 1));
  return layer;
}
}  // namespace

ResNet::ResNet(bool bottleneck, const int64_t (&block_counts)[4], ResNetOptions opt)
    : conv1(opt.in_channels, opt.width, opt.small_images ? 3 : 7,
            {.stride = opt.small_images ? 1 : 2, .padding = opt.small_images ? 1 : 3, .bias = false}),
      bn1(opt.width),
      maxpool(3, {.stride = 2, .padding = 1}),
      fc(8 * opt.width * (bottleneck ? Bottleneck::expansion : BasicBlock::expansion), opt.num_classes),
      options(opt) {
  if (opt.width < 1) throw Error(fmt::format("ResNet: expected a width of at least 1, got {}", opt.width));
  int64_t in_planes = opt.width;
  const int64_t planes[4] = {opt.width, 2 * opt.width, 4 * opt.width, 8 * opt.width};
  Sequential* layers[4] = {&layer1, &layer2, &layer3, &layer4};
  for (int i = 0; i < 4; ++i) {
    const int64_t stride = i == 0 ? 1 : 2;
    *layers[i] = bottleneck ? make_layer<Bottleneck>(in_planes, planes[i], block_counts[i], stride)
                            : make_layer<BasicBlock>(in_planes, planes[i], block_counts[i], stride);
  }
  register_module("conv1", conv1);
  register_module("bn1", bn1);
  register_module("maxpool", maxpool);
  register_module("layer1", layer1);
  register_module("layer2", layer2);
  register_module("layer3", layer3);
  register_module("layer4", layer4);
  register_module("fc", fc);

  // torchvision's initialisation
  apply([&](Module& m) {
    if (auto* c = dynamic_cast<Conv2d*>(&m))
      init::kaiming_normal_(c->weight, {.mode = init::FanMode::fan_out, .nonlinearity = init::Nonlinearity::relu});
    if (auto* b = dynamic_cast<BatchNorm2d*>(&m)) {
      init::ones_(b->weight);
      init::zeros_(b->bias);
    }
  });
  if (opt.zero_init_residual)
    apply([](Module& m) {
      if (auto* b = dynamic_cast<Bottleneck*>(&m)) init::zeros_(b->bn3.weight);
      if (auto* b = dynamic_cast<BasicBlock*>(&m)) init::zeros_(b->bn2.weight);
    });
}

Tensor ResNet::features(const Tensor& x, Site site) {
  Call call(*this, site);  // a call of the model, as operator() opens
  SiteScope at_caller = at_caller_site();
  return features_impl(x);
}

Tensor ResNet::features_impl(const Tensor& x) {
  Tensor y = bn1.forward_relu({conv1(x)});
  if (!options.small_images) y = maxpool(y);
  y = layer4(layer3(layer2(layer1(y))));
  return adaptive_avg_pool2d(y, 1, 1).flatten(1);
}

Tensor ResNet::forward(const Tensor& x) {
  SiteScope at_caller = at_caller_site();
  return fc(features_impl(x));
}

std::unique_ptr<ResNet> resnet18(ResNetOptions opt) { return std::unique_ptr<ResNet>(new ResNet(false, {2, 2, 2, 2}, opt)); }
std::unique_ptr<ResNet> resnet34(ResNetOptions opt) { return std::unique_ptr<ResNet>(new ResNet(false, {3, 4, 6, 3}, opt)); }
std::unique_ptr<ResNet> resnet50(ResNetOptions opt) { return std::unique_ptr<ResNet>(new ResNet(true, {3, 4, 6, 3}, opt)); }

}  // namespace reel::nn::models
