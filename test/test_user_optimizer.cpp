// Optimizers users write (optim::Optimizer's virtual step, Hyper, ParamState): Lion and
// Adafactor as a user writes them (test/user_optimizers.h) against PyTorch's formulas
// (test/reference/user_optimizers.py), on every device present; a user's optimizer
// resuming bit for bit through checkpoint::TrainingState with an LR scheduler,
// clip_grad_norm and a GradScaler; OneCycleLR cycling its beta1; and the built-in
// optimizers' tensor-ops updates (set_fused(false)) against their fused passes.
#include <catch2/catch.hpp>
#include <reel/reel.h>
#include <unistd.h>

#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "reference/user_optimizers.inc"
#include "user_optimizers.h"

using namespace reel;
namespace fs = std::filesystem;

namespace {

std::vector<Device> devices() {
  std::vector<Device> out = {Device::cpu()};
  if (cuda::is_available()) out.push_back(Device::cuda(0));
  else WARN("no GPU: the CUDA runs of the user optimizers are skipped");
  return out;
}

void check_close(const Tensor& got, const std::vector<double>& want, double rtol) {
  std::vector<double> g = got.detach().cpu().to_vector<double>();
  REQUIRE(g.size() == want.size());
  for (size_t i = 0; i < g.size(); ++i) {
    INFO("element " << i);
    CHECK(g[i] == Approx(want[i]).epsilon(rtol).margin(1e-15));
  }
}

// Steps `opt` over W and B through the table's gradients, checking the parameters after
// each step against `want_w` and `want_b`.
void follow_table(optim::Optimizer& opt, Tensor& w, Tensor& b, const std::vector<std::vector<double>>& want_w,
                  const std::vector<std::vector<double>>& want_b, double rtol) {
  for (int t = 0; t < kUoSteps; ++t) {
    INFO("step " << t + 1);
    w.set_grad(from_vector(kUoGradW[size_t(t)], {4, 3}).to(w.device()));
    b.set_grad(from_vector(kUoGradB[size_t(t)], {3}).to(b.device()));
    opt.step();
    check_close(w, want_w[size_t(t)], rtol);
    check_close(b, want_b[size_t(t)], rtol);
  }
}

struct TempDir {
  fs::path path;
  TempDir() {
    std::string t = (fs::temp_directory_path() / "reel_user_opt_XXXXXX").string();
    path = mkdtemp(t.data());
  }
  ~TempDir() { fs::remove_all(path); }
  std::string file(const std::string& name) const { return (path / name).string(); }
};

struct Net : nn::Module {
  nn::Linear fc1{4, 8};
  nn::Linear fc2{8, 3};
  Net() {
    register_module("fc1", fc1);
    register_module("fc2", fc2);
  }
  Tensor forward(const Tensor& x) override { return fc2(relu(fc1(x))); }
};

// One training run of `steps` steps from `first` (the same data whatever the start):
// GradScaler-scaled loss, unscale, clip_grad_norm, scaler step and update, scheduler step.
void train(Net& net, optim::Optimizer& opt, optim::GradScaler& scaler, optim::LRScheduler& sched, int first,
           int steps) {
  for (int s = first; s < first + steps; ++s) {
    Generator data(uint64_t(100 + s));
    Tensor x = randn({5, 4}, data), y = randint(0, 3, {5}, data);
    opt.zero_grad();
    scaler.scale(cross_entropy(net(x), y)).backward();
    scaler.unscale(opt);
    optim::clip_grad_norm(net.parameters(), 0.5);
    scaler.step(opt);
    scaler.update();
    sched.step();
  }
}

std::vector<std::vector<double>> values(nn::Module& m) {
  std::vector<std::vector<double>> out;
  for (auto& [n, t] : m.state_dict()) out.push_back(t.to_vector<double>());
  return out;
}

}  // namespace

TEST_CASE("a user's Lion follows the reference formulas, on every device", "[optim][user_optimizer]") {
  for (Device dev : devices()) {
    INFO(dev.str());
    Tensor w = from_vector(kUoW0, {4, 3}).to(dev).requires_grad_();
    Tensor b = from_vector(kUoB0, {3}).to(dev).requires_grad_();
    my_optim::Lion opt({w, b}, {.lr = kLionLr, .betas = {kLionBeta1, kLionBeta2}, .weight_decay = kLionWd});
    follow_table(opt, w, b, kLionW, kLionB, 1e-13);
    CHECK(opt.state(0, 0).step == kUoSteps);
    REQUIRE(opt.state(0, 0).find("exp_avg"));
    CHECK(opt.state(0, 0).find("exp_avg")->device() == dev);
    CHECK_THROWS_WITH(opt.state(0, 2), Catch::Contains("Lion") && Catch::Contains("group 0 has 2 parameters"));
  }
}

