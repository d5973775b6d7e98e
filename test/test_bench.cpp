// reel::bench (measure/): the Timer against another clock, its overhead, the noise
// verdict, interleaving, phases and memory; FLOP counts against the analytic formulas of
// the benchmark models; Compare's tables; the machine-peak probe and its cache; bad input.
// Timing bodies sleep where the assertion is about the clock (a sleep takes the same time
// on a busy machine), so the checks hold with other builds running beside them.
#include <catch2/catch.hpp>
#include <reel/bench.h>
#include <reel/reel.h>
#include <time.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

using namespace reel;
namespace rb = reel::bench;

namespace {

double raw_clock_s() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC_RAW, &ts);
  return double(ts.tv_sec) + 1e-9 * double(ts.tv_nsec);
}

void sleep_ms(double ms) { std::this_thread::sleep_for(std::chrono::microseconds(int64_t(ms * 1000))); }

double median_of(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]);
}

std::string temp_dir(const std::string& name) {
  auto p = std::filesystem::temp_directory_path() / ("reel_test_bench_" + name + "_" + std::to_string(::getpid()));
  std::filesystem::remove_all(p);
  std::filesystem::create_directories(p);
  return p.string();
}

// The counter's total over one training step of `net` on x (forward and backward).
template <typename Net>
std::pair<rb::Work, rb::Work> count_step(Net& net, const Tensor& x, const Tensor& y) {
  rb::WorkCounter c;
  Tensor loss = cross_entropy(net(x), y);
  loss.backward();
  c.stop();
  return {c.forward(), c.backward()};
}

}  // namespace

TEST_CASE("bench Timer: a 100 ms body's median agrees with a raw clock read around each run", "[bench]") {
  // the body times itself on CLOCK_MONOTONIC_RAW (another clock than the Timer's); both see
  // the same runs, so their medians differ only by the Timer's own cost per run
  std::vector<double> raw;
  auto body = [&] {
    double t0 = raw_clock_s();
    sleep_ms(100);
    raw.push_back(raw_clock_s() - t0);
  };
  rb::Timer timer({.label = "sleep", .warmup_runs = 1, .min_run_s = 0, .min_blocks = 5, .runs_per_block = 1});
  rb::Measurement m = timer.measure(body);
  REQUIRE(m.blocks == 5);
  REQUIRE(m.runs == 5);
  raw.erase(raw.begin());  // the warm-up run
  REQUIRE(raw.size() == 5);
  double ext = median_of(raw);
  CHECK(ext >= 0.1);
  CHECK(std::abs(m.median - ext) / ext < 0.02);
  CHECK(m.min <= m.median);
  CHECK(m.median <= m.max);
  CHECK(m.threads >= 1);
  CHECK(m.str().find("sleep: median") == 0);
}

TEST_CASE("bench Timer: overhead measured on an empty body, blocks grown past it", "[bench]") {
  rb::Timer timer({.label = "empty", .min_run_s = 0.02});
  rb::Measurement m = timer.measure([] {});
  CHECK(m.overhead_s > 0);
  CHECK(m.overhead_s < 1e-3);  // a clock read, no device
  CHECK(m.median < 1e-6);      // an empty call costs nanoseconds
  // the block was grown until the clock's cost is at most 1e-4 of it (blocks may run a
  // little faster than the autorange's own, hence the factor)
  CHECK(double(m.runs_per_block) * m.median >= 0.3 * m.overhead_s / 1e-4);
  CHECK(m.runs_per_block > 1000);
}

TEST_CASE("bench Timer: the noise warning fires on a noisy body and not on a quiet one", "[bench]") {
  int k = 0;
  rb::Timer timer({.label = "noisy", .warmup_runs = 0, .min_run_s = 0, .min_blocks = 12, .runs_per_block = 1});
  // a body whose time alternates 4 ms and 16 ms: IQR/median far above 10%
  rb::Measurement noisy = timer.measure([&] { sleep_ms(k++ % 2 ? 16 : 4); });
  CHECK(noisy.noisy);
  CHECK(noisy.noise_reason.find("IQR") != std::string::npos);
  CHECK(noisy.str().find("warning: noisy measurement") != std::string::npos);
  rb::Timer quiet_timer({.label = "quiet", .warmup_runs = 0, .min_run_s = 0, .min_blocks = 9, .runs_per_block = 1});
  rb::Measurement quiet = quiet_timer.measure([] { sleep_ms(30); });
  CHECK_FALSE(quiet.noisy);
  CHECK(quiet.noise_reason.empty());
  // summarize's verdict on its own
  CHECK(rb::summarize({1, 1, 1, 1, 1}).noisy == false);
  CHECK(rb::summarize({1, 1.5, 2, 1, 2.5}).noisy);
  CHECK(rb::summarize({1, 1}).noise_reason.find("only 2 blocks") != std::string::npos);
}

