// Issue 15's losses, norm layers, Adagrad and lr schedulers against PyTorch 1.13: the
// values in reference/modules_ref.inc (inputs included) come from
// scripts/reference/modules_ref.py.
#include <catch2/catch.hpp>
#include <reel/reel.h>

#include <cmath>
#include <string>
#include <vector>

#include "reference/modules_ref.inc"

using namespace reel;
namespace F = reel::nn::functional;

namespace {

Tensor f64(const std::vector<double>& v, const Dims& shape) {
  return from_vector(v, shape, {.dtype = DType::f64});
}

void check_close(const Tensor& t, const std::vector<double>& expected, double rtol = 1e-10, double atol = 1e-12) {
  std::vector<double> got = t.to(DType::f64).contiguous().to_vector<double>();
  REQUIRE(got.size() == expected.size());
  for (size_t i = 0; i < got.size(); ++i) {
    INFO("element " << i << ": got " << got[i] << ", PyTorch " << expected[i]);
    CHECK(std::abs(got[i] - expected[i]) <= atol + rtol * std::abs(expected[i]));
  }
}

void check_seq(const std::vector<double>& got, const std::vector<double>& expected) {
  REQUIRE(got.size() == expected.size());
  for (size_t i = 0; i < got.size(); ++i) {
    INFO("step " << i << ": got " << got[i] << ", PyTorch " << expected[i]);
    CHECK(std::abs(got[i] - expected[i]) <= 1e-12 + 1e-12 * std::abs(expected[i]));
  }
}

}  // namespace

TEST_CASE("regression losses match PyTorch", "[losses][ref]") {
  Tensor x = f64(ref::loss_x, {8}), t = f64(ref::loss_t, {8});
  check_close(F::l1_loss(x, t, Reduction::none), ref::l1_none);
  check_close(nn::L1Loss()(x, t), ref::l1_mean);
  check_close(F::smooth_l1_loss(x, t, {.reduction = Reduction::none, .beta = 0.5}), ref::smooth_l1_none_b05);
  check_close(nn::SmoothL1Loss({.reduction = Reduction::sum, .beta = 2.0})(x, t), ref::smooth_l1_sum_b2);
  check_close(F::huber_loss(x, t, {.reduction = Reduction::none, .delta = 0.7}), ref::huber_none_d07);
  check_close(nn::HuberLoss({.delta = 1.5})(x, t), ref::huber_mean_d15);
}

TEST_CASE("kl_div matches PyTorch, zero targets and log targets included", "[losses][ref]") {
  Tensor in = f64(ref::kl_input, {2, 4}), q = f64(ref::kl_target, {2, 4});
  check_close(F::kl_div(in, q, {.reduction = nn::KLDivReduction::none}), ref::kl_none);
  check_close(nn::KLDivLoss()(in, q), ref::kl_mean);
  check_close(F::kl_div(in, q, {.reduction = nn::KLDivReduction::batchmean}), ref::kl_batchmean);
  check_close(F::kl_div(in, log(q + 0.05), {.reduction = nn::KLDivReduction::sum, .log_target = true}),
              ref::kl_sum_logtarget);
}

TEST_CASE("binary_cross_entropy matches PyTorch, saturated inputs and weights included", "[losses][ref]") {
  Tensor p = f64(ref::bce_input, {6}).requires_grad_(), y = f64(ref::bce_target, {6});
  check_close(F::binary_cross_entropy(p, y, {.reduction = Reduction::none}), ref::bce_none);
  Tensor loss = nn::BCELoss({.weight = f64(ref::bce_weight, {6})})(p, y);
  check_close(loss, ref::bce_mean_weighted);
  loss.backward();
  // PyTorch clamps x (1 - x) at an f32 1e-12: the saturated element agrees to ~4e-9
  check_close(p.grad(), ref::bce_mean_weighted_grad, 1e-8);
}

