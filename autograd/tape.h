// The tape: this thread's live entries in execution order. backward() walks it in
// reverse from the loss; entries die with the tensors that need them, so a loop
// without a no-grad guard keeps memory flat. Two threads have two tapes.
#pragma once
#include <atomic>
#include <iosfwd>
#include <string>
#include <vector>

#include "node.h"

namespace reel {

class Tape : public RefCounted {
 public:
  void append(Node* n);  // links n at the end, assigns its seq
  void remove(Node* n);  // unlinks n (called by ~Node, from any thread)
  size_t size() const { return size_.load(std::memory_order_relaxed); }
  std::vector<Ref<Node>> entries() const;  // the live entries, oldest first
  std::vector<Ref<Node>> entries_since(uint64_t seq) const;  // those with seq >= seq, newest first
  uint64_t next_seq() const { return next_seq_; }  // the seq the next entry will get

 private:
  void lock() const;
  void unlock() const;
  mutable std::atomic<bool> busy_{false};
  Node* head_ = nullptr;
  Node* tail_ = nullptr;
  std::atomic<size_t> size_{0};
  uint64_t next_seq_ = 1;
};
inline void ref_inc(Tape* t) { t->refs.fetch_add(1, std::memory_order_relaxed); }
inline void ref_dec(Tape* t) {
  if (t->refs.fetch_sub(1, std::memory_order_acq_rel) == 1) delete t;
}

Tape& this_thread_tape();

namespace autograd {

// Live entries on this thread's tape.
size_t tape_size();
std::vector<Ref<Node>> tape_entries();
// One line per live entry: index, op, input -> output shapes, dtype, device, call site.
std::string tape_str();
void print_tape(std::ostream& os);

// Gradients of `outputs` w.r.t. `inputs`, returned rather than accumulated into
// .grad(). `grad_outputs` default to ones for one-element outputs. With
// create_graph the backward itself is recorded, for higher-order gradients.
struct GradOptions {
  bool retain_graph = false;
  bool create_graph = false;
  bool allow_unused = false;  // an input the outputs do not depend on gets an undefined tensor
};
std::vector<Tensor> grad(const std::vector<Tensor>& outputs, const std::vector<Tensor>& inputs,
                         const std::vector<Tensor>& grad_outputs = {}, GradOptions opt = {}, Site site = {});

// backward() for several roots at once.
void backward(const std::vector<Tensor>& roots, const std::vector<Tensor>& grad_roots = {},
              bool retain_graph = false, Site site = {});

}  // namespace autograd
}  // namespace reel
