// batch_norm_relu: relu(batch_norm(cat(xs, 1))) without the concatenation. Checked
// against that composition (values, running statistics, gradients; f32 vector paths and
// tails, strided pieces, NaN, bf16), the Backend's composed default (what CUDA runs),
// finite differences, BatchNorm::forward_relu, and its errors.
#include "gradcheck.h"

using namespace reel;
using reel::test::check_close_relative;
using reel::test::input;
using V = std::vector<Tensor>;

namespace {
// Forward and backward of the fused op and of relu(batch_norm(cat)) on copies of the
// same pieces; compares outputs, running statistics and every gradient.
void check_against_composition(const V& pieces, bool training, double tol) {
  DType dt = pieces[0].dtype();
  int64_t C = 0;
  for (const Tensor& p : pieces) C += p.size(1);
  Tensor w = (rand({C}, {.dtype = dt}) + 0.5).detach().requires_grad_(),
         b = (rand({C}, {.dtype = dt}) - 0.5).detach().requires_grad_();
  Tensor rm1 = rand({C}, {.dtype = dt}), rv1 = rand({C}, {.dtype = dt}) + 0.5;
  Tensor rm2 = rm1.clone(), rv2 = rv1.clone();
  V a, c;
  for (const Tensor& p : pieces) {
    a.push_back(p.detach().clone().requires_grad_());
    c.push_back(p.detach().clone().requires_grad_());
  }
  Tensor y1 = batch_norm_relu(a, w, b, rm1, rv1, training, 0.1, 1e-5);
  Tensor w2 = w.detach().clone().requires_grad_(), b2 = b.detach().clone().requires_grad_();
  Tensor y2 = relu(batch_norm(cat(c, 1), w2, b2, rm2, rv2, training, 0.1, 1e-5));
  check_close_relative(y1, y2, tol);
  check_close_relative(rm1, rm2, tol);
  check_close_relative(rv1, rv2, tol);
  Tensor g = randn(y1.shape(), {.dtype = dt});
  (y1 * g).sum().backward();
  (y2 * g).sum().backward();
  for (size_t j = 0; j < a.size(); ++j) check_close_relative(a[j].grad(), c[j].grad(), tol);
  check_close_relative(w.grad(), w2.grad(), tol);
  check_close_relative(b.grad(), b2.grad(), tol);
}
}  // namespace

TEST_CASE("batch_norm_relu equals relu(batch_norm(cat)) in values, statistics and gradients", "[norm][bn_relu]") {
  manual_seed(3);
  for (DType dt : {DType::f32, DType::f64}) {
    double tol = dt == DType::f32 ? 2e-5 : 1e-12;
    for (bool training : {true, false}) {
      // S = 9 x 9 = 81: whole 8-lane blocks and a tail; 3 pieces of unequal widths
      check_against_composition({randn({4, 3, 9, 9}, {.dtype = dt}), randn({4, 1, 9, 9}, {.dtype = dt}),
                                 randn({4, 5, 9, 9}, {.dtype = dt}) * 3 + 1},
                                training, tol);
      check_against_composition({randn({2, 6, 5}, {.dtype = dt})}, training, tol);  // one piece, [N, C, L]
      check_against_composition({randn({7, 4}, {.dtype = dt}), randn({7, 2}, {.dtype = dt})}, training, tol);
      // strided pieces: channels-last and a narrowed one
      check_against_composition({randn({3, 4, 4, 2}, {.dtype = dt}).permute({0, 3, 1, 2}),
                                 randn({3, 6, 4, 4}, {.dtype = dt}).narrow(1, 1, 3)},
                                training, tol);
    }
  }
}

