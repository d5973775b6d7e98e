// A pickle machine that knows only data: the stack, the marks and the memo hold indices
// into an arena of plain objects, globals are names checked against a fixed list when
// they are read, and REDUCE dispatches to the few rebuild functions written out here.
// Nothing the pickle names is ever looked up or called. Cycles and shared objects in
// the arena are harmless; the result is copied out of it with a depth and size budget.
#include "internal/torch_pickle.h"

#include <fmt/format.h>

#include <array>
#include <cstring>
#include <deque>
#include <memory>
#include <unordered_map>
#include <vector>

#include "../tensor/error.h"

namespace reel::detail {

namespace {

using torch_pt::Value;

enum class K : uint8_t { none, boolean, integer, real, string, tuple, list, dict, tensor, storage, global };

struct Obj {
  K kind = K::none;
  bool b = false;
  int64_t i = 0;
  double d = 0;
  std::string s;              // string; a global's "module.name"
  std::vector<size_t> items;  // tuple, list; dict: key, value, key, value...
  std::unique_ptr<std::unordered_map<std::string, size_t>> keys;  // dict: key -> position of its value
  Tensor t;                   // tensor; storage (1-D, the whole storage)
};

// What REDUCE may call, and the storage classes a persistent id may name (the storage
// loader decides which of those reel has a dtype for).
constexpr std::array kCallables = {"collections.OrderedDict", "torch._utils._rebuild_tensor",
                                   "torch._utils._rebuild_tensor_v2", "torch._utils._rebuild_parameter",
                                   "torch._utils._rebuild_parameter_with_state"};
constexpr std::array kStorages = {
    "FloatStorage", "DoubleStorage", "HalfStorage", "BFloat16Storage", "LongStorage", "IntStorage",
    "ShortStorage", "CharStorage", "ByteStorage", "BoolStorage", "UntypedStorage", "ComplexFloatStorage",
    "ComplexDoubleStorage", "QInt8Storage", "QUInt8Storage", "QInt32Storage", "QUInt4x2Storage",
    "QUInt2x4Storage"};

const char* kind_word(K k) {
  switch (k) {
    case K::none: return "None";
    case K::boolean: return "a bool";
    case K::integer: return "an int";
    case K::real: return "a float";
    case K::string: return "a string";
    case K::tuple: return "a tuple";
    case K::list: return "a list";
    case K::dict: return "a dict";
    case K::tensor: return "a tensor";
    case K::storage: return "a storage";
    case K::global: return "a global";
  }
  return "?";
}

class Unpickler {
 public:
  Unpickler(std::span<const uint8_t> in, const StorageLoader& load, const std::string& prefix)
      : in_(in), load_(load), prefix_(prefix) {
    budget_ = in.size() * 32 + (16u << 20);
    arena_.resize(4);  // shared immutable singletons
    arena_[kTrue].kind = arena_[kFalse].kind = K::boolean;
    arena_[kTrue].b = true;
    arena_[kEmptyTuple].kind = K::tuple;
  }

  Value run();

 private:
  static constexpr size_t kNone = 0, kTrue = 1, kFalse = 2, kEmptyTuple = 3;

