// safetensors reader and writer. The reader treats its input as hostile (it is
// fuzzed): every length, offset and size is checked before use, the header is
// parsed by a strict schema-directed JSON parser with no recursion, and the data
// offsets must tile the data section exactly (no overlaps, no holes), as the
// reference implementation requires.
#include "safetensors.h"
#include "../tensor/atomic_file.h"
#include "internal/regular_file.h"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstring>
#include <set>

namespace reel::safetensors {

static_assert(std::endian::native == std::endian::little, "safetensors data is little-endian");

const Tensor* File::find(const std::string& name) const {
  for (const auto& [n, t] : tensors)
    if (n == name) return &t;
  return nullptr;
}

const Tensor& File::at(const std::string& name) const {
  if (const Tensor* t = find(name)) return *t;
  throw Error(fmt::format("safetensors: no tensor named \"{}\" in the file", name));
}

namespace {

const char* dtype_code(DType t) {
  switch (t) {
    case DType::f32: return "F32";
    case DType::f64: return "F64";
    case DType::f16: return "F16";
    case DType::bf16: return "BF16";
    case DType::i32: return "I32";
    case DType::i64: return "I64";
    case DType::u8: return "U8";
    case DType::boolean: return "BOOL";
  }
  return "?";
}

bool dtype_from_code(const std::string& s, DType& out) {
  static const std::pair<const char*, DType> table[] = {
      {"F32", DType::f32}, {"F64", DType::f64}, {"F16", DType::f16}, {"BF16", DType::bf16},
      {"I32", DType::i32}, {"I64", DType::i64}, {"U8", DType::u8},   {"BOOL", DType::boolean}};
  for (const auto& [code, dt] : table)
    if (s == code) {
      out = dt;
      return true;
    }
  return false;
}

// A printable excerpt of an untrusted string for error messages.
std::string quoted(const std::string& s) {
  std::string out = "\"";
  for (size_t i = 0; i < s.size() && i < 64; ++i) {
    unsigned char c = static_cast<unsigned char>(s[i]);
    out += c >= 0x20 && c < 0x7f && c != '"' && c != '\\' ? std::string(1, char(c)) : fmt::format("\\x{:02x}", c);
  }
  return out + (s.size() > 64 ? "...\"" : "\"");
}

// ---- the header parser: exactly the safetensors schema, nothing more
struct Info {
  std::string name;
  DType dtype = DType::f32;
  std::vector<int64_t> shape;
  uint64_t begin = 0, end = 0;
};

class HeaderParser {
 public:
  HeaderParser(const char* p, size_t n, const std::string& source) : begin_(p), p_(p), end_(p + n), source_(source) {}

  void parse(std::vector<Info>& infos, std::map<std::string, std::string>& metadata) {
    check_utf8();
    // the format's rule: the header begins with '{' (whitespace may only pad its end), which
    // is also how formats::detect tells a safetensors file by its first bytes
    std::set<std::string> names;
    bool seen_metadata = false;
    object_members([&](const std::string& key) {
      if (key == "__metadata__") {
        if (seen_metadata) fail("\"__metadata__\" appears twice");
        seen_metadata = true;
        parse_metadata(metadata);
      } else {
        // what the writer refuses too: no module path is empty, so nothing could load or save it
        if (key.empty()) fail("a tensor with an empty name");
        if (!names.insert(key).second) fail("tensor " + quoted(key) + " appears twice");
        infos.push_back(parse_info(key));
      }
    });
    ws();
    if (p_ != end_) fail("unexpected bytes after the header's JSON object");
  }

