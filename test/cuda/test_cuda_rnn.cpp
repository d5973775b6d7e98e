// Recurrent layers on cuDNN against the CPU (oneDNN for f32, the loops for f64):
// every mode, both directions, with and without bias, variable lengths, outputs and
// every gradient (rnn_layer's inputs, and a module's parameters).
#include "compare.h"

using namespace reel;
using reel::cuda_test::kGpu;
using reel::cuda_test::same_on_gpu;

TEST_CASE("rnn_layer on cuDNN matches the CPU in every mode and direction", "[cuda][rnn]") {
  manual_seed(5);
  for (RnnMode mode : {RnnMode::rnn_tanh, RnnMode::rnn_relu, RnnMode::gru, RnnMode::lstm})
    for (bool reverse : {false, true})
      for (bool bias : {true, false})
        for (DType dt : {DType::f32, DType::f64}) {
          INFO("mode " << int(mode) << " reverse " << reverse << " bias " << bias << " " << dtype_name(dt));
          int64_t G = rnn_gates(mode), T = 7, B = 3, I = 5, H = 4;
          Options o{.dtype = dt};
          const bool lstm = mode == RnnMode::lstm;
          // x, h0, w_ih, w_hh, then c0 (LSTM), then the biases: same_on_gpu takes defined tensors only
          std::vector<Tensor> in{randn({T, B, I}, o).requires_grad_(), randn({B, H}, o).requires_grad_(),
                                 (randn({G * H, I}, o) * 0.4).detach().requires_grad_(),
                                 (randn({G * H, H}, o) * 0.4).detach().requires_grad_()};
          if (lstm) in.push_back(randn({B, H}, o).requires_grad_());
          if (bias) in.push_back(randn({G * H}, o).requires_grad_()), in.push_back(randn({G * H}, o).requires_grad_());
          auto f = [&](const std::vector<Tensor>& v) {
            size_t k = 4;
            Tensor c0 = lstm ? v[k++] : Tensor();
            Tensor b_ih = bias ? v[k] : Tensor(), b_hh = bias ? v[k + 1] : Tensor();
            RnnLayerResult r = rnn_layer(mode, v[0], v[1], c0, v[2], v[3], b_ih, b_hh, reverse);
            std::vector<Tensor> parts{r.y.flatten(), r.h.flatten()};
            if (r.c.defined()) parts.push_back(r.c.flatten());
            return cat(parts, 0);
          };
          double tol = dt == DType::f64 ? 1e-10 : 1e-4;
          CHECK(same_on_gpu(f, in, tol, tol) == "");
        }
}

TEST_CASE("a bidirectional two-layer GRU with lengths on the GPU matches the CPU", "[cuda][rnn]") {
  manual_seed(6);
  nn::GRU cpu_gru(5, 4, {.num_layers = 2, .batch_first = true, .bidirectional = true});
  nn::GRU gpu_gru(5, 4, {.num_layers = 2, .batch_first = true, .bidirectional = true});
  gpu_gru.load_state_dict(cpu_gru.state_dict());
  gpu_gru.to(kGpu);
  Tensor x = randn({3, 6, 5});
  Tensor lengths = from_vector(std::vector<int64_t>{4, 6, 2});
  nn::RNNOutput c = cpu_gru.forward(x, {}, lengths), g = gpu_gru.forward(x.to(kGpu), {}, lengths);
  CHECK(cuda_test::close(g.output.cpu(), c.output, 1e-4, 1e-5) == "");
  CHECK(cuda_test::close(g.h_n.cpu(), c.h_n, 1e-4, 1e-5) == "");
  (c.output.sum() + c.h_n.sum()).backward();
  (g.output.sum() + g.h_n.sum()).backward();
  auto cp = cpu_gru.named_parameters(), gp = gpu_gru.named_parameters();
  for (size_t i = 0; i < cp.size(); ++i) {
    INFO(cp[i].first);
    CHECK(cuda_test::close(gp[i].second.grad().cpu(), cp[i].second.grad(), 1e-4, 1e-5) == "");
  }
}

TEST_CASE("float32 RNNs on cuDNN round as float32 unless TF32 is allowed", "[cuda][rnn][tf32]") {
  // The first GPU run: cuDNN's default math took TF32 for float32 RNNs (2e-4..1e-3 from the
  // CPU). With FMA math the GPU is as close to a float64 reference as the CPU is.
  manual_seed(7);
  const int64_t T = 6, B = 4, I = 96, H = 96, G = rnn_gates(RnnMode::gru);
  Tensor x = randn({T, B, I}), h0 = randn({B, H}), w_ih = randn({G * H, I}) * 0.1, w_hh = randn({G * H, H}) * 0.1;
  auto run = [&](Device d, DType dt) {
    auto m = [&](const Tensor& t) { return t.to(dt).to(d); };
    RnnLayerResult r = rnn_layer(RnnMode::gru, m(x), m(h0), Tensor(), m(w_ih), m(w_hh), Tensor(), Tensor(), false);
    return r.y.cpu().to(DType::f64);
  };
  Tensor want = run(kCPU, DType::f64);
  auto rel = [&](const Tensor& got) { return amax(abs(got - want)).item<double>() / amax(abs(want)).item<double>(); };
  double cpu = rel(run(kCPU, DType::f32)), off = rel(run(kGpu, DType::f32)), on = 0;
  cuda::set_allow_tf32(true);
  on = rel(run(kGpu, DType::f32));
  cuda::set_allow_tf32(false);
  INFO("relative error against float64: cpu " << cpu << ", gpu TF32 off " << off << ", on " << on);
  CHECK(off < 1e-5);
  CHECK(off < 4 * cpu + 1e-6);  // float32 rounding on both devices
  CHECK(on < 2e-2);
  CHECK(rel(run(kGpu, DType::f32)) == off);  // off again: the plan of before, not the TF32 one
}
