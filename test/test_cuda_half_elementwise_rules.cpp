// REEL_CUDA_HALF_ELEMENTWISE's rules (cuda/internal/half_elementwise.h), which need no GPU:
// the switch, which ops the one-pass f16/bf16 kernels take (those writing their inputs'
// dtype; comparisons stay staged), that every operand must be of one half dtype, and that an
// input sharing out's memory is read safely only when it is out itself. The public switch
// answers in every build (cuda/absent.cpp without the backend).
#include <catch2/catch.hpp>

#include <reel/cuda/cuda.h>
#include <reel/reel.h>

#include <iterator>

#include "../cuda/internal/half_elementwise.h"

namespace he = reel::cuda::half_elementwise;
using reel::BinaryOp;
using reel::Dims;
using reel::DType;
using reel::UnaryOp;

TEST_CASE("REEL_CUDA_HALF_ELEMENTWISE takes staged or native, else an error naming it, the value and the choices",
          "[cuda][rules][half_elementwise]") {
  // staged stays the default: the H200 measured native at W4 0.69 / 0.79 of staged but W10
  // 1.10 / 1.04 (two runs, 2026-11-29): not faster everywhere yet
  CHECK(he::path_from_env(nullptr) == he::Path::staged);
  CHECK(he::path_from_env("") == he::Path::staged);
  CHECK(he::path_from_env("staged") == he::Path::staged);
  CHECK(he::path_from_env("native") == he::Path::native);
  CHECK(he::path_from_env("Native") == he::Path::invalid);
  CHECK(he::path_from_env("1") == he::Path::invalid);
  CHECK(he::path_from_env("fused") == he::Path::invalid);
  CHECK(he::invalid_path_message("fused") ==
        "elementwise: REEL_CUDA_HALF_ELEMENTWISE must be staged or native, got \"fused\"");
}

TEST_CASE("the one-pass kernels take every unary and binary op that writes its inputs' dtype",
          "[cuda][rules][half_elementwise]") {
  // autocast's elementwise traffic: activations, scalars (dropout's scale, x * 0.5), the
  // residual and bias adds, relu's gradient, the fused residual add + relu
  for (UnaryOp op : {UnaryOp::relu, UnaryOp::neg, UnaryOp::add_scalar, UnaryOp::mul_scalar, UnaryOp::rsub_scalar,
                     UnaryOp::clamp, UnaryOp::gelu, UnaryOp::gelu_tanh, UnaryOp::silu, UnaryOp::sigmoid,
                     UnaryOp::tanh, UnaryOp::exp, UnaryOp::pow_scalar, UnaryOp::leaky_relu, UnaryOp::hardswish,
                     UnaryOp::elu, UnaryOp::softplus, UnaryOp::mish, UnaryOp::square, UnaryOp::abs, UnaryOp::sign})
    CHECK(he::serves(op));
  for (BinaryOp op : {BinaryOp::add, BinaryOp::sub, BinaryOp::mul, BinaryOp::div, BinaryOp::maximum,
                      BinaryOp::minimum, BinaryOp::add_relu, BinaryOp::relu_backward, BinaryOp::sigmoid_backward,
                      BinaryOp::tanh_backward, BinaryOp::pow})
    CHECK(he::serves(op));
  // bool outputs stay staged
  for (UnaryOp op : {UnaryOp::eq_scalar, UnaryOp::ne_scalar, UnaryOp::lt_scalar, UnaryOp::le_scalar,
                     UnaryOp::gt_scalar, UnaryOp::ge_scalar, UnaryOp::logical_not})
    CHECK_FALSE(he::serves(op));
  for (BinaryOp op : {BinaryOp::eq, BinaryOp::ne, BinaryOp::lt, BinaryOp::le, BinaryOp::gt, BinaryOp::ge,
                      BinaryOp::logical_and, BinaryOp::logical_or})
    CHECK_FALSE(he::serves(op));
  // the tables: each op once (one kernel pair each), every unary op but the 7 comparisons and
  // every binary op but the 8 with bool outputs (a new op fails the counts: decide whether it
  // is served, and add it to the table and to test/cuda/test_cuda_half_elementwise.cpp)
  constexpr size_t nu = std::size(he::kUnaryOps), nb = std::size(he::kBinaryOps);
  for (size_t i = 0; i < nu; ++i)
    for (size_t j = i + 1; j < nu; ++j) CHECK(he::kUnaryOps[i] != he::kUnaryOps[j]);
  for (size_t i = 0; i < nb; ++i)
    for (size_t j = i + 1; j < nb; ++j) CHECK(he::kBinaryOps[i] != he::kBinaryOps[j]);
  CHECK(nu == size_t(UnaryOp::elu) + 1 - 7);
  CHECK(nb == size_t(BinaryOp::add_relu) + 1 - 8);
}

