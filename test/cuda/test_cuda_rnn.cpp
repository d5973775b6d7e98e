// Recurrent layers on cuDNN against the CPU (oneDNN for f32, the loops for f64):
// every mode, both directions, with and without bias, variable lengths, outputs and
// every gradient (rnn_layer's inputs, and a module's parameters); the whole-stack path
// (REEL_CUDNN_RNN=stack) against the per-layer path and the CPU, and its weight packing.
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

// ---- the whole-stack path (REEL_CUDNN_RNN=stack, cuda/rnn_stack.cpp) against the per-layer
// path and the CPU. Each test sets the path itself and restores the one it found.
namespace {
struct PathGuard {
  cuda::CudnnRnn was = cuda::cudnn_rnn();
  ~PathGuard() { cuda::set_cudnn_rnn(was); }
};

// A stack's inputs and weights as CPU leaves, rnn()'s arguments from them, and the results
// with every gradient through one weighted sum of output, h_n and c_n.
struct StackCase {
  RnnOptions opt;
  bool bias = true;
  std::vector<Tensor> leaves;  // x, h0, (c0,) then per layer-direction w_ih, w_hh (, b_ih, b_hh)
  Tensor lengths;
  std::vector<Tensor> weigh;   // the weights of the sum
};
StackCase make_case(RnnMode mode, int64_t layers, bool bidirectional, bool batch_first, DType dt, int64_t T,
                    int64_t B, const std::vector<int64_t>& len, bool bias = true) {
  const int64_t I = 5, H = 4, G = rnn_gates(mode), D = bidirectional ? 2 : 1;
  StackCase c;
  c.bias = bias;
  c.opt = {.mode = mode, .num_layers = layers, .batch_first = batch_first, .training = true,
           .bidirectional = bidirectional};
  Options o{.dtype = dt};
  c.leaves.push_back(randn(batch_first ? Dims{B, T, I} : Dims{T, B, I}, o).requires_grad_());
  c.leaves.push_back(randn({layers * D, B, H}, o).requires_grad_());
  if (mode == RnnMode::lstm) c.leaves.push_back(randn({layers * D, B, H}, o).requires_grad_());
  for (int64_t l = 0; l < layers; ++l)
    for (int64_t d = 0; d < D; ++d) {
      const int64_t in = l == 0 ? I : D * H;
      for (const Dims& s : {Dims{G * H, in}, Dims{G * H, H}, Dims{G * H}, Dims{G * H}})
        if (bias || s.size() == 2) c.leaves.push_back((randn(s, o) * 0.4).detach().requires_grad_());
    }
  if (!len.empty()) c.lengths = from_vector(len);
  Dims out = batch_first ? Dims{B, T, D * H} : Dims{T, B, D * H};
  for (const Dims& s : {out, Dims{layers * D, B, H}, Dims{layers * D, B, H}}) c.weigh.push_back(randn(s, o));
  return c;
}

struct StackRun {
  std::vector<Tensor> results;  // output, h_n (, c_n), then the leaves' gradients, all on the CPU
  std::string node;             // the output's tape entry's args: RnnStackArgs where the stack ran
};
StackRun run_case(const StackCase& c, Device dev) {
  std::vector<Tensor> in;
  for (const Tensor& t : c.leaves) in.push_back(t.detach().to(dev).requires_grad_());
  const bool lstm = c.opt.mode == RnnMode::lstm;
  const size_t w0 = lstm ? 3 : 2;
  std::vector<RnnLayerWeights> w;
  for (size_t k = w0; k < in.size(); k += c.bias ? 4 : 2)
    w.push_back({in[k], in[k + 1], c.bias ? in[k + 2] : Tensor(), c.bias ? in[k + 3] : Tensor()});
  RnnResult r = rnn(in[0], in[1], lstm ? in[2] : Tensor(), w, c.opt, c.lengths);
  Tensor loss = (r.output * c.weigh[0].to(dev)).sum() + (r.h_n * c.weigh[1].to(dev)).sum();
  if (lstm) loss = loss + (r.c_n * c.weigh[2].to(dev)).sum();
  loss.backward();
  StackRun out{{r.output.cpu(), r.h_n.cpu()}, r.output.grad_fn() ? r.output.grad_fn()->args_name() : ""};
  if (lstm) out.results.push_back(r.c_n.cpu());
  for (const Tensor& t : in) out.results.push_back(t.grad().cpu());
  return out;
}

std::string same_results(const StackRun& a, const StackRun& b, double rtol, double atol) {
  if (a.results.size() != b.results.size()) return "result counts differ";
  for (size_t i = 0; i < a.results.size(); ++i)
    if (std::string d = cuda_test::close(a.results[i], b.results[i], rtol, atol); !d.empty())
      return "result " + std::to_string(i) + ": " + d;
  return "";
}
}  // namespace

