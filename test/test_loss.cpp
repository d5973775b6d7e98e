// Losses: cross_entropy (fused), nll_loss, mse_loss, binary_cross_entropy_with_logits,
// and dropout. Values against PyTorch 1.13 (computed once, hard-coded), gradients
// against finite differences, errors by class.
#include <cmath>
#include <limits>

#include "gradcheck.h"

using namespace reel;
using reel::test::input;
using V = std::vector<Tensor>;

namespace {

// Four rows, three classes; row 2 is ignored (label -100).
Tensor logits4(DType dt = DType::f64) {
  return tensor({{1.0, 2.0, 0.5}, {0.1, -1.0, 3.0}, {2.0, 2.0, 2.0}, {-0.5, 0.0, 0.5}}, {.dtype = dt});
}
Tensor labels4() { return from_vector<int64_t>({1, 2, -100, 0}); }
// Five rows of six classes, without and with an ignored row; and cross_entropy on them as a
// function of the logits, for the gradient checks.
Tensor labels5() { return from_vector<int64_t>({1, 2, 5, 0, 2}); }
Tensor labels5_ignored() { return from_vector<int64_t>({1, -100, 5, 0, 3}); }
auto ce(const Tensor& y, CrossEntropyOptions o) {
  return [y, o](const V& v) { return cross_entropy(v[0], y, o); };
}
// The (labels, options) cases both the first- and the second-order checks run on [5, 6] logits.
struct CeCase {
  bool ignored;  // labels5_ignored() instead of labels5()
  CrossEntropyOptions opt;
};
const CeCase kCeCases[] = {
    {false, {.reduction = Reduction::none}},
    {false, {}},
    {false, {.reduction = Reduction::sum, .label_smoothing = 0.3}},
    {true, {.label_smoothing = 0.1}},
    {false, {.reduction = Reduction::none, .ignore_index = 2}},
};

std::string message_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "no error";
}
bool has(const std::string& m, const std::string& part) { return m.find(part) != std::string::npos; }

}  // namespace

TEST_CASE("cross_entropy matches PyTorch with and without label smoothing", "[loss]") {
  Tensor x = logits4(), y = labels4();
  // torch.nn.functional.cross_entropy(x, y, reduction=..., label_smoothing=...)
  std::vector<double> none0 = cross_entropy(x, y, {.reduction = Reduction::none}).to_vector<double>();
  std::vector<double> want0{0.4643687841079449, 0.07077421896049133, 0.0, 1.6802696706417346};
  for (size_t i = 0; i < 4; ++i) CHECK(none0[i] == Approx(want0[i]).epsilon(1e-12));
  CHECK(cross_entropy(x, y).item<double>() == Approx(0.7384708912367236).epsilon(1e-12));
  CHECK(cross_entropy(x, y, {.reduction = Reduction::sum}).item<double>() == Approx(2.215412673710171).epsilon(1e-12));

  std::vector<double> none1 =
      cross_entropy(x, y, {.reduction = Reduction::none, .label_smoothing = 0.1}).to_vector<double>();
  std::vector<double> want1{0.5477021174412783, 0.30077421896049134, 0.0, 1.6302696706417346};
  for (size_t i = 0; i < 4; ++i) CHECK(none1[i] == Approx(want1[i]).epsilon(1e-12));
  CHECK(cross_entropy(x, y, {.label_smoothing = 0.1}).item<double>() == Approx(0.8262486690145014).epsilon(1e-12));
  CHECK(cross_entropy(x, y, {.reduction = Reduction::sum, .label_smoothing = 0.1}).item<double>() ==
        Approx(2.478746007043504).epsilon(1e-12));
  // no ignored row, smoothing 0.2
  Tensor y2 = from_vector<int64_t>({1, 2, 0, 0});
  CHECK(cross_entropy(x, y2, {.label_smoothing = 0.2}).item<double>() == Approx(0.960172907261237).epsilon(1e-12));
}

