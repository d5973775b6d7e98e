// Generators (tensor/generator.h): per-thread default generators, Generator objects
// taken by every random op, and their states saved and restored.
#include <catch2/catch.hpp>
#include <reel/reel.h>
#include <reel/tensor/philox.h>

#include <barrier>
#include <cmath>
#include <thread>
#include <vector>

#include "../cpu/convert.h"
#include "../cpu/philox_words.h"

using namespace reel;

namespace {

std::vector<float> values(const Tensor& t) { return t.to_vector<float>(); }

// Draws of every kind, in a fixed order, from `g` (or the default generator).
std::vector<std::vector<float>> draws(Generator* g, int rounds, std::barrier<>* sync = nullptr) {
  std::vector<std::vector<float>> out;
  for (int r = 0; r < rounds; ++r) {
    if (sync) sync->arrive_and_wait();  // the two threads' draws interleave
    out.push_back(values(g ? rand({37}, *g) : rand({37})));
    out.push_back(values(g ? randn({5, 3}, *g) : randn({5, 3})));
    Tensor i = g ? randint(0, 1000, {9}, *g) : randint(0, 1000, {9});
    out.push_back(values(i.to(DType::f32)));
    Tensor p = g ? randperm(11, *g) : randperm(11);
    out.push_back(values(p.to(DType::f32)));
  }
  return out;
}

struct Net : nn::Module {
  nn::Linear fc1{6, 16};
  nn::Dropout drop{0.3};
  nn::Linear fc2{16, 2};
  Net() {
    register_module("fc1", fc1);
    register_module("drop", drop);
    register_module("fc2", fc2);
  }
  Tensor forward(const Tensor& x) override { return fc2(drop(relu(fc1(x)))); }
};

// Seeds this thread, builds a net (init from the thread's generator) and trains it with
// dropout for `steps` steps; the weights it ends with.
std::vector<float> train_with_dropout(uint64_t seed, int steps, std::barrier<>* sync = nullptr) {
  manual_seed(seed);
  Net net;
  optim::SGD opt(net.parameters(), {.lr = 0.1});
  Generator data(1000 + seed);  // the batches, apart from the default generator
  for (int s = 0; s < steps; ++s) {
    if (sync) sync->arrive_and_wait();
    Tensor x = randn({8, 6}, data);
    Tensor y = randint(0, 2, {8}, data);
    opt.zero_grad();
    cross_entropy(net(x), y).backward();
    opt.step();
  }
  std::vector<float> w = values(net.fc1.weight);
  for (float v : values(net.fc2.weight)) w.push_back(v);
  return w;
}

}  // namespace

TEST_CASE("a Generator's streams are the Philox blocks of its seed from offset 0", "[random]") {
  Generator g(123);
  std::vector<float> u = values(rand({6}, g));
  for (int i = 0; i < 6; ++i) CHECK(u[size_t(i)] == philox::to_unit(philox::generate(123, uint64_t(i) / 4).w[i % 4]));
  CHECK(g.get_state() == GeneratorState{.seed = 123, .cpu_offset = 2, .cuda_offset = 0});
  // the next draw continues at block 2
  CHECK(values(rand({1}, g))[0] == philox::to_unit(philox::generate(123, 2).w[0]));
  // the default generator seeded alike gives the same numbers
  manual_seed(123);
  CHECK(values(rand({6})) == u);
  CHECK(default_generator().get_state() == GeneratorState{.seed = 123, .cpu_offset = 2});
  g.manual_seed(123);
  CHECK(g.get_state() == GeneratorState{.seed = 123});
}

