// ONNX export: one traced forward pass of a model, written as an ONNX model file that
// onnxruntime, TensorRT or OpenVINO run. Parameters and buffers become initializers;
// the first dimension of every input is the symbolic "batch".
//
//   model.eval();                                    // batch norm and dropout as in inference
//   reel::onnx::export_model(model, {reel::randn({1, 1, 28, 28})}, "model.onnx");
//   reel::onnx::export_model(model, {x}, "model.onnx", {.opset = 17});
//
// Exportable ops (those the samples' and benchmarks' models use): linear (Gemm, or
// MatMul + Add above 2-D), conv2d, max/avg/adaptive-avg pool, batch_norm and batch_norm_relu in eval mode,
// layer_norm, relu, gelu, tanh, sigmoid, softmax, log_softmax, reshape/view/flatten,
// squeeze/unsqueeze, transpose/permute, add/sub/mul/div of two tensors, add_relu (Add, Relu), mul by a scalar,
// matmul, embedding (Gather), cat (Concat), dropout in eval mode (nothing), contiguous/clone, and the
// recurrent layers (GRU, LSTM, RNN: one direction, zero initial state, full-length
// sequences, any number of layers) as ONNX GRU/LSTM/RNN ops. Any other
// op, or one of these in a form ONNX cannot express (a training-mode batch norm, an
// adaptive pool with uneven windows), throws reel::Error naming the op and its line.
// Needs libreel_onnx (target reel::onnx, built when Debian's libonnx-dev is present);
// this header is not part of <reel/reel.h>.
#pragma once
#include <functional>
#include <string>
#include <vector>

#include "../nn/module.h"

namespace reel::onnx {

struct ExportOptions {
  int opset = 17;                 // 17: LayerNormalization; 20 adds Gelu as one op
  std::string batch_dim = "batch";  // the symbolic name of every input's first dimension
  std::vector<std::string> input_names = {};   // default input0, input1, ...
  std::vector<std::string> output_names = {};  // default output0, ...
};

// Runs `forward` once on `example_inputs` (grad mode on, nothing kept) and writes the ops
// it ran to `path` (checked with onnx::checker, then written by write_file_atomically:
// a failure leaves the previous file whole and no temporary).
void export_model(nn::Module& module, const std::function<std::vector<Tensor>(const std::vector<Tensor>&)>& forward,
                  const std::vector<Tensor>& example_inputs, const std::string& path, ExportOptions options = {});
// A one-input, one-output module: forward is module(x), called from `site` (errors name
// the op's module and this line).
void export_model(nn::Module& module, const std::vector<Tensor>& example_inputs, const std::string& path,
                  ExportOptions options = {}, Site site = {});

}  // namespace reel::onnx
