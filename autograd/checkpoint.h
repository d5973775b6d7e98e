// Activation checkpointing (torch.utils.checkpoint): runs fn without recording its
// inside, keeping only its inputs; backward runs fn again, with recording on and the
// random stream put back where the forward found it (so dropout draws the same
// masks), and differentiates that. Trades one more forward for the memory of every
// activation inside fn.
//
//   Tensor h = autograd::checkpoint([&](const Tensor& x) { return block(x); }, x);
//   auto outs = autograd::checkpoint([&](const std::vector<Tensor>& v) { return std::vector{f(v[0], v[1])}; }, {a, b});
//
// fn must compute the same thing both times (no state it changes between the runs,
// as PyTorch's). Tensors fn reads from outside (a module's weights) get their
// gradients accumulated in .grad() by the nested backward, even under autograd::grad. A create_graph backward through a checkpoint throws Error (PyTorch's
// reentrant checkpoint does not support it either).
#pragma once
#include <functional>
#include <vector>

#include "../tensor/tensor.h"

namespace reel::autograd {

using CheckpointFn = std::function<std::vector<Tensor>(const std::vector<Tensor>&)>;
std::vector<Tensor> checkpoint(CheckpointFn fn, const std::vector<Tensor>& inputs, Site site = {});
Tensor checkpoint(const std::function<Tensor(const Tensor&)>& fn, const Tensor& input, Site site = {});

}  // namespace reel::autograd
