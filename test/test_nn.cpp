// nn modules: registration and names, moves, Sequential, train/eval, BatchNorm
// statistics against PyTorch 1.13 numbers, initialisers, device/dtype moves,
// call sites, losses.
#include <catch2/catch.hpp>
#include <reel/reel.h>

#include <cmath>
#include <string>
#include <vector>

using namespace reel;

namespace {

struct Net : nn::Module {
  nn::Linear fc1{4, 8};
  nn::Linear fc2{8, 3, {.bias = false}};
  Tensor scale = ones({3});
  Net() {
    register_module("fc1", fc1);
    register_module("fc2", fc2);
    register_buffer("scale", scale);
  }
  static constexpr int forward_line = __LINE__ + 1;
  Tensor forward(const Tensor& x) override { return fc2(relu(fc1(x))) * scale; }
};

// A module holding a module that holds modules: names nest.
struct Outer : nn::Module {
  Net body;
  nn::BatchNorm1d norm{3};
  Outer() {
    register_module("body", body);
    register_module("norm", norm);
  }
  Tensor forward(const Tensor& x) override { return norm(body(x)); }
};

std::vector<std::string> names(const nn::NamedTensors& v) {
  std::vector<std::string> out;
  for (auto& [n, t] : v) out.push_back(n);
  return out;
}

void check_values(const Tensor& t, const std::vector<double>& expected, double tol = 1e-5) {
  std::vector<double> got = t.to_vector<double>();
  REQUIRE(got.size() == expected.size());
  for (size_t i = 0; i < got.size(); ++i) {
    INFO("element " << i);
    CHECK(got[i] == Approx(expected[i]).margin(tol).epsilon(tol));
  }
}

}  // namespace

TEST_CASE("modules register parameters, buffers and children by dotted name", "[nn]") {
  Outer m;
  CHECK(names(m.named_parameters()) ==
        std::vector<std::string>{"body.fc1.weight", "body.fc1.bias", "body.fc2.weight", "norm.weight", "norm.bias"});
  CHECK(names(m.named_buffers()) == std::vector<std::string>{"body.scale", "norm.running_mean", "norm.running_var",
                                                             "norm.num_batches_tracked"});
  // PyTorch's order: a module's own parameters and buffers, then its children's
  CHECK(names(m.state_dict()) ==
        std::vector<std::string>{"body.scale", "body.fc1.weight", "body.fc1.bias", "body.fc2.weight", "norm.weight",
                                 "norm.bias", "norm.running_mean", "norm.running_var", "norm.num_batches_tracked"});
  CHECK(m.parameters().size() == 5);
  CHECK(m.parameters(false).empty());
  CHECK(m.children().size() == 2);
  CHECK(m.named_children()[1].first == "norm");
  CHECK(m.body.fc1.weight.shape() == Dims{8, 4});
  CHECK(m.body.fc1.weight.requires_grad());
  CHECK_FALSE(m.body.fc2.bias.defined());
  CHECK_FALSE(m.norm.running_mean.requires_grad());
  // the handles are the members themselves
  CHECK(m.parameters()[0].impl() == m.body.fc1.weight.impl());
  CHECK(m.str() ==
        "Outer(\n"
        "  (body): Net(\n"
        "    (fc1): Linear(in_features=4, out_features=8, bias=True)\n"
        "    (fc2): Linear(in_features=8, out_features=3, bias=False)\n"
        "  )\n"
        "  (norm): BatchNorm1d(3, eps=1e-05, momentum=0.1, affine=True, track_running_stats=True)\n"
        ")");
}

TEST_CASE("a shared parameter is listed once", "[nn]") {
  struct Tied : nn::Module {
    nn::Linear a{3, 3}, b{3, 3};
    Tied() {
      b.weight = a.weight;  // same handle registered under two names
      register_module("a", a);
      register_module("b", b);
    }
  } t;
  CHECK(names(t.named_parameters()) == std::vector<std::string>{"a.weight", "a.bias", "b.bias"});
}

