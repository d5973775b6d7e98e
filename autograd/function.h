// Custom autograd functions: a user op with its own forward and backward. The
// forward runs with recording off; when some tensor argument requires grad, one
// tape entry is made whose rule calls your backward.
//
//   struct Cube : reel::autograd::Function<Cube> {
//     static constexpr const char* name = "cube";  // optional: the op's name on the tape
//     static Tensor forward(Context& ctx, const Tensor& x) {
//       ctx.save_for_backward({x});
//       return x * x * x;
//     }
//     static std::vector<Tensor> backward(Context& ctx, const std::vector<Tensor>& grad_outputs) {
//       Tensor x = ctx.saved()[0];
//       return {grad_outputs[0] * 3.0 * x * x};  // one gradient per Tensor argument
//     }
//   };
//   Tensor y = Cube::apply(x);
//
// Contract: the first argument of apply is a Tensor (it carries the caller's line);
// the Tensor arguments, in order, are the op's inputs and backward returns one
// gradient per input (an undefined Tensor for "none"). Other arguments (numbers,
// options) are passed through to forward; keep what backward needs in ctx.data.
// forward returns a Tensor, or a std::vector<Tensor> for several outputs; backward
// gets one incoming gradient per output (zeros where an output was not used).
#pragma once
#include <map>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "../tensor/tensor.h"

namespace reel::autograd {

class Context;
namespace detail {
using ForwardThunk = std::vector<Tensor> (*)(void* forward, Context& ctx);
using BackwardPtr = std::vector<Tensor> (*)(Context& ctx, const std::vector<Tensor>& grad_outputs);
// Opens the op's scope, runs forward without recording, records one tape entry.
std::vector<Tensor> run_function(const char* name, const Site& site, const std::vector<const Tensor*>& inputs,
                                 void* forward, ForwardThunk thunk, BackwardPtr backward);
struct FunctionState;
}  // namespace detail

// What forward hands to backward.
class Context {
 public:
  // Tensors backward will read. Each is checked on use: writing one in place after
  // the forward makes saved() throw, as for built-in ops.
  void save_for_backward(std::vector<Tensor> tensors);
  std::vector<Tensor> saved() const;
  // Whether input i (the i-th Tensor argument) wants a gradient.
  bool needs_input_grad(size_t i) const;
  // Non-tensor values backward needs: ctx.data["k"] = k;
  std::map<std::string, double> data;

 private:
  friend std::vector<Tensor> detail::run_function(const char*, const Site&, const std::vector<const Tensor*>&, void*,
                                                  detail::ForwardThunk, detail::BackwardPtr);
  std::vector<Tensor> pending_;  // saved during forward, moved onto the tape entry by run_function
  std::vector<bool> needs_;
  const Node* node_ = nullptr;  // the tape entry, once recorded
};

template <typename Derived>
struct Function {
  using Context = autograd::Context;

  template <typename... Args>
  static auto apply(TensorArg first, Args&&... rest) {
    using R = decltype(Derived::forward(std::declval<Context&>(), first.t, std::forward<Args>(rest)...));
    static_assert(std::is_same_v<R, Tensor> || std::is_same_v<R, std::vector<Tensor>>,
                  "forward must return a Tensor or a std::vector<Tensor>");
    std::vector<const Tensor*> inputs{&first.t};
    (add_if_tensor(inputs, rest), ...);
    auto call = [&](Context& ctx) -> std::vector<Tensor> {
      if constexpr (std::is_same_v<R, Tensor>) {
        return {Derived::forward(ctx, first.t, std::forward<Args>(rest)...)};
      } else {
        return Derived::forward(ctx, first.t, std::forward<Args>(rest)...);
      }
    };
    detail::ForwardThunk thunk = [](void* f, Context& ctx) { return (*static_cast<decltype(call)*>(f))(ctx); };
    std::vector<Tensor> out = detail::run_function(op_name(), first.site, inputs, &call, thunk, &Derived::backward);
    if constexpr (std::is_same_v<R, Tensor>) {
      return out[0];
    } else {
      return out;
    }
  }

 private:
  static const char* op_name() {
    if constexpr (requires { Derived::name; }) {
      return Derived::name;
    } else {
      return "custom_function";
    }
  }
  template <typename T>
  static void add_if_tensor(std::vector<const Tensor*>& inputs, const T& arg) {
    if constexpr (std::is_same_v<std::remove_cvref_t<T>, Tensor>) inputs.push_back(&arg);
  }
};

}  // namespace reel::autograd