TEST_CASE("the whole-stack cuDNN RNN matches the per-layer path and the CPU", "[cuda][rnn][rnn_stack]") {
  PathGuard guard;
  manual_seed(8);
  const int64_t T = 6, B = 3;
  for (RnnMode mode : {RnnMode::rnn_tanh, RnnMode::rnn_relu, RnnMode::gru, RnnMode::lstm})
    for (int64_t layers : {1, 2})
      for (bool bidirectional : {false, true})
        for (bool lengths : {false, true}) {
          const bool batch_first = lengths && layers == 2;  // both layouts, each with and without lengths
          INFO("mode " << int(mode) << " layers " << layers << " bidirectional " << bidirectional << " lengths "
                       << lengths << " batch_first " << batch_first);
          StackCase c = make_case(mode, layers, bidirectional, batch_first, DType::f32, T, B,
                                  lengths ? std::vector<int64_t>{4, 6, 2} : std::vector<int64_t>{});
          StackRun cpu = run_case(c, kCPU);
          cuda::set_cudnn_rnn(cuda::CudnnRnn::layers);
          StackRun per_layer = run_case(c, kGpu);
          cuda::set_cudnn_rnn(cuda::CudnnRnn::stack);
          const uint64_t packs = cuda::rnn_stack_packs();
          StackRun stack = run_case(c, kGpu);
          CHECK(stack.node == "RnnStackArgs");  // the stack ran, not the per-layer fallback
          CHECK(per_layer.node != "RnnStackArgs");
          CHECK(cuda::rnn_stack_packs() == packs + 1);
          CHECK(same_results(stack, cpu, 1e-4, 1e-5) == "");
          CHECK(same_results(stack, per_layer, 1e-4, 1e-5) == "");
        }
}

TEST_CASE("the whole-stack cuDNN RNN in float64, with and without bias, matches the CPU to float64 rounding",
          "[cuda][rnn][rnn_stack]") {
  PathGuard guard;
  manual_seed(9);
  cuda::set_cudnn_rnn(cuda::CudnnRnn::stack);
  for (RnnMode mode : {RnnMode::gru, RnnMode::lstm})
    for (bool bias : {true, false}) {
      INFO("mode " << int(mode) << " bias " << bias);
      StackCase c = make_case(mode, 2, true, false, DType::f64, 5, 3, {5, 1, 3}, bias);
      StackRun stack = run_case(c, kGpu);
      CHECK(stack.node == "RnnStackArgs");
      CHECK(same_results(stack, run_case(c, kCPU), 1e-10, 1e-10) == "");
    }
}

TEST_CASE("the whole-stack RNN leaves dropout between layers in training to the per-layer path",
          "[cuda][rnn][rnn_stack]") {
  PathGuard guard;
  manual_seed(10);
  cuda::set_cudnn_rnn(cuda::CudnnRnn::stack);
  nn::LSTM lstm(5, 4, {.num_layers = 2, .dropout = 0.5});
  lstm.to(kGpu);
  Tensor x = randn({6, 3, 5}).to(kGpu);
  const uint64_t packs = cuda::rnn_stack_packs();
  Tensor train_out = lstm.forward(x, {}).output;  // reel's dropout between the layers
  CHECK(cuda::rnn_stack_packs() == packs);
  CHECK(std::string(train_out.grad_fn()->args_name()) != "RnnStackArgs");
  lstm.eval();  // no dropout in eval: the stack serves it
  Tensor eval_out = lstm.forward(x, {}).output;
  CHECK(cuda::rnn_stack_packs() == packs + 1);
  cuda::set_cudnn_rnn(cuda::CudnnRnn::layers);
  CHECK(cuda_test::close(eval_out.cpu(), lstm.forward(x, {}).output.cpu(), 1e-4, 1e-5) == "");
}

TEST_CASE("the whole-stack RNN packs its weights once per optimizer step", "[cuda][rnn][rnn_stack]") {
  PathGuard guard;
  manual_seed(11);
  cuda::set_cudnn_rnn(cuda::CudnnRnn::stack);
  nn::GRU gru(5, 4, {.num_layers = 2, .batch_first = true, .bidirectional = true});
  gru.to(kGpu);
  optim::SGD sgd(gru.parameters(), {.lr = 0.1});
  Tensor x = randn({3, 6, 5}).to(kGpu);
  auto step = [&] {
    sgd.zero_grad();
    gru.forward(x, {}).output.sum().backward();
  };
  const uint64_t p0 = cuda::rnn_stack_packs();
  step();
  CHECK(cuda::rnn_stack_packs() == p0 + 1);  // the first forward packs
  Tensor before = gru.forward(x, {}).output.detach().cpu();
  step();
  CHECK(cuda::rnn_stack_packs() == p0 + 1);  // unchanged weights: two more forwards, no packing
  sgd.step();
  Tensor after = gru.forward(x, {}).output.detach().cpu();
  CHECK(cuda::rnn_stack_packs() == p0 + 2);  // the step bumped the versions: packed again
  CHECK(cuda_test::close(after, before, 0, 0) != "");  // and the new weights are the ones used
  cuda::set_cudnn_rnn(cuda::CudnnRnn::layers);
  CHECK(cuda_test::close(after, gru.forward(x, {}).output.detach().cpu(), 1e-4, 1e-5) == "");
  cuda::set_cudnn_rnn(cuda::CudnnRnn::stack);
  nn::GRU other(5, 4, {.num_layers = 2, .batch_first = true, .bidirectional = true});
  other.to(kGpu);
  Tensor other_out = other.forward(x, {}).output.detach().cpu();
  gru.forward(x, {});  // two models of one configuration: each keeps its packed weights
  CHECK(cuda::rnn_stack_packs() == p0 + 3);
  gru.load_state_dict(other.state_dict());  // copies into the parameters: versions move
  CHECK(cuda_test::close(gru.forward(x, {}).output.detach().cpu(), other_out, 1e-6, 1e-7) == "");
  CHECK(cuda::rnn_stack_packs() == p0 + 4);
}
