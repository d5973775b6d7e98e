// Backend: the whole kernel contract. Every op checks its arguments and allocates
// its outputs once, above this line (autograd/); a backend only computes. A new op
// adds one method here and one implementation per backend (cpu/, cuda/).
//
// Conventions for every method:
// - all tensors live on this backend's device; outputs are allocated by the caller
//   with their final shape and dtype, and are contiguous unless said otherwise;
// - inputs may have any strides (expanded broadcast inputs have stride 0);
// - elementwise inputs share one dtype (the caller promotes); comparison outputs are bool.
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

#include "device.h"
#include "tensor.h"

namespace reel {

enum class UnaryOp : uint8_t {
  neg, abs, exp, log, sqrt, rsqrt, relu, gelu, sigmoid, tanh, sign, square, reciprocal,
  sin, cos, log1p, logical_not,
  // with scalar parameters a (and b): out = f(x, a, b)
  add_scalar,   // x + a
  mul_scalar,   // x * a
  rsub_scalar,  // a - x
  rdiv_scalar,  // a / x
  pow_scalar,   // x ^ a
  rpow_scalar,  // a ^ x
  clamp,        // min(max(x, a), b)
  leaky_relu,   // x > 0 ? x : a x
  eq_scalar, ne_scalar, lt_scalar, le_scalar, gt_scalar, ge_scalar,  // bool outputs
  // activations (autograd/ops_activation.cpp); gelu above is the exact x Phi(x); their
  // gradients go through Backend::unary_backward
  erf,
  gelu_tanh,  // x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) / 2
  silu,       // x sigmoid(x)
  mish,       // x tanh(softplus(x))
  hardswish,  // x relu6(x + 3) / 6
  softplus,   // ln(1 + e^(a x)) / a, x where a x > b (a = beta, b = threshold)
  elu,        // x > 0 ? x : a (e^x - 1)
};

enum class BinaryOp : uint8_t {
  add, sub, mul, div, maximum, minimum, pow,
  eq, ne, lt, le, gt, ge,  // bool outputs
  logical_and, logical_or,
  // gradients of unary ops, fused: out = f(grad, saved)
  relu_backward,     // g * (x > 0)
  sigmoid_backward,  // g * y (1 - y), y = sigmoid(x)
  tanh_backward,     // g * (1 - y^2), y = tanh(x)
  add_relu,          // max(a + b, 0), NaN passing: a residual sum and its ReLU in one pass
};

enum class ReduceOp : uint8_t { sum, mean, max, min, prod, argmax, argmin };

enum class ScanOp : uint8_t { sum, prod };

struct ConvParams {
  int64_t stride[2] = {1, 1};
  int64_t padding[2] = {0, 0};
  int64_t dilation[2] = {1, 1};
  int64_t groups = 1;
  // kept on conv2d's tape entries as is (autograd/op_args.h)
  static constexpr const char* type_name = "ConvParams";
  template <class F>
  void fields(F&& f) const {
    f("stride", stride);
    f("padding", padding);
    f("dilation", dilation);
    f("groups", groups);
  }
};

struct PoolParams {
  int64_t kernel[2] = {1, 1};
  int64_t stride[2] = {1, 1};
  int64_t padding[2] = {0, 0};
  bool count_include_pad = true;  // avg pooling only
};

// One recurrent layer in one direction over a whole sequence (autograd/ops_rnn.cpp
// composes layers, directions and variable lengths from these). PyTorch's cells:
//   rnn_tanh/relu: h' = act(W_ih x + b_ih + W_hh h + b_hh)                      (G = 1)
//   lstm:          [i f g o] = W_ih x + b_ih + W_hh h + b_hh; c' = σf c + σi tanh g;
//                  h' = σo tanh c'                                                (G = 4)
//   gru:           [r z n]: r = σ(.), z = σ(.), n = tanh(W_in x + b_in + r (W_hn h + b_hn)),
//                  h' = (1 - z) n + z h                                           (G = 3)
enum class RnnMode : uint8_t { rnn_tanh, rnn_relu, lstm, gru };
inline int64_t rnn_gates(RnnMode m) { return m == RnnMode::lstm ? 4 : m == RnnMode::gru ? 3 : 1; }
struct RnnParams {
  RnnMode mode = RnnMode::rnn_tanh;
  int64_t T = 0, B = 0, I = 0, H = 0;  // steps, batch, input features, hidden features
  bool reverse = false;  // steps T-1 .. 0
  bool bias = true;
  bool training = true;  // keep the workspace backward reads
};

// The whole stack of recurrent layers, every layer and both directions, in one backend call
// (cuda/rnn_stack.cpp: one cudnnRNNForward; autograd/ops_rnn.cpp's rnn() asks for it first
// and composes the stack from the per-layer calls above where a backend declines).
struct RnnStackParams {
  RnnMode mode = RnnMode::rnn_tanh;
  int64_t layers = 1, directions = 1;  // directions 2: bidirectional
  int64_t T = 0, B = 0, I = 0, H = 0;
  bool bias = true;
  bool batch_first = false;  // x [B, T, I] and y [B, T, D H] instead of [T, B, ...]
  bool training = true;      // keep what backward reads
  double dropout = 0;        // between layers: the module's in training, 0 in eval (a backend may decline it)
};
// What a whole-stack forward leaves for its backward, opaque to the caller (cuDNN: its
// reserve space, the packed weights the forward read, the sequence lengths on the device).
struct RnnStackState {
  Tensor workspace, weights, lengths;
};

// One optimizer step over many parameters, fused: the hyper-parameters of one
// step of optim/ (bias corrections already folded in by the caller).
struct OptimStep {
  enum Kind : uint8_t { sgd, adam, adamw, adamax, rmsprop, adagrad } kind = sgd;
  double lr = 0, momentum = 0, dampening = 0, weight_decay = 0;
  bool nesterov = false, first_step = false, maximize = false;
  double beta1 = 0.9, beta2 = 0.999, eps = 1e-8;
  double bias_correction1 = 1, bias_correction2 = 1;  // 1 - beta^t
  double alpha = 0.99;  // RMSprop smoothing
  bool centered = false;
  // Adagrad: the lr is lr / bias_correction1 with bias_correction1 = 1 + (t - 1) lr_decay
  // (folded in by the caller); its sum of squares starts at initial_accumulator.
  double lr_decay = 0, initial_accumulator = 0;
};

// Scaled dot-product attention, flash-attention style (autograd/ops_attention.cpp):
// per row i of each of BH planes, o_i = sum_j z_ij p_ij v_j with
// p_ij = softmax_j(scale q_i . k_j + mask_ij), z_ij the dropout factor. Nothing of size
// L x S is ever stored: the forward keeps only lse_i = log sum_j e^(s_ij) per row, the
// backward recomputes p from it.
struct AttentionParams {
  double scale = 1;
  bool causal = false;   // key j is masked for query i when j > i (top-left aligned, as PyTorch)
  double dropout_p = 0;  // z_ij = [u >= p] / (1 - p), u the uniform of element (bh L + i) S + j
  uint64_t seed = 0, offset = 0;  // of a Philox fill (tensor/philox.h) from block `offset`
  // kept on the op's tape entries as is (autograd/op_args.h)
  static constexpr const char* type_name = "AttentionParams";
  template <class F>
  void fields(F&& f) const {
    f("scale", scale);
    f("causal", causal);
    f("dropout_p", dropout_p);
    f("seed", seed);
    f("offset", offset);
  }
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual Device device() const = 0;

