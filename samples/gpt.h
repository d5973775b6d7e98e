// A character-level GPT (nanoGPT's model): token and position embeddings, pre-norm
// transformer blocks (nn::TransformerEncoderLayer with norm_first, GELU, causal
// self-attention through the fused scaled_dot_product_attention), a final LayerNorm and
// a linear head to the vocabulary. Shared by samples/train_gpt.cpp and bench/w12_gpt.cpp.
//
//   gpt::Config cfg{.vocab = 96};             // 6 layers, 6 heads, 384 features, block 256
//   gpt::GPT model(cfg);
//   Tensor logits = model(idx);                // idx i64 [B, T <= block] -> [B, T, vocab]
#pragma once
#include <reel/reel.h>

#include <cstdint>

namespace gpt {

struct Config {
  int64_t vocab = 0;
  int64_t block = 256;  // the longest context
  int64_t layers = 6, heads = 6, embd = 384;
  double dropout = 0.2;
};

class GPT : public reel::nn::Module {
 public:
  explicit GPT(const Config& c)
      : cfg(c),
        wte(c.vocab, c.embd),
        wpe(c.block, c.embd),
        drop(c.dropout),
        ln_f(reel::Dims{c.embd}),
        lm_head(c.embd, c.vocab, {.bias = false}) {
    for (int64_t l = 0; l < c.layers; ++l)
      h.push_back(reel::nn::TransformerEncoderLayer(c.embd, c.heads, {.dim_feedforward = 4 * c.embd,
                                                                      .dropout = c.dropout,
                                                                      .activation = "gelu",
                                                                      .batch_first = true,
                                                                      .norm_first = true}));
    register_module("wte", wte);
    register_module("wpe", wpe);
    register_module("drop", drop);
    register_module("h", h);
    register_module("ln_f", ln_f);
    register_module("lm_head", lm_head);
    // GPT-2's initialisation: N(0, 0.02) weights, zero biases
    for (auto& [name, p] : named_parameters()) {
      if (name.find("norm") != std::string::npos || name.find("ln_f") != std::string::npos) continue;
      if (p.dim() >= 2) reel::nn::init::normal_(p, 0.0, 0.02);
      else reel::nn::init::zeros_(p);
    }
  }

  reel::Tensor forward(const reel::Tensor& idx) override {
    const int64_t T = idx.size(1);
    reel::Tensor pos = reel::arange(0, double(T), 1, {.dtype = reel::DType::i64, .device = idx.device()});
    reel::Tensor x = drop(wte(idx) + wpe(pos));
    for (size_t l = 0; l < h.size(); ++l) x = h.at<reel::nn::TransformerEncoderLayer>(l)(x, {.is_causal = true});
    return lm_head(ln_f(x));
  }

  Config cfg;
  reel::nn::Embedding wte, wpe;
  reel::nn::Dropout drop;
  reel::nn::ModuleList h;
  reel::nn::LayerNorm ln_f;
  reel::nn::Linear lm_head;
};

}  // namespace gpt
