// optim::GradScaler (optim/grad_scaler.h) and Backend::amp_unscale / amp_update_scale on the
// CPU: the skip / grow / backoff sequence of PyTorch 1.13's GradScaler on a scripted series of
// overflows (reference/grad_scaler.inc, written by reference/grad_scaler.py), exact unscaled
// values, inf/-inf/NaN found anywhere in any gradient of any dtype, the stage errors, the
// disabled scaler, and the state through a checkpoint file.
#include <catch2/catch.hpp>
#include <reel/reel.h>

#include <cmath>
#include <cstdio>
#include <limits>
#include <string>
#include <vector>

#include "reference/grad_scaler_ref.h"

using namespace reel;

namespace {


std::string tmp_path(const std::string& name) { return "/tmp/reel_test_grad_scaler_" + name; }

Tensor from_doubles(const std::vector<double>& v, const Dims& shape, DType dtype = DType::f32) {
  return from_vector<double>(v, shape).to(dtype);
}

void check_close(const Tensor& t, const std::vector<double>& expected, double tol) {
  std::vector<double> got = t.to_vector<double>();
  REQUIRE(got.size() == expected.size());
  for (size_t i = 0; i < got.size(); ++i) {
    INFO("element " << i);
    CHECK(got[i] == Approx(expected[i]).margin(tol).epsilon(tol));
  }
}

// Sets element `index` of p's (contiguous) gradient to v.
void poke_grad(const Tensor& p, int64_t index, double v) {
  Tensor g = p.grad();
  REQUIRE(g.defined());
  REQUIRE(g.is_contiguous());
  if (g.dtype() == DType::f64) g.data<double>()[index] = v;
  else g.data<float>()[index] = float(v);
}

// A tiny model: y = x W^T + b, loss = mse
struct Lin {
  Tensor w, b, x, y;
  explicit Lin(DType dt = DType::f32)
      : w(from_doubles(kRefW0, {kRefOut, kRefIn}, dt).requires_grad_()),
        b(from_doubles(kRefB0, {kRefOut}, dt).requires_grad_()),
        x(from_doubles(kRefX, {kRefN, kRefIn}, dt)),
        y(from_doubles(kRefY, {kRefN, kRefOut}, dt)) {}
  Tensor loss() const { return mse_loss(linear(x, w, b), y); }
};

// The bit patterns of a tensor's elements, for exact comparisons (NaN included).
std::vector<double> values(const Tensor& t) { return t.to(DType::f64).to_vector<double>(); }

}  // namespace

TEST_CASE("GradScaler follows PyTorch 1.13's skip, backoff and growth on a scripted series of overflows",
          "[grad_scaler]") {
  Lin m;
  optim::SGD opt({m.w, m.b}, {.lr = kRefLr, .momentum = kRefMomentum});
  optim::GradScaler scaler({.init_scale = kRefInitScale, .growth_factor = kRefGrowth, .backoff_factor = kRefBackoff,
                            .growth_interval = kRefInterval});
  REQUIRE(scaler.is_enabled());
  for (const RefStep& r : kRefSteps) {
    INFO("step " << r.step);
    opt.zero_grad();
    Tensor loss = m.loss();
    CHECK(loss.item<float>() == Approx(r.loss).epsilon(1e-6));
    Tensor scaled = scaler.scale(loss);
    CHECK(scaled.shape() == loss.shape());
    CHECK(scaled.item<float>() == Approx(r.loss * r.scale_before).epsilon(1e-6));
    scaled.backward();
    if (r.inject.param >= 0) poke_grad(r.inject.param == 0 ? m.w : m.b, r.inject.index, r.inject.value);
    CHECK(scaler.get_scale() == r.scale_before);
    if (r.unscale) scaler.unscale(opt);
    CHECK(scaler.step(opt) == r.stepped);
    if (r.new_scale != 0) scaler.update(r.new_scale);
    else scaler.update();
    CHECK(scaler.get_scale() == r.scale_after);
    CHECK(scaler.growth_tracker() == r.tracker);
    check_close(m.w.flatten(), r.weight, 2e-6);
    check_close(m.b, r.bias, 2e-6);
  }
  optim::NamedTensors st = scaler.state_dict();
  REQUIRE(st.size() == 5);
  CHECK(st[0].first == "scale");
  CHECK(st[0].second.item<double>() == kRefFinalScale);
  CHECK(st[4].first == "growth_tracker");
  CHECK(st[4].second.item<int64_t>() == kRefFinalTracker);
}