TEST_CASE("bench interleaved: variants in alternation, paired ratio", "[bench]") {
  std::vector<char> order;
  auto ms = rb::interleaved({{"a", [&] { order.push_back('a'), sleep_ms(5); }},
                             {"b", [&] { order.push_back('b'), sleep_ms(10); }}},
                            {.warmup_runs = 1, .min_run_s = 0, .min_blocks = 6, .runs_per_block = 1});
  REQUIRE(ms.size() == 2);
  CHECK(ms[0].label == "a");
  CHECK(ms[1].blocks == 6);
  // after the two warm-ups: a b a b ...
  REQUIRE(order.size() == 14);
  for (size_t i = 2; i < order.size(); ++i) CHECK(order[i] == (i % 2 ? 'b' : 'a'));
  rb::Ratio r = rb::ratio(ms, "a", "b");
  CHECK(r.pairs == 6);
  CHECK(r.median > 1.5);
  CHECK(r.median < 2.5);
  CHECK(r.q1 <= r.median);
  CHECK(r.median <= r.q3);
  CHECK_THROWS_AS(rb::ratio(ms, "c", "a"), Error);
}

TEST_CASE("bench: bad input is an Error saying what was expected", "[bench]") {
  rb::Timer timer({.min_run_s = 0});
  try {
    timer.measure([] { throw std::runtime_error("boom"); });
    FAIL("no error");
  } catch (const Error& e) {
    CHECK(std::string(e.what()).find("threw") != std::string::npos);
    CHECK(std::string(e.what()).find("boom") != std::string::npos);
  }
  CHECK_THROWS_AS(timer.timeit([] {}, 0), Error);
  CHECK_THROWS_AS(rb::Timer({.min_blocks = 0}), Error);
  CHECK_THROWS_AS(rb::Timer({.runs_per_block = -1}), Error);
  CHECK_THROWS_AS(timer.measure(std::function<void()>()), Error);
  CHECK_THROWS_AS(rb::interleaved({}), Error);
  CHECK_THROWS_AS(rb::summarize({}), Error);
  rb::Compare empty;
  CHECK_THROWS_AS(empty.text(), Error);
  rb::Compare table({.baseline = "dense"});
  table.add("128", "conv", rb::summarize({1e-3, 1.1e-3}));
  try {
    (void)table.text();
    FAIL("no error");
  } catch (const Error& e) {
    CHECK(std::string(e.what()).find("baseline 'dense' is not a column") != std::string::npos);
    CHECK(std::string(e.what()).find("'conv'") != std::string::npos);
  }
  CHECK_THROWS_AS(table.add("128", "x", rb::Measurement{}), Error);
  CHECK_THROWS_AS(rb::machine_peak(kCPU, {.seconds = 0}), Error);
}

TEST_CASE("bench: numbers trimmed to significant figures", "[bench]") {
  CHECK(rb::format_sig(1234.5678) == "1230");
  CHECK(rb::format_sig(0.012345) == "0.0123");
  CHECK(rb::format_sig(9.996) == "10.0");
  CHECK(rb::format_sig(1.5, 2) == "1.5");
  CHECK(rb::format_time(0.00123) == "1.23 ms");
  CHECK(rb::format_time(2.5e-7) == "250 ns");
  CHECK(rb::format_time(12.34) == "12.3 s");
}

