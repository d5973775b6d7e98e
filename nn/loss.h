// Losses as callable objects holding their options, thin wrappers over the fused
// loss ops of autograd/ops.h (which are the functional forms).
//
//   nn::CrossEntropyLoss criterion({.label_smoothing = 0.1});
//   Tensor loss = criterion(logits, labels);   // logits [N, C], labels i64 [N]
#pragma once
#include "../autograd/ops.h"

namespace reel::nn {

// Softmax cross-entropy on logits [N, C] and i64 labels [N] -> [] (or [N] with
// Reduction::none), or logits [N, C, d1, ...] and labels [N, d1, ...]. Labels equal to
// ignore_index add nothing (and do not count in the mean); options.weight weighs classes.
class CrossEntropyLoss {
 public:
  explicit CrossEntropyLoss(CrossEntropyOptions opt = {}) : options(opt) {}
  Tensor operator()(const Tensor& logits, const Tensor& labels, Site site = {}) const {
    return cross_entropy(logits, labels, options, site);
  }
  CrossEntropyOptions options;
};

// Negative log-likelihood on log-probabilities [N, C] and i64 labels [N].
class NLLLoss {
 public:
  explicit NLLLoss(CrossEntropyOptions opt = {}) : options(opt) {}
  Tensor operator()(const Tensor& log_probs, const Tensor& labels, Site site = {}) const {
    return nll_loss(log_probs, labels, options, site);
  }
  CrossEntropyOptions options;
};

// (input - target)^2, reduced; input and target of one shape.
class MSELoss {
 public:
  explicit MSELoss(Reduction reduction = Reduction::mean) : reduction(reduction) {}
  Tensor operator()(const Tensor& input, const Tensor& target, Site site = {}) const {
    return mse_loss(input, target, reduction, site);
  }
  Reduction reduction;
};

// Binary cross-entropy of sigmoid(logits) against targets in [0, 1], computed stably
// from the logits; logits and target of one shape. Optional weight (broadcast to the
// input) and pos_weight (per class, over the last dim), as PyTorch's.
//   nn::BCEWithLogitsLoss criterion({.pos_weight = full({C}, 3.0)});
class BCEWithLogitsLoss {
 public:
  explicit BCEWithLogitsLoss(Reduction reduction = Reduction::mean) : options{.reduction = reduction} {}
  explicit BCEWithLogitsLoss(BCEWithLogitsOptions opt) : options(std::move(opt)) {}
  Tensor operator()(const Tensor& logits, const Tensor& target, Site site = {}) const {
    return binary_cross_entropy_with_logits(logits, target, options, site);
  }
  BCEWithLogitsOptions options;
};

}  // namespace reel::nn
