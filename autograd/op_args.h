// OpArgs: an op's arguments, kept typed. A tape entry (Node) holds the struct its op
// recorded (ConvParams for conv2d, SoftmaxArgs for softmax, ...) inline, with a pointer to
// that type's static descriptor (its name and a printer), and gives it back only as that
// type: a read as another type throws reel::Error instead of reading garbage.
//
//   if (const ConvParams* p = node.args_if<ConvParams>()) flops *= p->groups;
//   const SoftmaxArgs& a = node.args<SoftmaxArgs>();  // throws unless softmax kept SoftmaxArgs
//   node.args_str();  // "stride=[1, 1] padding=[1, 1] dilation=[1, 1] groups=1"
//
// An args type is a trivially copyable struct of at most OpArgs::kBytes bytes with a
// `static constexpr const char* type_name` and a `fields(f)` template that calls
// f("name", value) for each field, in order (the printer's and any tool's view of it).
// The structs each op records are in autograd/op_args_types.h, listed by op.
#pragma once
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <new>
#include <string>
#include <type_traits>

#include "../tensor/shape.h"

namespace reel {

template <class T>
concept OpArgsType = std::is_trivially_copyable_v<T> && std::is_trivially_destructible_v<T> &&
                     sizeof(T) <= 96 && alignof(T) <= 8 && requires { T::type_name; };

// One args type: its name and how to print a value of it ("dim=1 log=false").
struct OpArgsDescriptor {
  const char* name;
  void (*print)(const void* args, std::string& out);
};

namespace op_args_detail {
void append_int(std::string& out, int64_t v);
void append_uint(std::string& out, uint64_t v);
void append_double(std::string& out, double v);
void append_dims(std::string& out, const Dims& d);
void append_ints(std::string& out, const int64_t* v, size_t n);

// fields(f)'s f for printing: "name=value" separated by spaces
struct Printer {
  std::string* out;
  template <class V>
  void operator()(const char* name, const V& v) const {
    if (!out->empty()) *out += ' ';
    *out += name;
    *out += '=';
    if constexpr (std::is_same_v<V, bool>) *out += v ? "true" : "false";
    else if constexpr (std::is_integral_v<V> && std::is_signed_v<V>) append_int(*out, int64_t(v));
    else if constexpr (std::is_integral_v<V>) append_uint(*out, uint64_t(v));
    else if constexpr (std::is_floating_point_v<V>) append_double(*out, double(v));
    else if constexpr (std::is_same_v<V, Dims>) append_dims(*out, v);
    else if constexpr (std::is_array_v<V>) append_ints(*out, v, std::extent_v<V>);
    else *out += v;  // a name (const char*): enums are given by name
  }
};

template <class T>
void print(const void* args, std::string& out) {
  static_cast<const T*>(args)->fields(Printer{&out});
}
}  // namespace op_args_detail

template <OpArgsType T>
inline constexpr OpArgsDescriptor op_args_descriptor{T::type_name, &op_args_detail::print<T>};

class OpArgs {
 public:
  static constexpr size_t kBytes = 96;  // the largest args type (two Dims fit: ReduceArgs, PermuteArgs)

  OpArgs() = default;
  template <OpArgsType T>
  explicit OpArgs(const T& args) { set(args); }

  template <OpArgsType T>
  void set(const T& args) {
    ::new (static_cast<void*>(buf_)) T(args);
    type_ = &op_args_descriptor<T>;
  }
  void clear() { type_ = nullptr; }

  // Whether the value held is a T. The descriptor's address decides; a copy of the
  // descriptor made in another shared library is recognised by its name.
  template <OpArgsType T>
  bool holds() const {
    return type_ == &op_args_descriptor<T> || (type_ && std::strcmp(type_->name, T::type_name) == 0);
  }
  // The value as a T, or null when empty or another type.
  template <OpArgsType T>
  const T* get_if() const {
    return holds<T>() ? std::launder(reinterpret_cast<const T*>(buf_)) : nullptr;
  }
  // The value as a T; throws Error naming `who`, the type asked for and the type held.
  template <OpArgsType T>
  const T& get(const char* who = "OpArgs") const {
    if (const T* p = get_if<T>()) return *p;
    wrong_type(who, T::type_name);
  }

  bool empty() const { return type_ == nullptr; }
  const char* type_name() const { return type_ ? type_->name : ""; }  // "ConvParams"; "" when empty
  const OpArgsDescriptor* descriptor() const { return type_; }
  std::string str() const;  // "stride=[1, 1] padding=[0, 0] ..."; "" when empty

 private:
  [[noreturn]] void wrong_type(const char* who, const char* wanted) const;
  alignas(8) unsigned char buf_[kBytes];
  const OpArgsDescriptor* type_ = nullptr;
};

}  // namespace reel