TEST_CASE("bench Compare: relative to the baseline, text, Markdown, CSV, JSON", "[bench]") {
  rb::Compare table({.baseline = "dense", .row_name = "batch"});
  rb::Work w{.flops = 2e9, .product_flops = 2e9, .bytes = 1e8};
  table.add("64", "dense", rb::summarize({1e-3, 1e-3, 1e-3}), w);
  table.add("64", "conv", rb::summarize({2e-3, 2e-3, 2e-3}), w);
  table.add("128", "dense", rb::summarize({4e-3, 4e-3, 4e-3}), w);
  rb::MachinePeak peak;
  peak.f32_gflops = 4000, peak.bandwidth_gbs = 100, peak.source = "test";
  table.set_peak(peak);
  std::string t = table.text();
  CHECK(t.find("vs dense") != std::string::npos);
  CHECK(t.find("2.00x") != std::string::npos);  // conv at 64 against dense at 64
  CHECK(t.find("2000") != std::string::npos);   // 2 GFLOP in 1 ms
  CHECK(t.find("50.0%") != std::string::npos);  // of a 4000 GFLOP/s peak
  std::string md = table.markdown();
  CHECK(md.find("| batch | variant | time |") == 0);
  CHECK(md.find("| --- | --- | ---: |") != std::string::npos);
  std::string csv = table.csv();
  CHECK(std::count(csv.begin(), csv.end(), '\n') == 4);
  CHECK(csv.find("batch,variant,median_s") == 0);
  std::string json = table.json();
  CHECK(std::count(json.begin(), json.end(), '{') == 3);
  CHECK(json.find("\"relative_to_baseline\": 2") != std::string::npos);
  std::string dir = temp_dir("compare");
  table.write_csv(dir + "/t.csv");
  table.write_bars_svg(dir + "/t.svg");
  std::ifstream f(dir + "/t.csv");
  std::string head;
  std::getline(f, head);
  CHECK(head.find("batch,variant") == 0);
  CHECK(std::filesystem::file_size(dir + "/t.svg") > 200);
  std::filesystem::remove_all(dir);
}

TEST_CASE("bench WorkCounter: MLP and the same MLP as 1x1 convolutions do the same products", "[bench]") {
  manual_seed(1);
  const int64_t N = 32;
  auto mlp = nn::Sequential{nn::Flatten(), nn::Linear(784, 128), nn::ReLU(), nn::Linear(128, 64), nn::ReLU(),
                            nn::Linear(64, 10)};
  auto conv = nn::Sequential{nn::Conv2d(1, 128, 28), nn::ReLU(), nn::Conv2d(128, 64, 1), nn::ReLU(),
                             nn::Conv2d(64, 10, 1), nn::Flatten()};
  Tensor x = rand({N, 1, 28, 28});
  Tensor y = randint(0, 10, {N}, {.dtype = DType::i64});
  const double fwd = 2.0 * N * (784 * 128 + 128 * 64 + 64 * 10);
  // backward: every weight gradient, and the input gradients of layers 2 and 3 (x needs none)
  const double bwd = fwd + 2.0 * N * (128 * 64 + 64 * 10);
  auto [mf, mb] = count_step(mlp, x, y);
  auto [cf, cb] = count_step(conv, x, y);
  CHECK(mf.product_flops == fwd);
  CHECK(mb.product_flops == bwd);
  CHECK(cf.product_flops == fwd);
  CHECK(cb.product_flops == bwd);
  CHECK(mf.flops > mf.product_flops);  // biases, ReLUs, the loss
  CHECK(mf.bytes > 0);
}

