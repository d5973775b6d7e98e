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

// KLDivLoss's reductions: PyTorch's 'mean' averages over every element; 'batchmean'
// divides the sum by the batch size (input's first dim), the mathematically right KL.
enum class KLDivReduction : uint8_t { none, mean, sum, batchmean };

struct SmoothL1Options {
  Reduction reduction = Reduction::mean;
  double beta = 1.0;  // >= 0; 0 gives the L1 loss
};
struct HuberOptions {
  Reduction reduction = Reduction::mean;
  double delta = 1.0;  // > 0
};
struct KLDivOptions {
  KLDivReduction reduction = KLDivReduction::mean;
  bool log_target = false;  // the target holds log-probabilities
};
struct BCEOptions {
  Reduction reduction = Reduction::mean;
  Tensor weight = {};  // rescales each element's loss; broadcast to the input's shape
};
struct CosineEmbeddingOptions {
  Reduction reduction = Reduction::mean;
  double margin = 0.0;  // in [-1, 1]
};

namespace functional {

// |x - y|
Tensor l1_loss(const Tensor& input, const Tensor& target, Reduction reduction = Reduction::mean, Site site = {});
// d = |x - y|: 0.5 d^2 / beta where d < beta, else d - 0.5 beta
Tensor smooth_l1_loss(const Tensor& input, const Tensor& target, SmoothL1Options opt = {}, Site site = {});
// d = |x - y|: 0.5 d^2 where d < delta, else delta (d - 0.5 delta)
Tensor huber_loss(const Tensor& input, const Tensor& target, HuberOptions opt = {}, Site site = {});
// input: log-probabilities. target t (probabilities): t (log t - input), 0 where t = 0;
// log_target: e^t (t - input)
Tensor kl_div(const Tensor& input, const Tensor& target, KLDivOptions opt = {}, Site site = {});
// input: probabilities in [0, 1] (others refused on the CPU, as PyTorch; NaN on the GPU,
// docs/cuda.md). -w (t log x + (1 - t) log(1 - x)), each log clamped
// at -100 (as PyTorch, so a saturated prediction gives a finite loss)
Tensor binary_cross_entropy(const Tensor& input, const Tensor& target, BCEOptions opt = {}, Site site = {});
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