  // ---- memory
  virtual void* allocate(size_t nbytes) = 0;
  virtual void deallocate(void* ptr, size_t nbytes) = 0;
  // dst = src elementwise, any strides, converting dtype. Same device for both, except
  // that a CUDA backend also copies to and from CPU tensors (the CPU backend never does).
  virtual void copy(const Tensor& dst, const Tensor& src) = 0;
  virtual void fill(const Tensor& out, double value) = 0;
  // Waits for all queued work on this device (the CPU returns at once).
  virtual void synchronize() {}

  // ---- elementwise
  virtual void unary(UnaryOp op, const Tensor& out, const Tensor& x, double a = 0, double b = 0) = 0;
  // An activation's gradient, fused: out = g * f'(x; a, b), x the op's input, for gelu,
  // gelu_tanh, erf, silu, mish, hardswish, softplus and elu (a, b as in unary)
  virtual void unary_backward(UnaryOp op, const Tensor& out, const Tensor& g, const Tensor& x, double a = 0,
                              double b = 0) = 0;
  virtual void binary(BinaryOp op, const Tensor& out, const Tensor& a, const Tensor& b) = 0;
  // out = cond ? a : b; cond is bool
  virtual void where(const Tensor& out, const Tensor& cond, const Tensor& a, const Tensor& b) = 0;
  // out += alpha * x, in place on a contiguous out (gradient accumulation)
  virtual void axpy(const Tensor& out, const Tensor& x, double alpha) = 0;

