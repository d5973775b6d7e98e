// ONNX export by tracing: an op hook (debug/debug.h) sees every op the forward pass
// runs at depth 0 (called by the model's code, not inside another op) with its input
// and output tensors and its tape entry, which keeps the op's arguments typed
// (ConvParams, SoftmaxArgs, ...: autograd/op_args_types.h). Each op becomes one or a few
// ONNX nodes, written by its entry in one table (Tracer::entries); tensors are matched
// by their TensorImpl, and a tensor that no traced op made is an initializer (a
// parameter or buffer by its module name, else a constant). The trace runs with grad
// mode on and the floating-point inputs requiring grad, so that every op records its
// tape entry, and keeps a handle on every tensor it met so that no address is reused.
// The tracer and its entries: onnx/internal/tracer.h, onnx/tracer.cpp.
#include "export.h"

#include <onnx/checker.h>
#include <onnx/onnx_pb.h>

#include <exception>
#include <thread>

#include "../autograd/grad_mode.h"
#include "../debug/debug.h"
#include "../tensor/atomic_file.h"
#include "internal/tracer.h"

namespace reel::onnx {

using internal::Tracer;

void export_model(nn::Module& module, const std::function<std::vector<Tensor>(const std::vector<Tensor>&)>& forward,
                  const std::vector<Tensor>& example_inputs, const std::string& path, ExportOptions options) {
  ::onnx::ModelProto model;
  model.set_ir_version(8);
  model.set_producer_name("reel");
  model.set_producer_version("0.1.0");
  auto* opset = model.add_opset_import();
  opset->set_domain("");
  opset->set_version(options.opset);
  ::onnx::GraphProto& g = *model.mutable_graph();
  g.set_name("reel");
  Tracer tracer(g, options.opset);
  tracer.add_names(module.named_parameters());
  tracer.add_names(module.named_buffers());

  std::vector<Tensor> inputs;
  for (size_t i = 0; i < example_inputs.size(); ++i) {
    Tensor x = example_inputs[i];
    if (x.is_floating_point()) x = x.detach().clone().requires_grad_();  // so that every op records
    std::string name = i < options.input_names.size() ? options.input_names[i] : "input" + std::to_string(i);
    tracer.input(x, name, options.batch_dim);
    inputs.push_back(x);
  }
  std::vector<Tensor> outputs;
  {
    bool was = grad_enabled();
    set_grad_enabled(true);
    std::thread::id me = std::this_thread::get_id();
    // An op the tracer refuses is kept and thrown after the forward returns: thrown from
    // inside the hook, the error unwound through the op's recording and leaked its outputs
    // (LeakSanitizer, test/onnx/export_models.cpp's refusals).
    std::exception_ptr refused;
    debug::HookHandle hook = debug::add_op_hook([&](const debug::OpRecord& r) {
      if (refused || std::this_thread::get_id() != me || r.phase != debug::Phase::forward) return;
      try {
        if (r.depth == 0) tracer.op(r);
        else if (r.depth == 1) tracer.nested(r);
      } catch (...) {
        refused = std::current_exception();
      }
    });
    try {
      outputs = forward(inputs);
    } catch (...) {
      hook.remove();
      set_grad_enabled(was);
      if (refused) std::rethrow_exception(refused);  // the first refusal, not what followed from it
      throw;
    }
    hook.remove();
    set_grad_enabled(was);
    if (refused) std::rethrow_exception(refused);
  }
  for (size_t i = 0; i < outputs.size(); ++i)
    tracer.output(outputs[i], i < options.output_names.size() ? options.output_names[i] : "output" + std::to_string(i),
                  options.batch_dim);
  try {
    ::onnx::checker::check_model(model);
  } catch (const std::exception& e) {
    throw Error(std::string("onnx::export_model: the ONNX checker rejects the traced graph: ") + e.what());
  }
  std::string bytes;
  if (!model.SerializeToString(&bytes)) throw Error("onnx::export_model: cannot serialise the model for " + path);
  write_file_atomically(path, bytes, "onnx::export_model");
}

void export_model(nn::Module& module, const std::vector<Tensor>& example_inputs, const std::string& path,
                  ExportOptions options, Site site) {
  if (example_inputs.size() != 1)
    throw Error("onnx::export_model: a module called as module(x) takes 1 input, got " +
                std::to_string(example_inputs.size()) + " (pass a forward function for several)");
  export_model(module, [&](const std::vector<Tensor>& in) { return std::vector<Tensor>{module(in[0], site)}; },
               example_inputs, path, std::move(options));
}

}  // namespace reel::onnx
