// The CUDA backend's decisions that need no GPU (cuda/internal/decide.h, arg_reduce.h),
// checked on any machine: argmax/argmin's start value, library version compatibility,
// cuBLASLt and cuDNN fallbacks, the algorithm search's workspace budget, cuDNN's
// descriptor limits, REEL_CUDA_SYNC; the whole-stack RNN's switch, fallbacks, weight layout
// and repacking rule; batch_norm_relu's switch and what runs (bn_relu.h); f16/bf16
// attention's switch, the calls cuDNN's fused attention may take, its layouts and graph
// keys (half_attention.h). The decide.h part
// needs the CUDA headers: CUDA builds.
#include <catch2/catch.hpp>

#include <cmath>
#include <limits>
#include <vector>

#include "../cuda/internal/arg_reduce.h"
#include "../cuda/internal/bn_relu.h"
#include "../cuda/internal/half_attention.h"
#include "../cuda/internal/rnn_algo.h"
#include "../cuda/internal/rnn_stack.h"

namespace ar = reel::cuda::arg_reduce;

namespace {
// The index argmax (MAX) or argmin picks, folded as a warp does: each of `lanes` lanes
// starts from the start value and takes every lanes-th element, then the lanes combine.
template <typename T, bool MAX>
int64_t fold(const std::vector<T>& row, int lanes) {
  std::vector<ar::Acc<T>> acc(size_t(lanes), ar::start<T, MAX>());
  for (size_t i = 0; i < row.size(); ++i)
    acc[i % size_t(lanes)] = ar::combine<T, MAX>(acc[i % size_t(lanes)], ar::Acc<T>{row[i], int64_t(i)});
  ar::Acc<T> r = ar::start<T, MAX>();
  for (int l = lanes - 1; l >= 0; --l) r = ar::combine<T, MAX>(acc[size_t(l)], r);  // both argument orders occur
  for (int l = 0; l < lanes; ++l) r = ar::combine<T, MAX>(r, ar::start<T, MAX>());
  return r.i;
}
}  // namespace

TEST_CASE("argmax/argmin on CUDA start from a value every element beats, ties included", "[cuda][rules][reduce]") {
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  for (int lanes : {1, 4, 32}) {
    INFO("lanes = " << lanes);
    CHECK(fold<float, true>({-inf, -inf, -inf}, lanes) == 0);  // the start value lowest() beat these: INT64_MAX
    CHECK(fold<float, false>({inf, inf}, lanes) == 0);
    CHECK(fold<double, true>({-std::numeric_limits<double>::infinity()}, lanes) == 0);
    CHECK(fold<float, true>({-inf, std::numeric_limits<float>::lowest(), -inf}, lanes) == 1);
    CHECK(fold<float, true>({1, 3, 2, 3}, lanes) == 1);
    CHECK(fold<float, false>({1, 3, -2, -2, nan, nan}, lanes) == 4);  // the first NaN wins
    CHECK(fold<float, true>({nan}, lanes) == 0);
    CHECK(fold<uint8_t, true>({0, 0, 0}, lanes) == 0);
    CHECK(fold<uint8_t, false>({255, 255}, lanes) == 0);
    CHECK(fold<int64_t, true>({std::numeric_limits<int64_t>::min(), std::numeric_limits<int64_t>::min()}, lanes) == 0);
    CHECK(fold<int32_t, false>({7, std::numeric_limits<int32_t>::max(), 7}, lanes) == 0);
  }
}

// ---- the whole-stack cuDNN RNN (cuda/internal/rnn_stack.h: no CUDA header, every build)
namespace rs = reel::cuda::rnn_stack;

TEST_CASE("REEL_CUDNN_RNN takes layers or stack, else an error naming it and the value", "[cuda][rules][rnn]") {
  // layers stays the default: the H200 measured the stack at 0.94, 0.94 and 1.00 of it (three
  // runs, 2026-11-29) and its memcheck has not run yet
  CHECK(rs::path_from_env(nullptr) == rs::Path::layers);
  CHECK(rs::path_from_env("") == rs::Path::layers);
  CHECK(rs::path_from_env("layers") == rs::Path::layers);
  CHECK(rs::path_from_env("stack") == rs::Path::stack);
  CHECK(rs::path_from_env("Stack") == rs::Path::invalid);
  CHECK(rs::path_from_env("1") == rs::Path::invalid);
  CHECK(rs::invalid_path_message("fast") == "rnn: REEL_CUDNN_RNN must be layers or stack, got \"fast\"");
}

