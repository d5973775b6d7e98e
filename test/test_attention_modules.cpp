// nn::MultiheadAttention and nn::TransformerEncoderLayer against PyTorch 1.13 with the
// same weights (test/reference/attention_ref.safetensors, written by
// test/reference/gen_attention_reference.py): outputs, attention weights, gradients of
// sum(output * ramp); parameter names; masks; errors.
#include <catch2/catch.hpp>
#include <reel/reel.h>

#include <cmath>
#include <string>

using namespace reel;

namespace {

const safetensors::File& ref() {
  static safetensors::File f =
      safetensors::load(std::string(REEL_SOURCE_DIR) + "/test/reference/attention_ref.safetensors");
  return f;
}
Tensor at(const std::string& name) { return ref().at(name); }

// The module's PyTorch state dict: every entry "prefix.<name>" that names a parameter.
void load_weights(nn::Module& m, const std::string& prefix) {
  m.to(DType::f64);
  nn::NamedTensors state;
  for (const auto& [name, t] : m.named_parameters()) state.emplace_back(name, at(prefix + "." + name));
  m.load_state_dict(state);
}

void check_close(const Tensor& got, const Tensor& want, double tol = 1e-12) {
  REQUIRE(got.shape() == want.shape());
  std::vector<double> g = got.contiguous().to_vector<double>(), w = want.to_vector<double>();
  for (size_t i = 0; i < g.size(); ++i) {
    INFO("element " << i << ": got " << g[i] << ", PyTorch " << w[i]);
    CHECK(std::abs(g[i] - w[i]) <= tol * (1 + std::abs(w[i])));
  }
}

Tensor ramp(const Dims& shape) {
  return (arange(0, double(numel_of(shape)), 1, {.dtype = DType::f64}) + 1.0).reshape(shape) / 16.0;
}
Tensor leaf(const std::string& name) { return at(name).clone().requires_grad_(); }
Tensor as_bool(const Tensor& t) { return gt(t, 0.5); }

}  // namespace

TEST_CASE("MultiheadAttention has PyTorch's parameter names and init", "[attention][modules]") {
  nn::MultiheadAttention mha(8, 2);
  std::vector<std::string> names;
  for (const auto& [name, t] : mha.named_parameters()) names.push_back(name);
  CHECK(names == std::vector<std::string>{"in_proj_weight", "in_proj_bias", "out_proj.weight", "out_proj.bias"});
  CHECK(mha.in_proj_weight.shape() == Dims{24, 8});
  CHECK(mha.in_proj_bias.abs().sum().item<double>() == 0);
  CHECK(mha.out_proj.bias.abs().sum().item<double>() == 0);
  nn::TransformerEncoderLayer enc(8, 2, {.dim_feedforward = 16});
  names.clear();
  for (const auto& [name, t] : enc.named_parameters()) names.push_back(name);
  CHECK(names == std::vector<std::string>{"self_attn.in_proj_weight", "self_attn.in_proj_bias",
                                          "self_attn.out_proj.weight", "self_attn.out_proj.bias", "linear1.weight",
                                          "linear1.bias", "linear2.weight", "linear2.bias", "norm1.weight",
                                          "norm1.bias", "norm2.weight", "norm2.bias"});
}

TEST_CASE("MultiheadAttention self-attention with padding and float masks matches PyTorch", "[attention][modules]") {
  nn::MultiheadAttention mha(8, 2);
  load_weights(mha, "mha_a");
  Tensor x = leaf("mha_a.x");
  nn::AttentionCall call{.key_padding_mask = as_bool(at("mha_a.kpm")), .attn_mask = at("mha_a.am")};
  nn::AttentionOutput fused = mha(x, x, x, call);  // the fused path
  check_close(fused.output, at("mha_a.y"));
  CHECK_FALSE(fused.weights.defined());
  call.need_weights = true;
  nn::AttentionOutput r = mha(x, x, x, call);  // the unfused path, with the averaged weights
  check_close(r.output, at("mha_a.y"));
  check_close(r.weights, at("mha_a.w"));
  Tensor loss = (fused.output * ramp(fused.output.shape())).sum();
  std::vector<Tensor> g = autograd::grad({loss}, {x, mha.in_proj_weight, mha.out_proj.bias});
  check_close(g[0], at("mha_a.grad.x"), 1e-11);
  check_close(g[1], at("mha_a.grad.in_proj_weight"), 1e-11);
  check_close(g[2], at("mha_a.grad.out_proj.bias"), 1e-11);
}

TEST_CASE("MultiheadAttention cross-attention, batch_first, per-head masks matches PyTorch", "[attention][modules]") {
  nn::MultiheadAttention mha(8, 2, {.batch_first = true});
  load_weights(mha, "mha_b");
  Tensor q = leaf("mha_b.q"), k = leaf("mha_b.k"), v = leaf("mha_b.v");
  Tensor am = as_bool(at("mha_b.am"));
  nn::AttentionOutput r = mha(q, k, v, {.attn_mask = am, .need_weights = true, .average_attn_weights = false});
  check_close(r.output, at("mha_b.y"));
  check_close(r.weights, at("mha_b.w"));
  Tensor y = mha(q, k, v, {.attn_mask = am}).output;
  check_close(y, at("mha_b.y"));
  std::vector<Tensor> g = autograd::grad({(y * ramp(y.shape())).sum()}, {q, k, v});
  check_close(g[0], at("mha_b.grad.q"), 1e-11);
  check_close(g[1], at("mha_b.grad.k"), 1e-11);
  check_close(g[2], at("mha_b.grad.v"), 1e-11);
}