TEST_CASE("cosine_embedding_loss matches PyTorch", "[losses][ref]") {
  Tensor a = f64(ref::cos_x1, {4, 3}), b = f64(ref::cos_x2, {4, 3}), y = f64(ref::cos_y, {4});
  check_close(F::cosine_embedding_loss(a, b, y, {.reduction = Reduction::none, .margin = 0.2}), ref::cos_none_m02);
  check_close(nn::CosineEmbeddingLoss()(a, b, y), ref::cos_mean);
}

TEST_CASE("GroupNorm and InstanceNorm2d match PyTorch", "[norm_layers][ref]") {
  nn::GroupNorm gn(2, 4);
  gn.to(DType::f64);
  {
    NoGradGuard g;
    gn.weight.copy_(f64({1.0, 2.0, 0.5, -1.0}, {4}));
    gn.bias.copy_(f64({0.0, 0.1, 0.2, 0.3}, {4}));
  }
  check_close(gn(f64(ref::gn_x, {2, 4, 3})), ref::gn_y, 1e-9, 1e-10);

  nn::InstanceNorm2d in(3, {.momentum = 0.2, .affine = true, .track_running_stats = true});
  in.to(DType::f64);
  {
    NoGradGuard g;
    in.weight.copy_(f64({1.5, -0.5, 1.0}, {3}));
    in.bias.copy_(f64({0.1, 0.0, -0.2}, {3}));
  }
  Tensor x = f64(ref::in_x, {2, 3, 2, 3});
  check_close(in(x), ref::in_train_y, 1e-9, 1e-10);
  check_close(in.running_mean, ref::in_running_mean, 1e-9, 1e-12);
  check_close(in.running_var, ref::in_running_var, 1e-9, 1e-12);
  in.eval();
  check_close(in(x), ref::in_eval_y, 1e-9, 1e-10);
}

TEST_CASE("Adagrad's trajectory matches PyTorch", "[adagrad][ref]") {
  auto run = [](optim::AdagradOptions o) {
    Tensor p = f64(ref::adagrad_p0, {4}).requires_grad_();
    Tensor c = f64(ref::adagrad_c, {4});
    optim::Adagrad opt({p}, o);
    std::vector<double> traj;
    for (int i = 0; i < 4; ++i) {
      opt.zero_grad();
      (p * p / 2.0 + c * p).sum().backward();
      opt.step();
      for (double v : p.to_vector<double>()) traj.push_back(v);
    }
    return from_vector(traj, {16}, {.dtype = DType::f64});
  };
  check_close(run({.lr = 0.1}), ref::adagrad_plain);
  check_close(run({.lr = 0.1, .lr_decay = 0.05, .weight_decay = 0.1, .initial_accumulator_value = 0.2, .eps = 1e-6}),
              ref::adagrad_all);
  check_close(run({.lr = 0.1, .maximize = true}), ref::adagrad_max);
}

namespace {
// the lr after construction and after each of 12 steps, base lr 0.5
template <typename Make>
std::vector<double> lrs(Make make, const std::vector<double>* metrics = nullptr) {
  Tensor p = zeros({1}).requires_grad_();
  optim::SGD opt({p}, {.lr = 0.5});
  auto s = make(opt);
  std::vector<double> seq = {opt.lr()};
  for (size_t i = 0; i < 12; ++i) {
    if constexpr (std::is_same_v<decltype(s), std::unique_ptr<optim::ReduceLROnPlateau>>)
      s->step((*metrics)[i]);
    else
      s->step();
    seq.push_back(opt.lr());
  }
  return seq;
}
}  // namespace