TEST_CASE("bench WorkCounter: the CNN, a ResNet block and a GPT block against their formulas", "[bench]") {
  manual_seed(1);
  SECTION("CNN (W3)") {
    const int64_t N = 4;
    auto cnn = nn::Sequential{nn::Conv2d(1, 32, 3), nn::ReLU(), nn::Conv2d(32, 64, 3), nn::ReLU(), nn::MaxPool2d(2),
                              nn::Flatten(), nn::Linear(9216, 128), nn::ReLU(), nn::Linear(128, 10)};
    Tensor x = rand({N, 1, 28, 28});
    Tensor y = randint(0, 10, {N}, {.dtype = DType::i64});
    const double c1 = 2.0 * N * 32 * 26 * 26 * 9, c2 = 2.0 * N * 64 * 24 * 24 * 32 * 9;
    const double l1 = 2.0 * N * 9216 * 128, l2 = 2.0 * N * 128 * 10;
    auto [f, b] = count_step(cnn, x, y);
    CHECK(f.product_flops == c1 + c2 + l1 + l2);
    CHECK(b.product_flops == c1 + 2 * c2 + 2 * l1 + 2 * l2);  // conv1's input needs no gradient
  }
  SECTION("ResNet basic block") {
    const int64_t N = 2, C = 16, H = 8;
    nn::models::BasicBlock block(C, C, 1);
    Tensor x = rand({N, C, H, H}).requires_grad_();
    rb::WorkCounter count;
    Tensor out = block(x);
    out.sum().backward();
    count.stop();
    const double conv = 2.0 * N * C * H * H * C * 9;
    CHECK(count.forward().product_flops == 2 * conv);
    CHECK(count.backward().product_flops == 4 * conv);
    // the norms are counted by their formula, 7 per element
    bool norm = false;
    for (const rb::OpWork& o : count.by_op())
      if (o.op.rfind("batch_norm", 0) == 0 && o.phase == debug::Phase::forward) {
        norm = true;
        CHECK(o.work.flops == 7.0 * o.calls * N * C * H * H + (o.op != "batch_norm" ? 1.0 * o.calls * N * C * H * H : 0));
      }
    CHECK(norm);
  }
  SECTION("GPT block (TransformerEncoderLayer)") {
    const int64_t B = 2, T = 16, D = 32, heads = 4, F = 64;
    nn::TransformerEncoderLayer layer(D, heads, {.dim_feedforward = F, .dropout = 0.0, .batch_first = true});
    Tensor x = rand({B, T, D}).requires_grad_();
    rb::WorkCounter count;
    Tensor out = layer(x, {.is_causal = false});
    out.sum().backward();
    count.stop();
    const double proj = 2.0 * B * T * D * 3 * D + 2.0 * B * T * D * D;  // q, k, v in, output out
    const double attn = 2.0 * B * T * T * D * 2;                        // Q K^T and P V over the heads
    const double ff = 2.0 * B * T * D * F * 2;
    CHECK(count.forward().product_flops == proj + attn + ff);
    // the backward's products: twice the linears', 2.5 times attention's (Q K^T recomputed)
    CHECK(count.backward().product_flops == 2 * (proj + ff) + 2.5 * attn);
    std::string table = count.table();
    CHECK(table.find("scaled_dot_product_attention") != std::string::npos);
    CHECK(table.find("self_attn") != std::string::npos);  // the module path
  }
}

