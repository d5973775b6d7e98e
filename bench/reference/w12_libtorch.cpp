// W12 in libtorch 1.13: the GPT step of bench/w12_gpt.cpp (the same model as
// workloads_pytorch.py's GPT: pre-norm blocks, causal attention composed from matmul,
// masked_fill and softmax, as 1.13 has no fused attention), the same batch, steps and
// timing; then causal attention alone at T = 256, 1024, 4096 (time only: libtorch's CPU
// allocator keeps no counters).
#include <cmath>

#include "torch_bench.h"

namespace {
namespace nn = torch::nn;
namespace F = torch::nn::functional;

struct BlockImpl : nn::Module {
  BlockImpl(int64_t C, int64_t H, double p)
      : H(H), p(p), norm1(nn::LayerNormOptions({C})), norm2(nn::LayerNormOptions({C})), in_proj(C, 3 * C),
        out_proj(C, C), linear1(C, 4 * C), linear2(4 * C, C) {
    register_module("norm1", norm1), register_module("norm2", norm2);
    register_module("in_proj", in_proj), register_module("out_proj", out_proj);
    register_module("linear1", linear1), register_module("linear2", linear2);
  }
  torch::Tensor drop(const torch::Tensor& t) {
    return F::dropout(t, F::DropoutFuncOptions().p(p).training(is_training()));
  }
  torch::Tensor attention(const torch::Tensor& x) {
    int64_t B = x.size(0), T = x.size(1), C = x.size(2);
    auto qkv = in_proj(x).split(C, 2);
    auto heads = [&](const torch::Tensor& t) { return t.view({B, T, H, C / H}).transpose(1, 2); };
    torch::Tensor q = heads(qkv[0]), k = heads(qkv[1]), v = heads(qkv[2]);
    torch::Tensor s = torch::matmul(q, k.transpose(-2, -1)) / std::sqrt(double(C / H));
    s = s.masked_fill(torch::ones({T, T}, torch::dtype(torch::kBool).device(x.device())).triu(1), -INFINITY);
    torch::Tensor o = torch::matmul(drop(torch::softmax(s, -1)), v);
    return out_proj(o.transpose(1, 2).reshape({B, T, C}));
  }
  torch::Tensor forward(torch::Tensor x) {
    x = x + drop(attention(norm1(x)));
    return x + drop(linear2(drop(torch::gelu(linear1(norm2(x))))));
  }
  int64_t H;
  double p;
  nn::LayerNorm norm1, norm2;
  nn::Linear in_proj, out_proj, linear1, linear2;
};
TORCH_MODULE(Block);
}  // namespace

int main(int argc, char** argv) {
  bench::Args args = bench::parse_args(argc, argv);
  bench::Target t = bench::setup(args);
  const int64_t steps = args.get("--steps", 5), B = 8, T = 256, V = 96, C = 384;
  const bool sdpa_only = args.get("--sdpa-only", 0) != 0;
  torch::manual_seed(1);
  if (!sdpa_only) {
    nn::Embedding wte(V, C), wpe(T, C);
    std::vector<Block> h;
    for (int l = 0; l < 6; ++l) h.emplace_back(C, 6, 0.2);
    nn::LayerNorm ln_f(nn::LayerNormOptions({C}));
    nn::Linear lm_head(nn::LinearOptions(C, V).bias(false));
    std::vector<torch::Tensor> params;
    auto add = [&](nn::Module& m) {
      m.to(t.device);
      for (auto& p : m.parameters()) params.push_back(p);
    };
    add(*wte), add(*wpe), add(*ln_f), add(*lm_head);
    for (auto& b : h) add(*b);
    torch::optim::AdamW opt(params, torch::optim::AdamWOptions(1e-3).betas({0.9, 0.99}).weight_decay(0.1));
    auto i64 = torch::TensorOptions().dtype(torch::kInt64).device(t.device);
    torch::Tensor x = torch::randint(0, V, {B, T}, i64), y = torch::randint(0, V, {B, T}, i64);
    torch::Tensor pos = torch::arange(T, i64);
    auto step = [&] {
      torch::Tensor z = F::dropout(wte(x) + wpe(pos), F::DropoutFuncOptions().p(0.2).training(true));
      for (auto& b : h) z = b(z);
      torch::Tensor loss = F::cross_entropy(lm_head(ln_f(z)).view({B * T, V}), y.view({B * T}));
      opt.zero_grad();
      loss.backward();
      nn::utils::clip_grad_norm_(params, 1.0);
      opt.step();
      return loss;
    };
    for (int i = 0; i < 2; ++i) step();
    std::vector<double> step_ms;
    for (int rep = 0; rep < args.reps; ++rep) {
      double t0 = bench::now_s();
      torch::Tensor loss;
      for (int64_t i = 0; i < steps; ++i) loss = step();
      loss.item<float>();
      step_ms.push_back(1e3 * (bench::now_s() - t0) / double(steps));
    }
    bench::report(args, "W12", "libtorch", t.name.c_str(), "step_ms", step_ms);
  }
  for (int64_t L : {256, 1024, 4096}) {
    auto f32 = torch::TensorOptions().device(t.device).requires_grad(true);
    torch::Tensor q = torch::randn({1, 6, L, 64}, f32), k = torch::randn({1, 6, L, 64}, f32),
                  v = torch::randn({1, 6, L, 64}, f32), g = torch::randn({1, 6, L, 64}, torch::device(t.device));
    torch::Tensor mask = torch::ones({L, L}, torch::dtype(torch::kBool).device(t.device)).triu(1);
    auto once = [&] {
      torch::Tensor s = torch::matmul(q, k.transpose(-2, -1)) / 8.0;
      torch::Tensor o = torch::matmul(torch::softmax(s.masked_fill(mask, -INFINITY), -1), v);
      torch::autograd::grad({o}, {q, k, v}, {g});
    };
    once();
    const int calls = L >= 4096 ? 1 : L >= 1024 ? 3 : 20;
    std::vector<double> ms;
    for (int rep = 0; rep < args.reps; ++rep) {
      double t0 = bench::now_s();
      for (int i = 0; i < calls; ++i) once();
      ms.push_back(1e3 * (bench::now_s() - t0) / calls);
    }
    bench::report(args, "W12", "libtorch", t.name.c_str(), ("sdpa_T" + std::to_string(L) + "_ms").c_str(), ms);
  }
  return 0;
}