TEST_CASE("REEL_CUDA_RNN_ALGO takes standard or small_h; small_h serves float32 layers of small hidden size",
          "[cuda][rules][rnn]") {
  namespace ra = reel::cuda::rnn_algo;
  CHECK(ra::path_from_env(nullptr) == ra::Path::standard);  // not yet measured on a GPU
  CHECK(ra::path_from_env("") == ra::Path::standard);
  CHECK(ra::path_from_env("small_h") == ra::Path::small_h);
  CHECK(ra::path_from_env("persist") == ra::Path::invalid);
  CHECK(ra::invalid_path_message("fast") == "rnn: REEL_CUDA_RNN_ALGO must be standard or small_h, got \"fast\"");
  // W9's GRU (H = 100) on an H200
  CHECK(ra::small_h_serves(reel::RnnMode::gru, 100, true, 9));
  // PyTorch's backward bounds: gated cells up to 128, plain ones up to 256
  CHECK(ra::small_h_serves(reel::RnnMode::lstm, 128, true, 9));
  CHECK_FALSE(ra::small_h_serves(reel::RnnMode::lstm, 129, true, 9));
  CHECK_FALSE(ra::small_h_serves(reel::RnnMode::gru, 192, true, 9));  // PyTorch's forward would, its backward not
  CHECK(ra::small_h_serves(reel::RnnMode::rnn_tanh, 256, true, 9));
  CHECK(ra::small_h_serves(reel::RnnMode::rnn_relu, 1, true, 9));
  CHECK_FALSE(ra::small_h_serves(reel::RnnMode::rnn_relu, 257, true, 9));
  CHECK_FALSE(ra::small_h_serves(reel::RnnMode::gru, 100, false, 9));  // float64: STANDARD
  CHECK_FALSE(ra::small_h_serves(reel::RnnMode::gru, 100, true, 5));   // before Pascal
}

TEST_CASE("the whole-stack RNN serves float stacks without dropout between layers in training",
          "[cuda][rules][rnn]") {
  const rs::Config base{.layers = 2, .directions = 2, .T = 50, .B = 64, .I = 125, .H = 100};
  CHECK(rs::refusal(base) == "");
  rs::Config c = base;
  c.dropout = 0.2;  // cuDNN's generator would draw the masks
  CHECK(rs::refusal(c) == "dropout between layers in training draws from cuDNN's generator, not reel's");
  c.layers = 1;  // one layer: no dropout between layers, nothing to draw
  CHECK(rs::refusal(c) == "");
  c = base;
  c.float_type = false;  // bf16 or f16
  CHECK(rs::refusal(c) == "only float32 and float64 inputs");
  c = base;
  c.T = int64_t(1) << 31;
  CHECK(rs::refusal(c) == "a size over cuDNN's int limit");
  c.T = (int64_t(1) << 31) - 1;
  CHECK(rs::refusal(c) == "");
  CHECK(rs::layer_input_size(0, 125, 2, 100) == 125);
  CHECK(rs::layer_input_size(1, 125, 2, 100) == 200);  // both directions of layer 0
  CHECK(rs::layer_input_size(3, 125, 1, 100) == 100);
}