TEST_CASE("cross_entropy gradient matches PyTorch; ignored rows get zero", "[loss]") {
  Tensor x = logits4().requires_grad_();
  cross_entropy(x, labels4(), {.label_smoothing = 0.1}).backward();
  std::vector<double> g = x.grad().to_vector<double>();
  std::vector<double> want{0.06596352142960524,  -0.10160053804052362, 0.035637016610918386,
                           0.005976757458336781, -0.005423053782308642, -0.0005537036760281561,
                           0.0,                  0.0,                   0.0,
                           -0.24900320336916193, 0.09128751746172169,  0.15771568590744026};
  for (size_t i = 0; i < want.size(); ++i) CHECK(g[i] == Approx(want[i]).margin(1e-12));
}

TEST_CASE("cross_entropy in f32 (vectorised kernel) agrees with f64", "[loss]") {
  manual_seed(3);
  Tensor x64 = randn({37, 203}, {.dtype = DType::f64}) * 4.0;
  Tensor y = randint(0, 203, {37});
  Tensor x32 = x64.to(DType::f32).requires_grad_();
  Tensor l64 = cross_entropy(x64, y, {.reduction = Reduction::none, .label_smoothing = 0.05});
  Tensor l32 = cross_entropy(x32, y, {.reduction = Reduction::none, .label_smoothing = 0.05});
  CHECK(allclose(l32.to(DType::f64), l64, 1e-5, 1e-5));
  Tensor x64g = x64.detach().requires_grad_();
  cross_entropy(x64g, y, {.label_smoothing = 0.05}).backward();
  cross_entropy(x32, y, {.label_smoothing = 0.05}).backward();
  CHECK(allclose(x32.grad().to(DType::f64), x64g.grad(), 1e-4, 1e-7));
}

TEST_CASE("cross_entropy in f32 agrees with f64 for few and many classes, any strides", "[loss]") {
  // C <= 16 runs 8 rows at a time in the vector lanes; N = 4001 runs on the thread pool
  manual_seed(5);
  for (int64_t C : {1, 3, 10, 16, 17, 40}) {
    for (int64_t N : {1, 7, 37, 4001}) {
      for (bool transposed : {false, true}) {
        CAPTURE(C, N, transposed);
        Tensor base = transposed ? randn({C, N}, {.dtype = DType::f64}).t() : randn({N, C}, {.dtype = DType::f64});
        Tensor x64 = (base * 3.0).detach().requires_grad_();
        std::vector<int64_t> labels = randint(0, C, {N}).to_vector<int64_t>();
        for (int64_t n = 2; n < N; n += 5) labels[size_t(n)] = -100;  // some rows ignored
        Tensor y = from_vector<int64_t>(labels);
        Tensor x32 = x64.detach().to(DType::f32).requires_grad_();
        CrossEntropyOptions none{.reduction = Reduction::none, .label_smoothing = 0.1};
        Tensor l64 = cross_entropy(x64, y, none), l32 = cross_entropy(x32, y, none);
        CHECK(allclose(l32.to(DType::f64), l64, 1e-5, 1e-5));
        Tensor w = randn({N}, {.dtype = DType::f64});  // a different upstream gradient per row
        (l64 * w).sum().backward();
        (l32 * w.to(DType::f32)).sum().backward();
        CHECK(allclose(x32.grad().to(DType::f64), x64.grad(), 1e-4, 1e-6));
      }
    }
  }
}

TEST_CASE("cross_entropy is stable for huge logits and all-ignored batches", "[loss]") {
  Tensor x = tensor({{1000.0, 0.0}, {-1000.0, 1000.0}});
  Tensor l = cross_entropy(x, from_vector<int64_t>({0, 0}), {.reduction = Reduction::none});
  CHECK(l.to_vector<float>() == std::vector<float>{0.0f, 2000.0f});
  // every row ignored: mean is 0/0 = nan (as PyTorch), the gradient is zero
  Tensor z = logits4().requires_grad_();
  Tensor all = from_vector<int64_t>({-100, -100, -100, -100});
  Tensor m = cross_entropy(z, all);
  CHECK(std::isnan(m.item<double>()));
  m.backward();
  CHECK(z.grad().to_vector<double>() == std::vector<double>(12, 0.0));
  CHECK(cross_entropy(z, all, {.reduction = Reduction::sum}).item<double>() == 0.0);
}

