// The tape, nodes, grad mode and the op-support helpers.
#include "tape.h"

#include <new>
#include <ostream>
#include <sstream>
#include <string_view>
#include <thread>

#include "inplace.h"
#include "op_support.h"

namespace reel {

// ---- grad mode
namespace {
thread_local bool tls_grad_enabled = true;
}
bool grad_enabled() { return tls_grad_enabled; }
void set_grad_enabled(bool on) { tls_grad_enabled = on; }

// ---- tape
void Tape::lock() const {
  while (busy_.exchange(true, std::memory_order_acquire)) std::this_thread::yield();
}
void Tape::unlock() const { busy_.store(false, std::memory_order_release); }

void Tape::append(Node* n) {
  lock();
  n->seq = next_seq_++;
  n->prev = tail_;
  n->next = nullptr;
  if (tail_) tail_->next = n; else head_ = n;
  tail_ = n;
  size_.fetch_add(1, std::memory_order_relaxed);
  unlock();
}

void Tape::remove(Node* n) {
  lock();
  if (n->prev) n->prev->next = n->next; else head_ = n->next;
  if (n->next) n->next->prev = n->prev; else tail_ = n->prev;
  size_.fetch_sub(1, std::memory_order_relaxed);
  unlock();
}

namespace {
// Takes a reference only while the count is above zero: a node at zero is being destroyed.
void take_live(std::vector<Ref<Node>>& out, Node* n) {
  int32_t r = n->refs.load(std::memory_order_relaxed);
  while (r > 0 && !n->refs.compare_exchange_weak(r, r + 1, std::memory_order_acq_rel)) {}
  if (r > 0) {
    out.emplace_back(n);
    ref_dec(n);
  }
}
}  // namespace

std::vector<Ref<Node>> Tape::entries() const {
  std::vector<Ref<Node>> out;
  lock();
  out.reserve(size());
  for (Node* n = head_; n; n = n->next) take_live(out, n);
  unlock();
  return out;
}

std::vector<Ref<Node>> Tape::entries_since(uint64_t seq) const {
  std::vector<Ref<Node>> out;
  lock();
  for (Node* n = tail_; n && n->seq >= seq; n = n->prev) take_live(out, n);
  unlock();
  return out;
}

namespace {
// The tape outlives its thread while nodes made on it are alive elsewhere.
thread_local Ref<Tape> tls_tape = make_ref<Tape>();
}
Tape& this_thread_tape() { return *tls_tape; }

// ---- nodes
namespace {
// Nodes come and go in bursts (a step's tape, freed by its backward), a pattern glibc's
// bins serve poorly (W5 spent its time consolidating chunks). Each thread keeps the blocks
// of the nodes it freed for the next ones it makes. Under AddressSanitizer the blocks go
// back to malloc, so a use after free is still caught.
#if defined(__SANITIZE_ADDRESS__)
void* node_block() { return ::operator new(sizeof(Node)); }
void release_node_block(void* p) { ::operator delete(p); }
#else
thread_local bool tls_node_blocks_gone = false;  // trivially destructible: valid to the thread's end
struct NodeBlocks {
  std::vector<void*> free;
  ~NodeBlocks() {
    tls_node_blocks_gone = true;
    for (void* p : free) ::operator delete(p);
  }
};
thread_local NodeBlocks tls_node_blocks;
constexpr size_t kKeptNodeBlocks = 1 << 14;
void* node_block() {
  if (!tls_node_blocks_gone) {
    std::vector<void*>& free = tls_node_blocks.free;
    if (!free.empty()) {
      void* p = free.back();
      free.pop_back();
      return p;
    }
  }
  return ::operator new(sizeof(Node));
}
void release_node_block(void* p) {
  if (!tls_node_blocks_gone && tls_node_blocks.free.size() < kKeptNodeBlocks) {
    tls_node_blocks.free.push_back(p);
    return;
  }
  ::operator delete(p);
}
#endif
}  // namespace

void ref_inc(Node* n) { n->refs.fetch_add(1, std::memory_order_relaxed); }
void ref_dec(Node* n) {
  if (n->refs.fetch_sub(1, std::memory_order_acq_rel) == 1) {
    n->~Node();
    release_node_block(n);
  }
}

Node::~Node() {
  if (tape) {
    tape->remove(this);
    ref_dec(tape);
  }
  // Long chains: release inputs iteratively so a 100k-op graph cannot overflow the stack.
  std::vector<Ref<Node>> stack;
  for (Edge& e : edges)
    if (e.node && e.node->refs.load() == 1) stack.push_back(std::move(e.node));
  edges.clear();
  while (!stack.empty()) {
    Ref<Node> n = std::move(stack.back());
    stack.pop_back();
    for (Edge& e : n->edges)
      if (e.node && e.node->refs.load() == 1) stack.push_back(std::move(e.node));
    n->edges.clear();
  }
}

void Node::save(const Tensor& t) {
  if (!t.defined()) {
    saved.push_back({});
    return;
  }
  // An output saved with its grad_fn would point back at this node: a cycle.
  if (t.grad_fn() == this) {
    saved.push_back({t.detach(), t.storage()->version(), int32_t(t.impl()->output_nr)});
    return;
  }
  saved.push_back({t, t.storage()->version()});
}

Tensor Node::saved_tensor(size_t i) const {
  if (released)
    throw Error(fmt::format(
        "backward: {} at {} was already used by a backward pass{} and its saved values were freed; "
        "call backward(..., retain_graph=true) the first time to go through it twice",
        op, site.str(), released_by.empty() ? "" : " (" + released_by + ")"));
  const SavedTensor& s = saved[i];
  if (s.tensor.defined() && s.tensor.storage()->version() != s.version) {
    const Storage& st = *s.tensor.storage();
    std::string by = st.last_writer() ? fmt::format(" by {} at {}", st.last_writer(),
                                                    Site(st.last_writer_file(), st.last_writer_line()).str())
                                      : std::string();
    throw Error(fmt::format(
        "backward: a tensor {} saved by {} at {} was modified in place{} after the forward pass read it "
        "(version {} now, {} when saved); clone() it before writing, or write out of place",
        s.tensor.shape().str(), inplace ? inplace : op, site.str(), by, st.version(), s.version));
  }
  if (s.output_nr < 0 || !grad_enabled()) return s.tensor;
  // The link is made only for the length of a create_graph backward: no cycle is kept.
  Tensor linked = s.tensor.detach();
  linked.impl()->requires_grad = true;
  linked.impl()->grad_fn = Ref<Node>(const_cast<Node*>(this));
  linked.impl()->output_nr = uint32_t(s.output_nr);
  return linked;
}

std::string Node::describe() const {
  std::string in, out;
  for (size_t i = 0; i < inputs.size(); ++i) in += (i ? " " : "") + inputs[i].shape.str();
  for (size_t i = 0; i < outputs.size(); ++i) out += (i ? " " : "") + outputs[i].shape.str();
  std::string dev = outputs.empty() ? "" : outputs[0].device.str();
  std::string dt = outputs.empty() ? "" : dtype_name(outputs[0].dtype);
  // an in-place op shows under its own name; through a view, as the write into the root
  std::string name = !inplace                        ? std::string(op)
                     : std::string_view(op) == "copy_slices" ? fmt::format("{} (through a view)", inplace)
                                                             : std::string(inplace);
  std::string args = args_str();
  return fmt::format("{} {} -> {} {} {}{}{} at {}{}", name, in, out, dt, dev, args.empty() ? "" : " ", args, site.str(),
                     module ? " in " + module->str() : std::string());
}

// ---- recording
namespace {
Node* make_node(const OpScope& op, BackwardFn fn, const Tensor* const* inputs, size_t n_in,
                Tensor* const* outputs, size_t n_out) {
  Node* node = new (node_block()) Node();
  node->op = op.op;
  node->site = op.site;
  node->module = current_module();
  node->backward = fn;
  node->edges.resize(n_in);
  node->inputs.resize(n_in);
  for (size_t i = 0; i < n_in; ++i) {
    const Tensor& t = *inputs[i];
    if (!t.defined()) continue;
    node->inputs[i] = {t.shape(), t.dtype(), t.device(), true};
    if (!t.requires_grad()) continue;
    if (t.impl()->stale_view()) [[unlikely]] refresh_view(t);  // its root was written in place since
    if (t.grad_fn()) {
      node->edges[i].node = t.impl()->grad_fn;
      node->edges[i].output_nr = t.impl()->output_nr;
    } else {
      node->edges[i].leaf = Ref<TensorImpl>(t.impl());
    }
  }
  node->outputs.resize(n_out);
  Ref<Node> owner(node);
  for (size_t i = 0; i < n_out; ++i) {
    Tensor& t = *outputs[i];
    node->outputs[i] = {t.shape(), t.dtype(), t.device(), true};
    TensorImpl* impl = t.impl();
    impl->requires_grad = true;
    impl->grad_fn = owner;
    impl->output_nr = uint32_t(i);
  }
  Tape& tape = this_thread_tape();
  ref_inc(&tape);
  node->tape = &tape;
  tape.append(node);
  return node;  // owned by its outputs
}
}  // namespace

// Every differentiable op calls record(), recorded or not: the debug tools learn the
// op's inputs and outputs here (OpScope::frame is set only while a tool watches).
Node* record(const OpScope& op, BackwardFn fn, std::initializer_list<const Tensor*> inputs,
             std::initializer_list<Tensor*> outputs) {
  Node* n = should_record(inputs) ? make_node(op, fn, inputs.begin(), inputs.size(), outputs.begin(), outputs.size())
                                  : nullptr;
  if (op.frame) [[unlikely]] debug_op_io(op.frame, inputs.begin(), inputs.size(), outputs.begin(), outputs.size(), n);
  return n;
}

Node* record(const OpScope& op, BackwardFn fn, const std::vector<const Tensor*>& inputs,
             const std::vector<Tensor*>& outputs) {
  bool any = false;
  if (grad_enabled())
    for (const Tensor* t : inputs) any = any || (t->defined() && t->requires_grad());
  Node* n = any ? make_node(op, fn, inputs.data(), inputs.size(), outputs.data(), outputs.size()) : nullptr;
  if (op.frame) [[unlikely]] debug_op_io(op.frame, inputs.data(), inputs.size(), outputs.data(), outputs.size(), n);
  return n;
}

// ---- helpers
Tensor new_tensor(const Dims& shape, DType dtype, Device device) {
  return new_tensor(shape, dtype, device, contiguous_strides(shape));
}

Tensor new_tensor(const Dims& shape, DType dtype, Device device, const Dims& strides) {
  // Output shapes come from checked input shapes, but a product of them (an outer
  // broadcast, a matmul over an empty inner dim) can still overflow.
  check_shape("allocate", shape, dtype_size(dtype), Site{nullptr, 0});
  auto impl = make_ref<TensorImpl>();
  impl->shape = shape;
  impl->strides = strides;
  impl->dtype = dtype;
  impl->storage = make_ref<Storage>(size_t(numel_of(shape)) * size_t(dtype_size(dtype)), device);
  Tensor t(std::move(impl));
  if (debug_tools_on()) [[unlikely]] debug_alloc(t);  // the profiler counts bytes per op
  return t;
}

Tensor new_in_layout_of(const Tensor& like, const Dims& shape, DType dtype) {
  auto takes_it = [](const Backend& be) {
    return be.channels_last(DType::bf16) || be.channels_last(DType::f16) || be.channels_last(DType::f32);
  };
  const bool cl = shape.size() == 4 && is_channels_last(like.shape(), like.strides()) && takes_it(backend_of(like));
  return new_tensor(shape, dtype, like.device(), cl ? channels_last_strides(shape) : contiguous_strides(shape));
}

Tensor make_view(const Tensor& base, const Dims& shape, const Dims& strides, int64_t offset) {
  return storage_view(base, shape, strides, offset);
}

Tensor expand_view(const Tensor& base, const Dims& shape) {
  if (base.shape() == shape) return base;
  int n = shape.size(), off = n - base.dim();
  Dims strides = Dims::filled(n, 0);
  for (int i = 0; i < base.dim(); ++i)
    strides[off + i] = base.shape()[i] == 1 && shape[off + i] != 1 ? 0 : base.strides()[i];
  return make_view(base, shape, strides, base.offset());
}

Tensor cast(const Tensor& base, DType dtype) {
  if (base.dtype() == dtype) return base;
  Tensor out = new_in_layout_of(base, base.shape(), dtype);  // a flat conversion, where channels-last
  if (out.numel()) backend_of(base).copy(out, base);
  return out;
}

std::string describe(const Tensor& t) {
  if (!t.defined()) return "undefined";
  return fmt::format("{} {} {}", t.shape().str(), dtype_name(t.dtype()), t.device().str());
}

void check_defined(const OpScope& op, const Tensor& t, const char* what) {
  if (!t.defined()) fail(op.op, fmt::format("{} is an undefined tensor", what), op.site);
}
void check_same_device(const OpScope& op, const Tensor& a, const Tensor& b) {
  if (!(a.device() == b.device()))
    fail(op.op,
         fmt::format("expected all tensors on one device, got {} on {} and {} on {}; move one with .to()",
                     a.shape().str(), a.device().str(), b.shape().str(), b.device().str()),
         op.site);
}
void check_floating(const OpScope& op, const Tensor& t, const char* what) {
  if (!t.is_floating_point())
    fail(op.op, fmt::format("expected {} to be floating point, got {}", what, describe(t)), op.site);
}
void check_dim(const OpScope& op, const Tensor& t, int expected, const char* what) {
  if (t.dim() != expected)
    fail(op.op, fmt::format("expected {} to have {} dims, got shape {}", what, expected, t.shape().str()), op.site);
}
void check_dtype(const OpScope& op, const Tensor& t, DType expected, const char* what) {
  if (t.dtype() != expected)
    fail(op.op, fmt::format("expected {} of dtype {}, got {}", what, dtype_name(expected), describe(t)), op.site);
}
void check_nonempty(const OpScope& op, const Tensor& t, const char* what) {
  if (t.numel() == 0) fail(op.op, fmt::format("expected a non-empty {}, got shape {}", what, t.shape().str()), op.site);
}

// ---- introspection
namespace autograd {
size_t tape_size() { return this_thread_tape().size(); }
std::vector<Ref<Node>> tape_entries() { return this_thread_tape().entries(); }
std::string tape_str() {
  std::ostringstream os;
  print_tape(os);
  return os.str();
}
void print_tape(std::ostream& os) {
  auto entries = tape_entries();
  size_t i = 0;
  for (auto& n : entries) os << fmt::format("#{:<4} {}\n", i++, n->describe());
}
}  // namespace autograd

}  // namespace reel
