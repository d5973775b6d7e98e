// Optimizers, schedulers and gradient clipping against PyTorch 1.13: the expected
// numbers below were computed with torch (float32) on the same inputs.
#include <catch2/catch.hpp>
#include <reel/reel.h>

#include <cmath>
#include <cstdio>
#include <functional>
#include <memory>
#include <string>
#include <vector>

using namespace reel;

namespace {

std::string tmp_path(const std::string& name) { return "/tmp/reel_test_optim_" + name; }

// The two parameters every trajectory starts from, and the loss
// sum((w A - T)^2) + sum(sin(b) b).
struct Problem {
  Tensor w = tensor({{0.5, -0.3, 0.8}, {-0.1, 0.2, -0.7}}).requires_grad_();
  Tensor b = tensor({0.1, -0.4, 0.3}).requires_grad_();
  Tensor A = tensor({{1.0, 2.0, -1.0}, {0.5, -1.5, 2.0}});
  Tensor T = tensor({{0.2, -0.1, 0.3}, {0.4, 0.0, -0.2}});
  Tensor loss() const { return square(w * A - T).sum() + (sin(b) * b).sum(); }
  Tensor loss_w_only() const { return square(w * A - T).sum(); }
};

void check_values(const Tensor& t, const std::vector<double>& expected, double tol = 2e-6) {
  std::vector<double> got = t.to_vector<double>();
  REQUIRE(got.size() == expected.size());
  for (size_t i = 0; i < got.size(); ++i) {
    INFO("element " << i);
    CHECK(got[i] == Approx(expected[i]).margin(tol).epsilon(tol));
  }
}

void run3(Problem& pb, optim::Optimizer& opt) {
  for (int s = 0; s < 3; ++s) {
    opt.zero_grad();
    pb.loss().backward();
    opt.step();
  }
}

struct Case {
  const char* what;
  std::function<std::unique_ptr<optim::Optimizer>(std::vector<Tensor>)> make;
  std::vector<double> w, b;
};

}  // namespace

