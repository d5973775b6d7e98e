// scaled_dot_product_attention's CUDA kernels (cuda/attention.cu) give the CPU kernel's
// results, gradients included: no mask, causal, boolean and additive masks broadcast over
// leading dims, dropout (the same Philox numbers on both devices), odd lengths, L != S,
// f32 and f64; the tiled float32 kernels' heads (64, 128) over several tiles; and
// MultiheadAttention on the GPU. gpu-run.sh runs the file with each REEL_CUDA_ATTENTION
// (tiles, the default; rows; vector; mma, whose 3xTF32 products keep these tolerances) and
// REEL_CUDA_ATTENTION_ROWS=64.
#include "compare.h"

using namespace reel;
using cuda_test::leaf;
using V = std::vector<Tensor>;

namespace {
// sdpa with options o on {q, k, v} or {q, k, v, mask}
cuda_test::Fn sdpa(SdpaOptions o) {
  return [o](const V& v) {
    SdpaOptions p = o;
    if (v.size() > 3) p.attn_mask = v[3];
    return scaled_dot_product_attention(v[0], v[1], v[2], p);
  };
}
}  // namespace

TEST_CASE("sdpa on the GPU matches the CPU", "[cuda][attention]") {
  manual_seed(20);
  V qkv = {leaf({2, 3, 37, 16}), leaf({2, 3, 45, 16}), leaf({2, 3, 45, 24})};
  CHECK_SAME_ON_GPU(sdpa({}), qkv, 1e-4, 1e-5);
  CHECK_SAME_ON_GPU(sdpa({.is_causal = true}), qkv, 1e-4, 1e-5);
  CHECK_SAME_ON_GPU(sdpa({.scale = 0.25}), {leaf({1, 1, 4}), leaf({1, 1, 4}), leaf({1, 1, 4})}, 1e-4, 1e-5);
  Tensor keep = gt(rand({2, 1, 1, 45}), 0.3);
  keep = logical_or(keep, lt(arange(0, 45, 1), 1.0));
  CHECK_SAME_ON_GPU(sdpa({}), {qkv[0], qkv[1], qkv[2], keep}, 1e-4, 1e-5);
  Tensor bias = leaf({3, 37, 45}, -1, 1, DType::f32, false);
  CHECK_SAME_ON_GPU(sdpa({}), {qkv[0], qkv[1], qkv[2], bias}, 1e-4, 1e-5);
  V qkv64 = {leaf({2, 70, 8}, -2, 2, DType::f64), leaf({2, 70, 8}, -2, 2, DType::f64),
             leaf({2, 70, 8}, -2, 2, DType::f64)};
  CHECK_SAME_ON_GPU(sdpa({.is_causal = true}), qkv64, 1e-10, 1e-12);
  // dropout: a fresh generator per call, so that both devices start their streams at 0
  CHECK_SAME_ON_GPU([](const V& v) {
    Generator g(5);
    return scaled_dot_product_attention(v[0], v[1], v[2], {.dropout_p = 0.3, .is_causal = true, .generator = &g});
  }, qkv, 1e-4, 1e-5);
}