 private:
  [[noreturn]] void fail(const std::string& what) const {
    throw Error(fmt::format("safetensors: {}: corrupt header at byte {}: {}", source_, 8 + (p_ - begin_), what));
  }
  void ws() {
    while (p_ < end_ && (*p_ == ' ' || *p_ == '\t' || *p_ == '\n' || *p_ == '\r')) ++p_;
  }
  bool eat(char c) {
    if (p_ < end_ && *p_ == c) {
      ++p_;
      return true;
    }
    return false;
  }
  void expect(char c) {
    if (!eat(c)) fail(p_ < end_ ? fmt::format("expected '{}', found '{}'", c, printable(*p_))
                                : fmt::format("expected '{}', found the end of the header", c));
  }
  static std::string printable(char c) {
    unsigned char u = static_cast<unsigned char>(c);
    return u >= 0x20 && u < 0x7f ? std::string(1, c) : fmt::format("\\x{:02x}", u);
  }

  void check_utf8() {
    const auto* s = reinterpret_cast<const unsigned char*>(begin_);
    size_t n = size_t(end_ - begin_);
    for (size_t i = 0; i < n;) {
      unsigned char c = s[i];
      size_t len = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xe ? 3 : (c >> 3) == 0x1e ? 4 : 0;
      if (len == 0 || i + len > n) {
        p_ = begin_ + i;
        fail("the header is not valid UTF-8");
      }
      uint32_t cp = len == 1 ? c : c & (0x7f >> len);
      for (size_t k = 1; k < len; ++k) {
        if ((s[i + k] & 0xc0) != 0x80) {
          p_ = begin_ + i;
          fail("the header is not valid UTF-8");
        }
        cp = cp << 6 | (s[i + k] & 0x3f);
      }
      static const uint32_t min_cp[] = {0, 0, 0x80, 0x800, 0x10000};
      if (cp < min_cp[len] || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) {
        p_ = begin_ + i;
        fail("the header is not valid UTF-8");
      }
      i += len;
    }
  }

  unsigned hex4() {
    unsigned v = 0;
    for (int i = 0; i < 4; ++i) {
      if (p_ >= end_) fail("truncated \\u escape");
      char c = *p_++;
      v <<= 4;
      if (c >= '0' && c <= '9') v |= unsigned(c - '0');
      else if (c >= 'a' && c <= 'f') v |= unsigned(c - 'a' + 10);
      else if (c >= 'A' && c <= 'F') v |= unsigned(c - 'A' + 10);
      else fail("bad hex digit in a \\u escape");
    }
    return v;
  }

  static void put_utf8(std::string& out, uint32_t cp) {
    if (cp < 0x80) {
      out += char(cp);
    } else if (cp < 0x800) {
      out += char(0xc0 | cp >> 6);
      out += char(0x80 | (cp & 0x3f));
    } else if (cp < 0x10000) {
      out += char(0xe0 | cp >> 12);
      out += char(0x80 | (cp >> 6 & 0x3f));
      out += char(0x80 | (cp & 0x3f));
    } else {
      out += char(0xf0 | cp >> 18);
      out += char(0x80 | (cp >> 12 & 0x3f));
      out += char(0x80 | (cp >> 6 & 0x3f));
      out += char(0x80 | (cp & 0x3f));
    }
  }

  std::string string() {
    expect('"');
    std::string out;
    for (;;) {
      if (p_ >= end_) fail("unterminated string");
      char c = *p_++;
      if (c == '"') return out;
      if (static_cast<unsigned char>(c) < 0x20) fail("control character in a string");
      if (c != '\\') {
        out += c;
        continue;
      }
      if (p_ >= end_) fail("unterminated escape");
      switch (char e = *p_++) {
        case '"': case '\\': case '/': out += e; break;
        case 'b': out += '\b'; break;
        case 'f': out += '\f'; break;
        case 'n': out += '\n'; break;
        case 'r': out += '\r'; break;
        case 't': out += '\t'; break;
        case 'u': {
          uint32_t cp = hex4();
          if (cp >= 0xdc00 && cp <= 0xdfff) fail("lone low surrogate in a \\u escape");
          if (cp >= 0xd800 && cp <= 0xdbff) {
            if (!eat('\\') || !eat('u')) fail("high surrogate without its low half");
            uint32_t lo = hex4();
            if (lo < 0xdc00 || lo > 0xdfff) fail("high surrogate without its low half");
            cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
          }
          put_utf8(out, cp);
          break;
        }
        default: fail(fmt::format("bad escape '\\{}'", printable(e)));
      }
    }
  }