TEST_CASE("GradScaler: a skipped step leaves parameters and optimizer state untouched", "[grad_scaler]") {
  Lin m;
  optim::Adam opt({m.w, m.b}, {.lr = 0.01});
  optim::GradScaler scaler({.init_scale = 256.0, .growth_interval = 2});
  scaler.scale(m.loss()).backward();
  CHECK(scaler.step(opt));
  scaler.update();
  std::vector<double> w = values(m.w), b = values(m.b);
  opt.zero_grad();
  scaler.scale(m.loss()).backward();
  poke_grad(m.b, 1, kNaN);
  CHECK_FALSE(scaler.step(opt));
  CHECK(opt.steps_taken() == 1);
  CHECK(values(m.w) == w);
  CHECK(values(m.b) == b);
  scaler.update();
  CHECK(scaler.get_scale() == 128.0);
  CHECK(scaler.growth_tracker() == 0);
}

TEST_CASE("GradScaler unscales to exactly g * float(1 / S), across tensors and threads", "[grad_scaler]") {
  // S = 3: 1/S is not a power of two, so every product rounds; sizes cover the parallel
  // split (over 32768 elements in all), tails and tensors of one element.
  std::vector<Tensor> params;
  for (int64_t n : {1, 7, 40000, 33, 4096, 5})
    params.push_back(zeros({n}).requires_grad_());
  optim::SGD opt(params, {.lr = 0.1});
  optim::GradScaler scaler({.init_scale = 3.0});
  Tensor probe = scalar_tensor(1.0).requires_grad_();
  (void)scaler.scale(probe);  // makes S
  std::vector<std::vector<float>> before;
  for (Tensor& p : params) {
    Tensor g = randn(p.shape()) * 1000.0;
    p.set_grad(g);
    before.push_back(g.to_vector<float>());
  }
  scaler.unscale(opt);
  const float inv = float(1.0 / 3.0);
  for (size_t t = 0; t < params.size(); ++t) {
    std::vector<float> got = params[t].grad().to_vector<float>();
    for (size_t i = 0; i < got.size(); ++i) {
      float want = before[t][i] * inv;
      if (got[i] != want) {
        INFO("tensor " << t << " element " << i);
        CHECK(got[i] == want);
      }
    }
  }
  CHECK(scaler.step(opt));
  scaler.update();
}

TEST_CASE("amp_unscale finds inf, -inf and NaN at any position of any gradient", "[grad_scaler]") {
  Backend& be = backend_for(kCPU);
  for (DType dt : {DType::f32, DType::f64, DType::f16, DType::bf16}) {
    std::vector<Tensor> grads;
    for (int64_t n : {1, 9, 40000, 17, 300})
      grads.push_back((rand({n}) * 2.0 - 1.0).to(dt));
    std::vector<std::vector<double>> orig;
    for (const Tensor& g : grads) orig.push_back(values(g));
    Tensor inv = scalar_tensor(1.0);  // values stay as they are: only the check runs
    Tensor found = zeros({});
    be.amp_unscale(grads, found, inv);
    CHECK(found.item<float>() == 0.0f);
    for (size_t t = 0; t < grads.size(); ++t) {
      int64_t n = grads[t].numel();
      for (int64_t pos : {int64_t(0), n / 2, n - 1, std::min<int64_t>(n - 1, 8), std::min<int64_t>(n - 1, 31)})
        for (double bad : {kInf, -kInf, kNaN}) {
          INFO(dtype_name(dt) << " tensor " << t << " position " << pos << " value " << bad);
          Tensor one = grads[t].narrow(0, pos, 1);
          one.fill_(bad);
          found.zero_();
          be.amp_unscale(grads, found, inv);
          CHECK(found.item<float>() == 1.0f);
          be.amp_unscale(grads, found, inv);  // never cleared: flags accumulate
          CHECK(found.item<float>() == 1.0f);
          one.fill_(orig[t][size_t(pos)]);
        }
    }
    // the extremes that are finite: largest, smallest subnormal, -0
    double big = dt == DType::f64 ? std::numeric_limits<double>::max()
                 : dt == DType::f16 ? 65504.0
                 : dt == DType::bf16 ? 3.3895313892515355e38
                                     : double(std::numeric_limits<float>::max());
    grads[2].narrow(0, 5, 1).fill_(big);
    grads[2].narrow(0, 6, 1).fill_(-big);
    grads[2].narrow(0, 7, 1).fill_(-0.0);
    grads[2].narrow(0, 8, 1).fill_(dt == DType::f64 ? 4.9e-324 : dt == DType::f16 ? 6e-8 : 1.4e-45);
    found.zero_();
    be.amp_unscale(grads, found, inv);
    CHECK(found.item<float>() == 0.0f);
  }
}

