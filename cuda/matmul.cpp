// Batched matrix products through cuBLASLt: out[b] = a[b] @ w[b] (+ bias) (then relu),
// a [B,M,K], w [B,K,N], out [B,M,N] contiguous, bias [N]. f32 and f64 as on the CPU; f16 and
// bf16 operands (autocast) on tensor cores with f32 accumulation, writing their own dtype or f32.
//
// cuBLASLt is column-major: a row-major out [M,N] is the column-major matrix out^T, so
// we ask for out^T = w^T a^T. A row-major operand is then read untransposed and a
// transposed view (column-major storage) with the transpose flag: either way no copy.
// Only an operand whose rows and columns both step by more than one element is copied
// to contiguous first. A stride-0 batch (a broadcast weight) is a batch stride of 0.
// The bias (per column of out = per row of out^T) and the relu are cuBLASLt epilogues;
// where cuBLASLt does not run the epilogue (f64, some shapes with M, N or K = 1, a bias not
// 16-byte aligned: decide.h), they run as elementwise kernels after a plain product.
// TF32 only when cuda::set_allow_tf32(true): by default float32 matmuls round like the CPU's.
// The heuristic's choice is cached per shape, layout, alignment and epilogue, with its
// descriptors, so a training step makes one cuBLASLt call per product.
// Floor: compute (tensor cores with TF32 or f16/bf16, the FP32 pipes for plain f32).
#include <cublasLt.h>
#include <fmt/format.h>

#include <map>
#include <tuple>

#include "internal/allocator.h"
#include "internal/backend.h"
#include "internal/decide.h"
#include "internal/graph.h"
#include "cuda.h"

namespace reel::cuda {

namespace {
constexpr size_t kWorkspaceBytes = size_t(32) << 20;  // what cuBLAS recommends for Hopper

void check_lt(cublasStatus_t s, const char* what) {
  if (s != CUBLAS_STATUS_SUCCESS) fail_cublas("matmul", int(s), what);
}

// A [R, C] matrix of one batch element as cuBLASLt reads it (column-major).
struct Operand {
  Tensor t;  // the view, or a contiguous copy of it
  bool transposed = false;  // stored as the transpose of what the product needs
  int64_t rows = 0, cols = 0, ld = 0, batch_stride = 0;
};

// Operand `t` [B, R, C] (row-major view) as the column-major matrix t^T.
Operand prepare(const Tensor& t) {
  Operand o;
  o.t = t;
  int64_t R = t.shape()[1], C = t.shape()[2], sr = t.strides()[1], sc = t.strides()[2];
  // the stride of a size-1 dim is arbitrary: give it the value that makes the layout valid
  if (R == 1) sr = sc == 1 ? C : 1;
  if (C == 1) sc = sr == 1 ? R : 1;
  if (R == 1 && C == 1) sr = sc = 1;
  if (!(sc == 1 && sr >= C) && !(sr == 1 && sc >= R)) {
    o.t = contiguous_copy(t);
    sr = C;
    sc = 1;
  }
  if (sc == 1) {  // row-major [R, C] = column-major [C, R] with ld = sr: t^T as stored
    o.rows = C;
    o.cols = R;
    o.ld = std::max<int64_t>(sr, 1);
  } else {  // column-major [R, C] with ld = sc: t as stored, read transposed
    o.transposed = true;
    o.rows = R;
    o.cols = C;
    o.ld = std::max<int64_t>(sc, 1);
  }
  o.batch_stride = t.shape()[0] == 1 ? 0 : o.t.strides()[0];
  return o;
}

uint32_t alignment(const void* p) {
  uintptr_t v = uintptr_t(p);
  uint32_t a = 256;
  while (a > 1 && v % a) a >>= 1;
  return a;
}

using Key = std::tuple<int, bool, bool, bool, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t,
                       int64_t, int64_t, int, uint32_t, uint32_t, uint32_t>;

struct Plan {
  bool supported = false;
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t la = nullptr, lb = nullptr, ld = nullptr;
  cublasLtMatmulAlgo_t algo{};
};
}  // namespace

// Per device: cached plans, and the lock that serialises setting a cached descriptor's bias.
struct MatmulCache {
  std::mutex mu;
  std::map<Key, Plan> plans;
};

namespace {
cublasLtHandle_t handle(Context& ctx, MatmulCache*& cache) {
  std::lock_guard<std::mutex> lock(ctx.mu);
  if (!ctx.lt) {
    // The workspace must not become a graph allocation (replays re-create those).
    forbid_in_capture(ctx, "matmul", "would create cuBLASLt's handle and workspace (the first matmul on this "
                                     "device); run the step once before capturing it (the warm-up rule of cuda::Graph)");
    // The cuBLASLt found at run time must suit the headers and the CUDA runtime reel was built with.
    int runtime = 0;
    check(cudaRuntimeGetVersion(&runtime), "matmul", "cudaRuntimeGetVersion");
    std::string problem = decide::library_problem("cuBLAS", long(cublasLtGetVersion()),
                                                  long(cublasLtGetCudartVersion()), CUBLAS_VERSION, runtime);
    if (!problem.empty()) throw Error("matmul: " + problem);
    cublasLtHandle_t h = nullptr;
    check_lt(cublasLtCreate(&h), "cublasLtCreate");
    ctx.lt_workspace = device_alloc(ctx, kWorkspaceBytes);
    ctx.lt_workspace_bytes = kWorkspaceBytes;
    ctx.matmul_cache = new MatmulCache();
    ctx.lt = h;
  }
  cache = ctx.matmul_cache;
  return ctx.lt;
}

cublasLtMatrixLayout_t layout(cudaDataType_t type, int64_t rows, int64_t cols, int64_t ld, int64_t batch,
                              int64_t stride) {
  cublasLtMatrixLayout_t l = nullptr;
  check_lt(cublasLtMatrixLayoutCreate(&l, type, uint64_t(rows), uint64_t(cols), ld), "cublasLtMatrixLayoutCreate");
  int32_t count = int32_t(batch);
  check_lt(cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count, sizeof(count)),
           "cublasLtMatrixLayoutSetAttribute");
  check_lt(cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride, sizeof(stride)),
           "cublasLtMatrixLayoutSetAttribute");
  return l;
}