TEST_CASE("cross_entropy f32: masked (-inf) logits are exact zeros, NaN propagates", "[loss]") {
  const double inf = std::numeric_limits<double>::infinity();
  // 20 classes so the vectorised loop runs; class 3 is the label, all but 3 and 7 masked
  std::vector<double> row(20, -inf);
  row[3] = 1.0;
  row[7] = 2.0;
  Tensor x = from_vector<double>(row, {1, 20}).to(DType::f32).requires_grad_();
  Tensor l = cross_entropy(x, from_vector<int64_t>({3}));
  CHECK(l.item<float>() == Approx(std::log(1.0 + std::exp(1.0))).epsilon(1e-6));  // -log(e / (e + e^2))
  l.backward();
  std::vector<float> g = x.grad().to_vector<float>();
  CHECK(g[3] == Approx(1.0 / (1.0 + std::exp(1.0)) - 1.0).epsilon(1e-6));
  CHECK(g[7] == Approx(std::exp(1.0) / (1.0 + std::exp(1.0))).epsilon(1e-6));
  CHECK(g[0] == 0.0f);
  CHECK(g[19] == 0.0f);
  row[7] = std::nan("");
  row[0] = 0.0;
  Tensor bad = from_vector<double>(row, {1, 20}).to(DType::f32);
  CHECK(std::isnan(cross_entropy(bad, from_vector<int64_t>({3})).item<float>()));
}

TEST_CASE("cross_entropy gradients match finite differences", "[loss][grad]") {
  Tensor y = labels5(), yi = labels5_ignored();
  for (const CeCase& c : kCeCases) CHECK_GRADIENTS(ce(c.ignored ? yi : y, c.opt), input({5, 6}, -3, 3));
  // non-contiguous logits: a transposed view [5, 6] of a [6, 5] tensor
  CHECK_GRADIENTS([y](const V& v) { return cross_entropy(v[0].t(), y, {.label_smoothing = 0.2}); },
                  input({6, 5}, -3, 3));
  // strided rows: every other column
  CHECK_GRADIENTS([y](const V& v) { return cross_entropy(v[0].slice(1, 0, 12, 2), y, {}); }, input({5, 12}, -3, 3));
}

TEST_CASE("cross_entropy is twice differentiable (create_graph)", "[loss][grad][grad2]") {
  // one row [0, 0], label 0: p = [1/2, 1/2], dL/dx = p - [1, 0], Hessian diag(p) - p p^T
  Tensor x = zeros({1, 2}, {.dtype = DType::f64}).requires_grad_();
  Tensor g = autograd::grad({cross_entropy(x, from_vector<int64_t>({0}))}, {x}, {}, {.create_graph = true})[0];
  CHECK(g.to_vector<double>() == std::vector<double>{-0.5, 0.5});
  Tensor hv = autograd::grad({(g * tensor({{1.0, 0.0}}, {.dtype = DType::f64})).sum()}, {x})[0];
  CHECK(hv.to_vector<double>() == std::vector<double>{0.25, -0.25});

  Tensor y = labels5(), yi = labels5_ignored();
  for (const CeCase& c : kCeCases) CHECK_SECOND_GRADIENTS(ce(c.ignored ? yi : y, c.opt), input({5, 6}, -3, 3));
  CHECK_SECOND_GRADIENTS(ce(yi, {.reduction = Reduction::mean, .label_smoothing = 1.0}), input({5, 6}, -3, 3));
  CHECK_SECOND_GRADIENTS([y](const V& v) { return cross_entropy(v[0].t(), y, {.label_smoothing = 0.2}); },
                         input({6, 5}, -3, 3));
  // the loss of a computed input: second derivatives reach through the rule into the producer
  CHECK_SECOND_GRADIENTS([yi](const V& v) { return cross_entropy(mul(v[0], v[1]), yi, {}); }, input({5, 6}, -2, 2),
                         input({5, 6}, -2, 2));
}