TEST_CASE("PyTorch's RNN parameters map to cuDNN's pseudo-layers, linear layers and offsets", "[cuda][rules][rnn]") {
  CHECK(rs::param_name(1, 1, rs::Kind::w_ih) == "weight_ih_l1_reverse");
  CHECK(rs::param_name(0, 0, rs::Kind::b_hh) == "bias_hh_l0");
  // GRU (G = 3), 2 layers, bidirectional, I = 5, H = 4: per pseudo-layer the matrices of
  // linLayerID 0..5, then their biases; layer 1 reads 2 H = 8 features
  rs::Layout g = rs::layout(3, 2, 2, 5, 4, true);
  REQUIRE(g.slots.size() == 16);
  CHECK(g.gates == 3);
  struct Want {
    const char* name;
    int64_t pseudo, first_id, offset, numel;
    bool bias;
  };
  const Want want[16] = {
      {"weight_ih_l0", 0, 0, 0, 60, false},           {"weight_hh_l0", 0, 3, 60, 48, false},
      {"bias_ih_l0", 0, 0, 108, 12, true},            {"bias_hh_l0", 0, 3, 120, 12, true},
      {"weight_ih_l0_reverse", 1, 0, 132, 60, false}, {"weight_hh_l0_reverse", 1, 3, 192, 48, false},
      {"bias_ih_l0_reverse", 1, 0, 240, 12, true},    {"bias_hh_l0_reverse", 1, 3, 252, 12, true},
      {"weight_ih_l1", 2, 0, 264, 96, false},         {"weight_hh_l1", 2, 3, 360, 48, false},
      {"bias_ih_l1", 2, 0, 408, 12, true},            {"bias_hh_l1", 2, 3, 420, 12, true},
      {"weight_ih_l1_reverse", 3, 0, 432, 96, false}, {"weight_hh_l1_reverse", 3, 3, 528, 48, false},
      {"bias_ih_l1_reverse", 3, 0, 576, 12, true},    {"bias_hh_l1_reverse", 3, 3, 588, 12, true}};
  for (size_t i = 0; i < 16; ++i) {
    INFO("slot " << i);
    CHECK(g.slots[i].name == want[i].name);
    CHECK(g.slots[i].pseudo_layer == want[i].pseudo);
    CHECK(g.slots[i].first_id == want[i].first_id);
    CHECK(g.slots[i].offset == want[i].offset);
    CHECK(g.slots[i].numel == want[i].numel);
    CHECK(g.slots[i].bias == want[i].bias);
  }
  CHECK(g.elements == 600);  // PyTorch's parameter count: 2 (3 4 (5 + 4) + 24) + 2 (3 4 (8 + 4) + 24)
  // gates: the n gate's recurrent matrix (linLayerID 5) two [4, 4] blocks into weight_hh_l0
  CHECK(rs::gate_offset(g.slots[1], 2) == 60 + 2 * 16);
  CHECK(rs::gate_offset(g.slots[15], 1) == 588 + 4);
  // LSTM (i f g o), one layer, no bias: two matrices only
  rs::Layout l = rs::layout(4, 1, 1, 3, 2, false);
  REQUIRE(l.slots.size() == 2);
  CHECK(l.slots[1].name == "weight_hh_l0");
  CHECK(l.slots[1].first_id == 4);
  CHECK(l.slots[1].offset == 24);
  CHECK(l.elements == 40);
  CHECK(rs::gate_offset(l.slots[0], 3) == 18);  // the o gate's [2, 3] block
  // a plain RNN: one gate, linLayerIDs 0 (input) and 1 (recurrent)
  rs::Layout r = rs::layout(1, 3, 1, 7, 6, true);
  CHECK(r.slots.size() == 12);
  CHECK(r.slots[5].name == "weight_hh_l1");
  CHECK(r.slots[5].first_id == 1);
  CHECK(r.slots[5].offset == (42 + 36 + 12) + 36);  // layer 1 reads 6 features
  CHECK(r.elements == 3 * (42 + 36 + 12) - 2 * 6);  // layer 0 reads [6, 7], layers 1 and 2 [6, 6]
}

TEST_CASE("weights are packed where cuDNN reports each gate: one copy a parameter in one run, one a gate else",
          "[cuda][rules][rnn]") {
  rs::Layout g = rs::layout(3, 2, 2, 5, 4, true);  // GRU, 2 layers, both directions, I 5, H 4
  const rs::Slot& w_hh = g.slots[1];                 // weight_hh_l0: three [4, 4] blocks at 60
  std::string why;
  // where the documented layout puts them: one copy of the whole parameter
  std::vector<rs::Copy> c = rs::gate_copies(w_hh, {60, 76, 92}, 600, &why);
  CHECK(why.empty());
  REQUIRE(c.size() == 1);
  CHECK((c[0].from == 0 && c[0].to == 60 && c[0].count == 48));
  for (int64_t gate = 0; gate < 3; ++gate) CHECK(rs::gate_offset(w_hh, gate) == 60 + 16 * gate);
  // the gates in the other order, with padding: a copy a gate, from the parameter's rows
  c = rs::gate_copies(w_hh, {104, 84, 60}, 640, &why);
  CHECK(why.empty());
  REQUIRE(c.size() == 3);
  CHECK((c[0].from == 0 && c[0].to == 104 && c[0].count == 16));
  CHECK((c[1].from == 16 && c[1].to == 84 && c[1].count == 16));
  CHECK((c[2].from == 32 && c[2].to == 60 && c[2].count == 16));
  // two gates in a run, the third apart: two copies
  c = rs::gate_copies(w_hh, {60, 76, 100}, 640, &why);
  REQUIRE(c.size() == 2);
  CHECK((c[0].from == 0 && c[0].count == 32 && c[1].from == 32 && c[1].to == 100 && c[1].count == 16));
  // a bias: [4] blocks
  c = rs::gate_copies(g.slots[14], {576, 580, 584}, 600, &why);
  REQUIRE(c.size() == 1);
  CHECK(c[0].count == 12);
  // a gate cuDNN did not place, or one past the space's end: nothing to pack, and why
  CHECK(rs::gate_copies(g.slots[14], {576, -1, 584}, 600, &why).empty());
  CHECK(why == "rnn: cuDNN's weight space has no place for bias_ih_l1_reverse gate 1 (pseudoLayer 3, linLayerID 1, "
               "bias, 4 elements of 600)");
  why.clear();
  CHECK(rs::gate_copies(w_hh, {60, 76, 590}, 600, &why).empty());
  CHECK_THAT(why, Catch::Contains("ends before weight_hh_l0 gate 2 (pseudoLayer 0, linLayerID 5, matrix, 16 "
                                  "elements at element 590 of 600)"));
}

