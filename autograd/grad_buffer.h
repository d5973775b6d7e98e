// Where backward writes a leaf's gradient when the leaf has none yet. DistributedDataParallel
// points each parameter at its slot in a bucket, so that a rule which writes that gradient
// with a product of its own (linear's weight: g^T x) writes it into the bucket, and the
// bucket needs no copy of it (PyTorch's reducer copies every gradient in; W4's 13 MB took
// 2.1-2.3 ms of a 2-rank step). Values and bits are those of the plain path: the same
// product, only its destination differs.
#pragma once
#include "../tensor/tensor.h"
#include "node.h"

namespace reel::autograd {

// `buffer`: the leaf's shape, dtype and device, contiguous; undefined: none (as at first).
// The leaf's .grad() then is `buffer` itself after a backward that wrote it there.
void set_grad_buffer(const Tensor& leaf, const Tensor& buffer);
// The leaf's buffer, or undefined.
Tensor grad_buffer(const Tensor& leaf);

namespace internal {
// For a backward rule: the buffer that input `input`'s gradient, of `dtype`, may be written
// into, or undefined. Only in a backward() (not grad(), whose results must not alias a
// bucket), outside create_graph, for a leaf that has no gradient yet.
Tensor grad_buffer_for(const Node& n, size_t input, DType dtype);
}  // namespace internal

}  // namespace reel::autograd
