// 2-D convolution, NCHW; weight [O, C/groups, KH, KW]. Compute-bound.
// f32: oneDNN convolution primitives on the layouts oneDNN picks for the shape
// (blocked, as a rule), our plain tensors reordered in and out around them, with the
// algorithm oneDNN picks (Winograd for most 3x3 stride-1 shapes) unless the user set
// ConvAlgorithm::direct. bf16: the same primitives on bf16 data (direct; oneDNN has no
// bf16 Winograd), f32 accumulation, f32 or bf16 bias, output gradients f32 or bf16.
// Two shapes are a GEMM in disguise and run as one (cpu/dnnl_matmul.cpp), in f32
// and f64 alike: a 1x1 kernel at stride 1 without padding (y[n] = W x[n], pixels as
// columns) and a kernel covering the whole unpadded input (y = x W^T, images as rows),
// so a 1x1-conv MLP costs what the dense MLP does. f64 otherwise: direct loops.
// x (forward, weight gradient) and gx (data gradient) may come channel-blocked, [N, C/B,
// H, W, B] (nChw{B}c, B = 8 or 16): bound to the primitive as they are, the reorder
// that a plain x costs is gone (conv2d_channel_block: where oneDNN's kernels read nChw16c).
// bf16 on AMX and AMD AVX512-BF16 CPUs: y and gx come channels-last (Backend::channels_last), oneDNN's nhwc,
// and so do x and gy when the ops before kept that layout: no reorder on either side.
#include <fmt/format.h>

#include <optional>
#include <string>

#include "cpu_backend.h"
#include "dnnl_common.h"
#include "isa.h"
#include "../tensor/parallel.h"
#include "loops.h"