TEST_CASE("the packed weight space is rewritten only when a weight changed", "[cuda][rules][rnn]") {
  int a = 0, b = 0;  // two storages, by address
  const std::vector<rs::Stamp> packed{{&a, 0, 60, 3}, {&a, 60, 48, 3}, {&b, 0, 12, 7}};
  std::vector<rs::Stamp> now = packed;
  CHECK(rs::same_weights(packed, now));
  CHECK_FALSE(rs::must_repack(packed, now, 5, 5));  // a second forward before any step
  now[2].version = 8;                                // an optimizer step, copy_, load_state_dict
  CHECK(rs::same_weights(packed, now));
  CHECK(rs::must_repack(packed, now, 5, 5));
  CHECK_FALSE(rs::must_repack(now, now, 5, 5));  // packed again: reused until the next step
  CHECK(rs::must_repack(now, now, 5, 6));        // a graph replay's step bumps no version
  now = packed;
  now[1].offset = 61;  // another view of the same storage
  CHECK_FALSE(rs::same_weights(packed, now));
  CHECK(rs::must_repack(packed, now, 5, 5));
  now = packed;
  now[0].storage = &b;  // another tensor
  CHECK(rs::must_repack(packed, now, 5, 5));
  now = packed;
  now[2].numel = 24;
  CHECK(rs::must_repack(packed, now, 5, 5));
  now = packed;
  now.pop_back();  // a stack without bias
  CHECK_FALSE(rs::same_weights(packed, now));
  CHECK(rs::must_repack(packed, now, 5, 5));
  CHECK(rs::must_repack({}, packed, 0, 0));  // nothing packed yet
}

// ---- batch_norm_relu's fused kernels (cuda/internal/bn_relu.h: no CUDA header, every build)
namespace bnr = reel::cuda::bn_relu;

TEST_CASE("REEL_CUDA_BN_RELU takes separate or fused, else an error naming it, the value and the choices",
          "[cuda][rules][norm]") {
  CHECK(bnr::path_from_env(nullptr) == bnr::Path::fused);  // the default since the H200 (W11 0.80, 0.74, 0.78)
  CHECK(bnr::path_from_env("") == bnr::Path::fused);
  CHECK(bnr::path_from_env("separate") == bnr::Path::separate);
  CHECK(bnr::path_from_env("fused") == bnr::Path::fused);
  CHECK(bnr::path_from_env("Fused") == bnr::Path::invalid);
  CHECK(bnr::path_from_env("1") == bnr::Path::invalid);
  CHECK(bnr::path_from_env("cudnn") == bnr::Path::invalid);
  CHECK(bnr::invalid_path_message("cudnn") ==
        "batch_norm_relu: REEL_CUDA_BN_RELU must be separate or fused, got \"cudnn\"");
  CHECK(bnr::invalid_path_message(nullptr) ==
        "batch_norm_relu: REEL_CUDA_BN_RELU must be separate or fused, got \"\"");
}