TEST_CASE("batch_norm_relu lets NaN through as relu does, and gives 0 at and below 0", "[norm][bn_relu]") {
  Tensor x = tensor({1.0f, 2.0f, std::nanf(""), 4.0f}).reshape({4, 1}).requires_grad_();
  Tensor y = batch_norm_relu({x}, {}, {}, tensor({0.0f}), tensor({1.0f - 1e-5f}), false);
  std::vector<float> v = y.to_vector<float>();
  CHECK(v[0] == Approx(1.0f));
  CHECK(std::isnan(v[2]));
  // eval with mean 2: y = relu(x - 2), whose gradient is 0 at x = 1 and x = 2 and 1 at 4 and NaN
  Tensor z = batch_norm_relu({x}, {}, {}, tensor({2.0f}), tensor({1.0f - 1e-5f}), false);
  z.sum().backward();
  std::vector<float> g = x.grad().to_vector<float>();
  CHECK(g[0] == 0.0f);
  CHECK(g[1] == 0.0f);
  CHECK(g[2] == Approx(1.0f));
  CHECK(g[3] == Approx(1.0f));
}

TEST_CASE("batch_norm_relu in bf16 pieces matches f32 to bf16 precision", "[norm][bn_relu]") {
  manual_seed(4);
  Tensor a = randn({4, 3, 6, 6}), b = randn({4, 2, 6, 6});
  Tensor want = relu(batch_norm(cat({a, b}, 1), {}, {}, {}, {}, true));
  Tensor got = batch_norm_relu({a.to(DType::bf16), b.to(DType::bf16)}, {}, {}, {}, {}, true);
  CHECK(got.dtype() == DType::bf16);
  check_close_relative(got.to(DType::f32), want, 2e-2);
}

TEST_CASE("the Backend's composed batch_norm_relu (the CUDA path) equals the CPU's fused one", "[norm][bn_relu]") {
  manual_seed(5);
  Backend& be = backend_for(kCPU);
  for (bool training : {true, false}) {
    V xs{randn({3, 2, 4, 5}), randn({3, 3, 5, 4}).permute({0, 1, 3, 2}), randn({3, 1, 4, 5})};
    Tensor w = rand({6}) + 0.5, b = rand({6}) - 0.5;
    Tensor rm1 = rand({6}), rv1 = rand({6}) + 0.5, rm2 = rm1.clone(), rv2 = rv1.clone();
    Tensor y1 = empty({3, 6, 4, 5}), y2 = empty({3, 6, 4, 5});
    Tensor m1 = empty({6}), m2 = empty({6}), i1 = empty({6}), i2 = empty({6});
    be.batch_norm_relu_forward(y1, m1, i1, xs, w, b, rm1, rv1, training, 0.1, 1e-5);
    be.Backend::batch_norm_relu_forward(y2, m2, i2, xs, w, b, rm2, rv2, training, 0.1, 1e-5);
    check_close_relative(y1, y2, 1e-5);
    check_close_relative(rm1, rm2, 1e-6);
    check_close_relative(rv1, rv2, 1e-6);
    Tensor gy = randn(y1.shape());
    V g1{empty({3, 2, 4, 5}), Tensor(), empty({3, 1, 4, 5})}, g2{empty({3, 2, 4, 5}), Tensor(), empty({3, 1, 4, 5})};
    Tensor gw1 = empty({6}), gw2 = empty({6}), gb1 = empty({6}), gb2 = empty({6});
    be.batch_norm_relu_backward(g1, gw1, gb1, gy, xs, y1, w, m1, i1, training);
    be.Backend::batch_norm_relu_backward(g2, gw2, gb2, gy, xs, y1, w, m1, i1, training);
    check_close_relative(g1[0], g2[0], 1e-5);
    check_close_relative(g1[2], g2[2], 1e-5);
    check_close_relative(gw1, gw2, 1e-4);
    check_close_relative(gb1, gb2, 1e-4);
  }
}

