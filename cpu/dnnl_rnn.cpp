// Recurrent layers on the CPU: f32 and bf16 on oneDNN's RNN primitives (vanilla RNN,
// LSTM, linear-before-reset GRU, which is PyTorch's GRU), forward training with the
// workspace the backward primitive reads, forward inference without one; f64 (and f32
// while rnn_use_loops(true)) on the loops of cpu/rnn_loops.cpp.
//
// bf16 (autocast on CPUs with AVX512-BF16 or AMX; autograd/ops_rnn.cpp): the input, the
// hidden states, the weights and the output in bf16, products accumulated in f32; the
// biases, the LSTM cell state and every gradient in f32 (what oneDNN's bf16 training
// primitives take). A GRU step at W9's size ran 2.4x (forward) and 2.9x (backward) faster
// than in f32 on a 2-core Xeon with AMX.
//
// Layouts. Ours (PyTorch's): w_ih [G H, I] gate-major, GRU gates r z n. oneDNN's
// logical weights are [L, D, I, G, H] (ldigo) with GRU gates u(= z) r o(= n), in a
// layout the primitive picks: our weights enter through a reorder from a strided
// descriptor of PyTorch's layout (GRU: after swapping the r and z blocks), the
// gradients leave through the reverse. Bias: one vector per gate, b_ih + b_hh; the
// GRU's has a fourth, b_hn, applied before the reset gate. oneDNN's backward adds
// into the weight and bias gradients, so they start at zero.
#include <atomic>
#include <cstring>

#include "cpu_backend.h"
#include "dnnl_common.h"