TEST_CASE("lr schedulers give PyTorch's lr sequences", "[schedulers][ref]") {
  using namespace optim;
  check_seq(lrs([](Optimizer& o) { return std::make_unique<ExponentialLR>(o, ExponentialLROptions{.gamma = 0.9}); }),
            ref::sched_exponential);
  check_seq(lrs([](Optimizer& o) {
              return std::make_unique<LinearLR>(o, LinearLROptions{.start_factor = 0.25, .total_iters = 4});
            }),
            ref::sched_linear);
  check_seq(lrs([](Optimizer& o) {
              return std::make_unique<LinearLR>(o, LinearLROptions{.start_factor = 1.0, .end_factor = 0.1,
                                                                   .total_iters = 5});
            }),
            ref::sched_linear_down);
  check_seq(lrs([](Optimizer& o) {
              return std::make_unique<LambdaLR>(o, [](int64_t e) { return 1.0 / (1.0 + double(e)); });
            }),
            ref::sched_lambda);
  check_seq(lrs([](Optimizer& o) {
              std::vector<std::unique_ptr<LRScheduler>> parts;
              parts.push_back(std::make_unique<LinearLR>(o, LinearLROptions{.start_factor = 0.5, .total_iters = 3}));
              parts.push_back(std::make_unique<ExponentialLR>(o, ExponentialLROptions{.gamma = 0.8}));
              return std::make_unique<SequentialLR>(o, std::move(parts), std::vector<int64_t>{3});
            }),
            ref::sched_sequential);
  check_seq(lrs([](Optimizer& o) {
              std::vector<std::unique_ptr<LRScheduler>> parts;
              parts.push_back(std::make_unique<ExponentialLR>(o, ExponentialLROptions{.gamma = 0.5}));
              parts.push_back(std::make_unique<LinearLR>(o, LinearLROptions{.start_factor = 0.2, .total_iters = 2}));
              parts.push_back(std::make_unique<ExponentialLR>(o, ExponentialLROptions{.gamma = 0.9}));
              return std::make_unique<SequentialLR>(o, std::move(parts), std::vector<int64_t>{2, 6});
            }),
            ref::sched_sequential3);
  check_seq(lrs([](Optimizer& o) {
              return std::make_unique<ReduceLROnPlateau>(
                  o, ReduceLROnPlateauOptions{.factor = 0.5, .patience = 1, .cooldown = 1, .min_lr = 0.1});
            }, &ref::plateau_metrics),
            ref::sched_plateau_min);
  using P = ReduceLROnPlateauOptions;
  check_seq(lrs([](Optimizer& o) {
              return std::make_unique<ReduceLROnPlateau>(
                  o, P{.mode = P::Mode::max, .factor = 0.3, .patience = 0, .threshold = 0.01,
                       .threshold_mode = P::ThresholdMode::abs});
            }, &ref::plateau_metrics),
            ref::sched_plateau_max_abs);
}

TEST_CASE("AveragedModel's SWA and EMA averages match PyTorch", "[averaged_model][ref]") {
  auto run = [](optim::AveragedModelOptions o) {
    Tensor w = f64(ref::avg_w0, {1, 3}).requires_grad_();
    optim::AveragedModel avg({{"weight", w}}, o);
    std::vector<double> traj;
    for (int k = 0; k < 4; ++k) {
      {
        NoGradGuard g;
        w.copy_(f64(ref::avg_w0, {1, 3}) * double(k + 1) + double(k) / 10);
      }
      avg.update({{"weight", w}});
      for (double v : avg.averaged()[0].second.to_vector<double>()) traj.push_back(v);
    }
    CHECK(avg.n_averaged() == 4);
    return from_vector(traj, {12}, {.dtype = DType::f64});
  };
  check_close(run({}), ref::avg_swa);
  check_close(run({.ema_decay = 0.9}), ref::avg_ema);
}

TEST_CASE("AveragedModel checks names and shapes and loads into a model", "[averaged_model]") {
  nn::Linear lin(3, 2);
  optim::AveragedModel avg(lin.named_parameters());
  CHECK_THROWS_WITH(avg.update({{"weight", zeros({2, 3})}}), Catch::Contains("expected the 2"));
  CHECK_THROWS_WITH(avg.update({{"weight", zeros({3, 3})}, {"bias", zeros({2})}}), Catch::Contains("[3, 3]"));
  avg.update(lin.named_parameters());
  nn::Linear eval_copy(3, 2);
  eval_copy.load_state_dict(avg.averaged(), false);
  CHECK(allclose(eval_copy.weight, lin.weight, 0, 0));
}