// The tiled float32 kernels' head sizes (the default tiles; gpu-run.sh runs this file with
// each REEL_CUDA_ATTENTION): several 64-row tiles with ragged ends on both sides, heads 64 and 128
// (E != Ev), every mask kind.
// These shapes take 32 rows a block (few heads); gpu-run.sh runs the file again with
// REEL_CUDA_ATTENTION_ROWS=64.
TEST_CASE("sdpa on the GPU matches the CPU over several tiles at heads 64 and 128", "[cuda][attention]") {
  manual_seed(22);
  V h64 = {leaf({2, 2, 130, 64}), leaf({2, 2, 200, 64}), leaf({2, 2, 200, 64})};
  CHECK_SAME_ON_GPU(sdpa({}), h64, 1e-4, 1e-5);
  CHECK_SAME_ON_GPU(sdpa({.is_causal = true}), h64, 1e-4, 1e-5);
  Tensor keep = logical_or(gt(rand({2, 1, 130, 200}), 0.5), lt(arange(0, 200, 1), 1.0));
  CHECK_SAME_ON_GPU(sdpa({}), {h64[0], h64[1], h64[2], keep}, 1e-4, 1e-5);
  V h128 = {leaf({1, 3, 65, 96}), leaf({1, 3, 129, 96}), leaf({1, 3, 129, 128})};
  CHECK_SAME_ON_GPU(sdpa({.is_causal = true}), h128, 1e-4, 1e-5);
  Tensor bias = leaf({65, 129}, -1, 1, DType::f32, false);
  CHECK_SAME_ON_GPU(sdpa({}), {h128[0], h128[1], h128[2], bias}, 1e-4, 1e-5);
  CHECK_SAME_ON_GPU([](const V& v) {
    Generator g(6);
    return scaled_dot_product_attention(v[0], v[1], v[2], {.dropout_p = 0.2, .generator = &g});
  }, h64, 1e-4, 1e-5);
  // odd heads: rows of q, k and v not 16-byte aligned (the mma tiles' scalar loads), zero padding to 64
  V odd = {leaf({1, 2, 70, 33}), leaf({1, 2, 90, 33}), leaf({1, 2, 90, 7})};
  CHECK_SAME_ON_GPU(sdpa({.is_causal = true}), odd, 1e-4, 1e-5);
}

TEST_CASE("MultiheadAttention and TransformerEncoderLayer run on the GPU", "[cuda][attention]") {
  manual_seed(21);
  nn::TransformerEncoderLayer enc(32, 4, {.dim_feedforward = 64, .dropout = 0.0, .batch_first = true});
  Tensor x = randn({3, 19, 32});
  Tensor pad = gt(rand({3, 19}), 0.8);
  Tensor y = enc(x, {.src_key_padding_mask = pad});
  enc.to(cuda_test::kGpu);
  Tensor yg = enc(x.to(cuda_test::kGpu), {.src_key_padding_mask = pad.to(cuda_test::kGpu)});
  CHECK(cuda_test::close(yg.cpu(), y, 1e-4, 1e-5) == "");
}

// f16/bf16 attention (REEL_CUDA_HALF_ATTENTION, cuda/internal/half_attention.h): cuDNN's
// fused kernels against the CPU's (f32 twins, rounded once) at W12's and other heads, causal
// or not, L != S; a forward on one path and its backward on the other (cuDNN's statistics
// are reel's lse); dropout from cuDNN's Philox seeded with reel's (repeatable, the backward
// replaying the forward's mask); calls cuDNN does not take (a mask, head 24) stay staged; and
// autocast on CUDA runs attention in its dtype only where cuDNN's path is on.
namespace {
struct HalfPath {  // sets the path for a scope, puts the previous one back
  explicit HalfPath(cuda::HalfAttentionPath p) : prev(cuda::half_attention_path()) { cuda::set_half_attention_path(p); }
  ~HalfPath() { cuda::set_half_attention_path(prev); }
  cuda::HalfAttentionPath prev;
};
V half_leaves(const std::vector<Dims>& shapes, DType dt) {
  V r;
  for (const Dims& s : shapes) r.push_back(leaf(s, -2, 2).detach().to(dt).requires_grad_());
  return r;
}
}  // namespace

TEST_CASE("f16/bf16 sdpa through cuDNN matches the CPU", "[cuda][attention][half]") {
  manual_seed(23);
  HalfPath on(cuda::HalfAttentionPath::cudnn);
  for (DType dt : {DType::bf16, DType::f16}) {
    INFO(dtype_name(dt));
    const double tol = dt == DType::bf16 ? 3e-2 : 5e-3;
    for (const std::vector<Dims>& shapes : std::vector<std::vector<Dims>>{
             {{1, 6, 256, 64}, {1, 6, 256, 64}, {1, 6, 256, 64}},     // W12's heads
             {{2, 3, 100, 128}, {2, 3, 190, 128}, {2, 3, 190, 128}},  // L != S, the widest head
             {{2, 2, 1, 32}, {2, 2, 77, 32}, {2, 2, 77, 32}}}) {      // one query row
      V qkv = half_leaves(shapes, dt);
      for (bool causal : {false, true}) {
        INFO("q " << shapes[0].str() << ", k " << shapes[1].str() << (causal ? ", causal" : ""));
        const uint64_t before = cuda::cudnn_attention_calls();
        CHECK_SAME_ON_GPU(sdpa({.is_causal = causal}), qkv, tol, tol);
        CHECK(cuda::cudnn_attention_calls() == before + 2);  // forward and backward both ran in cuDNN
      }
    }
  }
}

