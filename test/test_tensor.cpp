// Tensor: handles, dtypes, views sharing storage, creation, random numbers, printing.
#include "gradcheck.h"
#include "../tensor/philox.h"

using namespace reel;
using reel::test::input;

TEST_CASE("a copied Tensor shares storage", "[tensor]") {
  Tensor a = zeros({2, 2});
  Tensor b = a;
  b.fill_(3.0);
  CHECK(a.to_vector<float>() == std::vector<float>{3, 3, 3, 3});
  Tensor c = a.clone();
  c.fill_(1.0);
  CHECK(a.to_vector<float>()[0] == 3.0f);
}

TEST_CASE("creation functions fill shapes and dtypes", "[tensor]") {
  CHECK(zeros({2, 3}).shape() == Dims{2, 3});
  CHECK(ones({4}, {.dtype = DType::f64}).to_vector<double>() == std::vector<double>{1, 1, 1, 1});
  CHECK(full({2}, 7.5).to_vector<float>() == std::vector<float>{7.5, 7.5});
  CHECK(arange(5).dtype() == DType::i64);
  CHECK(arange(5).to_vector<int64_t>() == std::vector<int64_t>{0, 1, 2, 3, 4});
  CHECK(arange(1.0, 2.0, 0.25).to_vector<float>() == std::vector<float>{1, 1.25, 1.5, 1.75});
  CHECK(from_vector(std::vector<int32_t>{1, 2, 3, 4}, {2, 2}).dtype() == DType::i32);
  CHECK(tensor({{1, 2}, {3, 4}}).shape() == Dims{2, 2});
  CHECK(scalar_tensor(2.5).dim() == 0);
  CHECK(scalar_tensor(2.5).item<float>() == 2.5f);
  CHECK(empty({0, 3}).numel() == 0);
  CHECK_THROWS_AS(zeros({-1, 2}), Error);
  CHECK_THROWS_AS(from_vector(std::vector<float>{1, 2, 3}, {2, 2}), Error);
}

TEST_CASE("dtype conversion covers every dtype, f16 and bf16 as storage", "[tensor]") {
  Tensor x = tensor({1.5, -2.25, 3.0});
  for (DType t : {DType::f64, DType::f16, DType::bf16, DType::f32}) {
    Tensor y = x.to(t);
    CHECK(y.dtype() == t);
    CHECK(y.to(DType::f32).to_vector<float>() == std::vector<float>{1.5f, -2.25f, 3.0f});
  }
  CHECK(x.to(DType::i64).to_vector<int64_t>() == std::vector<int64_t>{1, -2, 3});
  // i64 values past 2^53 come back exact (not through a double), from a strided view too
  const int64_t big = (int64_t(1) << 53) + 1;
  Tensor ints = from_vector(std::vector<int64_t>{big, -big, 7, big + 2}, {2, 2});
  CHECK(ints.to_vector<int64_t>() == std::vector<int64_t>{big, -big, 7, big + 2});
  CHECK(ints.t().to_vector<int64_t>() == std::vector<int64_t>{big, 7, -big, big + 2});
  CHECK(ints.select(0, 1).select(0, 1).item<int64_t>() == big + 2);
  CHECK(x.to(DType::boolean).to_vector<bool>() == std::vector<bool>{true, true, true});
  CHECK(tensor({0.1}).to(DType::bf16).item<float>() == Approx(0.1).epsilon(0.01));
  CHECK(tensor({65504.0}).to(DType::f16).item<float>() == 65504.0f);
  CHECK(promote(DType::i64, DType::f32) == DType::f32);
  CHECK(promote(DType::boolean, DType::i32) == DType::i32);
}