TEST_CASE("nll_loss on log-probabilities equals cross_entropy on logits", "[loss]") {
  Tensor x = logits4(), y = labels4();
  Tensor lp = log(exp(x) / exp(x).sum({1}, true));
  CHECK(nll_loss(lp, y).item<double>() == Approx(0.7384708912367236).epsilon(1e-12));  // PyTorch
  CHECK(nll_loss(lp, y, {.reduction = Reduction::sum}).item<double>() == Approx(2.215412673710171).epsilon(1e-12));
  CHECK(nll_loss(lp, y, {.label_smoothing = 0.1}).item<double>() == Approx(0.8262486690145014).epsilon(1e-12));
  CHECK(nll_loss(lp, y, {.reduction = Reduction::none}).to_vector<double>()[2] == 0.0);
  // hand-computed: -(lp[0,1] + lp[1,0]) / 2
  Tensor p = tensor({{-1.0, -2.0}, {-3.0, -4.0}});
  CHECK(nll_loss(p, from_vector<int64_t>({1, 0})).item<float>() == Approx(2.5));
}

TEST_CASE("nll_loss gradients match finite differences", "[loss][grad]") {
  Tensor yi = from_vector<int64_t>({1, -100, 3, 0});
  CHECK_GRADIENTS([yi](const V& v) { return nll_loss(v[0], yi, {}); }, input({4, 5}, -3, -0.1));
  CHECK_GRADIENTS([yi](const V& v) { return nll_loss(v[0], yi, {.reduction = Reduction::none, .label_smoothing = 0.2}); },
                  input({4, 5}, -3, -0.1));
  CHECK_GRADIENTS([yi](const V& v) { return nll_loss(v[0].t(), yi, {.reduction = Reduction::sum}); },
                  input({5, 4}, -3, -0.1));
}

TEST_CASE("nll_loss is twice differentiable (create_graph)", "[loss][grad][grad2]") {
  Tensor yi = from_vector<int64_t>({1, -100, 3, 0});
  CHECK_SECOND_GRADIENTS([yi](const V& v) { return nll_loss(v[0], yi, {}); }, input({4, 5}, -3, -0.1));
  CHECK_SECOND_GRADIENTS([yi](const V& v) { return nll_loss(v[0].t(), yi, {.reduction = Reduction::sum}); },
                         input({5, 4}, -3, -0.1));
  CHECK_SECOND_GRADIENTS([yi](const V& v) { return nll_loss(square(v[0]), yi, {.reduction = Reduction::none}); },
                         input({4, 5}));
  CHECK_SECOND_GRADIENTS([yi](const V& v) { return nll_loss(log_softmax(v[0], 1), yi, {.label_smoothing = 0.2}); },
                         input({4, 5}, -3, 3));
  // nll_loss(log_softmax(x)) is cross_entropy(x): the same Hessian-vector product
  Tensor y = from_vector<int64_t>({1, 2, 3, 0});
  Tensor x = input({4, 5}, -3, 3), v = randn({4, 5}, {.dtype = DType::f64});
  auto hvp = [&](const Tensor& loss) {
    Tensor g = autograd::grad({loss}, {x}, {}, {.create_graph = true})[0];
    return autograd::grad({(g * v).sum()}, {x})[0];
  };
  Tensor want = hvp(cross_entropy(x, y, {.label_smoothing = 0.1}));
  CHECK(want.abs().sum().item<double>() > 0.1);
  CHECK(allclose(hvp(nll_loss(log_softmax(x, 1), y, {.label_smoothing = 0.1})), want, 1e-12, 1e-12));
}

