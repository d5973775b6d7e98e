// PyTorch's weight files (torch.save's .pt/.pth) read without Python: a zip archive
// holding `<name>/data.pkl` (the pickled object), one entry `<name>/data/<key>` per
// storage, `<name>/version` and (PyTorch 2.x) `<name>/byteorder`.
//
//   torch_pt::File f = torch_pt::load("resnet18.pth");
//   Tensor w = f.at("conv1.weight");          // nested dicts: "model.conv1.weight"
//   const torch_pt::Value* e = f.find_value("epoch");
//   net.load("resnet18.pth");                 // nn::Module::load: strict, as for safetensors
//
// The unpickler is restricted to what a state dict uses, and nothing else runs: the
// pickle opcodes PyTorch emits (protocol 2; protocol 4's framing, memo and short
// strings too), plain values (None, bools, ints to 64 bits, floats, strings, tuples,
// lists, dicts with string or integer keys), collections.OrderedDict (its attributes,
// such as a state dict's `_metadata`, are dropped), torch._utils._rebuild_tensor,
// _rebuild_tensor_v2, _rebuild_parameter and _rebuild_parameter_with_state (no hooks,
// no Python state), and storages (persistent ids ('storage', torch.<Type>Storage or
// PyTorch 2.x's torch.storage.UntypedStorage, key, location, numel); a storage saved by
// itself reads as a 1-D tensor). Any other global, or a rebuild given anything else, is
// refused with an Error naming it, before anything is called.
//
// Storages map to reel dtypes: Float f32, Double f64, Half f16, BFloat16 bf16,
// Long i64, Int i32, Byte u8, Bool bool, UntypedStorage u8 (bytes). Short (int16)
// and Char (int8) are widened to i32: every value is kept exactly. Complex and
// quantized storages, which reel has no dtype for, are refused naming the type.
// Tensors are CPU views of their storage with the file's shape, strides and offset,
// so tensors that shared a storage in Python share one here; requires_grad and the
// device the file names are not kept (the values are).
//
// Memory stays bounded by the file: every size is checked against the archive
// before anything is allocated, each storage is read once, pickle memo references
// share (never copy) tensors, the plain values copied out of the pickle take at most
// 32 bytes per byte of data.pkl plus 16 MiB, and the object nests at most kMaxDepth deep.
// The legacy format (before PyTorch 1.6, or _use_new_zipfile_serialization=False)
// and TorchScript archives (torch.jit.save) are refused with how to convert them.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "../tensor/tensor.h"

namespace reel::torch_pt {

// One unpickled object.
struct Value {
  enum class Kind : uint8_t { none, boolean, integer, real, string, tensor, tuple, list, dict };
  Kind kind = Kind::none;
  bool b = false;
  int64_t i = 0;
  double d = 0;
  std::string s;
  Tensor t;
  std::vector<Value> items;  // a tuple's or a list's elements; a dict's values, in insertion order
  std::vector<Value> keys;   // a dict's keys (strings or integers), beside its values in items
};
const char* kind_name(Value::Kind kind);

struct File {
  Value root;  // the whole object torch.save was given
  // Every tensor and every plain leaf (none, bool, int, float, string) by its path: dict
  // keys and list/tuple indices joined by '.' ("model.conv1.weight", "history.3"), in
  // the pickle's order. A tensor saved alone has the name "".
  std::vector<std::pair<std::string, Tensor>> tensors;
  std::vector<std::pair<std::string, Value>> values;
  const Tensor* find(const std::string& name) const;  // nullptr when absent
  const Tensor& at(const std::string& name) const;    // throws Error when absent
  const Value* find_value(const std::string& name) const;
};

inline constexpr int kMaxDepth = 200;

// Reads a .pt/.pth file. Throws Error naming the file and what is wrong.
File load(const std::string& path);
// Parses an archive in memory (the fuzzing entry point); `source` names it in errors.
File parse(const uint8_t* data, size_t size, const std::string& source = "<memory>");

}  // namespace reel::torch_pt
