// What each recorded op keeps on its tape entry, by op: the struct a tool reads with
// node.args<T>() (autograd/op_args.h). Ops not listed keep nothing (args_name() is "").
// Dims are non-negative (wrapped) wherever an op keeps one.
//
//   op (tape name)                                   args
//   conv2d, conv2d_relu, conv2d_blocked,             ConvParams (tensor/backend.h)
//     conv_transpose2d, conv2d_backward_data,
//     conv2d_backward_weight
//   max_pool2d, avg_pool2d, and their _backward      PoolArgs
//   scaled_dot_product_attention                     AttentionParams (tensor/backend.h)
//   rnn_layer                                        RnnLayerArgs
//   rnn_tanh, rnn_relu, lstm, gru (the whole stack)  RnnStackArgs
//   batch_norm, batch_norm_relu (+ its blocked form) BatchNormArgs
//   layer_norm                                       LayerNormArgs
//   softmax, log_softmax                             SoftmaxArgs
//   cross_entropy                                    CrossEntropyArgs
//   gelu, erf, silu, mish, hardswish, softplus, elu  ActivationArgs
//   leaky_relu                                       LeakyReluArgs
//   pow (by a number)                                PowArgs
//   clamp (by numbers)                               ClampArgs
//   add, sub (with alpha)                            AlphaArgs
//   mul (by a number)                                ScaleArgs
//   dropout (training, 0 < p < 1)                    DropoutArgs
//   maximum, minimum                                 ExtremumArgs
//   sum, mean, prod, amax, amin                      ReduceArgs
//   norm                                             PNormArgs
//   transpose                                        TransposeArgs
//   permute                                          PermuteArgs
//   slice                                            SliceArgs
//   cat, split, chunk, scatter, scatter_add,         DimArgs
//   index_select, gather
//   index_select_backward, gather_backward           LookupGradArgs
//   index_add                                        IndexAddArgs
//   embedding, embedding_backward                    EmbeddingArgs
//   cumsum, cumsum_reverse, cumprod                  ScanArgs
//   backward_hook (nn::Module's backward hooks)      ModuleHookArgs
#pragma once
#include <cstdint>

#include "../tensor/backend.h"
#include "op_args.h"

