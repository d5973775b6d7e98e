// torch_pt against archives PyTorch never writes: pickles that name code, lie about
// sizes, nest without end or abuse the memo, and zips that lie about their entries.
// Each must end in an Error that says what was wrong, with nothing run and nothing
// allocated from a size the file merely claims.
#include <catch2/catch.hpp>
#include <reel/reel.h>

#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <tuple>

#include "torch_pt_zip.h"

using namespace reel;
using reel::test::Bytes;
using reel::test::bytes_of;
using reel::test::make_zip;
using reel::test::ZipItem;

namespace {

// A pickle written opcode by opcode.
struct Pickle {
  std::string s = "\x80\x02";  // PROTO 2
  Pickle& op(char c) { s += c; return *this; }
  Pickle& ops(const std::string& o) { s += o; return *this; }
  Pickle& le(uint64_t v, int n) {
    for (int i = 0; i < n; ++i) s += char(uint8_t(v >> (8 * i)));
    return *this;
  }
  Pickle& str(const std::string& v) { return op('X').le(v.size(), 4).ops(v); }
  Pickle& int1(uint8_t v) { return op('K').le(v, 1); }
  Pickle& global(const std::string& module, const std::string& name) { return op('c').ops(module + "\n" + name + "\n"); }
  Pickle& ints(const std::vector<uint8_t>& v) {  // a tuple of small ints
    op('(');
    for (uint8_t x : v) int1(x);
    return op('t');
  }
  // _rebuild_tensor_v2(storage('storage', torch.<type>, key, 'cpu', numel), offset, size, stride, False, {})
  Pickle& tensor(const std::string& type, const std::string& key, uint64_t numel, uint8_t offset,
                 const std::vector<uint8_t>& size, const std::vector<uint8_t>& stride) {
    global("torch._utils", "_rebuild_tensor_v2").op('(');
    op('(').str("storage").global("torch", type).str(key).str("cpu").op('\x8a').le(8, 1).le(numel, 8).op('t').op('Q');
    int1(offset).ints(size).ints(stride).op('\x89').op('}');
    return op('t').op('R');
  }
  Bytes bytes() const { return bytes_of(s); }
};

Bytes floats(std::vector<float> v) {
  Bytes b(v.size() * 4);
  std::memcpy(b.data(), v.data(), b.size());
  return b;
}

// An archive of `pickle` and the storages given as (key, bytes).
Bytes archive(const Pickle& pickle, std::vector<std::pair<std::string, Bytes>> storages = {}, bool deflate = false,
              bool zip64 = false) {
  std::vector<ZipItem> items{{.name = "a/data.pkl", .data = pickle.bytes()}};
  for (auto& [key, data] : storages) items.push_back({.name = "a/data/" + key, .data = data, .deflate = deflate});
  items.push_back({.name = "a/version", .data = bytes_of("3\n")});
  return make_zip(items, zip64);
}

std::string error_of(const Bytes& file) {
  try {
    torch_pt::parse(file.data(), file.size(), "attack");
  } catch (const Error& e) {
    return e.what();
  }
  return "no error";
}

// {'w': tensor} around `t`
Pickle one(const std::function<void(Pickle&)>& t) {
  Pickle p;
  p.op('}').str("w");
  t(p);
  p.op('s').op('.');
  return p;
}

}  // namespace

