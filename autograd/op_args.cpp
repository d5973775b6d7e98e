// OpArgs' printing and errors, and the names of the enums that args print by name.
#include "op_args.h"

#include <fmt/format.h>

#include "../tensor/error.h"
#include "node.h"
#include "op_args_types.h"

namespace reel {

namespace op_args_detail {
void append_int(std::string& out, int64_t v) { out += std::to_string(v); }
void append_uint(std::string& out, uint64_t v) { out += std::to_string(v); }
void append_double(std::string& out, double v) { out += fmt::format("{}", v); }  // shortest round trip: 1e-05
void append_dims(std::string& out, const Dims& d) { out += d.str(); }
void append_ints(std::string& out, const int64_t* v, size_t n) {
  out += '[';
  for (size_t i = 0; i < n; ++i) out += (i ? ", " : "") + std::to_string(v[i]);
  out += ']';
}
}  // namespace op_args_detail

std::string OpArgs::str() const {
  std::string out;
  if (type_) type_->print(buf_, out);
  return out;
}

void OpArgs::wrong_type(const char* who, const char* wanted) const {
  throw Error(fmt::format("{}: expected arguments of type {}, got {}", who, wanted,
                          type_ ? type_->name : "none (the op keeps no arguments)"));
}

void Node::wrong_args(const char* wanted) const {
  throw Error(fmt::format("{}: the tape entry made at {} keeps arguments of type {}, not {}", op, site.str(),
                          op_args.empty() ? "none" : op_args.type_name(), wanted));
}

const char* unary_op_name(UnaryOp op) {
  switch (op) {
    case UnaryOp::neg: return "neg";
    case UnaryOp::abs: return "abs";
    case UnaryOp::exp: return "exp";
    case UnaryOp::log: return "log";
    case UnaryOp::sqrt: return "sqrt";
    case UnaryOp::rsqrt: return "rsqrt";
    case UnaryOp::relu: return "relu";
    case UnaryOp::gelu: return "gelu";
    case UnaryOp::sigmoid: return "sigmoid";
    case UnaryOp::tanh: return "tanh";
    case UnaryOp::sign: return "sign";
    case UnaryOp::square: return "square";
    case UnaryOp::reciprocal: return "reciprocal";
    case UnaryOp::sin: return "sin";
    case UnaryOp::cos: return "cos";
    case UnaryOp::log1p: return "log1p";
    case UnaryOp::logical_not: return "logical_not";
    case UnaryOp::add_scalar: return "add_scalar";
    case UnaryOp::mul_scalar: return "mul_scalar";
    case UnaryOp::rsub_scalar: return "rsub_scalar";
    case UnaryOp::rdiv_scalar: return "rdiv_scalar";
    case UnaryOp::pow_scalar: return "pow_scalar";
    case UnaryOp::rpow_scalar: return "rpow_scalar";
    case UnaryOp::clamp: return "clamp";
    case UnaryOp::leaky_relu: return "leaky_relu";
    case UnaryOp::eq_scalar: return "eq_scalar";
    case UnaryOp::ne_scalar: return "ne_scalar";
    case UnaryOp::lt_scalar: return "lt_scalar";
    case UnaryOp::le_scalar: return "le_scalar";
    case UnaryOp::gt_scalar: return "gt_scalar";
    case UnaryOp::ge_scalar: return "ge_scalar";
    case UnaryOp::erf: return "erf";
    case UnaryOp::gelu_tanh: return "gelu_tanh";
    case UnaryOp::silu: return "silu";
    case UnaryOp::mish: return "mish";
    case UnaryOp::hardswish: return "hardswish";
    case UnaryOp::softplus: return "softplus";
    case UnaryOp::elu: return "elu";
  }
  return "unary";
}

const char* rnn_mode_name(RnnMode mode) {
  switch (mode) {
    case RnnMode::rnn_tanh: return "rnn_tanh";
    case RnnMode::rnn_relu: return "rnn_relu";
    case RnnMode::lstm: return "lstm";
    case RnnMode::gru: return "gru";
  }
  return "rnn";
}

}  // namespace reel
