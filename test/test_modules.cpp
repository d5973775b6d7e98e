// Issue 15's modules, losses and module-tree tools: f64 gradient checks of every
// differentiable piece, and the behaviour PyTorch users rely on (values against
// PyTorch are in test_modules_ref.cpp).
#include <catch2/catch.hpp>
#include <reel/reel.h>

#include <string>
#include <vector>

#include "gradcheck.h"

using namespace reel;
using reel::test::gradcheck;
using reel::test::input;
namespace F = reel::nn::functional;
using V = std::vector<Tensor>;

TEST_CASE("loss gradients match finite differences", "[losses][gradcheck]") {
  // inputs kept away from the kinks (|x - t| = 0, beta, delta) by the value ranges
  Tensor x = input({3, 4}, -2, -1.2), t = input({3, 4}, 0.2, 2);
  CHECK(gradcheck([](const V& v) { return F::l1_loss(v[0], v[1], Reduction::none); }, {x, t}) == "");
  CHECK(gradcheck([](const V& v) { return F::smooth_l1_loss(v[0], v[1], {.beta = 2.0}); }, {x, t}) == "");
  CHECK(gradcheck([](const V& v) { return F::smooth_l1_loss(v[0], v[1], {.beta = 5.0}); }, {x, t}) == "");
  CHECK(gradcheck([](const V& v) { return F::huber_loss(v[0], v[1], {.reduction = Reduction::sum, .delta = 1.0}); },
                  {x, t}) == "");
  CHECK(gradcheck([](const V& v) { return F::huber_loss(v[0], v[1], {.delta = 5.0}); }, {x, t}) == "");

  Tensor logp = input({2, 5}, -3, -0.1), q = input({2, 5}, 0.05, 1);
  CHECK(gradcheck([](const V& v) { return F::kl_div(v[0], v[1], {.reduction = nn::KLDivReduction::batchmean}); },
                  {logp, q}) == "");
  CHECK(gradcheck([](const V& v) { return F::kl_div(v[0], v[1], {.log_target = true}); }, {logp, input({2, 5})}) ==
        "");

  Tensor p = input({6}, 0.05, 0.95), y = input({6}, 0, 1), w = input({6}, 0.5, 2);
  CHECK(gradcheck([](const V& v) { return F::binary_cross_entropy(v[0], v[1], {.reduction = Reduction::none}); },
                  {p, y}) == "");
  CHECK(gradcheck([](const V& v) { return F::binary_cross_entropy(v[0], v[1], {.weight = v[2]}); }, {p, y, w}) == "");

  Tensor a = input({4, 3}), b = input({4, 3});
  Tensor lab = from_vector(std::vector<double>{1, -1, -1, 1}, {4}, {.dtype = DType::f64});
  CHECK(gradcheck([&](const V& v) { return F::cosine_embedding_loss(v[0], v[1], lab, {.margin = -0.9}); }, {a, b}) ==
        "");
}

TEST_CASE("binary_cross_entropy's gradient stays finite at saturated inputs", "[losses]") {
  Tensor p = tensor({0.0, 1.0}).requires_grad_();
  Tensor loss = F::binary_cross_entropy(p, tensor({1.0, 0.0}), {.reduction = Reduction::sum});
  CHECK(loss.item<double>() == Approx(200.0));  // both logs clamped at -100
  loss.backward();
  for (float g : p.grad().to_vector<float>()) CHECK(std::isfinite(g));
}

TEST_CASE("losses name the op and the shapes on bad input", "[losses][errors]") {
  CHECK_THROWS_WITH(F::l1_loss(zeros({2, 3}), zeros({3, 2})), Catch::Contains("l1_loss") && Catch::Contains("[3, 2]"));
  CHECK_THROWS_WITH(F::smooth_l1_loss(zeros({2}), zeros({2}), {.beta = -1}), Catch::Contains("beta"));
  CHECK_THROWS_WITH(F::huber_loss(zeros({2}), zeros({2}), {.delta = 0}), Catch::Contains("delta"));
  CHECK_THROWS_WITH(F::cosine_embedding_loss(zeros({2, 3}), zeros({2, 3}), zeros({3})),
                    Catch::Contains("cosine_embedding_loss") && Catch::Contains("[2]"));
}

