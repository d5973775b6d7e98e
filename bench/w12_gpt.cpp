// W12: one training step of samples/train_gpt's character-level GPT (6 layers, 6 heads,
// 384 features, block 256, dropout 0.2, vocabulary 96, ~10.7M parameters) at batch 8:
// forward, cross-entropy, backward, gradient clipping, AdamW. Synthetic token ids (the
// work does not depend on them). Then scaled_dot_product_attention alone, causal,
// [1, 6, T, 64] at T = 256, 1024, 4096: ms per forward + backward (under --amp, the forward
// under autocast, as the step's), and the most memory its forward + backward held beyond the
// inputs (the CPU allocator's peak, MB).
// Floors: the step is ~6 N tokens flops for the weights (N parameters without the
// embeddings: 6 x 12 x 384^2 + 384 x 96) plus causal attention 2 x 4 x 6 x 256^2 x 64
// x 8 / 2 per layer forward (x 3.5 with backward); over peak sgemm it is what the
// compare.py line "W12 step_ms vs compute floor" prints. --profile 1: one step's ops and
// their times on stderr first (with REEL_CUDA_SYNC=1 on a GPU, each op's own time).
// SDPA's floor: 12 T^2 / 2 x 64 x 6 flops (the forward's two products and the backward's four,
// halved by the mask) at peak sgemm, compare.py's "W12 sdpa_T* vs compute floor" lines.
#include "../samples/gpt.h"
#include "reel_bench.h"

int main(int argc, char** argv) {
  using namespace reel;
  bench::Args args = bench::parse_args(argc, argv);
  bench::Target t = bench::setup(args);
  const int64_t steps = args.get("--steps", 5), B = 8, T = 256, V = 96;
  const bool sdpa_only = args.get("--sdpa-only", 0) != 0;
  manual_seed(1);
  if (!sdpa_only) {
    gpt::GPT model({.vocab = V, .block = T});
    model.to(t.device);
    optim::AdamW opt(model.parameters(), {.lr = 1e-3, .betas = {0.9, 0.99}, .weight_decay = 0.1});
    Tensor x = randint(0, V, {B, T}, {.dtype = DType::i64, .device = t.device});
    Tensor y = randint(0, V, {B, T}, {.dtype = DType::i64, .device = t.device});
    auto step = [&] {
      Tensor loss;
      {
        auto amp = t.autocast();  // --amp bf16|f16: the forward under autocast
        Tensor logits = model(x);
        loss = cross_entropy(logits.reshape({B * T, V}), y.reshape({B * T}));
      }
      opt.zero_grad();
      loss.backward();
      optim::clip_grad_norm(model.parameters(), 1.0);
      opt.step();
      return loss;
    };
    for (int i = 0; i < 2; ++i) step();  // warm-up
    if (args.get("--profile", 0)) {  // one profiled step: where the time goes, per op (stderr)
      debug::Profiler prof;
      step().item<float>();
      prof.stop();
      std::fprintf(stderr, "%s\n", prof.summary(30).c_str());
    }
    std::vector<double> step_ms;
    for (int rep = 0; rep < args.reps; ++rep) {
      double t0 = bench::now_s();
      Tensor loss;
      for (int64_t i = 0; i < steps; ++i) loss = step();
      loss.item<float>();
      step_ms.push_back(1e3 * (bench::now_s() - t0) / double(steps));
    }
    bench::report(args, "W12", "reel", t.name.c_str(), "step_ms", step_ms, t.extra);
  }
  for (int64_t L : {256, 1024, 4096}) {
    Tensor q = randn({1, 6, L, 64}, {.device = t.device}).requires_grad_();
    Tensor k = randn({1, 6, L, 64}, {.device = t.device}).requires_grad_();
    Tensor v = randn({1, 6, L, 64}, {.device = t.device}).requires_grad_();
    Tensor g = randn({1, 6, L, 64}, {.device = t.device});
    auto once = [&] {  // under --amp, attention in the dtype autocast gives it (f32 unless fused in that dtype)
      Tensor o;
      {
        auto amp = t.autocast();
        o = scaled_dot_product_attention(q, k, v, {.is_causal = true});
      }
      autograd::grad({o}, {q, k, v}, {o.dtype() == g.dtype() ? g : g.to(o.dtype())});
    };
    once();
    size_t base = cpu::memory_stats().allocated;
    cpu::reset_peak_memory_stats();
    once();
    double peak_mb = double(cpu::memory_stats().peak_allocated - base) / 1e6;
    std::vector<double> ms;
    const int calls = L >= 4096 ? 1 : L >= 1024 ? 3 : 20;
    for (int rep = 0; rep < args.reps; ++rep) {
      t.sync();
      double t0 = bench::now_s();
      for (int i = 0; i < calls; ++i) once();
      t.sync();
      ms.push_back(1e3 * (bench::now_s() - t0) / calls);
    }
    std::string metric = "sdpa_T" + std::to_string(L);
    bench::report(args, "W12", "reel", t.name.c_str(), (metric + "_ms").c_str(), ms, t.extra);
    if (!t.device.is_cuda())
      bench::report(args, "W12", "reel", t.name.c_str(), (metric + "_peak_mb").c_str(), std::vector<double>{peak_mb},
                    t.extra);
  }
  return 0;
}