TEST_CASE("registration errors name the module and the name", "[nn][errors]") {
  struct Bad : nn::Module {
    Tensor w = zeros({2});
    Tensor idx = zeros({2}, {.dtype = DType::i64});
    void twice() {
      register_parameter("w", w);
      register_parameter("w", w);
    }
    void dotted() { register_buffer("a.b", w); }
    void integral() { register_parameter("idx", idx); }
  };
  Bad b;
  REQUIRE_THROWS_WITH(b.twice(), Catch::Contains("Bad") && Catch::Contains("\"w\" is already registered"));
  REQUIRE_THROWS_WITH(b.dotted(), Catch::Contains("\"a.b\""));
  REQUIRE_THROWS_WITH(b.integral(), Catch::Contains("floating point"));
}

TEST_CASE("modules move as whole objects: registrations follow the move", "[nn]") {
  Net a;
  Tensor w = a.fc1.weight;
  Net b = std::move(a);
  auto params = b.named_parameters();
  REQUIRE(params.size() == 3);
  CHECK(params[0].second.impl() == w.impl());
  CHECK(params[0].second.impl() == b.fc1.weight.impl());
  // a module inside a Sequential was moved there
  nn::Sequential seq{nn::Linear(4, 8), nn::ReLU()};
  nn::Sequential moved = std::move(seq);
  CHECK(names(moved.named_parameters()) == std::vector<std::string>{"0.weight", "0.bias"});
  CHECK(moved.at<nn::Linear>(0).weight.impl() == moved.parameters()[0].impl());
}

TEST_CASE("Sequential runs its modules in order and names them by index", "[nn]") {
  manual_seed(3);
  nn::Sequential seq{nn::Linear(4, 8), nn::ReLU()};
  nn::Linear& last = seq.add(nn::Linear(8, 2));
  seq.add(nn::Tanh());
  CHECK(seq.size() == 4);
  CHECK(names(seq.named_parameters()) == std::vector<std::string>{"0.weight", "0.bias", "2.weight", "2.bias"});
  Tensor x = randn({5, 4});
  Tensor expected = tanh(linear(relu(linear(x, seq.at<nn::Linear>(0).weight, seq.at<nn::Linear>(0).bias)),
                                last.weight, last.bias));
  CHECK(allclose(seq(x), expected));
  REQUIRE_THROWS_WITH(seq[4], Catch::Contains("index 4 is out of range for 4 modules"));
  REQUIRE_THROWS_WITH(seq.at<nn::Conv2d>(1), Catch::Contains("module 1 is a ReLU"));
  nn::Sequential empty;
  CHECK(allclose(empty(x), x));
}

TEST_CASE("a module's call records the caller's line on the tape and in errors", "[nn]") {
  // reel's layer called here: its ops and errors name this line
  nn::Linear fc(4, 8);
  int line = __LINE__ + 1;
  Tensor y = fc(randn({2, 4}));
  REQUIRE(y.grad_fn() != nullptr);
  CHECK(y.grad_fn()->site.line == uint32_t(line));
  int bad_line = __LINE__ + 1;
  REQUIRE_THROWS_WITH(fc(randn({2, 5})), Catch::Contains("Linear: expected input [*, 4], got [2, 5]") &&
                                             Catch::Contains("test_nn.cpp:" + std::to_string(bad_line)));
  // a module written here: the line inside its forward() and the module path
  // (test_debug_modules.cpp checks every debug tool)
  Net net;
  Tensor z = net(randn({2, 4}));
  CHECK(z.grad_fn()->site.line == uint32_t(Net::forward_line));
  REQUIRE_THROWS_WITH(net(randn({2, 5})), Catch::Contains("Linear: expected input [*, 4], got [2, 5]") &&
                                              Catch::Contains("test_nn.cpp:" + std::to_string(Net::forward_line) +
                                                              " in fc1)"));
  nn::Module& base = net.fc1;
  CHECK(base.type_name() == "Linear");
}