TEST_CASE("GroupNorm and InstanceNorm2d gradients match finite differences", "[norm_layers][gradcheck]") {
  nn::GroupNorm gn(2, 4);
  gn.to(DType::f64);
  {
    NoGradGuard g;
    gn.weight.copy_(input({4}, 0.5, 1.5));
    gn.bias.copy_(input({4}));
  }
  CHECK(gradcheck([&](const V& v) { return gn(v[0]); }, {input({2, 4, 3})}) == "");
  CHECK(gradcheck([&](const V& v) { return gn(v[0]); }, {input({2, 4, 2, 2})}) == "");
  Tensor fixed = input({2, 4, 3}).detach();
  CHECK(gradcheck([&](const V&) { return gn(fixed); }, {gn.weight, gn.bias}) == "");

  nn::InstanceNorm2d in(3, {.affine = true});
  in.to(DType::f64);
  CHECK(gradcheck([&](const V& v) { return in(v[0]); }, {input({2, 3, 2, 3})}) == "");
  CHECK(gradcheck([&](const V& v) { return in(v[0]); }, {input({3, 2, 3})}) == "");  // unbatched
  nn::InstanceNorm2d tracked(3, {.track_running_stats = true});
  tracked.to(DType::f64);
  tracked.eval();
  CHECK(gradcheck([&](const V& v) { return tracked(v[0]); }, {input({2, 3, 2, 2})}) == "");
}

TEST_CASE("GroupNorm normalises each group of each sample", "[norm_layers]") {
  nn::GroupNorm gn(2, 4, {.affine = false});
  Tensor y = gn(randn({3, 4, 5}) * 3.0 + 2.0).reshape({3, 2, 10});
  CHECK(amax(abs(mean(y, {2}))).item<float>() < 1e-5);
  CHECK(amax(abs(var(y, {2}, 0) - 1.0)).item<float>() < 1e-3);
  CHECK_THROWS_WITH(nn::GroupNorm(3, 4), Catch::Contains("multiple"));
  CHECK_THROWS_WITH(gn(zeros({2, 3, 5})), Catch::Contains("[N, 4, *]"));
}

TEST_CASE("Identity and Dropout2d", "[norm_layers]") {
  nn::Identity id;
  Tensor x = randn({2, 3});
  CHECK(id(x).impl() == x.impl());

  manual_seed(3);
  nn::Dropout2d drop(0.5);
  Tensor ones4 = ones({8, 16, 3, 3});
  Tensor y = drop(ones4);
  // whole channels: each [3, 3] plane is all 0 or all 2
  Tensor planes = y.reshape({128, 9});
  Tensor lo = amin(planes, {1}), hi = amax(planes, {1});
  CHECK(allclose(lo, hi));
  std::vector<float> v = lo.to_vector<float>();
  int dropped = 0;
  for (float f : v) {
    CHECK((f == 0.0f || f == 2.0f));
    dropped += f == 0.0f;
  }
  CHECK(dropped > 30);
  CHECK(dropped < 98);
  Tensor xg = input({2, 3, 2, 2});
  Tensor out = drop(xg);
  out.sum().backward();
  CHECK(allclose(xg.grad(), out.detach() / xg.detach()));  // gradient = the mask times 1/(1-p)
  drop.eval();
  CHECK(drop(ones4).impl() == ones4.impl());
  CHECK(nn::Dropout2d(0.0)(ones4).impl() == ones4.impl());
}

namespace {
struct Block : nn::Module {
  nn::Linear fc;
  nn::GroupNorm norm{2, 4};
  explicit Block(int64_t in) : fc(in, 4) {
    register_module("fc", fc);
    register_module("norm", norm);
  }
  Tensor forward(const Tensor& x) override { return norm(fc(x)); }
};
struct Net : nn::Module {
  Block a{3}, b{4};
  nn::Sequential head{nn::Linear(4, 2), nn::Identity()};
  Net() {
    register_module("a", a);
    register_module("b", b);
    register_module("head", head);
  }
};
}  // namespace

