// Custom autograd functions (function.h): the one tape entry a user op makes, the rule
// that hands its gradients to the user's backward and reads them back by either
// convention (one per argument as libtorch, or one per Tensor argument), and the
// values ctx keeps (IValue).
#include "function.h"

#include <cxxabi.h>

#include <cstdlib>
#include <memory>

#include "op_support.h"

namespace reel::autograd {
namespace detail {

std::string demangle(const char* mangled) {
  int status = 0;
  std::unique_ptr<char, void (*)(void*)> d(abi::__cxa_demangle(mangled, nullptr, nullptr, &status), std::free);
  std::string name = status == 0 && d ? d.get() : mangled;
  // A test's or a program's local class reads better without its anonymous namespace.
  for (std::string anon = "(anonymous namespace)::"; ;) {
    size_t at = name.find(anon);
    if (at == std::string::npos) break;
    name.erase(at, anon.size());
  }
  return name;
}

// Kept by the tape entry (Node::custom): the context, the user's backward, what apply saw.
struct FunctionState : CustomState {
  Context ctx;
  BackwardPtr backward = nullptr;
  FunctionInfo info;
  // Python's custom Function nodes are "<Class>Backward"; the class without its namespaces.
  std::string node_name() const override {
    std::string c = info.class_name;
    size_t colon = c.rfind("::");
    return (colon == std::string::npos ? c : c.substr(colon + 2)) + "Backward";
  }
};

namespace {
// backward's list, read by the conventions of function.h in their order, as one
// gradient per Tensor input (undefined: none). Throws Error naming the class otherwise.
std::vector<Tensor> per_tensor_input(const Node& n, const FunctionInfo& info, std::vector<Tensor> g) {
  const std::vector<bool>& is_tensor = info.arg_is_tensor;
  size_t k = g.size(), n_args = is_tensor.size(), n_tensors = n.edges.size();
  // named with the forward's line (fail() would name backward()'s)
  auto error = [&](const std::string& what) {
    throw Error(fmt::format("{}: {} (at {})", info.class_name, what, n.site.str()));
  };
  if (k == n_tensors) return g;  // one per Tensor argument (also 1. when every argument is a Tensor)
  bool per_argument = k == n_args;
  if (k > n_args) {  // 3.: extras after the last argument, all undefined
    per_argument = true;
    for (size_t i = n_args; i < k; ++i) per_argument = per_argument && !g[i].defined();
    if (per_argument) g.resize(n_args);
  } else if (k < n_args) {  // 4.: trailing arguments that need no gradient left off
    per_argument = true;
    size_t tensors_before = 0;
    for (size_t i = 0; i < k; ++i) tensors_before += is_tensor[i];
    for (size_t i = k, t = tensors_before; i < n_args; ++i) {
      if (!is_tensor[i]) continue;
      if (n.needs_grad(t)) per_argument = false;
      ++t;
    }
    if (per_argument) g.resize(n_args);
  }
  if (!per_argument) {
    std::string expected =
        n_args == n_tensors
            ? fmt::format("{} (one per argument of forward)", n_args)
            : fmt::format("{} (one per argument of forward, an undefined Tensor for each of the {} non-tensor ones) "
                          "or {} (one per Tensor argument)",
                          n_args, n_args - n_tensors, n_tensors);
    error(fmt::format("backward returned {} gradients; expected {}; trailing gradients may be left off only for "
                      "arguments that need none",
                      k, expected));
  }
  std::vector<Tensor> out;
  for (size_t i = 0; i < n_args; ++i) {
    if (is_tensor[i]) {
      out.push_back(std::move(g[i]));
    } else if (g[i].defined()) {
      error(fmt::format("backward returned a defined gradient at position {}, but argument {} of forward is not a "
                        "Tensor; return an undefined Tensor there (or one gradient per Tensor argument)",
                        i, i));
    }
  }
  return out;
}

// The rule of every custom function: call the user's backward, check what it gave.
void function_backward(Node& n, const std::vector<Tensor>& grad_outputs, std::vector<Tensor>& grad_inputs) {
  auto& st = static_cast<FunctionState&>(*n.custom);
  std::vector<Tensor> g = per_tensor_input(n, st.info, st.backward(st.ctx, grad_outputs));
  for (size_t i = 0; i < g.size(); ++i)
    if (n.needs_grad(i)) grad_inputs[i] = std::move(g[i]);
}
}  // namespace

std::vector<Tensor> run_function(FunctionInfo info, const Site& site, const std::vector<const Tensor*>& inputs,
                                 void* forward, ForwardThunk thunk, BackwardPtr backward) {
  const char* name = info.op;
  OpScope op(name, site);
  auto state = std::make_unique<FunctionState>();
  state->info = std::move(info);
  Context& ctx = state->ctx;
  ctx.needs_.resize(inputs.size());
  for (size_t i = 0; i < inputs.size(); ++i)
    ctx.needs_[i] = grad_enabled() && inputs[i]->defined() && inputs[i]->requires_grad();
  std::vector<Tensor> outs;
  {
    NoGradGuard no_grad;  // the user's backward is the rule, not the forward's ops
    outs = thunk(forward, ctx);
  }
  if (outs.empty()) fail(name, "forward returned no tensors", op.site);
  std::vector<Tensor*> out_ptrs;
  for (size_t k = 0; k < outs.size(); ++k) {
    Tensor& o = outs[k];
    if (!o.defined()) fail(name, fmt::format("forward returned an undefined tensor as output {}", k), op.site);
    // An output that is an input (or otherwise already on the tape) gets its own handle,
    // so recording links the new handle and leaves the input as it was.
    bool alias = o.grad_fn() != nullptr || o.requires_grad();
    for (const Tensor* in : inputs) alias = alias || o.impl() == in->impl();
    if (alias) o = o.detach();
    out_ptrs.push_back(&o);
  }
  state->backward = backward;
  if (Node* n = record(op, &function_backward, inputs, out_ptrs)) {
    for (const Tensor& t : ctx.pending_) n->save(t);  // an output is saved detached: no cycle
    ctx.pending_.clear();
    ctx.node_ = n;
    n->custom = std::move(state);
  }
  return outs;
}

}  // namespace detail

void Context::save_for_backward(std::vector<Tensor> tensors) {
  for (Tensor& t : tensors) pending_.push_back(std::move(t));
}

std::vector<Tensor> Context::saved() const {
  if (!node_) return pending_;
  if (node_->released) (void)node_->saved_tensor(0);  // throws: freed by an earlier backward
  std::vector<Tensor> out;
  for (size_t i = 0; i < node_->saved.size(); ++i) out.push_back(node_->saved_tensor(i));
  return out;
}

bool Context::needs_input_grad(size_t i) const {
  if (node_) return i < node_->edges.size() && node_->needs_grad(i);
  return i < needs_.size() && needs_[i];
}

// ---- IValue
std::string IValue::kind() const {
  static const char* const kinds[] = {"none", "double", "int", "bool", "string", "int list", "double list"};
  return kinds[v_.index()];
}

namespace {
template <typename T>
const T& holds(const IValue& v, const std::variant<std::monostate, double, int64_t, bool, std::string,
                                                   std::vector<int64_t>, std::vector<double>>& var,
               const char* accessor, const char* want) {
  if (const T* p = std::get_if<T>(&var)) return *p;
  throw Error(fmt::format("IValue::{}: expected a saved {}, got a {}", accessor, want, v.kind()));
}
}  // namespace

double IValue::toDouble() const { return holds<double>(*this, v_, "toDouble", "double"); }
int64_t IValue::toInt() const { return holds<int64_t>(*this, v_, "toInt", "int"); }
bool IValue::toBool() const { return holds<bool>(*this, v_, "toBool", "bool"); }
const std::string& IValue::toStringRef() const { return holds<std::string>(*this, v_, "toStringRef", "string"); }
const std::vector<int64_t>& IValue::toIntVector() const {
  return holds<std::vector<int64_t>>(*this, v_, "toIntVector", "int list");
}
Dims IValue::toDims() const {
  const auto& v = holds<std::vector<int64_t>>(*this, v_, "toDims", "int list (a shape)");
  if (v.size() > size_t(kMaxDims))
    throw Error(fmt::format("IValue::toDims: a list of {} integers has more than {} dims", v.size(), kMaxDims));
  return Dims(v);
}
const std::vector<double>& IValue::toDoubleVector() const {
  return holds<std::vector<double>>(*this, v_, "toDoubleVector", "double list");
}

}  // namespace reel::autograd
