// W10: ResNet-50 feature extraction, the DeepLearningFrameworks seed's "Avg time for 1000
// images": nn::models::resnet50 in eval mode, no gradients, batch 32 of 224x224x3 images
// (synthetic), forward to the 2048-d pooled vector (features()). Reports s per 1000 images
// and ms per batch (--amp bf16|f16: under autocast); floor: 8.18 GFLOP per image (torchvision's 4.09 G multiply-adds, x 2)
// over peak sgemm.
#include "reel_bench.h"

int main(int argc, char** argv) {
  using namespace reel;
  bench::Args args = bench::parse_args(argc, argv);
  bench::Target t = bench::setup(args);
  const int64_t B = args.get("--batch", 32), batches = args.get("--steps", 3);
  manual_seed(1);
  auto net = nn::models::resnet50();
  net->to(t.device);
  net->eval();
  Tensor x = randn({B, 3, 224, 224}, {.device = t.device});
  NoGradGuard no_grad;
  auto batch = [&] {
    auto amp = t.autocast();  // --amp bf16|f16
    return net->features(x);
  };
  batch().sum().item<float>();  // warm-up: oneDNN's primitives created
  std::vector<double> per_1000, batch_ms;
  for (int rep = 0; rep < args.reps; ++rep) {
    double t0 = bench::now_s();
    Tensor f;
    for (int64_t i = 0; i < batches; ++i) f = batch();
    f.sum().item<float>();
    double s = bench::now_s() - t0;
    per_1000.push_back(s / double(batches * B) * 1000.0);
    batch_ms.push_back(1e3 * s / double(batches));
  }
  bench::report(args, "W10", "reel", t.name.c_str(), "s_per_1000_images", per_1000, t.extra);
  bench::report(args, "W10", "reel", t.name.c_str(), "batch_ms", batch_ms, t.extra);
  return 0;
}
