// MXNet issue 2011's question, as a user's bench program: is an MLP written as 1x1
// convolutions (Conv2d(1,h1,k=28)-ReLU-Conv2d(h1,h2,1)-ReLU-Conv2d(h2,10,1)) as fast as
// the dense MLP it equals (784-h1-ReLU-h2-ReLU-10)? One SGD training step of each, timed
// in alternation, for several widths and batch sizes, on the CPU and on each GPU present.
// Prints the table (time, FLOPs, GFLOP/s, % of the machine's peak) and writes it as CSV,
// JSON and a bar chart. See docs/benchmarking.md.
//
//   build/samples/bench_mlp_vs_conv1x1 [--quick] [--out DIR]
#include <reel/bench.h>
#include <reel/reel.h>

#include <cstdio>
#include <filesystem>
#include <string>

using namespace reel;
namespace rb = reel::bench;

// One model, its optimizer and a batch: a step is forward, backward and SGD.
struct Run {
  nn::Sequential net;
  optim::SGD opt;
  Tensor x, y;
  static nn::Sequential on(nn::Sequential n, Device dev) {
    n.to(dev);
    return n;
  }
  Run(nn::Sequential n, int64_t batch, Device dev)
      : net(on(std::move(n), dev)), opt(net.parameters(), {.lr = 0.01, .momentum = 0.9}),
        x(rand({batch, 1, 28, 28}, {.device = dev})), y(randint(0, 10, {batch}, {.dtype = DType::i64, .device = dev})) {}
  void step() {
    opt.zero_grad();
    cross_entropy(net(x), y).backward();
    opt.step();
  }
  rb::Work work() {  // one step's FLOPs and bytes, counted from the ops as they run
    rb::WorkCounter count;
    step();
    return count.total();
  }
};

int main(int argc, char** argv) {
  bool quick = false;
  std::string out = "out/bench_mlp_vs_conv1x1";
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--quick") quick = true;
    else if (a == "--out" && i + 1 < argc) out = argv[++i];
    else return std::fprintf(stderr, "usage: %s [--quick] [--out DIR]\n", argv[0]), 2;
  }
  std::vector<Device> devices = {kCPU};
  for (int g = 0; g < cuda::device_count(); ++g) devices.push_back(Device::cuda(g));
  const std::vector<int64_t> widths = quick ? std::vector<int64_t>{128} : std::vector<int64_t>{128, 512};
  const std::vector<int64_t> batches = quick ? std::vector<int64_t>{128} : std::vector<int64_t>{32, 128, 512};
  std::filesystem::create_directories(out);
  for (Device dev : devices) {
    rb::MachinePeak peak = rb::machine_peak(dev);
    std::printf("%s", peak.str().c_str());
    rb::Compare table({.baseline = "dense", .row_name = "width, batch", .title = "one SGD step on " + dev.str()});
    table.set_peak(peak);
    for (int64_t h : widths)
      for (int64_t batch : batches) {
        manual_seed(1);
        Run dense(nn::Sequential{nn::Flatten(), nn::Linear(784, h), nn::ReLU(), nn::Linear(h, h / 2), nn::ReLU(),
                                 nn::Linear(h / 2, 10)}, batch, dev);
        Run conv(nn::Sequential{nn::Conv2d(1, h, 28), nn::ReLU(), nn::Conv2d(h, h / 2, 1), nn::ReLU(),
                                nn::Conv2d(h / 2, 10, 1), nn::Flatten()}, batch, dev);
        auto ms = rb::interleaved({{"dense", [&] { dense.step(); }}, {"conv1x1", [&] { conv.step(); }}},
                                  {.device = dev, .min_run_s = quick ? 0.1 : 0.3});
        std::string row = std::to_string(h) + ", " + std::to_string(batch);
        table.add(row, "dense", ms[0], dense.work());
        table.add(row, "conv1x1", ms[1], conv.work());
      }
    std::printf("%s\n", table.text().c_str());
    std::string base = out + "/" + (dev.is_cuda() ? "cuda" + std::to_string(dev.index) : std::string("cpu"));
    table.write_csv(base + ".csv");
    table.write_json(base + ".json");
    table.write_bars_svg(base + ".svg");
    std::printf("wrote %s.csv, .json and .svg\n", base.c_str());
  }
  return 0;
}