TEST_CASE("bench WorkCounter: what the shapes do not say comes from the ops' typed records", "[bench]") {
  auto forward_flops = [](const std::function<void()>& f) {
    rb::WorkCounter count;
    f();
    count.stop();
    return count.forward().flops;
  };
  SECTION("an overlapping pooling window: 9 per output, not the input/output ratio") {
    Tensor x = rand({1, 1, 8, 8});
    // 3x3 stride 2 padding 1: 4x4 outputs of 9 each (the ratio would say 4)
    CHECK(forward_flops([&] { (void)max_pool2d(x, {.kernel = 3, .stride = 2, .padding = 1}); }) == 16 * 9);
    CHECK(forward_flops([&] { (void)avg_pool2d(x, {.kernel = 3, .stride = 2, .padding = 1}); }) == 16 * 9);
    CHECK(forward_flops([&] { (void)max_pool2d(x, {.kernel = 2}); }) == 16 * 4);
  }
  SECTION("causal attention: only the pairs the mask keeps") {
    const double L = 6, E = 4;
    Tensor q = rand({2, 3, 6, 4}), k = rand({2, 3, 6, 4}), v = rand({2, 3, 6, 4});
    rb::WorkCounter full;
    (void)scaled_dot_product_attention(q, k, v);
    full.stop();
    rb::WorkCounter causal;
    (void)scaled_dot_product_attention(q, k, v, {.is_causal = true});
    causal.stop();
    const double B = 6, kept = L * (L + 1) / 2;  // 21 of 36 pairs
    CHECK(full.forward().product_flops == 4 * B * L * L * E);
    CHECK(causal.forward().product_flops == 4 * B * kept * E);
    // more queries than keys: the first S rows are the triangle, the rest full rows
    Tensor q2 = rand({1, 1, 5, 4}), k2 = rand({1, 1, 3, 4}), v2 = rand({1, 1, 3, 4});
    rb::WorkCounter tall;
    (void)scaled_dot_product_attention(q2, k2, v2, {.is_causal = true});
    tall.stop();
    CHECK(tall.forward().product_flops == 4 * (6 + 2 * 3) * 4.0);
  }
  SECTION("an LSTM layer's gates come from its record") {
    const int64_t T = 4, B = 2, I = 3, H = 5;
    nn::LSTM lstm(I, H);
    Tensor x = rand({T, B, I}).requires_grad_();
    rb::WorkCounter count;
    lstm(x).sum().backward();
    count.stop();
    const double products = 2.0 * T * B * 4 * H * (I + H);
    CHECK(count.forward().product_flops == products);
    CHECK(count.backward().product_flops == 2 * products);
  }
  SECTION("a whole stack's one record counts what its layers' records count") {
    // REEL_CUDNN_RNN=stack on a GPU records one entry (RnnStackArgs) where the CPU records
    // one rnn_layer per layer and direction: the same products, layer 1 reading 2 H features
    const int64_t T = 4, B = 2, I = 3, H = 5;
    nn::GRU gru(I, H, {.num_layers = 2, .bidirectional = true});
    Tensor x = rand({T, B, I}).requires_grad_();
    rb::WorkCounter count;
    gru(x).sum().backward();
    count.stop();
    debug::OpRecord r;
    r.op = "gru";
    RnnStackArgs a;
    a.mode = RnnMode::gru, a.layers = 2, a.directions = 2, a.T = T, a.B = B, a.I = I, a.H = H;
    r.args = OpArgs(a);
    const double products = 2.0 * T * B * 3 * H * (2 * (I + H) + 2 * (2 * H + H));
    CHECK(rb::op_work(r)->product_flops == products);
    CHECK(count.forward().product_flops == products);
    r.phase = debug::Phase::backward;
    CHECK(rb::op_work(r)->product_flops == 2 * products);
  }
  SECTION("batch norm in eval mode is one multiply-add per element") {
    nn::BatchNorm2d bn(3);
    Tensor x = rand({2, 3, 4, 4});
    CHECK(forward_flops([&] { (void)bn(x); }) == 7.0 * 96);
    bn.eval();
    CHECK(forward_flops([&] { (void)bn(x); }) == 2.0 * 96);
  }
  SECTION("dropout moves its mask only where it kept one") {
    auto bytes = [](const Tensor& x) {
      rb::WorkCounter count;
      dropout(x, 0.5).sum().backward();
      count.stop();
      return std::pair{count.forward().bytes, count.backward().bytes};
    };
    Tensor x = rand({100}).requires_grad_();  // f32, contiguous: the mask drawn again in backward
    Tensor xd = rand({100}, {.dtype = DType::f64}).requires_grad_();  // f64: the mask kept
    auto [f32_fwd, f32_bwd] = bytes(x);
    auto [f64_fwd, f64_bwd] = bytes(xd);
    // the sum's forward (x read, one number written) and backward (one number read, 100 written)
    const double sum_fwd = 100 * 4 + 4, sum_bwd = 4 + 100 * 4;
    CHECK(f32_fwd == 2 * 100 * 4 + sum_fwd);  // x, y
    CHECK(f32_bwd == 2 * 100 * 4 + sum_bwd);  // g, dx
    CHECK(f64_fwd == 3 * 100 * 8 + 2 * sum_fwd);  // x, y and the mask
    CHECK(f64_bwd == 3 * 100 * 8 + 2 * sum_bwd);
  }
  SECTION("gelu's tanh form costs more than its erf form") {
    Tensor x = rand({10});
    CHECK(forward_flops([&] { (void)gelu(x); }) == 40);
    CHECK(forward_flops([&] { (void)gelu(x, "tanh"); }) == 70);
  }
}

TEST_CASE("bench WorkCounter: ops without a formula are listed, not counted as zero", "[bench]") {
  Tensor x = rand({64});
  rb::WorkCounter count;
  (void)argsort(x);
  Tensor y = exp(x);
  count.stop();
  std::vector<std::string> none = count.uncounted();
  REQUIRE(none.size() == 1);
  CHECK(none[0] == "argsort");
  CHECK(count.total().flops == 64);  // exp: one per element
  CHECK(count.table().find("no formula (not counted): argsort") != std::string::npos);
  // another thread's ops are not this counter's
  std::thread([&] { (void)exp(x); }).join();
  CHECK(count.total().flops == 64);
}