TEST_CASE("optimizers follow PyTorch's trajectories for three steps", "[optim]") {
  using namespace optim;
  auto sgd = [](SGDOptions o) { return [o](std::vector<Tensor> p) { return std::make_unique<SGD>(p, o); }; };
  std::vector<Case> cases = {
      {"SGD lr .1", sgd({.lr = 0.1}),
       {0.353599995, -0.0520000011, 0.263199985, 0.0283625033, 0.0332750008, -0.104800001},
       {0.0512875393, -0.210489154, 0.155982986}},
      {"SGD momentum", sgd({.lr = 0.1, .momentum = 0.9}),
       {0.21859999, 0.181999996, -0.23180002, 0.141762495, -0.128724992, 0.456799984},
       {0.00639725802, -0.0375024341, 0.0239433926}},
      {"SGD momentum dampening wd", sgd({.lr = 0.1, .momentum = 0.9, .dampening = 0.1, .weight_decay = 0.01}),
       {0.227599069, 0.191028804, -0.19415082, 0.130297586, -0.122647651, 0.478420049},
       {0.00969591923, -0.0506080687, 0.033806812}},
      {"SGD nesterov wd", sgd({.lr = 0.05, .momentum = 0.8, .weight_decay = 0.1, .nesterov = true}),
       {0.305202216, 0.032805685, 0.116709314, 0.057240162, -0.0178096723, 0.0984057635},
       {0.0371848941, -0.15598388, 0.114440016}},
      {"SGD maximize", sgd({.lr = 0.1, .momentum = 0.5, .maximize = true}),
       {0.805400014, -1.91799998, 1.91979992, -0.300362527, 0.762725055, -4.58319998},
       {0.201203525, -0.770985723, 0.58974731}},
      {"Adam", [](std::vector<Tensor> p) { return std::make_unique<Adam>(p, AdamOptions{.lr = 0.01}); },
       {0.470038146, -0.270047396, 0.77000916, -0.0700112879, 0.170062348, -0.670017421},
       {0.0701574683, -0.370024264, 0.270035684}},
      {"Adam betas wd",
       [](std::vector<Tensor> p) {
         return std::make_unique<Adam>(p, AdamOptions{.lr = 0.02, .betas = {0.8, 0.99}, .weight_decay = 0.1});
       },
       {0.440307498, -0.240398213, 0.740075767, -0.0401099399, 0.140531242, -0.640143454},
       {0.0414301157, -0.340203583, 0.240300804}},
      {"Adam maximize",
       [](std::vector<Tensor> p) { return std::make_unique<Adam>(p, AdamOptions{.lr = 0.01, .maximize = true}); },
       {0.530026138, -0.330030084, 0.830008268, -0.130009949, 0.230035245, -0.730014443},
       {0.130048916, -0.430018544, 0.330024719}},
      {"AdamW",
       [](std::vector<Tensor> p) { return std::make_unique<AdamW>(p, AdamWOptions{.lr = 0.01, .weight_decay = 0.1}); },
       {0.468571872, -0.26918, 0.767642379, -0.0697416961, 0.16949445, -0.667950928},
       {0.0698899478, -0.368856519, 0.26916784}},
      {"Adamax",
       [](std::vector<Tensor> p) { return std::make_unique<Adamax>(p, AdamaxOptions{.lr = 0.01, .weight_decay = 0.05}); },
       {0.470492482, -0.270605862, 0.77011621, -0.0701630265, 0.170764834, -0.670235753},
       {0.0715418607, -0.370328307, 0.270471722}},
      {"RMSprop", [](std::vector<Tensor> p) { return std::make_unique<RMSprop>(p, RMSpropOptions{.lr = 0.01}); },
       {0.306899548, -0.116142303, 0.579111457, 0.118935794, 0.0309687462, -0.48676911},
       {5.90111293e-12, -0.194562361, 0.105812736}},
      {"RMSprop centered momentum wd",
       [](std::vector<Tensor> p) {
         return std::make_unique<RMSprop>(
             p, RMSpropOptions{.lr = 0.01, .weight_decay = 0.1, .momentum = 0.9, .centered = true});
       },
       {0.103227027, 0.0739355013, 0.348164797, 0.344370753, -0.141908631, -0.263212144},
       {-0.103924237, 0.0192927606, -0.0951455235}},
      {"RMSprop momentum",
       [](std::vector<Tensor> p) { return std::make_unique<RMSprop>(p, RMSpropOptions{.lr = 0.01, .momentum = 0.5}); },
       {0.215991154, -0.0310371667, 0.472479641, 0.224583492, -0.0446522608, -0.384115636},
       {-0.0298284329, -0.09669175, 0.014655293}},
  };
  for (const Case& c : cases) {
    SECTION(c.what) {
      Problem pb;
      auto opt = c.make({pb.w, pb.b});
      run3(pb, *opt);
      check_values(pb.w, c.w);
      check_values(pb.b, c.b);
      CHECK(opt->steps_taken() == 3);
    }
  }
}

TEST_CASE("a parameter without a gradient is skipped and keeps its own step count", "[optim]") {
  Problem pb;
  optim::Adam opt({pb.w, pb.b}, {.lr = 0.1});
  for (int s = 0; s < 3; ++s) {
    opt.zero_grad();
    (s == 0 ? pb.loss_w_only() : pb.loss()).backward();
    opt.step();
  }
  // b took 2 steps, w 3: two bias corrections in one step (torch: same schedule)
  check_values(pb.w, {0.213288963, -0.0197916776, 0.50138247, 0.198145688, -0.0671809167, -0.403541654});
  check_values(pb.b, {-0.0670058206, -0.20152694, 0.102774613});
}

TEST_CASE("parameter groups carry their own lr and weight decay", "[optim]") {
  Problem pb;
  optim::SGD opt({{.params = {pb.w}, .lr = 0.1}, {.params = {pb.b}, .lr = 0.01, .weight_decay = 0.1}},
                 {.lr = 0.05, .momentum = 0.9});
  REQUIRE(opt.param_groups().size() == 2);
  CHECK(opt.param_groups()[1].hyper.momentum == 0.9);
  run3(pb, opt);
  check_values(pb.w, {0.21859999, 0.181999996, -0.23180002, 0.141762495, -0.128724992, 0.456799984});
  check_values(pb.b, {0.0884645581, -0.355927497, 0.266224682});
}

