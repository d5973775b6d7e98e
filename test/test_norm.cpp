// batch_norm and layer_norm: hand-computed values, running statistics as PyTorch
// updates them, agreement with the same formulas written with reductions, strided
// inputs, gradient checks, errors.
#include "gradcheck.h"

using namespace reel;
using reel::test::input;
using V = std::vector<Tensor>;

namespace {
void check_close(const Tensor& got, const Tensor& want, double tol) {
  REQUIRE(got.shape() == want.shape());
  std::vector<double> g = got.to_vector<double>(), w = want.to_vector<double>();
  for (size_t i = 0; i < g.size(); ++i) CHECK(g[i] == Approx(w[i]).margin(tol));
}

// (x - mean) / sqrt(var + eps) over `dims`, from reductions
Tensor normalise(const Tensor& x, const Dims& dims, double eps) {
  Tensor centred = x - mean(x, dims, true);
  return centred / sqrt(var(x, dims, 0, true) + eps);
}
}  // namespace

TEST_CASE("batch_norm in training uses batch statistics and updates the running ones", "[norm]") {
  Tensor x = tensor({{1, 2}, {3, 4}});  // channel 0: {1, 3}, channel 1: {2, 4}
  Tensor rm = zeros({2}), rv = ones({2});
  Tensor y = batch_norm(x, {}, {}, rm, rv, true, 0.1, 1e-5);
  float s = float(1.0 / std::sqrt(1.0 + 1e-5));  // both channels: mean +-1 away, biased variance 1
  std::vector<float> want{-s, -s, s, s};
  std::vector<float> got = y.to_vector<float>();
  for (size_t i = 0; i < 4; ++i) CHECK(got[i] == Approx(want[i]).epsilon(1e-6));
  // running_mean = 0.9 * 0 + 0.1 * mean; running_var = 0.9 * 1 + 0.1 * (unbiased variance 2)
  CHECK(rm.to_vector<float>()[0] == Approx(0.2f));
  CHECK(rm.to_vector<float>()[1] == Approx(0.3f));
  CHECK(rv.to_vector<float>()[0] == Approx(1.1f));
  CHECK(rv.to_vector<float>()[1] == Approx(1.1f));
  // weight and bias scale and shift; no running statistics is fine in training
  Tensor y2 = batch_norm(x.to(DType::f64), tensor({2, 3}, {.dtype = DType::f64}), tensor({1, -1}, {.dtype = DType::f64}),
                         {}, {}, true);
  std::vector<double> g2 = y2.to_vector<double>();
  CHECK(g2[0] == Approx(1 - 2 * s));
  CHECK(g2[3] == Approx(-1 + 3 * s));
}

TEST_CASE("batch_norm in evaluation uses the running statistics", "[norm]") {
  Tensor x = tensor({{1, 2}, {3, 4}});
  Tensor rm = tensor({1, 2}), rv = tensor({4, 0.25});
  Tensor y = batch_norm(x, tensor({2, 3}), tensor({1, -1}), rm, rv, false, 0.1, 1e-12);
  // (x - rm) / sqrt(rv) * w + b
  std::vector<float> want{1, -1, 3, 11};
  std::vector<float> got = y.to_vector<float>();
  for (size_t i = 0; i < 4; ++i) CHECK(got[i] == Approx(want[i]).epsilon(1e-6));
  CHECK(rm.to_vector<float>() == std::vector<float>{1, 2});  // untouched
  CHECK(rv.to_vector<float>() == std::vector<float>{4, 0.25});
}

TEST_CASE("batch_norm over [N, C, H, W] matches its formula, strided input included", "[norm]") {
  manual_seed(30);
  Tensor x = randn({4, 3, 5, 2}, {.dtype = DType::f64}) * 3.0 + 1.0;
  Tensor w = randn({3}, {.dtype = DType::f64}), b = randn({3}, {.dtype = DType::f64});
  Tensor want = normalise(x, {0, 2, 3}, 1e-5) * w.reshape({3, 1, 1}) + b.reshape({3, 1, 1});
  check_close(batch_norm(x, w, b, {}, {}, true), want, 1e-10);
  check_close(batch_norm(x.to(DType::f32), w.to(DType::f32), b.to(DType::f32), {}, {}, true), want, 1e-4);
  Tensor nhwc = x.permute({0, 2, 3, 1}).contiguous();
  check_close(batch_norm(nhwc.permute({0, 3, 1, 2}), w, b, {}, {}, true), want, 1e-10);
  Tensor rm = zeros({3}, {.dtype = DType::f64}), rv = ones({3}, {.dtype = DType::f64});
  batch_norm(x, w, b, rm, rv, true, 0.5);
  check_close(rm, mean(x, {0, 2, 3}) * 0.5, 1e-10);
  check_close(rv, var(x, {0, 2, 3}) * 0.5 + 0.5, 1e-10);
}

