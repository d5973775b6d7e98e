// matmul, bmm, linear, linear_relu: values, NumPy shape rules, strided operands,
// f32 (oneDNN) against f64 (loops), gradients, errors.
#include "gradcheck.h"

using namespace reel;
using reel::test::input;
using V = std::vector<Tensor>;

namespace {
// The product by definition, in doubles, for a [B, M, K] and b [B, K, N] of any strides.
std::vector<double> reference_bmm(const Tensor& a, const Tensor& b) {
  std::vector<double> av = a.to_vector<double>(), bv = b.to_vector<double>();
  int64_t B = a.size(0), M = a.size(1), K = a.size(2), N = b.size(2);
  std::vector<double> out(size_t(B * M * N), 0.0);
  for (int64_t i = 0; i < B; ++i)
    for (int64_t m = 0; m < M; ++m)
      for (int64_t n = 0; n < N; ++n)
        for (int64_t k = 0; k < K; ++k)
          out[size_t((i * M + m) * N + n)] += av[size_t((i * M + m) * K + k)] * bv[size_t((i * K + k) * N + n)];
  return out;
}

void check_close(const std::vector<double>& got, const std::vector<double>& want, double tol) {
  REQUIRE(got.size() == want.size());
  for (size_t i = 0; i < got.size(); ++i) CHECK(got[i] == Approx(want[i]).margin(tol));
}
}  // namespace

TEST_CASE("matmul of 2-D matrices gives hand-computed values", "[linalg]") {
  Tensor a = tensor({{1, 2, 3}, {4, 5, 6}});
  Tensor b = tensor({{7, 8}, {9, 10}, {11, 12}});
  Tensor c = matmul(a, b);
  CHECK(c.shape() == Dims{2, 2});
  CHECK(c.to_vector<float>() == std::vector<float>{58, 64, 139, 154});
  Tensor cd = matmul(a.to(DType::f64), b.to(DType::f64));
  CHECK(cd.dtype() == DType::f64);
  CHECK(cd.to_vector<double>() == std::vector<double>{58, 64, 139, 154});
  CHECK(a.matmul(b).to_vector<float>() == c.to_vector<float>());
}

TEST_CASE("matmul follows NumPy's rules for 1-D operands", "[linalg]") {
  Tensor v = tensor({1, 2, 3});
  Tensor m = tensor({{1, 0}, {0, 1}, {1, 1}});
  Tensor dot = matmul(v, v);
  CHECK(dot.dim() == 0);
  CHECK(dot.item<float>() == 14);
  Tensor vm = matmul(v, m);  // [3] @ [3, 2] -> [2]
  CHECK(vm.shape() == Dims{2});
  CHECK(vm.to_vector<float>() == std::vector<float>{4, 5});
  Tensor mv = matmul(m.t(), v);  // [2, 3] @ [3] -> [2]
  CHECK(mv.shape() == Dims{2});
  CHECK(mv.to_vector<float>() == std::vector<float>{4, 5});
  Tensor batch = arange(0.0, 12.0).reshape({2, 2, 3});
  Tensor bv = matmul(batch, v);  // [2, 2, 3] @ [3] -> [2, 2]
  CHECK(bv.shape() == Dims{2, 2});
  CHECK(bv.to_vector<float>() == std::vector<float>{8, 26, 44, 62});
  Tensor vb = matmul(tensor({1, 1}), batch);  // [2] @ [2, 2, 3] -> [2, 3]
  CHECK(vb.shape() == Dims{2, 3});
  CHECK(vb.to_vector<float>() == std::vector<float>{3, 5, 7, 15, 17, 19});
}

TEST_CASE("matmul broadcasts batch dims", "[linalg]") {
  manual_seed(1);
  Tensor a = randn({2, 1, 3, 4}, {.dtype = DType::f64});
  Tensor b = randn({3, 4, 5}, {.dtype = DType::f64});
  Tensor c = matmul(a, b);
  REQUIRE(c.shape() == Dims{2, 3, 3, 5});
  // c[i, j] = a[i, 0] @ b[j]
  for (int64_t i = 0; i < 2; ++i)
    for (int64_t j = 0; j < 3; ++j)
      CHECK(allclose(c[i][j], matmul(a[i][0], b[j]), 1e-12, 1e-12));
  // a batch against one matrix (folded into one product) and one matrix against a batch
  Tensor w = randn({4, 5}, {.dtype = DType::f64});
  Tensor aw = matmul(a, w);
  REQUIRE(aw.shape() == Dims{2, 1, 3, 5});
  CHECK(allclose(aw[1][0], matmul(a[1][0], w), 1e-12, 1e-12));
  Tensor wb = matmul(randn({3, 4}, {.dtype = DType::f64}), b);
  CHECK(wb.shape() == Dims{3, 3, 5});
}