TEST_CASE("train and eval switch Dropout and BatchNorm", "[nn]") {
  manual_seed(11);
  nn::Sequential seq{nn::Dropout(0.5)};
  Tensor x = ones({1000});
  CHECK(seq.is_training());
  Tensor y = seq(x);
  double zeros_frac = (y == 0.0).to(DType::f32).mean().item<double>();
  CHECK(zeros_frac > 0.4);
  CHECK(zeros_frac < 0.6);
  CHECK(y.max().item<double>() == Approx(2.0));
  seq.eval();
  CHECK_FALSE(seq[0].is_training());
  CHECK(allclose(seq(x), x, 0, 0));
  seq.train();
  CHECK(seq[0].is_training());
}

TEST_CASE("BatchNorm1d: batch statistics in training, running statistics in eval (PyTorch numbers)", "[nn]") {
  nn::BatchNorm1d bn(3);
  Tensor x1 = tensor({{1.0, 2.0, 3.0}, {4.0, -1.0, 0.5}, {0.0, 0.0, 1.0}, {2.0, 5.0, -3.0}});
  Tensor x2 = tensor({{0.5, 1.5, 2.0}, {-1.0, 3.0, 1.0}, {2.0, -2.0, 0.0}, {1.0, 1.0, 1.0}});
  Tensor y1 = bn(x1);
  bn(x2);
  check_values(y1, {-0.507091403, 0.218217671, 1.21446013, 1.52127409, -1.09108841, 0.0578314364, -1.18321323,
                    -0.654653072, 0.289157152, 0.169030428, 1.52752376, -1.56144869});
  check_values(bn.running_mean, {0.219999999, 0.222499996, 0.133750007});
  check_values(bn.running_var, {1.22874987, 1.87958324, 1.43729174});
  CHECK(bn.num_batches_tracked.item<int64_t>() == 2);
  bn.eval();
  check_values(bn(tensor({{1.0, 1.0, 1.0}, {-2.0, 0.5, 3.0}})),
               {0.70365715, 0.567111552, 0.722552299, -2.00271654, 0.202409595, 2.39078259});
  CHECK(bn.num_batches_tracked.item<int64_t>() == 2);  // eval does not count
  REQUIRE_THROWS_WITH(bn(zeros({2, 4})), Catch::Contains("BatchNorm1d: expected input [N, 3] or [N, 3, L], got [2, 4]"));
}

TEST_CASE("BatchNorm2d with momentum nullopt keeps a cumulative average (PyTorch numbers)", "[nn]") {
  nn::BatchNorm2d bn(2, {.momentum = std::nullopt});
  Tensor xa = arange(0.0, 16.0).reshape({2, 2, 2, 2}) * 0.5 - 2.0;
  // torch: arange(16).reshape(2,2,2,2).flip(0) ** 1.5 * 0.1
  Tensor base = arange(0.0, 16.0).reshape({2, 2, 2, 2});
  Tensor xb = cat({base.select(0, 1).unsqueeze(0), base.select(0, 0).unsqueeze(0)}, 0).pow(1.5) * 0.1;
  bn(xa);
  bn(xb);
  check_values(bn.running_mean, {1.16723537, 2.94573045});
  check_values(bn.running_var, {3.60683012, 4.53355598});
}