  // ---- reductions: out has x's rank with every reduced dim of size 1
  virtual void reduce(ReduceOp op, const Tensor& out, const Tensor& x, const std::vector<int>& dims) = 0;

  // ---- random (Philox4x32-10 keyed by seed, counter starting at offset)
  virtual void fill_uniform(const Tensor& out, double low, double high, uint64_t seed, uint64_t offset) = 0;
  virtual void fill_normal(const Tensor& out, double mean, double std, uint64_t seed, uint64_t offset) = 0;
  // Dropout's forward: mask = [u_i >= p] / (1 - p) (f32, or f64 for f64 x) and y = x mask
  // (rounded once), u_i the uniform fill_uniform(.., 0, 1, seed, offset) gives logical
  // element i, whatever the layout of x, y and mask (alike: contiguous or channels-last).
  // The default composes it from the kernels above (tensor/backend.cpp).
  virtual void dropout_forward(const Tensor& y, const Tensor& mask, const Tensor& x, double p, uint64_t seed,
                               uint64_t offset);
  // y = x m for the mask m dropout_forward would write (p < 1), the mask itself never
  // stored: true when this backend did it (x and y alike, contiguous or channels-last), so
  // that dropout keeps (p, seed, offset) instead of a mask and runs this again on the
  // gradient; false, and nothing written, where it has no such kernel.
  virtual bool dropout_apply(const Tensor& y, const Tensor& x, double p, uint64_t seed, uint64_t offset) {
    (void)y, (void)x, (void)p, (void)seed, (void)offset;
    return false;
  }

  // ---- linear algebra
  // out[b] = a[b] @ b[b] (+ bias) (then relu): a [B,M,K], b [B,K,N], out [B,M,N], bias [N].
  // a and b may be any-strided 3-D views (transposes are free); B may be 1.
  virtual void matmul(const Tensor& out, const Tensor& a, const Tensor& b, const Tensor& bias, bool relu) = 0;

  // ---- convolution, NCHW; weight [O, C/groups, KH, KW]
  virtual void conv2d_forward(const Tensor& out, const Tensor& x, const Tensor& w, const Tensor& bias,
                              const ConvParams& p, bool relu) = 0;
  virtual void conv2d_backward_data(const Tensor& gx, const Tensor& gy, const Tensor& w, const ConvParams& p) = 0;
  // gb may be undefined (no bias)
  virtual void conv2d_backward_weight(const Tensor& gw, const Tensor& gb, const Tensor& gy, const Tensor& x,
                                      const ConvParams& p) = 0;

  // The channel block B for which conv2d_forward / _backward_weight take x, and
  // conv2d_backward_data writes gx, as [N, C/B, H, W, B] (channel-blocked, oneDNN's
  // nChw{B}c) with no reorder, and for which that beats the plain layout; 0: none
  // (then the ops hand this backend plain tensors only).
  virtual int64_t conv2d_channel_block(DType) const { return 0; }

  // Whether this backend keeps 4-D activations of `dtype` channels-last (NHWC memory
  // behind the NCHW shape, is_channels_last): conv2d_forward then gets y in that layout,
  // conv2d_backward_data gx, and max_pool2d its out, indices and gx wherever x is so;
  // elementwise ops keep it, in every dtype (its elementwise kernels take that layout). For
  // convolutions reading NHWC (oneDNN's AMX bf16 ones): plain costs a reorder on each side.
  virtual bool channels_last(DType) const { return false; }
  // Whether a batch norm under autocast keeps f16/bf16 x laid out so (`x_channels_last`:
  // is_channels_last) in its dtype, in and out, with f32 parameters and statistics (the mixed
  // form, autograd/ops_norm.cpp), instead of casting it to f32: where this backend keeps the
  // dtype channels-last and x is so (AMX CPUs; CUDA's NHWC halves), and where a backend runs
  // the mixed form itself in row-major too (CUDA with REEL_CUDA_HALF_NORM=cudnn).
  virtual bool mixed_batch_norm(DType dtype, bool x_channels_last) const {
    return x_channels_last && channels_last(dtype);
  }