TEST_CASE("mse_loss values and gradients", "[loss]") {
  Tensor a = tensor({{1, 2}, {3, 4}}), b = tensor({{1, 0}, {5, 4}});
  CHECK(mse_loss(a, b).item<float>() == Approx(2.0));  // (0 + 4 + 4 + 0) / 4
  CHECK(mse_loss(a, b, Reduction::sum).item<float>() == Approx(8.0));
  CHECK(mse_loss(a, b, Reduction::none).to_vector<float>() == std::vector<float>{0, 4, 4, 0});
  for (Reduction r : {Reduction::none, Reduction::mean, Reduction::sum})
    CHECK_GRADIENTS([r](const V& v) { return mse_loss(v[0], v[1], r); }, input({3, 4}), input({3, 4}));
  CHECK_GRADIENTS([](const V& v) { return mse_loss(v[0].t(), v[1]); }, input({4, 3}), input({3, 4}));
}

TEST_CASE("binary_cross_entropy_with_logits matches PyTorch and stays finite", "[loss]") {
  Tensor x = tensor({{0.5, -1.0}, {2.0, 0.0}}, {.dtype = DType::f64});
  Tensor t = tensor({{1.0, 0.0}, {0.25, 1.0}}, {.dtype = DType::f64});
  std::vector<double> none = binary_cross_entropy_with_logits(x, t, Reduction::none).to_vector<double>();
  std::vector<double> want{0.4740769841801067, 0.31326168751822286, 1.6269280110429727, 0.6931471805599453};
  for (size_t i = 0; i < 4; ++i) CHECK(none[i] == Approx(want[i]).epsilon(1e-12));
  CHECK(binary_cross_entropy_with_logits(x, t).item<double>() == Approx(0.7768534658253119).epsilon(1e-12));
  CHECK(binary_cross_entropy_with_logits(x, t, Reduction::sum).item<double>() ==
        Approx(4 * 0.7768534658253119).epsilon(1e-12));
  // |x| = 100: no overflow; PyTorch gives [100, 0, 0] in f32
  Tensor big = binary_cross_entropy_with_logits(tensor({100.0, -100.0, 30.0}), tensor({0.0, 0.0, 1.0}),
                                                Reduction::none);
  std::vector<float> b = big.to_vector<float>();
  CHECK(b[0] == Approx(100.0f));
  CHECK(b[1] == Approx(0.0f).margin(1e-30));
  CHECK(b[2] == Approx(0.0f).margin(1e-12));
}

TEST_CASE("binary_cross_entropy_with_logits gradients, including at x = 0", "[loss][grad]") {
  for (Reduction r : {Reduction::none, Reduction::mean, Reduction::sum})
    CHECK_GRADIENTS([r](const V& v) { return binary_cross_entropy_with_logits(v[0], v[1], r); }, input({3, 4}, -4, 4),
                    input({3, 4}, 0, 1));
  CHECK_GRADIENTS([](const V& v) { return binary_cross_entropy_with_logits(v[0].t(), v[1]); }, input({4, 3}, -4, 4),
                  input({3, 4}, 0, 1));
  // at exactly 0 the gradient is sigmoid(0) - t = 0.5 - t
  Tensor x = zeros({2}, {.dtype = DType::f64}).requires_grad_();
  binary_cross_entropy_with_logits(x, tensor({0.0, 1.0}, {.dtype = DType::f64}), Reduction::sum).backward();
  CHECK(x.grad().to_vector<double>() == std::vector<double>{0.5, -0.5});
}

