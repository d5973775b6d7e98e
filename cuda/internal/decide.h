// Decisions of the CUDA backend that need no GPU: which library versions work together,
// when a cuBLASLt epilogue or a fused cuDNN call is used or falls back, how much workspace
// cuDNN's algorithm search may take, which tensors cuDNN's descriptors can hold, and
// whether REEL_CUDA_SYNC asks for a check after every launch. Pure functions of plain
// values, so that reel_tests checks each rule on a machine without a GPU (test/
// test_cuda_rules.cpp) and the backend only feeds them what the libraries report.
// Internal to cuda/; it needs the cuBLAS and cuDNN headers for their enums only.
#pragma once
#include <cublas_api.h>
#include <cudnn.h>

#include <algorithm>
#include <climits>
#include <cstddef>
#include <cstdint>
#include <string>

namespace reel::cuda::decide {

// ---- versions: CUDA's are 1000 major + 10 minor (13000 = 13.0), cuDNN's and cuBLAS's
// 10000 major + 100 minor + patch (91900 = 9.19.0).
inline std::string cuda_version_str(long v) { return std::to_string(v / 1000) + "." + std::to_string(v % 1000 / 10); }
inline std::string lib_version_str(long v) {
  return std::to_string(v / 10000) + "." + std::to_string(v % 10000 / 100) + "." + std::to_string(v % 100);
}

// "" when a driver supporting CUDA `driver` can run the CUDA `runtime` reel was built with.
// Within a major version, an older driver runs a newer runtime (CUDA's minor version
// compatibility: reel ships sm_90 machine code, no PTX JIT needed on H100/H200); across
// majors it cannot. driver 0: no driver at all.
inline std::string driver_problem(int driver, int runtime) {
  if (driver == 0)
    return "no NVIDIA driver (libcuda.so.1) is loaded; install the NVIDIA driver for CUDA " +
           cuda_version_str(runtime) + " or newer";
  if (driver / 1000 >= runtime / 1000) return "";
  return "the NVIDIA driver supports CUDA " + cuda_version_str(driver) + ", but reel was built with the CUDA " +
         cuda_version_str(runtime) + " runtime: install a driver for CUDA " + std::to_string(runtime / 1000) +
         ".x (CUDA 13 needs driver 580 or newer), or build reel with the CUDA " +
         std::to_string(driver / 1000) + " toolkit";
}

// "" when a library loaded at run time (`lib` = "cuDNN" or "cuBLAS", version `loaded`, built
// for CUDA `loaded_cudart`) can serve reel, built against its headers `built` and CUDA
// runtime `cudart`. The CUDA major must match (a cuDNN for CUDA 12 under a CUDA 13 reel
// fails late, with opaque statuses); the library's major must match its headers' (ABI) and
// it must not be older than them (symbols and enums reel uses may be missing).
inline std::string library_problem(const char* lib, long loaded, long loaded_cudart, long built, int cudart) {
  std::string want = std::string(lib) + " " + std::to_string(built / 10000) + " for CUDA " +
                     std::to_string(cudart / 1000) + ".x";
  std::string hint = std::string(lib) == "cuDNN"
                         ? " (pip: nvidia-cudnn-cu" + std::to_string(cudart / 1000) + "; Debian/Ubuntu: libcudnn" +
                               std::to_string(built / 10000) + "-cuda-" + std::to_string(cudart / 1000) +
                               "; then pass its folder to scripts/gpu-check.sh or CUDNN_ROOT and LD_LIBRARY_PATH)"
                         : " (the one of the CUDA toolkit reel was built with: put its lib64 first in "
                           "LD_LIBRARY_PATH)";
  if (loaded_cudart / 1000 != cudart / 1000)
    return std::string(lib) + " " + lib_version_str(loaded) + " was loaded, built for CUDA " +
           cuda_version_str(loaded_cudart) + ", but reel uses the CUDA " + cuda_version_str(cudart) +
           " runtime: install " + want + hint;
  if (loaded / 10000 != built / 10000 || loaded < built)
    return std::string(lib) + " " + lib_version_str(loaded) + " was loaded, but reel was compiled against " + lib +
           " " + lib_version_str(built) + "'s headers and needs that version or a newer one of the same major: "
           "install " + want + hint;
  return "";
}

// ---- cuBLASLt epilogues (bias, relu, bias + relu)
// cuBLASLt reads the bias vector with 16-byte loads: a bias that is a view into a larger
// buffer at an odd offset runs through the unfused path instead.
inline bool bias_epilogue_aligned(const void* bias) { return reinterpret_cast<uintptr_t>(bias) % 16 == 0; }

enum class Heuristic { use, unfused, no_algorithm, error };
// What a cuBLASLt heuristic query's outcome means. With an epilogue, any failure (a
// status, or no algorithm) means "this epilogue is unsupported here": the plain product
// runs and the bias and relu follow as kernels. Without one, no algorithm is a clear
// error of its own, and any other status is reported as it is.
inline Heuristic heuristic_outcome(cublasStatus_t status, int found, bool epilogue) {
  if (status == CUBLAS_STATUS_SUCCESS && found > 0) return Heuristic::use;
  if (epilogue) return Heuristic::unfused;
  if (status == CUBLAS_STATUS_SUCCESS || status == CUBLAS_STATUS_NOT_SUPPORTED) return Heuristic::no_algorithm;
  return Heuristic::error;
}
// A fused product that cuBLASLt refuses at execution (nothing ran) falls back like a
// heuristic failure; any other status is an error.
inline bool fused_matmul_refused(cublasStatus_t status) {
  return status == CUBLAS_STATUS_NOT_SUPPORTED || status == CUBLAS_STATUS_INVALID_VALUE;
}

// ---- cuDNN's fused convolution + bias + activation
// cudnnConvolutionBiasActivationForward runs the IDENTITY activation only with the
// IMPLICIT_PRECOMP_GEMM algorithm (cuDNN's documentation); other algorithms take the
// unfused path without asking.
inline bool fused_conv_allowed(bool relu, cudnnConvolutionFwdAlgo_t algo) {
  return relu || algo == CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM;
}
// Whether a status of the fused call means "not this combination" (fall back to the
// convolution and kernels, and remember it for this activation); any other status is an
// error to report. cuDNN 9 adds sub-codes to each category (3000 NOT_SUPPORTED, 3001...).
inline bool fused_conv_refused(cudnnStatus_t status) {
  int category = int(status) / 1000 * 1000;
  return category == CUDNN_STATUS_NOT_SUPPORTED || category == CUDNN_STATUS_BAD_PARAM;
}

// ---- cuDNN math types for float32 and float64 (conv and RNN)
// CUDNN_DEFAULT_MATH lets cuDNN round float32 operands to TF32 on Ampere and newer (its
// documentation: only CUDNN_FMA_MATH forbids it), which put the RNNs 2e-4 to 1e-3 away
// from the CPU. TF32 off (reel's default, cuda::set_allow_tf32): FMA math, as PyTorch
// with torch.backends.cudnn.allow_tf32 = False. float64 has no tensor-core path to forbid.
inline cudnnMathType_t float_math(bool f32, bool tf32) {
  if (!f32) return CUDNN_DEFAULT_MATH;
  return tf32 ? CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION : CUDNN_FMA_MATH;
}

// ---- cuDNN's algorithm search
// The workspace the search may take: the largest any candidate wants, at most `cap` and
// half of what is free. Free counts the device's free memory and what the pool holds
// without using it (freed tensors kept for reuse: the pool hands it out again, and trims
// it when the driver runs short); without the latter a process that has trained a while
// sees little "free" memory, and late shapes get slow algorithms cached for good.
inline size_t search_budget(size_t wanted, size_t cap, size_t device_free, size_t pool_reserved,
                            size_t pool_used) {
  size_t idle = pool_reserved > pool_used ? pool_reserved - pool_used : 0;
  return std::min({wanted, cap, (device_free + idle) / 2});
}

// ---- cuDNN's descriptors hold sizes and strides as int: "" when a tensor [n, c, h, w]
// fits (its element count, hence every stride, at most INT_MAX), else why not.
inline std::string descriptor_problem(const char* what, int64_t n, int64_t c, int64_t h, int64_t w) {
  int64_t per_item = c * h * w;
  if (per_item <= INT_MAX && (n == 0 || per_item == 0 || n <= INT_MAX / per_item)) return "";
  std::string shape =
      "[" + std::to_string(n) + ", " + std::to_string(c) + ", " + std::to_string(h) + ", " + std::to_string(w) + "]";
  if (per_item > INT_MAX)
    return std::string(what) + " " + shape + " has " + std::to_string(per_item) +
           " elements per image, more than cuDNN's descriptors hold (2^31 - 1)";
  return std::string(what) + " " + shape + " has " + std::to_string(n * per_item) +
         " elements, more than cuDNN's descriptors hold (2^31 - 1): split the batch into calls of at most " +
         std::to_string(INT_MAX / per_item) + " images";
}

// ---- REEL_CUDA_SYNC: set and neither empty nor "0"
inline bool sync_mode_from_env(const char* value) { return value && *value && std::string(value) != "0"; }

}  // namespace reel::cuda::decide