TEST_CASE("amp_unscale computes f16 and bf16 in f32 and rounds back, f64 in f64", "[grad_scaler]") {
  Backend& be = backend_for(kCPU);
  Tensor inv = scalar_tensor(0.1);  // f32 0.1, not a power of two
  const float invf = float(0.1);
  Tensor src = randn({1000}) * 50.0;
  Tensor h = src.to(DType::f16), bh = src.to(DType::bf16), d = src.to(DType::f64), f = src.clone();
  std::vector<Tensor> grads = {h, bh, d, f};
  std::vector<std::vector<double>> before;
  for (const Tensor& g : grads) before.push_back(values(g));
  Tensor found = zeros({});
  be.amp_unscale(grads, found, inv);
  CHECK(found.item<float>() == 0.0f);
  std::vector<double> gh = values(h), gbh = values(bh), gd = values(d), gf = values(f);
  for (size_t i = 0; i < 1000; ++i) {
    INFO("element " << i);
    CHECK(gh[i] == double(float(Half(float(before[0][i]) * invf))));
    CHECK(gbh[i] == double(float(BFloat16(float(before[1][i]) * invf))));
    CHECK(gd[i] == before[2][i] * double(invf));
    CHECK(gf[i] == double(float(before[3][i]) * invf));
  }
  // inf and NaN, in the vector body and in the tail: found, and kept inf and NaN
  for (const Tensor& g : grads)
    for (int64_t pos : {3, 998}) {
      g.narrow(0, pos, 1).fill_(kNaN);
      g.narrow(0, pos - 1, 1).fill_(-kInf);
    }
  found.zero_();
  be.amp_unscale(grads, found, inv);
  CHECK(found.item<float>() == 1.0f);
  for (const Tensor& g : grads) {
    INFO(dtype_name(g.dtype()));
    std::vector<double> v = values(g);
    for (int64_t pos : {3, 998}) {
      CHECK(std::isnan(v[size_t(pos)]));
      CHECK(v[size_t(pos - 1)] == -kInf);
    }
  }
}

TEST_CASE("amp_update_scale: backoff, growth at the interval, no growth to inf", "[grad_scaler]") {
  Backend& be = backend_for(kCPU);
  Tensor s = scalar_tensor(8.0), t = scalar_tensor(0.0, {.dtype = DType::i32});
  Tensor clean = zeros({}), bad = ones({});
  be.amp_update_scale(s, t, clean, 2.0, 0.5, 2);
  CHECK(s.item<float>() == 8.0f);
  CHECK(t.item<int32_t>() == 1);
  be.amp_update_scale(s, t, clean, 2.0, 0.5, 2);
  CHECK(s.item<float>() == 16.0f);
  CHECK(t.item<int32_t>() == 0);
  be.amp_update_scale(s, t, clean, 2.0, 0.5, 2);
  be.amp_update_scale(s, t, bad, 2.0, 0.5, 2);
  CHECK(s.item<float>() == 8.0f);
  CHECK(t.item<int32_t>() == 0);
  s.fill_(3e38);
  be.amp_update_scale(s, t, clean, 2.0, 0.5, 1);
  CHECK(s.item<float>() == 3e38f);  // 6e38 would be inf in f32: kept
  CHECK(t.item<int32_t>() == 0);
  s.fill_(1.0);
  be.amp_update_scale(s, t, clean, 1.5, 0.25, 1);  // f64 products, rounded to f32
  CHECK(s.item<float>() == 1.5f);
  be.amp_update_scale(s, t, bad, 1.5, 0.3, 1);
  CHECK(s.item<float>() == float(1.5 * 0.3));
}