TEST_CASE("dropout zeroes with probability p and scales the rest", "[loss][dropout]") {
  manual_seed(11);
  Tensor x = ones({100000});
  Tensor y = dropout(x, 0.3);
  std::vector<float> v = y.to_vector<float>();
  int64_t zeros_seen = 0, wrong = 0;
  for (float f : v) {
    if (f == 0.0f) ++zeros_seen;
    else if (f != Approx(1.0 / 0.7)) ++wrong;
  }
  CHECK(wrong == 0);
  CHECK(double(zeros_seen) / 1e5 == Approx(0.3).margin(0.01));
  // same seed, same mask
  manual_seed(11);
  CHECK(dropout(x, 0.3).to_vector<float>() == v);
  // identity when not training or p == 0; zeros when p == 1
  CHECK(dropout(x, 0.5, false).impl() == x.impl());
  CHECK(dropout(x, 0.0).impl() == x.impl());
  CHECK(dropout(tensor({1, 2, 3}), 1.0).to_vector<float>() == std::vector<float>{0, 0, 0});
}

TEST_CASE("dropout gradient is the mask", "[loss][dropout][grad]") {
  Tensor x = input({4, 5});
  manual_seed(5);
  Tensor y = dropout(x, 0.4);
  y.sum().backward();
  std::vector<double> yv = y.to_vector<double>(), xv = x.to_vector<double>(), g = x.grad().to_vector<double>();
  for (size_t i = 0; i < g.size(); ++i) {
    CHECK(g[i] == Approx(yv[i] == 0.0 ? 0.0 : 1.0 / 0.6));
    CHECK(yv[i] == Approx(xv[i] * g[i]));
  }
  // a fixed seed makes the op deterministic, so finite differences apply
  CHECK_GRADIENTS([](const V& v) { manual_seed(9); return dropout(v[0], 0.5); }, input({3, 4}));
  Tensor z = input({3});
  dropout(z, 1.0).sum().backward();
  CHECK(z.grad().to_vector<double>() == std::vector<double>{0, 0, 0});
}

TEST_CASE("loss errors name the op, what was expected and what came", "[loss][errors]") {
  Tensor x = zeros({4, 3});
  std::string m = message_of([&] { cross_entropy(x, from_vector<int64_t>({0, 3, 1, 2})); });
  CHECK(has(m, "cross_entropy"));
  CHECK(has(m, "label 3"));
  CHECK(has(m, "3 classes"));
  CHECK(has(m, "test_loss.cpp"));
  m = message_of([&] { cross_entropy(x, from_vector<int64_t>({0, -1, 1, 2})); });
  CHECK(has(m, "label -1"));
  m = message_of([&] { cross_entropy(x, tensor({0, 1, 1, 2})); });  // float labels
  CHECK(has(m, "cross_entropy"));
  CHECK(has(m, "i64"));
  CHECK(has(m, "f32"));
  m = message_of([&] { cross_entropy(x, from_vector<int64_t>({0, 1})); });
  CHECK(has(m, "[4, 3]"));
  CHECK(has(m, "[2]"));
  m = message_of([&] { cross_entropy(zeros({4}), from_vector<int64_t>({0, 1, 1, 2})); });
  CHECK(has(m, "[N, C]"));
  CHECK(has(m, "[4]"));
  m = message_of([&] { cross_entropy(x, from_vector<int64_t>({0, 1, 1, 2}), {.label_smoothing = 1.5}); });
  CHECK(has(m, "label_smoothing"));
  m = message_of([&] { nll_loss(x, from_vector<int64_t>({0, 1, 7, 2})); });
  CHECK(has(m, "nll_loss"));
  CHECK(has(m, "label 7"));
  m = message_of([&] { mse_loss(zeros({2, 3}), zeros({3})); });
  CHECK(has(m, "mse_loss"));
  CHECK(has(m, "[2, 3]"));
  CHECK(has(m, "[3]"));
  m = message_of([&] { binary_cross_entropy_with_logits(zeros({2}), zeros({2}, {.dtype = DType::f64})); });
  CHECK(has(m, "binary_cross_entropy_with_logits"));
  CHECK(has(m, "f64"));
  m = message_of([&] { dropout(x, 1.5); });
  CHECK(has(m, "dropout"));
  CHECK(has(m, "1.5"));
  CHECK(has(message_of([&] { dropout(x, -0.1); }), "dropout"));
}
