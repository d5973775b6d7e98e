// The CUDA backend's decisions that need no GPU (cuda/internal/decide.h, arg_reduce.h),
// checked on any machine: argmax/argmin's start value, library version compatibility,
// cuBLASLt and cuDNN fallbacks, the algorithm search's workspace budget, cuDNN's
// descriptor limits, REEL_CUDA_SYNC. The decide.h part needs the CUDA headers: CUDA builds.
#include <catch2/catch.hpp>

#include <cmath>
#include <limits>
#include <vector>

#include "../cuda/internal/arg_reduce.h"

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
