// The tape: backward, accumulation, retain_graph, grad(), no-grad, memory, threads.
#include <cstring>
#include <optional>
#include <thread>

#include "gradcheck.h"
#include "../autograd/grad_buffer.h"

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

namespace {
// y = a + b, whose backward gives its incoming gradient, the same tensor, to both inputs
// and keeps it (as a user's Function may)
struct Tee : autograd::Function<Tee> {
  static inline Tensor kept;
  static Tensor forward(autograd::Context&, const Tensor& a, const Tensor& b) { return a + b; }
  static std::vector<Tensor> backward(autograd::Context&, const std::vector<Tensor>& g) {
    kept = g[0];
    return {g[0], g[0]};
  }
};

// the leaves' gradients of loss(), with or without a watching op hook (under a debug tool
// the engine sums contributions through add(), else in place where it may)
std::vector<Tensor> leaf_grads(const std::function<Tensor(const std::vector<Tensor>&)>& loss,
                               const std::vector<Tensor>& leaves, bool watched) {
  std::vector<Tensor> xs;
  for (const Tensor& l : leaves) xs.push_back(l.detach().clone().requires_grad_());
  std::optional<debug::HookHandle> hook;
  if (watched) hook.emplace(debug::add_op_hook([](const debug::OpRecord&) {}));
  loss(xs).backward();
  if (hook) hook->remove();  // (a handle does not remove its hook when it goes)
  std::vector<Tensor> gs;
  for (const Tensor& x : xs) gs.push_back(x.grad());
  return gs;
}
}  // namespace

TEST_CASE("gradients summed in backward: in place, the bits of add(), and never into a tensor held elsewhere",
          "[autograd][accumulate]") {
  manual_seed(7);
  for (DType dt : {DType::f32, DType::f64}) {
    CAPTURE(dtype_name(dt));
    // DenseNet's pattern: every layer reads the concatenation of all before it, so each
    // feature's gradient is the sum of one slice per later layer; plus a tensor used 5 times
    Tensor x0 = randn({2, 3, 4, 4}, {.dtype = dt}), w = randn({1, 12, 1, 1}, {.dtype = dt});
    auto dense = [](const std::vector<Tensor>& in) {
      std::vector<Tensor> feats{in[0]};
      for (int i = 0; i < 3; ++i) {
        Tensor c = cat(feats, 1);
        Tensor wi = in[1].narrow(1, 0, c.size(1)).sum(1, true);
        feats.push_back(tanh(c.narrow(1, 0, 3) * wi + c.narrow(1, c.size(1) - 3, 3)));
      }
      Tensor h = feats.back() * 0.5, s = h.sin();
      return (s * h + h.exp() + h * h * h + cat(feats, 1).square().sum(1, true) * h).sum();
    };
    std::vector<Tensor> plain = leaf_grads(dense, {x0, w}, false), watched = leaf_grads(dense, {x0, w}, true);
    for (size_t i = 0; i < plain.size(); ++i) {
      REQUIRE(plain[i].dtype() == dt);
      CHECK(std::memcmp(plain[i].contiguous().data_ptr(), watched[i].contiguous().data_ptr(),
                        size_t(plain[i].numel()) * plain[i].element_size()) == 0);
    }
    // the values: x used three times, d/dx (2x + 3x + x^2) = 5 + 2x
    Tensor x = tensor({1.0, -2.0, 0.5}, {.dtype = dt}).requires_grad_();
    ((x * 2.0).sum() + (x * 3.0).sum() + (x * x).sum()).backward();
    CHECK(x.grad().to_vector<double>() == std::vector<double>{7.0, 1.0, 6.0});
  }
  SECTION("inf, NaN and empty gradients sum as add() sums them") {
    // h is used three times: d/dx = c + flip(c) + 3, with c holding inf, -inf and NaN
    const double inf = INFINITY, nan = NAN;
    Tensor c = tensor({inf, -inf, nan, 2.0});
    auto uses = [&](const std::vector<Tensor>& in) {
      Tensor h = in[0] * 1.0;
      return (h * c).sum() + (h * c.flip({0})).sum() + (h * 3.0).sum();
    };
    std::vector<Tensor> plain = leaf_grads(uses, {tensor({1.0, -2.0, 0.0, 3.0})}, false),
                        watched = leaf_grads(uses, {tensor({1.0, -2.0, 0.0, 3.0})}, true);
    CHECK(std::memcmp(plain[0].data_ptr(), watched[0].data_ptr(), 4 * sizeof(float)) == 0);
    std::vector<float> g = plain[0].to_vector<float>();
    CHECK(g[0] == INFINITY);   // inf + 2 + 3
    CHECK(std::isnan(g[1]));   // -inf + NaN
    CHECK(std::isnan(g[2]));   // NaN + -inf
    CHECK(g[3] == INFINITY);   // 2 + inf + 3
    auto empty_uses = [](const std::vector<Tensor>& in) {
      Tensor h = in[0] * 1.0;
      return (h * 2.0).sum() + (h * 3.0).sum() + h.sum();
    };
    CHECK(leaf_grads(empty_uses, {empty({0, 3})}, false)[0].shape() == Dims{0, 3});
  }
  SECTION("root gradients the caller holds are read, never written") {
    Tensor x = tensor({1.0, 2.0}).requires_grad_();
    Tensor y = x * 3.0;
    Tensor g1 = tensor({1.0, 1.0}), g2 = tensor({10.0, 20.0});
    autograd::backward({y, y, y}, {g1, g2, g2});
    CHECK(g1.to_vector<float>() == std::vector<float>{1, 1});
    CHECK(g2.to_vector<float>() == std::vector<float>{10, 20});
    CHECK(x.grad().to_vector<float>() == std::vector<float>{63, 123});
  }
  SECTION("a rule's gradient given to two inputs, and kept by the rule, stays whole everywhere") {
    // Tee's backward hands its incoming gradient itself to both inputs and keeps a handle on
    // it; a's slot takes it first, then more contributions, while b's slot and `kept` hold
    // the same tensor (without the ownership check: x.grad() 42.5, 55 and kept 8.5, 11)
    Tensor x = tensor({1.0, 2.0}).requires_grad_(), c = tensor({0.5, -1.0});
    Tensor a = x * 2.0, b = x * 3.0;
    Tee::kept = Tensor();
    ((Tee::apply(a, b) * c).sum() + (a * 4.0).sum() + (a * a).sum()).backward();
    // d/dx = 2 (4 + 2a + c) + 3c = 8 + 8x + 5c
    CHECK(x.grad().to_vector<float>() == std::vector<float>{18.5f, 19.0f});
    CHECK(Tee::kept.to_vector<float>() == std::vector<float>{0.5f, -1.0f});
    Tee::kept = Tensor();
  }
}

