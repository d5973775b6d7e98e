// W9: GRU-IMDB, the DeepLearningFrameworks seed's sentiment model: Embedding(30000, 125)
// -> GRU(125, 100, batch_first) -> the last step's output -> Linear(100, 2), softmax
// cross-entropy, Adam (lr 1e-3), batch 64, sequences of 150 token ids, 25,000 training
// sequences per epoch (synthetic ids and labels: the IMDB set cannot be downloaded
// here). Reports s per epoch: with --steps N (default 40) the mean of N consecutive
// steps scaled to 25,000 sequences; with --steps 0 a whole epoch (391 steps, the last
// of 40 sequences). Also ms per step and the step's floor: its GEMM flops
// (forward 2 T B 3H (I + H) for the GRU, backward twice that) over peak sgemm.
// --rnn-loops 1: the GRU on the loops of matrix products (cpu/rnn_loops.cpp) instead of
// oneDNN's RNN primitive, to compare the two (JSON "rnn": "loops"). --profile 1: one step's
// ops and their times on stderr first (with REEL_CUDA_SYNC=1 on a GPU, each op's own time).
// On a GPU, REEL_CUDNN_RNN=stack runs the GRU through the whole-stack cuDNN path (JSON
// "cudnn_rnn"), and the program prints how often it packed the weights (once per step).
#include <reel/cpu/cpu_backend.h>

#include "reel_bench.h"

int main(int argc, char** argv) {
  using namespace reel;
  bench::Args args = bench::parse_args(argc, argv);
  bench::Target t = bench::setup(args);
  int64_t steps = args.get("--steps", 40);
  bool loops = args.get("--rnn-loops", 0) != 0;
  cpu::rnn_use_loops(loops);
  std::string extra = t.extra + (t.extra.empty() ? "" : ", ") + (loops ? "\"rnn\": \"loops\"" : "\"rnn\": \"onednn\"");
  // on a GPU, which cuDNN path ran (REEL_CUDNN_RNN): one call per layer, or the whole stack
  const bool stack = t.device.is_cuda() && cuda::cudnn_rnn() == cuda::CudnnRnn::stack;
  if (t.device.is_cuda()) extra += stack ? ", \"cudnn_rnn\": \"stack\"" : ", \"cudnn_rnn\": \"layers\"";
  const int64_t N = 25000, T = 150, B = 64, V = 30000, E = 125, H = 100;
  manual_seed(1);
  nn::Embedding emb(V, E);
  nn::GRU gru(E, H, {.batch_first = true});
  nn::Linear fc(H, 2);
  for (nn::Module* m : std::initializer_list<nn::Module*>{&emb, &gru, &fc}) m->to(t.device);
  std::vector<Tensor> params;
  for (nn::Module* m : std::initializer_list<nn::Module*>{&emb, &gru, &fc})
    for (const Tensor& p : m->parameters()) params.push_back(p);
  optim::Adam opt(params, {.lr = 1e-3});
  Tensor ids = randint(0, V, {N, T}, {.dtype = DType::i64, .device = t.device});
  Tensor labels = randint(0, 2, {N}, {.dtype = DType::i64, .device = t.device});
  int64_t batch_index = 0;
  auto step = [&] {
    int64_t start = batch_index * B % N, n = std::min(B, N - start);
    ++batch_index;
    Tensor loss;
    {
      auto amp = t.autocast();                                  // --amp bf16|f16: the forward under autocast
      Tensor out = gru(emb(ids.narrow(0, start, n)));           // [n, T, H]
      loss = cross_entropy(fc(out.narrow(1, T - 1, 1).squeeze(1)), labels.narrow(0, start, n));
    }
    opt.zero_grad();
    loss.backward();
    opt.step();
    return loss;
  };
  for (int i = 0; i < 3; ++i) step();  // warm-up
  if (args.get("--profile", 0)) {  // one profiled step: where the time goes, per op (stderr)
    debug::Profiler prof;
    step().item<float>();
    prof.stop();
    std::fprintf(stderr, "%s\n", prof.summary(30).c_str());
  }
  std::vector<double> epoch_s, step_ms;
  const uint64_t packs = cuda::rnn_stack_packs();
  int64_t timed_steps = 0;
  for (int rep = 0; rep < args.reps; ++rep) {
    batch_index = 0;
    int64_t count = steps > 0 ? steps : (N + B - 1) / B;
    double t0 = bench::now_s();
    Tensor loss;
    for (int64_t i = 0; i < count; ++i) loss = step();
    timed_steps += count;
    loss.item<float>();
    double s = bench::now_s() - t0;
    epoch_s.push_back(steps > 0 ? s / double(count) * double(N) / double(B) : s);
    step_ms.push_back(1e3 * s / double(count));
  }
  bench::report(args, "W9", "reel", t.name.c_str(), "epoch_s", epoch_s, extra);
  bench::report(args, "W9", "reel", t.name.c_str(), "step_ms", step_ms, extra);
  // the stack packs the GRU's weights once per Adam step, never twice
  if (stack)
    std::printf("cuDNN weight packings: %llu in %lld timed steps\n",
                static_cast<unsigned long long>(cuda::rnn_stack_packs() - packs),
                static_cast<long long>(timed_steps));
  double flop = 3.0 * 2 * T * B * 3 * H * (E + H);
  std::printf("GRU GEMM work per step: %.2f GFLOP (forward, backward data and weights)\n", flop / 1e9);
  return 0;
}