TEST_CASE("batch_norm_relu runs the fused kernels for float inputs only when switched to fused",
          "[cuda][rules][norm]") {
  CHECK_FALSE(bnr::fused({.path = bnr::Path::separate}));  // the composed path
  CHECK(bnr::fused({.path = bnr::Path::fused}));
  CHECK(bnr::fused({.path = bnr::Path::fused, .pieces = 25}));  // DenseNet's pieces: read in place
  // f16/bf16 reach CudaBackend staged in f32; anything else goes to the composed path,
  // whose kernels name the dtype they refuse
  CHECK_FALSE(bnr::fused({.path = bnr::Path::fused, .float_type = false}));
  CHECK_FALSE(bnr::fused({.path = bnr::Path::fused, .pieces = 0}));
  CHECK_FALSE(bnr::fused({.path = bnr::Path::invalid}));  // never reached: the read throws first
}

TEST_CASE("the fused batch_norm_relu's relu keeps NaN and its mask passes g only where y > 0 or NaN",
          "[cuda][rules][norm]") {
  const double nan = std::numeric_limits<double>::quiet_NaN(), inf = std::numeric_limits<double>::infinity();
  // relu: the separate path's unary relu
  CHECK(bnr::relu_output(2.5) == 2.5);
  CHECK(bnr::relu_output(-2.5) == 0.0);
  CHECK(bnr::relu_output(inf) == inf);
  CHECK(bnr::relu_output(-inf) == 0.0);
  CHECK(std::isnan(bnr::relu_output(nan)));
  CHECK(bnr::relu_output(1e-45f) == 1e-45f);  // a float subnormal above 0 stays
  CHECK(bnr::relu_output(0.0) == 0.0);
  CHECK_FALSE(std::signbit(bnr::relu_output(-0.0)));  // -0 gives +0, as relu does
  // the mask: relu_backward(g, y) = y <= 0 ? 0 : g
  CHECK(bnr::masked_gradient(3.0, 0.5) == 3.0);
  CHECK(bnr::masked_gradient(3.0, 0.0) == 0.0);  // relu's gradient at exactly 0 is 0
  CHECK(bnr::masked_gradient(3.0, -0.0) == 0.0);
  CHECK(bnr::masked_gradient(3.0, -1.0) == 0.0);
  CHECK(bnr::masked_gradient(3.0, nan) == 3.0);   // NaN in y passes g (it came from a NaN input)
  CHECK(bnr::masked_gradient(3.0, inf) == 3.0);
  CHECK(bnr::masked_gradient(nan, 0.0) == 0.0);   // a masked NaN or inf gradient is 0
  CHECK(bnr::masked_gradient(-inf, -2.0) == 0.0);
  CHECK(std::isnan(bnr::masked_gradient(nan, 1.0)));
  CHECK(bnr::masked_gradient(2.0f, 1e-45f) == 2.0f);
  // what y the forward writes, the backward reads: the mask is on exactly where relu kept v
  for (double v : {-3.0, -0.0, 0.0, 1e-300, 4.0, inf, -inf})
    CHECK((bnr::masked_gradient(1.0, bnr::relu_output(v)) == 1.0) == (v > 0));
  CHECK(bnr::masked_gradient(1.0, bnr::relu_output(nan)) == 1.0);
}

#if REEL_HAS_CUDA
#include <cublasLt.h>
#include <cuda_runtime_api.h>
#include <cudnn.h>
#include <reel/cuda/cuda.h>

#include <string>

#include "../cuda/internal/decide.h"

namespace decide = reel::cuda::decide;
using Catch::Contains;

TEST_CASE("a driver too old for the CUDA runtime is a clear error saying what to install", "[cuda][rules][versions]") {
  CHECK(decide::driver_problem(13000, 13000) == "");
  CHECK(decide::driver_problem(13020, 13000) == "");
  CHECK(decide::driver_problem(13000, 13010) == "");  // minor version compatibility
  std::string old = decide::driver_problem(12080, 13000);
  CHECK_THAT(old, Contains("supports CUDA 12.8") && Contains("CUDA 13.0 runtime") && Contains("driver 580"));
  CHECK_THAT(decide::driver_problem(0, 13000), Contains("no NVIDIA driver"));
}

