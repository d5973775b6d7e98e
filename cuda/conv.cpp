// 2-D convolution through cuDNN, NCHW or (REEL_CUDA_CHANNELS_LAST=on, f16/bf16) NHWC: forward (with bias and relu fused by
// cudnnConvolutionBiasActivationForward), backward data and backward filter; the bias
// gradient is a segmented reduction (reduce.cu). f32 and f64 as on the CPU; f16 and bf16
// (autocast) on tensor cores with f32 accumulation, data, filter and output of one dtype
// (cuDNN's legacy API has no mixed configurations: cuda/low_precision.cpp converts).
//
// Algorithms are chosen by measurement (cudnnFind*AlgorithmEx, which runs every
// candidate once on the real buffers and so waits for the GPU: counted as a host
// sync) the first time a shape is seen, and cached per shape with the descriptors, so
// a training step pays for neither. Without TF32 (the default) only FMA-math
// algorithms run, so float32 results round like the CPU's.
// A convolution whose kernel covers the whole (unpadded) input is a matrix product:
// out [N, O] = x [N, C*H*W] w^T, and its gradients are products too; those go to
// cuBLASLt (matmul.cpp) instead of cuDNN.
// Layout (internal/channels_last.h): each call describes x, y and the filter in the layout of
// the tensor it writes; NHWC takes the filter as [O, kh, kw, I], a copy of the weight.
// Floor: compute (the FP32 pipes, or tensor cores with TF32 or halves).
#include <cudnn.h>
#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <limits>
#include <map>

#include "internal/allocator.h"
#include "internal/backend.h"
#include "internal/channels_last.h"
#include "internal/decide.h"
#include "internal/dnn.h"
#include "internal/graph.h"
#include "cuda.h"

