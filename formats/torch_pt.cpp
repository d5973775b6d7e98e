// torch.save archives: find the pickle and the storages in the zip, read each storage
// once into a reel dtype, unpickle (torch_pickle.cpp), and name every leaf by its path.
#include "torch_pt.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <map>
#include <unordered_set>

#include "internal/regular_file.h"
#include "internal/torch_pickle.h"
#include "internal/zip_archive.h"

namespace reel::torch_pt {

namespace {

// How a storage type's elements lie on disk and which reel dtype holds them.
struct StorageType {
  const char* name;
  int disk_size;  // bytes per element in the archive
  DType dtype;
  bool widen;     // int16/int8, read as signed and stored as i32
};
constexpr StorageType kTypes[] = {
    {"FloatStorage", 4, DType::f32, false}, {"DoubleStorage", 8, DType::f64, false},
    {"HalfStorage", 2, DType::f16, false},  {"BFloat16Storage", 2, DType::bf16, false},
    {"LongStorage", 8, DType::i64, false},  {"IntStorage", 4, DType::i32, false},
    {"ShortStorage", 2, DType::i32, true},  {"CharStorage", 1, DType::i32, true},
    {"ByteStorage", 1, DType::u8, false},   {"BoolStorage", 1, DType::boolean, false},
    {"UntypedStorage", 1, DType::u8, false},
};

std::string legacy_advice() {
  return "re-save it with a PyTorch of 1.6 or later: torch.save(torch.load(old), new) (the zip format is the "
         "default since 1.6; _use_new_zipfile_serialization=True asks for it explicitly)";
}

class Archive {
 public:
  Archive(const uint8_t* data, size_t size, const std::string& source)
      : prefix_("torch_pt: " + source), zip_(check_magic(data, size), size, prefix_) {}

  File read() {
    const detail::ZipEntry* pkl = nullptr;
    bool torchscript = false;
    for (const detail::ZipEntry& e : zip_.entries()) {
      size_t slash = e.name.find('/');
      if (slash == std::string::npos || slash == 0) continue;
      std::string rest = e.name.substr(slash + 1);
      if (rest == "data.pkl") {
        if (pkl) fail(fmt::format("two pickles, \"{}\" and \"{}\"", pkl->name, e.name));
        pkl = &e;
      }
      torchscript = torchscript || rest == "constants.pkl" || rest.starts_with("code/");
    }
    if (torchscript)
      fail("this is a TorchScript archive (torch.jit.save), not a torch.save file: in Python, save its weights "
           "with torch.save(torch.jit.load(path).state_dict(), \"weights.pt\")");
    if (!pkl) fail("no <name>/data.pkl in the archive: not a file torch.save wrote");
    dir_ = pkl->name.substr(0, pkl->name.size() - std::strlen("data.pkl"));
    if (const detail::ZipEntry* order = zip_.find(dir_ + "byteorder")) {
      std::vector<uint8_t> scratch;
      auto b = zip_.read(*order, scratch);
      std::string s(b.begin(), b.end());
      if (s != "little")
        fail(fmt::format("the storages are in byte order \"{}\"; only \"little\" is read (re-save the file on a "
                         "little-endian machine)",
                         s));
    }
    std::vector<uint8_t> scratch;
    std::span<const uint8_t> pickle = zip_.read(*pkl, scratch);
    File f;
    f.root = detail::unpickle(
        pickle, [&](const std::string& type, const std::string& key, int64_t numel) {
          return storage(type, key, numel);
        },
        prefix_);
    std::unordered_set<std::string> names;
    flatten(f.root, "", f, names);
    return f;
  }

 private:
  [[noreturn]] void fail(const std::string& message) const { throw Error(prefix_ + ": " + message); }

  const uint8_t* check_magic(const uint8_t* data, size_t size) const {
    if (size >= 2 && data[0] == 0x80 && data[1] <= 5)  // a bare pickle: torch.save's format before 1.6
      fail("this is PyTorch's legacy (pre-1.6, non-zip) format, which reel does not read; " + legacy_advice());
    if (size < 4 || std::memcmp(data, "PK", 2) != 0)
      fail("not a torch.save file: it is not a zip archive (those start with \"PK\")");
    return data;
  }

