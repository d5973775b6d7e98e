// W10 in libtorch 1.13: ResNet-50 (torchvision's v1.5 structure, written out: libtorch has
// no model zoo) in eval mode, no grad, batch 32 of 224x224x3, forward to the pooled
// 2048-d vector; s per 1000 images, as bench/w10_resnet50.cpp.
#include "torch_bench.h"

namespace {
namespace nn = torch::nn;

nn::Conv2d conv(int64_t in, int64_t out, int64_t k, int64_t stride = 1, int64_t pad = 0) {
  return nn::Conv2d(nn::Conv2dOptions(in, out, k).stride(stride).padding(pad).bias(false));
}

struct BottleneckImpl : nn::Module {
  nn::Conv2d conv1, conv2, conv3;
  nn::BatchNorm2d bn1, bn2, bn3;
  nn::Sequential downsample{nullptr};
  BottleneckImpl(int64_t in, int64_t planes, int64_t stride)
      : conv1(conv(in, planes, 1)), conv2(conv(planes, planes, 3, stride, 1)), conv3(conv(planes, planes * 4, 1)),
        bn1(planes), bn2(planes), bn3(planes * 4) {
    register_module("conv1", conv1), register_module("conv2", conv2), register_module("conv3", conv3);
    register_module("bn1", bn1), register_module("bn2", bn2), register_module("bn3", bn3);
    if (stride != 1 || in != planes * 4)
      downsample = register_module("downsample", nn::Sequential(conv(in, planes * 4, 1, stride), nn::BatchNorm2d(planes * 4)));
  }
  torch::Tensor forward(const torch::Tensor& x) {
    auto out = torch::relu(bn1(conv1(x)));
    out = torch::relu(bn2(conv2(out)));
    out = bn3(conv3(out));
    return torch::relu(out + (downsample ? downsample->forward(x) : x));
  }
};
TORCH_MODULE(Bottleneck);

struct ResNet50Impl : nn::Module {
  nn::Conv2d conv1{conv(3, 64, 7, 2, 3)};
  nn::BatchNorm2d bn1{64};
  nn::Sequential layers;
  ResNet50Impl() {
    register_module("conv1", conv1), register_module("bn1", bn1);
    int64_t in = 64;
    const int64_t planes[4] = {64, 128, 256, 512}, blocks[4] = {3, 4, 6, 3};
    for (int i = 0; i < 4; ++i)
      for (int64_t b = 0; b < blocks[i]; ++b) {
        layers->push_back(Bottleneck(in, planes[i], b == 0 && i > 0 ? 2 : 1));
        in = planes[i] * 4;
      }
    register_module("layers", layers);
  }
  torch::Tensor forward(const torch::Tensor& x) {
    auto y = torch::max_pool2d(torch::relu(bn1(conv1(x))), 3, 2, 1);
    return torch::adaptive_avg_pool2d(layers->forward(y), {1, 1}).flatten(1);
  }
};
TORCH_MODULE(ResNet50);
}  // namespace

int main(int argc, char** argv) {
  bench::Args args = bench::parse_args(argc, argv);
  bench::Target t = bench::setup(args);
  const int64_t B = 32, batches = args.get("--steps", 3);
  torch::manual_seed(1);
  ResNet50 net;
  net->to(t.device);
  net->eval();
  torch::NoGradGuard no_grad;
  auto x = torch::randn({B, 3, 224, 224}, torch::TensorOptions().device(t.device));
  net->forward(x).sum().item<float>();
  std::vector<double> per_1000, ms;
  for (int rep = 0; rep < args.reps; ++rep) {
    double t0 = bench::now_s();
    torch::Tensor f;
    for (int64_t i = 0; i < batches; ++i) f = net->forward(x);
    f.sum().item<float>();
    double s = bench::now_s() - t0;
    per_1000.push_back(s / double(batches * B) * 1000.0);
    ms.push_back(1e3 * s / double(batches));
  }
  bench::report(args, "W10", "libtorch", t.name.c_str(), "s_per_1000_images", per_1000, t.extra);
  bench::report(args, "W10", "libtorch", t.name.c_str(), "batch_ms", ms, t.extra);
  return 0;
}