TEST_CASE("a half attention's backward may run on the other path than its forward", "[cuda][attention][half]") {
  manual_seed(24);
  V qkv = half_leaves({{1, 4, 200, 64}, {1, 4, 200, 64}, {1, 4, 200, 64}}, DType::bf16);
  V gpu;
  for (const Tensor& t : qkv) gpu.push_back(t.detach().to(cuda_test::kGpu).requires_grad_());
  Tensor g = randn({1, 4, 200, 64}).to(DType::bf16).to(cuda_test::kGpu);
  auto grads = [&](cuda::HalfAttentionPath fwd, cuda::HalfAttentionPath bwd) {
    Tensor y;
    {
      HalfPath p(fwd);
      y = scaled_dot_product_attention(gpu[0], gpu[1], gpu[2], {.is_causal = true});
    }
    HalfPath p(bwd);
    V r = autograd::grad({y}, {gpu[0], gpu[1], gpu[2]}, {g});
    r.push_back(y);
    return r;
  };
  using P = cuda::HalfAttentionPath;
  V staged = grads(P::staged, P::staged), cross = grads(P::cudnn, P::staged), back = grads(P::staged, P::cudnn);
  for (int i = 0; i < 4; ++i) {
    INFO("tensor " << i);
    CHECK(cuda_test::close(cross[i].cpu().to(DType::f32), staged[i].cpu().to(DType::f32), 3e-2, 3e-2) == "");
    CHECK(cuda_test::close(back[i].cpu().to(DType::f32), staged[i].cpu().to(DType::f32), 3e-2, 3e-2) == "");
  }
}

// o = A v with A = z p / (1 - p) fixed by q, k and the mask, so <o, g> = <v, A^T g> = <v, dv>
// holds only if the backward drops exactly what the forward dropped
TEST_CASE("cuDNN's attention dropout repeats for a seed and its backward replays the forward's mask",
          "[cuda][attention][half]") {
  manual_seed(27);
  HalfPath on(cuda::HalfAttentionPath::cudnn);
  V qkv;
  for (const Tensor& t : half_leaves({{2, 3, 160, 64}, {2, 3, 160, 64}, {2, 3, 160, 64}}, DType::bf16))
    qkv.push_back(t.detach().to(cuda_test::kGpu).requires_grad_());
  Tensor g = randn({2, 3, 160, 64}).to(DType::bf16).to(cuda_test::kGpu);
  auto run = [&](uint64_t seed, double p) {
    Generator gen(seed);
    Tensor o = scaled_dot_product_attention(qkv[0], qkv[1], qkv[2], {.dropout_p = p, .is_causal = true,
                                                                        .generator = &gen});
    V r = autograd::grad({o}, {qkv[0], qkv[1], qkv[2]}, {g});
    r.insert(r.begin(), o);
    return r;
  };
  const uint64_t before = cuda::cudnn_attention_calls();
  V a = run(5, 0.3), b = run(5, 0.3), c = run(6, 0.3), none = run(5, 0);
  CHECK(cuda::cudnn_attention_calls() == before + 8);  // every forward and backward in cuDNN
  for (int i = 0; i < 4; ++i) CHECK(cuda_test::close(a[i].cpu(), b[i].cpu(), 0, 0) == "");  // the same bits
  CHECK(cuda_test::close(a[0].cpu(), c[0].cpu(), 0, 0) != "");     // another seed, another mask
  CHECK(cuda_test::close(a[0].cpu(), none[0].cpu(), 0, 0) != "");  // and dropout did drop
  // with g = o: <o, o> against <v, A'^T o> = <A' v, o>, which a mask A' drawn apart from
  // the forward's would leave about 30% short at p = 0.3 (E z z' = 0.49 against E z^2 = 0.7)
  Generator gen(8);
  Tensor o = scaled_dot_product_attention(qkv[0], qkv[1], qkv[2], {.dropout_p = 0.3, .is_causal = true,
                                                                      .generator = &gen});
  Tensor dv = autograd::grad({o}, {qkv[2]}, {o.detach()})[0];
  auto dot = [](const Tensor& x, const Tensor& y) { return (x.to(DType::f32) * y.to(DType::f32)).sum().item<double>(); };
  const double oo = dot(o, o), vdv = dot(qkv[2].detach(), dv);
  INFO("<o, o> " << oo << ", <v, dv> " << vdv);
  CHECK(std::abs(oo - vdv) <= 2e-2 * oo);
}