TEST_CASE("a user's Adafactor follows PyTorch's torch.optim.Adafactor, on every device", "[optim][user_optimizer]") {
  for (Device dev : devices()) {
    INFO(dev.str());
    Tensor w = from_vector(kUoW0, {4, 3}).to(dev).requires_grad_();
    Tensor b = from_vector(kUoB0, {3}).to(dev).requires_grad_();
    my_optim::Adafactor opt({w, b}, {.lr = kAdaLr, .beta2_decay = kAdaBeta2Decay, .eps2 = kAdaEps2, .d = kAdaD,
                                     .weight_decay = kAdaWd});
    follow_table(opt, w, b, kAdaW, kAdaB, 1e-12);
    // the matrix keeps factored moments, the vector a whole one
    CHECK(opt.state(0, 0).find("row_var")->shape() == Dims{4, 1});
    CHECK(opt.state(0, 0).find("col_var")->shape() == Dims{1, 3});
    CHECK(opt.state(0, 1).find("variance")->shape() == Dims{3});
  }
}

TEST_CASE("a user's optimizer saves and loads its state; other shapes are refused", "[optim][user_optimizer]") {
  TempDir dir;
  Tensor w = from_vector(kUoW0, {4, 3}).requires_grad_();
  Tensor b = from_vector(kUoB0, {3}).requires_grad_();
  my_optim::Adafactor a({w, b}, {.lr = kAdaLr, .eps2 = kAdaEps2, .weight_decay = kAdaWd});
  for (int t = 0; t < 2; ++t) {
    w.set_grad(from_vector(kUoGradW[size_t(t)], {4, 3}));
    b.set_grad(from_vector(kUoGradB[size_t(t)], {3}));
    a.step();
  }
  a.save(dir.file("ada.safetensors"));
  Tensor w2 = w.detach().clone().requires_grad_(), b2 = b.detach().clone().requires_grad_();
  my_optim::Adafactor c({w2, b2}, {.lr = 0.5});  // every hyper-parameter comes from the file
  c.load(dir.file("ada.safetensors"));
  CHECK(c.lr() == kAdaLr);
  CHECK(c.param_groups()[0].hyper.get("eps2") == kAdaEps2);
  CHECK(c.steps_taken() == 2);
  for (Tensor* p : {&w, &w2}) p->set_grad(from_vector(kUoGradW[2], {4, 3}));
  for (Tensor* p : {&b, &b2}) p->set_grad(from_vector(kUoGradB[2], {3}));
  a.step();
  c.step();
  CHECK(w2.to_vector<double>() == w.to_vector<double>());
  CHECK(b2.to_vector<double>() == b.to_vector<double>());

  Tensor wt = zeros({3, 4}, {.dtype = DType::f64}).requires_grad_(), bt = zeros({3}, {.dtype = DType::f64}).requires_grad_();
  my_optim::Adafactor d({wt, bt});
  CHECK_THROWS_WITH(d.load(dir.file("ada.safetensors")),
                    Catch::Contains("0.0.row_var") && Catch::Contains("nothing was loaded"));
  CHECK(d.steps_taken() == 0);
  my_optim::Lion e({w, b});
  CHECK_THROWS_WITH(e.load(dir.file("ada.safetensors")), Catch::Contains("Adafactor"));
  optim::Adam f({w, b});
  CHECK_THROWS_WITH(f.load_state_dict(a.state_dict()), Catch::Contains("\"kind\" is missing"));
}

TEST_CASE("a user's optimizer resumes bit for bit through TrainingState, with a scheduler, clipping and a GradScaler",
          "[optim][user_optimizer][checkpoint]") {
  TempDir dir;
  std::string path = dir.file("run.safetensors");
  manual_seed(7);
  Net straight;
  std::vector<std::vector<double>> start = values(straight);
  my_optim::Lion opt(straight.parameters(), {.lr = 0.01, .weight_decay = 0.05});
  optim::GradScaler scaler({.init_scale = 256.0, .growth_interval = 2});
  optim::StepLR sched(opt, {.step_size = 2, .gamma = 0.5});
  train(straight, opt, scaler, sched, 0, 6);

  manual_seed(7);
  {
    Net first;
    REQUIRE(values(first) == start);
    my_optim::Lion o(first.parameters(), {.lr = 0.01, .weight_decay = 0.05});
    optim::GradScaler sc({.init_scale = 256.0, .growth_interval = 2});
    optim::StepLR sch(o, {.step_size = 2, .gamma = 0.5});
    train(first, o, sc, sch, 0, 3);
    checkpoint::TrainingState run{.model = &first, .optimizer = &o, .scaler = &sc, .scheduler = &sch, .step = 3};
    checkpoint::save(path, run);
  }
  manual_seed(99);  // the checkpoint restores everything that matters
  Net resumed;
  my_optim::Lion o(resumed.parameters(), {.lr = 1.0});
  optim::GradScaler sc({.init_scale = 256.0, .growth_interval = 2});
  optim::StepLR sch(o, {.step_size = 2, .gamma = 0.5});
  checkpoint::TrainingState run{.model = &resumed, .optimizer = &o, .scaler = &sc, .scheduler = &sch};
  checkpoint::load(path, run);
  CHECK(run.step == 3);
  CHECK(o.steps_taken() == 3);
  train(resumed, o, sc, sch, 3, 3);
  CHECK(values(resumed) == values(straight));
  CHECK(o.lr() == opt.lr());
  CHECK(sc.get_scale() == scaler.get_scale());
  CHECK(o.state(0, 0).find("exp_avg")->to_vector<float>() == opt.state(0, 0).find("exp_avg")->to_vector<float>());
}