TEST_CASE("bench roofline: a large product is compute-bound, a large add memory-bound", "[bench]") {
  Tensor a = rand({256, 256}), b = rand({256, 256}), u = rand({1 << 18}), v = rand({1 << 18});
  rb::WorkCounter count({.time_ops = true});
  (void)matmul(a, b);
  (void)add(u, v);
  count.stop();
  rb::MachinePeak peak;
  peak.f32_gflops = 100, peak.bandwidth_gbs = 20, peak.model = "test", peak.source = "test";
  auto rows = count.roofline(peak);
  REQUIRE(rows.size() == 2);
  for (const rb::RooflineRow& r : rows) {
    CHECK(r.bound == (r.op == "matmul" ? "compute" : "memory"));
    CHECK(r.time_s > 0);
    CHECK(r.of_bound > 0);
  }
  CHECK(count.roofline_table(peak).find("ridge at 5") != std::string::npos);
  std::string svg = count.roofline_svg(peak);
  CHECK(svg.find("<svg") == 0);
  CHECK(svg.find(">matmul<") != std::string::npos);
  CHECK_THROWS_AS(count.roofline(rb::MachinePeak{}), Error);
}

TEST_CASE("bench phases and memory", "[bench]") {
  manual_seed(1);
  auto net = nn::Sequential{nn::Linear(64, 64), nn::ReLU(), nn::Linear(64, 10)};
  optim::SGD opt(net.parameters(), {.lr = 0.01});
  Tensor x = rand({32, 64});
  Tensor y = randint(0, 10, {32}, {.dtype = DType::i64});
  Tensor loss;
  rb::PhaseMeasurement p = rb::measure_phases(
      {.forward = [&] { loss = cross_entropy(net(x), y); },
       .backward = [&] { loss.backward(); },
       .step = [&] { opt.step(), opt.zero_grad(); }},
      {.label = "mlp", .min_run_s = 0.01, .min_blocks = 5});
  CHECK(p.forward.median > 0);
  CHECK(p.backward.median > 0);
  CHECK(p.step.median > 0);
  CHECK(p.total.blocks == p.forward.blocks);
  for (size_t i = 0; i < p.total.times.size(); ++i)  // each step is its three phases
    CHECK(p.total.times[i] == Approx(p.forward.times[i] + p.backward.times[i] + p.step.times[i]).epsilon(1e-9));
  CHECK(p.str().find("mlp forward") != std::string::npos);
  rb::MemoryPeak mem = rb::measure_memory([] {
    Tensor big = zeros({int64_t(4) << 20});  // 16 MiB
    (void)big;
  });
  CHECK(mem.cpu_peak_bytes >= size_t(16) << 20);
  CHECK(mem.rss_peak_bytes > 0);
  CHECK(mem.str().find("reel cpu peak") == 0);
}

TEST_CASE("bench machine_peak: probes, the cache file, another key measured again", "[bench]") {
  std::string dir = temp_dir("peak");
  rb::PeakOptions opt{.cache_dir = dir, .stream_bytes = int64_t(8) << 20, .gemm_size = 256, .seconds = 0.01};
  rb::MachinePeak p = rb::machine_peak(kCPU, opt);
  CHECK(p.source.find("measured now") == 0);
  CHECK(p.bandwidth_gbs > 0);
  CHECK(p.bandwidth_gbs >= p.triad_gbs);
  CHECK(p.inplace_add_gbs > 0);
  CHECK(p.read_gbs > 0);
  CHECK(p.bandwidth_gbs == std::max({p.copy_gbs, p.scale_gbs, p.add_gbs, p.triad_gbs, p.inplace_add_gbs}));
  CHECK(p.f32_gflops > 1);
  CHECK(p.threads >= 1);
  CHECK(!p.bandwidth_kernel.empty());
  CHECK(p.ridge() > 0);
  const std::string path = rb::peak_cache_path(kCPU, opt);
  REQUIRE(std::filesystem::exists(path));
  rb::MachinePeak q = rb::machine_peak(kCPU, opt);  // read back
  CHECK(q.source.find("cache ") == 0);
  CHECK(q.bandwidth_gbs == Approx(p.bandwidth_gbs).epsilon(1e-5));
  CHECK(q.f32_gflops == Approx(p.f32_gflops).epsilon(1e-5));
  CHECK(q.read_gbs == Approx(p.read_gbs).epsilon(1e-5));
  // a file keyed for another machine (or version) is not believed
  std::string text;
  {
    std::ifstream f(path);
    text.assign(std::istreambuf_iterator<char>(f), {});
  }
  text.replace(0, text.find('\n'), "key another machine");
  std::ofstream(path) << text;
  CHECK(rb::machine_peak(kCPU, opt).source.find("measured now") == 0);
  CHECK(p.str().find("GB/s") != std::string::npos);
  std::filesystem::remove_all(dir);
}