TEST_CASE("Generator states round-trip: set_state repeats every kind of draw", "[random]") {
  Generator g(9);
  (void)randn({13}, g);  // somewhere in the middle of the stream
  GeneratorState s = g.get_state();
  auto first = draws(&g, 2);
  Tensor w = empty({4, 5});
  nn::init::kaiming_uniform_(w, {}, g);
  Tensor d = dropout(ones({50}), 0.5, g);
  GeneratorState end = g.get_state();
  CHECK(end != s);

  g.set_state(s);
  CHECK(draws(&g, 2) == first);
  Tensor w2 = empty({4, 5});
  nn::init::kaiming_uniform_(w2, {}, g);
  CHECK(values(w2) == values(w));
  CHECK(values(dropout(ones({50}), 0.5, g)) == values(d));
  CHECK(g.get_state() == end);

  // a copy of the state in another Generator continues the same way
  Generator h;
  h.set_state(s);
  CHECK(draws(&h, 2) == first);

  // the default generator's state too
  manual_seed(4);
  (void)rand({3});
  GeneratorState ds = default_generator().get_state();
  auto a = draws(nullptr, 1);
  Tensor m = dropout(ones({40}), 0.25);
  default_generator().set_state(ds);
  CHECK(draws(nullptr, 1) == a);
  CHECK(values(dropout(ones({40}), 0.25)) == values(m));
}

TEST_CASE("ops given a Generator leave the default generator alone", "[random]") {
  manual_seed(5);
  GeneratorState before = default_generator().get_state();
  Generator g(5);
  (void)rand({10}, g);
  (void)randn({10}, g);
  (void)randint(0, 3, {10}, g);
  (void)randperm(10, g);
  Tensor t = empty({3, 3});
  uniform_(t, 0, 1, g);
  normal_(t, 0, 1, g);
  nn::init::uniform_(t, -1, 1, g);
  nn::init::normal_(t, 0, 1, g);
  nn::init::xavier_uniform_(t, 1.0, g);
  nn::init::xavier_normal_(t, 1.0, g);
  nn::init::kaiming_normal_(t, {}, g);
  (void)dropout(ones({10}), 0.5, g);
  nn::Dropout drop(0.5, &g);
  (void)drop(ones({10}));
  CHECK(default_generator().get_state() == before);
  CHECK(g.get_state().cpu_offset > 0);
  // and a Dropout module with no generator of its own draws from the default one
  nn::Dropout plain(0.5);
  (void)plain(ones({10}));
  CHECK(default_generator().get_state() != before);
}

TEST_CASE("two threads that each seed and draw get their own reproducible numbers", "[random][threads]") {
  // what each thread should see: its seed's stream, as a Generator of that seed gives it
  Generator g1(1), g2(2);
  auto want1 = draws(&g1, 20), want2 = draws(&g2, 20);
  REQUIRE(want1 != want2);
  std::vector<std::vector<float>> got1, got2;
  std::barrier<> sync(2);
  std::thread a([&] {
    manual_seed(1);
    sync.arrive_and_wait();  // both seeded before either draws
    got1 = draws(nullptr, 20, &sync);
  });
  std::thread b([&] {
    manual_seed(2);
    sync.arrive_and_wait();
    got2 = draws(nullptr, 20, &sync);
  });
  a.join();
  b.join();
  CHECK(got1 == want1);
  CHECK(got2 == want2);
}

TEST_CASE("another thread's draws do not move this thread's default generator", "[random][threads]") {
  manual_seed(11);
  std::vector<float> first = values(rand({8}));
  std::vector<float> other;
  std::thread t([&] { other = values(rand({1000})); });  // never seeded: its own stream
  t.join();
  std::vector<float> second = values(rand({8}));
  Generator g(11);
  CHECK(first == values(rand({8}, g)));
  CHECK(second == values(rand({8}, g)));
  // an unseeded thread's generator starts from a seed of its own, not from this one's
  std::vector<float> other2;
  std::thread t2([&] { other2 = values(rand({1000})); });
  t2.join();
  CHECK(other != other2);
  CHECK(std::vector<float>(other.begin(), other.begin() + 8) != first);
}

TEST_CASE("two threads training with dropout are reproducible", "[random][threads]") {
  // alone, one after the other...
  std::vector<float> alone1 = train_with_dropout(21, 30);
  std::vector<float> alone2 = train_with_dropout(22, 30);
  REQUIRE(alone1 != alone2);
  // ...and at the same time, step for step, on two threads
  std::vector<float> both1, both2;
  std::barrier<> sync(2);
  std::thread a([&] { both1 = train_with_dropout(21, 30, &sync); });
  std::thread b([&] { both2 = train_with_dropout(22, 30, &sync); });
  a.join();
  b.join();
  CHECK(both1 == alone1);
  CHECK(both2 == alone2);
}

