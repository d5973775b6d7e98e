// In-place ops on the tape, as PyTorch records them. An in-place op on a tensor that
// requires grad, or with an operand that does, under grad mode computes its result on the
// tape, writes it into the tensor and makes the result's node the tensor's history
// (PyTorch's rebase_history); through a view, the view's root gets a node that puts the
// new values into the view's elements (PyTorch's CopySlices) and the view is remade from
// the root. When nothing requires grad the op runs its one-pass kernel and records
// nothing. Not for users: the in-place methods of Tensor are built on run_inplace.
#pragma once
#include <initializer_list>

#include "op_support.h"

namespace reel {

// Marks `view`, just made from `of` by a differentiable view op, as a view of of's root.
void mark_view(Tensor& view, const Tensor& of);

// Remakes the grad_fn of a view whose root was rewritten in place since (TensorImpl::
// stale_view): a view node of the root's new history. Ops call it through make_node.
void refresh_view(const Tensor& t);

// The checks every in-place op makes before writing, recorded or not: a defined tensor;
// under grad mode no leaf that requires grad; no two elements at one address (an
// expand), unless the op only fills (`fills`: fill_, zero_, the random fills).
void check_inplace(const OpScope& op, const Tensor& self, bool fills = false);
// And before a recorded write: no view of a leaf that requires grad (PyTorch's rule).
void check_view_of_leaf(const OpScope& op, const Tensor& self);

// Whether the op must be recorded: grad mode on and self or an operand requires grad.
bool inplace_records(const Tensor& self, std::initializer_list<const Tensor*> operands);

// The recorded path: `result`, computed on the tape from self and the operands since the
// tape's seq `first`, is written into self and becomes self's history (its root's, for a
// view). A saved copy of self's old value (the "original self" a rule reads) is kept
// apart from the write; an operand that aliases self stays checked by its version.
Tensor& rebase_inplace(const OpScope& op, Tensor& self, Tensor result, uint64_t first,
                       std::initializer_list<const Tensor*> operands);

uint64_t tape_next_seq();

// add_'s one pass: self += alpha other, other broadcast to self's shape (checked here).
void add_scaled_unrecorded(const OpScope& op, Tensor& self, const Tensor& other, double alpha);

// An in-place op: `fast()` writes into self when nothing is recorded (one pass, the
// storage's version bumped here); otherwise `compute()` gives the out-of-place result on
// the tape, and rebase_inplace writes it and rewrites the history.
template <typename Fast, typename Compute>
Tensor& run_inplace(const char* name, Site site, Tensor& self, std::initializer_list<const Tensor*> operands,
                    Fast fast, Compute compute, bool fills = false) {
  OpScope op(name, site);
  check_inplace(op, self, fills);
  for (const Tensor* t : operands) check_defined(op, *t, "an operand");
  if (!inplace_records(self, operands)) {
    fast(op);
    self.storage()->note_write(name, op.site.file, op.site.line);
    return self;
  }
  check_view_of_leaf(op, self);
  uint64_t first = tape_next_seq();
  if (self.impl()->stale_view()) refresh_view(self);
  Tensor result = compute(op);
  return rebase_inplace(op, self, std::move(result), first, operands);
}

}  // namespace reel