TEST_CASE("zero_grad frees gradients by default or zeroes them", "[optim]") {
  Problem pb;
  optim::SGD opt({pb.w, pb.b}, {.lr = 0.1});
  pb.loss().backward();
  opt.zero_grad(false);
  REQUIRE(pb.w.grad().defined());
  CHECK(pb.w.grad().abs().sum().item<double>() == 0.0);
  opt.zero_grad();
  CHECK_FALSE(pb.w.grad().defined());
  CHECK_FALSE(pb.b.grad().defined());
  // a step without gradients changes nothing
  std::vector<float> before = pb.w.to_vector<float>();
  opt.step();
  CHECK(pb.w.to_vector<float>() == before);
}

TEST_CASE("the fused step over many tensors matches the composite formula", "[optim]") {
  // 4 tensors, one much larger than the rest, so the threads' equal shares cut across
  // tensor boundaries; an empty one among them
  manual_seed(7);
  std::vector<Tensor> ps = {randn({100003}), randn({0}), randn({257, 3}), randn({5})};
  std::vector<Tensor> gs = {randn({100003}), randn({0}), randn({257, 3}), randn({5})};
  std::vector<Tensor> ref;
  for (auto& p : ps) ref.push_back(p.clone());
  for (size_t i = 0; i < ps.size(); ++i) {
    ps[i].requires_grad_();
    ps[i].set_grad(gs[i]);
  }
  optim::Adam opt(ps, {.lr = 0.01, .weight_decay = 0.1});
  opt.step();
  opt.step();
  // two Adam steps by hand, in double
  for (size_t i = 0; i < ps.size(); ++i) {
    Tensor p = ref[i].to(DType::f64), g = gs[i].to(DType::f64);
    Tensor m = zeros_like(p), v = zeros_like(p);
    for (int t = 1; t <= 2; ++t) {
      Tensor d = g + p * 0.1;
      m = m * 0.9 + d * 0.1;
      v = v * 0.999 + d * d * 0.001;
      Tensor denom = sqrt(v) / std::sqrt(1 - std::pow(0.999, t)) + 1e-8;
      p = p - (m / denom) * (0.01 / (1 - std::pow(0.9, t)));
    }
    CHECK(allclose(ps[i].to(DType::f64), p, 1e-5, 1e-6));
  }
}

TEST_CASE("SGD and Adam steps round exactly as the formulas cuda/optim.cu also computes", "[optim][rounding]") {
  // Bit for bit, so that CPU and GPU steps agree to the last bit (test_cuda_ops.cpp): SGD is
  // PyTorch's ops with each add-with-alpha one fused multiply-add (as ATen's kernels), Adam
  // the AVX2 loop's operations. Before cpu/optim.cpp was compiled with -ffp-contract=off,
  // GCC fused the scalar loops its own way and the GPU was 1e-6 apart. 4099 elements: the
  // vector loops and a scalar tail.
  manual_seed(17);
  Tensor p0 = randn({4099}), g = randn({4099});
  const float lr = 0.1f, mom = 0.9f, wd = 1e-3f, damp1 = 1.0f;
  for (bool nesterov : {false, true}) {
    INFO("nesterov " << nesterov);
    Tensor p = p0.clone().requires_grad_();
    p.set_grad(g);
    optim::SGD opt({p}, {.lr = 0.1, .momentum = 0.9, .weight_decay = 1e-3, .nesterov = nesterov});
    std::vector<float> want = p0.to_vector<float>(), gv = g.to_vector<float>(), buf(want.size());
    for (int step = 0; step < 3; ++step) {
      opt.step();
      for (size_t i = 0; i < want.size(); ++i) {
        float d = std::fma(want[i], wd, gv[i]);
        buf[i] = step == 0 ? d : std::fma(d, damp1, buf[i] * mom);
        d = nesterov ? std::fma(buf[i], mom, d) : buf[i];
        want[i] = std::fma(d, -lr, want[i]);
      }
    }
    CHECK(p.detach().to_vector<float>() == want);
  }
  Tensor p = p0.clone().requires_grad_();
  p.set_grad(g);
  optim::Adam opt({p}, {.lr = 1e-2, .weight_decay = 1e-2});
  std::vector<float> want = p0.to_vector<float>(), gv = g.to_vector<float>(), m(want.size()), v(want.size());
  for (int t = 1; t <= 3; ++t) {
    opt.step();
    const float b1 = 0.9f, b2 = 0.999f, one_b1 = float(1 - 0.9), one_b2 = float(1 - 0.999), eps = 1e-8f;
    const float neg_step = float(-(1e-2 / (1 - std::pow(0.9, t)))), inv = float(1 / std::sqrt(1 - std::pow(0.999, t)));
    for (size_t i = 0; i < want.size(); ++i) {
      float d = std::fma(1e-2f, want[i], gv[i]);
      m[i] = std::fma(m[i], b1, one_b1 * d);
      v[i] = std::fma(v[i], b2, one_b2 * (d * d));
      want[i] = std::fma(neg_step, m[i] / std::fma(std::sqrt(v[i]), inv, eps), want[i]);
    }
  }
  CHECK(p.detach().to_vector<float>() == want);
}

