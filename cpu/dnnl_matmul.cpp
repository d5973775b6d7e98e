// Matrix products. f32 and bf16: oneDNN matmul, compute-bound, with the bias and the
// relu fused as post-ops and strided views handed over as they are, so a transposed
// operand costs no copy; bf16 operands accumulate in f32 and may write an f32 result
// (autocast's gradients of f32 inputs; the large ones with a short K through
// cpu/amx_matmul.cpp on AMX). f64 (gradient checks), tiny products and
// empty inner dims: plain loops (bf16 ones on f32 copies).
#include <fmt/format.h>

#include <algorithm>
#include <cstring>

#include "amx_matmul.h"
#include "cpu_backend.h"
#include "dnnl_common.h"
#include "loops.h"

namespace reel::cpu {
namespace {

// One [batch, rows, cols] operand as oneDNN reads it.
struct Operand {
  Tensor t;  // the data: the caller's view, or a dense copy of it
  int64_t d[3], s[3];
};

bool readable(const Operand& o) {
  return (o.s[2] == 1 || o.s[1] == 1) && dnnl_strides_ok(o.d, o.s, 3);
}

// oneDNN picks its fast kernels by looking at every stride, even those of size-1
// dims: give those the stride a dense layout would have. A stride-0 batch (an
// expanded operand) becomes batch 1, which oneDNN broadcasts itself. An operand
// whose rows and columns both step by more than one element (only oneDNN's
// reference kernel reads it) or whose dims interleave (oneDNN refuses it) is copied.
Operand prepare(const Tensor& t) {
  Operand o{t, {t.shape()[0], t.shape()[1], t.shape()[2]}, {t.strides()[0], t.strides()[1], t.strides()[2]}};
  int64_t R = o.d[1], C = o.d[2];
  if (o.d[0] == 1 || o.s[0] == 0) {
    if (o.d[0] != 1) o.t = view_of(t, {1, R, C}, {0, o.s[1], o.s[2]}, t.offset());
    o.d[0] = 1;
  }
  if (R == 1 && C == 1) o.s[1] = o.s[2] = 1;
  else if (R == 1) o.s[1] = o.s[2] == 1 ? C : 1;
  else if (C == 1) o.s[2] = o.s[1] == 1 ? R : 1;
  if (o.d[0] == 1) o.s[0] = std::max(o.s[1] * R, o.s[2] * C);
  if (!readable(o)) {
    o.t = dense_copy(o.t);
    o.s[0] = R * C;
    o.s[1] = C;
    o.s[2] = 1;
  }
  return o;
}

// The primitive and its argument memory objects, made once: each call points them at
// its data and hands them to the C API as an array (dnnl::memory construction and the
// C++ execute's unordered_map cost ~60 heap allocations per W1 step).
struct MatmulPlan {
  dnnl::memory::desc a, b, c, bias, row;
  dnnl::matmul prim;
  dnnl::memory mem[5];  // a, b, c, bias, row
};
constexpr int kMatmulArgs[5] = {DNNL_ARG_SRC, DNNL_ARG_WEIGHTS, DNNL_ARG_DST, DNNL_ARG_BIAS,
                                DNNL_ARG_ATTR_MULTIPLE_POST_OP(0) | DNNL_ARG_SRC_1};

dnnl::memory::desc desc3(const int64_t* d, const int64_t* s, DType t) {
  return dnnl::memory::desc({d[0], d[1], d[2]}, dnnl_type(t), dnnl::memory::dims{s[0], s[1], s[2]});
}

void matmul_dnnl(const MatmulArgs& m) {
  Operand a = prepare(m.a), b = prepare(m.b);
  int64_t B = m.out.shape()[0], M = m.out.shape()[1], N = m.out.shape()[2];
  // [B, M, K] x [K, N]: one tall product instead of B small ones
  if (B > 1 && b.d[0] == 1 && a.d[0] == B && !m.row_bias.defined() && a.s[0] == M * a.s[1]) {
    Operand folded = a;
    folded.d[0] = 1;
    folded.d[1] = B * M;
    folded.s[0] = B * M * a.s[1];
    if (readable(folded)) {
      a = folded;
      M *= B;
      B = 1;
    }
  }
  // A weight gradient of bf16 operands into f32 (K the batch, C the weight's size): the
  // AMX kernel that writes C in row strips (cpu/amx_matmul.cpp).
  if (B == 1 && a.t.dtype() == DType::bf16 && b.t.dtype() == DType::bf16 && m.out.dtype() == DType::f32 &&
      !m.bias.defined() && !m.row_bias.defined() && !m.relu && a.d[2] <= kAmxShortK && M * N >= (int64_t(1) << 20) &&
      b.s[2] == 1 && m.out.is_contiguous() &&
      amx_short_k_matmul(static_cast<float*>(m.out.data_ptr()), N, static_cast<const uint16_t*>(a.t.data_ptr()),
                         a.s[1], a.s[2], static_cast<const uint16_t*>(b.t.data_ptr()), b.s[1], M, N, a.d[2]))
    return;
  // A column-major a (a transposed view: the weight gradient g^T x) that is reused over
  // many more columns than it has rows is copied to row-major first: oneDNN's brgemm
  // kernels stream it better (W8's [1024, 128] x [128, 25000]: 42.9 -> 37.8 ms in f32,
  // 22.8 -> 19.1 ms in bf16, the copy included); a tall one (N < 4 M) is left as it is,
  // and so is a long one (K > 1024, a weight gradient over many rows): there oneDNN 2.6's
  // row-major kernel fell off a cliff at some widths (W12's feed-forward [384, 2048] x
  // [2048, 1536]: 15.4 ms row-major against 9.6 as the view; K = 4096: 32 against 18).
  if (B == 1 && a.s[2] != 1 && a.s[1] == 1 && N >= 4 * M && a.d[2] <= 1024) {
    a.t = dense_copy(a.t);
    a.s[0] = M * a.d[2];
    a.s[1] = a.d[2];
    a.s[2] = 1;
  }
  Tensor bias = m.bias.defined() && !m.bias.is_contiguous() ? dense_copy(m.bias) : m.bias;
  Tensor row = m.row_bias.defined() && !m.row_bias.is_contiguous() ? dense_copy(m.row_bias) : m.row_bias;

  PlanKey key;
  for (int i = 0; i < 3; ++i) key.add(a.d[i]), key.add(a.s[i]), key.add(b.d[i]), key.add(b.s[i]);
  key.add(B), key.add(M), key.add(N);
  key.add(bias.defined()), key.add(row.defined()), key.add(m.relu);
  key.add(int(a.t.dtype())), key.add(int(m.out.dtype())), key.add(bias.defined() ? int(bias.dtype()) : -1);
  key.add(row.defined() ? int(row.dtype()) : -1);
  thread_local PlanCache<MatmulPlan> cache;
  MatmulPlan& plan = cache.get(key, [&] {
    MatmulPlan p;
    p.a = desc3(a.d, a.s, a.t.dtype());
    p.b = desc3(b.d, b.s, b.t.dtype());
    int64_t cd[3] = {B, M, N}, cs[3] = {M * N, N, 1};
    p.c = desc3(cd, cs, m.out.dtype());
    int64_t bd[3] = {1, 1, N}, bs[3] = {N, N, 1};
    p.bias = desc3(bd, bs, bias.defined() ? bias.dtype() : DType::f32);
    int64_t rd[3] = {1, M, 1}, rs[3] = {M, 1, 1};
    p.row = desc3(rd, rs, row.defined() ? row.dtype() : DType::f32);
    dnnl::post_ops ops;
    if (row.defined()) ops.append_binary(dnnl::algorithm::binary_add, p.row);
    if (m.relu) ops.append_eltwise(1.f, dnnl::algorithm::eltwise_relu, 0.f, 0.f);
    dnnl::primitive_attr attr;
    attr.set_post_ops(ops);
    auto desc = bias.defined() ? dnnl::matmul::desc(p.a, p.b, p.bias, p.c) : dnnl::matmul::desc(p.a, p.b, p.c);
    p.prim = dnnl::matmul(dnnl::matmul::primitive_desc(desc, attr, dnnl_engine()));
    const dnnl::memory::desc* descs[5] = {&p.a, &p.b, &p.c, &p.bias, &p.row};
    for (int k = 0; k < 5; ++k) p.mem[k] = dnnl::memory(*descs[k], dnnl_engine(), DNNL_MEMORY_NONE);
    return p;
  });
  const Tensor* data[5] = {&a.t, &b.t, &m.out, &bias, &row};
  dnnl_exec_arg_t args[5];
  int n = 0;
  for (int k = 0; k < 5; ++k) {
    if (!data[k]->defined()) continue;
    plan.mem[k].set_data_handle(data[k]->data_ptr());
    args[n++] = {kMatmulArgs[k], plan.mem[k].get()};
  }
  dnnl_status_t status = dnnl_primitive_execute(plan.prim.get(), dnnl_stream().get(), n, args);
  if (status != dnnl_success) throw Error(fmt::format("matmul: oneDNN's matmul failed (status {})", int(status)));
  dnnl_stream().wait();
}

// The reference product: each output row accumulates scaled rows of b when b's rows
// are contiguous (vectorises), else takes dot products down b's columns.
template <typename T>
void matmul_loops(const MatmulArgs& m) {
  int64_t B = m.out.shape()[0], M = m.out.shape()[1], N = m.out.shape()[2], K = m.a.shape()[2];
  int64_t sab = m.a.shape()[0] == 1 ? 0 : m.a.strides()[0], sam = m.a.strides()[1], sak = m.a.strides()[2];
  int64_t sbb = m.b.shape()[0] == 1 ? 0 : m.b.strides()[0], sbk = m.b.strides()[1], sbn = m.b.strides()[2];
  const T* A = static_cast<const T*>(m.a.data_ptr());
  const T* Bm = static_cast<const T*>(m.b.data_ptr());
  const T* bias = m.bias.defined() ? static_cast<const T*>(m.bias.data_ptr()) : nullptr;
  const T* row = m.row_bias.defined() ? static_cast<const T*>(m.row_bias.data_ptr()) : nullptr;
  int64_t sbias = bias ? m.bias.strides()[0] : 0, srow = row ? m.row_bias.strides()[0] : 0;
  T* O = static_cast<T*>(m.out.data_ptr());
  bool relu = m.relu;
#pragma omp parallel for schedule(static) if (B * M * N * std::max<int64_t>(K, 1) >= kParallelGrain)
  for (int64_t r = 0; r < B * M; ++r) {
    int64_t bi = r / M, i = r % M;
    T* o = O + r * N;
    const T* ar = A + bi * sab + i * sam;
    const T* bb = Bm + bi * sbb;
    if (sbn == 1) {
      std::fill(o, o + N, T(0));
      for (int64_t k = 0; k < K; ++k) {
        T av = ar[k * sak];
        const T* br = bb + k * sbk;
#pragma omp simd
        for (int64_t j = 0; j < N; ++j) o[j] += av * br[j];
      }
    } else {
      for (int64_t j = 0; j < N; ++j) {
        T acc = 0;
        for (int64_t k = 0; k < K; ++k) acc += ar[k * sak] * bb[k * sbk + j * sbn];
        o[j] = acc;
      }
    }
    for (int64_t j = 0; j < N; ++j) {
      T v = o[j];
      if (bias) v += bias[j * sbias];
      if (row) v += row[i * srow];
      o[j] = relu && v < T(0) ? T(0) : v;
    }
  }
}

}  // namespace

// Below this many multiply-adds a oneDNN call (~2 us of descriptors, arguments and
// dispatch) costs more than the plain loops.
constexpr int64_t kTinyProduct = 4096;

void matmul_into(const MatmulArgs& m) {
  if (m.out.numel() == 0) return;
  bool big = m.out.numel() * m.a.shape()[2] >= kTinyProduct;
  if (m.a.dtype() == DType::bf16 && !big) {  // on f32 copies, rounded once
    auto f32 = [](const Tensor& t) { return t.defined() && t.dtype() != DType::f32 ? dense_copy_as(t, DType::f32) : t; };
    Tensor out = m.out.dtype() == DType::f32 ? m.out : empty(m.out.shape(), {.dtype = DType::f32});
    matmul_loops<float>({.out = out, .a = f32(m.a), .b = f32(m.b), .bias = f32(m.bias), .row_bias = f32(m.row_bias),
                         .relu = m.relu});
    if (out.data_ptr() != m.out.data_ptr()) backend_for(kCPU).copy(m.out, out);
    return;
  }
  if ((m.a.dtype() == DType::f32 || m.a.dtype() == DType::bf16) && big) return matmul_dnnl(m);
  dispatch_float(m.out.dtype(), "matmul", [&]<typename T>() { matmul_loops<T>(m); });
}

void CpuBackend::matmul(const Tensor& out, const Tensor& a, const Tensor& b, const Tensor& bias, bool relu) {
  matmul_into({.out = out, .a = a, .b = b, .bias = bias, .row_bias = Tensor(), .relu = relu});
}

}  // namespace reel::cpu