  uint64_t integer() {
    if (p_ >= end_ || *p_ < '0' || *p_ > '9') fail("expected a non-negative integer");
    if (*p_ == '0' && p_ + 1 < end_ && p_[1] >= '0' && p_[1] <= '9') fail("integer with a leading zero");
    uint64_t v = 0;
    while (p_ < end_ && *p_ >= '0' && *p_ <= '9') {
      uint64_t d = uint64_t(*p_ - '0');
      if (v > (UINT64_MAX - d) / 10) fail("integer out of range");
      v = v * 10 + d;
      ++p_;
    }
    if (p_ < end_ && (*p_ == '.' || *p_ == 'e' || *p_ == 'E')) fail("expected an integer, found a fraction");
    return v;
  }

  std::vector<uint64_t> integer_array(size_t max_len, const char* what) {
    std::vector<uint64_t> out;
    expect('[');
    ws();
    if (eat(']')) return out;
    do {
      ws();
      if (out.size() == max_len) fail(fmt::format("{} has more than {} entries", what, max_len));
      out.push_back(integer());
      ws();
    } while (eat(','));
    expect(']');
    return out;
  }

  // A JSON object: on_member(key) for each member, called with the cursor at its value,
  // which it reads.
  template <class F>
  void object_members(F on_member) {
    expect('{');
    ws();
    if (eat('}')) return;
    do {
      ws();
      std::string key = string();
      ws();
      expect(':');
      ws();
      on_member(key);
      ws();
    } while (eat(','));
    expect('}');
  }

  void parse_metadata(std::map<std::string, std::string>& metadata) {
    object_members([&](const std::string& key) {
      if (p_ < end_ && *p_ != '"') fail("metadata values must be strings");
      std::string value = string();
      if (!metadata.emplace(key, value).second) fail("metadata key " + quoted(key) + " appears twice");
    });
  }

  Info parse_info(const std::string& name) {
    Info info;
    info.name = name;
    bool has_dtype = false, has_shape = false, has_offsets = false;
    object_members([&](const std::string& key) {
      if (key == "dtype") {
        if (has_dtype) fail("\"dtype\" appears twice in " + quoted(name));
        has_dtype = true;
        std::string code = string();
        if (!dtype_from_code(code, info.dtype))
          fail(fmt::format("tensor {} has dtype {}; reel reads F32 F64 F16 BF16 I32 I64 U8 BOOL", quoted(name),
                           quoted(code)));
      } else if (key == "shape") {
        if (has_shape) fail("\"shape\" appears twice in " + quoted(name));
        has_shape = true;
        for (uint64_t d : integer_array(size_t(kMaxDims), "shape")) {
          if (d > uint64_t(INT64_MAX)) fail("dimension out of range in " + quoted(name));
          info.shape.push_back(int64_t(d));
        }
      } else if (key == "data_offsets") {
        if (has_offsets) fail("\"data_offsets\" appears twice in " + quoted(name));
        has_offsets = true;
        std::vector<uint64_t> off = integer_array(2, "data_offsets");
        if (off.size() != 2) fail("data_offsets of " + quoted(name) + " must be [begin, end]");
        info.begin = off[0];
        info.end = off[1];
      } else {
        fail(fmt::format("unknown field {} in tensor {}", quoted(key), quoted(name)));
      }
    });
    if (!has_dtype || !has_shape || !has_offsets)
      fail(fmt::format("tensor {} lacks {}", quoted(name), !has_dtype ? "\"dtype\"" : !has_shape ? "\"shape\"" : "\"data_offsets\""));
    return info;
  }