namespace reel::cpu {
namespace {

std::atomic<bool> g_rnn_loops{false};

using dt = dnnl::memory::data_type;
using tag = dnnl::memory::format_tag;
using md = dnnl::memory::desc;

bool use_loops(const RnnParams&, DType dtype) {
  return dtype == DType::bf16 ? false : dtype != DType::f32 || g_rnn_loops.load(std::memory_order_relaxed);
}

int64_t dnnl_bias_gates(RnnMode m) { return m == RnnMode::gru ? 4 : rnn_gates(m); }

// PyTorch's gate order -> oneDNN's: GRU r z n -> z r n (a swap of the first two)
int64_t dnnl_gate(RnnMode m, int64_t g) { return m == RnnMode::gru && g < 2 ? 1 - g : g; }

// PyTorch's [G H, in] as oneDNN's logical [1, 1, in, G, H]
md user_weights(int64_t in, int64_t G, int64_t H, dt type = dt::f32) {
  return md({1, 1, in, G, H}, type, dnnl::memory::dims{G * H * in, G * H * in, 1, H * in, in});
}

struct RnnPlan {
  md src_layer, src_iter, src_iter_c, weights_layer, weights_iter, bias, dst_layer, dst_iter, workspace;
  md diff_weights_layer, diff_weights_iter;  // backward plans
  md diff_src_layer, diff_iter, diff_dst_layer;  // f32 (bf16 plans) or the data's descriptors (f32 plans)
  dnnl::primitive prim;
  dnnl::reorder to_layer, to_iter;  // user -> primitive weights
  dnnl::reorder from_layer, from_iter;  // primitive diff weights -> user (backward)
};

enum class Pass { inference, training, backward };

RnnPlan& plan_for(const RnnParams& p, Pass pass, DType dtype) {
  PlanKey key;
  key.add(int64_t(p.mode)), key.add(p.T), key.add(p.B), key.add(p.I), key.add(p.H), key.add(p.reverse);
  key.add(int64_t(pass)), key.add(int64_t(dtype));
  thread_local PlanCache<RnnPlan> cache;
  return cache.get(key, [&] {
    RnnPlan pl;
    const int64_t G = rnn_gates(p.mode);
    auto& eng = dnnl_engine();
    auto dir = p.reverse ? dnnl::rnn_direction::unidirectional_right2left
                         : dnnl::rnn_direction::unidirectional_left2right;
    const dt data = dnnl_type(dtype);
    pl.src_layer = md({p.T, p.B, p.I}, data, tag::tnc);
    pl.dst_layer = md({p.T, p.B, p.H}, data, tag::tnc);
    pl.src_iter = md({1, 1, p.B, p.H}, data, tag::ldnc);
    pl.dst_iter = pl.src_iter;
    pl.src_iter_c = md({1, 1, p.B, p.H}, dt::f32, tag::ldnc);
    pl.diff_src_layer = md({p.T, p.B, p.I}, dt::f32, tag::tnc);
    pl.diff_dst_layer = md({p.T, p.B, p.H}, dt::f32, tag::tnc);
    pl.diff_iter = pl.src_iter_c;
    md wl_any({1, 1, p.I, G, p.H}, data, tag::any), wi_any({1, 1, p.H, G, p.H}, data, tag::any);
    md dwl_any({1, 1, p.I, G, p.H}, dt::f32, tag::any), dwi_any({1, 1, p.H, G, p.H}, dt::f32, tag::any);
    pl.bias = md({1, 1, dnnl_bias_gates(p.mode), p.H}, dt::f32, tag::ldgo);
    auto fwd_kind = pass == Pass::inference ? dnnl::prop_kind::forward_inference : dnnl::prop_kind::forward_training;
    auto act = p.mode == RnnMode::rnn_relu ? dnnl::algorithm::eltwise_relu : dnnl::algorithm::eltwise_tanh;
    // the forward primitive descriptor (also the hint of the backward one)
    auto finish_fwd = [&](auto pd) {
      pl.weights_layer = pd.weights_layer_desc();
      pl.weights_iter = pd.weights_iter_desc();
      pl.workspace = pd.workspace_desc();
      return pd;
    };
    auto finish_bwd = [&](auto pd) {
      pl.weights_layer = pd.weights_layer_desc();
      pl.weights_iter = pd.weights_iter_desc();
      pl.diff_weights_layer = pd.diff_weights_layer_desc();
      pl.diff_weights_iter = pd.diff_weights_iter_desc();
      return pd;
    };
    if (p.mode == RnnMode::lstm) {
      auto fpd = finish_fwd(dnnl::lstm_forward::primitive_desc(
          dnnl::lstm_forward::desc(fwd_kind, dir, pl.src_layer, pl.src_iter, pl.src_iter_c, wl_any, wi_any, pl.bias,
                                   pl.dst_layer, pl.dst_iter, pl.src_iter_c),
          eng));
      if (pass != Pass::backward) {
        pl.prim = dnnl::lstm_forward(fpd);
      } else {
        pl.prim = dnnl::lstm_backward(finish_bwd(dnnl::lstm_backward::primitive_desc(
            dnnl::lstm_backward::desc(dnnl::prop_kind::backward, dir, pl.src_layer, pl.src_iter, pl.src_iter_c,
                                      wl_any, wi_any, pl.bias, pl.dst_layer, pl.dst_iter, pl.src_iter_c,
                                      pl.diff_src_layer, pl.diff_iter, pl.diff_iter, dwl_any, dwi_any, pl.bias,
                                      pl.diff_dst_layer, pl.diff_iter, pl.diff_iter),
            eng, fpd)));
      }
    } else if (p.mode == RnnMode::gru) {
      auto fpd = finish_fwd(dnnl::lbr_gru_forward::primitive_desc(
          dnnl::lbr_gru_forward::desc(fwd_kind, dir, pl.src_layer, pl.src_iter, wl_any, wi_any, pl.bias, pl.dst_layer,
                                      pl.dst_iter),
          eng));
      if (pass != Pass::backward) {
        pl.prim = dnnl::lbr_gru_forward(fpd);
      } else {
        pl.prim = dnnl::lbr_gru_backward(finish_bwd(dnnl::lbr_gru_backward::primitive_desc(
            dnnl::lbr_gru_backward::desc(dnnl::prop_kind::backward, dir, pl.src_layer, pl.src_iter, wl_any, wi_any,
                                         pl.bias, pl.dst_layer, pl.dst_iter, pl.diff_src_layer, pl.diff_iter,
                                         dwl_any, dwi_any, pl.bias, pl.diff_dst_layer, pl.diff_iter),
            eng, fpd)));
      }
    } else {
      auto fpd = finish_fwd(dnnl::vanilla_rnn_forward::primitive_desc(
          dnnl::vanilla_rnn_forward::desc(fwd_kind, act, dir, pl.src_layer, pl.src_iter, wl_any, wi_any, pl.bias,
                                          pl.dst_layer, pl.dst_iter),
          eng));
      if (pass != Pass::backward) {
        pl.prim = dnnl::vanilla_rnn_forward(fpd);
      } else {
        pl.prim = dnnl::vanilla_rnn_backward(finish_bwd(dnnl::vanilla_rnn_backward::primitive_desc(
            dnnl::vanilla_rnn_backward::desc(dnnl::prop_kind::backward, act, dir, pl.src_layer, pl.src_iter, wl_any,
                                             wi_any, pl.bias, pl.dst_layer, pl.dst_iter, pl.diff_src_layer,
                                             pl.diff_iter, dwl_any, dwi_any, pl.bias, pl.diff_dst_layer,
                                             pl.diff_iter),
            eng, fpd)));
      }
    }
    md ul = user_weights(p.I, G, p.H), ui = user_weights(p.H, G, p.H);
    pl.to_layer = dnnl::reorder(
        dnnl::reorder::primitive_desc(eng, user_weights(p.I, G, p.H, data), eng, pl.weights_layer));
    pl.to_iter = dnnl::reorder(dnnl::reorder::primitive_desc(eng, user_weights(p.H, G, p.H, data), eng, pl.weights_iter));
    if (pass == Pass::backward) {
      pl.from_layer = dnnl::reorder(dnnl::reorder::primitive_desc(eng, pl.diff_weights_layer, eng, ul));
      pl.from_iter = dnnl::reorder(dnnl::reorder::primitive_desc(eng, pl.diff_weights_iter, eng, ui));
    }
    return pl;
  });
}

// w [G H, in] (f32 or bf16) in oneDNN's gate order (a copy for GRU, else w itself)
Tensor in_dnnl_gate_order(const RnnParams& p, const Tensor& w) {
  if (p.mode != RnnMode::gru) return w;
  Tensor out = empty(w.shape(), {.dtype = w.dtype()});
  const size_t block = size_t(p.H * w.size(1)) * dtype_size(w.dtype());
  const char* src = static_cast<const char*>(w.data_ptr());
  char* dst = static_cast<char*>(out.data_ptr());
  for (int64_t g = 0; g < 3; ++g) std::memcpy(dst + size_t(dnnl_gate(p.mode, g)) * block, src + size_t(g) * block, block);
  return out;
}

// The primitive's weights from ours: [G H, in] -> a scratch in the primitive's layout.
Scratch weights_for(const RnnParams& p, dnnl::reorder& r, const md& prim_md, int64_t in, const Tensor& w) {
  Tensor ordered = in_dnnl_gate_order(p, w);
  Scratch s = scratch(prim_md);
  dnnl::memory src = memory_of(user_weights(in, rnn_gates(p.mode), p.H, dnnl_type(w.dtype())), ordered);
  r.execute(dnnl_stream(), src, s.mem);
  return s;
}

// oneDNN's bias [Gb, H] from b_ih and b_hh (zeros without bias)
Tensor bias_for(const RnnParams& p, const Tensor& b_ih, const Tensor& b_hh) {
  const int64_t H = p.H, G = rnn_gates(p.mode);
  Tensor out = empty({dnnl_bias_gates(p.mode), H});
  float* o = static_cast<float*>(out.data_ptr());
  if (!p.bias) {
    std::memset(o, 0, size_t(out.numel()) * sizeof(float));
    return out;
  }
  const float* bi = static_cast<const float*>(b_ih.data_ptr());
  const float* bh = static_cast<const float*>(b_hh.data_ptr());
  for (int64_t g = 0; g < G; ++g) {
    float* dst = o + dnnl_gate(p.mode, g) * H;
    bool split = p.mode == RnnMode::gru && g == 2;  // n: b_in outside, b_hn inside the reset gate
    for (int64_t j = 0; j < H; ++j) dst[j] = split ? bi[g * H + j] : bi[g * H + j] + bh[g * H + j];
  }
  if (p.mode == RnnMode::gru) std::memcpy(o + 3 * H, bh + 2 * H, size_t(H) * sizeof(float));
  return out;
}

md state_md(const RnnParams& p, DType dtype = DType::f32) { return md({1, 1, p.B, p.H}, dnnl_type(dtype), tag::ldnc); }

}  // namespace

void rnn_use_loops(bool on) { g_rnn_loops.store(on); }
bool rnn_loops_on() { return g_rnn_loops.load(std::memory_order_relaxed); }

// bf16 layers need oneDNN's bf16 kernels (AVX512-BF16 or AMX); the loops compute in f32
bool CpuBackend::rnn_native_bf16() const { return native_products(DType::bf16) && !rnn_loops_on(); }

int64_t CpuBackend::rnn_workspace_bytes(const RnnParams& p, DType dtype) {
  if (use_loops(p, dtype)) return rnn_loops_workspace_bytes(p, dtype);
  return int64_t(plan_for(p, Pass::training, dtype).workspace.get_size());
}

void CpuBackend::rnn_forward(const RnnParams& p, const Tensor& y, const Tensor& hy, const Tensor& cy,
                             const Tensor& workspace, const Tensor& x, const Tensor& hx, const Tensor& cx,
                             const Tensor& w_ih, const Tensor& w_hh, const Tensor& b_ih, const Tensor& b_hh) {
  if (use_loops(p, x.dtype())) return rnn_loops_forward(p, y, hy, cy, workspace, x, hx, cx, w_ih, w_hh, b_ih, b_hh);
  RnnPlan& pl = plan_for(p, p.training ? Pass::training : Pass::inference, x.dtype());
  Scratch wl = weights_for(p, pl.to_layer, pl.weights_layer, p.I, w_ih);
  Scratch wi = weights_for(p, pl.to_iter, pl.weights_iter, p.H, w_hh);
  Tensor bias = bias_for(p, b_ih, b_hh);
  md s = state_md(p, x.dtype()), c = state_md(p);
  std::unordered_map<int, dnnl::memory> args{
      {DNNL_ARG_SRC_LAYER, memory_of(pl.src_layer, x)}, {DNNL_ARG_SRC_ITER, memory_of(s, hx)},
      {DNNL_ARG_WEIGHTS_LAYER, wl.mem},                 {DNNL_ARG_WEIGHTS_ITER, wi.mem},
      {DNNL_ARG_BIAS, memory_of(pl.bias, bias)},        {DNNL_ARG_DST_LAYER, memory_of(pl.dst_layer, y)},
      {DNNL_ARG_DST_ITER, memory_of(s, hy)}};
  if (p.mode == RnnMode::lstm) {
    args[DNNL_ARG_SRC_ITER_C] = memory_of(c, cx);
    args[DNNL_ARG_DST_ITER_C] = memory_of(c, cy);
  }
  if (p.training) args[DNNL_ARG_WORKSPACE] = memory_of(pl.workspace, workspace);
  pl.prim.execute(dnnl_stream(), args);
}

void CpuBackend::rnn_backward(const RnnParams& p, const Tensor& gx, const Tensor& ghx, const Tensor& gcx,
                              const Tensor& gw_ih, const Tensor& gw_hh, const Tensor& gb_ih, const Tensor& gb_hh,
                              const Tensor& gy, const Tensor& ghy, const Tensor& gcy, const Tensor& x,
                              const Tensor& hx, const Tensor& cx, const Tensor& w_ih, const Tensor& w_hh,
                              const Tensor& b_ih, const Tensor& b_hh, const Tensor& y, const Tensor& hy,
                              const Tensor& cy, const Tensor& workspace) {
  if (use_loops(p, x.dtype()))
    return rnn_loops_backward(p, gx, ghx, gcx, gw_ih, gw_hh, gb_ih, gb_hh, gy, ghy, gcy, x, hx, cx, w_ih, w_hh, y,
                              workspace);
  RnnPlan& pl = plan_for(p, Pass::backward, x.dtype());
  const int64_t G = rnn_gates(p.mode), H = p.H;
  Scratch wl = weights_for(p, pl.to_layer, pl.weights_layer, p.I, w_ih);
  Scratch wi = weights_for(p, pl.to_iter, pl.weights_iter, p.H, w_hh);
  Tensor bias = bias_for(p, b_ih, b_hh);
  Scratch dwl = scratch(pl.diff_weights_layer), dwi = scratch(pl.diff_weights_iter);
  std::memset(dwl.bytes.data_ptr(), 0, size_t(dwl.bytes.numel()));
  std::memset(dwi.bytes.data_ptr(), 0, size_t(dwi.bytes.numel()));
  Tensor dbias = zeros({dnnl_bias_gates(p.mode), H});
  md s = state_md(p, x.dtype()), f = state_md(p);  // the hidden state's dtype; f32 (cell state, gradients)
  std::unordered_map<int, dnnl::memory> args{
      {DNNL_ARG_SRC_LAYER, memory_of(pl.src_layer, x)},
      {DNNL_ARG_SRC_ITER, memory_of(s, hx)},
      {DNNL_ARG_WEIGHTS_LAYER, wl.mem},
      {DNNL_ARG_WEIGHTS_ITER, wi.mem},
      {DNNL_ARG_BIAS, memory_of(pl.bias, bias)},
      {DNNL_ARG_DST_LAYER, memory_of(pl.dst_layer, y)},
      {DNNL_ARG_DST_ITER, memory_of(s, hy)},
      {DNNL_ARG_DIFF_SRC_LAYER, memory_of(pl.diff_src_layer, gx)},
      {DNNL_ARG_DIFF_SRC_ITER, memory_of(f, ghx)},
      {DNNL_ARG_DIFF_WEIGHTS_LAYER, dwl.mem},
      {DNNL_ARG_DIFF_WEIGHTS_ITER, dwi.mem},
      {DNNL_ARG_DIFF_BIAS, memory_of(pl.bias, dbias)},
      {DNNL_ARG_DIFF_DST_LAYER, memory_of(pl.diff_dst_layer, gy)},
      {DNNL_ARG_DIFF_DST_ITER, memory_of(f, ghy)},
      {DNNL_ARG_WORKSPACE, memory_of(pl.workspace, workspace)}};
  if (p.mode == RnnMode::lstm) {
    args[DNNL_ARG_SRC_ITER_C] = memory_of(f, cx);
    args[DNNL_ARG_DST_ITER_C] = memory_of(f, cy);
    args[DNNL_ARG_DIFF_SRC_ITER_C] = memory_of(f, gcx);
    args[DNNL_ARG_DIFF_DST_ITER_C] = memory_of(f, gcy);
  }
  pl.prim.execute(dnnl_stream(), args);

  // the weight gradients back in PyTorch's layout and gate order
  auto weights_back = [&](dnnl::reorder& r, Scratch& d, int64_t in, const Tensor& out) {
    Tensor dense = p.mode == RnnMode::gru ? empty(out.shape()) : out;
    dnnl::memory user = memory_of(user_weights(in, G, H), dense);
    r.execute(dnnl_stream(), d.mem, user);
    if (p.mode != RnnMode::gru) return;
    int64_t block = H * in;
    const float* src = static_cast<const float*>(dense.data_ptr());
    float* dst = static_cast<float*>(out.data_ptr());
    for (int64_t g = 0; g < 3; ++g)
      std::memcpy(dst + g * block, src + dnnl_gate(p.mode, g) * block, size_t(block) * sizeof(float));
  };
  weights_back(pl.from_layer, dwl, p.I, gw_ih);
  weights_back(pl.from_iter, dwi, p.H, gw_hh);
  if (p.bias) {
    // b_ih and b_hh enter as one sum, except GRU's n gate: b_in outside, b_hn inside r
    const float* db = static_cast<const float*>(dbias.data_ptr());
    float* gi = static_cast<float*>(gb_ih.data_ptr());
    float* gh = static_cast<float*>(gb_hh.data_ptr());
    for (int64_t g = 0; g < G; ++g) {
      const float* src = db + dnnl_gate(p.mode, g) * H;
      std::memcpy(gi + g * H, src, size_t(H) * sizeof(float));
      std::memcpy(gh + g * H, p.mode == RnnMode::gru && g == 2 ? db + 3 * H : src, size_t(H) * sizeof(float));
    }
  }
}

}  // namespace reel::cpu