TEST_CASE("layers have PyTorch's shapes and default initialisation", "[nn]") {
  manual_seed(5);
  nn::Linear fc(400, 300);
  double bound = 1.0 / std::sqrt(400.0);
  CHECK(fc.weight.abs().max().item<double>() <= bound);
  CHECK(fc.weight.abs().max().item<double>() > 0.95 * bound);
  // U(-b, b) has variance b^2 / 3
  CHECK(var(fc.weight).item<double>() == Approx(bound * bound / 3).epsilon(0.02));
  CHECK(fc.bias.abs().max().item<double>() <= bound);

  nn::Conv2d conv(8, 16, {3, 5}, {.stride = 2, .padding = {1, 2}, .groups = 2});
  CHECK(conv.weight.shape() == Dims{16, 4, 3, 5});
  CHECK(conv.weight.abs().max().item<double>() <= 1.0 / std::sqrt(4.0 * 15));
  CHECK(conv.str() == "Conv2d(8, 16, kernel_size=(3, 5), stride=(2, 2), padding=(1, 2), groups=2)");
  REQUIRE_THROWS_WITH(nn::Conv2d(3, 8, 3, {.groups = 2}), Catch::Contains("divisible by groups 2"));

  nn::BatchNorm2d bn(4);
  CHECK(bn.weight.to_vector<float>() == std::vector<float>(4, 1.0f));
  CHECK(bn.bias.to_vector<float>() == std::vector<float>(4, 0.0f));
  CHECK(bn.running_var.to_vector<float>() == std::vector<float>(4, 1.0f));
  nn::BatchNorm1d plain(4, {.affine = false, .track_running_stats = false});
  CHECK(plain.parameters().empty());
  CHECK(plain.buffers().empty());

  nn::Embedding emb(1000, 64);
  CHECK(mean(emb.weight).item<double>() == Approx(0).margin(0.01));
  CHECK(var(emb.weight).item<double>() == Approx(1).epsilon(0.02));
  CHECK(emb(tensor({3, 7}, {.dtype = DType::i64})).shape() == Dims{2, 64});
  nn::Embedding padded(5, 3, {.padding_idx = -2});  // row 3: zeros, and no gradient
  CHECK(padded.padding_idx == 3);
  CHECK(padded.weight.select(0, 3).to_vector<float>() == std::vector<float>(3, 0.0f));
  CHECK(padded.weight.select(0, 2).abs().sum().item<float>() > 0);
  CHECK(padded.extra_repr() == "5, 3, padding_idx=3");
  Tensor looked = padded(tensor({3, 1, 3}, {.dtype = DType::i64}));
  CHECK(looked.select(0, 0).to_vector<float>() == std::vector<float>(3, 0.0f));
  looked.sum().backward();
  CHECK(padded.weight.grad().to_vector<float>() ==
        std::vector<float>{0, 0, 0, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0});
  padded.reset_parameters();
  CHECK(padded.weight.select(0, 3).to_vector<float>() == std::vector<float>(3, 0.0f));
  REQUIRE_THROWS_WITH(nn::Embedding(5, 3, {.padding_idx = 5}),
                      Catch::Contains("Embedding: padding_idx 5 is out of range for 5 embeddings: expected -5 to 4"));

  nn::LayerNorm ln({4, 5});
  CHECK(ln.weight.shape() == Dims{4, 5});
  REQUIRE_THROWS_WITH(ln(zeros({2, 5, 4})), Catch::Contains("LayerNorm: expected input [*, 4, 5], got [2, 5, 4]"));
  CHECK(nn::Flatten()(zeros({2, 3, 4, 5})).shape() == Dims{2, 60});
  REQUIRE_THROWS_WITH(nn::Dropout(1.5), Catch::Contains("Dropout: p must be in [0, 1], got 1.5"));
}