namespace reel {

const char* unary_op_name(UnaryOp op);  // "gelu_tanh"
const char* rnn_mode_name(RnnMode mode);  // "lstm"

// max_pool2d, avg_pool2d: the window as the backend takes it, and whether the output
// size came from ceil_mode (it differs from the floor formula's).
struct PoolArgs : PoolParams {
  bool ceil_mode = false;
  static constexpr const char* type_name = "PoolArgs";
  template <class F>
  void fields(F&& f) const {
    f("kernel", kernel);
    f("stride", stride);
    f("padding", padding);
    f("count_include_pad", count_include_pad);
    f("ceil_mode", ceil_mode);
  }
};

// rnn_layer: one layer in one direction, and whether it ran in bf16 (autocast)
struct RnnLayerArgs : RnnParams {
  bool bf16 = false;
  static constexpr const char* type_name = "RnnLayerArgs";
  template <class F>
  void fields(F&& f) const {
    f("mode", rnn_mode_name(mode));
    f("T", T);
    f("B", B);
    f("I", I);
    f("H", H);
    f("reverse", reverse);
    f("bias", bias);
    f("bf16", bf16);
  }
};

// rnn_tanh, rnn_relu, lstm, gru: rnn()'s one entry for the whole stack where the backend ran
// it in one call (rnn_stack_forward; else the rnn_layer entries carry RnnLayerArgs)
struct RnnStackArgs : RnnStackParams {
  static constexpr const char* type_name = "RnnStackArgs";
  template <class F>
  void fields(F&& f) const {
    f("mode", rnn_mode_name(mode));
    f("layers", layers);
    f("directions", directions);
    f("T", T);
    f("B", B);
    f("I", I);
    f("H", H);
    f("bias", bias);
    f("batch_first", batch_first);
    f("dropout", dropout);
  }
};

// batch_norm, batch_norm_relu: batch statistics (training) or running ones; `pieces`
// inputs concatenated along channels come first (batch_norm_relu's DenseNet form; 1 else)
struct BatchNormArgs {
  bool training = true;
  double eps = 1e-5;
  int64_t pieces = 1;
  static constexpr const char* type_name = "BatchNormArgs";
  template <class F>
  void fields(F&& f) const {
    f("training", training);
    f("eps", eps);
    f("pieces", pieces);
  }
};

// layer_norm: dims [lead, rank) are normalised
struct LayerNormArgs {
  int64_t lead = 0;
  double eps = 1e-5;
  static constexpr const char* type_name = "LayerNormArgs";
  template <class F>
  void fields(F&& f) const {
    f("lead", lead);
    f("eps", eps);
  }
};

struct SoftmaxArgs {
  int64_t dim = 0;
  bool log = false;  // log_softmax
  static constexpr const char* type_name = "SoftmaxArgs";
  template <class F>
  void fields(F&& f) const {
    f("dim", dim);
    f("log", log);
  }
};

struct CrossEntropyArgs {
  double label_smoothing = 0;
  int64_t ignore_index = -100;
  static constexpr const char* type_name = "CrossEntropyArgs";
  template <class F>
  void fields(F&& f) const {
    f("label_smoothing", label_smoothing);
    f("ignore_index", ignore_index);
  }
};

// y = f(x; a, b): softplus's a = beta, b = threshold; elu's a = alpha; unused ones 0
struct ActivationArgs {
  UnaryOp kind = UnaryOp::gelu;
  double a = 0, b = 0;
  static constexpr const char* type_name = "ActivationArgs";
  template <class F>
  void fields(F&& f) const {
    f("kind", unary_op_name(kind));
    f("a", a);
    f("b", b);
  }
};

struct LeakyReluArgs {
  double slope = 0.01;
  static constexpr const char* type_name = "LeakyReluArgs";
  template <class F>
  void fields(F&& f) const { f("slope", slope); }
};

struct PowArgs {
  double exponent = 1;
  static constexpr const char* type_name = "PowArgs";
  template <class F>
  void fields(F&& f) const { f("exponent", exponent); }
};

struct ClampArgs {
  double low = 0, high = 0;
  static constexpr const char* type_name = "ClampArgs";
  template <class F>
  void fields(F&& f) const {
    f("low", low);
    f("high", high);
  }
};

// add(a, b, alpha): a + alpha b (sub records add with -alpha)
struct AlphaArgs {
  double alpha = 1;
  static constexpr const char* type_name = "AlphaArgs";
  template <class F>
  void fields(F&& f) const { f("alpha", alpha); }
};

// mul(x, number): x * scale
struct ScaleArgs {
  double scale = 1;
  static constexpr const char* type_name = "ScaleArgs";
  template <class F>
  void fields(F&& f) const { f("scale", scale); }
};

// dropout: the keep rule and where its uniforms come from (Philox key `seed`, first block
// `offset`: Backend::dropout_forward's mask); mask_saved false where the forward kept no
// mask and its backward draws the same one again (Backend::dropout_apply)
struct DropoutArgs {
  double p = 0;
  uint64_t seed = 0, offset = 0;
  bool mask_saved = true;
  static constexpr const char* type_name = "DropoutArgs";
  template <class F>
  void fields(F&& f) const {
    f("p", p);
    f("seed", seed);
    f("offset", offset);
    f("mask_saved", mask_saved);
  }
};

// maximum (true) or minimum (false) of two tensors
struct ExtremumArgs {
  bool maximum = true;
  static constexpr const char* type_name = "ExtremumArgs";
  template <class F>
  void fields(F&& f) const { f("maximum", maximum); }
};

// a reduction: the dims reduced, ascending (all of them for a full reduction)
struct ReduceArgs {
  Dims dims;
  static constexpr const char* type_name = "ReduceArgs";
  template <class F>
  void fields(F&& f) const { f("dims", dims); }
};

// norm: (sum |x|^p)^(1/p)
struct PNormArgs {
  double p = 2;
  static constexpr const char* type_name = "PNormArgs";
  template <class F>
  void fields(F&& f) const { f("p", p); }
};

struct TransposeArgs {
  int64_t dim0 = 0, dim1 = 1;
  static constexpr const char* type_name = "TransposeArgs";
  template <class F>
  void fields(F&& f) const {
    f("dim0", dim0);
    f("dim1", dim1);
  }
};

// permute: output dim i is input dim order[i]
struct PermuteArgs {
  Dims order;
  static constexpr const char* type_name = "PermuteArgs";
  template <class F>
  void fields(F&& f) const { f("order", order); }
  Dims inverse() const {  // the order that undoes it (backward's)
    Dims inv = Dims::filled(order.size(), 0);
    for (int i = 0; i < order.size(); ++i) inv[int(order[i])] = i;
    return inv;
  }
};

// slice: x[start : start + step (size - 1) + 1 : step] along dim
struct SliceArgs {
  int64_t dim = 0, start = 0, step = 1;
  static constexpr const char* type_name = "SliceArgs";
  template <class F>
  void fields(F&& f) const {
    f("dim", dim);
    f("start", start);
    f("step", step);
  }
};

// one dim: cat's, scatter's, index_select's, gather's
struct DimArgs {
  int64_t dim = 0;
  static constexpr const char* type_name = "DimArgs";
  template <class F>
  void fields(F&& f) const { f("dim", dim); }
};

// index_select_backward and gather_backward (recorded under create_graph): zeros with g
// added at the index along dim (gather: scatter_add, else index_add)
struct LookupGradArgs {
  int64_t dim = 0;
  bool gather = false;
  static constexpr const char* type_name = "LookupGradArgs";
  template <class F>
  void fields(F&& f) const {
    f("dim", dim);
    f("gather", gather);
  }
};

// index_add: y.index_select(dim, index) += alpha src
struct IndexAddArgs {
  int64_t dim = 0;
  double alpha = 1;
  static constexpr const char* type_name = "IndexAddArgs";
  template <class F>
  void fields(F&& f) const {
    f("dim", dim);
    f("alpha", alpha);
  }
};

// embedding: the row that gets no gradient (-1: none)
struct EmbeddingArgs {
  int64_t padding_idx = -1;
  static constexpr const char* type_name = "EmbeddingArgs";
  template <class F>
  void fields(F&& f) const { f("padding_idx", padding_idx); }
};

// cumsum (reverse: from the end), cumprod
struct ScanArgs {
  int64_t dim = 0;
  bool reverse = false;
  static constexpr const char* type_name = "ScanArgs";
  template <class F>
  void fields(F&& f) const {
    f("dim", dim);
    f("reverse", reverse);
  }
};

// backward_hook: the identity an nn::Module's backward hooks ride on, at the module's
// input (true) or its output (false)
struct ModuleHookArgs {
  bool input = false;
  static constexpr const char* type_name = "ModuleHookArgs";
  template <class F>
  void fields(F&& f) const { f("input", input); }
};

}  // namespace reel