TEST_CASE("the one-pass kernels take a call only when switched on and every operand is of one half dtype",
          "[cuda][rules][half_elementwise]") {
  for (DType d : {DType::bf16, DType::f16}) {
    INFO(reel::dtype_name(d));
    CHECK(he::native(he::Path::native, UnaryOp::relu, d, d));
    CHECK(he::native(he::Path::native, BinaryOp::add, d, d, d));
    CHECK_FALSE(he::native(he::Path::staged, UnaryOp::relu, d, d));  // the default
    CHECK_FALSE(he::native(he::Path::staged, BinaryOp::add, d, d, d));
    // mixed calls: a half out of an f32 input, an f32 out of halves, a bias of the other half
    CHECK_FALSE(he::native(he::Path::native, UnaryOp::relu, d, DType::f32));
    CHECK_FALSE(he::native(he::Path::native, UnaryOp::relu, DType::f32, d));
    CHECK_FALSE(he::native(he::Path::native, BinaryOp::add, d, d, DType::f32));
    CHECK_FALSE(he::native(he::Path::native, BinaryOp::add, d, DType::f32, d));
    CHECK_FALSE(he::native(he::Path::native, BinaryOp::mul, DType::f32, d, d));
    const DType other = d == DType::bf16 ? DType::f16 : DType::bf16;
    CHECK_FALSE(he::native(he::Path::native, BinaryOp::add, d, d, other));
    CHECK_FALSE(he::native(he::Path::native, UnaryOp::neg, d, other));
    // comparisons (a bool out; never of the input's dtype anyway)
    CHECK_FALSE(he::native(he::Path::native, UnaryOp::gt_scalar, DType::boolean, d));
    CHECK_FALSE(he::native(he::Path::native, BinaryOp::lt, DType::boolean, d, d));
  }
  // f32 and f64 never reach the layer's hooks; were they asked, the answer is no
  CHECK_FALSE(he::native(he::Path::native, UnaryOp::relu, DType::f32, DType::f32));
  CHECK_FALSE(he::native(he::Path::native, BinaryOp::add, DType::f64, DType::f64, DType::f64));
  CHECK(he::one_half_dtype(DType::bf16, {}));
  CHECK_FALSE(he::one_half_dtype(DType::i32, {DType::i32}));
}

TEST_CASE("an input is read in one pass only when it lies elsewhere or is out itself",
          "[cuda][rules][half_elementwise]") {
  const Dims s{2, 3, 4, 5}, c = reel::contiguous_strides(s), nhwc = reel::channels_last_strides(s);
  CHECK(he::reads_safely(false, 0, c, 0, c));    // another tensor
  CHECK(he::reads_safely(false, 7, c, 7, nhwc)); // another tensor, whatever its geometry
  CHECK(he::reads_safely(true, 0, c, 0, c));     // x.relu_(): out is x
  CHECK(he::reads_safely(true, 9, nhwc, 9, nhwc));
  CHECK_FALSE(he::reads_safely(true, 0, c, 1, c));       // a shifted view would read written elements
  CHECK_FALSE(he::reads_safely(true, 0, c, 0, nhwc));    // same memory, another order
  CHECK_FALSE(he::reads_safely(true, 0, c, 0, Dims{0, 1, 0, 0}));  // a broadcast of out's own memory
}

TEST_CASE("the public switch remembers what it is set to", "[cuda][rules][half_elementwise]") {
  using reel::cuda::HalfElementwisePath;
  const HalfElementwisePath before = reel::cuda::half_elementwise_path();
  reel::cuda::set_half_elementwise_path(HalfElementwisePath::native);
  CHECK(reel::cuda::half_elementwise_path() == HalfElementwisePath::native);
  reel::cuda::set_half_elementwise_path(HalfElementwisePath::staged);
  CHECK(reel::cuda::half_elementwise_path() == HalfElementwisePath::staged);
  reel::cuda::set_half_elementwise_path(before);
  // no GPU in the CPU test program's runs: nothing ran natively unless a GPU did
  if (!reel::cuda::is_available()) CHECK(reel::cuda::native_half_elementwise_calls() == 0);
}