TEST_CASE("half attention calls cuDNN does not take run staged", "[cuda][attention][half]") {
  manual_seed(25);
  HalfPath on(cuda::HalfAttentionPath::cudnn);
  V qkv = half_leaves({{2, 3, 37, 16}, {2, 3, 45, 16}, {2, 3, 45, 16}}, DType::bf16);
  const uint64_t before = cuda::cudnn_attention_calls();
  Tensor keep = logical_or(gt(rand({2, 1, 1, 45}), 0.3), lt(arange(0, 45, 1), 1.0));
  CHECK_SAME_ON_GPU(sdpa({}), {qkv[0], qkv[1], qkv[2], keep}, 3e-2, 3e-2);
  // a head of 20, not a multiple of 8 (24 is one: cuDNN takes it)
  CHECK_SAME_ON_GPU(sdpa({}), half_leaves({{1, 2, 20, 20}, {1, 2, 20, 20}, {1, 2, 20, 20}}, DType::bf16), 3e-2,
                    3e-2);
  CHECK(cuda::cudnn_attention_calls() == before);
}

TEST_CASE("autocast on CUDA runs attention in its dtype where cuDNN's path is on, else in f32",
          "[cuda][attention][half][autocast]") {
  manual_seed(26);
  Tensor q = randn({1, 6, 128, 64}, {.device = cuda_test::kGpu}).requires_grad_();
  Tensor k = randn({1, 6, 128, 64}, {.device = cuda_test::kGpu}).requires_grad_();
  Tensor v = randn({1, 6, 128, 64}, {.device = cuda_test::kGpu}).requires_grad_();
  for (auto path : {cuda::HalfAttentionPath::staged, cuda::HalfAttentionPath::cudnn}) {
    HalfPath p(path);
    const bool low = path == cuda::HalfAttentionPath::cudnn;
    INFO((low ? "cudnn" : "staged"));
    Tensor y, y32 = scaled_dot_product_attention(q, k, v, {.is_causal = true});
    {
      AutocastGuard amp({.device = DeviceType::CUDA, .dtype = DType::bf16});
      y = scaled_dot_product_attention(q, k, v, {.is_causal = true});
    }
    CHECK(y.dtype() == (low ? DType::bf16 : DType::f32));
    CHECK(cuda_test::close(y.to(DType::f32).cpu(), y32.cpu(), low ? 3e-2 : 1e-5, low ? 3e-2 : 1e-6) == "");
    V g = autograd::grad({y.to(DType::f32).sum()}, {q, k, v});
    V g32 = autograd::grad({y32.sum()}, {q, k, v});
    for (int i = 0; i < 3; ++i) {
      CHECK(g[i].dtype() == DType::f32);  // the parameters' dtype, whatever attention ran in
      const double scale = g32[i].abs().max().item<double>();
      CHECK(cuda_test::close(g[i].cpu(), g32[i].cpu(), 0, (low ? 5e-2 : 1e-5) * scale) == "");
    }
  }
}
