// W4 in libtorch 1.13: the VGG-style CNN of bench/w4_vgg.cpp on the same synthetic batch.
#include "torch_bench.h"

int main(int argc, char** argv) {
  namespace nn = torch::nn;
  bench::Args args = bench::parse_args(argc, argv);
  bench::Target t = bench::setup(args);
  int64_t steps = args.get("--steps", 5);
  torch::manual_seed(1);
  auto conv = [](int64_t i, int64_t o) { return nn::Conv2d(nn::Conv2dOptions(i, o, 3).padding(1)); };
  nn::Sequential model(conv(3, 50), nn::ReLU(), conv(50, 50), nn::ReLU(), nn::MaxPool2d(2), nn::Dropout(0.25),
                       conv(50, 100), nn::ReLU(), conv(100, 100), nn::ReLU(), nn::MaxPool2d(2), nn::Dropout(0.25),
                       nn::Flatten(), nn::Linear(6400, 512), nn::ReLU(), nn::Dropout(0.5), nn::Linear(512, 10));
  model->to(t.device);
  torch::optim::SGD opt(model->parameters(), torch::optim::SGDOptions(0.01).momentum(0.9));
  torch::Tensor x = torch::randn({64, 3, 32, 32}, torch::TensorOptions().device(t.device));
  torch::Tensor y = torch::randint(0, 10, {64}, torch::TensorOptions().dtype(torch::kInt64).device(t.device));
  auto step = [&] {
    torch::Tensor loss = torch::nn::functional::cross_entropy(model->forward(x), y);
    opt.zero_grad();
    loss.backward();
    opt.step();
    return loss;
  };
  for (int i = 0; i < 3; ++i) step();
  std::vector<double> ms, ips;
  for (int rep = 0; rep < args.reps; ++rep) {
    double t0 = bench::now_s();
    torch::Tensor loss;
    for (int64_t i = 0; i < steps; ++i) loss = step();
    (void)loss.item<float>();
    double s = (bench::now_s() - t0) / double(steps);
    ms.push_back(1e3 * s);
    ips.push_back(64.0 / s);
  }
  bench::report(args, "W4", "libtorch", t.name.c_str(), "step_ms", ms);
  bench::report(args, "W4", "libtorch", t.name.c_str(), "images_per_s", ips);
  return 0;
}