// (every product here has over 4096 multiply-adds: smaller ones take the loops in f32 too)
TEST_CASE("matmul in f32 (oneDNN) agrees with f64 (loops), strided operands included", "[linalg]") {
  manual_seed(2);
  Tensor a = randn({3, 17, 33}), b = randn({3, 33, 9});
  auto both = [](const Tensor& x, const Tensor& y) {
    Tensor f = matmul(x, y);
    Tensor d = matmul(x.to(DType::f64), y.to(DType::f64));
    CHECK(f.shape() == d.shape());
    check_close(f.to_vector<double>(), d.to_vector<double>(), 1e-4);
  };
  both(a, b);
  both(a.transpose(1, 2).contiguous().transpose(1, 2), b);          // a stored transposed
  both(a, b.transpose(1, 2).contiguous().transpose(1, 2));          // b stored transposed
  both(a.slice(2, 0, 33, 2), b.slice(1, 0, 33, 2));                 // every other column: a copy inside
  both(a.permute({1, 0, 2}).contiguous().permute({1, 0, 2}), b);    // batch stride inside rows
  both(a[0], b[1]);                                                  // offsets
  both(randn({3, 64, 1}), randn({3, 1, 40}));                          // K = 1
  both(randn({64, 2}).select(1, 0).unsqueeze(0).unsqueeze(2), randn({1, 1, 80}));  // strided column
  both(randn({16, 33}).expand({3, 16, 33}), b);                      // stride-0 batch
  // a weight gradient g^T x, N >= 4 M: a copied to row-major when K is short, read as the
  // transposed view when K is long (cpu/dnnl_matmul.cpp)
  for (int64_t K : {64, 1100}) {
    CAPTURE(K);
    Tensor g = randn({K, 8}), x = randn({K, 40});
    Tensor f = matmul(g.t(), x);
    check_close(f.to_vector<double>(), matmul(g.t().to(DType::f64), x.to(DType::f64)).to_vector<double>(), 1e-3);
  }
  // against the definition
  check_close(matmul(a, b).to_vector<double>(), reference_bmm(a, b), 1e-4);
  Tensor at = a.transpose(1, 2).contiguous().transpose(1, 2);
  check_close(bmm(at, b).to_vector<double>(), reference_bmm(a, b), 1e-4);
}

TEST_CASE("f32 products of many shapes agree with f64, tiny ones (plain loops) included", "[linalg]") {
  // below 4096 multiply-adds f32 runs on the loops, above on oneDNN; odd N, M and K,
  // transposed and strided operands
  manual_seed(4);
  for (int64_t N : {1, 7, 8, 9, 16, 24, 33, 64, 65}) {
    for (int64_t M : {1, 5, 9, 128}) {
      for (int64_t K : {1, 3, 64, 300}) {
        CAPTURE(M, N, K);
        Tensor x = randn({M, K}), w = randn({N, K}), b = randn({N});
        for (bool relu : {false, true}) {
          Tensor f = relu ? linear_relu(x, w, b) : linear(x, w, b);  // w read transposed
          Tensor d = relu ? linear_relu(x.to(DType::f64), w.to(DType::f64), b.to(DType::f64))
                          : linear(x.to(DType::f64), w.to(DType::f64), b.to(DType::f64));
          check_close(f.to_vector<double>(), d.to_vector<double>(), 1e-4);
        }
        Tensor wt = randn({K, N});
        check_close(matmul(x.t().contiguous().t(), wt).to_vector<double>(),
                    matmul(x.to(DType::f64), wt.to(DType::f64)).to_vector<double>(), 1e-4);
      }
    }
  }
  Tensor a = randn({4, 9, 20}), b = randn({4, 20, 12});  // batched, and a broadcast batch
  check_close(bmm(a, b).to_vector<double>(), reference_bmm(a, b), 1e-4);
  check_close(matmul(a, b[1]).to_vector<double>(), matmul(a.to(DType::f64), b[1].to(DType::f64)).to_vector<double>(),
              1e-4);
}