TEST_CASE("optimizer state saves and loads: a resumed run equals an uninterrupted one", "[optim][checkpoint]") {
  Problem straight, resumed;
  optim::RMSprop a({straight.w, straight.b}, {.lr = 0.01, .momentum = 0.9, .centered = true});
  run3(straight, a);

  std::string path = tmp_path("rmsprop.safetensors");
  {
    optim::RMSprop b({resumed.w, resumed.b}, {.lr = 0.01, .momentum = 0.9, .centered = true});
    for (int s = 0; s < 2; ++s) {
      b.zero_grad();
      resumed.loss().backward();
      b.step();
    }
    b.save(path);
  }
  optim::RMSprop c({resumed.w, resumed.b}, {.lr = 0.5});  // hyper-parameters come from the file
  c.load(path);
  CHECK(c.lr() == 0.01);
  CHECK(c.steps_taken() == 2);
  c.zero_grad();
  resumed.loss().backward();
  c.step();
  CHECK(allclose(resumed.w, straight.w, 0, 0));
  CHECK(allclose(resumed.b, straight.b, 0, 0));

  SECTION("another kind of optimizer is refused") {
    optim::Adam d({resumed.w, resumed.b});
    REQUIRE_THROWS_WITH(d.load(path), Catch::Contains("RMSprop") && Catch::Contains(path));
  }
  SECTION("parameters of other shapes are refused and nothing changes") {
    Tensor w2 = zeros({3, 2}).requires_grad_(), b2 = zeros({3}).requires_grad_();
    optim::RMSprop d({w2, b2}, {.lr = 0.5});
    REQUIRE_THROWS_WITH(d.load(path), Catch::Contains("shape [3, 2]") && Catch::Contains("nothing was loaded"));
    CHECK(d.lr() == 0.5);
    CHECK(d.steps_taken() == 0);
  }
  SECTION("a different parameter count is refused") {
    optim::RMSprop d({resumed.w}, {.lr = 0.5});
    REQUIRE_THROWS_WITH(d.load(path), Catch::Contains("unexpected \"0.1."));
    CHECK(d.lr() == 0.5);
  }
  std::remove(path.c_str());
}

TEST_CASE("optimizer options and parameters are checked", "[optim][errors]") {
  Tensor w = zeros({2}).requires_grad_();
  REQUIRE_THROWS_WITH(optim::SGD({w}, {.lr = -1}), Catch::Contains("SGD") && Catch::Contains("lr"));
  REQUIRE_THROWS_WITH(optim::SGD({w}, {.lr = 0.1, .nesterov = true}), Catch::Contains("nesterov"));
  REQUIRE_THROWS_WITH(optim::Adam({w}, {.betas = {1.0, 0.9}}), Catch::Contains("beta1"));
  REQUIRE_THROWS_WITH(optim::SGD({w, w}), Catch::Contains("more than once"));
  REQUIRE_THROWS_WITH(optim::SGD(std::vector<Tensor>{}), Catch::Contains("empty parameter list"));
  REQUIRE_THROWS_WITH(optim::SGD({w * 2.0}), Catch::Contains("not a leaf"));
  optim::SGD opt({w});
  w.set_grad(zeros({2}, {.dtype = DType::f64}));
  REQUIRE_THROWS_WITH(opt.step(), Catch::Contains("gradient is [2] f64"));
}

// ---- schedulers: lr (and momentum) after construction and after each step
namespace {
std::vector<double> lrs_of(optim::Optimizer& opt, optim::LRScheduler& s, int steps,
                           std::vector<double>* momenta = nullptr) {
  std::vector<double> out = {opt.lr()};
  if (momenta) momenta->push_back(opt.param_groups()[0].hyper.momentum);
  for (int i = 0; i < steps; ++i) {
    s.step();
    out.push_back(opt.lr());
    if (momenta) momenta->push_back(opt.param_groups()[0].hyper.momentum);
  }
  return out;
}
void check_seq(const std::vector<double>& got, const std::vector<double>& expected) {
  REQUIRE(got.size() == expected.size());
  for (size_t i = 0; i < got.size(); ++i) {
    INFO("step " << i);
    CHECK(got[i] == Approx(expected[i]).margin(1e-10));
  }
}
}  // namespace