namespace {
// The models of test/reference/flop_counter.py, by its names: a training step's forward
// and backward product FLOPs as reel counts them.
std::pair<double, double> reel_products(const std::string& name) {
  manual_seed(1);
  auto step = [](auto& model, Tensor x, bool classify) {
    rb::WorkCounter count;
    Tensor out = model(x);
    count.stop();
    Tensor loss = classify ? cross_entropy(out, zeros({out.size(0)}, {.dtype = DType::i64})) : out.sum();
    rb::WorkCounter back;
    loss.backward();
    back.stop();
    return std::make_pair(count.forward().product_flops, back.backward().product_flops);
  };
  if (name == "mlp") {
    auto m = nn::Sequential{nn::Flatten(), nn::Linear(784, 128), nn::ReLU(), nn::Linear(128, 64), nn::ReLU(),
                            nn::Linear(64, 10)};
    return step(m, rand({32, 1, 28, 28}), true);
  }
  if (name == "conv_mlp") {
    auto m = nn::Sequential{nn::Conv2d(1, 128, 28), nn::ReLU(), nn::Conv2d(128, 64, 1), nn::ReLU(),
                            nn::Conv2d(64, 10, 1), nn::Flatten()};
    return step(m, rand({32, 1, 28, 28}), true);
  }
  if (name == "cnn") {
    auto m = nn::Sequential{nn::Conv2d(1, 32, 3), nn::ReLU(), nn::Conv2d(32, 64, 3), nn::ReLU(), nn::MaxPool2d(2),
                            nn::Flatten(), nn::Linear(9216, 128), nn::ReLU(), nn::Linear(128, 10)};
    return step(m, rand({4, 1, 28, 28}), true);
  }
  if (name == "vgg") {
    auto m = nn::Sequential{nn::Conv2d(3, 50, 3, {.padding = 1}), nn::ReLU(), nn::Conv2d(50, 50, 3, {.padding = 1}),
                            nn::ReLU(), nn::MaxPool2d(2), nn::Conv2d(50, 100, 3, {.padding = 1}), nn::ReLU(),
                            nn::Conv2d(100, 100, 3, {.padding = 1}), nn::ReLU(), nn::MaxPool2d(2), nn::Flatten(),
                            nn::Linear(6400, 512), nn::ReLU(), nn::Linear(512, 10)};
    return step(m, rand({2, 3, 32, 32}), true);
  }
  if (name == "basic_block") {
    nn::models::BasicBlock m(16, 16, 1);
    return step(m, rand({2, 16, 8, 8}).requires_grad_(), false);
  }
  if (name == "gpt_block") {
    nn::TransformerEncoderLayer m(32, 4, {.dim_feedforward = 64, .dropout = 0.0, .batch_first = true});
    return step(m, rand({2, 16, 32}).requires_grad_(), false);
  }
  if (name == "resnet18") {
    auto m = nn::models::resnet18({.num_classes = 10});
    return step(*m, rand({1, 3, 64, 64}), true);
  }
  FAIL("no reel model named " << name);
  return {};
}
}  // namespace

TEST_CASE("bench WorkCounter: product FLOPs equal PyTorch's FlopCounterMode on seven models", "[bench]") {
  // test/reference/flop_counter.txt: PyTorch 2.x's counts for the same models and shapes
  std::ifstream f(std::string(REEL_SOURCE_DIR) + "/test/reference/flop_counter.txt");
  REQUIRE(f);
  std::string line;
  int models = 0;
  while (std::getline(f, line)) {
    if (line.empty() || line[0] == '#') continue;
    std::istringstream in(line);
    std::string name;
    double fwd = 0, bwd = 0;
    in >> name >> fwd >> bwd;
    INFO(line);
    auto [rf, rb_] = reel_products(name);
    CHECK(rf == fwd);
    CHECK(rb_ == bwd);
    ++models;
  }
  CHECK(models == 7);
}
