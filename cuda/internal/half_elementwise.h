// f16/bf16 elementwise ops on CUDA (REEL_CUDA_HALF_ELEMENTWISE) as far as they need no GPU:
// the switch and the rule that says which calls the one-pass kernels take. Plain values in,
// plain values out, no CUDA header, so that reel_tests checks each rule in every build
// (test/test_cuda_half_elementwise_rules.cpp); cuda/half_elementwise.cu holds the kernels,
// cuda/low_precision.cpp hands them the low-precision layer's calls.
//
// staged (the default): the layer's path (tensor/low_precision_backend.h): an f32 twin of
//   each half operand is written, the f32 kernel runs, its output is rounded back: three
//   passes for relu, four for a binary op of two halves, moving 20 (relu) and 30 (binary)
//   bytes an element where one pass over the halves moves 4 and 6, plus the twins' allocations.
// native: one kernel reads the halves, widens each element, applies the f32 kernel's own
//   functor (elementwise_formulas.cuh) and rounds once into out's dtype with the copies'
//   conversion: the staged path's arithmetic on the same values, so the same bits (NaN
//   patterns and signed zeros included), in one pass.
//
// Served: every unary and binary op whose output has its inputs' dtype; comparisons and
// logical ops (bool outputs) stay staged, as do calls mixing dtypes (a bf16 out of an f32 x,
// an f16 operand beside a bf16 one) and calls whose out shares memory with an input in any
// other way than being that input (a shifted view would read elements already written; the
// staged path reads a twin made before the first write).
#pragma once
#include <cstdint>
#include <initializer_list>
#include <string>

#include "../../tensor/backend.h"
#include "env_switch.h"

namespace reel::cuda {
class CudaBackend;
}

namespace reel::cuda::half_elementwise {

// ---- REEL_CUDA_HALF_ELEMENTWISE: "staged" (the default until a GPU has measured native) or "native"
enum class Path { staged, native, invalid };
inline constexpr Choice<Path> kPaths[] = {{"staged", Path::staged}, {"native", Path::native}};
inline Path path_from_env(const char* value) { return parse_choice(value, kPaths, Path::staged, Path::invalid); }
inline std::string invalid_path_message(const char* value) {
  return choice_message("elementwise", "REEL_CUDA_HALF_ELEMENTWISE", kPaths, value);
}

// ---- the ops the kernels take: the ones that write their input's dtype. half_elementwise.cu
// instantiates a kernel pair per entry, so this list is also the list of kernels.
inline constexpr UnaryOp kUnaryOps[] = {
    UnaryOp::neg,         UnaryOp::abs,         UnaryOp::exp,        UnaryOp::log,        UnaryOp::sqrt,
    UnaryOp::rsqrt,       UnaryOp::relu,        UnaryOp::gelu,       UnaryOp::sigmoid,    UnaryOp::tanh,
    UnaryOp::sign,        UnaryOp::square,      UnaryOp::reciprocal, UnaryOp::sin,        UnaryOp::cos,
    UnaryOp::log1p,       UnaryOp::add_scalar,  UnaryOp::mul_scalar, UnaryOp::rsub_scalar, UnaryOp::rdiv_scalar,
    UnaryOp::pow_scalar,  UnaryOp::rpow_scalar, UnaryOp::clamp,      UnaryOp::leaky_relu, UnaryOp::erf,
    UnaryOp::gelu_tanh,   UnaryOp::silu,        UnaryOp::mish,       UnaryOp::hardswish,  UnaryOp::softplus,
    UnaryOp::elu,
};
inline constexpr BinaryOp kBinaryOps[] = {
    BinaryOp::add,     BinaryOp::sub,           BinaryOp::mul,              BinaryOp::div,
    BinaryOp::maximum, BinaryOp::minimum,       BinaryOp::pow,              BinaryOp::relu_backward,
    BinaryOp::add_relu, BinaryOp::sigmoid_backward, BinaryOp::tanh_backward,
};
inline constexpr bool serves(UnaryOp op) {
  for (UnaryOp o : kUnaryOps)
    if (o == op) return true;
  return false;
}
inline constexpr bool serves(BinaryOp op) {
  for (BinaryOp o : kBinaryOps)
    if (o == op) return true;
  return false;
}

// out and every input of one half dtype
inline bool one_half_dtype(DType out, std::initializer_list<DType> ins) {
  if (!is_low_precision(out)) return false;
  for (DType d : ins)
    if (d != out) return false;
  return true;
}

// Whether the one-pass kernel may read an input while it writes out: another storage, or out
// itself (same offset and strides over the same shape: each element is read before its own
// write). Inputs come broadcast to out's shape, so offset and strides say it all.
inline bool reads_safely(bool same_storage, int64_t out_offset, const Dims& out_strides, int64_t in_offset,
                         const Dims& in_strides) {
  return !same_storage || (in_offset == out_offset && in_strides == out_strides);
}

// Whether a call goes to the kernels (the rules above, switch first)
inline bool native(Path path, UnaryOp op, DType out, DType x) {
  return path == Path::native && serves(op) && one_half_dtype(out, {x});
}
inline bool native(Path path, BinaryOp op, DType out, DType a, DType b) {
  return path == Path::native && serves(op) && one_half_dtype(out, {a, b});
}

// ---- cuda/half_elementwise.cu: the call in one pass when the switch says native and the rules
// above take it (counted), true; else false, and the caller stages it
bool unary(CudaBackend& be, UnaryOp op, const Tensor& out, const Tensor& x, double a, double b);
bool binary(CudaBackend& be, BinaryOp op, const Tensor& out, const Tensor& a, const Tensor& b);

}  // namespace reel::cuda::half_elementwise