  [[noreturn]] void fail(const std::string& message) const {
    throw Error(fmt::format("{}: data.pkl byte {}: {}", prefix_, op_at_, message));
  }
  const uint8_t* take(uint64_t n) {
    if (n > in_.size() - pos_) fail(fmt::format("truncated: {} bytes wanted, {} left", n, in_.size() - pos_));
    const uint8_t* p = in_.data() + pos_;
    pos_ += size_t(n);
    return p;
  }
  uint64_t le(int n) {
    const uint8_t* p = take(uint64_t(n));
    uint64_t v = 0;
    for (int i = n - 1; i >= 0; --i) v = (v << 8) | p[i];
    return v;
  }
  std::string line() {
    const uint8_t* start = in_.data() + pos_;
    const void* nl = std::memchr(start, '\n', in_.size() - pos_);
    if (!nl) fail("truncated: GLOBAL's name has no end of line");
    size_t n = size_t(static_cast<const uint8_t*>(nl) - start);
    pos_ += n + 1;
    return std::string(reinterpret_cast<const char*>(start), n);
  }
  size_t make(K kind) {
    arena_.emplace_back();
    arena_.back().kind = kind;
    return arena_.size() - 1;
  }
  size_t make_int(int64_t v) {
    size_t o = make(K::integer);
    arena_[o].i = v;
    return o;
  }
  size_t make_string(std::string s) {
    size_t o = make(K::string);
    arena_[o].s = std::move(s);
    return o;
  }
  size_t floor() const { return marks_.empty() ? 0 : marks_.back(); }
  size_t pop() {
    if (stack_.size() <= floor()) fail("the stack is empty (below the last MARK)");
    size_t o = stack_.back();
    stack_.pop_back();
    return o;
  }
  size_t top() {
    if (stack_.size() <= floor()) fail("the stack is empty (below the last MARK)");
    return stack_.back();
  }
  std::vector<size_t> pop_mark() {
    if (marks_.empty()) fail("no MARK to pop to");
    std::vector<size_t> items(stack_.begin() + std::ptrdiff_t(marks_.back()), stack_.end());
    stack_.resize(marks_.back());
    marks_.pop_back();
    return items;
  }
  Obj& expect(size_t o, K kind, const char* what) {
    if (arena_[o].kind != kind) fail(fmt::format("{} must be {}, not {}", what, kind_word(kind), kind_word(arena_[o].kind)));
    return arena_[o];
  }
  void set_item(size_t dict, size_t key, size_t value) {
    Obj& d = expect(dict, K::dict, "SETITEM's target");
    const Obj& k = arena_[key];
    if (k.kind != K::string && k.kind != K::integer)
      fail(fmt::format("a dict key must be a string or an int, not {}", kind_word(k.kind)));
    std::string id = k.kind == K::string ? "s" + k.s : "i" + std::to_string(k.i);
    auto [it, fresh] = d.keys->emplace(std::move(id), d.items.size() + 1);
    if (fresh) {
      d.items.push_back(key);
      d.items.push_back(value);
    } else {
      d.items[it->second] = value;  // Python keeps the first key and the last value
    }
  }
  size_t new_dict() {
    size_t o = make(K::dict);
    arena_[o].keys = std::make_unique<std::unordered_map<std::string, size_t>>();
    return o;
  }
  void global(std::string module, std::string name);
  size_t reduce(size_t callable, size_t args);
  size_t persistent(size_t pid);
  size_t rebuild_tensor(const std::vector<size_t>& a);
  Value copy_out(size_t o, int depth);