TEST_CASE("LR schedulers give PyTorch's sequences", "[optim][scheduler]") {
  Tensor p = zeros({1}).requires_grad_();
  optim::SGD opt({p}, {.lr = 0.1, .momentum = 0.9});
  SECTION("StepLR") {
    optim::StepLR s(opt, {.step_size = 3, .gamma = 0.5});
    check_seq(lrs_of(opt, s, 10), {0.1, 0.1, 0.1, 0.05, 0.05, 0.05, 0.025, 0.025, 0.025, 0.0125, 0.0125});
  }
  SECTION("MultiStepLR") {
    optim::MultiStepLR s(opt, {.milestones = {2, 5, 6}, .gamma = 0.1});
    check_seq(lrs_of(opt, s, 8), {0.1, 0.1, 0.01, 0.01, 0.01, 0.001, 0.0001, 0.0001, 0.0001});
  }
  SECTION("CosineAnnealingLR") {
    optim::CosineAnnealingLR s(opt, {.T_max = 5, .eta_min = 0.01});
    check_seq(lrs_of(opt, s, 12), {0.1, 0.0914057647469, 0.0689057647469, 0.0410942352531, 0.0185942352531, 0.01,
                                   0.0185942352531, 0.0410942352531, 0.0689057647469, 0.0914057647469, 0.1,
                                   0.0914057647469, 0.0689057647469});
  }
  SECTION("OneCycleLR cycles lr and momentum") {
    optim::OneCycleLR s(opt, {.max_lr = 1.0, .total_steps = 10});
    std::vector<double> m;
    check_seq(lrs_of(opt, s, 10, &m), {0.04, 0.52, 1, 0.950484632013, 0.81174565395, 0.611262021936, 0.388741978064,
                                       0.18825834605, 0.0495193679865, 4e-06, 0.0495193679865});
    check_seq(m, {0.95, 0.9, 0.85, 0.854951556605, 0.868825509907, 0.888873953302, 0.911126046698, 0.931174490093,
                  0.945048443395, 0.95, 0.945048443395});
    REQUIRE_THROWS_WITH(s.step(), Catch::Contains("total_steps 10"));
  }
  SECTION("OneCycleLR three phases, linear") {
    optim::OneCycleLR s(opt, {.max_lr = 0.5, .total_steps = 12, .pct_start = 0.25,
                              .anneal_strategy = optim::OneCycleLROptions::Anneal::linear, .three_phase = true});
    std::vector<double> m;
    check_seq(lrs_of(opt, s, 12, &m),
              {0.02, 0.26, 0.5, 0.26, 0.02, 0.0171431428571, 0.0142862857143, 0.0114294285714, 0.00857257142857,
               0.00571571428571, 0.00285885714286, 2e-06, -0.00285485714286});
    check_seq(m, {0.95, 0.9, 0.85, 0.9, 0.95, 0.95, 0.95, 0.95, 0.95, 0.95, 0.95, 0.95, 0.95});
  }
  SECTION("LinearWarmup alone is PyTorch's LinearLR") {
    optim::LinearWarmup s(opt, {.warmup_steps = 4, .start_factor = 0.25});
    check_seq(lrs_of(opt, s, 8), {0.025, 0.04375, 0.0625, 0.08125, 0.1, 0.1, 0.1, 0.1, 0.1});
  }
  SECTION("LinearWarmup then cosine is PyTorch's SequentialLR") {
    optim::LinearWarmup s(opt, {.warmup_steps = 3, .start_factor = 0.25}, optim::CosineAnnealingLR(opt, {.T_max = 5}));
    check_seq(lrs_of(opt, s, 10), {0.025, 0.05, 0.075, 0.1, 0.0904508497187, 0.0654508497187, 0.0345491502813,
                                   0.00954915028125, 0, 0.00954915028125, 0.0345491502813});
  }
  SECTION("schedulers scale every group from its own initial lr") {
    Tensor q = zeros({1}).requires_grad_();
    optim::Adam adam({{.params = {p}, .lr = 0.1}, {.params = {q}, .lr = 0.01}});
    optim::StepLR s(adam, {.step_size = 1, .gamma = 0.5});
    s.step();
    CHECK(s.get_last_lr() == std::vector<double>{0.05, 0.005});
  }
}