TEST_CASE("torch_pt: a hand-made archive reads, stored or deflated, zip or zip64", "[torch_pt]") {
  Pickle p = one([](Pickle& p) { p.tensor("FloatStorage", "0", 6, 1, {2, 2}, {1, 2}); });
  for (bool deflate : {false, true})
    for (bool zip64 : {false, true}) {
      Bytes file = archive(p, {{"0", floats({0, 1, 2, 3, 4, 5})}}, deflate, zip64);
      torch_pt::File f = torch_pt::parse(file.data(), file.size());
      REQUIRE(f.tensors.size() == 1);
      CHECK(f.at("w").to_vector<double>() == std::vector<double>{1, 3, 2, 4});  // offset 1, strides (1, 2)
    }
  Bytes file = archive(p, {{"0", floats({0, 1, 2, 3, 4, 5})}}, false, true);
  Bytes broken = file;  // the locator's offset of the zip64 end record, pointing past it
  broken[broken.size() - 22 - 20 + 8] ^= 0x40;
  CHECK(error_of(broken).find("zip64 end record") != std::string::npos);

  // the other rebuilds a file may use: _rebuild_tensor (v1), _rebuild_parameter_with_state
  Pickle v1;
  v1.op('}').str("w").global("torch._utils", "_rebuild_tensor").op('(');
  v1.op('(').str("storage").global("torch", "LongStorage").str("0").str("cuda:0").int1(2).op('t').op('Q');
  v1.int1(1).ints({1}).ints({1}).op('t').op('R').op('s').op('.');
  Bytes longs(16, 0);
  longs[8] = 0xfe, longs[15] = 0x80;  // int64 0x80000000000000fe
  torch_pt::File f1 = torch_pt::parse(archive(v1, {{"0", longs}}).data(), archive(v1, {{"0", longs}}).size());
  CHECK(f1.at("w").dtype() == DType::i64);
  CHECK(f1.at("w").contiguous().data<int64_t>()[0] == int64_t(0x80000000000000feull));
  Pickle param;
  param.op('}').str("p").global("torch._utils", "_rebuild_parameter_with_state").op('(');
  param.tensor("FloatStorage", "0", 2, 0, {2}, {1}).op('\x88').op('}').op('}').op('t').op('R').op('s').op('.');
  Bytes pf = archive(param, {{"0", floats({4, 5})}});
  CHECK(torch_pt::parse(pf.data(), pf.size()).at("p").to_vector<double>() == std::vector<double>{4, 5});

  // DUP, POP, POP_MARK, DICT, TUPLE3, LONG1 -1, BINFLOAT, a protocol-4 frame and memo
  Pickle stack;
  stack.op('\x95').le(0, 8).op('(').str("x").op('2').op('0').op('1');
  stack.op('(').str("t").int1(1).int1(2).int1(3).op('\x87').op('\x94').str("n").op('\x8a').le(1, 1).le(0xff, 1);
  stack.str("f").op('G').le(0x000000000000f83f, 8).op('d').op('.');  // 1.5 big-endian
  Bytes sf = archive(stack);
  torch_pt::File s = torch_pt::parse(sf.data(), sf.size());
  REQUIRE(s.values.size() == 5);
  CHECK(s.values[0].first == "t.0");
  CHECK(s.values[2].second.i == 3);
  CHECK(s.find_value("n")->i == -1);
  CHECK(s.find_value("f")->d == 1.5);
}

TEST_CASE("torch_pt refuses every global but the state dict's, and runs nothing", "[torch_pt]") {
  std::string marker = "/tmp/reel_torch_pt_pwned_" + std::to_string(::getpid());
  std::remove(marker.c_str());
  for (auto [module, name] : std::vector<std::pair<std::string, std::string>>{
           {"posix", "system"}, {"os", "system"}, {"builtins", "eval"}, {"__builtin__", "exec"},
           {"builtins", "getattr"}, {"subprocess", "check_output"}, {"torch", "load"}, {"torch._utils", "_rebuild_qtensor"},
           {"numpy.core.multiarray", "scalar"}, {"collections", "OrderedDictX"}, {"torch", "Storage"}}) {
    Pickle p;
    p.global(module, name).op('(').str("touch " + marker).op('t').op('R').op('.');
    std::string e = error_of(archive(p));
    INFO(e);
    CHECK(e.find("refused global '" + module + "." + name + "'") != std::string::npos);
    Pickle p4;  // protocol 4 names globals from the stack
    p4.str(module).str(name).op('\x93').op('.');
    CHECK(error_of(archive(p4)).find("refused global '" + module + "." + name + "'") != std::string::npos);
  }
  CHECK(::access(marker.c_str(), F_OK) != 0);

  Pickle call_storage;
  call_storage.global("torch", "FloatStorage").op(')').op('R').op('.');
  CHECK(error_of(archive(call_storage)).find("'torch.FloatStorage' is a storage type, not something to call") !=
        std::string::npos);
  // opcodes that build objects, bytes or sets
  for (char op : {'i', 'o', '\x81', '\x92', 'B', 'C', '\x8f', 'P', 'I', 'F', 'S', 'V', 'L'}) {
    Pickle p;
    p.op(op).op('.');
    CHECK(error_of(archive(p)).find("is not one that PyTorch writes") != std::string::npos);
  }
  // hooks would be code: a non-empty backward_hooks dict is refused
  Pickle hooks;
  hooks.op('}').str("w").global("torch._utils", "_rebuild_tensor_v2").op('(');
  hooks.op('(').str("storage").global("torch", "FloatStorage").str("0").str("cpu").int1(1).op('t').op('Q');
  hooks.int1(0).ints({1}).ints({1}).op('\x89').op('}').int1(0).int1(0).op('s').op('t').op('R').op('s').op('.');
  CHECK(error_of(archive(hooks, {{"0", floats({1})}})).find("backward_hooks must be an empty dict") !=
        std::string::npos);
}