TEST_CASE("named_modules, modules, apply and requires_grad_ walk the module tree", "[module]") {
  Net net;
  std::vector<std::string> names;
  for (auto& [n, m] : net.named_modules()) names.push_back(n + ":" + m->type_name());
  CHECK(names == std::vector<std::string>{":Net", "a:Block", "a.fc:Linear", "a.norm:GroupNorm", "b:Block",
                                          "b.fc:Linear", "b.norm:GroupNorm", "head:Sequential", "head.0:Linear",
                                          "head.1:Identity"});
  CHECK(net.modules().size() == 10);
  CHECK(net.modules()[0] == &net);

  // apply: children before their parent, as PyTorch
  std::vector<std::string> order;
  net.apply([&](nn::Module& m) { order.push_back(m.type_name()); });
  CHECK(order == std::vector<std::string>{"Linear", "GroupNorm", "Block", "Linear", "GroupNorm", "Block", "Linear",
                                          "Identity", "Sequential", "Net"});
  net.apply([](nn::Module& m) {
    if (auto* l = dynamic_cast<nn::Linear*>(&m)) {
      NoGradGuard g;
      l->bias.zero_();
    }
  });
  CHECK(net.a.fc.bias.abs().sum().item<float>() == 0.0f);
  CHECK(net.head.at<nn::Linear>(0).bias.abs().sum().item<float>() == 0.0f);

  // a frozen block gets no gradient; the rest does
  net.a.requires_grad_(false);
  for (Tensor p : net.a.parameters()) CHECK_FALSE(p.requires_grad());
  Tensor y = net.head(net.b(net.a(randn({5, 3}))));
  y.sum().backward();
  CHECK_FALSE(net.a.fc.weight.grad().defined());
  CHECK(net.b.fc.weight.grad().defined());
  net.requires_grad_();
  for (Tensor p : net.parameters()) CHECK(p.requires_grad());
}

TEST_CASE("Adagrad checks its options and saves its state", "[adagrad]") {
  CHECK_THROWS_WITH(optim::Adagrad({zeros({2}).requires_grad_()}, {.lr_decay = -1}), Catch::Contains("lr_decay"));
  Tensor p = tensor({1.0f, -2.0f}).requires_grad_();
  optim::Adagrad opt({p}, {.lr = 0.1, .lr_decay = 0.01, .initial_accumulator_value = 0.5});
  (p * p).sum().backward();
  opt.step();
  optim::NamedTensors state = opt.state_dict();
  bool has_sum = false;
  for (auto& [n, t] : state) has_sum |= n == "0.0.sum";
  CHECK(has_sum);
  Tensor q = tensor({1.0f, -2.0f}).requires_grad_();
  optim::Adagrad opt2({q}, {.lr = 0.1, .lr_decay = 0.01, .initial_accumulator_value = 0.5});
  opt2.load_state_dict(state);
  {
    NoGradGuard g;
    q.copy_(p);
  }
  for (int i = 0; i < 2; ++i) {
    opt.zero_grad();
    opt2.zero_grad();
    (p * p).sum().backward();
    (q * q).sum().backward();
    opt.step();
    opt2.step();
  }
  CHECK(allclose(p, q, 0, 0));
  optim::SGD sgd({tensor({1.0f}).requires_grad_()});
  CHECK_THROWS_WITH(sgd.load_state_dict(state), Catch::Contains("another kind"));
}

TEST_CASE("schedulers check their arguments and save their state", "[schedulers]") {
  Tensor p = zeros({1}).requires_grad_();
  optim::SGD opt({p}, {.lr = 1.0});
  CHECK_THROWS_WITH(optim::LinearLR(opt, {.start_factor = 0}), Catch::Contains("start_factor"));
  std::vector<std::unique_ptr<optim::LRScheduler>> none;
  CHECK_THROWS(optim::SequentialLR(opt, std::move(none), {}));
  std::vector<std::unique_ptr<optim::LRScheduler>> two;
  two.push_back(std::make_unique<optim::ExponentialLR>(opt, optim::ExponentialLROptions{.gamma = 0.5}));
  two.push_back(std::make_unique<optim::ExponentialLR>(opt, optim::ExponentialLROptions{.gamma = 0.5}));
  CHECK_THROWS_WITH(optim::SequentialLR(opt, std::move(two), {}), Catch::Contains("milestones"));

  optim::ExponentialLR s(opt, {.gamma = 0.5});
  s.step();
  s.step();
  optim::NamedTensors st = s.state_dict();
  Tensor p2 = zeros({1}).requires_grad_();
  optim::SGD opt2({p2}, {.lr = 1.0});
  optim::ExponentialLR s2(opt2, {.gamma = 0.5});
  s2.load_state_dict(st);
  s2.step();
  CHECK(opt2.lr() == 0.125);
  optim::ExponentialLR other(opt2, {.gamma = 0.9});
  CHECK_THROWS_WITH(other.load_state_dict(st), Catch::Contains("gamma"));

  optim::ReduceLROnPlateau plateau(opt, {.patience = 0});
  plateau.step(1.0);
  plateau.step(2.0);
  optim::ReduceLROnPlateau plateau2(opt2, {.patience = 0});
  plateau2.load_state_dict(plateau.state_dict());
  CHECK(plateau2.best() == 1.0);
  CHECK(plateau2.last_epoch() == 2);
}