namespace reel::cuda {

namespace {

constexpr size_t kSearchWorkspaceCap = size_t(1) << 30;
constexpr const char* kSearchInCapture =
    "would run cuDNN's algorithm search for a shape not seen before (it waits for the GPU); run the step once "
    "before capturing it (the warm-up rule of cuda::Graph)";

using Key = std::array<int64_t, 17>;
using channels_last::Layout;

// REEL_CUDA_CHANNELS_LAST: whether f16/bf16 activations are kept NHWC (CudaBackend::channels_last)
EnvSwitch<channels_last::Path> g_channels_last("REEL_CUDA_CHANNELS_LAST", channels_last::path_from_env,
                                               channels_last::invalid_path_message, channels_last::Path::invalid);
std::atomic<uint64_t> g_nhwc_convolutions{0};

// One shape's descriptors and, per direction, the algorithm found for it.
struct Plan {
  cudnnTensorDescriptor_t x = nullptr, y = nullptr, bias = nullptr;
  cudnnFilterDescriptor_t w = nullptr;
  cudnnConvolutionDescriptor_t conv = nullptr;
  cudnnActivationDescriptor_t relu = nullptr, identity = nullptr;
  cudnnMathType_t math = CUDNN_DEFAULT_MATH;
  bool has_fwd = false, has_bwd_data = false, has_bwd_filter = false;
  cudnnConvolutionFwdAlgo_t fwd{};
  cudnnConvolutionBwdDataAlgo_t bwd_data{};
  cudnnConvolutionBwdFilterAlgo_t bwd_filter{};
  size_t fwd_ws = 0, bwd_data_ws = 0, bwd_filter_ws = 0;
  // cudnnConvolutionBiasActivationForward has not refused this shape with [relu]
  // (CUDNN_ACTIVATION_RELU) / [!relu] (IDENTITY): remembered per activation, so a refused
  // identity does not turn off the fused relu, which cuDNN runs with more algorithms.
  bool fused_ok[2] = {true, true};
};
}  // namespace

struct ConvCache {
  std::mutex mu;  // cuDNN handles are not safe for two threads at once
  std::map<Key, Plan> plans;
};

namespace {
struct Shapes {
  int n, c, h, w, o, kh, kw, oh, ow;
};

int to_int(int64_t v, const char* what) {
  if (v > std::numeric_limits<int>::max())
    throw Error(fmt::format("conv2d: {} {} exceeds what cuDNN's descriptors hold", what, v));
  return int(v);
}

// cuDNN's 4-d descriptors hold sizes and strides as int: a tensor of 2^31 elements or more
// would wrap (a silent wrong result or an opaque BAD_PARAM). Refused here, naming it.
void expect_descriptor_fits(const char* what, const Tensor& t) {
  std::string problem =
      decide::descriptor_problem(what, t.shape()[0], t.shape()[1], t.shape()[2], t.shape()[3]);
  if (!problem.empty()) throw Error("conv2d: " + problem);
}

Shapes shapes_of(const Tensor& x, const Tensor& w, const Tensor& y) {
  expect_descriptor_fits("input", x);
  expect_descriptor_fits("weight", w);
  expect_descriptor_fits("output", y);
  return {to_int(x.shape()[0], "batch"), to_int(x.shape()[1], "channels"), to_int(x.shape()[2], "height"),
          to_int(x.shape()[3], "width"),  to_int(w.shape()[0], "filters"),  to_int(w.shape()[2], "kernel height"),
          to_int(w.shape()[3], "kernel width"), to_int(y.shape()[2], "output height"),
          to_int(y.shape()[3], "output width")};
}

cudnnDataType_t dnn_type(DType t) {
  switch (t) {
    case DType::f64: return CUDNN_DATA_DOUBLE;
    case DType::f16: return CUDNN_DATA_HALF;
    case DType::bf16: return CUDNN_DATA_BFLOAT16;
    default: return CUDNN_DATA_FLOAT;
  }
}

cudnnHandle_t handle(Context& ctx, ConvCache*& cache) {
  std::lock_guard<std::mutex> lock(ctx.mu);
  if (!ctx.dnn) {
    forbid_in_capture(ctx, "conv2d", "would create cuDNN's handle (the first convolution on this device); run the "
                                     "step once before capturing it (the warm-up rule of cuda::Graph)");
    cudnnHandle_t h = create_dnn_handle(ctx, "conv2d");
    ctx.conv_cache = new ConvCache();
    ctx.dnn = h;
  }
  cache = ctx.conv_cache;
  return ctx.dnn;
}

Plan& plan_for(ConvCache& cache, DType dt, const Shapes& s, const ConvParams& p, Layout layout) {
  bool tf32 = dt == DType::f32 && allow_tf32();
  Key key{int64_t(dt), tf32, s.n, s.c, s.h, s.w, s.o, s.kh, s.kw, p.stride[0], p.stride[1], p.padding[0],
          p.padding[1], p.dilation[0], p.dilation[1], p.groups, channels_last::key_slot(layout)};
  auto it = cache.plans.find(key);
  if (it != cache.plans.end()) return it->second;
  Plan pl;
  const char* op = "conv2d";
  cudnnDataType_t type = dnn_type(dt);
  check_dnn(cudnnCreateTensorDescriptor(&pl.x), op, "cudnnCreateTensorDescriptor");
  check_dnn(cudnnCreateTensorDescriptor(&pl.y), op, "cudnnCreateTensorDescriptor");
  check_dnn(cudnnCreateTensorDescriptor(&pl.bias), op, "cudnnCreateTensorDescriptor");
  check_dnn(cudnnCreateFilterDescriptor(&pl.w), op, "cudnnCreateFilterDescriptor");
  check_dnn(cudnnCreateConvolutionDescriptor(&pl.conv), op, "cudnnCreateConvolutionDescriptor");
  // the sizes are NCHW's in either format; NHWC's filter is [O, kh, kw, I]
  const cudnnTensorFormat_t format = layout == Layout::nhwc ? CUDNN_TENSOR_NHWC : CUDNN_TENSOR_NCHW;
  check_dnn(cudnnSetTensor4dDescriptor(pl.x, format, type, s.n, s.c, s.h, s.w), op, "x descriptor");
  check_dnn(cudnnSetTensor4dDescriptor(pl.y, format, type, s.n, s.o, s.oh, s.ow), op, "y descriptor");
  check_dnn(cudnnSetTensor4dDescriptor(pl.bias, CUDNN_TENSOR_NCHW, type, 1, s.o, 1, 1), op, "bias descriptor");
  check_dnn(cudnnSetFilter4dDescriptor(pl.w, type, format, s.o, to_int(s.c / p.groups, "channels"), s.kh, s.kw), op,
            "filter descriptor");
  check_dnn(cudnnSetConvolution2dDescriptor(pl.conv, int(p.padding[0]), int(p.padding[1]), int(p.stride[0]),
                                            int(p.stride[1]), int(p.dilation[0]), int(p.dilation[1]),
                                            CUDNN_CROSS_CORRELATION, is_low_precision(dt) ? CUDNN_DATA_FLOAT : type),
            op, "convolution descriptor");
  check_dnn(cudnnSetConvolutionGroupCount(pl.conv, int(p.groups)), op, "cudnnSetConvolutionGroupCount");
  // FMA math forbids TF32: float32 results then round as the CPU's do. The halves are
  // there for the tensor cores.
  pl.math = dt == DType::f32 && !tf32 ? CUDNN_FMA_MATH
            : is_low_precision(dt)    ? CUDNN_TENSOR_OP_MATH
                                      : CUDNN_DEFAULT_MATH;
  check_dnn(cudnnSetConvolutionMathType(pl.conv, pl.math), op, "cudnnSetConvolutionMathType");
  check_dnn(cudnnCreateActivationDescriptor(&pl.relu), op, "cudnnCreateActivationDescriptor");
  check_dnn(cudnnSetActivationDescriptor(pl.relu, CUDNN_ACTIVATION_RELU, CUDNN_NOT_PROPAGATE_NAN, 0.0), op,
            "relu descriptor");
  check_dnn(cudnnCreateActivationDescriptor(&pl.identity), op, "cudnnCreateActivationDescriptor");
  check_dnn(cudnnSetActivationDescriptor(pl.identity, CUDNN_ACTIVATION_IDENTITY, CUDNN_NOT_PROPAGATE_NAN, 0.0), op,
            "identity descriptor");
  return cache.plans.emplace(key, pl).first->second;
}

// Whether a measured algorithm may run: no tensor-core math unless TF32 is allowed.
bool acceptable(const Plan& pl, cudnnStatus_t status, cudnnMathType_t math) {
  if (status != CUDNN_STATUS_SUCCESS) return false;
  if (pl.math == CUDNN_FMA_MATH)
    return math != CUDNN_TENSOR_OP_MATH && math != CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION;
  return true;
}

// The largest workspace any algorithm asks for, within what the search may take: the
// device's free memory counts what our pool holds unused (decide::search_budget).
size_t search_budget(Context& ctx, size_t wanted) {
  size_t free_bytes = 0, total = 0;
  if (cudaMemGetInfo(&free_bytes, &total) != cudaSuccess) {
    (void)cudaGetLastError();
    return std::min(wanted, kSearchWorkspaceCap);
  }
  uint64_t reserved = 0, used = 0;
  if (cudaMemPoolGetAttribute(ctx.pool, cudaMemPoolAttrReservedMemCurrent, &reserved) != cudaSuccess ||
      cudaMemPoolGetAttribute(ctx.pool, cudaMemPoolAttrUsedMemCurrent, &used) != cudaSuccess) {
    (void)cudaGetLastError();
    reserved = used = 0;
  }
  return decide::search_budget(wanted, kSearchWorkspaceCap, free_bytes, size_t(reserved), size_t(used));
}

[[noreturn]] void no_algorithm(const char* direction, const Shapes& s, const ConvParams& p) {
  throw Error(fmt::format("conv2d: cuDNN found no usable {} algorithm for x [{}, {}, {}, {}], w [{}, {}, {}, {}], "
                          "stride {}x{}, padding {}x{}, dilation {}x{}, groups {}",
                          direction, s.n, s.c, s.h, s.w, s.o, s.c / p.groups, s.kh, s.kw, p.stride[0], p.stride[1],
                          p.padding[0], p.padding[1], p.dilation[0], p.dilation[1], p.groups));
}

void find_forward(Context& ctx, cudnnHandle_t h, Plan& pl, const Tensor& x, const Tensor& w, const Tensor& y,
                  const Shapes& s, const ConvParams& p) {
  forbid_in_capture(ctx, "conv2d", kSearchInCapture);
  size_t wanted = 0;
  for (int a = 0; a < CUDNN_CONVOLUTION_FWD_ALGO_COUNT; ++a) {
    size_t ws = 0;
    if (cudnnGetConvolutionForwardWorkspaceSize(h, pl.x, pl.w, pl.conv, pl.y, cudnnConvolutionFwdAlgo_t(a), &ws) ==
        CUDNN_STATUS_SUCCESS)
      wanted = std::max(wanted, ws);
  }
  DeviceBuffer ws(ctx, search_budget(ctx, wanted));
  cudnnConvolutionFwdAlgoPerf_t perf[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
  int found = 0;
  count_host_sync();
  check_dnn(cudnnFindConvolutionForwardAlgorithmEx(h, pl.x, x.data_ptr(), pl.w, w.data_ptr(), pl.conv, pl.y,
                                                   y.data_ptr(), CUDNN_CONVOLUTION_FWD_ALGO_COUNT, &found, perf,
                                                   ws.get(), ws.size()),
            "conv2d", "cudnnFindConvolutionForwardAlgorithmEx");
  for (int i = 0; i < found; ++i) {  // sorted fastest first
    if (!acceptable(pl, perf[i].status, perf[i].mathType)) continue;
    pl.fwd = perf[i].algo;
    // what the call itself asks may exceed what the search reported (seen under compute-sanitizer
    // with NHWC halves on the H200: BAD_PARAM "workSpaceSizeInBytes < requiredWorkspace")
    size_t need = 0;
    if (cudnnGetConvolutionForwardWorkspaceSize(h, pl.x, pl.w, pl.conv, pl.y, pl.fwd, &need) != CUDNN_STATUS_SUCCESS)
      need = 0;
    pl.fwd_ws = std::max(perf[i].memory, need);
    pl.has_fwd = true;
    return;
  }
  no_algorithm("forward", s, p);
}

void find_backward_data(Context& ctx, cudnnHandle_t h, Plan& pl, const Tensor& gx, const Tensor& gy,
                        const Tensor& w, const Shapes& s, const ConvParams& p) {
  forbid_in_capture(ctx, "conv2d_backward", kSearchInCapture);
  size_t wanted = 0;
  for (int a = 0; a < CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT; ++a) {
    size_t ws = 0;
    if (cudnnGetConvolutionBackwardDataWorkspaceSize(h, pl.w, pl.y, pl.conv, pl.x, cudnnConvolutionBwdDataAlgo_t(a),
                                                     &ws) == CUDNN_STATUS_SUCCESS)
      wanted = std::max(wanted, ws);
  }
  DeviceBuffer ws(ctx, search_budget(ctx, wanted));
  cudnnConvolutionBwdDataAlgoPerf_t perf[CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT];
  int found = 0;
  count_host_sync();
  check_dnn(cudnnFindConvolutionBackwardDataAlgorithmEx(h, pl.w, w.data_ptr(), pl.y, gy.data_ptr(), pl.conv, pl.x,
                                                        gx.data_ptr(), CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT, &found,
                                                        perf, ws.get(), ws.size()),
            "conv2d_backward", "cudnnFindConvolutionBackwardDataAlgorithmEx");
  for (int i = 0; i < found; ++i) {
    if (!acceptable(pl, perf[i].status, perf[i].mathType)) continue;
    pl.bwd_data = perf[i].algo;
    size_t need = 0;  // as for the forward: the call's own requirement, where larger
    if (cudnnGetConvolutionBackwardDataWorkspaceSize(h, pl.w, pl.y, pl.conv, pl.x, pl.bwd_data, &need) !=
        CUDNN_STATUS_SUCCESS)
      need = 0;
    pl.bwd_data_ws = std::max(perf[i].memory, need);
    pl.has_bwd_data = true;
    return;
  }
  no_algorithm("backward-data", s, p);
}

void find_backward_filter(Context& ctx, cudnnHandle_t h, Plan& pl, const Tensor& gw, const Tensor& gy,
                          const Tensor& x, const Shapes& s, const ConvParams& p) {
  forbid_in_capture(ctx, "conv2d_backward", kSearchInCapture);
  size_t wanted = 0;
  for (int a = 0; a < CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT; ++a) {
    size_t ws = 0;
    if (cudnnGetConvolutionBackwardFilterWorkspaceSize(h, pl.x, pl.y, pl.conv, pl.w,
                                                       cudnnConvolutionBwdFilterAlgo_t(a), &ws) == CUDNN_STATUS_SUCCESS)
      wanted = std::max(wanted, ws);
  }
  DeviceBuffer ws(ctx, search_budget(ctx, wanted));
  cudnnConvolutionBwdFilterAlgoPerf_t perf[CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT];
  int found = 0;
  count_host_sync();
  check_dnn(cudnnFindConvolutionBackwardFilterAlgorithmEx(h, pl.x, x.data_ptr(), pl.y, gy.data_ptr(), pl.conv, pl.w,
                                                          gw.data_ptr(), CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT,
                                                          &found, perf, ws.get(), ws.size()),
            "conv2d_backward", "cudnnFindConvolutionBackwardFilterAlgorithmEx");
  for (int i = 0; i < found; ++i) {
    if (!acceptable(pl, perf[i].status, perf[i].mathType)) continue;
    pl.bwd_filter = perf[i].algo;
    size_t need = 0;  // as for the forward: the call's own requirement, where larger
    if (cudnnGetConvolutionBackwardFilterWorkspaceSize(h, pl.x, pl.y, pl.conv, pl.w, pl.bwd_filter, &need) !=
        CUDNN_STATUS_SUCCESS)
      need = 0;
    pl.bwd_filter_ws = std::max(perf[i].memory, need);
    pl.has_bwd_filter = true;
    return;
  }
  no_algorithm("backward-filter", s, p);
}

// A kernel that covers the whole unpadded input: one output pixel per image and filter.
bool is_dense(const Tensor& x, const Tensor& w, const ConvParams& p) {
  int64_t kh = w.shape()[2], kw = w.shape()[3];
  return p.groups == 1 && p.padding[0] == 0 && p.padding[1] == 0 && kh == x.shape()[2] && kw == x.shape()[3] &&
         (p.dilation[0] == 1 || kh == 1) && (p.dilation[1] == 1 || kw == 1);
}

// [N, C, H, W] contiguous as the matrix [1, N, C*H*W]
Tensor as_rows(const Tensor& t) {
  int64_t n = t.shape()[0], k = t.numel() / std::max<int64_t>(n, 1);
  return view_of(t, {1, n, k}, {n * k, k, 1}, t.offset());
}
// [R, C, H, W] contiguous as the transposed matrix [1, C*H*W, R]
Tensor as_cols(const Tensor& t) {
  int64_t r = t.shape()[0], k = t.numel() / std::max<int64_t>(r, 1);
  return view_of(t, {1, k, r}, {r * k, 1, k}, t.offset());
}

// through the registered backend, whose low-precision layer reduces bf16 gy into an f32 gb
void bias_grad(const Tensor& gb, const Tensor& gy) {
  Tensor g4 = view_of(gb, {1, gb.numel(), 1, 1}, {gb.numel(), gb.strides()[0], 1, 1}, gb.offset());
  backend_for(gy.device()).reduce(ReduceOp::sum, g4, gy, {0, 2, 3});
}

// out/gx/gw and the two operands: one floating dtype
void expect_float(const char* op, const Tensor& t, const Tensor& a, const Tensor& b) {
  bool ok = t.dtype() == DType::f32 || t.dtype() == DType::f64 || is_low_precision(t.dtype());
  if (!ok || a.dtype() != t.dtype() || b.dtype() != t.dtype())
    throw Error(fmt::format("{}: expected f32, f64, f16 or bf16 tensors of one dtype on CUDA, got {}, {} and {}", op,
                            dtype_name(t.dtype()), dtype_name(a.dtype()), dtype_name(b.dtype())));
}

// The layout of a call that writes `t` (internal/channels_last.h)
Layout layout_writing(const Tensor& t) {
  const bool nhwc = t.dim() == 4 && is_channels_last(t.shape(), t.strides());
  return channels_last::conv_layout(nhwc, t.dtype());
}
// t dense in `layout`: t itself where it already is, else a copy on its device
Tensor laid_out(const Tensor& t, Layout layout) {
  if (layout == Layout::nchw) return contiguous_copy(t);
  if (channels_last::packed_nhwc(t.shape(), t.strides())) return t;
  CudaBackend& be = backend_of(t);
  Tensor c = view_of(scratch(be.ctx(), {t.numel()}, t.dtype()), t.shape(), channels_last_strides(t.shape()), 0);
  be.copy_same_device(c, t);
  return c;
}
// Where a call writes `t`: t itself when it lies dense in `layout`, else a scratch tensor in
// that layout whose values write_back() copies into t (an f64 output laid out channels-last,
// a strided view handed in by a caller)
struct Written {
  Tensor t, target;
  Written(const Tensor& out, Layout layout) : t(out) {
    const bool dense = layout == Layout::nhwc ? channels_last::packed_nhwc(out.shape(), out.strides())
                                              : out.is_contiguous();
    if (dense) return;
    target = out;
    CudaBackend& be = backend_of(out);
    t = layout == Layout::nhwc ? view_of(scratch(be.ctx(), {out.numel()}, out.dtype()), out.shape(),
                                         channels_last_strides(out.shape()), 0)
                               : scratch(be.ctx(), out.shape(), out.dtype());
  }
  void write_back() {
    if (target.defined()) backend_of(target).copy_same_device(target, t);
  }
};
}  // namespace

void CudaBackend::conv2d_forward(const Tensor& out_, const Tensor& x_, const Tensor& w_, const Tensor& bias_,
                                 const ConvParams& p, bool relu) {
  expect_here("conv2d", {&out_, &x_, &w_, &bias_});
  expect_float("conv2d", out_, x_, w_);
  if (out_.numel() == 0) return;
  // a dense convolution's y [N, O, 1, 1] is one memory in both layouts: x's decides
  const bool dense = is_dense(x_, w_, p);
  const Layout layout = layout_writing(dense ? x_ : out_);
  Tensor x = laid_out(x_, layout), w = laid_out(w_, layout), bias = bias_.defined() ? contiguous_copy(bias_) : bias_;
  Written written(out_, layout);
  const Tensor& out = written.t;
  if (layout == Layout::nhwc) g_nhwc_convolutions.fetch_add(1, std::memory_order_relaxed);
  if (dense) {  // out [N, O] = x [N, CHW] @ w [O, CHW]^T (+ bias) (relu); NHWC: HWC and [O, kh, kw, I] alike
    matmul(view_of(out, {1, out.shape()[0], out.shape()[1]}, {0, out.shape()[1], 1}, out.offset()), as_rows(x),
           as_cols(w), bias, relu);
    written.write_back();
    return;
  }
  Context& c = ctx();
  Shapes s = shapes_of(x, w, out);
  ConvCache* cache = nullptr;
  cudnnHandle_t h = handle(c, cache);
  std::unique_lock<std::mutex> lock(cache->mu);
  Plan& pl = plan_for(*cache, out.dtype(), s, p, layout);
  if (!pl.has_fwd) find_forward(c, h, pl, x, w, out, s, p);
  DeviceBuffer ws(c, pl.fwd_ws);
  double one64 = 1, zero64 = 0;
  float one32 = 1, zero32 = 0;
  bool f64 = out.dtype() == DType::f64;
  const void* one = f64 ? static_cast<const void*>(&one64) : &one32;
  const void* zero = f64 ? static_cast<const void*>(&zero64) : &zero32;
  // the halves' bias (often f32 beside a bf16 output) is added after, by kernels
  bool fusable = bias.defined() && bias.dtype() == out.dtype() && !is_low_precision(out.dtype());
  if (fusable && pl.fused_ok[relu] && decide::fused_conv_allowed(relu, pl.fwd)) {
    // y = act(conv(x) + bias); alpha2 = 0, so z (given as y) is not read
    cudnnStatus_t st = cudnnConvolutionBiasActivationForward(
        h, one, pl.x, x.data_ptr(), pl.w, w.data_ptr(), pl.conv, pl.fwd, ws.get(), ws.size(), zero, pl.y,
        out.data_ptr(), pl.bias, bias.data_ptr(), relu ? pl.relu : pl.identity, pl.y, out.data_ptr());
    if (st == CUDNN_STATUS_SUCCESS) {
      sync_if_debugging("conv2d");
      lock.unlock();
      written.write_back();
      return;
    }
    // cuDNN refuses some algorithm/activation pairs (NOT_SUPPORTED or BAD_PARAM, by version): this
    // shape and activation then run as a convolution and kernels from now on. Any other status
    // (an execution failure) is an error, not a reason to run the convolution again.
    if (!decide::fused_conv_refused(st)) check_dnn(st, "conv2d", "cudnnConvolutionBiasActivationForward");
    pl.fused_ok[relu] = false;
  }
  check_dnn(cudnnConvolutionForward(h, one, pl.x, x.data_ptr(), pl.w, w.data_ptr(), pl.conv, pl.fwd, ws.get(),
                                    ws.size(), zero, pl.y, out.data_ptr()),
            "conv2d", "cudnnConvolutionForward");
  sync_if_debugging("conv2d");
  lock.unlock();
  Backend& be = backend_for(out.device());  // the low-precision layer for f16/bf16
  if (bias.defined())
    be.binary(BinaryOp::add, out, out, view_of(bias, out.shape(), {0, bias.strides()[0], 0, 0}, bias.offset()));
  if (relu) be.unary(UnaryOp::relu, out, out, 0, 0);
  written.write_back();
}

void CudaBackend::conv2d_backward_data(const Tensor& gx_, const Tensor& gy_, const Tensor& w_, const ConvParams& p) {
  expect_here("conv2d_backward", {&gx_, &gy_, &w_});
  expect_float("conv2d_backward", gx_, gy_, w_);
  if (gx_.numel() == 0) return;
  if (gy_.numel() == 0 || w_.numel() == 0) {
    fill(gx_, 0.0);
    return;
  }
  const Layout layout = layout_writing(gx_);
  Tensor gy = laid_out(gy_, layout), w = laid_out(w_, layout);
  Written written(gx_, layout);
  const Tensor& gx = written.t;
  if (layout == Layout::nhwc) g_nhwc_convolutions.fetch_add(1, std::memory_order_relaxed);
  if (is_dense(gx, w, p)) {  // gx [N, CHW] = gy [N, O] @ w [O, CHW]
    int64_t o = w.shape()[0];
    matmul(as_rows(gx), as_rows(gy), view_of(w, {1, o, w.numel() / o}, {0, w.numel() / o, 1}, w.offset()), Tensor(),
           false);
    written.write_back();
    return;
  }
  Context& c = ctx();
  Shapes s = shapes_of(gx, w, gy);
  ConvCache* cache = nullptr;
  cudnnHandle_t h = handle(c, cache);
  std::unique_lock<std::mutex> lock(cache->mu);
  Plan& pl = plan_for(*cache, gx.dtype(), s, p, layout);
  if (!pl.has_bwd_data) find_backward_data(c, h, pl, gx, gy, w, s, p);
  DeviceBuffer ws(c, pl.bwd_data_ws);
  double one64 = 1, zero64 = 0;
  float one32 = 1, zero32 = 0;
  bool f64 = gx.dtype() == DType::f64;
  check_dnn(cudnnConvolutionBackwardData(h, f64 ? static_cast<const void*>(&one64) : &one32, pl.w, w.data_ptr(), pl.y,
                                         gy.data_ptr(), pl.conv, pl.bwd_data, ws.get(), ws.size(),
                                         f64 ? static_cast<const void*>(&zero64) : &zero32, pl.x, gx.data_ptr()),
            "conv2d_backward", "cudnnConvolutionBackwardData");
  sync_if_debugging("conv2d_backward (data)");
  lock.unlock();
  written.write_back();
}

void CudaBackend::conv2d_backward_weight(const Tensor& gw_, const Tensor& gb, const Tensor& gy_, const Tensor& x_,
                                         const ConvParams& p) {
  expect_here("conv2d_backward", {&gw_, &gb, &gy_, &x_});
  expect_float("conv2d_backward", gw_, gy_, x_);
  // gw is the parameter's [O, I, kh, kw]; in NHWC cuDNN writes [O, kh, kw, I], copied into it
  const Layout layout = layout_writing(x_);
  Tensor gy = laid_out(gy_, layout), x = laid_out(x_, layout);
  if (gb.defined() && gb.numel()) bias_grad(gb, gy);
  if (gw_.numel() == 0) return;
  if (gy.numel() == 0 || x.numel() == 0) {
    fill(gw_, 0.0);
    return;
  }
  Written written(gw_, layout);
  const Tensor& gw = written.t;
  if (layout == Layout::nhwc) g_nhwc_convolutions.fetch_add(1, std::memory_order_relaxed);
  if (is_dense(x, gw, p)) {  // gw [O, CHW] = gy^T [O, N] @ x [N, CHW]
    int64_t o = gw.shape()[0], n = gy.shape()[0];
    matmul(view_of(gw, {1, o, gw.numel() / o}, {0, gw.numel() / o, 1}, gw.offset()),
           view_of(gy, {1, o, n}, {0, 1, o}, gy.offset()), as_rows(x), Tensor(), false);
    written.write_back();
    return;
  }
  Context& c = ctx();
  Shapes s = shapes_of(x, gw, gy);
  ConvCache* cache = nullptr;
  cudnnHandle_t h = handle(c, cache);
  std::unique_lock<std::mutex> lock(cache->mu);
  Plan& pl = plan_for(*cache, gw.dtype(), s, p, layout);
  if (!pl.has_bwd_filter) find_backward_filter(c, h, pl, gw, gy, x, s, p);
  DeviceBuffer ws(c, pl.bwd_filter_ws);
  double one64 = 1, zero64 = 0;
  float one32 = 1, zero32 = 0;
  bool f64 = gw.dtype() == DType::f64;
  check_dnn(cudnnConvolutionBackwardFilter(h, f64 ? static_cast<const void*>(&one64) : &one32, pl.x, x.data_ptr(),
                                           pl.y, gy.data_ptr(), pl.conv, pl.bwd_filter, ws.get(), ws.size(),
                                           f64 ? static_cast<const void*>(&zero64) : &zero32, pl.w, gw.data_ptr()),
            "conv2d_backward", "cudnnConvolutionBackwardFilter");
  sync_if_debugging("conv2d_backward (weight)");
  lock.unlock();
  written.write_back();
}

bool CudaBackend::channels_last(DType dtype) const { return channels_last::keeps(g_channels_last.get(), dtype); }

void set_half_channels_last(bool on) { g_channels_last.set(on ? channels_last::Path::on : channels_last::Path::off); }
bool half_channels_last() { return g_channels_last.get() == channels_last::Path::on; }
uint64_t nhwc_convolutions() { return g_nhwc_convolutions.load(std::memory_order_relaxed); }

}  // namespace reel::cuda