TEST_CASE("cuDNN and cuBLAS must suit reel's headers and CUDA runtime", "[cuda][rules][versions]") {
  CHECK(decide::library_problem("cuDNN", 91900, 13000, 91900, 13000) == "");
  CHECK(decide::library_problem("cuDNN", 92000, 13020, 91900, 13000) == "");  // newer, same majors
  std::string cu12 = decide::library_problem("cuDNN", 91000, 12080, 91900, 13000);
  CHECK_THAT(cu12, Contains("cuDNN 9.10.0 was loaded, built for CUDA 12.8") && Contains("nvidia-cudnn-cu13") &&
                       Contains("libcudnn9-cuda-13"));
  CHECK_THAT(decide::library_problem("cuDNN", 91000, 13000, 91900, 13000), Contains("9.19.0's headers"));
  CHECK_THAT(decide::library_problem("cuDNN", 80900, 13000, 91900, 13000), Contains("same major"));
  CHECK_THAT(decide::library_problem("cuBLAS", 120900, 12080, 130100, 13000),
             Contains("cuBLAS 12.9.0 was loaded") && Contains("LD_LIBRARY_PATH"));
  // The libraries this build loads agree with its headers (no GPU needed to ask them).
  int runtime = 0;
  REQUIRE(cudaRuntimeGetVersion(&runtime) == cudaSuccess);
  CHECK(decide::library_problem("cuDNN", long(cudnnGetVersion()), long(cudnnGetCudartVersion()), CUDNN_VERSION,
                                runtime) == "");
  CHECK(decide::library_problem("cuBLAS", long(cublasLtGetVersion()), long(cublasLtGetCudartVersion()), CUBLAS_VERSION,
                                runtime) == "");
  CHECK_THAT(reel::cuda::library_versions(),
             Contains("cuDNN " + decide::lib_version_str(CUDNN_VERSION)) && Contains("runtime CUDA"));
}

TEST_CASE("cuBLASLt epilogues fall back to the plain product on any refusal", "[cuda][rules][matmul]") {
  using H = decide::Heuristic;
  CHECK(decide::heuristic_outcome(CUBLAS_STATUS_SUCCESS, 1, true) == H::use);
  CHECK(decide::heuristic_outcome(CUBLAS_STATUS_SUCCESS, 0, true) == H::unfused);
  CHECK(decide::heuristic_outcome(CUBLAS_STATUS_NOT_SUPPORTED, 0, true) == H::unfused);
  CHECK(decide::heuristic_outcome(CUBLAS_STATUS_INVALID_VALUE, 0, true) == H::unfused);  // was an error
  CHECK(decide::heuristic_outcome(CUBLAS_STATUS_SUCCESS, 1, false) == H::use);
  CHECK(decide::heuristic_outcome(CUBLAS_STATUS_NOT_SUPPORTED, 0, false) == H::no_algorithm);
  CHECK(decide::heuristic_outcome(CUBLAS_STATUS_INTERNAL_ERROR, 0, false) == H::error);
  CHECK(decide::fused_matmul_refused(CUBLAS_STATUS_NOT_SUPPORTED));
  CHECK_FALSE(decide::fused_matmul_refused(CUBLAS_STATUS_EXECUTION_FAILED));
  alignas(16) float buf[8] = {};
  CHECK(decide::bias_epilogue_aligned(buf));
  CHECK_FALSE(decide::bias_epilogue_aligned(buf + 1));  // a view one float into a larger buffer
  CHECK_FALSE(decide::bias_epilogue_aligned(buf + 2));
  CHECK(decide::bias_epilogue_aligned(buf + 4));
}

TEST_CASE("fused conv + bias runs identity only with IMPLICIT_PRECOMP_GEMM and reports real failures",
          "[cuda][rules][conv]") {
  CHECK(decide::fused_conv_allowed(false, CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM));
  CHECK_FALSE(decide::fused_conv_allowed(false, CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM));
  CHECK_FALSE(decide::fused_conv_allowed(false, CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD_NONFUSED));
  CHECK(decide::fused_conv_allowed(true, CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD_NONFUSED));
  CHECK(decide::fused_conv_refused(CUDNN_STATUS_NOT_SUPPORTED));
  CHECK(decide::fused_conv_refused(cudnnStatus_t(3001)));  // a cuDNN 9 sub-code of NOT_SUPPORTED
  CHECK(decide::fused_conv_refused(CUDNN_STATUS_BAD_PARAM));
  CHECK_FALSE(decide::fused_conv_refused(CUDNN_STATUS_EXECUTION_FAILED));  // was swallowed
  CHECK_FALSE(decide::fused_conv_refused(CUDNN_STATUS_INTERNAL_ERROR));
  CHECK_FALSE(decide::fused_conv_refused(CUDNN_STATUS_ALLOC_FAILED));
}