  // Whether this backend's matrix products and convolutions in `dtype` run on native
  // instructions; where they do not (bf16 on a CPU without AVX512-BF16 or AMX, which oneDNN
  // emulates slower than f32), autocast keeps those products in f32.
  virtual bool native_products(DType) const { return true; }
  // Whether recurrent layers run in bf16 themselves (the dtypes at rnn_forward below).
  virtual bool rnn_native_bf16() const { return false; }
  // Whether attention in `dtype` (f16/bf16) runs on a fused kernel of that dtype (cuDNN's,
  // REEL_CUDA_HALF_ATTENTION=cudnn): autocast then hands scaled_dot_product_attention its
  // inputs in the autocast dtype, as PyTorch's does; otherwise autocast keeps attention in
  // f32, and f16/bf16 inputs are computed in f32 twins.
  virtual bool attention_low_precision(DType) const { return false; }

  // ---- pooling, NCHW; indices (i64, flat h*W+w within a plane) only for max
  virtual void max_pool2d_forward(const Tensor& out, const Tensor& indices, const Tensor& x, const PoolParams& p) = 0;
  virtual void max_pool2d_backward(const Tensor& gx, const Tensor& gy, const Tensor& indices, const PoolParams& p) = 0;
  virtual void avg_pool2d_forward(const Tensor& out, const Tensor& x, const PoolParams& p) = 0;
  virtual void avg_pool2d_backward(const Tensor& gx, const Tensor& gy, const PoolParams& p) = 0;
  virtual void adaptive_avg_pool2d_forward(const Tensor& out, const Tensor& x) = 0;
  virtual void adaptive_avg_pool2d_backward(const Tensor& gx, const Tensor& gy) = 0;

  // ---- normalisation. batch_norm over [N, C, *]: per-channel statistics.
  // Training: computes batch mean/invstd into save_mean/save_invstd [C] and updates the
  // running statistics (if defined) with `momentum`. Eval: uses running statistics.
  virtual void batch_norm_forward(const Tensor& out, const Tensor& save_mean, const Tensor& save_invstd,
                                  const Tensor& x, const Tensor& weight, const Tensor& bias,
                                  const Tensor& running_mean, const Tensor& running_var, bool training,
                                  double momentum, double eps) = 0;
  // gw, gb may be undefined
  virtual void batch_norm_backward(const Tensor& gx, const Tensor& gw, const Tensor& gb, const Tensor& gy,
                                   const Tensor& x, const Tensor& weight, const Tensor& save_mean,
                                   const Tensor& save_invstd, bool training) = 0;
  // relu(batch_norm(x)) where x is the concatenation of the pieces `xs` along dim 1 (each
  // [N, C_j, *], one dtype), never materialised: out [N, sum C_j, *] contiguous. Backward
  // writes each wanted piece's gradient gxs[j] (undefined: not wanted); relu's mask is
  // y > 0 (NaN passes). The defaults compose the kernels above (a concatenated copy,
  // batch_norm, relu); a backend overrides them to read each piece once per pass.
  virtual void batch_norm_relu_forward(const Tensor& out, const Tensor& save_mean, const Tensor& save_invstd,
                                       const std::vector<Tensor>& xs, const Tensor& weight, const Tensor& bias,
                                       const Tensor& running_mean, const Tensor& running_var, bool training,
                                       double momentum, double eps);
  virtual void batch_norm_relu_backward(const std::vector<Tensor>& gxs, const Tensor& gw, const Tensor& gb,
                                        const Tensor& gy, const std::vector<Tensor>& xs, const Tensor& y,
                                        const Tensor& weight, const Tensor& save_mean, const Tensor& save_invstd,
                                        bool training);
  // The same op written in / read from the channel-blocked layout out [N, C/B, *, B]
  // (oneDNN's nChw16c for B = 16): what conv2d reads without a reorder where
  // conv2d_channel_block says so. Backward takes gz and the forward's z in that layout.
  // The defaults compose the two above with copies between the layouts.
  virtual void batch_norm_relu_blocked_forward(const Tensor& out, const Tensor& save_mean, const Tensor& save_invstd,
                                               const std::vector<Tensor>& xs, const Tensor& weight,
                                               const Tensor& bias, const Tensor& running_mean,
                                               const Tensor& running_var, bool training, double momentum, double eps);
  virtual void batch_norm_relu_blocked_backward(const std::vector<Tensor>& gxs, const Tensor& gw, const Tensor& gb,
                                                const Tensor& gz, const std::vector<Tensor>& xs, const Tensor& z,
                                                const Tensor& weight, const Tensor& save_mean,
                                                const Tensor& save_invstd, bool training);
  // layer_norm over the last `normalized` elements of each row: x viewed as [rows, normalized]
  virtual void layer_norm_forward(const Tensor& out, const Tensor& save_mean, const Tensor& save_invstd,
                                  const Tensor& x, const Tensor& weight, const Tensor& bias, double eps) = 0;
  virtual void layer_norm_backward(const Tensor& gx, const Tensor& gw, const Tensor& gb, const Tensor& gy,
                                   const Tensor& x, const Tensor& weight, const Tensor& save_mean,
                                   const Tensor& save_invstd) = 0;