TEST_CASE("GradScaler with f64 parameters and losses", "[grad_scaler]") {
  Lin m(DType::f64);
  optim::SGD opt({m.w, m.b}, {.lr = 0.05});
  optim::GradScaler scaler({.init_scale = 1024.0, .growth_interval = 1});
  Tensor loss = m.loss();
  Tensor scaled = scaler.scale(loss);
  CHECK(scaled.dtype() == DType::f64);
  CHECK(scaled.item<double>() == loss.item<double>() * 1024.0);
  scaled.backward();
  std::vector<double> scaled_grad = values(m.w.grad());
  scaler.unscale(opt);
  std::vector<double> g = values(m.w.grad());
  // the reference: gradients of the unscaled loss (1/1024 is exact)
  Lin ref(DType::f64);
  ref.loss().backward();
  std::vector<double> want = values(ref.w.grad());
  for (size_t i = 0; i < g.size(); ++i) {
    CHECK(g[i] == scaled_grad[i] * (1.0 / 1024.0));
    CHECK(g[i] == Approx(want[i]).epsilon(1e-12));
  }
  CHECK(scaler.step(opt));
  scaler.update();
  CHECK(scaler.get_scale() == 2048.0);
  opt.zero_grad();
  scaler.scale(m.loss()).backward();
  poke_grad(m.w, 3, -kInf);
  CHECK_FALSE(scaler.step(opt));
  scaler.update();
  CHECK(scaler.get_scale() == 1024.0);
}

TEST_CASE("GradScaler::scale promotes f16 and bf16 losses to f32 and keeps the tape", "[grad_scaler]") {
  optim::GradScaler big;  // S = 65536, above f16's largest value: the product is f32
  Tensor h = big.scale(tensor({1.0, 2.0}).to(DType::f16));
  CHECK(h.dtype() == DType::f32);
  CHECK(h.to_vector<float>() == std::vector<float>{65536.0f, 131072.0f});
  CHECK(big.scale(tensor({1.0}).to(DType::bf16)).dtype() == DType::f32);
  CHECK(big.scale_tensor().dtype() == DType::f32);
  CHECK(big.scale_tensor().dim() == 0);
  // (the gradient flowing back into an f16 loss is f16 again: S must fit f16 there, as in PyTorch)
  optim::GradScaler scaler({.init_scale = 1024.0});
  Tensor x = tensor({0.5, -2.0, 3.0}).requires_grad_();
  Tensor loss = (x * x).sum().to(DType::f16);  // (f16 arithmetic is GPU-only: the CPU stores f16)
  Tensor scaled = scaler.scale(loss);
  CHECK(scaled.dtype() == DType::f32);
  CHECK(scaled.item<float>() == 13.25f * 1024.0f);
  scaled.backward();
  check_close(x.grad(), {1024.0, -4096.0, 6144.0}, 1e-6);
}

TEST_CASE("GradScaler: each optimizer skips on its own overflow, update combines them", "[grad_scaler]") {
  Lin m;
  optim::SGD opt_w({m.w}, {.lr = 0.1}), opt_b({m.b}, {.lr = 0.1});
  optim::GradScaler scaler({.init_scale = 64.0, .growth_interval = 1});
  scaler.scale(m.loss()).backward();
  poke_grad(m.w, 0, kInf);
  std::vector<double> b = values(m.b);
  CHECK_FALSE(scaler.step(opt_w));
  CHECK(scaler.step(opt_b));
  CHECK(values(m.b) != b);
  scaler.update();
  CHECK(scaler.get_scale() == 32.0);  // backoff: one of the two found inf
}

