// The tape: backward, accumulation, retain_graph, grad(), no-grad, memory, threads.
#include <thread>

#include "gradcheck.h"

using namespace reel;

TEST_CASE("backward accumulates into leaves", "[autograd]") {
  Tensor x = tensor({1, 2, 3}).requires_grad_();
  Tensor y = (x * x).sum();
  y.backward();
  CHECK(x.grad().to_vector<float>() == std::vector<float>{2, 4, 6});
  (x * 3.0).sum().backward();
  CHECK(x.grad().to_vector<float>() == std::vector<float>{5, 7, 9});
}

TEST_CASE("backward twice without retain_graph throws", "[autograd][errors]") {
  Tensor x = tensor({1, 2}).requires_grad_();
  Tensor y = exp(x).sum();
  y.backward({}, true);
  y.backward();
  try {
    y.backward();
    FAIL("expected an Error");
  } catch (const Error& e) {
    std::string m = e.what();
    CHECK(m.find("retain_graph") != std::string::npos);
    CHECK(m.find("sum") != std::string::npos);
    CHECK(m.find("test_autograd.cpp") != std::string::npos);
  }
}

TEST_CASE("autograd::grad returns gradients without touching .grad()", "[autograd]") {
  Tensor x = tensor({1, 2}).requires_grad_();
  Tensor h = x * x;
  Tensor y = (h * 2.0).sum();
  auto g = autograd::grad({y}, {x, h});
  CHECK(g[0].to_vector<float>() == std::vector<float>{4, 8});
  CHECK(g[1].to_vector<float>() == std::vector<float>{2, 2});
  CHECK(!x.grad().defined());
}

TEST_CASE("create_graph gives second derivatives", "[autograd]") {
  Tensor x = tensor({2.0}, {.dtype = DType::f64}).requires_grad_();
  Tensor y = pow(x, 3.0).sum();
  auto g = autograd::grad({y}, {x}, {}, {.create_graph = true});
  auto gg = autograd::grad({g[0].sum()}, {x});
  CHECK(g[0].item<double>() == Approx(12.0));
  CHECK(gg[0].item<double>() == Approx(12.0));
}

TEST_CASE("a rule reading its saved output is differentiable under create_graph", "[autograd][grad2]") {
  // exp saves y = e^x; d2/dx2 sum(e^x) = e^x only if the saved y links back to x
  Tensor x = tensor({0.5, -1.0}, {.dtype = DType::f64}).requires_grad_();
  Tensor g = autograd::grad({exp(x).sum()}, {x}, {}, {.create_graph = true})[0];
  Tensor gg = autograd::grad({g.sum()}, {x})[0];
  CHECK(gg.to_vector<double>()[0] == Approx(std::exp(0.5)));
  CHECK(gg.to_vector<double>()[1] == Approx(std::exp(-1.0)));
  // sqrt saves y too: d2/dx2 sqrt(x) = -x^(-3/2) / 4
  Tensor z = tensor({4.0}, {.dtype = DType::f64}).requires_grad_();
  Tensor gz = autograd::grad({sqrt(z).sum()}, {z}, {}, {.create_graph = true})[0];
  CHECK(autograd::grad({gz.sum()}, {z})[0].item<double>() == Approx(-1.0 / 32));
  // an ordinary backward afterwards still works and leaves the saved tensor unlinked
  Tensor y = exp(x).sum();
  y.backward();
  CHECK(x.grad().to_vector<double>()[1] == Approx(std::exp(-1.0)));
}

TEST_CASE("no-grad and detach stop recording", "[autograd]") {
  Tensor x = ones({2}).requires_grad_();
  {
    NoGradGuard guard;
    Tensor y = x * 2.0;
    CHECK(!y.requires_grad());
  }
  Tensor z = no_grad([&] { return x + 1.0; });
  CHECK(!z.requires_grad());
  CHECK(!x.detach().requires_grad());
  CHECK((x * 2.0).requires_grad());
}

TEST_CASE("in-place change of a saved tensor is caught", "[autograd][errors]") {
  Tensor x = ones({2}).requires_grad_();
  Tensor h = x * 2.0;
  Tensor y = (h * h).sum();
  h.detach().fill_(3.0);
  CHECK_THROWS_AS(y.backward(), Error);
}

TEST_CASE("tape entries record the user's call site", "[autograd]") {
  Tensor x = ones({2, 3}).requires_grad_();
  Tensor y = x * 2.0; int line = __LINE__;
  std::string d = y.grad_fn()->describe();
  CHECK(d.find("mul") != std::string::npos);
  CHECK(d.find("test_autograd.cpp:" + std::to_string(line)) != std::string::npos);
  Tensor z = x + y; int line2 = __LINE__;
  CHECK(z.grad_fn()->site.line == uint32_t(line2));
}

TEST_CASE("memory stays flat over 10000 forward passes without a no-grad guard", "[autograd]") {
  Tensor w = randn({16, 16}).requires_grad_();
  Tensor x = randn({4, 16});
  size_t before = autograd::tape_size();
  for (int i = 0; i < 10000; ++i) {
    Tensor y = relu(x * 2.0 + 1.0).sum();
    (void)y;
  }
  CHECK(autograd::tape_size() == before);
}

TEST_CASE("two threads keep two tapes", "[autograd]") {
  auto train = [](uint64_t seed, std::vector<float>* out) {
    Tensor w = full({4}, double(seed)).requires_grad_();
    for (int step = 0; step < 200; ++step) {
      Tensor loss = (square(w - 3.0) * tensor({1, 2, 3, 4})).sum();
      loss.backward();
      NoGradGuard guard;
      w.add_(w.grad(), -0.01);
      w.grad().zero_();
    }
    *out = w.to_vector<float>();
  };
  std::vector<float> alone1, alone2, both1, both2;
  train(1, &alone1);
  train(7, &alone2);
  std::thread t1(train, 1, &both1), t2(train, 7, &both2);
  t1.join();
  t2.join();
  CHECK(alone1 == both1);
  CHECK(alone2 == both2);
}

TEST_CASE("backward flushes subnormal gradients unless set_flush_subnormals(false)", "[autograd]") {
  auto grad_of_tiny_chain = [] {
    Tensor x = full({4096}, 1.0f).requires_grad_();
    ((x * 1e-20) * 1e-20).sum().backward();  // d/dx = 1e-40: subnormal in f32
    return x.grad().to_vector<float>();
  };
  REQUIRE(flush_subnormals());
  for (float g : grad_of_tiny_chain()) CHECK(g == 0.0f);
  set_flush_subnormals(false);
  std::vector<float> gradual = grad_of_tiny_chain();
  set_flush_subnormals(true);
  for (float g : gradual) CHECK(g == Approx(1e-40f).margin(1e-44));
  CHECK(gradual[0] > 0.0f);
  // The caller's floating-point environment is left as it was.
  volatile float tiny = 1e-30f;
  CHECK(tiny * 1e-10f > 0.0f);
}

TEST_CASE("set_num_threads sets the pool's size and rejects nonsense", "[autograd]") {
  int before = num_threads();
  set_num_threads(1);
  CHECK(num_threads() == 1);
  set_num_threads(before);
  CHECK(num_threads() == before);
  CHECK_THROWS_WITH(set_num_threads(0), Catch::Contains("set_num_threads: expected at least 1 thread, got 0"));
}