  const char* begin_;
  const char* p_;
  const char* end_;
  const std::string& source_;
};

// ---- the writer's header
void put_json_string(std::string& out, const std::string& s) {
  out += '"';
  for (char c : s) {
    unsigned char u = static_cast<unsigned char>(c);
    if (c == '"' || c == '\\') out += {'\\', c};
    else if (u < 0x20) out += fmt::format("\\u{:04x}", u);
    else out += c;
  }
  out += '"';
}

struct Prepared {
  std::string header;  // with the 8-byte length in front, padded to a multiple of 8
  std::vector<Tensor> data;  // contiguous CPU tensors, in file order
};

Prepared prepare(const char* fn, const std::vector<std::pair<std::string, Tensor>>& tensors,
                 const std::map<std::string, std::string>& metadata) {
  Prepared out;
  std::set<std::string> names;
  std::string json = "{";
  if (!metadata.empty()) {
    json += "\"__metadata__\":{";
    bool first = true;
    for (const auto& [k, v] : metadata) {
      if (!first) json += ',';
      first = false;
      put_json_string(json, k);
      json += ':';
      put_json_string(json, v);
    }
    json += '}';
  }
  uint64_t offset = 0;
  for (const auto& [name, t] : tensors) {
    if (name.empty() || name == "__metadata__")
      throw Error(fmt::format("safetensors::{}: invalid tensor name {}", fn, quoted(name)));
    if (!names.insert(name).second) throw Error(fmt::format("safetensors::{}: tensor name {} appears twice", fn, quoted(name)));
    if (!t.defined()) throw Error(fmt::format("safetensors::{}: tensor {} is undefined", fn, quoted(name)));
    Tensor c = t.detach();
    if (!c.device().is_cpu()) c = c.cpu();
    c = c.contiguous();
    uint64_t nbytes = uint64_t(c.numel()) * c.element_size();
    if (json.size() > 1) json += ',';
    put_json_string(json, name);
    json += fmt::format(":{{\"dtype\":\"{}\",\"shape\":[", dtype_code(c.dtype()));
    for (int d = 0; d < c.dim(); ++d) json += fmt::format("{}{}", d ? "," : "", c.shape()[d]);
    json += fmt::format("],\"data_offsets\":[{},{}]}}", offset, offset + nbytes);
    offset += nbytes;
    out.data.push_back(c);
  }
  json += '}';
  json.append((8 - json.size() % 8) % 8, ' ');  // the data section starts 8-byte aligned
  uint64_t n = json.size();
  out.header.resize(8);
  std::memcpy(out.header.data(), &n, 8);
  out.header += json;
  return out;
}

}  // namespace

std::vector<uint8_t> serialize(const std::vector<std::pair<std::string, Tensor>>& tensors,
                               const std::map<std::string, std::string>& metadata) {
  Prepared p = prepare("serialize", tensors, metadata);
  std::vector<uint8_t> out(p.header.begin(), p.header.end());
  for (const Tensor& t : p.data) {
    const auto* b = static_cast<const uint8_t*>(t.data_ptr());
    out.insert(out.end(), b, b + size_t(t.numel()) * t.element_size());
  }
  return out;
}

// Written through write_file_atomically: a save killed at any moment leaves the old file
// or the new one, whole, and at most its own temporary, which the next save removes.
void save(const std::string& path, const std::vector<std::pair<std::string, Tensor>>& tensors,
          const std::map<std::string, std::string>& metadata) {
  Prepared p = prepare("save", tensors, metadata);
  write_file_atomically(
      path,
      [&](FileSink& out) {
        out.write(p.header.data(), p.header.size());
        for (const Tensor& t : p.data) out.write(t.data_ptr(), size_t(t.numel()) * t.element_size());
      },
      "safetensors::save");
}

File parse(const uint8_t* data, size_t size, const std::string& source) {
  auto fail = [&](const std::string& what) -> void { throw Error(fmt::format("safetensors: {}: {}", source, what)); };
  if (size < 8)
    fail(fmt::format("truncated: {} bytes, but a safetensors file starts with an 8-byte header length", size));
  uint64_t n;
  std::memcpy(&n, data, 8);
  if (n > kMaxHeaderBytes) fail(fmt::format("header length {} exceeds the limit of {} bytes", n, kMaxHeaderBytes));
  if (n > size - 8) fail(fmt::format("truncated: the header needs {} bytes, the file has {} after the length", n, size - 8));
  if (n < 2) fail(fmt::format("header of {} bytes is too short for a JSON object", n));

  std::vector<Info> infos;
  File out;
  HeaderParser(reinterpret_cast<const char*>(data + 8), size_t(n), source).parse(infos, out.metadata);

  const uint8_t* body = data + 8 + n;
  uint64_t body_size = size - 8 - n;
  for (const Info& info : infos) {
    uint64_t numel = 1, nonzero = 1;
    for (int64_t d : info.shape) {
      // the product of the non-zero dims bounds every stride: it must fit in int64
      if (d != 0 && __builtin_mul_overflow(nonzero, uint64_t(d), &nonzero))
        fail(fmt::format("tensor {}: shape overflows", quoted(info.name)));
      numel *= uint64_t(d);
    }
    if (nonzero > uint64_t(INT64_MAX)) fail(fmt::format("tensor {}: shape overflows", quoted(info.name)));
    uint64_t nbytes;
    if (__builtin_mul_overflow(numel, uint64_t(dtype_size(info.dtype)), &nbytes))
      fail(fmt::format("tensor {}: shape overflows", quoted(info.name)));
    if (info.end < info.begin)
      fail(fmt::format("tensor {}: data_offsets [{}, {}] end before they begin", quoted(info.name), info.begin, info.end));
    if (info.end - info.begin != nbytes)
      fail(fmt::format("tensor {}: data_offsets [{}, {}] span {} bytes, but {} {} needs {}", quoted(info.name),
                       info.begin, info.end, info.end - info.begin, dtype_code(info.dtype), Dims(info.shape).str(),
                       nbytes));
    if (info.end > body_size)
      fail(fmt::format("truncated: tensor {} ends at byte {} of the data, which has {} bytes", quoted(info.name),
                       info.end, body_size));
  }
  std::vector<const Info*> order;
  for (const Info& info : infos) order.push_back(&info);
  std::sort(order.begin(), order.end(), [](const Info* a, const Info* b) {
    return a->begin != b->begin ? a->begin < b->begin : a->end < b->end;
  });
  uint64_t expected = 0;
  for (const Info* info : order) {
    if (info->begin != expected)
      fail(fmt::format("tensor {}: data_offsets begin at {}, expected {} ({})", quoted(info->name), info->begin, expected,
                       info->begin < expected ? "it overlaps another tensor" : "a hole precedes it"));
    expected = info->end;
  }
  if (expected != body_size)
    fail(fmt::format("the tensors cover {} bytes of data, but the file holds {}", expected, body_size));

  for (const Info* info : order) {
    Tensor t = empty(Dims(info->shape), {.dtype = info->dtype});
    size_t nbytes = size_t(info->end - info->begin);
    const uint8_t* src = body + info->begin;
    if (info->dtype == DType::boolean)
      for (size_t i = 0; i < nbytes; ++i)
        if (src[i] > 1) fail(fmt::format("tensor {}: BOOL element {} holds byte {}", quoted(info->name), i, src[i]));
    if (nbytes) std::memcpy(t.data_ptr(), src, nbytes);
    out.tensors.emplace_back(info->name, std::move(t));
  }
  return out;
}

File load(const std::string& path) {
  internal::RegularFile file(path, "safetensors");
  const int fd = file.fd();
  std::vector<uint8_t> bytes(file.size());
  size_t done = 0;
  while (done < bytes.size()) {
    ssize_t n = ::read(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) throw Error(fmt::format("safetensors: cannot read {}: {}", path, std::strerror(errno)));
    if (n == 0) break;  // the file shrank while we read: parse() reports the truncation
    done += size_t(n);
  }
  bytes.resize(done);
  return parse(bytes.data(), bytes.size(), path);
}

}  // namespace reel::safetensors
