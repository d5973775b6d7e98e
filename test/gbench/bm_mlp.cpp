// A Google Benchmark program timing a reel training step through reel's adapter
// (<reel/measure/gbench.h>), built against the installed package by run.sh (ctest gbench_adapter).
#include <reel/measure/gbench.h>
#include <reel/reel.h>

namespace rb = reel::bench;

static void BM_mlp_step(benchmark::State& state) {
  using namespace reel;
  manual_seed(1);
  const int64_t batch = state.range(0);
  auto net = nn::Sequential{nn::Linear(784, 128), nn::ReLU(), nn::Linear(128, 10)};
  optim::SGD opt(net.parameters(), {.lr = 0.01});
  Tensor x = rand({batch, 784});
  Tensor y = randint(0, 10, {batch});
  auto step = [&] {
    opt.zero_grad();
    cross_entropy(net(x), y).backward();
    opt.step();
  };
  // a quick probe (the test's own cache folder): the counters need a peak, not the best one
  static const rb::MachinePeak peak =
      rb::machine_peak(kCPU, {.stream_bytes = int64_t(16) << 20, .gemm_size = 256, .seconds = 0.02});
  rb::gbench::set_work(state, rb::gbench::count_work(step), &peak);
  rb::gbench::run(state, step);
}
BENCHMARK(BM_mlp_step)->Arg(64)->UseManualTime();

BENCHMARK_MAIN();