TEST_CASE("views share storage and have the right strides", "[tensor][views]") {
  Tensor a = arange(0.0, 12.0).reshape({3, 4});
  Tensor t = a.t();
  CHECK(t.shape() == Dims{4, 3});
  CHECK(t.strides() == Dims{1, 4});
  CHECK(!t.is_contiguous());
  CHECK(t.contiguous().to_vector<float>() == std::vector<float>{0, 4, 8, 1, 5, 9, 2, 6, 10, 3, 7, 11});
  Tensor row = a[1];
  CHECK(row.to_vector<float>() == std::vector<float>{4, 5, 6, 7});
  Tensor col = a.narrow(1, 2, 1);
  CHECK(col.to_vector<float>() == std::vector<float>{2, 6, 10});
  Tensor ev = a.slice(1, 0, 4, 2);
  CHECK(ev.to_vector<float>() == std::vector<float>{0, 2, 4, 6, 8, 10});
  CHECK(a.permute({1, 0}).strides() == Dims{1, 4});
  CHECK(a.unsqueeze(0).shape() == Dims{1, 3, 4});
  CHECK(a.unsqueeze(-1).shape() == Dims{3, 4, 1});
  CHECK(a.unsqueeze(0).squeeze(0).shape() == Dims{3, 4});
  CHECK(a.reshape({2, -1}).shape() == Dims{2, 6});
  CHECK(a.flatten().shape() == Dims{12});
  CHECK(tensor({1, 2}).expand({3, 2}).strides() == Dims{0, 1});
  row.fill_(0.0);  // writes through to a
  CHECK(a.to_vector<float>()[5] == 0.0f);
  // a view of a non-contiguous tensor: reshape copies only when it must
  CHECK(t.reshape({12}).to_vector<float>()[1] == 0.0f);  // a[1][0] was zeroed
  CHECK_THROWS_AS(t.view({12}), Error);
  CHECK(a.view({4, 3}).shape() == Dims{4, 3});
}

TEST_CASE("view gradients flow back to the base", "[tensor][views][grad]") {
  using V = std::vector<Tensor>;
  CHECK_GRADIENTS([](const V& v) { return v[0].reshape({6, 2}); }, input({3, 4}));
  CHECK_GRADIENTS([](const V& v) { return v[0].t(); }, input({3, 4}));
  CHECK_GRADIENTS([](const V& v) { return v[0].permute({2, 0, 1}); }, input({2, 3, 4}));
  CHECK_GRADIENTS([](const V& v) { return v[0].narrow(1, 1, 2); }, input({3, 4}));
  CHECK_GRADIENTS([](const V& v) { return v[0].slice(0, 0, 3, 2); }, input({3, 4}));
  CHECK_GRADIENTS([](const V& v) { return v[0].select(1, 2); }, input({3, 4}));
  CHECK_GRADIENTS([](const V& v) { return v[0].expand({2, 3, 4}); }, input({3, 1}));
  CHECK_GRADIENTS([](const V& v) { return v[0].unsqueeze(1).squeeze(); }, input({3, 4}));
  CHECK_GRADIENTS([](const V& v) { return v[0].t().flatten(); }, input({3, 4}));
  CHECK_GRADIENTS([](const V& v) { return v[0].t().contiguous() * 2.0; }, input({3, 4}));
  // through f32 the rounding (~1e-7) needs a wider finite-difference step
  CHECK(reel::test::gradcheck([](const V& v) { return v[0].to(DType::f32).to(DType::f64); }, {input({3})}, 1e-3, 1e-4,
                              1e-3) == "");
}

TEST_CASE("the generator is seedable", "[tensor][random]") {
  manual_seed(42);
  std::vector<float> a = randn({100}).to_vector<float>();
  std::vector<float> u = rand({100}).to_vector<float>();
  manual_seed(42);
  CHECK(randn({100}).to_vector<float>() == a);
  CHECK(rand({100}).to_vector<float>() == u);
  double mean = 0, var = 0;
  Tensor big = randn({100000});
  mean = big.mean().item<double>();
  var = reel::var(big).item<double>();
  CHECK(std::abs(mean) < 0.02);
  CHECK(std::abs(var - 1.0) < 0.02);
  Tensor r = rand({10000});
  CHECK(r.max().item<float>() < 1.0f);
  CHECK(amin(r).item<float>() >= 0.0f);
  Tensor ri = randint(3, 7, {1000});
  CHECK(amin(ri).item<int64_t>() == 3);
  CHECK(amax(ri).item<int64_t>() == 6);
  std::vector<int64_t> p = randperm(10).to_vector<int64_t>();
  std::sort(p.begin(), p.end());
  CHECK(p == std::vector<int64_t>{0, 1, 2, 3, 4, 5, 6, 7, 8, 9});
}