cudaDataType_t lt_type(DType t) {
  switch (t) {
    case DType::f64: return CUDA_R_64F;
    case DType::f16: return CUDA_R_16F;
    case DType::bf16: return CUDA_R_16BF;
    default: return CUDA_R_32F;
  }
}

// dt: the operands' dtype; out_dt: the output's (dt, or f32 from f16/bf16 operands)
Plan make_plan(cublasLtHandle_t lt, Context& ctx, DType dt, DType out_dt, bool tf32, const Operand& A,
               const Operand& B, int64_t m, int64_t n, int64_t k, int64_t batch, int64_t d_stride,
               cublasLtEpilogue_t epi, uint32_t align_a, uint32_t align_b, uint32_t align_d) {
  Plan p;
  cudaDataType_t type = lt_type(dt), out_type = lt_type(out_dt);
  cudaDataType_t scale_type = dt == DType::f64 ? CUDA_R_64F : CUDA_R_32F;  // f32 accumulation for the halves
  cublasComputeType_t compute = dt == DType::f64 ? CUBLAS_COMPUTE_64F
                                : tf32           ? CUBLAS_COMPUTE_32F_FAST_TF32
                                                 : CUBLAS_COMPUTE_32F;
  check_lt(cublasLtMatmulDescCreate(&p.desc, compute, scale_type), "cublasLtMatmulDescCreate");
  cublasOperation_t ta = A.transposed ? CUBLAS_OP_T : CUBLAS_OP_N, tb = B.transposed ? CUBLAS_OP_T : CUBLAS_OP_N;
  check_lt(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta)), "set TRANSA");
  check_lt(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb)), "set TRANSB");
  check_lt(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof(epi)), "set EPILOGUE");
  if (epi != CUBLASLT_EPILOGUE_DEFAULT) {
    // the bias is fused only in the output's dtype (matmul below)
    check_lt(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &out_type, sizeof(out_type)),
             "set BIAS_DATA_TYPE");
  }
  p.la = layout(type, A.rows, A.cols, A.ld, batch, A.batch_stride);
  p.lb = layout(type, B.rows, B.cols, B.ld, batch, B.batch_stride);
  p.ld = layout(out_type, m, n, m, batch, d_stride);
  (void)k;
  cublasLtMatmulPreference_t pref = nullptr;
  check_lt(cublasLtMatmulPreferenceCreate(&pref), "cublasLtMatmulPreferenceCreate");
  size_t ws = ctx.lt_workspace_bytes;
  check_lt(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws)),
           "set MAX_WORKSPACE_BYTES");
  // Views can start at any element: tell cuBLASLt the real alignment, or it may pick a kernel that assumes 256.
  for (auto [attr, value] : {std::pair{CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, align_a},
                             std::pair{CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, align_b},
                             std::pair{CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, align_d},
                             std::pair{CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, align_d}})
    check_lt(cublasLtMatmulPreferenceSetAttribute(pref, attr, &value, sizeof(value)), "set MIN_ALIGNMENT");
  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  cublasStatus_t s = cublasLtMatmulAlgoGetHeuristic(lt, p.desc, p.la, p.lb, p.ld, p.ld, pref, 1, &result, &found);
  cublasLtMatmulPreferenceDestroy(pref);
  switch (decide::heuristic_outcome(s, found, epi != CUBLASLT_EPILOGUE_DEFAULT)) {
    case decide::Heuristic::use:
      p.supported = true;
      p.algo = result.algo;
      break;
    case decide::Heuristic::unfused:       // this epilogue here: the plain product and kernels instead
    case decide::Heuristic::no_algorithm:  // the caller says so, with the shapes
      break;
    case decide::Heuristic::error: check_lt(s, "cublasLtMatmulAlgoGetHeuristic"); break;
  }
  return p;
}
}  // namespace