  Tensor storage(const std::string& type, const std::string& key, int64_t numel) {
    auto cached = storages_.find(key);
    if (cached != storages_.end()) {
      if (cached->second.first != type || cached->second.second.numel() != numel)
        fail(fmt::format("storage '{}' is named as {} of {} elements and as {} of {}", key, cached->second.first,
                         cached->second.second.numel(), type, numel));
      return cached->second.second;
    }
    const StorageType* st = nullptr;
    for (const StorageType& t : kTypes)
      if (type == t.name) st = &t;
    if (!st)
      fail(fmt::format("storage '{}' is a torch.{}: reel has no dtype for its elements (complex and quantized "
                       "tensors are not read)",
                       key, type));
    const detail::ZipEntry* e = zip_.find(dir_ + "data/" + key);
    if (!e) fail(fmt::format("storage '{}' ({}) has no entry \"{}data/{}\"", key, type, dir_, key));
    uint64_t nbytes;
    if (__builtin_mul_overflow(uint64_t(numel), uint64_t(st->disk_size), &nbytes) || nbytes != e->size)
      fail(fmt::format("storage '{}': {} elements of torch.{} need {} bytes, its entry holds {}", key, numel, type,
                       uint64_t(numel) * uint64_t(st->disk_size), e->size));
    std::vector<uint8_t> scratch;
    std::span<const uint8_t> bytes = zip_.read(*e, scratch);  // the size is bounded now: allocate
    Tensor t = empty({numel}, {.dtype = st->dtype});
    if (st->widen) {
      auto* out = t.data<int32_t>();
      for (int64_t i = 0; i < numel; ++i) {
        if (st->disk_size == 1) {
          out[i] = int8_t(bytes[size_t(i)]);
        } else {
          int16_t v;
          std::memcpy(&v, bytes.data() + 2 * i, 2);
          out[i] = v;
        }
      }
    } else if (nbytes) {
      if (st->dtype == DType::boolean)
        for (size_t i = 0; i < nbytes; ++i)
          if (bytes[i] > 1) fail(fmt::format("storage '{}': bool element {} holds byte {}", key, i, bytes[i]));
      std::memcpy(t.data_ptr(), bytes.data(), size_t(nbytes));
    }
    storages_.emplace(key, std::make_pair(type, t));
    return t;
  }

  void flatten(const Value& v, const std::string& path, File& f, std::unordered_set<std::string>& names) const {
    auto child = [&](const std::string& part) { return path.empty() ? part : path + "." + part; };
    switch (v.kind) {
      case Value::Kind::dict:
        for (size_t i = 0; i < v.keys.size(); ++i) {
          const Value& k = v.keys[i];
          flatten(v.items[i], child(k.kind == Value::Kind::string ? k.s : std::to_string(k.i)), f, names);
        }
        return;
      case Value::Kind::list: case Value::Kind::tuple:
        for (size_t i = 0; i < v.items.size(); ++i) flatten(v.items[i], child(std::to_string(i)), f, names);
        return;
      default:
        if (!names.insert(path).second)
          fail(fmt::format("two entries have the path \"{}\" (a key with a dot beside a nested dict)", path));
        if (v.kind == Value::Kind::tensor) f.tensors.emplace_back(path, v.t);
        else f.values.emplace_back(path, v);
    }
  }

  std::string prefix_;
  detail::ZipArchive zip_;
  std::string dir_;  // "<name>/"
  std::map<std::string, std::pair<std::string, Tensor>> storages_;  // key -> (type, elements)
};

}  // namespace

const char* kind_name(Value::Kind kind) {
  switch (kind) {
    case Value::Kind::none: return "None";
    case Value::Kind::boolean: return "bool";
    case Value::Kind::integer: return "int";
    case Value::Kind::real: return "float";
    case Value::Kind::string: return "str";
    case Value::Kind::tensor: return "tensor";
    case Value::Kind::tuple: return "tuple";
    case Value::Kind::list: return "list";
    case Value::Kind::dict: return "dict";
  }
  return "?";
}

const Tensor* File::find(const std::string& name) const {
  for (const auto& [n, t] : tensors)
    if (n == name) return &t;
  return nullptr;
}

const Tensor& File::at(const std::string& name) const {
  if (const Tensor* t = find(name)) return *t;
  throw Error(fmt::format("torch_pt: no tensor named \"{}\" ({} tensors{})", name, tensors.size(),
                          find_value(name) ? fmt::format("; \"{}\" is a plain value", name) : ""));
}

const Value* File::find_value(const std::string& name) const {
  for (const auto& [n, v] : values)
    if (n == name) return &v;
  return nullptr;
}

File parse(const uint8_t* data, size_t size, const std::string& source) {
  return Archive(data, size, source).read();
}

File load(const std::string& path) {
  internal::RegularFile file(path, "torch_pt");
  int fd = file.fd();
  size_t size = file.size();
  if (size == 0) return parse(nullptr, 0, path);
  // mapped, not read: the storages are copied out once, straight from the page cache
  void* map = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
  if (map == MAP_FAILED) throw Error(fmt::format("torch_pt: cannot map {}: {}", path, std::strerror(errno)));
  struct Unmap {
    void* p;
    size_t n;
    ~Unmap() { ::munmap(p, n); }
  } unmap{map, size};
  return parse(static_cast<const uint8_t*>(map), size, path);
}

}  // namespace reel::torch_pt