  std::span<const uint8_t> in_;
  const StorageLoader& load_;
  const std::string& prefix_;
  size_t pos_ = 0, op_at_ = 0;
  std::deque<Obj> arena_;
  std::vector<size_t> stack_, marks_;
  std::unordered_map<uint64_t, size_t> memo_;
  std::vector<uint8_t> on_path_;  // copy_out: containers being copied (a cycle meets one again)
  size_t budget_;
};

void Unpickler::global(std::string module, std::string name) {
  std::string full = module + "." + name;
  bool ok = false;
  for (const char* c : kCallables) ok = ok || full == c;
  for (const char* s : kStorages) ok = ok || (module == "torch" && name == s);
  ok = ok || full == "torch.storage.UntypedStorage";  // PyTorch 2.x names it by its module
  if (!ok)
    fail(fmt::format("refused global '{}': a state dict needs only collections.OrderedDict, torch._utils's "
                     "tensor and parameter rebuilds and torch's storage types; nothing was called",
                     full));
  size_t o = make(K::global);
  arena_[o].s = std::move(full);
  stack_.push_back(o);
}

size_t Unpickler::rebuild_tensor(const std::vector<size_t>& a) {
  const Obj& storage = expect(a[0], K::storage, "a rebuilt tensor's storage");
  int64_t offset = expect(a[1], K::integer, "a rebuilt tensor's storage offset").i;
  const Obj& size = arena_[a[2]];
  const Obj& stride = arena_[a[3]];
  if ((size.kind != K::tuple && size.kind != K::list) || (stride.kind != K::tuple && stride.kind != K::list))
    fail(fmt::format("a rebuilt tensor's size and stride must be tuples, not {} and {}", kind_word(size.kind),
                     kind_word(stride.kind)));
  if (size.items.size() != stride.items.size())
    fail(fmt::format("a rebuilt tensor has {} sizes but {} strides", size.items.size(), stride.items.size()));
  if (size.items.size() > size_t(kMaxDims))
    fail(fmt::format("a tensor of {} dimensions: reel's tensors have at most {}", size.items.size(), kMaxDims));
  Dims shape, strides;
  for (size_t d = 0; d < size.items.size(); ++d) {
    shape.push_back(expect(size.items[d], K::integer, "a tensor's size").i);
    strides.push_back(expect(stride.items[d], K::integer, "a tensor's stride").i);
  }
  const int64_t have = storage.t.numel();
  // the last element a view reads: offset + sum (size - 1) * stride, all in range
  bool empty = false, bad = offset < 0 || offset > have;
  int64_t last = offset;
  for (int d = 0; d < shape.size(); ++d) {
    if (shape[d] < 0 || strides[d] < 0) bad = true;
    if (shape[d] == 0) empty = true;
  }
  for (int d = 0; d < shape.size() && !bad && !empty; ++d) {
    int64_t span;
    bad = __builtin_mul_overflow(shape[d] - 1, strides[d], &span) || __builtin_add_overflow(last, span, &last);
  }
  if (bad || (!empty && last >= have))
    fail(fmt::format("a tensor of size {}, stride {} at offset {} does not fit its storage of {} elements",
                     shape.str(), strides.str(), offset, have));
  int64_t numel = 1;
  for (int64_t n : shape)
    if (__builtin_mul_overflow(numel, n, &numel) || numel > INT64_MAX / int64_t(storage.t.element_size()))
      fail(fmt::format("a tensor of size {} has too many elements", shape.str()));
  size_t o = make(K::tensor);
  arena_[o].t = empty ? reel::empty(shape, {.dtype = storage.t.dtype()})
                      : storage_view(storage.t, shape, strides, offset);
  return o;
}

size_t Unpickler::reduce(size_t callable, size_t args_at) {
  const std::string fn = expect(callable, K::global, "REDUCE's callable").s;
  const std::vector<size_t> a = expect(args_at, K::tuple, fmt::format("{}'s arguments", fn).c_str()).items;
  auto arity = [&](size_t lo, size_t hi) {
    if (a.size() < lo || a.size() > hi)
      fail(fmt::format("{} takes {} arguments, the pickle gives {}", fn, lo == hi ? std::to_string(lo) :
                       fmt::format("{} to {}", lo, hi), a.size()));
  };
  // hooks and Python state would need code to run: only empty ones are accepted
  auto empty_dict = [&](size_t o, const char* what) {
    if (arena_[o].kind != K::dict || !arena_[o].items.empty())
      fail(fmt::format("{}'s {} must be an empty dict (it would need Python), not {}", fn, what,
                       kind_word(arena_[o].kind)));
  };
  if (fn == "collections.OrderedDict") {
    arity(0, 0);
    return new_dict();
  }
  if (fn == "torch._utils._rebuild_tensor") {
    arity(4, 4);
    return rebuild_tensor(a);
  }
  if (fn == "torch._utils._rebuild_tensor_v2") {
    arity(6, 7);  // (storage, offset, size, stride, requires_grad, backward_hooks[, metadata])
    expect(a[4], K::boolean, "requires_grad");
    empty_dict(a[5], "backward_hooks");
    if (a.size() == 7 && arena_[a[6]].kind != K::none) empty_dict(a[6], "metadata");
    return rebuild_tensor(a);
  }
  if (fn == "torch._utils._rebuild_parameter" || fn == "torch._utils._rebuild_parameter_with_state") {
    bool with_state = fn.back() == 'e';
    arity(with_state ? 4 : 3, with_state ? 4 : 3);  // (data, requires_grad, backward_hooks[, state])
    expect(a[0], K::tensor, "a parameter's data");
    expect(a[1], K::boolean, "requires_grad");
    empty_dict(a[2], "backward_hooks");
    if (with_state && arena_[a[3]].kind != K::none) empty_dict(a[3], "state");
    return a[0];  // a Parameter is its data here
  }
  fail(fmt::format("'{}' is a storage type, not something to call", fn));
}

size_t Unpickler::persistent(size_t pid) {
  const std::vector<size_t> p = expect(pid, K::tuple, "a persistent id").items;
  if (p.size() != 5 || arena_[p[0]].kind != K::string || arena_[p[0]].s != "storage")
    fail("a persistent id must be ('storage', type, key, location, numel)");
  const std::string& type = expect(p[1], K::global, "a storage's type").s;
  if (type.rfind("torch.", 0) != 0 || !type.ends_with("Storage"))
    fail(fmt::format("a storage's type must be torch.<Type>Storage, not '{}'", type));
  const std::string& key = expect(p[2], K::string, "a storage's key").s;
  expect(p[3], K::string, "a storage's location");
  int64_t numel = expect(p[4], K::integer, "a storage's size").i;
  if (numel < 0) fail(fmt::format("storage '{}' has negative size {}", key, numel));
  size_t o = make(K::storage);
  arena_[o].t = load_(type.substr(type.rfind('.') + 1), key, numel);
  return o;
}

Value Unpickler::copy_out(size_t o, int depth) {
  if (depth > torch_pt::kMaxDepth)
    fail(fmt::format("the object nests deeper than {} levels", torch_pt::kMaxDepth));
  const Obj& x = arena_[o];
  size_t cost = sizeof(Value) + x.s.size();
  if (cost > budget_)
    fail("the object's copies (memo references to containers and strings) exceed the size budget "
         "(32 bytes per byte of data.pkl, plus 16 MiB)");
  budget_ -= cost;
  Value v;
  switch (x.kind) {
    case K::none: v.kind = Value::Kind::none; break;
    case K::boolean: v.kind = Value::Kind::boolean; v.b = x.b; break;
    case K::integer: v.kind = Value::Kind::integer; v.i = x.i; break;
    case K::real: v.kind = Value::Kind::real; v.d = x.d; break;
    case K::string: v.kind = Value::Kind::string; v.s = x.s; break;
    case K::tensor: v.kind = Value::Kind::tensor; v.t = x.t; break;
    case K::storage:  // torch.save(t.storage()): its elements as a 1-D tensor
      v.kind = Value::Kind::tensor;
      v.t = x.t;
      break;
    case K::global: fail(fmt::format("the object holds the global '{}' itself, not data", x.s));
    case K::tuple: case K::list: case K::dict: {
      if (on_path_.size() < arena_.size()) on_path_.resize(arena_.size());
      if (on_path_[o]) fail(fmt::format("{} contains itself", kind_word(x.kind)));
      on_path_[o] = 1;
      v.kind = x.kind == K::tuple ? Value::Kind::tuple : x.kind == K::list ? Value::Kind::list : Value::Kind::dict;
      for (size_t k = 0; k < x.items.size(); ++k) {
        if (x.kind == K::dict && k % 2 == 0) v.keys.push_back(copy_out(x.items[k], depth + 1));
        else v.items.push_back(copy_out(x.items[k], depth + 1));
      }
      on_path_[o] = 0;
      break;
    }
  }
  return v;
}

Value Unpickler::run() {
  while (true) {
    op_at_ = pos_;
    const uint8_t op = *take(1);
    switch (op) {
      case 0x80: {  // PROTO
        uint8_t v = *take(1);
        if (v > 5) fail(fmt::format("pickle protocol {} is newer than 5", v));
        break;
      }
      case 0x95: take(8); break;  // FRAME: a length hint only
      case '.': {                 // STOP
        size_t result = pop();
        if (!marks_.empty()) fail("STOP inside a MARK");
        return copy_out(result, 0);
      }
      case '(': marks_.push_back(stack_.size()); break;  // MARK
      case '0': pop(); break;                             // POP
      case '1': pop_mark(); break;                        // POP_MARK
      case '2': stack_.push_back(top()); break;           // DUP
      case 'N': stack_.push_back(kNone); break;
      case 0x88: stack_.push_back(kTrue); break;
      case 0x89: stack_.push_back(kFalse); break;
      case ')': stack_.push_back(kEmptyTuple); break;
      case ']': stack_.push_back(make(K::list)); break;
      case '}': stack_.push_back(new_dict()); break;
      case 't': case 0x85: case 0x86: case 0x87: {  // TUPLE, TUPLE1..3
        std::vector<size_t> items;
        if (op == 't') {
          items = pop_mark();
        } else {
          for (int n = op - 0x84; n > 0; --n) items.insert(items.begin(), pop());
        }
        size_t o = items.empty() ? kEmptyTuple : make(K::tuple);
        if (o != kEmptyTuple) arena_[o].items = std::move(items);
        stack_.push_back(o);
        break;
      }
      case 'l': {  // LIST
        size_t o = make(K::list);
        arena_[o].items = pop_mark();
        stack_.push_back(o);
        break;
      }
      case 'd': {  // DICT
        std::vector<size_t> items = pop_mark();
        if (items.size() % 2) fail("DICT with an odd number of items");
        size_t o = new_dict();
        for (size_t k = 0; k < items.size(); k += 2) set_item(o, items[k], items[k + 1]);
        stack_.push_back(o);
        break;
      }
      case 'J': stack_.push_back(make_int(int32_t(uint32_t(le(4))))); break;  // BININT
      case 'K': stack_.push_back(make_int(int64_t(le(1)))); break;            // BININT1
      case 'M': stack_.push_back(make_int(int64_t(le(2)))); break;            // BININT2
      case 0x8a: case 0x8b: {                                                  // LONG1, LONG4
        uint64_t n = op == 0x8a ? le(1) : le(4);
        if (n > 8) fail(fmt::format("an integer of {} bytes does not fit 64 bits", n));
        const uint8_t* p = take(n);
        uint64_t v = 0;
        for (uint64_t b = n; b-- > 0;) v = (v << 8) | p[b];
        if (n > 0 && n < 8 && (p[n - 1] & 0x80)) v |= ~uint64_t(0) << (8 * n);  // sign-extend
        stack_.push_back(make_int(int64_t(v)));
        break;
      }
      case 'G': {  // BINFLOAT, big-endian
        const uint8_t* p = take(8);
        uint64_t bits = 0;
        for (int b = 0; b < 8; ++b) bits = (bits << 8) | p[b];
        size_t o = make(K::real);
        std::memcpy(&arena_[o].d, &bits, 8);
        stack_.push_back(o);
        break;
      }
      case 'X': case 0x8c: case 0x8d: case 'T': case 'U': {  // (SHORT_)BINUNICODE(8), (SHORT_)BINSTRING
        uint64_t n = op == 0x8c || op == 'U' ? le(1) : op == 0x8d ? le(8) : le(4);
        const uint8_t* p = take(n);
        stack_.push_back(make_string(std::string(reinterpret_cast<const char*>(p), size_t(n))));
        break;
      }
      case 'q': memo_[le(1)] = top(); break;          // BINPUT
      case 'r': memo_[le(4)] = top(); break;          // LONG_BINPUT
      case 0x94: memo_[memo_.size()] = top(); break;  // MEMOIZE
      case 'h': case 'j': {                           // BINGET, LONG_BINGET
        uint64_t idx = op == 'h' ? le(1) : le(4);
        auto it = memo_.find(idx);
        if (it == memo_.end()) fail(fmt::format("memo entry {} was never stored", idx));
        stack_.push_back(it->second);
        break;
      }
      case 'c': {  // GLOBAL
        std::string module = line();
        global(std::move(module), line());
        break;
      }
      case 0x93: {  // STACK_GLOBAL
        size_t name = pop(), module = pop();
        global(expect(module, K::string, "STACK_GLOBAL's module").s, expect(name, K::string, "STACK_GLOBAL's name").s);
        break;
      }
      case 'R': {  // REDUCE
        size_t args = pop(), callable = pop();
        stack_.push_back(reduce(callable, args));
        break;
      }
      case 'Q': stack_.push_back(persistent(pop())); break;  // BINPERSID
      case 's': {                                              // SETITEM
        size_t value = pop(), key = pop();
        set_item(top(), key, value);
        break;
      }
      case 'u': {  // SETITEMS
        std::vector<size_t> items = pop_mark();
        if (items.size() % 2) fail("SETITEMS with an odd number of items");
        size_t dict = top();
        for (size_t k = 0; k < items.size(); k += 2) set_item(dict, items[k], items[k + 1]);
        break;
      }
      case 'a': {  // APPEND
        size_t value = pop();
        expect(top(), K::list, "APPEND's target").items.push_back(value);
        break;
      }
      case 'e': {  // APPENDS
        std::vector<size_t> items = pop_mark();
        auto& list = expect(top(), K::list, "APPENDS' target").items;
        list.insert(list.end(), items.begin(), items.end());
        break;
      }
      case 'b': {  // BUILD: an OrderedDict's attributes (a state dict's _metadata), dropped
        size_t state = pop();
        expect(top(), K::dict, "BUILD's target");
        if (arena_[state].kind != K::dict && arena_[state].kind != K::none)
          fail(fmt::format("BUILD's state must be a dict of attributes, not {}", kind_word(arena_[state].kind)));
        break;
      }
      default:
        fail(fmt::format("opcode 0x{:02x} is not one that PyTorch writes for a state dict "
                         "(objects, code, bytes and sets are refused)",
                         op));
    }
  }
}

}  // namespace

torch_pt::Value unpickle(std::span<const uint8_t> pickle, const StorageLoader& load_storage,
                         const std::string& prefix) {
  return Unpickler(pickle, load_storage, prefix).run();
}

}  // namespace reel::detail