// cpu/philox_words (attention's dropout, the CPU fills): the blocks of generate(), 16 at a
// time on AVX-512 (a 64-bit counter whose low word wraps inside a group included)
TEST_CASE("philox_words gives generate()'s blocks on every vector ISA", "[random][philox]") {
  const VectorIsa before = vector_isa();
  for (VectorIsa isa : {VectorIsa::baseline, VectorIsa::avx512}) {
    set_vector_isa(isa);
    for (uint64_t seed : {uint64_t(0), uint64_t(91), (uint64_t(1) << 40) + 7})
      for (uint64_t counter : {uint64_t(0), uint64_t(5), (uint64_t(1) << 32) - 9, (uint64_t(3) << 32) + 3})
        for (int64_t n : {0, 1, 15, 16, 17, 33}) {
          INFO("seed " << seed << " counter " << counter << " n " << n);
          std::vector<uint32_t> w(size_t(4 * n) + 1, 0xDEADBEEFu);
          cpu::philox_words(seed, counter, n, w.data());
          bool same = true;
          for (int64_t b = 0; b < n; ++b) {
            philox::Block r = philox::generate(seed, counter + uint64_t(b));
            for (int k = 0; k < 4; ++k) same = same && w[size_t(4 * b + k)] == r.w[k];
          }
          CHECK(same);
          CHECK(w[size_t(4 * n)] == 0xDEADBEEFu);  // nothing written past the n blocks
        }
  }
  set_vector_isa(before);
}

TEST_CASE("uniform_ and normal_ fill strided views and empty tensors as dense ones", "[random][edge]") {
  for (bool normal : {false, true}) {
    INFO((normal ? "normal_" : "uniform_"));
    auto fill = [&](Tensor t) {
      if (normal) normal_(t, 0.5, 2.0);
      else uniform_(t, -1.0, 3.0);
    };
    Tensor dense = empty({5, 7});
    manual_seed(41);
    fill(dense);
    // a transposed view [7, 5]: element i in row-major order takes number i, as a dense [7, 5]
    Tensor base = zeros({5, 7}), view = base.t();
    REQUIRE_FALSE(view.is_contiguous());
    manual_seed(41);
    fill(view);
    CHECK(view.contiguous().to_vector<float>() == dense.reshape({7, 5}).to_vector<float>());
    // every second column of [4, 10]: the others stay 0
    Tensor wide = zeros({4, 10}), cols = wide.slice(1, 0, 10, 2);
    manual_seed(41);
    fill(cols);
    CHECK(cols.contiguous().to_vector<float>() == dense.reshape({-1}).slice(0, 0, 20).to_vector<float>());
    CHECK(wide.slice(1, 1, 10, 2).abs().sum().item<float>() == 0.0f);
    // empty, also as a strided view: nothing drawn, the generator stays where it was
    manual_seed(41);
    GeneratorState before = default_generator().get_state();
    fill(empty({0, 3}));
    fill(empty({3, 0}).t());
    CHECK(default_generator().get_state() == before);
  }
}