TEST_CASE("scheduler state saves and loads: a resumed schedule continues exactly", "[optim][scheduler][checkpoint]") {
  // Steps `make`'s scheduler 7 times straight through, and 4 times, saved, loaded into a
  // fresh optimizer and scheduler, then 3 more: every lr and momentum after the load agrees.
  auto resume = [](auto make, int before, int after) {
    Tensor p = zeros({1}).requires_grad_(), q = zeros({1}).requires_grad_();
    auto groups = [&] { return std::vector<optim::ParamGroup>{{.params = {p}, .lr = 0.1}, {.params = {q}, .lr = 0.02}}; };
    optim::SGD straight_opt(groups(), {.lr = 0.1, .momentum = 0.9});
    auto straight = make(straight_opt);
    std::vector<std::vector<double>> want;
    for (int i = 0; i < before + after; ++i) {
      straight.step();
      if (i >= before) want.push_back({straight_opt.param_groups()[0].hyper.lr, straight_opt.param_groups()[1].hyper.lr,
                                       straight_opt.param_groups()[0].hyper.momentum});
    }
    optim::SGD first_opt(groups(), {.lr = 0.1, .momentum = 0.9});
    auto first = make(first_opt);
    for (int i = 0; i < before; ++i) first.step();
    optim::NamedTensors opt_state = first_opt.state_dict(), state = first.state_dict();
    optim::SGD opt(groups(), {.lr = 0.5});
    auto fresh = make(opt);
    opt.load_state_dict(opt_state);
    fresh.load_state_dict(state);
    CHECK(fresh.last_epoch() == before);
    CHECK(fresh.get_last_lr() == first.get_last_lr());
    for (int i = 0; i < after; ++i) {
      fresh.step();
      INFO(fresh.name() << " step " << before + i + 1);
      CHECK(opt.param_groups()[0].hyper.lr == want[size_t(i)][0]);
      CHECK(opt.param_groups()[1].hyper.lr == want[size_t(i)][1]);
      CHECK(opt.param_groups()[0].hyper.momentum == want[size_t(i)][2]);
    }
  };
  resume([](optim::Optimizer& o) { return optim::StepLR(o, {.step_size = 3, .gamma = 0.5}); }, 4, 3);
  resume([](optim::Optimizer& o) { return optim::MultiStepLR(o, {.milestones = {2, 5, 6}}); }, 4, 3);
  resume([](optim::Optimizer& o) { return optim::CosineAnnealingLR(o, {.T_max = 5, .eta_min = 0.01}); }, 4, 3);
  resume([](optim::Optimizer& o) { return optim::OneCycleLR(o, {.max_lr = 1.0, .total_steps = 10}); }, 4, 3);
  resume([](optim::Optimizer& o) {
    return optim::LinearWarmup(o, {.warmup_steps = 3, .start_factor = 0.25}, optim::CosineAnnealingLR(o, {.T_max = 5}));
  }, 2, 5);

  // the values themselves: StepLR(step 3, gamma 0.5) from 0.1 after 4 steps is 0.05, then 0.05, 0.025
  Tensor p = zeros({1}).requires_grad_();
  optim::SGD a({p}, {.lr = 0.1});
  optim::StepLR s(a, {.step_size = 3, .gamma = 0.5});
  for (int i = 0; i < 4; ++i) s.step();
  std::string path = tmp_path("steplr.safetensors");
  s.save(path);
  optim::SGD b({p}, {.lr = 0.1});
  optim::StepLR t(b, {.step_size = 3, .gamma = 0.5});
  t.load(path);
  CHECK(b.lr() == 0.05);
  t.step();
  CHECK(b.lr() == 0.05);
  t.step();
  CHECK(b.lr() == 0.025);

  SECTION("other options are refused and nothing changes") {
    optim::SGD c({p}, {.lr = 0.1});
    optim::StepLR u(c, {.step_size = 3, .gamma = 0.1});
    REQUIRE_THROWS_WITH(u.load(path), Catch::Contains("StepLR: load from") && Catch::Contains("option gamma is 0.5") &&
                                          Catch::Contains("nothing was loaded"));
    CHECK(u.last_epoch() == 0);
    CHECK(c.lr() == 0.1);
  }
  SECTION("another kind of scheduler is refused") {
    optim::SGD c({p}, {.lr = 0.1});
    optim::CosineAnnealingLR u(c, {.T_max = 3});
    REQUIRE_THROWS_WITH(u.load(path), Catch::Contains("holds the state of a StepLR scheduler"));
    REQUIRE_THROWS_WITH(u.load_state_dict(s.state_dict()), Catch::Contains("\"options.T_max\" is missing"));
  }
  SECTION("more groups than the optimizer's are refused") {
    Tensor q = zeros({1}).requires_grad_();
    optim::SGD c({{.params = {p}}, {.params = {q}}}, {.lr = 0.1});
    optim::StepLR two(c, {.step_size = 3, .gamma = 0.5});
    REQUIRE_THROWS_WITH(s.load_state_dict(two.state_dict()), Catch::Contains("unexpected \"1.base_lr\""));
  }
  std::remove(path.c_str());
}