TEST_CASE("layer_norm normalises the trailing dims", "[norm]") {
  Tensor x = tensor({{1, 2, 3, 4}, {2, 2, 2, 2}});
  Tensor y = layer_norm(x, {4});
  double s = 1.0 / std::sqrt(1.25 + 1e-5);  // mean 2.5, variance 1.25
  std::vector<float> got = y.to_vector<float>();
  std::vector<double> want{-1.5 * s, -0.5 * s, 0.5 * s, 1.5 * s, 0, 0, 0, 0};
  for (size_t i = 0; i < 8; ++i) CHECK(got[i] == Approx(want[i]).margin(1e-6));
  manual_seed(31);
  Tensor a = randn({2, 3, 4, 5}, {.dtype = DType::f64}) + 2.0;
  Tensor w = randn({4, 5}, {.dtype = DType::f64}), b = randn({4, 5}, {.dtype = DType::f64});
  Tensor ref = normalise(a, {2, 3}, 1e-5) * w + b;
  check_close(layer_norm(a, {4, 5}, w, b), ref, 1e-10);
  check_close(layer_norm(a.to(DType::f32), {4, 5}, w.to(DType::f32), b.to(DType::f32)), ref, 1e-4);
  Tensor at = a.transpose(0, 1);  // strided rows
  check_close(layer_norm(at, {4, 5}, w, b), normalise(at, {2, 3}, 1e-5) * w + b, 1e-10);
  check_close(layer_norm(a, {3, 4, 5}), normalise(a, {1, 2, 3}, 1e-5), 1e-10);
}

TEST_CASE("normalisation gradients match finite differences", "[norm][grad]") {
  CHECK_GRADIENTS([](const V& v) { return batch_norm(v[0], v[1], v[2], {}, {}, true); }, input({4, 3}), input({3}),
                  input({3}));
  CHECK_GRADIENTS([](const V& v) { return batch_norm(v[0], {}, {}, {}, {}, true); }, input({3, 2, 4}));
  CHECK_GRADIENTS([](const V& v) { return batch_norm(v[0], v[1], v[2], {}, {}, true); }, input({2, 3, 2, 3}),
                  input({3}), input({3}));
  CHECK_GRADIENTS([](const V& v) { return batch_norm(v[0].permute({0, 3, 1, 2}), v[1], v[2], {}, {}, true); },
                  input({2, 2, 3, 3}), input({3}), input({3}));  // channels-last
  auto eval = [](const V& v) {
    Tensor rm = tensor({0.5, -0.5}, {.dtype = DType::f64}), rv = tensor({2, 0.5}, {.dtype = DType::f64});
    return batch_norm(v[0], v[1], v[2], rm, rv, false);
  };
  CHECK_GRADIENTS(eval, input({3, 2, 2}), input({2}), input({2}));
  CHECK_GRADIENTS([](const V& v) { return layer_norm(v[0], {4}, v[1], v[2]); }, input({3, 4}), input({4}), input({4}));
  CHECK_GRADIENTS([](const V& v) { return layer_norm(v[0], {3, 2}); }, input({2, 3, 2}));
  CHECK_GRADIENTS([](const V& v) { return layer_norm(v[0].transpose(0, 1), {2, 3}, v[1], {}); }, input({2, 4, 3}),
                  input({2, 3}));
}

