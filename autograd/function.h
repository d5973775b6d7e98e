// Custom autograd functions: a user op with its own forward and backward. The
// forward runs with recording off; when some tensor argument requires grad, one
// tape entry is made whose rule calls your backward.
//
//   struct Cube : reel::autograd::Function<Cube> {
//     static Tensor forward(Context& ctx, const Tensor& x) {
//       ctx.save_for_backward({x});
//       return x * x * x;
//     }
//     static std::vector<Tensor> backward(Context& ctx, const std::vector<Tensor>& grad_outputs) {
//       Tensor x = ctx.saved()[0];
//       return {grad_outputs[0] * 3.0 * x * x};  // one gradient per Tensor argument
//     }
//   };
//   Tensor y = Cube::apply(x);   // y.grad_fn()->op is "Cube", y.grad_fn()->name() "CubeBackward"
//
// libtorch's spelling runs unchanged (docs/from-libtorch.md): forward and backward may
// take `AutogradContext* ctx`, backward may return `tensor_list`, ctx->get_saved_variables()
// and ctx->saved_data["k"] = k ... .toDouble() work as there.
//
// Contract: the first argument of apply is a Tensor (it carries the caller's line);
// the Tensor arguments, in order, are the op's inputs. Other arguments (numbers,
// options) are passed through to forward; keep what backward needs in ctx.saved_data.
// forward returns a Tensor, or a std::vector<Tensor> for several outputs; backward
// gets one incoming gradient per output (zeros where an output was not used) and
// returns, read in this order:
//   1. one gradient per argument of apply (libtorch's convention: an undefined Tensor
//      for each non-tensor argument), or
//   2. one per Tensor argument (an undefined Tensor for "none"), or
//   3. as 1 with more entries after the last argument, all undefined (libtorch drops them), or
//   4. as 1 with trailing entries left off, where those arguments need no gradient.
// Anything else throws Error naming the class and both expected counts. The op's name
// on the tape is the class's name, or `static constexpr const char* name` when declared.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <type_traits>
#include <typeinfo>
#include <utility>
#include <variant>
#include <vector>

#include "../tensor/tensor.h"

namespace reel::autograd {

// A value ctx keeps for backward besides tensors, as libtorch's IValue in saved_data:
// a double, an integer, a bool, a string, a list of integers (a shape) or of doubles.
// Read back with the accessor of its kind; another kind throws Error saying which it holds.
//   ctx.saved_data["dims"] = x.shape();  ...  Dims d = ctx.saved_data["dims"].toDims();
class IValue {
 public:
  IValue() = default;  // none
  IValue(double v) : v_(v) {}
  IValue(float v) : v_(double(v)) {}
  IValue(bool v) : v_(v) {}
  template <typename T>
    requires(std::is_integral_v<T> && !std::is_same_v<T, bool>)
  IValue(T v) : v_(int64_t(v)) {}
  IValue(const char* v) : v_(std::string(v)) {}
  IValue(std::string v) : v_(std::move(v)) {}
  IValue(std::vector<int64_t> v) : v_(std::move(v)) {}
  IValue(const Dims& v) : v_(v.vec()) {}
  IValue(std::vector<double> v) : v_(std::move(v)) {}

  bool isNone() const { return v_.index() == 0; }
  bool isDouble() const { return std::holds_alternative<double>(v_); }
  bool isInt() const { return std::holds_alternative<int64_t>(v_); }
  bool isBool() const { return std::holds_alternative<bool>(v_); }
  bool isString() const { return std::holds_alternative<std::string>(v_); }
  bool isIntList() const { return std::holds_alternative<std::vector<int64_t>>(v_); }
  bool isDoubleList() const { return std::holds_alternative<std::vector<double>>(v_); }

  double toDouble() const;
  int64_t toInt() const;
  bool toBool() const;
  const std::string& toStringRef() const;
  const std::vector<int64_t>& toIntVector() const;
  Dims toDims() const;  // an integer list as a shape
  const std::vector<double>& toDoubleVector() const;
  std::string kind() const;  // "double", "int", ...: what it holds