namespace reel::cpu {
namespace {

using dims = dnnl::memory::dims;
constexpr auto kAny = dnnl::memory::format_tag::any;

// Dims [from, 4) of t stepped through as one dim: their stride, or false when their
// strides do not line up (size-1 dims are free).
bool merged_stride(const Tensor& t, int from, int64_t& stride) {
  stride = 1;
  int inner = -1;
  for (int d = 3; d >= from; --d) {
    if (t.shape()[d] == 1) continue;
    if (inner < 0) stride = t.strides()[d];
    else if (t.strides()[d] != t.strides()[inner] * t.shape()[inner]) return false;
    inner = d;
  }
  return true;
}

// t with dims [from, 4) merged: {t or a dense copy of it, the merged stride}
std::pair<Tensor, int64_t> flatten_from(const Tensor& t, int from) {
  int64_t stride;
  if (merged_stride(t, from, stride)) return {t, stride};
  Tensor c = dense_copy(t);
  return {c, c.strides()[3]};
}

enum class Lowering { none, pointwise, full };

Lowering lowering(const Tensor& x, const Tensor& w, const ConvParams& p) {
  if (p.groups != 1 || p.padding[0] != 0 || p.padding[1] != 0) return Lowering::none;
  int64_t kh = w.shape()[2], kw = w.shape()[3];
  if (kh == x.shape()[2] && kw == x.shape()[3] && p.dilation[0] == 1 && p.dilation[1] == 1) return Lowering::full;
  if (kh == 1 && kw == 1 && p.stride[0] == 1 && p.stride[1] == 1) return Lowering::pointwise;
  return Lowering::none;
}

// ---- GEMM lowerings. Views: x as [N, C, HW] (pointwise) or [1, N, CHW] (full).

void forward_gemm(Lowering l, const Tensor& out, const Tensor& x, const Tensor& w, const Tensor& bias, bool relu) {
  int64_t N = x.shape()[0], C = x.shape()[1], HW = x.shape()[2] * x.shape()[3], O = w.shape()[0];
  if (l == Lowering::pointwise) {  // y[n] [O, HW] = W [O, C] @ x[n] [C, HW] + b per row
    auto [xs, s] = flatten_from(x, 2);
    matmul_into({.out = view_of(out, {N, O, HW}, {O * HW, HW, 1}, out.offset()),
                 .a = view_of(w, {1, O, C}, {0, w.strides()[0], w.strides()[1]}, w.offset()),
                 .b = view_of(xs, {N, C, HW}, {xs.strides()[0], xs.strides()[1], s}, xs.offset()),
                 .bias = Tensor(), .row_bias = bias, .relu = relu});
  } else {  // y [N, O] = x [N, CHW] @ W^T [CHW, O] + b per column
    auto [xs, s] = flatten_from(x, 1);
    auto [ws, sw] = flatten_from(w, 1);
    matmul_into({.out = view_of(out, {1, N, O}, {N * O, O, 1}, out.offset()),
                 .a = view_of(xs, {1, N, C * HW}, {0, xs.strides()[0], s}, xs.offset()),
                 .b = view_of(ws, {1, C * HW, O}, {0, sw, ws.strides()[0]}, ws.offset()),
                 .bias = bias, .row_bias = Tensor(), .relu = relu});
  }
}

void backward_data_gemm(Lowering l, const Tensor& gx, const Tensor& gy, const Tensor& w) {
  int64_t N = gx.shape()[0], C = gx.shape()[1], HW = gx.shape()[2] * gx.shape()[3], O = w.shape()[0];
  if (l == Lowering::pointwise) {  // gx[n] [C, HW] = W^T [C, O] @ gy[n] [O, HW]
    auto [gs, s] = flatten_from(gy, 2);
    matmul_into({.out = view_of(gx, {N, C, HW}, {C * HW, HW, 1}, gx.offset()),
                 .a = view_of(w, {1, C, O}, {0, w.strides()[1], w.strides()[0]}, w.offset()),
                 .b = view_of(gs, {N, O, HW}, {gs.strides()[0], gs.strides()[1], s}, gs.offset()),
                 .bias = Tensor(), .row_bias = Tensor(), .relu = false});
  } else {  // gx [N, CHW] = gy [N, O] @ W [O, CHW]
    auto [ws, sw] = flatten_from(w, 1);
    matmul_into({.out = view_of(gx, {1, N, C * HW}, {N * C * HW, C * HW, 1}, gx.offset()),
                 .a = view_of(gy, {1, N, O}, {0, gy.strides()[0], gy.strides()[1]}, gy.offset()),
                 .b = view_of(ws, {1, O, C * HW}, {0, ws.strides()[0], sw}, ws.offset()),
                 .bias = Tensor(), .row_bias = Tensor(), .relu = false});
  }
}

// Lowering::pointwise: gW [O, C] = sum over n of gy[n] [O, HW] @ x[n]^T [HW, C], as one
// batched product into [N, O, C] and a sum over n. oneDNN's 1x1 weight-gradient kernel
// costs about the same flops but first reorders x and gy into nChw16c: 170 ms of
// W11's 1.45 s step went to those reorders.
void backward_weight_pointwise(const Tensor& gw, const Tensor& gy, const Tensor& x) {
  int64_t N = x.shape()[0], C = x.shape()[1], HW = x.shape()[2] * x.shape()[3], O = gw.shape()[0];
  auto [xs, s] = flatten_from(x, 2);
  auto [gs, sg] = flatten_from(gy, 2);
  Tensor per_image = empty({N, O, C}, {.dtype = gw.dtype()});
  matmul_into({.out = per_image,
               .a = view_of(gs, {N, O, HW}, {gs.strides()[0], gs.strides()[1], sg}, gs.offset()),
               .b = view_of(xs, {N, HW, C}, {xs.strides()[0], s, xs.strides()[1]}, xs.offset()),
               .bias = Tensor(), .row_bias = Tensor(), .relu = false});
  backend_for(kCPU).reduce(ReduceOp::sum, view_of(gw, {1, O, C}, {O * C, C, 1}, gw.offset()), per_image, {0});
}

// Lowering::pointwise on channels-last x and gy (bf16 activations on AMX and AMD AVX512-BF16 CPUs): rows are
// pixels, so gW [O, C] = gy^T [O, P] @ x [P, C] over all P = N H W pixels is one product
// with a long inner dim. oneDNN's 1x1 weight-gradient kernel (jit:avx512_core_amx_bf16)
// took 145 ms of W11's 365 ms of bf16 convolution per step, ~4x the forward's time for
// the same flops.
bool channels_last_bf16(const Tensor& t) {
  return t.dtype() == DType::bf16 && is_channels_last(t.shape(), t.strides());
}
void backward_weight_pointwise_channels_last(const Tensor& gw, const Tensor& gy, const Tensor& x) {
  const int64_t P = x.shape()[0] * x.shape()[2] * x.shape()[3], C = x.shape()[1], O = gw.shape()[0];
  matmul_into({.out = view_of(gw, {1, O, C}, {O * C, C, 1}, gw.offset()),
               .a = view_of(gy, {1, O, P}, {0, 1, O}, gy.offset()),
               .b = view_of(x, {1, P, C}, {0, C, 1}, x.offset()),
               .bias = Tensor(), .row_bias = Tensor(), .relu = false});
}

// only for Lowering::full: gW [O, CHW] = gy^T [O, N] @ x [N, CHW]
void backward_weight_gemm(const Tensor& gw, const Tensor& gy, const Tensor& x) {
  int64_t N = x.shape()[0], CHW = x.shape()[1] * x.shape()[2] * x.shape()[3], O = gw.shape()[0];
  auto [xs, s] = flatten_from(x, 1);
  matmul_into({.out = view_of(gw, {1, O, CHW}, {O * CHW, CHW, 1}, gw.offset()),
               .a = view_of(gy, {1, O, N}, {0, gy.strides()[1], gy.strides()[0]}, gy.offset()),
               .b = view_of(xs, {1, N, CHW}, {0, xs.strides()[0], s}, xs.offset()),
               .bias = Tensor(), .row_bias = Tensor(), .relu = false});
}

// ---- oneDNN convolution primitives

// The descriptors of one convolution with oneDNN's own layouts (format any).
struct ConvShape {
  dnnl::memory::desc x, w, y, bias;
  dims strides, dilates, pad_l, pad_r;
};

// w [O, C/g, KH, KW] as oneDNN's grouped weights [g, O/g, C/g, KH, KW] when g > 1
dnnl::memory::desc weight_desc(const Tensor& w, int64_t groups) {
  if (groups == 1) return strided_desc(w);
  const Dims& s = w.strides();
  int64_t O = w.shape()[0];
  return strided_desc(Dims{groups, O / groups, w.shape()[1], w.shape()[2], w.shape()[3]},
                      Dims{O / groups * s[0], s[0], s[1], s[2], s[3]}, w.dtype());
}

// The dtypes of one primitive's x, w, y and bias (or their gradients)
struct ConvTypes {
  DType x, w, y, bias;
};

ConvShape conv_shape(const Dims& xs, const Dims& ws, const Dims& ys, const ConvParams& p, const ConvTypes& t) {
  ConvShape c;
  dims wd{ws[0], ws[1], ws[2], ws[3]};
  if (p.groups > 1) wd = {p.groups, ws[0] / p.groups, ws[1], ws[2], ws[3]};
  c.x = dnnl::memory::desc(dims(xs.begin(), xs.end()), dnnl_type(t.x), kAny);
  c.w = dnnl::memory::desc(wd, dnnl_type(t.w), kAny);
  c.y = dnnl::memory::desc(dims(ys.begin(), ys.end()), dnnl_type(t.y), kAny);
  c.bias = dnnl::memory::desc({ws[0]}, dnnl_type(t.bias), dnnl::memory::format_tag::x);
  c.strides = {p.stride[0], p.stride[1]};
  c.dilates = {p.dilation[0] - 1, p.dilation[1] - 1};  // oneDNN counts the gaps
  c.pad_l = {p.padding[0], p.padding[1]};
  c.pad_r = c.pad_l;  // oneDNN divides like we do (floor), so the same right padding fits
  return c;
}

// oneDNN's choice (Winograd where faster) unless the user asked for direct sums
dnnl::algorithm conv_alg() {
  return conv_algorithm() == ConvAlgorithm::direct ? dnnl::algorithm::convolution_direct
                                                   : dnnl::algorithm::convolution_auto;
}

dnnl::convolution_forward::primitive_desc forward_pd(const ConvShape& c, bool bias, bool relu) {
  dnnl::post_ops ops;
  if (relu) ops.append_eltwise(1.f, dnnl::algorithm::eltwise_relu, 0.f, 0.f);
  dnnl::primitive_attr attr;
  attr.set_post_ops(ops);
  auto kind = dnnl::prop_kind::forward_training;
  auto alg = conv_alg();
  auto desc = bias ? dnnl::convolution_forward::desc(kind, alg, c.x, c.w, c.bias, c.y, c.strides, c.dilates, c.pad_l,
                                                     c.pad_r)
                   : dnnl::convolution_forward::desc(kind, alg, c.x, c.w, c.y, c.strides, c.dilates, c.pad_l, c.pad_r);
  return dnnl::convolution_forward::primitive_desc(desc, attr, dnnl_engine());
}

// One tensor at a primitive's door: used in place when the primitive reads our
// layout, else through a reorder into (or out of) scratch memory.
struct Port {
  dnnl::memory::desc user, inner;
  std::optional<dnnl::reorder> move;  // user -> inner for inputs, inner -> user for outputs
};
Port make_port(const dnnl::memory::desc& user, const dnnl::memory::desc& inner, bool input) {
  Port p{user, inner, std::nullopt};
  if (user != inner) {
    auto& e = dnnl_engine();
    p.move = input ? dnnl::reorder(dnnl::reorder::primitive_desc(e, user, e, inner))
                   : dnnl::reorder(dnnl::reorder::primitive_desc(e, inner, e, user));
  }
  return p;
}

// Binds a port for one call; `keep` holds any scratch alive until the primitive has run.
struct Bound {
  dnnl::memory user, inner;
  Tensor keep;
};
Bound bind(const Port& p, const Tensor& t, bool input) {
  Bound b{memory_of(p.user, t), {}, {}};
  if (!p.move) {
    b.inner = b.user;
    return b;
  }
  Scratch s = scratch(p.inner);
  b.inner = s.mem;
  b.keep = s.bytes;
  if (input) p.move->execute(dnnl_stream(), b.user, b.inner);
  return b;
}
void finish(const Port& p, Bound& b) {
  if (p.move) p.move->execute(dnnl_stream(), b.inner, b.user);
}

// A channel-blocked [N, C/B, H, W, B] tensor as the oneDNN memory it is: [N, C, H, W] nChw{B}c
dnnl::memory::desc blocked_desc(const Tensor& t) {
  const Dims& s = t.shape();
  auto tag = s[4] == 16 ? dnnl::memory::format_tag::nChw16c : dnnl::memory::format_tag::nChw8c;
  const Dims plain = unblocked_shape(s);
  return dnnl::memory::desc(dims(plain.begin(), plain.end()), dnnl_type(t.dtype()), tag);
}
dnnl::memory::desc user_desc(const Tensor& t) { return t.dim() == 5 ? blocked_desc(t) : strided_desc(t); }
// x's [N, C, H, W], blocked or not
Dims logical_shape(const Tensor& t) { return t.dim() == 5 ? unblocked_shape(t.shape()) : t.shape(); }

// t as oneDNN will read it: its own strides when oneDNN takes them, else a dense copy
Tensor readable(const Tensor& t) {
  return dnnl_strides_ok(t.shape().data(), t.strides().data(), t.dim()) ? t : dense_copy(t);
}

void key_of(PlanKey& k, const Tensor& t) {
  k.add(t.shape());
  k.add(t.strides());
  k.add(int64_t(t.dtype()));
}
void key_of(PlanKey& k, const ConvParams& p) {
  for (int i = 0; i < 2; ++i) k.add(p.stride[i]), k.add(p.padding[i]), k.add(p.dilation[i]);
  k.add(p.groups);
  k.add(int64_t(conv_algorithm()));
}

struct FwdPlan {
  dnnl::convolution_forward prim;
  Port x, w, y;
  dnnl::memory::desc bias;
};

void forward_dnnl(const Tensor& out, const Tensor& x_in, const Tensor& w_in, const Tensor& bias_in,
                  const ConvParams& p, bool relu) {
  Tensor x = readable(x_in), w = readable(w_in);
  Tensor bias = bias_in.defined() && !bias_in.is_contiguous() ? dense_copy(bias_in) : bias_in;
  PlanKey key;
  key_of(key, x), key_of(key, w), key.add(out.shape()), key_of(key, p), key.add(bias.defined()), key.add(relu);
  key.add(int64_t(out.dtype())), key.add(bias.defined() ? int64_t(bias.dtype()) : -1);
  thread_local PlanCache<FwdPlan> cache;
  FwdPlan& plan = cache.get(key, [&] {
    DType bt = bias.defined() ? bias.dtype() : DType::f32;
    ConvShape c = conv_shape(logical_shape(x), w.shape(), out.shape(), p, {x.dtype(), w.dtype(), out.dtype(), bt});
    auto pd = forward_pd(c, bias.defined(), relu);
    return FwdPlan{dnnl::convolution_forward(pd), make_port(user_desc(x), pd.src_desc(), true),
                   make_port(weight_desc(w, p.groups), pd.weights_desc(), true),
                   make_port(strided_desc(out), pd.dst_desc(), false), c.bias};
  });
  Bound bx = bind(plan.x, x, true), bw = bind(plan.w, w, true), by = bind(plan.y, out, false);
  std::unordered_map<int, dnnl::memory> args{
      {DNNL_ARG_SRC, bx.inner}, {DNNL_ARG_WEIGHTS, bw.inner}, {DNNL_ARG_DST, by.inner}};
  if (bias.defined()) args[DNNL_ARG_BIAS] = memory_of(plan.bias, bias);
  plan.prim.execute(dnnl_stream(), args);
  finish(plan.y, by);
  dnnl_stream().wait();
}

struct DataPlan {
  dnnl::convolution_backward_data prim;
  Port gy, w, gx;
};

void backward_data_dnnl(const Tensor& gx, const Tensor& gy_in, const Tensor& w_in, const ConvParams& p) {
  Tensor gy = readable(gy_in), w = readable(w_in);
  PlanKey key;
  key_of(key, gy), key_of(key, w), key.add(gx.shape()), key_of(key, p), key.add(int64_t(gx.dtype()));
  thread_local PlanCache<DataPlan> cache;
  DataPlan& plan = cache.get(key, [&] {
    const Dims xs = logical_shape(gx);
    ConvShape c = conv_shape(xs, w.shape(), gy.shape(), p, {gx.dtype(), w.dtype(), gy.dtype(), DType::f32});
    // the hint is a forward in the compute dtype: oneDNN has no forward from bf16 src to f32 weights
    DType ct = gy.dtype();
    auto hint = forward_pd(conv_shape(xs, w.shape(), gy.shape(), p, {ct, ct, ct, DType::f32}), false, false);
    dnnl::convolution_backward_data::desc desc(conv_alg(), c.x, c.w, c.y, c.strides,
                                               c.dilates, c.pad_l, c.pad_r);
    dnnl::convolution_backward_data::primitive_desc pd(desc, dnnl_engine(), hint);
    return DataPlan{dnnl::convolution_backward_data(pd), make_port(strided_desc(gy), pd.diff_dst_desc(), true),
                    make_port(weight_desc(w, p.groups), pd.weights_desc(), true),
                    make_port(user_desc(gx), pd.diff_src_desc(), false)};
  });
  Bound bgy = bind(plan.gy, gy, true), bw = bind(plan.w, w, true), bgx = bind(plan.gx, gx, false);
  plan.prim.execute(dnnl_stream(),
                    {{DNNL_ARG_DIFF_DST, bgy.inner}, {DNNL_ARG_WEIGHTS, bw.inner}, {DNNL_ARG_DIFF_SRC, bgx.inner}});
  finish(plan.gx, bgx);
  dnnl_stream().wait();
}

struct WeightPlan {
  dnnl::convolution_backward_weights prim;
  Port gy, x, gw;
  dnnl::memory::desc gb;
  // bf16 operands for which oneDNN has only its gemm fallback (few input channels: W4's
  // first layer, 3 -> 50, took 7.9 ms in bf16 against 1.15 ms for the f32 jit kernel):
  // computed on f32 copies instead
  bool in_f32 = false;
};

void backward_weight_dnnl(const Tensor& gw, const Tensor& gb, const Tensor& gy_in, const Tensor& x_in,
                          const ConvParams& p) {
  Tensor gy = readable(gy_in), x = readable(x_in);
  PlanKey key;
  key_of(key, gy), key_of(key, x), key.add(gw.shape()), key_of(key, p), key.add(gb.defined());
  key.add(int64_t(gw.dtype())), key.add(gb.defined() ? int64_t(gb.dtype()) : -1);
  thread_local PlanCache<WeightPlan> cache;
  WeightPlan& plan = cache.get(key, [&] {
    DType bt = gb.defined() ? gb.dtype() : DType::f32;
    const Dims xs = logical_shape(x);
    ConvShape c = conv_shape(xs, gw.shape(), gy.shape(), p, {x.dtype(), gw.dtype(), gy.dtype(), bt});
    DType ct = gy.dtype();  // as in backward_data_dnnl: the hint runs in the compute dtype
    auto hint = forward_pd(conv_shape(xs, gw.shape(), gy.shape(), p, {ct, ct, ct, bt}), gb.defined(), false);
    auto alg = conv_alg();
    auto desc = gb.defined() ? dnnl::convolution_backward_weights::desc(alg, c.x, c.w, c.bias, c.y, c.strides,
                                                                         c.dilates, c.pad_l, c.pad_r)
                             : dnnl::convolution_backward_weights::desc(alg, c.x, c.w, c.y, c.strides, c.dilates,
                                                                         c.pad_l, c.pad_r);
    dnnl::convolution_backward_weights::primitive_desc pd(desc, dnnl_engine(), hint);
    if (is_low_precision(gy.dtype()) && std::string(pd.impl_info_str()).find("gemm") != std::string::npos) {
      WeightPlan f32_instead;
      f32_instead.in_f32 = true;
      return f32_instead;
    }
    return WeightPlan{dnnl::convolution_backward_weights(pd), make_port(strided_desc(gy), pd.diff_dst_desc(), true),
                      make_port(user_desc(x), pd.src_desc(), true),
                      make_port(weight_desc(gw, p.groups), pd.diff_weights_desc(), false), c.bias};
  });
  if (plan.in_f32) {
    auto f32 = [](const Tensor& t) {
      return !t.defined() || t.dtype() == DType::f32 ? t : empty(t.shape(), {.dtype = DType::f32});
    };
    Tensor gw32 = f32(gw), gb32 = f32(gb);
    backward_weight_dnnl(gw32, gb32, dense_copy_as(gy, DType::f32), dense_copy_as(x, DType::f32), p);
    if (gw32.data_ptr() != gw.data_ptr()) backend_for(kCPU).copy(gw, gw32);
    if (gb.defined() && gb32.data_ptr() != gb.data_ptr()) backend_for(kCPU).copy(gb, gb32);
    return;
  }
  Bound bgy = bind(plan.gy, gy, true), bx = bind(plan.x, x, true), bgw = bind(plan.gw, gw, false);
  std::unordered_map<int, dnnl::memory> args{
      {DNNL_ARG_DIFF_DST, bgy.inner}, {DNNL_ARG_SRC, bx.inner}, {DNNL_ARG_DIFF_WEIGHTS, bgw.inner}};
  if (gb.defined()) args[DNNL_ARG_DIFF_BIAS] = memory_of(plan.gb, gb);
  plan.prim.execute(dnnl_stream(), args);
  finish(plan.gw, bgw);
  dnnl_stream().wait();
}

// ---- direct loops (f64). Compute-bound, written for clarity: gradient checks use them.

struct Geometry {
  int64_t N, C, H, W, O, OH, OW, KH, KW, Cg, Og;
  explicit Geometry(const Dims& x, const Dims& w, const Dims& y, int64_t groups)
      : N(x[0]), C(x[1]), H(x[2]), W(x[3]), O(w[0]), OH(y[2]), OW(y[3]), KH(w[2]), KW(w[3]), Cg(w[1]),
        Og(w[0] / groups) {}
};

template <typename T>
void forward_loops(const Tensor& out, const Tensor& x, const Tensor& w, const Tensor& bias, const ConvParams& p,
                   bool relu) {
  Geometry g(x.shape(), w.shape(), out.shape(), p.groups);
  const T* X = static_cast<const T*>(x.data_ptr());
  const T* Wt = static_cast<const T*>(w.data_ptr());
  const T* B = bias.defined() ? static_cast<const T*>(bias.data_ptr()) : nullptr;
  T* Y = static_cast<T*>(out.data_ptr());
  const Dims &xs = x.strides(), &ws = w.strides();
#pragma omp parallel for collapse(2) schedule(static)
  for (int64_t n = 0; n < g.N; ++n)
    for (int64_t o = 0; o < g.O; ++o) {
      int64_t c0 = o / g.Og * g.Cg;
      for (int64_t oh = 0; oh < g.OH; ++oh)
        for (int64_t ow = 0; ow < g.OW; ++ow) {
          T acc = B ? B[o * bias.strides()[0]] : T(0);
          for (int64_t c = 0; c < g.Cg; ++c)
            for (int64_t kh = 0; kh < g.KH; ++kh) {
              int64_t ih = oh * p.stride[0] - p.padding[0] + kh * p.dilation[0];
              if (ih < 0 || ih >= g.H) continue;
              for (int64_t kw = 0; kw < g.KW; ++kw) {
                int64_t iw = ow * p.stride[1] - p.padding[1] + kw * p.dilation[1];
                if (iw < 0 || iw >= g.W) continue;
                acc += X[n * xs[0] + (c0 + c) * xs[1] + ih * xs[2] + iw * xs[3]] *
                       Wt[o * ws[0] + c * ws[1] + kh * ws[2] + kw * ws[3]];
              }
            }
          Y[((n * g.O + o) * g.OH + oh) * g.OW + ow] = relu && acc < T(0) ? T(0) : acc;
        }
    }
}

// gx[n, c, ih, iw] = sum of gy[n, o, oh, ow] w[o, c, kh, kw] over the outputs that read it
template <typename T>
void backward_data_loops(const Tensor& gx, const Tensor& gy, const Tensor& w, const ConvParams& p) {
  Geometry g(gx.shape(), w.shape(), gy.shape(), p.groups);
  const T* G = static_cast<const T*>(gy.data_ptr());
  const T* Wt = static_cast<const T*>(w.data_ptr());
  T* X = static_cast<T*>(gx.data_ptr());
  const Dims &gs = gy.strides(), &ws = w.strides();
#pragma omp parallel for collapse(2) schedule(static)
  for (int64_t n = 0; n < g.N; ++n)
    for (int64_t ci = 0; ci < g.C; ++ci) {
      int64_t grp = ci / g.Cg, c = ci % g.Cg;
      for (int64_t ih = 0; ih < g.H; ++ih)
        for (int64_t iw = 0; iw < g.W; ++iw) {
          T acc = 0;
          for (int64_t o = grp * g.Og; o < (grp + 1) * g.Og; ++o)
            for (int64_t kh = 0; kh < g.KH; ++kh) {
              int64_t th = ih + p.padding[0] - kh * p.dilation[0];
              if (th < 0 || th % p.stride[0] != 0 || th / p.stride[0] >= g.OH) continue;
              for (int64_t kw = 0; kw < g.KW; ++kw) {
                int64_t tw = iw + p.padding[1] - kw * p.dilation[1];
                if (tw < 0 || tw % p.stride[1] != 0 || tw / p.stride[1] >= g.OW) continue;
                acc += G[n * gs[0] + o * gs[1] + th / p.stride[0] * gs[2] + tw / p.stride[1] * gs[3]] *
                       Wt[o * ws[0] + c * ws[1] + kh * ws[2] + kw * ws[3]];
              }
            }
          X[((n * g.C + ci) * g.H + ih) * g.W + iw] = acc;
        }
    }
}

// gw[o, c, kh, kw] = sum over n, oh, ow of gy[n, o, oh, ow] x[n, c0 + c, ih, iw]
template <typename T>
void backward_weight_loops(const Tensor& gw, const Tensor& gy, const Tensor& x,
                           const ConvParams& p) {
  Geometry g(x.shape(), gw.shape(), gy.shape(), p.groups);
  const T* G = static_cast<const T*>(gy.data_ptr());
  const T* X = static_cast<const T*>(x.data_ptr());
  T* Wt = static_cast<T*>(gw.data_ptr());
  const Dims &gs = gy.strides(), &xs = x.strides();
#pragma omp parallel for collapse(2) schedule(static)
  for (int64_t o = 0; o < g.O; ++o)
    for (int64_t c = 0; c < g.Cg; ++c) {
      int64_t c0 = o / g.Og * g.Cg;
      for (int64_t kh = 0; kh < g.KH; ++kh)
        for (int64_t kw = 0; kw < g.KW; ++kw) {
          T acc = 0;
          for (int64_t n = 0; n < g.N; ++n)
            for (int64_t oh = 0; oh < g.OH; ++oh) {
              int64_t ih = oh * p.stride[0] - p.padding[0] + kh * p.dilation[0];
              if (ih < 0 || ih >= g.H) continue;
              for (int64_t ow = 0; ow < g.OW; ++ow) {
                int64_t iw = ow * p.stride[1] - p.padding[1] + kw * p.dilation[1];
                if (iw < 0 || iw >= g.W) continue;
                acc += G[n * gs[0] + o * gs[1] + oh * gs[2] + ow * gs[3]] *
                       X[n * xs[0] + (c0 + c) * xs[1] + ih * xs[2] + iw * xs[3]];
              }
            }
          Wt[((o * g.Cg + c) * g.KH + kh) * g.KW + kw] = acc;
        }
    }
}

}  // namespace

void CpuBackend::conv2d_forward(const Tensor& out, const Tensor& x, const Tensor& w, const Tensor& bias,
                                const ConvParams& p, bool relu) {
  // the GEMM lowerings write plain outputs; a channels-last one is oneDNN's own nhwc
  if (x.dim() == 5 || !out.is_contiguous()) return forward_dnnl(out, x, w, bias, p, relu);
  Lowering l = lowering(x, w, p);
  if (l != Lowering::none) return forward_gemm(l, out, x, w, bias, relu);
  if (x.dtype() == DType::f32 || x.dtype() == DType::bf16) return forward_dnnl(out, x, w, bias, p, relu);
  dispatch_float(x.dtype(), "conv2d", [&]<typename T>() { forward_loops<T>(out, x, w, bias, p, relu); });
}

void CpuBackend::conv2d_backward_data(const Tensor& gx, const Tensor& gy, const Tensor& w, const ConvParams& p) {
  if (gx.dim() == 5 || !gx.is_contiguous()) return backward_data_dnnl(gx, gy, w, p);
  Lowering l = lowering(gx, w, p);
  if (l != Lowering::none) return backward_data_gemm(l, gx, gy, w);
  if (gy.dtype() == DType::f32 || gy.dtype() == DType::bf16) return backward_data_dnnl(gx, gy, w, p);
  dispatch_float(gx.dtype(), "conv2d", [&]<typename T>() { backward_data_loops<T>(gx, gy, w, p); });
}

void CpuBackend::conv2d_backward_weight(const Tensor& gw, const Tensor& gb, const Tensor& gy, const Tensor& x,
                                        const ConvParams& p) {
  const Lowering l = x.dim() == 4 ? lowering(x, gw, p) : Lowering::none;
  if (l == Lowering::full) {
    backward_weight_gemm(gw, gy, x);
  } else if (l == Lowering::pointwise && x.dtype() == gw.dtype() && gy.dtype() == gw.dtype() &&
             gw.dtype() != DType::bf16) {
    backward_weight_pointwise(gw, gy, x);
  } else if (l == Lowering::pointwise && gw.is_contiguous() && channels_last_bf16(x) && channels_last_bf16(gy)) {
    backward_weight_pointwise_channels_last(gw, gy, x);
  } else if (x.dtype() == DType::f32 || x.dtype() == DType::bf16) {
    return backward_weight_dnnl(gw, gb, gy, x, p);  // oneDNN sums the bias gradient itself
  } else {
    dispatch_float(x.dtype(), "conv2d", [&]<typename T>() { backward_weight_loops<T>(gw, gy, x, p); });
  }
  // gb[o] = sum of gy over n, h, w, through the vectorised reduction (into gb, fresh and
  // contiguous, seen as [1, O, 1, 1]): a loop per channel striding over [N, O, 1, 1] cost
  // 50 us per layer of W2, 10x the reduction.
  if (gb.defined()) {
    int64_t O = gb.numel();
    Tensor gb4 = view_of(gb, {1, O, 1, 1}, {O, 1, 1, 1}, gb.offset());
    if (gy.dtype() == gb.dtype()) return reduce(ReduceOp::sum, gb4, gy, {0, 2, 3});
    backend_for(kCPU).reduce(ReduceOp::sum, gb4, gy.dtype() == DType::f32 ? gy : dense_copy_as(gy, DType::f32),
                             {0, 2, 3});
  }
}

bool CpuBackend::native_products(DType dtype) const { return dtype != DType::bf16 || bf16_products_native(); }

int64_t CpuBackend::conv2d_channel_block(DType dtype) const {
  // oneDNN's AVX-512 kernels (Winograd among them) read nChw16c; AVX2's read nChw8c, but
  // there batch_norm_relu's blocked write has no vector kernel, so plain is as fast
  static const bool avx512 = dnnl::get_effective_cpu_isa() >= dnnl::cpu_isa::avx512_core;
  return dtype == DType::f32 && avx512 ? 16 : 0;
}

bool CpuBackend::channels_last(DType dtype) const {
  // oneDNN's AMX bf16 convolutions (brgconv, jit:avx512_core_amx) read and write nhwc;
  // a plain NCHW tensor cost a reorder on each side of each of them (W4: 132 reorders a
  // step, 11 ms beside 17 ms of convolution). On AMD's AVX512-BF16 (the other CPUs whose
  // bf16 products beat f32's, so autocast makes bf16 activations) plain bf16 also sent
  // every batch norm through an f32 copy of its input: on a Zen 5, channels-last took
  // W11's bf16 step 820-853 -> 615-649 ms and its peak RSS 3099 -> 1394 MB, W10 17-19 ->
  // 14-15 s/1000 images (2026-11-29). Elsewhere bf16 runs plain.
  static const bool faster = bf16_products_faster();
  return dtype == DType::bf16 && faster;
}

}  // namespace reel::cpu