TEST_CASE("initialisers follow torch.nn.init's formulas", "[nn]") {
  using namespace nn::init;
  CHECK(calculate_gain(Nonlinearity::relu) == Approx(std::sqrt(2.0)));
  CHECK(calculate_gain(Nonlinearity::tanh) == Approx(5.0 / 3));
  CHECK(calculate_gain(Nonlinearity::leaky_relu, 0.2) == Approx(std::sqrt(2.0 / 1.04)));
  CHECK(calculate_gain(Nonlinearity::selu) == 0.75);
  manual_seed(9);
  Tensor w = empty({200, 100, 3, 3});  // fan_in 900, fan_out 1800
  Fans f = calculate_fans(w);
  CHECK(f.fan_in == 900);
  CHECK(f.fan_out == 1800);
  xavier_uniform_(w, 2.0);
  double a = 2.0 * std::sqrt(6.0 / 2700);
  CHECK(w.abs().max().item<double>() <= a);
  CHECK(var(w).item<double>() == Approx(a * a / 3).epsilon(0.01));
  xavier_normal_(w);
  CHECK(var(w).item<double>() == Approx(2.0 / 2700).epsilon(0.01));
  kaiming_normal_(w, {.mode = FanMode::fan_out, .nonlinearity = Nonlinearity::relu});
  CHECK(var(w).item<double>() == Approx(2.0 / 1800).epsilon(0.01));
  kaiming_uniform_(w, {.nonlinearity = Nonlinearity::relu});
  CHECK(w.abs().max().item<double>() <= std::sqrt(2.0) * std::sqrt(3.0 / 900));
  CHECK(var(w).item<double>() == Approx(2.0 / 900).epsilon(0.01));
  nn::init::uniform_(w, 2.0, 3.0);
  CHECK(amin(w).item<double>() >= 2.0);
  CHECK(w.max().item<double>() < 3.0);
  nn::init::normal_(w, 5.0, 0.5);
  CHECK(mean(w).item<double>() == Approx(5.0).epsilon(0.01));
  zeros_(w);
  CHECK(w.abs().max().item<double>() == 0);
  ones_(w);
  CHECK(mean(w).item<double>() == 1);
  // works on a parameter that requires grad (no tape, no in-place complaint)
  Tensor p = zeros({3, 4}).requires_grad_();
  kaiming_uniform_(p);
  CHECK(p.is_leaf());
  Tensor v = zeros({5});
  REQUIRE_THROWS_WITH(xavier_uniform_(v), Catch::Contains("at least 2 dims"));
  Tensor i = zeros({2, 2}, {.dtype = DType::i64});
  REQUIRE_THROWS_WITH(nn::init::normal_(i), Catch::Contains("floating-point"));
}

TEST_CASE("to(dtype) keeps tensor identity, so an optimizer made before still steps them", "[nn]") {
  Net net;
  optim::SGD opt(net.parameters(), {.lr = 0.5});
  Tensor w = net.fc1.weight;
  net.to(DType::f64);
  CHECK(w.dtype() == DType::f64);
  CHECK(net.scale.dtype() == DType::f64);
  Outer o;
  o.to(DType::f64);
  CHECK(o.norm.num_batches_tracked.dtype() == DType::i64);  // integer buffers stay
  Tensor x = randn({2, 4}, {.dtype = DType::f64});
  net(x).sum().backward();
  Tensor before = w.clone();
  opt.step();
  CHECK(allclose(w, before - net.fc1.weight.grad() * 0.5, 1e-12, 1e-12));
  net.zero_grad();
  CHECK_FALSE(net.fc1.weight.grad().defined());
  net.to(kCPU);  // same device: nothing changes
  CHECK(w.dtype() == DType::f64);
}

TEST_CASE("loss modules wrap the fused losses (PyTorch numbers)", "[nn]") {
  Tensor logits = tensor({{1.0, 2.0, 0.5, -1.0}, {0.3, 0.2, 0.1, 0.0}, {-1.0, 0.0, 1.0, 2.0}});
  Tensor labels = tensor({1, -100, 3}, {.dtype = DType::i64});
  CHECK(nn::CrossEntropyLoss({.label_smoothing = 0.1})(logits, labels).item<double>() == Approx(0.611435771));
  CHECK(nn::CrossEntropyLoss({.reduction = Reduction::sum, .ignore_index = 3})(
            logits, tensor({1, 0, 3}, {.dtype = DType::i64}))
            .item<double>() == Approx(1.73771739));
  CHECK(nn::NLLLoss()(log_softmax(logits, 1), tensor({1, 0, 3}, {.dtype = DType::i64})).item<double>() ==
        Approx(nn::CrossEntropyLoss()(logits, tensor({1, 0, 3}, {.dtype = DType::i64})).item<double>()));
  CHECK(nn::MSELoss()(logits, logits * 0.5).item<double>() == Approx(0.258125007));
  CHECK(nn::BCEWithLogitsLoss(Reduction::sum)(logits, sigmoid(logits * 0.3)).item<double>() == Approx(8.80455971));
}