TEST_CASE("printing shows values, shape, dtype and device", "[tensor][print]") {
  CHECK(tensor({{1, 2}, {3, 4}}).str() ==
        "tensor([[1., 2.],\n        [3., 4.]], shape=[2, 2], dtype=f32, device=cpu)");
  CHECK(tensor({0.5, -1.25}).str() == "tensor([ 0.5000, -1.2500], shape=[2], dtype=f32, device=cpu)");
  CHECK(arange(3).str() == "tensor([0, 1, 2], shape=[3], dtype=i64, device=cpu)");
  CHECK(scalar_tensor(3).str() == "tensor(3., shape=[], dtype=f32, device=cpu)");
  std::string big = arange(0.0, 2000.0).str();
  CHECK(big.find("...") != std::string::npos);
  CHECK(tensor({1.0}).requires_grad_().str().find("requires_grad") != std::string::npos);
}

TEST_CASE("item and data check what they are asked for", "[tensor][errors]") {
  Tensor x = tensor({1, 2});
  CHECK_THROWS_AS(x.item<float>(), Error);
  CHECK_THROWS_AS(x.data<double>(), Error);
  CHECK(x.data<float>()[1] == 2.0f);
  CHECK_THROWS_AS(Tensor().item<float>(), Error);
}

TEST_CASE("rand, randn and randint are the Philox words of their blocks, element by element", "[random]") {
  // The definition the CUDA fills share: after manual_seed(s), element i of the first
  // fill is word i % 4 of block i / 4 (uniforms, integers), or half i % 2 of the
  // Box-Muller pair of block i / 2 (normals). Sizes cross the parallel grain and leave
  // partial blocks.
  for (int64_t n : {int64_t(7), int64_t(40001)}) {
    INFO("n = " << n);
    manual_seed(77);
    std::vector<float> u = rand({n}).to_vector<float>();
    manual_seed(77);
    std::vector<float> g = randn({n}).to_vector<float>();
    manual_seed(77);
    std::vector<int64_t> k = randint(-5, 1000, {n}, {.dtype = DType::i64}).to_vector<int64_t>();
    for (int64_t i = 0; i < n; i += (n > 100 ? 997 : 1)) {
      philox::Block b = philox::generate(77, uint64_t(i) / 4);
      CHECK(u[size_t(i)] == philox::to_unit(b.w[i % 4]));
      CHECK(k[size_t(i)] == -5 + int64_t(b.w[i % 4] % 1005));
      philox::NormalPair p = philox::normal_pair(77, uint64_t(i) / 2);
      CHECK(g[size_t(i)] == (i % 2 == 0 ? p.even : p.odd));
    }
    CHECK(u[size_t(n - 1)] == philox::to_unit(philox::generate(77, uint64_t(n - 1) / 4).w[(n - 1) % 4]));
  }
}

TEST_CASE("reductions over chosen dims", "[reduce]") {
  Tensor a = tensor({{1, 2, 3}, {4, 5, 6}});
  CHECK(sum(a).item<float>() == 21.0f);
  CHECK(sum(a, {0}).to_vector<float>() == std::vector<float>{5, 7, 9});
  CHECK(sum(a, {1}, true).shape() == Dims{2, 1});
  CHECK(mean(a, {-1}).to_vector<float>() == std::vector<float>{2, 5});
  CHECK(amax(a, {0}).to_vector<float>() == std::vector<float>{4, 5, 6});
  CHECK(argmax(a, 1).to_vector<int64_t>() == std::vector<int64_t>{2, 2});
  CHECK(argmin(a.t(), 1).to_vector<int64_t>() == std::vector<int64_t>{0, 0, 0});
  CHECK(prod(a, {1}).to_vector<float>() == std::vector<float>{6, 120});
  CHECK(var(a, {1}).to_vector<float>() == std::vector<float>{1, 1});
  CHECK(sum(a > 2.0).item<int64_t>() == 4);
  CHECK(sum(a.t(), {1}).to_vector<float>() == std::vector<float>{5, 7, 9});
  Tensor big = ones({300, 200});
  CHECK(sum(big, {0}).to_vector<float>()[17] == 300.0f);
  CHECK(sum(big.t(), {1}).to_vector<float>()[17] == 300.0f);
}

