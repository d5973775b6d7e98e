// f16/bf16 unary and binary ops in one pass (REEL_CUDA_HALF_ELEMENTWISE=native; the switch
// and the rules in internal/half_elementwise.h): each element is widened to f32 with the
// copies' conversion, goes through the f32 kernel's own functor (elementwise_formulas.cuh),
// and is rounded once, to nearest even, into out's dtype with the copies' conversion again.
// That is the staged path's arithmetic on the same values (its twins are those widenings,
// its f32 output that functor's result, its copy back that rounding), so the bits are the
// same; what goes is the twins: a read and a write of every operand in f32, and their
// allocations.
//
// Layout: any strides, broadcast 0-strides, channels-last (elementwise.cuh's launcher: eight
// halves per 16-byte load where every operand is dense and aligned, the offset calculator
// otherwise, pieces past 2^31 elements). Launch shape: the launcher's (256 threads,
// grid-stride, at most two waves). Floor: memory bandwidth, 4 bytes an element for a unary
// op and 6 for a binary one; the transcendental ones compute in f32, as staged.
#include <atomic>
#include <cstddef>
#include <iterator>

#include "cuda.h"
#include "elementwise_formulas.cuh"
#include "internal/env_switch.h"
#include "internal/half_elementwise.h"

namespace reel::cuda {
namespace {

namespace he = half_elementwise;

EnvSwitch<he::Path> g_path("REEL_CUDA_HALF_ELEMENTWISE", he::path_from_env, he::invalid_path_message,
                           he::Path::invalid);
std::atomic<uint64_t> g_native_calls{0};

// out = round(f(widen(x))) with f an f32 unary functor; memory-bound (2 bytes in, 2 out)
template <typename H, typename F>
struct HalfUnary {
  F f;
  __device__ __forceinline__ H operator()(H v) const { return float_to_half<H>(f(half_to_float(v))); }
};

// out = round(f(widen(a), widen(b))) with f an f32 binary functor; memory-bound (4 bytes in, 2 out)
template <typename H, typename F>
struct HalfBinary {
  F f;
  __device__ __forceinline__ H operator()(H a, H b) const {
    return float_to_half<H>(f(half_to_float(a), half_to_float(b)));
  }
};

template <typename H, typename F>
void launch_unary(Context& c, F f, const Tensor& out, const Tensor& x) {
  launch_elementwise<H, H>(c, "unary", HalfUnary<H, F>{f}, out, {&x});
}

// The entry of kUnaryOps that is `op`, with the scalars as unary.cu's run() converts them;
// false when op is not in the table.
template <typename H, size_t I = 0>
bool unary_entry(Context& c, UnaryOp op, const Tensor& out, const Tensor& x, double a, double b) {
  if constexpr (I < std::size(he::kUnaryOps)) {
    constexpr UnaryOp OP = he::kUnaryOps[I];
    if (op != OP) return unary_entry<H, I + 1>(c, op, out, x, a, b);
    launch_unary<H>(c, UnaryFn<OP, float>{float(a), float(b), a}, out, x);
    return true;
  } else {
    return false;
  }
}

template <typename H>
bool unary_typed(Context& c, UnaryOp op, const Tensor& out, const Tensor& x, double a, double b) {
  // pow(x, 2) as x * x, the form the f32 kernel takes (unary.cu)
  if (op == UnaryOp::pow_scalar && a == 2.0) {
    launch_unary<H>(c, SquareFn<float>{}, out, x);
    return true;
  }
  return unary_entry<H>(c, op, out, x, a, b);
}

template <typename H, size_t I = 0>
bool binary_entry(Context& c, BinaryOp op, const Tensor& out, const Tensor& a, const Tensor& b) {
  if constexpr (I < std::size(he::kBinaryOps)) {
    constexpr BinaryOp OP = he::kBinaryOps[I];
    if (op != OP) return binary_entry<H, I + 1>(c, op, out, a, b);
    launch_elementwise<H, H, H>(c, "binary", HalfBinary<H, BinaryFn<OP, float>>{}, out, {&a, &b});
    return true;
  } else {
    return false;
  }
}

// whether `in` may be read while out is written (he::reads_safely)
bool safe_to_read(const Tensor& out, const Tensor& in) {
  return he::reads_safely(in.storage().get() == out.storage().get(), out.offset(), out.strides(), in.offset(),
                          in.strides());
}

}  // namespace

bool half_elementwise::unary(CudaBackend& be, UnaryOp op, const Tensor& out, const Tensor& x, double a, double b) {
  if (!native(g_path.get(), op, out.dtype(), x.dtype()) || !safe_to_read(out, x)) return false;
  be.expect_here("unary", {&out, &x});
  Context& c = be.ctx();
  const bool ran = out.dtype() == DType::f16 ? unary_typed<__half>(c, op, out, x, a, b)
                                             : unary_typed<__nv_bfloat16>(c, op, out, x, a, b);
  if (ran) g_native_calls.fetch_add(1, std::memory_order_relaxed);
  return ran;
}

bool half_elementwise::binary(CudaBackend& be, BinaryOp op, const Tensor& out, const Tensor& a, const Tensor& b) {
  if (!native(g_path.get(), op, out.dtype(), a.dtype(), b.dtype()) || !safe_to_read(out, a) || !safe_to_read(out, b))
    return false;
  be.expect_here("binary", {&out, &a, &b});
  Context& c = be.ctx();
  const bool ran = out.dtype() == DType::f16 ? binary_entry<__half>(c, op, out, a, b)
                                             : binary_entry<__nv_bfloat16>(c, op, out, a, b);
  if (ran) g_native_calls.fetch_add(1, std::memory_order_relaxed);
  return ran;
}

void set_half_elementwise_path(HalfElementwisePath path) {
  g_path.set(path == HalfElementwisePath::native ? he::Path::native : he::Path::staged);
}
HalfElementwisePath half_elementwise_path() {
  return g_path.get() == he::Path::native ? HalfElementwisePath::native : HalfElementwisePath::staged;
}
uint64_t native_half_elementwise_calls() { return g_native_calls.load(std::memory_order_relaxed); }

}  // namespace reel::cuda
