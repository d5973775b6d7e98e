// The work counter's cost on W1's training step (issue 43's target: <= 5% slower with a
// bench::WorkCounter alive). W1's MLP, batch 128 of random pixels (the cost is per op, the
// data does not matter), SGD with momentum; the step timed with no counter and with one
// counter alive for all the steps, interleaved block by block (bench::interleaved), and
// the ratio of the two with its quartiles. One JSON line per run, like the W programs.
//
//   build/bench/bench_w1_work_counter [--threads N] [--reps R]
#include <reel/bench.h>

#include "reel_bench.h"

int main(int argc, char** argv) {
  using namespace reel;
  namespace rb = reel::bench;
  ::bench::Args args = ::bench::parse_args(argc, argv);
  ::bench::Target t = ::bench::setup(args);
  manual_seed(0);
  nn::Sequential net{nn::Flatten(), nn::Linear(784, 128), nn::ReLU(), nn::Linear(128, 64), nn::ReLU(),
                     nn::Linear(64, 10)};
  net.to(t.device);
  optim::SGD opt(net.parameters(), {.lr = 0.1, .momentum = 0.9});
  Tensor x = rand({128, 1, 28, 28}, {.device = t.device});
  Tensor y = randint(0, 10, {128}, {.dtype = DType::i64, .device = t.device});
  auto step = [&] {
    opt.zero_grad();
    cross_entropy(net(x), y).backward();
    opt.step();
  };
  std::unique_ptr<rb::WorkCounter> count;
  auto counted_step = [&] {
    if (!count) count = std::make_unique<rb::WorkCounter>();
    step();
  };
  // the counter must not see the plain steps: it lives only while its variant runs
  auto plain_step = [&] {
    count.reset();
    step();
  };
  const double min_run_s = 0.5 * std::max(1, args.reps);
  std::vector<rb::Measurement> ms = rb::interleaved({{"counter off", plain_step}, {"counter on", counted_step}},
                                                    {.device = t.device, .warmup_runs = 20, .min_run_s = min_run_s,
                                                     .min_blocks = 20});
  rb::Ratio r = rb::ratio(ms, "counter off", "counter on");
  for (const rb::Measurement& m : ms) std::fprintf(stderr, "%s\n", m.str().c_str());
  std::fprintf(stderr, "%s\n", r.str().c_str());
  std::printf("{\"workload\": \"W1-counter\", \"impl\": \"reel\", \"device\": \"%s\", \"threads\": %d, "
              "\"off_ms\": %.4f, \"on_ms\": %.4f, \"ratio\": %.4f, \"ratio_q1\": %.4f, \"ratio_q3\": %.4f}\n",
              t.name.c_str(), ms[0].threads, ms[0].median * 1e3, ms[1].median * 1e3, r.median, r.q1, r.q3);
  return 0;
}