TEST_CASE("GradScaler refuses calls out of order, as PyTorch does", "[grad_scaler]") {
  Lin m;
  optim::SGD opt({m.w, m.b}, {.lr = 0.1});
  optim::GradScaler scaler;
  CHECK_THROWS_WITH(scaler.unscale(opt), Catch::Contains("GradScaler::unscale") && Catch::Contains("scale(loss)"));
  CHECK_THROWS_WITH(scaler.step(opt), Catch::Contains("GradScaler::step") && Catch::Contains("no scale yet"));
  CHECK_THROWS_WITH(scaler.update(), Catch::Contains("GradScaler::update") && Catch::Contains("no scale yet"));
  {  // no gradients yet: the unscale inside step() records no device, as in PyTorch
    optim::GradScaler early;
    Tensor scaled = early.scale(m.loss());
    CHECK_THROWS_WITH(early.step(opt), Catch::Contains("GradScaler::step") && Catch::Contains("no inf checks"));
    CHECK_THROWS_WITH(early.update(), Catch::Contains("GradScaler::update") && Catch::Contains("no inf checks"));
  }
  scaler.scale(m.loss()).backward();
  scaler.unscale(opt);
  CHECK_THROWS_WITH(scaler.unscale(opt), Catch::Contains("GradScaler::unscale") &&
                                             Catch::Contains("already been called on this optimizer (SGD)") &&
                                             Catch::Contains("test_grad_scaler.cpp"));
  CHECK(scaler.step(opt));
  CHECK_THROWS_WITH(scaler.step(opt), Catch::Contains("step() has already been called"));
  CHECK_THROWS_WITH(scaler.unscale(opt), Catch::Contains("unscale() is being called after step()"));
  scaler.update();
  // a new iteration starts clean
  opt.zero_grad();
  scaler.scale(m.loss()).backward();
  scaler.unscale(opt);
  CHECK(scaler.step(opt));
  CHECK_THROWS_WITH(scaler.update(0.0), Catch::Contains("new_scale is 0, expected a positive finite number"));
  scaler.update(1.0e3);
  CHECK(scaler.get_scale() == 1000.0);
  CHECK_THROWS_WITH(scaler.scale(tensor({1.0}).to(DType::i64)), Catch::Contains("floating-point loss"));
}

TEST_CASE("GradScaler refuses f16 gradients and bad options", "[grad_scaler]") {
  Tensor p = zeros({3}, {.dtype = DType::f16}).requires_grad_();
  Tensor q = zeros({3}).requires_grad_();
  optim::SGD opt({q, p}, {.lr = 0.1});
  optim::GradScaler scaler;
  (void)scaler.scale(scalar_tensor(1.0));
  p.set_grad(ones({3}, {.dtype = DType::f16}));
  q.set_grad(full({3}, 4.0));
  CHECK_THROWS_WITH(scaler.unscale(opt), Catch::Contains("parameter 1 of group 0 has an f16 gradient"));
  CHECK(q.grad().to_vector<float>() == std::vector<float>{4, 4, 4});  // nothing changed
  using O = optim::GradScalerOptions;
  CHECK_THROWS_WITH(optim::GradScaler(O{.growth_factor = 1.0}), Catch::Contains("growth_factor is 1, expected > 1"));
  CHECK_THROWS_WITH(optim::GradScaler(O{.backoff_factor = 1.0}), Catch::Contains("backoff_factor is 1"));
  CHECK_THROWS_WITH(optim::GradScaler(O{.growth_interval = 0}), Catch::Contains("growth_interval is 0"));
  CHECK_THROWS_WITH(optim::GradScaler(O{.init_scale = -1.0}), Catch::Contains("init_scale is -1"));
  CHECK_NOTHROW(optim::GradScaler(O{.growth_factor = 0.5, .enabled = false}));  // checked only when enabled
}

