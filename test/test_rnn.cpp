// Recurrent layers: every module, every option combination, against PyTorch 1.13's
// outputs and gradients (test/reference/gen_rnn_reference.py); f32 on oneDNN and on
// the loops, f64 on the loops; f64 finite differences of rnn_layer; variable lengths;
// the cells; checkpoints; bad input.
#include <reel/cpu/cpu_backend.h>
#include <reel/reel.h>

#include <catch2/catch.hpp>
#include <cmath>
#include <cstdio>
#include <map>
#include <memory>

#include "gradcheck.h"

using namespace reel;

namespace {

const char* const kModes[] = {"rnn_tanh", "rnn_relu", "gru", "lstm"};

// Never destroyed: its tensors must not be freed at exit after the CPU backend (made after
// this map, hence destroyed before it; UBSan's vptr check), as test/torch_table.h's tables.
const safetensors::File& reference(const std::string& mode) {
  static std::map<std::string, safetensors::File>& files = *new std::map<std::string, safetensors::File>();
  auto it = files.find(mode);
  if (it == files.end())
    it = files.emplace(mode, safetensors::load(std::string(REEL_SOURCE_DIR) + "/test/reference/rnn_" + mode +
                                               ".safetensors")).first;
  return it->second;
}

// max over elements of |a - e| / (atol + rtol |e|): <= 1 means close
double excess(const Tensor& actual, const Tensor& expected, double rtol, double atol) {
  REQUIRE(actual.defined());
  REQUIRE(actual.shape() == expected.shape());
  std::vector<double> a = actual.to(DType::f64).contiguous().to_vector<double>();
  std::vector<double> e = expected.to(DType::f64).contiguous().to_vector<double>();
  double worst = 0;
  for (size_t i = 0; i < a.size(); ++i) worst = std::max(worst, std::abs(a[i] - e[i]) / (atol + rtol * std::abs(e[i])));
  return worst;
}

#define CHECK_CLOSE(actual, expected, rtol, atol)                                   \
  do {                                                                              \
    double ex_ = excess(actual, expected, rtol, atol);                              \
    INFO(#actual << " vs " << #expected << ": excess " << ex_);                     \
    CHECK(ex_ <= 1.0);                                                              \
  } while (0)

RnnMode mode_of(const std::string& m) {
  return m == "rnn_tanh" ? RnnMode::rnn_tanh : m == "rnn_relu" ? RnnMode::rnn_relu : m == "gru" ? RnnMode::gru
                                                                                                 : RnnMode::lstm;
}

std::unique_ptr<nn::RNNBase> make(const std::string& mode, int64_t I, int64_t H, nn::GRUOptions o) {
  if (mode == "gru") return std::make_unique<nn::GRU>(I, H, o);
  if (mode == "lstm") return std::make_unique<nn::LSTM>(I, H, o);
  return std::make_unique<nn::RNN>(I, H,
                                   nn::RNNOptions{.num_layers = o.num_layers,
                                                  .nonlinearity = mode == "rnn_relu" ? nn::Nonlinearity::relu
                                                                                     : nn::Nonlinearity::tanh,
                                                  .bias = o.bias, .batch_first = o.batch_first, .dropout = o.dropout,
                                                  .bidirectional = o.bidirectional});
}

// The parameters of `key` from the reference file, as a state dict.
nn::NamedTensors params_of(const safetensors::File& f, const std::string& key) {
  nn::NamedTensors out;
  std::string prefix = key + ".p.";
  for (const auto& [name, t] : f.tensors)
    if (name.rfind(prefix, 0) == 0) out.push_back({name.substr(prefix.size()), t});
  return out;
}

Tensor input_of(const safetensors::File& f, const std::string& name, DType dtype) {
  const Tensor* t = f.find(name);
  if (!t) return {};
  return t->to(dtype).detach().requires_grad_();
}

// One reference case through the module; tolerances by dtype.
void check_case(const std::string& mode, const std::string& key, const nn::GRUOptions& o, DType dtype) {
  const safetensors::File& f = reference(mode);
  INFO(mode << " " << key << " " << dtype_name(dtype));
  const bool lstm = mode == "lstm";
  auto m = make(mode, 4, 3, o);
  m->load_state_dict(params_of(f, key), true, key);
  m->to(dtype);
  Tensor x = input_of(f, key + ".x", dtype), h0 = input_of(f, key + ".h0", dtype), c0 = input_of(f, key + ".c0", dtype);
  const Tensor* len = f.find(key + ".lengths");
  Tensor lengths = len ? *len : Tensor();
  Tensor y, h_n, c_n;
  if (lstm) {
    auto r = static_cast<nn::LSTM&>(*m).forward(x, {h0, c0}, lengths);
    y = r.output, h_n = r.state.h, c_n = r.state.c;
  } else if (mode == "gru") {
    auto r = static_cast<nn::GRU&>(*m).forward(x, h0, lengths);
    y = r.output, h_n = r.h_n;
  } else {
    auto r = static_cast<nn::RNN&>(*m).forward(x, h0, lengths);
    y = r.output, h_n = r.h_n;
  }
  double rtol = dtype == DType::f64 ? 1e-10 : 1e-5, atol = dtype == DType::f64 ? 1e-12 : 1e-6;
  CHECK_CLOSE(y, f.at(key + ".y"), rtol, atol);
  CHECK_CLOSE(h_n, f.at(key + ".h_n"), rtol, atol);
  if (lstm) CHECK_CLOSE(c_n, f.at(key + ".c_n"), rtol, atol);
  Tensor loss = (y * f.at(key + ".gy").to(dtype)).sum() + (h_n * f.at(key + ".gh").to(dtype)).sum();
  if (lstm) loss = loss + (c_n * f.at(key + ".gc").to(dtype)).sum();
  loss.backward();
  CHECK_CLOSE(x.grad(), f.at(key + ".grad.x"), rtol, atol);
  if (h0.defined()) CHECK_CLOSE(h0.grad(), f.at(key + ".grad.h0"), rtol, atol);
  if (c0.defined()) CHECK_CLOSE(c0.grad(), f.at(key + ".grad.c0"), rtol, atol);
  for (const auto& [name, p] : m->named_parameters()) {
    INFO(name);
    CHECK_CLOSE(p.grad(), f.at(key + ".grad." + name), rtol, atol);
  }
}

std::string case_key(int bias, int bf, int bi, int layers, int h0, int len) {
  return "b" + std::to_string(bias) + "_bf" + std::to_string(bf) + "_bi" + std::to_string(bi) + "_l" +
         std::to_string(layers) + "_h" + std::to_string(h0) + "_len" + std::to_string(len);
}

void check_all_cases(DType dtype) {
  for (std::string mode : kModes) {
    for (int bias : {1, 0})
      for (int bf : {0, 1})
        for (int bi : {0, 1})
          for (int layers : {1, 2})
            for (int h0 : {0, 1})
              for (int len : {0, 1})
                check_case(mode, case_key(bias, bf, bi, layers, h0, len),
                           {.num_layers = layers, .bias = bias != 0, .batch_first = bf != 0, .bidirectional = bi != 0},
                           dtype);
    for (int bi : {0, 1})
      check_case(mode, "unbatched_bi" + std::to_string(bi), {.num_layers = 2, .bidirectional = bi != 0}, dtype);
  }
}

void check_cells(DType dtype) {
  double rtol = dtype == DType::f64 ? 1e-10 : 1e-5, atol = dtype == DType::f64 ? 1e-12 : 1e-6;
  for (std::string mode : kModes)
    for (int bias : {1, 0})
      for (int batched : {1, 0})
        for (int with_h : {1, 0}) {
          std::string key = "cell_b" + std::to_string(bias) + "_batched" + std::to_string(batched) + "_h" +
                            std::to_string(with_h);
          const safetensors::File& f = reference(mode);
          INFO(mode << " " << key << " " << dtype_name(dtype));
          nn::RNNCellOptions o{.bias = bias != 0,
                               .nonlinearity = mode == "rnn_relu" ? nn::Nonlinearity::relu : nn::Nonlinearity::tanh};
          std::unique_ptr<nn::RNNCellBase> m;
          if (mode == "gru") m = std::make_unique<nn::GRUCell>(4, 3, o);
          else if (mode == "lstm") m = std::make_unique<nn::LSTMCell>(4, 3, o);
          else m = std::make_unique<nn::RNNCell>(4, 3, o);
          m->load_state_dict(params_of(f, key), true, key);
          m->to(dtype);
          Tensor x = input_of(f, key + ".x", dtype), h = input_of(f, key + ".h", dtype),
                 c = input_of(f, key + ".c", dtype);
          Tensor h1, c1;
          if (mode == "lstm") {
            nn::LSTMState s = static_cast<nn::LSTMCell&>(*m).forward(x, {h, c});
            h1 = s.h, c1 = s.c;
          } else if (mode == "gru") {
            h1 = static_cast<nn::GRUCell&>(*m).forward(x, h);
          } else {
            h1 = static_cast<nn::RNNCell&>(*m).forward(x, h);
          }
          CHECK_CLOSE(h1, f.at(key + ".h1"), rtol, atol);
          Tensor loss = (h1 * f.at(key + ".gh").to(dtype)).sum();
          if (c1.defined()) {
            CHECK_CLOSE(c1, f.at(key + ".c1"), rtol, atol);
            loss = loss + (c1 * f.at(key + ".gc").to(dtype)).sum();
          }
          loss.backward();
          CHECK_CLOSE(x.grad(), f.at(key + ".grad.x"), rtol, atol);
          if (h.defined()) CHECK_CLOSE(h.grad(), f.at(key + ".grad.h"), rtol, atol);
          if (c.defined()) CHECK_CLOSE(c.grad(), f.at(key + ".grad.c"), rtol, atol);
          for (const auto& [name, p] : m->named_parameters()) {
            INFO(name);
            CHECK_CLOSE(p.grad(), f.at(key + ".grad." + name), rtol, atol);
          }
        }
}

// Sets the CPU's f32 recurrent path for one scope.
struct UseLoops {
  explicit UseLoops(bool on) : was(cpu::rnn_loops_on()) { cpu::rnn_use_loops(on); }
  ~UseLoops() { cpu::rnn_use_loops(was); }
  bool was;
};

}  // namespace

TEST_CASE("RNN, GRU and LSTM equal PyTorch in every option combination: f64 on the loops", "[rnn]") {
  check_all_cases(DType::f64);
  check_cells(DType::f64);
}

TEST_CASE("RNN, GRU and LSTM equal PyTorch in every option combination: f32 on oneDNN", "[rnn]") {
  UseLoops use(false);
  check_all_cases(DType::f32);
  check_cells(DType::f32);
}

TEST_CASE("RNN, GRU and LSTM equal PyTorch in every option combination: f32 on the loops", "[rnn]") {
  UseLoops use(true);
  check_all_cases(DType::f32);
  check_cells(DType::f32);
}

TEST_CASE("rnn_layer: f64 finite differences for every mode and direction", "[rnn][gradcheck]") {
  using test::gradcheck;
  using test::input;
  for (std::string mode : kModes)
    for (bool reverse : {false, true})
      for (bool bias : {true, false}) {
        INFO(mode << " reverse " << reverse << " bias " << bias);
        RnnMode m = mode_of(mode);
        int64_t G = rnn_gates(m), T = 4, B = 2, I = 3, H = 3;
        std::vector<Tensor> in{input({T, B, I}), input({B, H}), m == RnnMode::lstm ? input({B, H}) : Tensor(),
                               input({G * H, I}, -0.7, 0.7), input({G * H, H}, -0.7, 0.7),
                               bias ? input({G * H}) : Tensor(), bias ? input({G * H}) : Tensor()};
        auto f = [&](const std::vector<Tensor>& v) {
          RnnLayerResult r = rnn_layer(m, v[0], v[1], v[2], v[3], v[4], v[5], v[6], reverse);
          std::vector<Tensor> parts{r.y.flatten(), r.h.flatten()};
          if (r.c.defined()) parts.push_back(r.c.flatten());
          return cat(parts, 0);
        };
        std::vector<Tensor> args;
        for (const Tensor& t : in) args.push_back(t);
        CHECK(gradcheck(f, args) == "");
      }
}

TEST_CASE("variable lengths: each sequence as if it ran alone, in any order", "[rnn]") {
  manual_seed(7);
  for (std::string mode : kModes)
    for (bool bi : {false, true}) {
      INFO(mode << " bidirectional " << bi);
      auto m = make(mode, 3, 4, {.num_layers = 2, .batch_first = true, .bidirectional = bi});
      m->to(DType::f64);
      Tensor x = randn({4, 6, 3}, {.dtype = DType::f64});
      Tensor lengths = from_vector(std::vector<int64_t>{2, 6, 1, 4});
      Tensor y, h;
      if (mode == "lstm") {
        auto r = static_cast<nn::LSTM&>(*m).forward(x, {}, lengths);
        y = r.output, h = r.state.h;
      } else {
        auto r = mode == "gru" ? static_cast<nn::GRU&>(*m).forward(x, {}, lengths)
                               : static_cast<nn::RNN&>(*m).forward(x, {}, lengths);
        y = r.output, h = r.h_n;
      }
      std::vector<int64_t> len{2, 6, 1, 4};
      for (int64_t b = 0; b < 4; ++b) {
        Tensor xb = x.narrow(0, b, 1).narrow(1, 0, len[size_t(b)]);
        Tensor yb = m->forward(xb);
        CHECK_CLOSE(y.narrow(0, b, 1).narrow(1, 0, len[size_t(b)]), yb, 1e-12, 1e-12);
        if (len[size_t(b)] < 6) CHECK(y.narrow(0, b, 1).narrow(1, len[size_t(b)], 6 - len[size_t(b)]).abs().sum().item<double>() == 0);
      }
      CHECK(h.shape() == Dims{2 * (bi ? 2 : 1), 4, 4});
    }
}

TEST_CASE("dropout between layers: training only, never after the last layer", "[rnn]") {
  manual_seed(3);
  nn::GRU a(3, 5, {.num_layers = 2, .dropout = 0.5}), b(3, 5, {.num_layers = 2});
  b.load_state_dict(a.state_dict());
  Tensor x = randn({4, 2, 3});
  a.eval();
  CHECK_CLOSE(a.forward(x), b.forward(x), 0, 0);
  a.train();
  CHECK(excess(a.forward(x), b.forward(x), 0, 1e-6) > 1);
  nn::GRU one(3, 5, {.num_layers = 1, .dropout = 0.5});  // one layer: nothing to drop
  nn::GRU same(3, 5, {.num_layers = 1});
  same.load_state_dict(one.state_dict());
  CHECK_CLOSE(one.forward(x), same.forward(x), 0, 0);
}

TEST_CASE("recurrent modules: PyTorch's parameter names, checkpoints, moves and repr", "[rnn]") {
  nn::LSTM lstm(5, 7, {.num_layers = 2, .bias = true, .batch_first = true, .bidirectional = true});
  std::vector<std::string> names;
  for (const auto& [name, p] : lstm.named_parameters()) names.push_back(name + p.shape().str());
  CHECK(names == std::vector<std::string>{
                     "weight_ih_l0[28, 5]", "weight_hh_l0[28, 7]", "bias_ih_l0[28]", "bias_hh_l0[28]",
                     "weight_ih_l0_reverse[28, 5]", "weight_hh_l0_reverse[28, 7]", "bias_ih_l0_reverse[28]",
                     "bias_hh_l0_reverse[28]", "weight_ih_l1[28, 14]", "weight_hh_l1[28, 7]", "bias_ih_l1[28]",
                     "bias_hh_l1[28]", "weight_ih_l1_reverse[28, 14]", "weight_hh_l1_reverse[28, 7]",
                     "bias_ih_l1_reverse[28]", "bias_hh_l1_reverse[28]"});
  CHECK(lstm.str() == "LSTM(5, 7, num_layers=2, batch_first=True, bidirectional=True)");
  CHECK(nn::RNN(2, 3, {.nonlinearity = nn::Nonlinearity::relu, .bias = false}).str() ==
        "RNN(2, 3, bias=False, nonlinearity='relu')");
  CHECK(nn::GRUCell(2, 3).str() == "GRUCell(2, 3)");

  Tensor x = randn({2, 3, 5});
  Tensor before = lstm.forward(x);
  std::string path = "test_rnn_checkpoint.safetensors";
  lstm.save(path);
  nn::LSTM other(5, 7, {.num_layers = 2, .batch_first = true, .bidirectional = true});
  other.load(path);
  std::remove(path.c_str());
  CHECK_CLOSE(other.forward(x), before, 0, 0);
  // a moved module keeps its parameters (they are held by the module, not by offset)
  auto moved = std::make_unique<nn::LSTM>(std::move(other));
  CHECK_CLOSE(moved->forward(x), before, 0, 0);
  CHECK(moved->parameters().size() == 16);
  // gradients reach every parameter
  moved->forward(x).sum().backward();
  for (const auto& [name, p] : moved->named_parameters()) {
    INFO(name);
    CHECK(p.grad().defined());
  }
}

TEST_CASE("recurrent layers: bad input is an Error naming the op and the shapes", "[rnn][errors]") {
  nn::GRU gru(4, 3, {.num_layers = 2});
  auto fails_with = [](auto&& f, const std::string& needle) {
    try {
      f();
    } catch (const Error& e) {
      INFO(e.what());
      CHECK(std::string(e.what()).find(needle) != std::string::npos);
      return;
    }
    FAIL("no Error for " << needle);
  };
  fails_with([&] { gru.forward(randn({2, 3, 4, 1})); }, "gru: expected the input [T, B, 4]");
  fails_with([&] { gru.forward(randn({5, 2, 6})); }, "expected input_size 4 in the input's last dim, got input [5, 2, 6]");
  fails_with([&] { gru.forward(randn({5, 2, 4}), randn({1, 2, 3})); }, "expected h0 of shape [2, 2, 3]");
  fails_with([&] { gru.forward(randn({5, 2, 4}), {}, from_vector(std::vector<int64_t>{6, 1})); },
             "expected every length in [1, 5]");
  fails_with([&] { gru.forward(randn({5, 2, 4}), {}, from_vector(std::vector<int64_t>{0, 1})); },
             "got lengths[0] = 0");
  fails_with([&] { gru.forward(randn({5, 2, 4}), {}, from_vector(std::vector<int64_t>{1, 2, 3})); },
             "expected lengths: i64 [2]");
  fails_with([&] { gru.forward(randn({5, 2, 4}).to(DType::i32)); }, "gru: expected an f32 or f64 input");
  nn::LSTM lstm(4, 3);
  fails_with([&] { lstm.forward(randn({5, 2, 4}), {randn({1, 2, 3}), randn({1, 3, 3})}); },
             "expected c0 of shape [1, 2, 3]");
  nn::LSTMCell cell(4, 3);
  fails_with([&] { cell.forward(randn({2, 5}), nn::LSTMState{}); }, "LSTMCell: expected the input [B, 4] or [4]");
  fails_with([&] { rnn_layer(RnnMode::gru, randn({2, 2, 4}), randn({2, 3}), {}, randn({9, 5}), randn({9, 3})); },
             "gru: the input [2, 2, 4] has 4 features but weight_ih is [9, 5]");
  CHECK_THROWS_AS(nn::GRU(0, 3), Error);
  CHECK_THROWS_AS(nn::GRU(4, 3, {.dropout = 1.5}), Error);
}