TEST_CASE("OneCycleLR cycles a user's optimizer's beta1, as PyTorch's does for optimizers with betas",
          "[optim][user_optimizer]") {
  Tensor w = zeros({2}).requires_grad_();
  my_optim::Lion opt({w}, {.lr = 0.1});
  optim::OneCycleLR sched(opt, {.max_lr = 0.1, .total_steps = 10});
  double m0 = opt.param_groups()[0].hyper.beta1;
  CHECK(m0 == Approx(0.95));  // max_momentum at the start
  CHECK(opt.param_groups()[0].hyper.momentum == 0);
  for (int i = 0; i < 3; ++i) {
    w.set_grad(ones({2}));
    opt.step();
    sched.step();
  }
  CHECK(opt.param_groups()[0].hyper.beta1 < m0);
}

TEST_CASE("the built-in optimizers' tensor-ops updates agree with their fused passes", "[optim][user_optimizer]") {
  using namespace optim;
  struct Kind {
    const char* what;
    std::function<std::unique_ptr<BuiltinOptimizer>(std::vector<Tensor>)> make;
  };
  auto of = [](auto make) { return make; };
  std::vector<Kind> kinds = {
      {"SGD", of([](std::vector<Tensor> p) { return std::make_unique<SGD>(p, SGDOptions{.lr = 0.1}); })},
      {"SGD momentum nesterov wd", of([](std::vector<Tensor> p) {
         return std::make_unique<SGD>(p, SGDOptions{.lr = 0.1, .momentum = 0.9, .weight_decay = 0.01, .nesterov = true});
       })},
      {"SGD dampening maximize", of([](std::vector<Tensor> p) {
         return std::make_unique<SGD>(p, SGDOptions{.lr = 0.1, .momentum = 0.8, .dampening = 0.3, .maximize = true});
       })},
      {"Adam wd", of([](std::vector<Tensor> p) {
         return std::make_unique<Adam>(p, AdamOptions{.lr = 0.01, .weight_decay = 0.1});
       })},
      {"AdamW maximize", of([](std::vector<Tensor> p) {
         return std::make_unique<AdamW>(p, AdamWOptions{.lr = 0.01, .maximize = true});
       })},
      {"Adamax wd", of([](std::vector<Tensor> p) {
         return std::make_unique<Adamax>(p, AdamaxOptions{.lr = 0.01, .weight_decay = 0.1});
       })},
      {"RMSprop", of([](std::vector<Tensor> p) { return std::make_unique<RMSprop>(p, RMSpropOptions{.lr = 0.01}); })},
      {"RMSprop centered momentum wd", of([](std::vector<Tensor> p) {
         return std::make_unique<RMSprop>(
             p, RMSpropOptions{.lr = 0.01, .weight_decay = 0.1, .momentum = 0.9, .centered = true});
       })},
      {"Adagrad lr_decay initial accumulator", of([](std::vector<Tensor> p) {
         return std::make_unique<Adagrad>(
             p, AdagradOptions{.lr = 0.1, .lr_decay = 0.01, .weight_decay = 0.1, .initial_accumulator_value = 0.5});
       })},
  };
  for (DType dt : {DType::f64, DType::f32}) {
    for (const Kind& k : kinds) {
      INFO(k.what << " " << dtype_name(dt));
      manual_seed(3);
      Tensor w0 = randn({5, 7}, {.dtype = dt}), b0 = randn({7}, {.dtype = dt});
      Tensor fw = w0.clone().requires_grad_(), fb = b0.clone().requires_grad_();
      Tensor rw = w0.clone().requires_grad_(), rb = b0.clone().requires_grad_();
      auto fused = k.make({fw, fb}), reference = k.make({rw, rb});
      reference->set_fused(false);
      CHECK(fused->fused());
      CHECK_FALSE(reference->fused());
      for (int t = 0; t < 4; ++t) {
        Tensor gw = randn({5, 7}, {.dtype = dt}), gb = randn({7}, {.dtype = dt});
        fw.set_grad(gw.clone()), rw.set_grad(gw.clone());
        // the bias skips step 2: its step count runs behind the weight's
        if (t != 1) fb.set_grad(gb.clone()), rb.set_grad(gb.clone());
        else fb.set_grad(Tensor()), rb.set_grad(Tensor());
        fused->step();
        reference->step();
      }
      double tol = dt == DType::f64 ? 1e-12 : 2e-5;
      CHECK(allclose(rw, fw, tol, tol));
      CHECK(allclose(rb, fb, tol, tol));
      NamedTensors fs = fused->state_dict(), rs = reference->state_dict();
      REQUIRE(fs.size() == rs.size());
      for (size_t i = 0; i < fs.size(); ++i) {
        INFO(fs[i].first);
        CHECK(fs[i].first == rs[i].first);
        CHECK(allclose(rs[i].second.to(DType::f64), fs[i].second.to(DType::f64), tol, tol));
      }
    }
  }
}
