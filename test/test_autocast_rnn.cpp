// Recurrent layers under CPU autocast: bf16 on oneDNN's bf16 RNN primitives where the CPU
// has AVX512-BF16 or AMX (f32 elsewhere), against the same layers in f32: values within
// bf16's rounding, parameter gradients f32 and close, packed lengths and several layers.
#include <catch2/catch.hpp>
#include <reel/reel.h>

#include "../tensor/backend.h"

using namespace reel;

namespace {

double rel_err(const Tensor& a, const Tensor& b) {
  Tensor a64 = a.to(DType::f64), b64 = b.to(DType::f64);
  return (a64 - b64).norm().item<double>() / std::max(b64.norm().item<double>(), 1e-30);
}

bool bf16_layers() { return backend_for(kCPU).rnn_native_bf16(); }

// The module's parameter gradients after loss.backward(), copied, then cleared.
std::vector<Tensor> take_grads(nn::Module& m) {
  std::vector<Tensor> out;
  for (Tensor& p : m.parameters()) {
    REQUIRE(p.grad().defined());
    out.push_back(p.grad().clone());
  }
  m.zero_grad();
  return out;
}

// f32 run, then the same under autocast: outputs and every parameter gradient compared.
template <typename Run>
void compare_with_f32(nn::Module& m, Run run) {
  auto [y32, h32, c32] = run();
  (y32.sum() + h32.sum() * 0.5 + (c32.defined() ? c32.sum() * 0.25 : Tensor(zeros({})))).backward();
  std::vector<Tensor> g32 = take_grads(m);
  Tensor y, h, c;
  {
    AutocastGuard amp({.dtype = DType::bf16});
    std::tie(y, h, c) = run();
  }
  const DType want = bf16_layers() ? DType::bf16 : DType::f32;
  CHECK(y.dtype() == want);
  CHECK(h.dtype() == want);
  if (c.defined()) CHECK(c.dtype() == DType::f32);  // the cell state stays f32
  CHECK(rel_err(y, y32) < 2e-2);
  CHECK(rel_err(h, h32) < 2e-2);
  if (c.defined()) CHECK(rel_err(c, c32) < 2e-2);
  (y.to(DType::f32).sum() + h.to(DType::f32).sum() * 0.5 + (c.defined() ? c.sum() * 0.25 : Tensor(zeros({}))))
      .backward();
  std::vector<Tensor> g = take_grads(m);
  REQUIRE(g.size() == g32.size());
  for (size_t i = 0; i < g.size(); ++i) {
    INFO("parameter " << i);
    CHECK(g[i].dtype() == DType::f32);
    CHECK(rel_err(g[i], g32[i]) < 3e-2);
  }
}

}  // namespace

TEST_CASE("GRU, LSTM and RNN under CPU autocast compute in bf16 and match f32", "[autocast][rnn][autocast_fallback]") {
  manual_seed(3);
  const int64_t T = 9, B = 4, I = 6, H = 8;
  Tensor x = randn({T, B, I});
  SECTION("GRU, two layers, bidirectional") {
    nn::GRU gru(I, H, {.num_layers = 2, .bidirectional = true});
    compare_with_f32(gru, [&] {
      auto r = gru(x, Tensor());
      return std::tuple{r.output, r.h_n, Tensor()};
    });
  }
  SECTION("LSTM with an f32 cell state") {
    nn::LSTM lstm(I, H, {.num_layers = 2});
    Tensor h0 = randn({2, B, H}) * 0.5, c0 = randn({2, B, H}) * 0.5;
    compare_with_f32(lstm, [&] {
      auto r = lstm(x, {h0, c0});
      return std::tuple{r.output, r.state.h, r.state.c};
    });
  }
  SECTION("RNN tanh and relu") {
    for (nn::Nonlinearity nl : {nn::Nonlinearity::tanh, nn::Nonlinearity::relu}) {
      nn::RNN rnn(I, H, {.nonlinearity = nl});
      compare_with_f32(rnn, [&] {
        auto r = rnn(x, Tensor());
        return std::tuple{r.output, r.h_n, Tensor()};
      });
    }
  }
  SECTION("packed lengths: the finished rows keep their state") {
    nn::GRU gru(I, H);
    Tensor lengths = from_vector(std::vector<int64_t>{9, 3, 6, 1});
    compare_with_f32(gru, [&] {
      auto r = gru(x, Tensor(), lengths);
      return std::tuple{r.output, r.h_n, Tensor()};
    });
  }
}

TEST_CASE("a GRU trains under CPU autocast", "[autocast][rnn]") {
  manual_seed(5);
  nn::GRU gru(4, 16, {.batch_first = true});
  nn::Linear fc(16, 2);
  std::vector<Tensor> params = gru.parameters();
  for (const Tensor& p : fc.parameters()) params.push_back(p);
  optim::Adam opt(params, {.lr = 1e-2});
  // the label: whether the first feature's sum over time is positive
  Tensor x = randn({32, 12, 4});
  Tensor y = (x.narrow(2, 0, 1).sum({1, 2}) > 0).to(DType::i64);
  double first = 0, last = 0;
  for (int step = 0; step < 60; ++step) {
    Tensor loss;
    {
      AutocastGuard amp({.dtype = DType::bf16});
      Tensor out = gru(x, Tensor()).output;
      loss = cross_entropy(fc(out.narrow(1, 11, 1).squeeze(1)), y);
    }
    opt.zero_grad();
    loss.backward();
    opt.step();
    (step == 0 ? first : last) = loss.item<double>();
  }
  CHECK(last < 0.5 * first);
}

TEST_CASE("a bf16 recurrent input outside autocast is refused", "[autocast][rnn]") {
  nn::GRU gru(3, 5);
  Tensor x = randn({4, 2, 3}).to(DType::bf16);
  CHECK_THROWS_WITH(gru(x, Tensor()), Catch::Contains("expected an f32 or f64 input (bf16 under autocast), got"));
}

TEST_CASE("a NaN or inf in one sequence stays in that sequence under CPU autocast", "[autocast][rnn]") {
  manual_seed(9);
  nn::GRU gru(3, 5);
  Tensor x = randn({6, 3, 3});
  x.select(0, 2).select(0, 1).fill_(std::nan(""));  // sequence 1, step 2
  x.select(0, 4).select(0, 2).fill_(INFINITY);      // sequence 2, step 4
  Tensor y;
  {
    AutocastGuard amp({.dtype = DType::bf16});
    y = gru(x, Tensor()).output.to(DType::f32);
  }
  auto finite = [](const Tensor& t) { return isfinite(t).all().item<bool>(); };
  CHECK(finite(y.select(1, 0)));                                    // untouched sequence
  CHECK(finite(y.narrow(0, 0, 2).select(1, 1)));                    // before the NaN
  CHECK(isnan(y.select(0, 2).select(0, 1)).all().item<bool>());     // from the NaN on
  CHECK(isnan(y.select(0, 5).select(0, 1)).all().item<bool>());
  CHECK(finite(y.narrow(0, 0, 4).select(1, 2)));                    // before the inf
}