TEST_CASE("matmul with an empty inner dim gives zeros", "[linalg]") {
  Tensor c = matmul(zeros({2, 0}), zeros({0, 3}));
  CHECK(c.shape() == Dims{2, 3});
  CHECK(c.to_vector<float>() == std::vector<float>(6, 0.0f));
  Tensor y = linear(zeros({4, 0}), zeros({2, 0}), tensor({1, -1}));
  CHECK(y.to_vector<float>() == std::vector<float>{1, -1, 1, -1, 1, -1, 1, -1});
  CHECK(matmul(zeros({0, 3}), zeros({3, 2})).shape() == Dims{0, 2});
}

TEST_CASE("bmm gives per-batch products", "[linalg]") {
  Tensor a = arange(0.0, 8.0).reshape({2, 2, 2});
  Tensor b = tensor({{1, 0}, {0, 2}}).unsqueeze(0).expand({2, 2, 2});
  Tensor c = bmm(a, b);
  CHECK(c.to_vector<float>() == std::vector<float>{0, 2, 2, 6, 4, 10, 6, 14});
}

TEST_CASE("linear and linear_relu fuse bias and relu", "[linalg]") {
  Tensor x = tensor({{1, 2}, {3, 4}, {-5, -6}});
  Tensor w = tensor({{1, -1}, {0.5, 0.5}});
  Tensor b = tensor({10, -10});
  CHECK(linear(x, w, b).to_vector<float>() == std::vector<float>{9, -8.5, 9, -6.5, 11, -15.5});
  CHECK(linear(x, w).to_vector<float>() == std::vector<float>{-1, 1.5, -1, 3.5, 1, -5.5});
  CHECK(linear_relu(x, w, b).to_vector<float>() == std::vector<float>{9, 0, 9, 0, 11, 0});
  CHECK(linear_relu(x.to(DType::f64), w.to(DType::f64), b.to(DType::f64)).to_vector<double>() ==
        std::vector<double>{9, 0, 9, 0, 11, 0});
  // [*, in] inputs keep their leading dims; a 1-D input gives a 1-D output
  Tensor x3 = x.reshape({3, 1, 2});
  CHECK(linear(x3, w, b).shape() == Dims{3, 1, 2});
  CHECK(linear(tensor({1, 2}), w, b).to_vector<float>() == std::vector<float>{9, -8.5});
  // a non-contiguous input, and f32 against f64 on bigger sizes
  manual_seed(3);
  Tensor big = randn({20, 40}), wb = randn({30, 20}), bb = randn({30});
  Tensor xt = big.t();  // [40, 20], strided
  Tensor f = linear_relu(xt, wb, bb);
  Tensor d = linear_relu(xt.to(DType::f64), wb.to(DType::f64), bb.to(DType::f64));
  check_close(f.to_vector<double>(), d.to_vector<double>(), 1e-4);
}

TEST_CASE("matmul gradients match finite differences", "[linalg][grad]") {
  CHECK_GRADIENTS([](const V& v) { return matmul(v[0], v[1]); }, input({3, 4}), input({4, 5}));
  CHECK_GRADIENTS([](const V& v) { return matmul(v[0], v[1]); }, input({4}), input({4}));
  CHECK_GRADIENTS([](const V& v) { return matmul(v[0], v[1]); }, input({4}), input({2, 4, 3}));
  CHECK_GRADIENTS([](const V& v) { return matmul(v[0], v[1]); }, input({2, 3, 4}), input({4}));
  CHECK_GRADIENTS([](const V& v) { return matmul(v[0], v[1]); }, input({2, 1, 3, 4}), input({3, 4, 2}));
  CHECK_GRADIENTS([](const V& v) { return matmul(v[0], v[1]); }, input({2, 3, 4}), input({4, 2}));
  CHECK_GRADIENTS([](const V& v) { return matmul(v[0], v[1]); }, input({3, 4}), input({2, 4, 2}));
  // transposed and sliced views
  CHECK_GRADIENTS([](const V& v) { return matmul(v[0].t(), v[1]); }, input({4, 3}), input({4, 5}));
  CHECK_GRADIENTS([](const V& v) { return matmul(v[0], v[1].transpose(-1, -2)); }, input({2, 3, 4}),
                  input({2, 5, 4}));
  CHECK_GRADIENTS([](const V& v) { return matmul(v[0].slice(1, 0, 6, 2), v[1]); }, input({3, 6}), input({3, 2}));
  CHECK_GRADIENTS([](const V& v) { return bmm(v[0], v[1]); }, input({2, 3, 4}), input({2, 4, 5}));
  CHECK_GRADIENTS([](const V& v) { return bmm(v[0].transpose(1, 2), v[1]); }, input({2, 4, 3}), input({2, 4, 5}));
}