TEST_CASE("torch_pt: sizes the file claims are checked before anything is allocated", "[torch_pt]") {
  Pickle huge_string;
  huge_string.op('X').le(0xffffffff, 4).op('.');
  CHECK(error_of(archive(huge_string)).find("truncated: 4294967295 bytes wanted") != std::string::npos);
  Pickle huge_string8;
  huge_string8.op('\x8d').le(uint64_t(1) << 62, 8).op('.');
  CHECK(error_of(archive(huge_string8)).find("truncated") != std::string::npos);
  Pickle huge_long;
  huge_long.op('\x8b').le(0x7fffffff, 4).op('.');
  CHECK(error_of(archive(huge_long)).find("does not fit 64 bits") != std::string::npos);

  // a storage claiming 2^40 floats in an 8-byte entry, or so many that the bytes overflow
  Pickle big = one([](Pickle& p) { p.tensor("FloatStorage", "0", uint64_t(1) << 40, 0, {1}, {1}); });
  CHECK(error_of(archive(big, {{"0", floats({1, 2})}})).find("need 4398046511104 bytes, its entry holds 8") !=
        std::string::npos);
  Pickle overflow = one([](Pickle& p) { p.tensor("DoubleStorage", "0", uint64_t(1) << 62, 0, {1}, {1}); });
  CHECK(error_of(archive(overflow, {{"0", floats({1, 2})}})).find("storage '0'") != std::string::npos);
  Pickle missing = one([](Pickle& p) { p.tensor("FloatStorage", "7", 2, 0, {1}, {1}); });
  CHECK(error_of(archive(missing, {{"0", floats({1, 2})}})).find("has no entry \"a/data/7\"") != std::string::npos);
  // views that reach past their storage
  for (auto [offset, size, stride] : std::vector<std::tuple<uint8_t, std::vector<uint8_t>, std::vector<uint8_t>>>{
           {0, {5}, {1}}, {3, {2}, {1}}, {5, {1}, {1}}, {0, {2, 2}, {2, 2}}, {0, {1, 1, 1, 1, 1, 1, 1, 1, 1}, {1, 1, 1, 1, 1, 1, 1, 1, 1}}}) {
    Pickle p = one([&](Pickle& p) { p.tensor("FloatStorage", "0", 4, offset, size, stride); });
    std::string e = error_of(archive(p, {{"0", floats({1, 2, 3, 4})}}));
    INFO(e);
    CHECK((e.find("does not fit its storage of 4 elements") != std::string::npos ||
           e.find("reel's tensors have at most 8") != std::string::npos));
  }
  // a deflated entry claiming far more than deflate can give
  Bytes bomb = make_zip({{.name = "a/data.pkl", .data = Pickle().op('N').op('.').bytes(), .deflate = true,
                          .declared_size = 0xfffffff0}});
  CHECK(error_of(bomb).find("more than deflate can give") != std::string::npos);
  Bytes bool_bad = archive(one([](Pickle& p) { p.tensor("BoolStorage", "0", 2, 0, {2}, {1}); }), {{"0", {1, 2}}});
  CHECK(error_of(bool_bad).find("bool element 1 holds byte 2") != std::string::npos);
  Pickle retyped;  // one storage named with two types
  retyped.op('(').tensor("FloatStorage", "0", 2, 0, {2}, {1}).tensor("IntStorage", "0", 2, 0, {2}, {1}).op('l').op('.');
  CHECK(error_of(archive(retyped, {{"0", floats({1, 2})}})).find("is named as FloatStorage") != std::string::npos);
}