TEST_CASE("normalisation is twice differentiable (create_graph)", "[norm][grad][grad2]") {
  // evaluation with mean 0 and invstd 1 is y = w x + b; L = sum(y^2) / 2 gives
  // dL/dw = sum x (w x + b) and d/dx_j of it = 2 w x_j + b
  Tensor x = tensor({1.0, 2.0}, {.dtype = DType::f64}).reshape({2, 1}).detach().requires_grad_();
  Tensor w = full({1}, 2.0, {.dtype = DType::f64}).requires_grad_(), b = full({1}, 1.0, {.dtype = DType::f64});
  Tensor rm = zeros({1}, {.dtype = DType::f64}), rv = full({1}, 1 - 1e-5, {.dtype = DType::f64});
  Tensor y = batch_norm(x, w, b, rm, rv, false);
  Tensor gw = autograd::grad({(square(y) * 0.5).sum()}, {w}, {}, {.create_graph = true})[0];
  CHECK(gw.item<double>() == Approx(13));
  std::vector<double> gg = autograd::grad({gw.sum()}, {x})[0].to_vector<double>();
  CHECK(gg[0] == Approx(5));
  CHECK(gg[1] == Approx(9));

  CHECK_SECOND_GRADIENTS([](const V& v) { return batch_norm(v[0], v[1], v[2], {}, {}, true); }, input({4, 3}),
                         input({3}), input({3}));
  CHECK_SECOND_GRADIENTS([](const V& v) { return batch_norm(v[0], {}, {}, {}, {}, true); }, input({3, 2, 2}));
  CHECK_SECOND_GRADIENTS([](const V& v) { return square(batch_norm(v[0], v[1], v[2], {}, {}, true)); },
                         input({2, 2, 2, 3}), input({2}), input({2}));
  auto eval = [](const V& v) {
    Tensor rm = tensor({0.5, -0.5}, {.dtype = DType::f64}), rv = tensor({2, 0.5}, {.dtype = DType::f64});
    return square(batch_norm(v[0], v[1], v[2], rm, rv, false));
  };
  CHECK_SECOND_GRADIENTS(eval, input({3, 2, 2}), input({2}), input({2}));
  CHECK_SECOND_GRADIENTS([](const V& v) { return layer_norm(v[0], {4}, v[1], v[2]); }, input({3, 4}), input({4}),
                         input({4}));
  CHECK_SECOND_GRADIENTS([](const V& v) { return square(layer_norm(v[0], {3, 2})); }, input({2, 3, 2}));
  CHECK_SECOND_GRADIENTS([](const V& v) { return square(layer_norm(v[0], {2, 3}, v[1], {})); }, input({2, 3}),
                         input({2, 3}));
}

TEST_CASE("normalisation errors name the op and the shapes", "[norm][errors]") {
  auto message = [](auto f) { return reel::test::error_message(f); };
  std::string m = message([] { batch_norm(zeros({4}), {}, {}, {}, {}, true); });
  CHECK_THAT(m, Catch::Contains("batch_norm") && Catch::Contains("[4]") && Catch::Contains("test_norm.cpp"));
  m = message([] { batch_norm(zeros({4, 3}), zeros({4}), {}, {}, {}, true); });
  CHECK_THAT(m, Catch::Contains("batch_norm") && Catch::Contains("weight") && Catch::Contains("[3]") &&
                    Catch::Contains("[4]"));
  m = message([] { batch_norm(zeros({4, 3}), {}, {}, {}, {}, false); });
  CHECK_THAT(m, Catch::Contains("batch_norm") && Catch::Contains("running_mean"));
  m = message([] { batch_norm(zeros({1, 3}), {}, {}, {}, {}, true); });
  CHECK_THAT(m, Catch::Contains("batch_norm") && Catch::Contains("more than 1 value"));
  m = message([] { layer_norm(zeros({2, 3, 4}), {3}); });
  CHECK_THAT(m, Catch::Contains("layer_norm") && Catch::Contains("[3]") && Catch::Contains("[2, 3, 4]"));
  m = message([] { layer_norm(zeros({2, 4}), {4}, zeros({3})); });
  CHECK_THAT(m, Catch::Contains("layer_norm") && Catch::Contains("weight") && Catch::Contains("[3]"));
  m = message([] { layer_norm(zeros({2, 4}, {.dtype = DType::i64}), {4}); });
  CHECK_THAT(m, Catch::Contains("layer_norm") && Catch::Contains("floating"));
}
