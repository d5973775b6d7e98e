// Node: one entry of the tape. It records what an op did (name, call site, input
// and output shapes), what its backward rule needs (saved tensors and arguments)
// and the rule itself, side by side with the op that made it.
//
// An op's arguments are kept typed (autograd/op_args.h; the struct each op keeps is
// listed in autograd/op_args_types.h) and read by name:
//   const ConvParams& p = node.args<ConvParams>();  // throws Error if conv2d did not keep one
//   if (const SoftmaxArgs* a = node.args_if<SoftmaxArgs>()) ... a->dim ...
//   node.args_str();  // "stride=[1, 1] padding=[0, 0] dilation=[1, 1] groups=1"
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "../tensor/tensor.h"
#include "op_args.h"

namespace reel {

// Where the gradient of one input goes: to output `output_nr` of `node` (a non-leaf),
// into `leaf`'s .grad(), or nowhere (the input does not require grad).
struct Edge {
  Ref<Node> node;
  Ref<TensorImpl> leaf;
  uint32_t output_nr = 0;
  bool needs_grad() const { return node || leaf; }
};

struct TensorMeta {
  Dims shape;
  DType dtype = DType::f32;
  Device device;
  bool defined = false;  // false for an absent optional input (an undefined bias)
};

// A saved tensor remembers its storage version, so backward can tell when the
// user wrote over it in place after the forward read it.
struct SavedTensor {
  Tensor tensor;
  uint32_t version = 0;
  int32_t output_nr = -1;  // >= 0: an output of the saving node, stored detached
};

struct Node;
// The backward rule: grad_inputs[i] = d loss / d input i, from grad_outputs. It
// fills only the inputs with node.needs_grad(i); undefined means "no gradient".
using BackwardFn = void (*)(Node& node, const std::vector<Tensor>& grad_outputs,
                            std::vector<Tensor>& grad_inputs);

class Tape;
// State of a user-defined autograd::Function, kept by its node.
struct CustomState {
  virtual ~CustomState() = default;
  // The node's libtorch-style name when the state decides it ("CubeBackward" for a
  // custom function class Cube); empty: Node::name() derives it from the op.
  virtual std::string node_name() const { return {}; }
};

struct Node : RefCounted {
  const char* op = "";
  // The in-place op this node records ("add_", "mul_"), or null: its result became the
  // history of the tensor written (autograd/inplace.h); op stays the computing op's name.
  const char* inplace = nullptr;
  Site site{nullptr, 0};
  const ModulePath* module = nullptr;  // the module whose forward() made it (null: none)
  uint64_t seq = 0;  // execution order on its tape
  BackwardFn backward = nullptr;
  std::vector<Edge> edges;  // one per input
  std::vector<TensorMeta> inputs;  // shapes, dtypes, devices of the inputs
  std::vector<TensorMeta> outputs;
  std::vector<SavedTensor> saved;
  OpArgs op_args;  // the op's arguments, typed (set_args / args below)
  std::unique_ptr<CustomState> custom;
  bool released = false;  // saved tensors freed by a backward without retain_graph
  std::string released_by;  // where that backward was called

  // tape bookkeeping (autograd/tape.cpp)
  Tape* tape = nullptr;
  Node* prev = nullptr;
  Node* next = nullptr;
  // engine bookkeeping for one backward pass
  std::vector<Tensor> pending;  // summed gradients of each output
  bool queued = false;

  bool needs_grad(size_t input) const { return edges[input].needs_grad(); }
  // The name the debug tools show: the in-place op's ("mul_") where the node records one.
  const char* label() const { return inplace ? inplace : op; }
  const Dims& input_shape(size_t i) const { return inputs[i].shape; }
  // Saves a tensor for backward. An output is saved detached (no cycle through grad_fn).
  void save(const Tensor& t);
  // The i-th saved tensor; throws Error if it was released or modified in place since.
  // A saved output comes back linked to this node again while grad mode is on (a
  // create_graph backward), so a rule that reads it is differentiable through it.
  Tensor saved_tensor(size_t i) const;
  // The op's arguments as the struct T it kept; throws Error naming the op, its site, T
  // and the type it kept when it kept another (or none).
  template <OpArgsType T>
  const T& args() const {
    if (const T* p = op_args.get_if<T>()) return *p;
    wrong_args(T::type_name);
  }
  template <OpArgsType T>
  const T* args_if() const { return op_args.get_if<T>(); }  // null: none, or another type
  template <OpArgsType T>
  void set_args(const T& a) { op_args.set(a); }
  const char* args_name() const { return op_args.type_name(); }  // "ConvParams"; "" when none
  std::string args_str() const { return op_args.str(); }  // "stride=[1, 1] ..."; "" when none
  // "conv2d [1, 3, 8, 8] [4, 3, 3, 3] - -> [1, 4, 8, 8] f32 cpu stride=[1, 1] ... at train.cpp:42"
  std::string describe() const;
  // libtorch's name for this node, as grad_fn()->name() gives it there: "AddBackward0"
  // for add, "MmBackward0" for a 2-D matmul (autograd/grad_fn_names.cpp). `op` keeps
  // reel's name ("add", "matmul"), which errors and the debug tools print.
  std::string name() const;  // "linear [128,784] [10,784] [10] -> [128,10] at train.cpp:42 in feat.fc"

  ~Node();

 private:
  [[noreturn]] void wrong_args(const char* wanted) const;
};

}  // namespace reel