TEST_CASE("dropout's one-pass forward gives the composed form's mask and output bits", "[random][dropout]") {
  // the composed form: uniforms, layout copy, compare, cast, scale, product (Backend's default)
  Backend& cpu = backend_for(kCPU);
  auto laid = [](const Tensor& t, bool cl) { return cl ? t.permute({0, 2, 3, 1}).contiguous().permute({0, 3, 1, 2}) : t.contiguous(); };
  manual_seed(31);
  Tensor base = randn({3, 20, 5, 7});
  base.select(1, 2).fill_(NAN);  // NaN times 0 stays NaN
  base.select(1, 3).fill_(INFINITY);
  for (DType dt : {DType::f32, DType::bf16})
    for (bool cl : {false, true})
      for (double p : {0.1, 0.5, 0.97}) {
        INFO(dtype_name(dt) << (cl ? " channels-last" : " contiguous") << " p " << p);
        Tensor x = laid(base.to(dt), cl);
        Tensor y1 = laid(empty(x.shape(), {.dtype = dt}), cl), y2 = laid(empty(x.shape(), {.dtype = dt}), cl);
        Tensor m1 = laid(empty(x.shape()), cl), m2 = laid(empty(x.shape()), cl);
        REQUIRE(cpu::dropout_one_pass(y1, m1, x, p, 77, 5));  // the one-pass kernel: it takes these
        cpu.Backend::dropout_forward(y2, m2, x, p, 77, 5);
        CHECK(m1.to_vector<float>() == m2.to_vector<float>());
        std::vector<double> a = y1.to_vector<double>(), b = y2.to_vector<double>();
        bool same = true;
        for (size_t i = 0; i < a.size(); ++i) same = same && (a[i] == b[i] || (std::isnan(a[i]) && std::isnan(b[i])));
        CHECK(same);
        const double kept = m1.ne(0.0).to(DType::f64).mean().item<double>();
        CHECK(kept == Approx(1 - p).margin(0.05));
      }
}

TEST_CASE("dropout with a one-pass kernel keeps no mask: its backward draws the same mask again, with the saved "
          "mask's bits",
          "[random][dropout]") {
  Backend& cpu = backend_for(kCPU);
  auto laid = [](const Tensor& t, bool cl) { return cl ? t.permute({0, 2, 3, 1}).contiguous().permute({0, 3, 1, 2}) : t.contiguous(); };
  auto same_bits = [](const Tensor& a, const Tensor& b) {
    std::vector<double> u = a.to_vector<double>(), v = b.to_vector<double>();
    bool same = u.size() == v.size();
    for (size_t i = 0; same && i < u.size(); ++i)
      same = (u[i] == v[i] && std::signbit(u[i]) == std::signbit(v[i])) || (std::isnan(u[i]) && std::isnan(v[i]));
    return same;
  };
  manual_seed(43);
  Tensor base = randn({3, 20, 5, 7}), gbase = randn({3, 20, 5, 7});
  gbase.select(1, 2).fill_(NAN);  // NaN and inf gradients where the mask is 0 stay NaN
  gbase.select(1, 3).fill_(-INFINITY);
  for (DType dt : {DType::f32, DType::bf16})
    for (bool x_cl : {false, true})
      for (bool g_cl : {false, true}) {
        INFO(dtype_name(dt) << " x " << (x_cl ? "channels-last" : "contiguous") << ", g "
                            << (g_cl ? "channels-last" : "contiguous"));
        Tensor x = laid(base.to(dt), x_cl).requires_grad_(), g = laid(gbase.to(dt), g_cl);
        Tensor y = dropout(x, 0.3);
        const DropoutArgs& a = y.grad_fn()->args<DropoutArgs>();
        // no mask where y takes x's layout (a channels-last x only where the backend keeps
        // the layout: bf16 on AMX); the backward's pass runs in g's layout
        CHECK(a.mask_saved == (y.strides() != x.strides()));
        CHECK(a.p == 0.3);
        // the mask and output the saved-mask form writes for the same uniforms
        Tensor y2 = laid(empty(x.shape(), {.dtype = dt}), x_cl), m2 = laid(empty(x.shape()), x_cl);
        cpu.Backend::dropout_forward(y2, m2, x.detach(), 0.3, a.seed, a.offset);
        CHECK(same_bits(y, y2));
        Tensor gx = autograd::grad({y}, {x}, {g}, {.retain_graph = true})[0];
        Tensor want = laid(empty(x.shape(), {.dtype = dt}), g_cl);
        cpu.binary(BinaryOp::mul, want, g, m2);  // g m rounded once, as the saved-mask backward did
        CHECK(gx.dtype() == dt);
        CHECK(same_bits(gx, want));
        // a gradient of another layout (a transposed view), and one that builds a graph
        Tensor gt = g.transpose(2, 3).contiguous().transpose(2, 3);
        CHECK(same_bits(autograd::grad({y}, {x}, {gt}, {.retain_graph = true})[0], want));
        Tensor gg = g.detach().to(DType::f32).requires_grad_();
        Tensor gx2 = autograd::grad({y}, {x}, {gg.to(dt)}, {.retain_graph = true, .create_graph = true})[0];
        CHECK(same_bits(gx2.detach().to(DType::f32), want.to(DType::f32)));
        // and its gradient with respect to g: the mask (in g's dtype: bf16 rounds 1 / 0.7)
        Tensor mg = autograd::grad({gx2.to(DType::f32).sum()}, {gg})[0];
        CHECK(same_bits(mg, m2.to(dt).to(DType::f32)));
      }
  // a sum's gradient (expanded ones): x.grad is the mask itself
  Tensor x = randn({1000}).requires_grad_();
  Tensor y = dropout(x, 0.25);
  const DropoutArgs a = y.grad_fn()->args<DropoutArgs>();
  y.sum().backward();
  Tensor y2 = empty({1000}), m2 = empty({1000});
  cpu.Backend::dropout_forward(y2, m2, x.detach(), 0.25, a.seed, a.offset);
  CHECK(x.grad().to_vector<float>() == m2.to_vector<float>());
  // f64 and strided inputs keep the mask; a strided x draws the mask of its logical order
  Tensor xd = randn({6, 9}, {.dtype = DType::f64}).requires_grad_();
  CHECK(dropout(xd, 0.5).grad_fn()->args<DropoutArgs>().mask_saved);
  Tensor xs = randn({9, 6}).t().requires_grad_(), xc = xs.detach().contiguous().requires_grad_();
  Generator gen1(5), gen2(5);
  Tensor ys = dropout(xs, 0.5, gen1), yc = dropout(xc, 0.5, gen2);
  CHECK(ys.grad_fn()->args<DropoutArgs>().mask_saved);
  CHECK_FALSE(yc.grad_fn()->args<DropoutArgs>().mask_saved);
  CHECK(ys.to_vector<float>() == yc.to_vector<float>());
  ys.sum().backward();
  yc.sum().backward();
  CHECK(xs.grad().to_vector<float>() == xc.grad().to_vector<float>());
}