TEST_CASE("A disabled GradScaler passes the loss through and just steps", "[grad_scaler]") {
  Lin m;
  optim::SGD opt({m.w, m.b}, {.lr = 0.1});
  optim::GradScaler scaler({.enabled = false});
  CHECK_FALSE(scaler.is_enabled());
  Tensor loss = m.loss();
  Tensor scaled = scaler.scale(loss);
  CHECK(scaled.impl() == loss.impl());
  scaled.backward();
  std::vector<double> g = values(m.w.grad());
  scaler.unscale(opt);
  scaler.unscale(opt);  // no stages when disabled
  CHECK(values(m.w.grad()) == g);
  std::vector<double> w = values(m.w);
  CHECK(scaler.step(opt));
  CHECK(values(m.w) != w);
  scaler.update();
  scaler.update(5.0);
  CHECK(scaler.get_scale() == 1.0);
  CHECK(scaler.growth_tracker() == 0);
  CHECK(scaler.state_dict().empty());
  CHECK_FALSE(scaler.scale_tensor().defined());
  // even a gradient with inf steps: nothing checks it
  poke_grad(m.w, 0, kInf);
  CHECK(scaler.step(opt));
}

TEST_CASE("GradScaler state: state_dict round trip and validation", "[grad_scaler]") {
  optim::GradScaler a({.init_scale = 512.0, .growth_factor = 3.0, .backoff_factor = 0.25, .growth_interval = 5});
  Lin m;
  optim::SGD opt({m.w, m.b}, {.lr = 0.01});
  for (int i = 0; i < 3; ++i) {  // 512 -> backoff 128 -> tracker 2
    opt.zero_grad();
    a.scale(m.loss()).backward();
    if (i == 0) poke_grad(m.w, 1, kNaN);
    a.step(opt);
    a.update();
  }
  REQUIRE(a.get_scale() == 128.0);
  REQUIRE(a.growth_tracker() == 2);
  optim::NamedTensors st = a.state_dict();
  // loaded before the first scale(): the scale and tracker the scaler starts from
  optim::GradScaler b;
  b.load_state_dict(st);
  CHECK(b.get_scale() == 128.0);
  CHECK(b.growth_tracker() == 2);
  CHECK(b.options().growth_factor == 3.0);
  CHECK(b.options().backoff_factor == 0.25);
  CHECK(b.options().growth_interval == 5);
  CHECK(b.scale(scalar_tensor(1.0)).item<float>() == 128.0f);
  CHECK(b.growth_tracker() == 2);
  // loaded into a scaler that has a scale already
  optim::GradScaler c({.init_scale = 4.0});
  (void)c.scale(scalar_tensor(1.0));
  c.load_state_dict(st);
  CHECK(c.get_scale() == 128.0);
  CHECK(c.growth_tracker() == 2);

  auto with = [&](const std::string& name, const Tensor& v) {
    optim::NamedTensors s = st;
    for (auto& [n, t] : s)
      if (n == name) t = v;
    return s;
  };
  optim::GradScaler d({.init_scale = 4.0});
  CHECK_THROWS_WITH(d.load_state_dict({}, "x.safetensors"),
                    Catch::Contains("load from x.safetensors: the state is empty") &&
                        Catch::Contains("disabled GradScaler"));
  CHECK_THROWS_WITH(d.load_state_dict(with("growth_tracker", scalar_tensor(5, {.dtype = DType::i64}))),
                    Catch::Contains("growth_tracker is 5, expected in [0, growth_interval = 5)"));
  CHECK_THROWS_WITH(d.load_state_dict(with("scale", scalar_tensor(-2.0, {.dtype = DType::f64}))),
                    Catch::Contains("scale is -2, expected a positive finite number"));
  CHECK_THROWS_WITH(d.load_state_dict(with("growth_interval", scalar_tensor(2.5, {.dtype = DType::f64}))),
                    Catch::Contains("\"growth_interval\" is f64 2.5, expected an integer"));
  CHECK_THROWS_WITH(d.load_state_dict(with("scale", zeros({2}))), Catch::Contains("\"scale\" has shape [2], expected []"));
  optim::NamedTensors extra = st;
  extra.emplace_back("growth", scalar_tensor(1.0));
  CHECK_THROWS_WITH(d.load_state_dict(extra), Catch::Contains("unexpected \"growth\""));
  optim::NamedTensors missing(st.begin(), st.end() - 1);
  CHECK_THROWS_WITH(d.load_state_dict(missing), Catch::Contains("\"growth_tracker\" is missing"));
  CHECK(d.get_scale() == 4.0);  // nothing was loaded
  optim::GradScaler off({.enabled = false});
  CHECK_NOTHROW(off.load_state_dict(st));  // ignored, as PyTorch
  CHECK(off.get_scale() == 1.0);
}