  // ---- softmax along `dim` (log: log_softmax); y is the forward output
  virtual void softmax_forward(const Tensor& out, const Tensor& x, int dim, bool log) = 0;
  virtual void softmax_backward(const Tensor& gx, const Tensor& gy, const Tensor& y, int dim, bool log) = 0;

  // ---- fused softmax cross-entropy on logits [N, C] and i64 labels [N].
  // losses [N] (0 where label == ignore_index), lse [N] saved for backward.
  virtual void cross_entropy_forward(const Tensor& losses, const Tensor& lse, const Tensor& logits,
                                     const Tensor& labels, double label_smoothing, int64_t ignore_index) = 0;
  // glogits [N, C] = gloss[n] * (softmax - smoothed one-hot); gloss [N]
  virtual void cross_entropy_backward(const Tensor& glogits, const Tensor& glosses, const Tensor& logits,
                                      const Tensor& lse, const Tensor& labels, double label_smoothing,
                                      int64_t ignore_index) = 0;

  // ---- indexing; index is i64 and contiguous
  // out = x.index_select(dim, index)
  virtual void index_select(const Tensor& out, const Tensor& x, int dim, const Tensor& index) = 0;
  // out.index_select(dim, index) += src, accumulating repeated indices
  virtual void index_add(const Tensor& out, int dim, const Tensor& index, const Tensor& src) = 0;
  // out[i][j] = x[index[i][j]][j] for dim 0 (and likewise for any dim)
  virtual void gather(const Tensor& out, const Tensor& x, int dim, const Tensor& index) = 0;
  // out[index[i][j]][j] += src[i][j] for dim 0
  virtual void scatter_add(const Tensor& out, int dim, const Tensor& index, const Tensor& src) = 0;

  // ---- sorting, scans and scatter (autograd/ops_sort.cpp, ops_scan.cpp, ops_scatter.cpp)
  // Sorts each row of x [R, n] (contiguous) stably, NaN above every number (as PyTorch),
  // and writes the first k = values.size(1) of each sorted row: values [R, k] in x's
  // dtype and indices i64 [R, k] (positions in the row), both contiguous.
  virtual void sort(const Tensor& values, const Tensor& indices, const Tensor& x, bool descending) = 0;
  // out = the running sum (or product) of x along dim, from the end when reverse; out has x's
  // shape and dtype, both any strides.
  virtual void cumulative(ScanOp op, const Tensor& out, const Tensor& x, int dim, bool reverse) = 0;
  // out[p with p[dim] = index[p]] = src[p] over every position p of index: scatter_add
  // without the add. Among repeated positions, which write lands is unspecified.
  virtual void scatter(const Tensor& out, int dim, const Tensor& index, const Tensor& src) = 0;
  // ---- recurrent layers (RnnParams above). Contiguous x [T, B, I], hx/cx [B, H] (cx:
  // LSTM only, else undefined), w_ih [G H, I], w_hh [G H, H], b_ih/b_hh [G H] (undefined
  // without bias) in PyTorch's layout and gate order; y [T, B, H], hy/cy [B, H].
  // workspace: u8 [rnn_workspace_bytes(p)], written by a training forward for backward.
  // A bf16 layer (rnn_native_bf16()): x, hx, w_ih, w_hh, y, hy bf16; the biases, cx, cy and
  // every gradient (in and out) f32.
  virtual int64_t rnn_workspace_bytes(const RnnParams& p, DType dtype) = 0;
  virtual void rnn_forward(const RnnParams& p, const Tensor& y, const Tensor& hy, const Tensor& cy,
                           const Tensor& workspace, const Tensor& x, const Tensor& hx, const Tensor& cx,
                           const Tensor& w_ih, const Tensor& w_hh, const Tensor& b_ih, const Tensor& b_hh) = 0;
  // All gradients of one layer from gy [T, B, H], ghy/gcy [B, H] (zeros where none came),
  // with the forward's inputs, outputs and workspace. Every gradient output is written
  // (gcx undefined unless LSTM, gb_* undefined without bias).
  virtual void rnn_backward(const RnnParams& p, const Tensor& gx, const Tensor& ghx, const Tensor& gcx,
                            const Tensor& gw_ih, const Tensor& gw_hh, const Tensor& gb_ih, const Tensor& gb_hh,
                            const Tensor& gy, const Tensor& ghy, const Tensor& gcy, const Tensor& x,
                            const Tensor& hx, const Tensor& cx, const Tensor& w_ih, const Tensor& w_hh,
                            const Tensor& b_ih, const Tensor& b_hh, const Tensor& y, const Tensor& hy,
                            const Tensor& cy, const Tensor& workspace) = 0;