TEST_CASE("TransformerEncoderLayer post-norm with a key padding mask matches PyTorch", "[attention][modules]") {
  nn::TransformerEncoderLayer enc(8, 2, {.dim_feedforward = 16, .dropout = 0.0, .batch_first = true});
  load_weights(enc, "enc_post");
  Tensor x = leaf("enc_post.x");
  Tensor y = enc(x, {.src_key_padding_mask = as_bool(at("enc_post.kpm"))});
  check_close(y, at("enc_post.y"));
  std::vector<Tensor> g =
      autograd::grad({(y * ramp(y.shape())).sum()}, {x, enc.linear1.weight, enc.norm1.weight});
  check_close(g[0], at("enc_post.grad.x"), 1e-11);
  check_close(g[1], at("enc_post.grad.linear1.weight"), 1e-11);
  check_close(g[2], at("enc_post.grad.norm1.weight"), 1e-11);
}

TEST_CASE("TransformerEncoderLayer pre-norm, gelu, causal matches PyTorch", "[attention][modules]") {
  nn::TransformerEncoderLayer enc(8, 2, {.dim_feedforward = 16, .dropout = 0.0, .activation = "gelu",
                                         .norm_first = true});
  load_weights(enc, "enc_pre");
  Tensor x = leaf("enc_pre.x");
  Tensor causal = logical_not(tril(ones({6, 6}, {.dtype = DType::boolean})));  // true: masked (PyTorch's MHA)
  Tensor y = enc(x, {.src_mask = causal});
  check_close(y, at("enc_pre.y"));
  check_close(enc(x, {.is_causal = true}), at("enc_pre.y"));  // the same through SDPA's is_causal
  std::vector<Tensor> g = autograd::grad({(y * ramp(y.shape())).sum()}, {x, enc.self_attn.in_proj_weight});
  check_close(g[0], at("enc_pre.grad.x"), 1e-11);
  check_close(g[1], at("enc_pre.grad.self_attn.in_proj_weight"), 1e-11);
}

TEST_CASE("attention modules: dropout in training only, unbatched inputs, errors", "[attention][modules]") {
  manual_seed(9);
  nn::TransformerEncoderLayer enc(16, 4, {.dim_feedforward = 32, .dropout = 0.5, .batch_first = true});
  Tensor x = randn({2, 7, 16});
  enc.eval();
  Tensor a = enc(x), b = enc(x);
  CHECK((a - b).abs().max().item<float>() == 0);
  enc.train();
  CHECK((enc(x) - a).abs().max().item<float>() > 1e-3);
  nn::MultiheadAttention mha(16, 4);
  Tensor u = randn({7, 16});
  Tensor yu = mha(u, u, u).output;
  Tensor yb = mha(u.unsqueeze(1), u.unsqueeze(1), u.unsqueeze(1)).output;  // [L, 1, E]
  CHECK(yu.shape() == Dims{7, 16});
  CHECK((yu - yb.squeeze(1)).abs().max().item<float>() < 1e-6);
  CHECK_THROWS_WITH(nn::MultiheadAttention(10, 3), Catch::Contains("dividing embed_dim"));
  CHECK_THROWS_WITH(mha(randn({7, 2, 15}), randn({7, 2, 15}), randn({7, 2, 15})),
                    Catch::Contains("MultiheadAttention") && Catch::Contains("[7, 2, 15]"));
  CHECK_THROWS_WITH(mha(u, u, u, {.key_padding_mask = ones({5}, {.dtype = DType::boolean})}),
                    Catch::Contains("key_padding_mask"));
  CHECK_THROWS_WITH(nn::TransformerEncoderLayer(8, 2, {.activation = "tanh"}), Catch::Contains("activation"));
}

// Under autocast the projections give bf16 q, k, v and MultiheadAttention adds a float mask
// to the padding mask's -inf; scaled_dot_product_attention casts q, k, v and a float mask by
// one policy (autocast_attention: f32 on the CPU), so the mask always comes in q's dtype
TEST_CASE("MultiheadAttention with a float mask runs under autocast, close to f32", "[attention][modules][autocast]") {
  manual_seed(31);
  nn::MultiheadAttention mha(32, 4, {.batch_first = true});
  Tensor x = randn({2, 7, 32});
  Tensor bias = randn({7, 7}) * 0.5;
  Tensor keep = gt(rand({2, 7}), 0.2);
  keep = logical_or(keep, lt(arange(0, 7, 1), 1.0).reshape({1, 7}));
  for (bool padding : {false, true}) {
    INFO((padding ? "with a key padding mask" : "float mask alone"));
    nn::AttentionCall call{.attn_mask = bias, .need_weights = false};
    if (padding) call.key_padding_mask = logical_not(keep);
    Tensor want = mha(x, x, x, call).output;
    Tensor got;
    {
      AutocastGuard amp({.device = DeviceType::CPU, .dtype = DType::bf16});
      got = mha(x, x, x, call).output;
    }
    const double scale = want.abs().max().item<double>();
    CHECK((got.to(DType::f32) - want).abs().max().item<double>() <= 3e-2 * scale);
  }
}
