// Node::name(): libtorch's name for a tape entry, as y.grad_fn()->name() gives it there.
// The names are PyTorch 1.13's for the same call (test/reference/libtorch_surface.py writes
// the test's table; 2.x differs only for reshape of a contiguous tensor: ViewBackward0).
// Where PyTorch's last node depends on the call (a sum over all elements is SumBackward0,
// over dims SumBackward1), the node's recorded shapes decide. Where reel fuses what
// PyTorch runs as several ops, the name is that of PyTorch's last one (linear:
// AddmmBackward0 with a bias, MmBackward0 without). An op PyTorch has no node for is
// named as PyTorch would name it: CamelCase + "Backward0". An op reel composes of others
// (addmm, masked_fill, mse_loss, select today) has no node of its own: its grad_fn() is
// its last op's, named as libtorch names that op; the table's entries for such ops apply
// once they record their own node.
#include <cctype>
#include <cstring>
#include <string>
#include <utility>

#include "node.h"

namespace reel {

namespace {
struct Named {
  const char* op;
  const char* name;
};
// reel's op -> libtorch's node, where the name is not simply CamelCase(op) + "Backward0"
constexpr Named kNames[] = {
    {"clamp", "ClampBackward1"},
    {"square", "PowBackward0"},
    {"outer", "MulBackward0"},
    {"dropout", "MulBackward0"},
    {"conv2d", "ConvolutionBackward0"},
    {"conv2d_relu", "ReluBackward0"},
    {"conv1d", "ConvolutionBackward0"},
    {"conv_transpose2d", "ConvolutionBackward0"},
    {"linear_relu", "ReluBackward0"},
    {"add_relu", "ReluBackward0"},
    {"max_pool2d", "MaxPool2DWithIndicesBackward0"},
    {"avg_pool2d", "AvgPool2DBackward0"},
    {"adaptive_avg_pool2d", "MeanBackward1"},
    {"max_pool1d", "SqueezeBackward1"},
    {"avg_pool1d", "SqueezeBackward1"},
    {"adaptive_avg_pool1d", "SqueezeBackward1"},
    {"batch_norm", "NativeBatchNormBackward0"},
    {"batch_norm_relu", "ReluBackward0"},
    {"layer_norm", "NativeLayerNormBackward0"},
    {"cross_entropy", "NllLossBackward0"},
    {"l1_loss", "MeanBackward0"},
    {"kl_div", "MeanBackward0"},
    {"cosine_similarity", "SumBackward1"},
    {"normalize", "DivBackward0"},
    {"reshape", "ReshapeAliasBackward0"},
    {"flatten", "ReshapeAliasBackward0"},
    {"narrow", "SliceBackward0"},
    {"squeeze", "SqueezeBackward1"},
    {"to", "ToCopyBackward0"},
    {"contiguous", "CloneBackward0"},
    {"chunk", "SplitBackward0"},
    {"split", "SplitBackward0"},
    {"tile", "RepeatBackward0"},
    {"einsum", "ViewBackward0"},
    {"pad", "ConstantPadNdBackward0"},
    {"interpolate", "UpsampleNearest2DBackward1"},
    {"sum_to", "SumBackward1"},
    {"binary_cross_entropy_with_logits", "BinaryCrossEntropyWithLogitsBackward0"},
    {"mse_loss", "MseLossBackward0"},
    {"nll_loss", "NllLossBackward0"},
    {"smooth_l1_loss", "SmoothL1LossBackward0"},
    {"leaky_relu", "LeakyReluBackward0"},
    {"max_pool2d_with_indices", "MaxPool2DWithIndicesBackward0"},
    {"rsub", "RsubBackward1"},
    {"rdiv", "MulBackward0"},
};

// add -> Add, leaky_relu -> LeakyRelu, log_softmax -> LogSoftmax, conv2d -> Conv2D
std::string camel(const char* op) {
  std::string out;
  bool up = true;
  for (const char* c = op; *c; ++c) {
    if (*c == '_') {
      up = true;
      continue;
    }
    bool digit_before = c != op && std::isdigit(static_cast<unsigned char>(c[-1]));
    out += (up || digit_before) ? char(std::toupper(static_cast<unsigned char>(*c))) : *c;
    up = false;
  }
  return out;
}
}  // namespace

std::string Node::name() const {
  if (custom) {
    std::string n = custom->node_name();
    if (!n.empty()) return n;
  }
  std::string o = op;
  size_t n_in = inputs.size();
  auto rank = [&](size_t i) { return i < n_in ? inputs[i].shape.size() : -1; };
  int out_rank = outputs.empty() ? -1 : outputs[0].shape.size();
  // the calls whose PyTorch node depends on the arguments
  if (o == "sum" || o == "mean") return camel(op) + (out_rank == 0 ? "Backward0" : "Backward1");
  if (o == "pow") return n_in == 2 && inputs[1].defined ? "PowBackward1" : "PowBackward0";
  if (o == "norm") return "NormBackward1";
  if (o == "matmul") {
    if (rank(0) == 2 && rank(1) == 2) return "MmBackward0";
    if (rank(0) == 1 && rank(1) == 1) return "DotBackward0";
    if (rank(0) == 2 && rank(1) == 1) return "MvBackward0";
    return "UnsafeViewBackward0";  // batched: PyTorch folds the batch and views the product back
  }
  if (o == "linear") {
    bool bias = n_in == 3 && inputs[2].defined;
    if (rank(0) != 2) return "ViewBackward0";  // [*, in] with * of more dims: viewed back after the product
    return bias ? "AddmmBackward0" : "MmBackward0";
  }
  if (o == "max" || o == "min") return camel(op) + (out_rank == 0 ? "Backward1" : "Backward0");
  for (const Named& n : kNames)
    if (o == n.op) return n.name;
  return camel(op) + "Backward0";
}

}  // namespace reel