TEST_CASE("cuDNN's algorithm search counts the pool's unused memory as free", "[cuda][rules][conv]") {
  const size_t MiB = size_t(1) << 20, cap = size_t(1) << 30;
  // A process that trained a while: 100 MiB free on the device, 3 GiB in the pool, 1 GiB of it in use.
  CHECK(decide::search_budget(size_t(2) << 30, cap, 100 * MiB, size_t(3) << 30, size_t(1) << 30) == cap);
  CHECK(decide::search_budget(512 * MiB, cap, 100 * MiB, size_t(3) << 30, size_t(1) << 30) == 512 * MiB);
  CHECK(decide::search_budget(512 * MiB, cap, 100 * MiB, 300 * MiB, 100 * MiB) == 150 * MiB);
  CHECK(decide::search_budget(512 * MiB, cap, 100 * MiB, 0, 0) == 50 * MiB);
  CHECK(decide::search_budget(512 * MiB, cap, 100 * MiB, 10 * MiB, 20 * MiB) == 50 * MiB);  // used > reserved
}

TEST_CASE("cuDNN descriptors refuse tensors of 2^31 elements or more, saying how to split", "[cuda][rules][conv]") {
  CHECK(decide::descriptor_problem("input", 256, 64, 56, 56) == "");
  CHECK(decide::descriptor_problem("input", 524287, 64, 8, 8) == "");  // 2^31 - 4096 elements
  std::string big = decide::descriptor_problem("input", 524288, 64, 8, 8);
  CHECK_THAT(big, Contains("input [524288, 64, 8, 8] has 2147483648 elements") && Contains("at most 524287 images"));
  CHECK_THAT(decide::descriptor_problem("weight", 1, 65536, 256, 256), Contains("per image"));
  CHECK(decide::descriptor_problem("output", 0, 64, 8, 8) == "");
}

TEST_CASE("float32 cuDNN RNNs and convolutions forbid TF32 unless it is allowed", "[cuda][rules][rnn]") {
  // CUDNN_DEFAULT_MATH would let cuDNN take TF32 tensor cores for float32 (the 2e-4..1e-3
  // RNN differences of the first GPU run): only FMA math keeps float32 rounding
  CHECK(decide::float_math(true, false) == CUDNN_FMA_MATH);
  CHECK(decide::float_math(true, true) == CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION);
  CHECK(decide::float_math(false, false) == CUDNN_DEFAULT_MATH);  // float64
  CHECK(decide::float_math(false, true) == CUDNN_DEFAULT_MATH);
}

TEST_CASE("REEL_CUDA_SYNC is on when set to anything but empty or 0", "[cuda][rules][sync]") {
  CHECK_FALSE(decide::sync_mode_from_env(nullptr));
  CHECK_FALSE(decide::sync_mode_from_env(""));
  CHECK_FALSE(decide::sync_mode_from_env("0"));
  CHECK(decide::sync_mode_from_env("1"));
}
#endif

// ---- f16/bf16 attention through cuDNN (cuda/internal/half_attention.h: no CUDA header, every build)
namespace ha = reel::cuda::half_attention;

TEST_CASE("REEL_CUDA_HALF_ATTENTION takes staged or cudnn, else an error naming it, the value and the choices",
          "[cuda][rules][attention]") {
  // unset: the build's default (cudnn with the cuDNN frontend's headers, else staged)
  for (ha::Path fallback : {ha::Path::cudnn, ha::Path::staged}) {
    CHECK(ha::path_from_env(nullptr, fallback) == fallback);
    CHECK(ha::path_from_env("", fallback) == fallback);
    CHECK(ha::path_from_env("staged", fallback) == ha::Path::staged);
    CHECK(ha::path_from_env("cudnn", fallback) == ha::Path::cudnn);
    CHECK(ha::path_from_env("cuDNN", fallback) == ha::Path::invalid);
    CHECK(ha::path_from_env("1", fallback) == ha::Path::invalid);
  }
  CHECK(ha::invalid_path_message("flash") ==
        "scaled_dot_product_attention: REEL_CUDA_HALF_ATTENTION must be staged or cudnn, got \"flash\"");
}

