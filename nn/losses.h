// The regression, divergence and embedding losses of torch.nn, as functional forms
// (nn::functional, PyTorch's F.*) and as callable objects holding their options.
// Input and target have one shape and dtype (no silent broadcast); the reductions
// are PyTorch's: none (per element), mean (over every element), sum.
//
//   namespace F = reel::nn::functional;
//   Tensor l = F::smooth_l1_loss(pred, target, {.beta = 0.5});
//   nn::KLDivLoss kl({.reduction = nn::KLDivReduction::batchmean});
//   Tensor d = kl(log_softmax(logits, 1), probs);
#pragma once
#include <optional>
#include <utility>

#include "../autograd/ops.h"

namespace reel::nn {

// smooth_l1_loss, kl_div and binary_cross_entropy, whose gradients are written out, are
// autograd ops (autograd/ops.h, autograd/ops_loss.cpp); their options are named here too.
using reel::BCEOptions;
using reel::KLDivOptions;
using reel::KLDivReduction;
using reel::SmoothL1Options;

struct HuberOptions {
  Reduction reduction = Reduction::mean;
  double delta = 1.0;  // > 0
};
struct CosineEmbeddingOptions {
  Reduction reduction = Reduction::mean;
  double margin = 0.0;  // in [-1, 1]
};

namespace functional {

// |x - y|
Tensor l1_loss(const Tensor& input, const Tensor& target, Reduction reduction = Reduction::mean, Site site = {});
// d = |x - y|: 0.5 d^2 where d < delta, else delta (d - 0.5 delta)
Tensor huber_loss(const Tensor& input, const Tensor& target, HuberOptions opt = {}, Site site = {});
using reel::binary_cross_entropy;  // (autograd/ops.h)
using reel::kl_div;
using reel::smooth_l1_loss;
// x1, x2 [N, D] (or [D]), y [N] (or []) of +1 / -1: 1 - cos(x1, x2) where y = 1,
// max(0, cos(x1, x2) - margin) where y = -1; cos = <x1, x2> / sqrt((|x1|^2 + 1e-12)(|x2|^2 + 1e-12))
Tensor cosine_embedding_loss(const Tensor& x1, const Tensor& x2, const Tensor& y, CosineEmbeddingOptions opt = {},
                             Site site = {});

}  // namespace functional

class L1Loss {
 public:
  explicit L1Loss(Reduction reduction = Reduction::mean) : reduction(reduction) {}
  Tensor operator()(const Tensor& input, const Tensor& target, Site site = {}) const {
    return functional::l1_loss(input, target, reduction, site);
  }
  Reduction reduction;
};

class SmoothL1Loss {
 public:
  explicit SmoothL1Loss(SmoothL1Options opt = {}) : options(opt) {}
  Tensor operator()(const Tensor& input, const Tensor& target, Site site = {}) const {
    return functional::smooth_l1_loss(input, target, options, site);
  }
  SmoothL1Options options;
};

class HuberLoss {
 public:
  explicit HuberLoss(HuberOptions opt = {}) : options(opt) {}
  Tensor operator()(const Tensor& input, const Tensor& target, Site site = {}) const {
    return functional::huber_loss(input, target, options, site);
  }
  HuberOptions options;
};

class KLDivLoss {
 public:
  explicit KLDivLoss(KLDivOptions opt = {}) : options(opt) {}
  Tensor operator()(const Tensor& input, const Tensor& target, Site site = {}) const {
    return functional::kl_div(input, target, options, site);
  }
  KLDivOptions options;
};

class BCELoss {
 public:
  explicit BCELoss(BCEOptions opt = {}) : options(std::move(opt)) {}
  Tensor operator()(const Tensor& input, const Tensor& target, Site site = {}) const {
    return functional::binary_cross_entropy(input, target, options, site);
  }
  BCEOptions options;
};

class CosineEmbeddingLoss {
 public:
  explicit CosineEmbeddingLoss(CosineEmbeddingOptions opt = {}) : options(opt) {}
  Tensor operator()(const Tensor& x1, const Tensor& x2, const Tensor& y, Site site = {}) const {
    return functional::cosine_embedding_loss(x1, x2, y, options, site);
  }
  CosineEmbeddingOptions options;
};

}  // namespace reel::nn