void CudaBackend::matmul(const Tensor& out, const Tensor& a, const Tensor& b, const Tensor& bias, bool relu) {
  expect_here("matmul", {&out, &a, &b, &bias});
  const DType dt = a.dtype();
  bool half = dt == DType::f16 || dt == DType::bf16;
  bool types_ok = (dt == DType::f32 || dt == DType::f64 || half) && b.dtype() == dt &&
                  (out.dtype() == dt || (half && out.dtype() == DType::f32));
  if (!types_ok)
    throw Error(fmt::format("matmul: expected f32 or f64 operands and output on CUDA, or f16/bf16 operands with an "
                            "output of their dtype or f32; got {} @ {} -> {}",
                            dtype_name(a.dtype()), dtype_name(b.dtype()), dtype_name(out.dtype())));
  if (out.numel() == 0) return;
  const int64_t batch = out.shape()[0], M = out.shape()[1], N = out.shape()[2], K = a.shape()[2];
  Tensor row_bias = bias.defined() ? contiguous_copy(bias) : bias;
  // cuBLASLt reads the bias with 16-byte loads: a view at an odd offset goes unfused; so
  // does a bias of another dtype than the output (an f32 bias beside bf16 autocast output).
  bool fusable_bias = !row_bias.defined() ||
                      (row_bias.dtype() == out.dtype() && decide::bias_epilogue_aligned(row_bias.data_ptr()));
  auto epilogue_after = [&] {  // out = relu(out + bias) as elementwise kernels
    // through the registered backend, whose low-precision layer takes f16/bf16 outputs
    Backend& be = backend_for(out.device());
    if (row_bias.defined())
      be.binary(BinaryOp::add, out, out, view_of(row_bias, out.shape(), {0, 0, 1}, row_bias.offset()));
    if (relu) be.unary(UnaryOp::relu, out, out, 0, 0);
  };
  if (K == 0) {  // an empty sum: out = bias (then relu)
    fill(out, 0.0);
    epilogue_after();
    return;
  }
  Context& c = ctx();
  Operand A = prepare(b), B = prepare(a);  // out^T = b^T a^T
  MatmulCache* cache = nullptr;
  cublasLtHandle_t lt = handle(c, cache);
  bool tf32 = dt == DType::f32 && allow_tf32();
  cublasLtEpilogue_t epi = !fusable_bias       ? CUBLASLT_EPILOGUE_DEFAULT
                           : row_bias.defined() ? (relu ? CUBLASLT_EPILOGUE_RELU_BIAS : CUBLASLT_EPILOGUE_BIAS)
                           : relu               ? CUBLASLT_EPILOGUE_RELU
                                                : CUBLASLT_EPILOGUE_DEFAULT;
  uint32_t al_a = alignment(A.t.data_ptr()), al_b = alignment(B.t.data_ptr()), al_d = alignment(out.data_ptr());
  int64_t d_stride = batch == 1 ? 0 : M * N;
  Key key{int(dt) * 16 + int(out.dtype()), tf32, A.transposed, B.transposed, N, M, K, A.ld, B.ld, batch, A.batch_stride,
          B.batch_stride, d_stride, 0, int(epi), al_a, al_b, al_d};

  double one64 = 1.0, zero64 = 0.0;
  float one32 = 1.0f, zero32 = 0.0f;
  const void* alpha = out.dtype() == DType::f64 ? static_cast<const void*>(&one64) : &one32;
  const void* beta = out.dtype() == DType::f64 ? static_cast<const void*>(&zero64) : &zero32;
  auto run = [&](Plan& plan) {
    return cublasLtMatmul(lt, plan.desc, alpha, A.t.data_ptr(), plan.la, B.t.data_ptr(), plan.lb, beta,
                          out.data_ptr(), plan.ld, out.data_ptr(), plan.ld, &plan.algo, c.lt_workspace,
                          c.lt_workspace_bytes, c.stream);
  };
  auto plan_for = [&](cublasLtEpilogue_t e) -> Plan& {
    std::get<14>(key) = int(e);
    auto it = cache->plans.find(key);
    if (it == cache->plans.end())
      it = cache->plans.emplace(key, make_plan(lt, c, dt, out.dtype(), tf32, A, B, N, M, K, batch, d_stride, e, al_a,
                                               al_b, al_d)).first;
    return it->second;
  };

  std::unique_lock<std::mutex> lock(cache->mu);
  bool fused = false;
  if (epi != CUBLASLT_EPILOGUE_DEFAULT) {
    Plan& plan = plan_for(epi);
    if (plan.supported) {
      if (row_bias.defined()) {
        const void* bp = row_bias.data_ptr();
        check_lt(cublasLtMatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bp, sizeof(bp)),
                 "set BIAS_POINTER");
      }
      cublasStatus_t st = run(plan);
      fused = st == CUBLAS_STATUS_SUCCESS;
      // Refused at execution (nothing ran): this shape takes the unfused path from now on.
      if (!fused && decide::fused_matmul_refused(st)) plan.supported = false;
      else if (!fused) check_lt(st, "cublasLtMatmul");
    }
  }
  if (!fused) {  // no epilogue asked for, or none that cuBLASLt runs here: the plain product, then kernels
    Plan& plan = plan_for(CUBLASLT_EPILOGUE_DEFAULT);
    if (!plan.supported)
      throw Error(fmt::format("matmul: cuBLASLt has no algorithm for [{}, {}, {}] x [{}, {}, {}] {} (strides {} and {})",
                              batch, M, K, batch, K, N, dtype_name(out.dtype()), a.strides().str(),
                              b.strides().str()));
    check_lt(run(plan), "cublasLtMatmul");
  }
  sync_if_debugging("matmul");
  lock.unlock();
  if (!fused) epilogue_after();
}

}  // namespace reel::cuda
