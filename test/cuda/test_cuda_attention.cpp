// scaled_dot_product_attention's CUDA kernels (cuda/attention.cu) give the CPU kernel's
// results, gradients included: no mask, causal, boolean and additive masks broadcast over
// leading dims, dropout (the same Philox numbers on both devices), odd lengths, L != S,
// f32 and f64; the tiled float32 kernels' heads (64, 128) over several tiles; and
// MultiheadAttention on the GPU. gpu-run.sh runs the file with each REEL_CUDA_ATTENTION
// (tiles, the default; rows; vector) and REEL_CUDA_ATTENTION_ROWS=64.
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