 private:
  std::variant<std::monostate, double, int64_t, bool, std::string, std::vector<int64_t>, std::vector<double>> v_;
};

class Context;
namespace detail {
using ForwardThunk = std::vector<Tensor> (*)(void* forward, Context& ctx);
using BackwardPtr = std::vector<Tensor> (*)(Context& ctx, const std::vector<Tensor>& grad_outputs);
// What run_function knows of the user's class: its name for errors and the tape, and
// which arguments of apply were tensors (to read backward's list by either convention).
struct FunctionInfo {
  const char* op = "";          // the tape's op name: Derived::name, else the class name
  const char* class_name = "";  // demangled, "(anonymous namespace)::" left out
  std::vector<bool> arg_is_tensor;
};
// Opens the op's scope, runs forward without recording, records one tape entry.
std::vector<Tensor> run_function(FunctionInfo info, const Site& site, const std::vector<const Tensor*>& inputs,
                                 void* forward, ForwardThunk thunk, BackwardPtr backward);
std::string demangle(const char* mangled);
struct FunctionState;
}  // namespace detail

// What forward hands to backward (libtorch's AutogradContext).
class Context {
 public:
  // Tensors backward will read. Each is checked on use: writing one in place after
  // the forward makes saved() throw, as for built-in ops.
  void save_for_backward(std::vector<Tensor> tensors);
  std::vector<Tensor> saved() const;
  std::vector<Tensor> get_saved_variables() const { return saved(); }  // libtorch's name
  // Whether input i (the i-th Tensor argument) wants a gradient.
  bool needs_input_grad(size_t i) const;
  // Other values backward needs: ctx.saved_data["k"] = k; ... ctx.saved_data["k"].toDouble()
  std::map<std::string, IValue> saved_data;

 private:
  friend std::vector<Tensor> detail::run_function(detail::FunctionInfo, const Site&, const std::vector<const Tensor*>&,
                                                  void*, detail::ForwardThunk, detail::BackwardPtr);
  std::vector<Tensor> pending_;  // saved during forward, moved onto the tape entry by run_function
  std::vector<bool> needs_;
  const Node* node_ = nullptr;  // the tape entry, once recorded
};
using AutogradContext = Context;
using tensor_list = std::vector<Tensor>;    // libtorch's names for backward's lists
using variable_list = std::vector<Tensor>;

template <typename Derived>
struct Function {
  using Context = autograd::Context;

  template <typename... Args>
  static auto apply(TensorArg first, Args&&... rest) {
    using R = decltype(call_forward(std::declval<Context&>(), first.t, std::forward<Args>(rest)...));
    static_assert(std::is_same_v<R, Tensor> || std::is_same_v<R, std::vector<Tensor>>,
                  "forward must return a Tensor or a std::vector<Tensor> (libtorch's tensor_list)");
    std::vector<const Tensor*> inputs{&first.t};
    (add_if_tensor(inputs, rest), ...);
    detail::FunctionInfo info{op_name(), class_name(), {true, is_tensor<Args>()...}};
    auto call = [&](Context& ctx) -> std::vector<Tensor> {
      if constexpr (std::is_same_v<R, Tensor>) {
        return {call_forward(ctx, first.t, std::forward<Args>(rest)...)};
      } else {
        return call_forward(ctx, first.t, std::forward<Args>(rest)...);
      }
    };
    detail::ForwardThunk thunk = [](void* f, Context& ctx) { return (*static_cast<decltype(call)*>(f))(ctx); };
    detail::BackwardPtr backward = [](Context& ctx, const std::vector<Tensor>& g) -> std::vector<Tensor> {
      if constexpr (requires { Derived::backward(&ctx, g); }) {
        return Derived::backward(&ctx, g);
      } else {
        static_assert(requires { Derived::backward(ctx, g); },
                      "backward must be `static std::vector<Tensor> backward(Context& ctx, const "
                      "std::vector<Tensor>& grad_outputs)` (or libtorch's `(AutogradContext* ctx, tensor_list)`)");
        return Derived::backward(ctx, g);
      }
    };
    std::vector<Tensor> out = detail::run_function(std::move(info), first.site, inputs, &call, thunk, backward);
    if constexpr (std::is_same_v<R, Tensor>) {
      return out[0];
    } else {
      return out;
    }
  }

 private:
  // forward(Context&, ...) as reel writes it, or forward(AutogradContext*, ...) as libtorch does
  template <typename... A>
  static decltype(auto) call_forward(Context& ctx, A&&... args) {
    if constexpr (requires { Derived::forward(&ctx, std::forward<A>(args)...); }) {
      return Derived::forward(&ctx, std::forward<A>(args)...);
    } else {
      static_assert(requires { Derived::forward(ctx, std::forward<A>(args)...); },
                    "forward must be `static Tensor forward(Context& ctx, ...)` (or libtorch's "
                    "`(AutogradContext* ctx, ...)`) taking apply's arguments in order");
      return Derived::forward(ctx, std::forward<A>(args)...);
    }
  }
  static const char* class_name() {
    static const std::string n = detail::demangle(typeid(Derived).name());
    return n.c_str();
  }
  static const char* op_name() {
    if constexpr (requires { Derived::name; }) {
      return Derived::name;
    } else {
      return class_name();
    }
  }
  template <typename T>
  static constexpr bool is_tensor() {
    return std::is_same_v<std::remove_cvref_t<T>, Tensor>;
  }
  template <typename T>
  static void add_if_tensor(std::vector<const Tensor*>& inputs, const T& arg) {
    if constexpr (is_tensor<T>()) inputs.push_back(&arg);
  }
};

}  // namespace reel::autograd