TEST_CASE("batch_norm_relu gradients match finite differences", "[norm][bn_relu][grad]") {
  manual_seed(6);
  CHECK_GRADIENTS([](const V& v) { return batch_norm_relu({v[0], v[1]}, v[2], v[3], {}, {}, true); },
                  input({3, 2, 3}), input({3, 1, 3}), input({3}, 0.5, 1.5), input({3}));
  CHECK_GRADIENTS([](const V& v) { return batch_norm_relu({v[0]}, {}, {}, {}, {}, true); }, input({4, 3}));
  CHECK_GRADIENTS([](const V& v) { return batch_norm_relu({v[0].permute({0, 3, 1, 2}), v[1]}, {}, v[2], {}, {}, true); },
                  input({2, 2, 3, 2}), input({2, 1, 2, 3}), input({3}));
  auto eval = [](const V& v) {
    Tensor rm = tensor({0.5, -0.5, 0.1}, {.dtype = DType::f64}), rv = tensor({2, 0.5, 1}, {.dtype = DType::f64});
    return batch_norm_relu({v[0], v[1]}, v[2], v[3], rm, rv, false);
  };
  CHECK_GRADIENTS(eval, input({3, 1, 2}), input({3, 2, 2}), input({3}, 0.5, 1.5), input({3}));
  CHECK_SECOND_GRADIENTS([](const V& v) { return square(batch_norm_relu({v[0], v[1]}, v[2], v[3], {}, {}, true)); },
                         input({4, 1, 2}), input({4, 2, 2}), input({3}, 0.5, 1.5), input({3}));
}

TEST_CASE("BatchNorm2d::forward_relu is relu(bn(cat)) and counts the batch", "[norm][bn_relu][nn]") {
  manual_seed(7);
  nn::BatchNorm2d a(5), b(5);
  Tensor x1 = randn({2, 2, 3, 3}), x2 = randn({2, 3, 3, 3});
  check_close_relative(a.forward_relu({x1, x2}), relu(b(cat({x1, x2}, 1))), 1e-5);
  check_close_relative(a.running_mean, b.running_mean, 1e-6);
  CHECK(a.num_batches_tracked.item<int64_t>() == 1);
  a.eval();
  b.eval();
  check_close_relative(a.forward_relu({x1, x2}), relu(b(cat({x1, x2}, 1))), 1e-5);
  CHECK(a.num_batches_tracked.item<int64_t>() == 1);
}

TEST_CASE("batch_norm_relu errors name the op, what was expected and what came", "[norm][bn_relu][errors]") {
  auto message = [](auto f) { return reel::test::error_message(f); };
  std::string m = message([] { batch_norm_relu({}, {}, {}, {}, {}, true); });
  CHECK_THAT(m, Catch::Contains("batch_norm_relu") && Catch::Contains("empty"));
  m = message([] { batch_norm_relu({zeros({2, 3, 4}), zeros({2, 3, 5})}, {}, {}, {}, {}, true); });
  CHECK_THAT(m, Catch::Contains("batch_norm_relu") && Catch::Contains("[2, 3, 4]") && Catch::Contains("[2, 3, 5]") &&
                    Catch::Contains("test_batch_norm_relu.cpp"));
  m = message([] { batch_norm_relu({zeros({2, 3}), zeros({2, 1}, {.dtype = DType::f64})}, {}, {}, {}, {}, true); });
  CHECK_THAT(m, Catch::Contains("batch_norm_relu") && Catch::Contains("f64"));
  m = message([] { batch_norm_relu({zeros({2, 3}), zeros({2, 1})}, zeros({3}), {}, {}, {}, true); });
  CHECK_THAT(m, Catch::Contains("weight") && Catch::Contains("[4]") && Catch::Contains("[3]"));
  m = message([] { batch_norm_relu({zeros({2, 3}), Tensor()}, {}, {}, {}, {}, true); });
  CHECK_THAT(m, Catch::Contains("batch_norm_relu") && Catch::Contains("undefined"));
  nn::BatchNorm2d bn(4);
  m = message([&] { bn.forward_relu({zeros({2, 3, 2, 2})}); });
  CHECK_THAT(m, Catch::Contains("BatchNorm2d") && Catch::Contains("[N, 4, H, W]") && Catch::Contains("[2, 3, 2, 2]"));
}