// PyTorch's dropout is x * mask * (1 / (1 - p)) (torch.nn.functional.dropout: a dropped inf
// or NaN is NaN, a kept one stays; the gradient is mask * scale), checked on the one-pass path
// with the mask that backward draws again; an empty input gives empty results.
TEST_CASE("dropout on the one-pass path follows PyTorch's rule for inf, NaN and empty inputs", "[random][dropout][edge]") {
  const float inf = INFINITY, nan = NAN;
  std::vector<float> xs;
  for (int i = 0; i < 16; ++i) xs.insert(xs.end(), {inf, -inf, nan, 1.5f});
  manual_seed(44);
  Tensor x = from_vector(xs).requires_grad_();
  Tensor y = dropout(x, 0.5);
  y.sum().backward();
  std::vector<float> yv = y.to_vector<float>(), g = x.grad().to_vector<float>();
  int kept = 0, dropped = 0;
  for (size_t i = 0; i < xs.size(); ++i) {
    INFO("element " << i << " x " << xs[i] << " y " << yv[i] << " grad " << g[i]);
    REQUIRE((g[i] == 0.0f || g[i] == 2.0f));  // mask * scale
    const float expect = xs[i] * (g[i] / 2.0f) * 2.0f;  // x * mask * scale
    if (std::isnan(expect)) CHECK(std::isnan(yv[i]));
    else CHECK(yv[i] == expect);
    (g[i] == 0.0f ? dropped : kept)++;
  }
  CHECK(kept > 10);
  CHECK(dropped > 10);  // both kinds of every value were seen
  Tensor e = empty({0, 3}).requires_grad_();
  Tensor ye = dropout(e, 0.5);
  ye.sum().backward();
  CHECK(ye.shape() == Dims{0, 3});
  CHECK(e.grad().shape() == Dims{0, 3});
}