TEST_CASE("clip_grad_norm scales gradients as PyTorch does and returns the norm", "[optim]") {
  struct Row {
    double norm_type, total;
    std::vector<double> a, c;
  };
  std::vector<Row> rows = {
      {2.0, 13.2003784, {1.13633084, -1.51510787, 0.378776968, 0.757553935}, {0.189388484, -4.54532337}},
      {INFINITY, 12, {1.24999988, -1.66666651, 0.416666627, 0.833333254}, {0.208333313, -4.99999952}},
      {1.0, 22.5, {0.666666627, -0.888888836, 0.222222209, 0.444444418}, {0.111111104, -2.66666651}},
  };
  for (const Row& r : rows) {
    Tensor a = zeros({2, 2}).requires_grad_(), c = zeros({2}).requires_grad_(), unused = zeros({3}).requires_grad_();
    a.set_grad(tensor({{3.0, -4.0}, {1.0, 2.0}}));
    c.set_grad(tensor({0.5, -12.0}));
    Tensor total = optim::clip_grad_norm({a, c, unused}, 5.0, r.norm_type);
    CHECK(total.item<double>() == Approx(r.total).epsilon(1e-6));
    check_values(a.grad(), r.a);
    check_values(c.grad(), r.c);
  }
  // below the limit: unchanged
  Tensor a = zeros({2}).requires_grad_();
  a.set_grad(tensor({0.3, 0.4}));
  CHECK(optim::clip_grad_norm({a}, 1.0).item<double>() == Approx(0.5));
  CHECK(a.grad().to_vector<float>() == std::vector<float>{0.3f, 0.4f});
  optim::clip_grad_value({a}, 0.35);
  CHECK(a.grad().to_vector<float>() == std::vector<float>{0.3f, 0.35f});
  // non-finite and empty gradients, as PyTorch 1.13's clip_grad_norm_ answers: an inf makes the
  // norm inf and the scale 0 (inf * 0: NaN where it was), a NaN spreads to every gradient, an
  // empty gradient counts nothing
  Tensor p = zeros({2}).requires_grad_(), q = zeros({2}).requires_grad_(), e = zeros({0}).requires_grad_();
  auto is_nan = [](float v) { return std::isnan(v); };
  p.set_grad(tensor({3.0, INFINITY}));
  q.set_grad(tensor({1.0, 2.0}));
  CHECK(std::isinf(optim::clip_grad_norm({p, q, e}, 5.0).item<double>()));
  CHECK(p.grad().to_vector<float>()[0] == 0.0f);
  CHECK(is_nan(p.grad().to_vector<float>()[1]));
  CHECK(q.grad().to_vector<float>() == std::vector<float>{0.0f, 0.0f});
  p.set_grad(tensor({3.0, NAN}));
  q.set_grad(tensor({1.0, 2.0}));
  CHECK(is_nan(optim::clip_grad_norm({p, q, e}, 5.0).item<double>()));
  for (float v : p.grad().to_vector<float>()) CHECK(is_nan(v));
  for (float v : q.grad().to_vector<float>()) CHECK(is_nan(v));
  e.set_grad(zeros({0}));
  CHECK(optim::clip_grad_norm({e}, 5.0).item<double>() == 0.0);
}