TEST_CASE("linear gradients match finite differences", "[linalg][grad]") {
  CHECK_GRADIENTS([](const V& v) { return linear(v[0], v[1], v[2]); }, input({5, 4}), input({3, 4}), input({3}));
  CHECK_GRADIENTS([](const V& v) { return linear(v[0], v[1]); }, input({2, 5, 4}), input({3, 4}));
  CHECK_GRADIENTS([](const V& v) { return linear(v[0], v[1], v[2]); }, input({4}), input({3, 4}), input({3}));
  CHECK_GRADIENTS([](const V& v) { return linear(v[0].t(), v[1].t(), v[2]); }, input({4, 5}), input({4, 3}),
                  input({3}));
  CHECK_GRADIENTS([](const V& v) { return linear_relu(v[0], v[1], v[2]); }, input({6, 4}), input({3, 4}), input({3}));
  CHECK_GRADIENTS([](const V& v) { return linear_relu(v[0].permute({1, 0, 2}), v[1], v[2]); }, input({3, 2, 4}),
                  input({5, 4}), input({5}));
}

TEST_CASE("gradients reach inputs that need them and skip the rest", "[linalg][grad]") {
  Tensor x = tensor({{1, 2}}), w = tensor({{3, 4}}).requires_grad_();
  linear(x, w).sum().backward();
  CHECK(w.grad().to_vector<float>() == std::vector<float>{1, 2});
  Tensor w2 = tensor({{3, -4}}).requires_grad_(), b2 = tensor({0.5}).requires_grad_();
  linear_relu(tensor({{1, 2}, {1, -2}}), w2, b2).sum().backward();  // rows give -4.5 and 11.5
  CHECK(w2.grad().to_vector<float>() == std::vector<float>{1, -2});
  CHECK(b2.grad().to_vector<float>() == std::vector<float>{1});
}

TEST_CASE("linear algebra errors name the op and the shapes", "[linalg][errors]") {
  auto message = [](auto f) { return reel::test::error_message(f); };
  std::string m = message([] { matmul(zeros({2, 3}), zeros({4, 5})); });
  CHECK_THAT(m, Catch::Contains("matmul") && Catch::Contains("[2, 3]") && Catch::Contains("[4, 5]") &&
                    Catch::Contains("test_linalg.cpp"));
  m = message([] { matmul(zeros({2, 2, 3}), zeros({3, 3, 1})); });
  CHECK_THAT(m, Catch::Contains("matmul") && Catch::Contains("[2, 2, 3]") && Catch::Contains("[3, 3, 1]"));
  m = message([] { matmul(zeros({2, 3}), zeros({3, 2}, {.dtype = DType::f64})); });
  CHECK_THAT(m, Catch::Contains("matmul") && Catch::Contains("f32") && Catch::Contains("f64"));
  m = message([] { matmul(scalar_tensor(1), zeros({3})); });
  CHECK_THAT(m, Catch::Contains("matmul") && Catch::Contains("at least 1 dim"));
  m = message([] { bmm(zeros({2, 3}), zeros({2, 3, 4})); });
  CHECK_THAT(m, Catch::Contains("bmm") && Catch::Contains("[2, 3]"));
  m = message([] { bmm(zeros({2, 3, 4}), zeros({3, 4, 5})); });
  CHECK_THAT(m, Catch::Contains("bmm") && Catch::Contains("[2, 3, 4]") && Catch::Contains("[3, 4, 5]"));
  m = message([] { linear(zeros({8, 5}), zeros({3, 4})); });
  CHECK_THAT(m, Catch::Contains("linear") && Catch::Contains("[8, 5]") && Catch::Contains("[3, 4]"));
  m = message([] { linear(zeros({8, 4}), zeros({3, 4}), zeros({4})); });
  CHECK_THAT(m, Catch::Contains("linear") && Catch::Contains("bias") && Catch::Contains("[4]"));
  m = message([] { linear_relu(zeros({8, 4}), zeros({4})); });
  CHECK_THAT(m, Catch::Contains("linear_relu") && Catch::Contains("weight"));
  m = message([] { matmul(zeros({2, 3}), zeros({3}, {.dtype = DType::i64})); });
  CHECK_THAT(m, Catch::Contains("matmul") && Catch::Contains("floating"));
}