TEST_CASE("a leaf's gradient buffer: linear's weight gradient written there, with the plain path's bits",
          "[autograd][grad_buffer]") {
  manual_seed(11);
  auto same_bits = [](const Tensor& a, const Tensor& b) {
    return a.dtype() == b.dtype() && a.shape() == b.shape() &&
           std::memcmp(a.contiguous().data_ptr(), b.contiguous().data_ptr(), size_t(a.numel()) * a.element_size()) == 0;
  };
  for (DType dt : {DType::f32, DType::f64}) {
    CAPTURE(dtype_name(dt));
    Tensor x = randn({5, 7}, {.dtype = dt}), w = randn({4, 7}, {.dtype = dt}).requires_grad_(),
           b = randn({4}, {.dtype = dt}).requires_grad_();
    // linear, linear_relu, and the weight used twice (a second contribution added to the first)
    auto loss_of = [&](int form) {
      if (form == 0) return linear(x, w, b).square().sum();
      if (form == 1) return (linear_relu(x, w, b) * 1.5).sum();
      return (linear(x, w, b) * linear(x * 0.5, w, Tensor())).sum();
    };
    for (int form = 0; form < 3; ++form) {
      CAPTURE(form);
      w.set_grad(Tensor()), b.set_grad(Tensor());
      loss_of(form).backward();
      const Tensor plain = w.grad().clone(), plain_b = b.grad().clone();
      // the buffer a narrow of a larger flat tensor, as a bucket's slot
      Tensor flat = full({3 + 28 + 2}, 7.0, {.dtype = dt}), buffer = flat.narrow(0, 3, 28).reshape({4, 7});
      autograd::set_grad_buffer(w, buffer);
      REQUIRE(autograd::grad_buffer(w).data_ptr() == buffer.data_ptr());
      w.set_grad(Tensor()), b.set_grad(Tensor());
      loss_of(form).backward();
      CHECK(same_bits(w.grad(), plain));
      CHECK(same_bits(b.grad(), plain_b));
      CHECK(w.grad().data_ptr() == buffer.data_ptr());  // written there, not copied
      CHECK(same_bits(buffer, plain));
      CHECK(flat[0].item<double>() == 7.0);  // nothing around the slot touched
      CHECK(flat[31].item<double>() == 7.0);
      // a second backward accumulates into the gradient it has, the buffer
      loss_of(form).backward();
      CHECK(w.grad().data_ptr() == buffer.data_ptr());
      CHECK(allclose(w.grad(), plain * 2.0, 1e-6, 1e-6));
      autograd::set_grad_buffer(w, Tensor());
      CHECK(!autograd::grad_buffer(w).defined());
      w.set_grad(Tensor());
      loss_of(form).backward();
      CHECK(w.grad().data_ptr() != buffer.data_ptr());  // none any more
      CHECK(same_bits(w.grad(), plain));
    }
    // PyTorch's table cases for the product written in place: inf and NaN inputs give the plain
    // path's bits (NaN where PyTorch has NaN), and an empty batch a zero gradient over a buffer
    // that held something else
    for (int kind = 0; kind < 2; ++kind) {
      CAPTURE(kind);
      Tensor xs = kind == 0 ? x.clone() : zeros({0, 7}, {.dtype = dt});
      if (kind == 0) {
        xs.index_put_({tensor({0}, {.dtype = DType::i64})}, full({7}, INFINITY, {.dtype = dt}));
        xs.index_put_({tensor({2}, {.dtype = DType::i64})}, full({7}, NAN, {.dtype = dt}));
      }
      w.set_grad(Tensor());
      linear(xs, w, b).sum().backward();
      const Tensor plain = w.grad().clone();
      Tensor flat = full({28}, 7.0, {.dtype = dt}), buffer = flat.reshape({4, 7});
      autograd::set_grad_buffer(w, buffer);
      w.set_grad(Tensor());
      linear(xs, w, b).sum().backward();
      CHECK(w.grad().data_ptr() == buffer.data_ptr());
      CHECK(same_bits(w.grad(), plain));
      if (kind == 0) CHECK(w.grad().isnan().any().item<bool>());
      else CHECK((w.grad() == 0.0).all().item<bool>());
      autograd::set_grad_buffer(w, Tensor());
    }
    // grad() returns its own tensors, and create_graph's gradients stay recorded ops: neither
    // writes into the buffer
    Tensor flat = full({28}, 7.0, {.dtype = dt}), buffer = flat.reshape({4, 7});
    autograd::set_grad_buffer(w, buffer);
    w.set_grad(Tensor());
    std::vector<Tensor> g = autograd::grad({linear(x, w, b).square().sum()}, {w});
    CHECK(g[0].data_ptr() != buffer.data_ptr());
    CHECK(!w.grad().defined());
    std::vector<Tensor> g2 = autograd::grad({linear(x, w, b).square().sum()}, {w}, {}, {.create_graph = true});
    CHECK(g2[0].data_ptr() != buffer.data_ptr());
    CHECK(g2[0].grad_fn() != nullptr);
    CHECK((flat == 7.0).all().item<bool>());
    autograd::set_grad_buffer(w, Tensor());
    w.set_grad(Tensor());
  }
  // a buffer of another shape, dtype or layout is refused, naming both sides
  Tensor w = randn({4, 7}).requires_grad_();
  REQUIRE_THROWS_WITH(autograd::set_grad_buffer(w, zeros({7, 4})),
                      Catch::Matchers::Contains("set_grad_buffer") && Catch::Matchers::Contains("[4, 7]") &&
                          Catch::Matchers::Contains("[7, 4]"));
  REQUIRE_THROWS_WITH(autograd::set_grad_buffer(w, zeros({4, 7}, {.dtype = DType::f64})),
                      Catch::Matchers::Contains("f64"));
  REQUIRE_THROWS_WITH(autograd::set_grad_buffer(w, zeros({7, 4}).t()), Catch::Matchers::Contains("strided"));
}
