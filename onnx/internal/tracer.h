// The ONNX exporter's tracer (internal to onnx/): it turns each traced op's record into
// ONNX nodes through its entry in one table (Tracer::entries, onnx/tracer.cpp), naming
// graph values by the TensorImpl that holds them. export_model (onnx/export.cpp) feeds it.
#pragma once
#include <onnx/onnx_pb.h>

#include <map>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "../../debug/debug.h"
#include "../../nn/module.h"
#include "../../tensor/tensor.h"

namespace reel::onnx::internal {

// ONNX's element type for a dtype; an Error naming `what` for a dtype ONNX export lacks
int onnx_type(DType t, const std::string& what);

class Tracer {
 public:
  Tracer(::onnx::GraphProto& g, int opset) : g_(g), opset_(opset) {}

  void add_names(const nn::NamedTensors& named) {
    for (const auto& [name, t] : named)
      if (t.defined()) param_names_.emplace(t.impl(), name);
  }
  void input(const Tensor& t, const std::string& name, const std::string& batch) {
    keep_.push_back(t);
    names_[t.impl()] = name;
    value_info(g_.add_input(), name, t, batch);
  }
  void output(const Tensor& t, const std::string& name, const std::string& batch) {
    std::string v = value(t, "the model's output");
    add("Identity", {v}, {name});
    value_info(g_.add_output(), name, t, batch);
  }
  void op(const debug::OpRecord& r);
  // An op inside a depth-0 op: kept until that op's own record arrives (after them).
  void nested(const debug::OpRecord& r) { nested_.push_back(r); }

 private:
  static void value_info(::onnx::ValueInfoProto* v, const std::string& name, const Tensor& t, const std::string& batch) {
    v->set_name(name);
    auto* tt = v->mutable_type()->mutable_tensor_type();
    tt->set_elem_type(onnx_type(t.dtype(), name));
    auto* shape = tt->mutable_shape();
    for (int d = 0; d < t.dim(); ++d) {
      if (d == 0) shape->add_dim()->set_dim_param(batch);
      else shape->add_dim()->set_dim_value(t.size(d));
    }
  }
  std::string fresh(const std::string& base) { return base + "_" + std::to_string(counter_++); }
  // The graph value of t: made by a traced op or an input, else a new initializer.
  std::string value(const Tensor& t, const std::string& what) {
    if (!t.defined()) throw Error("onnx::export_model: " + what + " is undefined");
    if (auto it = names_.find(t.impl()); it != names_.end()) return it->second;
    auto p = param_names_.find(t.impl());
    return initializer(t, p != param_names_.end() ? p->second : fresh("const"));
  }
  std::string initializer(const Tensor& t, const std::string& name) {
    keep_.push_back(t);
    Tensor c = t.detach().cpu().contiguous();
    ::onnx::TensorProto* init = g_.add_initializer();
    init->set_name(name);
    init->set_data_type(onnx_type(c.dtype(), name));
    for (int d = 0; d < c.dim(); ++d) init->add_dims(c.size(d));
    init->set_raw_data(c.data_ptr(), size_t(c.numel()) * c.element_size());
    names_[t.impl()] = name;
    return name;
  }
  std::string constant_floats(const std::vector<float>& v, const Dims& shape) {
    Tensor t = from_vector(v, shape);
    return initializer(t, fresh("const"));
  }
  std::string constant_ints(const std::vector<int64_t>& v) {
    Tensor t = from_vector(v, {int64_t(v.size())});
    return initializer(t, fresh("shape"));
  }
  ::onnx::NodeProto* add(const char* type, const std::vector<std::string>& in, const std::vector<std::string>& out) {
    auto* n = g_.add_node();
    n->set_op_type(type);
    n->set_name(fresh(type));
    for (const auto& s : in) n->add_input(s);
    for (const auto& s : out) n->add_output(s);
    return n;
  }
  static void attr(::onnx::NodeProto* n, const char* name, int64_t v) {
    auto* a = n->add_attribute();
    a->set_name(name);
    a->set_type(::onnx::AttributeProto::INT);
    a->set_i(v);
  }
  static void attr(::onnx::NodeProto* n, const char* name, float v) {
    auto* a = n->add_attribute();
    a->set_name(name);
    a->set_type(::onnx::AttributeProto::FLOAT);
    a->set_f(v);
  }
  static void attr(::onnx::NodeProto* n, const char* name, const std::vector<int64_t>& v) {
    auto* a = n->add_attribute();
    a->set_name(name);
    a->set_type(::onnx::AttributeProto::INTS);
    for (int64_t x : v) a->add_ints(x);
  }
  // A new graph value for an op's output.
  std::string out(const Tensor& t, const std::string& base) {
    keep_.push_back(t);
    return names_[t.impl()] = fresh(base);
  }
  [[noreturn]] void unsupported(const debug::OpRecord& r, const std::string& why) {
    throw Error("onnx::export_model: op " + r.name() + " (at " + r.site.str() +
                (r.module ? " in " + r.module->str() : std::string()) + ") is not exportable: " + why);
  }
  std::string in(const debug::OpRecord& r, size_t i) {
    return value(r.inputs.at(i), std::string(r.op) + "'s input " + std::to_string(i));
  }
  struct Entry;
  static const std::unordered_map<std::string_view, Entry>& entries();
  // the entries (one per op or family of ops), and their helpers
  void passthrough(const debug::OpRecord& r);
  void dropout(const debug::OpRecord& r);
  void linear(const debug::OpRecord& r);
  void conv(const debug::OpRecord& r);
  void pool(const debug::OpRecord& r);
  void adaptive_pool(const debug::OpRecord& r);
  void batch_norm(const debug::OpRecord& r);
  void layer_norm(const debug::OpRecord& r);
  void unary(const debug::OpRecord& r);
  void gelu_op(const debug::OpRecord& r);
  void gelu(const debug::OpRecord& r, bool tanh_form);
  void softmax(const debug::OpRecord& r);
  void transpose(const debug::OpRecord& r);
  void permute(const debug::OpRecord& r);
  void arithmetic(const debug::OpRecord& r);
  void add_relu(const debug::OpRecord& r);
  void matmul(const debug::OpRecord& r);
  void cat(const debug::OpRecord& r);
  void embedding(const debug::OpRecord& r);
  void reshape(const debug::OpRecord& r);
  void squeeze(const debug::OpRecord& r);
  void rnn(const debug::OpRecord& r);
  // `input`: the value the layer reads (its entry holds a contiguous copy of it)
  std::string rnn_layer(const debug::OpRecord& layer, const std::string& input, std::vector<std::string>& states);
  std::vector<debug::OpRecord> nested_;

  ::onnx::GraphProto& g_;
  int opset_;
  int counter_ = 0;
  std::map<const TensorImpl*, std::string> names_, param_names_;
  std::vector<Tensor> keep_;
};

}  // namespace reel::onnx::internal