TEST_CASE("torch_pt: nesting, cycles and memo abuse stay bounded", "[torch_pt]") {
  Pickle deep;
  for (int i = 0; i < 100000; ++i) deep.op(']');
  for (int i = 0; i < 99999; ++i) deep.op('a');
  deep.op('.');
  CHECK(error_of(archive(deep)).find("nests deeper than 200 levels") != std::string::npos);
  Pickle marks;
  for (int i = 0; i < 100000; ++i) marks.op('(');
  marks.op('.');
  CHECK(error_of(archive(marks)).find("the stack is empty") != std::string::npos);

  Pickle cycle;
  cycle.op(']').op('q').le(0, 1).op('h').le(0, 1).op('a').op('.');
  CHECK(error_of(archive(cycle)).find("a list contains itself") != std::string::npos);
  // 2^60 paths through 60 shared lists: copies are charged, not made
  Pickle dag;
  dag.op('N');
  for (int i = 0; i < 60; ++i) dag.op('q').le(0, 1).op('(').op('h').le(0, 1).op('h').le(0, 1).op('l');
  dag.op('.');
  CHECK(error_of(archive(dag)).find("exceed the size budget") != std::string::npos);
  // a 1 MB string referenced 100000 times
  Pickle strings;
  strings.str(std::string(1 << 20, 'x')).op('q').le(0, 1).op('(');
  for (int i = 0; i < 100000; ++i) strings.op('h').le(0, 1);
  strings.op('l').op('.');
  CHECK(error_of(archive(strings)).find("exceed the size budget") != std::string::npos);

  Pickle unset;
  unset.op('h').le(9, 1).op('.');
  CHECK(error_of(archive(unset)).find("memo entry 9 was never stored") != std::string::npos);
  Pickle empty_stop;
  empty_stop.op('.');
  CHECK(error_of(archive(empty_stop)).find("the stack is empty") != std::string::npos);
  Pickle no_stop;
  no_stop.op('N');
  CHECK(error_of(archive(no_stop)).find("truncated") != std::string::npos);
  Pickle tuple_key;
  tuple_key.op('}').op(')').op('N').op('s').op('.');
  CHECK(error_of(archive(tuple_key)).find("a dict key must be a string or an int, not a tuple") != std::string::npos);
  Pickle bad_pid;
  bad_pid.op('(').str("storage").global("torch", "FloatStorage").str("0").str("cpu").op('t').op('Q').op('.');
  CHECK(error_of(archive(bad_pid)).find("('storage', type, key, location, numel)") != std::string::npos);
}

TEST_CASE("torch_pt: zips that lie are refused", "[torch_pt]") {
  Pickle p = one([](Pickle& p) { p.tensor("FloatStorage", "0", 2, 0, {2}, {1}); });
  Bytes good = archive(p, {{"0", floats({1, 2})}});
  CHECK(error_of(good) == "no error");

  Bytes crc = good;  // a storage byte changed: its CRC no longer matches
  size_t at = std::string(crc.begin(), crc.end()).find("a/data/0") + 8 + 4;
  crc[at] ^= 1;
  CHECK(error_of(crc).find("entry \"a/data/0\" is corrupt: CRC-32") != std::string::npos);

  std::vector<ZipItem> twice{{.name = "a/data.pkl", .data = p.bytes()}, {.name = "a/data.pkl", .data = p.bytes()}};
  CHECK(error_of(make_zip(twice)).find("entry \"a/data.pkl\" appears twice") != std::string::npos);
  Bytes no_pickle = make_zip({{.name = "a/version", .data = bytes_of("3\n")}});
  CHECK(error_of(no_pickle).find("no <name>/data.pkl") != std::string::npos);
  Bytes big_endian = make_zip({{.name = "a/data.pkl", .data = Pickle().op('N').op('.').bytes()},
                               {.name = "a/byteorder", .data = bytes_of("big")}});
  CHECK(error_of(big_endian).find("byte order \"big\"") != std::string::npos);
  Bytes little = make_zip({{.name = "a/data.pkl", .data = Pickle().op('N').op('.').bytes()},
                           {.name = "a/byteorder", .data = bytes_of("little")}});
  CHECK(torch_pt::parse(little.data(), little.size()).values.size() == 1);

  Bytes moved = good;  // the central directory's offset pointing past the end
  moved[moved.size() - 3] = 0xff;
  CHECK(error_of(moved).find("lies outside the archive") != std::string::npos);
  CHECK(error_of(bytes_of("PK")).find("not a torch.save file") != std::string::npos);
  CHECK(error_of(bytes_of("hello world, not an archive")).find("not a torch.save file") != std::string::npos);
  CHECK(error_of(Pickle().op('N').op('.').bytes()).find("legacy (pre-1.6, non-zip) format") != std::string::npos);
}

// CI's bounded replay of the fuzzer's seeds (test/fuzz/seeds_torch_pt; the fuzzer itself
// needs clang: test/fuzz/CMakeLists.txt): the valid ones parse, the refused ones throw.
TEST_CASE("torch_pt: the fuzzer's seeds replay", "[torch_pt]") {
  std::string dir = std::string(REEL_SOURCE_DIR) + "/test/fuzz/seeds_torch_pt";
  int files = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    std::string name = entry.path().filename().string();
    INFO(name);
    std::ifstream in(entry.path(), std::ios::binary);
    Bytes b{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
    bool refused = name.starts_with("evil") || name.starts_with("legacy");
    CHECK((error_of(b) == "no error") == !refused);
    ++files;
  }
  CHECK(files >= 6);
}