  // ---- the whole stack (RnnStackParams above). x [T, B, I] ([B, T, I] batch_first), hx/cx
  // [L D, B, H] (cx: LSTM only), all contiguous; weights: per layer-direction k = l D + d,
  // in that order, w_ih [G H, in_l] (in_0 = I, else D H), w_hh [G H, H], then b_ih, b_hh
  // [G H] when p.bias, contiguous, x's dtype; lengths: undefined (every sequence T steps) or
  // i32 [B] on the CPU, each in [1, T]. Writes y [T, B, D H] ([B, T, D H] batch_first; the
  // forward direction's features first, zero past each sequence's end) and hy/cy [L D, B, H]
  // (each sequence's states after its last step; the reverse direction's after step 0), and
  // fills `state` for the backward when p.training. rnn_stack_serves: whether this backend
  // runs p in `dtype`, asked before anything is allocated (where not, the caller composes the
  // stack from rnn_forward); the forward and backward return false, having written nothing,
  // where they do not run.
  virtual bool rnn_stack_serves(const RnnStackParams& p, DType dtype) {
    (void)p, (void)dtype;
    return false;
  }
  virtual bool rnn_stack_forward(const RnnStackParams& p, const Tensor& y, const Tensor& hy, const Tensor& cy,
                                 RnnStackState& state, const Tensor& x, const Tensor& hx, const Tensor& cx,
                                 const std::vector<Tensor>& weights, const Tensor& lengths) {
    (void)p, (void)y, (void)hy, (void)cy, (void)state, (void)x, (void)hx, (void)cx, (void)weights, (void)lengths;
    return false;
  }
  // Every gradient of a stack this backend's rnn_stack_forward ran: gx like x, ghx/gcx like
  // hx/cx, gweights like weights, from gy, ghy, gcy (zeros where none came) and the forward's
  // tensors, lengths and state. False, having written nothing, where it ran no such forward.
  virtual bool rnn_stack_backward(const RnnStackParams& p, const Tensor& gx, const Tensor& ghx, const Tensor& gcx,
                                  const std::vector<Tensor>& gweights, const Tensor& gy, const Tensor& ghy,
                                  const Tensor& gcy, const Tensor& x, const Tensor& hx, const Tensor& cx,
                                  const Tensor& y, const Tensor& lengths, const RnnStackState& state) {
    (void)p, (void)gx, (void)ghx, (void)gcx, (void)gweights, (void)gy, (void)ghy, (void)gcy, (void)x, (void)hx,
        (void)cx, (void)y, (void)lengths, (void)state;
    return false;
  }

  // ---- attention (AttentionParams above). q [BH, L, E], k [BH, S, E], v [BH, S, Ev],
  // out [BH, L, Ev], lse [BH, L] (q's dtype; f32 for f16/bf16 q), all contiguous. mask: undefined, or bool
  // (true: attend) or q's dtype (added to the scores), of any strides: element (bh, i, j)
  // at mask.data + mask_offsets[bh] + i mask.stride(-2) + j mask.stride(-1), where
  // mask_offsets is i64 [BH] on this device (leading dims broadcast freely). A row with
  // every key masked gets o = 0 and lse = -inf (and zero gradients).
  virtual void attention_forward(const Tensor& out, const Tensor& lse, const Tensor& q, const Tensor& k,
                                 const Tensor& v, const Tensor& mask, const Tensor& mask_offsets,
                                 const AttentionParams& p) = 0;
  // gq, gk, gv (like q, k, v) from go (like out, contiguous) and the forward's tensors.
  virtual void attention_backward(const Tensor& gq, const Tensor& gk, const Tensor& gv, const Tensor& go,
                                  const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                                  const Tensor& lse, const Tensor& mask, const Tensor& mask_offsets,
                                  const AttentionParams& p) = 0;