TEST_CASE("GradScaler state travels in a training checkpoint", "[grad_scaler][checkpoint]") {
  std::string path = tmp_path("ckpt.safetensors");
  Lin m;
  optim::SGD opt({m.w, m.b}, {.lr = 0.01, .momentum = 0.9});
  optim::GradScaler scaler({.init_scale = 1024.0, .growth_interval = 4});
  for (int i = 0; i < 5; ++i) {  // clean, -inf (backoff), then three clean steps
    opt.zero_grad();
    scaler.scale(m.loss()).backward();
    if (i == 1) poke_grad(m.b, 0, -kInf);
    scaler.step(opt);
    scaler.update();
  }
  REQUIRE(scaler.get_scale() == 512.0);
  REQUIRE(scaler.growth_tracker() == 3);
  checkpoint::save(path, {.optimizer = &opt, .scaler = &scaler, .step = 5});

  optim::SGD opt2({m.w.detach().clone().requires_grad_(), m.b.detach().clone().requires_grad_()},
                  {.lr = 0.01, .momentum = 0.9});
  optim::GradScaler scaler2({.init_scale = 2.0, .growth_interval = 4});
  checkpoint::TrainingState run{.optimizer = &opt2, .scaler = &scaler2};
  checkpoint::load(path, run);
  CHECK(run.step == 5);
  CHECK(scaler2.get_scale() == scaler.get_scale());
  CHECK(scaler2.growth_tracker() == scaler.growth_tracker());
  CHECK(scaler2.options().growth_interval == 4);

  // mismatches, each named, nothing loaded
  optim::GradScaler other({.init_scale = 8.0});
  checkpoint::TrainingState no_scaler{.optimizer = &opt2};
  CHECK_THROWS_WITH(checkpoint::load(path, no_scaler),
                    Catch::Contains("it holds GradScaler state, but no GradScaler was given"));
  std::string plain = tmp_path("plain.safetensors");
  checkpoint::save(plain, {.optimizer = &opt});
  checkpoint::TrainingState want_scaler{.optimizer = &opt2, .scaler = &other};
  CHECK_THROWS_WITH(checkpoint::load(plain, want_scaler),
                    Catch::Contains("it holds no GradScaler state, but one was given to restore"));
  optim::GradScaler disabled({.enabled = false});
  checkpoint::TrainingState into_disabled{.optimizer = &opt2, .scaler = &disabled};
  CHECK_THROWS_WITH(checkpoint::load(path, into_disabled),
                    Catch::Contains("state of an enabled GradScaler, but the GradScaler given is disabled"));
  std::string off_path = tmp_path("off.safetensors");
  checkpoint::save(off_path, {.optimizer = &opt, .scaler = &disabled});
  CHECK_THROWS_WITH(checkpoint::load(off_path, want_scaler),
                    Catch::Contains("state of a disabled GradScaler (no scale), but the GradScaler given is enabled"));
  CHECK_NOTHROW(checkpoint::load(off_path, into_disabled));
  CHECK(other.get_scale() == 8.0);
  for (const std::string& p : {path, plain, off_path}) std::remove(p.c_str());
}