TEST_CASE("cuDNN's fused attention takes unmasked f16/bf16 calls, heads of 8k up to 128, on "
          "Ampere or newer; each other call says why it stays staged", "[cuda][rules][attention]") {
  using reel::DType;
  const ha::Call ok{DType::bf16, DType::bf16, DType::bf16, DType::bf16, DType::f32, 6, 1024, 1024, 64, 64, false, 0,
                    9, true};
  CHECK(ha::refusal(ok).empty());
  ha::Call c = ok;
  c.q = c.k = c.v = c.out = DType::f16;
  CHECK(ha::refusal(c).empty());
  c.L = 1, c.S = 7, c.E = c.Ev = 128, c.cc_major = 8;  // L != S, the widest head, an A100
  CHECK(ha::refusal(c).empty());
  auto why = [&](auto change) {
    ha::Call d = ok;
    change(d);
    return ha::refusal(d);
  };
  CHECK(why([](ha::Call& d) { d.q = d.k = d.v = d.out = DType::f32; }) == "not f16/bf16");
  CHECK(why([](ha::Call& d) { d.k = DType::f16; }).find("one dtype") != std::string::npos);
  CHECK(why([](ha::Call& d) { d.out = DType::f32; }).find("one dtype") != std::string::npos);  // f32 gradients
  CHECK(why([](ha::Call& d) { d.lse = DType::bf16; }) == "lse not f32");
  CHECK(why([](ha::Call& d) { d.mask = true; }).find("a mask") == 0);
  CHECK(why([](ha::Call& d) { d.dropout_p = 0.1; }).empty());  // cuDNN's own Philox, seeded with reel's
  CHECK(why([](ha::Call& d) { d.S = 0; }) == "an empty plane");
  CHECK(why([](ha::Call& d) { d.Ev = 32; }) == "heads of q and v that differ");
  CHECK(why([](ha::Call& d) { d.E = d.Ev = 60; }).find("multiple of 8") != std::string::npos);
  CHECK(why([](ha::Call& d) { d.E = d.Ev = 136; }).find("up to 128") != std::string::npos);
  CHECK(why([](ha::Call& d) { d.cc_major = 7; }).find("Ampere") != std::string::npos);
  CHECK(why([](ha::Call& d) { d.aligned = false; }).find("16-byte") != std::string::npos);
}

TEST_CASE("cuDNN sees reel's contiguous [BH, rows, d] planes as [BH, 1, rows, d] and lse as packed "
          "[BH, 1, L, 1]", "[cuda][rules][attention]") {
  const int64_t BH = 6, rows = 1000, d = 64;
  const ha::Layout l = ha::plane_layout(BH, rows, d);
  CHECK(l.dim == std::array<int64_t, 4>{BH, 1, rows, d});
  // every element's offset is the contiguous plane's bh rows d + r d + c
  for (int64_t b : {int64_t(0), BH - 1})
    for (int64_t r : {int64_t(0), int64_t(17), rows - 1})
      for (int64_t col : {int64_t(0), d - 1})
        CHECK(b * l.stride[0] + r * l.stride[2] + col * l.stride[3] == (b * rows + r) * d + col);
  CHECK(l.stride[1] == rows * d);  // the unit head dim: any stride, this one is packed BHSD's
  const ha::Layout s = ha::stats_layout(BH, rows);
  CHECK(s.dim == std::array<int64_t, 4>{BH, 1, rows, 1});
  CHECK(s.stride == std::array<int64_t, 4>{rows, rows, 1, 1});  // packed: what cuDNN before 9.26 reads back
}

TEST_CASE("cuDNN attention graphs are cached per device, direction, dtype, shape, causal flag, scale and dropout",
          "[cuda][rules][attention]") {
  const ha::Key a{0, false, reel::DType::bf16, 6, 1024, 1024, 64, true, 0.125f, 0.0f};
  ha::Key b = a;
  CHECK(a == b);
  CHECK_FALSE(a < b);
  CHECK_FALSE(b < a);
  for (int i = 0; i < 10; ++i) {
    ha::Key c = a;
    switch (i) {
      case 0: c.device = 1; break;
      case 1: c.backward = true; break;
      case 2: c.dtype = reel::DType::f16; break;
      case 3: c.BH = 12; break;
      case 4: c.L = 512; break;
      case 5: c.S = 2048; break;
      case 6: c.E = 128; break;
      case 7: c.causal = false; break;
      case 8: c.scale = 0.25f; break;
      default: c.dropout = 0.2f; break;
    }
    INFO("field " << i);
    CHECK_FALSE(c == a);
    CHECK((c < a) != (a < c));  // a strict order: one of the two
  }
}