  // ---- optimizers: one fused pass over all parameters of this device. For each i:
  // params[i] -= update(grads[i], state tensors), in place, PyTorch's update rules
  // (optim/optimizers.h). params, grads and state tensors are contiguous, of one
  // shape and dtype per i. State vectors as the kind needs, else empty:
  //   sgd:     state1 momentum buffer (when momentum != 0; first_step: buffer = g)
  //   adam, adamw: state1 exp_avg, state2 exp_avg_sq
  //   adamax:  state1 exp_avg, state2 exp_inf
  //   rmsprop: state1 square_avg, state2 grad_avg (when centered), state3 momentum
  //            buffer (when momentum > 0)
  //   adagrad: state1 sum of squares
  virtual void optim_step(const OptimStep& step, const std::vector<Tensor>& params,
                          const std::vector<Tensor>& grads, const std::vector<Tensor>& state1,
                          const std::vector<Tensor>& state2, const std::vector<Tensor>& state3) = 0;
  // optim_step, and in the same pass rounded[i] (undefined, or a contiguous f16/bf16
  // tensor of params[i]'s shape) = params[i]'s new value as cast() would round it: the
  // copy autocast's next forward reads (autograd/autocast.h). f32 params only. Returns
  // false, having done nothing, where the backend has no such pass (the caller then
  // calls optim_step and drops the copies).
  virtual bool optim_step_rounded(const OptimStep&, const std::vector<Tensor>& /*params*/,
                                  const std::vector<Tensor>& /*grads*/, const std::vector<Tensor>& /*state1*/,
                                  const std::vector<Tensor>& /*state2*/, const std::vector<Tensor>& /*state3*/,
                                  const std::vector<Tensor>& /*rounded*/) {
    return false;
  }

  // ---- mixed precision (optim::GradScaler, PyTorch's _amp_foreach_non_finite_check_and_unscale_
  // and _amp_update_scale_). One fused pass over every gradient of this device: for each i,
  // grads[i] *= inv_scale in place (left as it is when inv_scale == 1), computed in f32 (f64
  // for f64 gradients) and rounded back; found_inf = 1 when any element of any grads[i] is
  // inf, -inf or NaN, else left as it was (never cleared: the caller zeroes it, so several
  // calls accumulate). grads: contiguous f32, f64, f16 or bf16 (any mix); found_inf and
  // inv_scale: [] f32. Read and written on the device: the host never waits.
  virtual void amp_unscale(const std::vector<Tensor>& grads, const Tensor& found_inf, const Tensor& inv_scale) = 0;
  // The scale's update after a step, in place on scale ([] f32) and growth_tracker ([] i32):
  //   found_inf != 0: scale *= backoff, tracker = 0
  //   else: tracker + 1 == interval ? (scale *= growth unless that overflows f32, tracker = 0)
  //                                 : tracker += 1
  // (products in f64, rounded to f32). No host sync.
  virtual void amp_update_scale(const Tensor& scale, const Tensor& growth_tracker, const Tensor& found_inf,
                                double growth_factor, double backoff_factor, int64_t growth_interval) = 0;
};

// The backend of a device; throws Error when none is registered (CUDA absent).
Backend& backend_for(Device device);
// Backends register themselves at static-initialisation time.
void register_backend(DeviceType type, Backend* (*get)(int index));

// [N, C, H, W] of a channel-blocked [N, C/B, H, W, B]
inline Dims unblocked_shape(const Dims& s) { return Dims{s[0], s[1] * s[4], s[2], s[3]}; }
// Copies between a plain x [N, C, *] and its channel-blocked form [N, C/B, *, B] (any
// strides on the plain side; the blocked side as given), one strided copy per block on
// the tensors' backend: the fallbacks where a backend has no fused layout change.
void copy_to_channel_blocks(const Tensor& blocked, const Tensor& plain);
void copy_from_channel_blocks(const Tensor& plain, const Tensor& blocked);

}  // namespace reel