TEST_CASE("sums over the outer and inner dims of a block (NCHW bias gradients) match a plain loop", "[reduce]") {
  // [A, K, B] summed over A and B: one image per thread, each streamed in memory order;
  // small (serial) and large (parallel, odd A) shapes, sum and mean, f32 and f64.
  for (Dims shape : {Dims{3, 4, 2, 5}, Dims{9, 16, 24, 20}, Dims{1, 7, 3, 3}}) {
    for (DType dt : {DType::f32, DType::f64}) {
      INFO(shape.str() << " " << dtype_name(dt));
      manual_seed(3);
      Tensor x = randn(shape, {.dtype = dt});
      std::vector<double> v = x.to_vector<double>();
      int64_t A = shape[0], K = shape[1], B = shape[2] * shape[3];
      std::vector<double> want(size_t(K), 0.0);
      for (int64_t a = 0; a < A; ++a)
        for (int64_t k = 0; k < K; ++k)
          for (int64_t b = 0; b < B; ++b) want[size_t(k)] += v[size_t((a * K + k) * B + b)];
      std::vector<double> got = sum(x, {0, 2, 3}).to_vector<double>(), avg = mean(x, {0, 2, 3}).to_vector<double>();
      REQUIRE(got.size() == size_t(K));
      for (size_t k = 0; k < got.size(); ++k) {
        CHECK(got[k] == Approx(want[k]).margin(1e-3));
        CHECK(avg[k] == Approx(want[k] / double(A * B)).margin(1e-5));
      }
    }
  }
}

TEST_CASE("reduction gradients match finite differences", "[reduce][grad]") {
  using V = std::vector<Tensor>;
  CHECK_GRADIENTS([](const V& v) { return sum(v[0]); }, input({3, 4}));
  CHECK_GRADIENTS([](const V& v) { return sum(v[0], {0, 2}); }, input({2, 3, 4}));
  CHECK_GRADIENTS([](const V& v) { return sum(v[0].t(), {1}, true); }, input({3, 4}));
  CHECK_GRADIENTS([](const V& v) { return mean(v[0], {1}); }, input({3, 4}));
  CHECK_GRADIENTS([](const V& v) { return prod(v[0], {1}); }, input({3, 4}, 0.5, 1.5));
  CHECK_GRADIENTS([](const V& v) { return amax(v[0], {1}); }, input({3, 4}));
  CHECK_GRADIENTS([](const V& v) { return amin(v[0]); }, input({3, 4}));
  CHECK_GRADIENTS([](const V& v) { return var(v[0], {0}); }, input({5, 3}));
  CHECK_GRADIENTS([](const V& v) { return sum_to(v[0], {1, 4}); }, input({3, 4}));
}

TEST_CASE("reduction errors name the op and the dims", "[reduce][errors]") {
  Tensor a = zeros({2, 3});
  try {
    (void)sum(a, {5});
    FAIL("expected an Error");
  } catch (const Error& e) {
    std::string m = e.what();
    CHECK(m.find("sum") != std::string::npos);
    CHECK(m.find("dim 5") != std::string::npos);
  }
  CHECK_THROWS_AS(amax(zeros({0})), Error);
  CHECK(std::isnan(var(zeros({1})).item<float>()));  // one element: 0/0, as PyTorch
}
