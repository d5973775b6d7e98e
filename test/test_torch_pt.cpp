// torch_pt: PyTorch's torch.save files. Fixtures written by Debian's PyTorch 1.13 (_113)
// and PyPI's PyTorch 2.x (_2) with test/reference/torch_pt_fixtures.py, each beside the
// table of what torch.load gives back; every tensor, value and shared storage must match
// exactly. Then Module::load's checks, the files reel refuses, and hand-made archives
// that attack the reader (torch_pt_attacks below).
#include <catch2/catch.hpp>
#include <reel/reel.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "torch_pt_zip.h"

using namespace reel;
using reel::test::Bytes;

namespace {

std::string fixture(const std::string& name) { return std::string(REEL_SOURCE_DIR) + "/test/reference/torch_pt/" + name; }

std::string unhex(const std::string& h) {
  if (h == "-") return "";
  std::string s;
  for (size_t i = 0; i + 1 < h.size(); i += 2) s += char(std::stoi(h.substr(i, 2), nullptr, 16));
  return s;
}

// Checks `t` against one "T" line's dtype, dims and values (exactly; NaN equals NaN, and
// the sign of zero counts).
void check_tensor(const Tensor& t, std::istringstream& in) {
  std::string dtype;
  int rank;
  in >> dtype >> rank;
  CHECK(dtype_name(t.dtype()) == dtype);
  Dims shape;
  for (int i = 0; i < rank; ++i) {
    int64_t s;
    in >> s;
    shape.push_back(s);
  }
  REQUIRE(t.shape() == shape);
  std::vector<std::string> want;
  for (std::string tok; in >> tok;) want.push_back(tok);
  REQUIRE(int64_t(want.size()) == t.numel());
  if (t.dtype() == DType::i64) {  // through double would round 2^63 - 1
    Tensor c = t.contiguous();
    for (size_t i = 0; i < want.size(); ++i) CHECK(c.data<int64_t>()[i] == std::stoll(want[i]));
    return;
  }
  std::vector<double> got = t.to_vector<double>();
  for (size_t i = 0; i < want.size(); ++i) {
    double w = std::strtod(want[i].c_str(), nullptr);
    INFO("element " << i << ": " << got[i] << " against " << want[i]);
    if (std::isnan(w)) CHECK(std::isnan(got[i]));
    else CHECK((got[i] == w && std::signbit(got[i]) == std::signbit(w)));
  }
}

void check_value(const torch_pt::Value& v, std::istringstream& in) {
  std::string kind, text;
  in >> kind >> text;
  REQUIRE(torch_pt::kind_name(v.kind) == kind);
  switch (v.kind) {
    case torch_pt::Value::Kind::none: break;
    case torch_pt::Value::Kind::boolean: CHECK(v.b == (text == "1")); break;
    case torch_pt::Value::Kind::integer: CHECK(v.i == std::stoll(text)); break;
    case torch_pt::Value::Kind::real: {
      double w = std::strtod(text.c_str(), nullptr);
      CHECK((v.d == w || (std::isnan(v.d) && std::isnan(w))));
      break;
    }
    case torch_pt::Value::Kind::string: CHECK(v.s == unhex(text)); break;
    default: FAIL("a leaf of kind " << kind);
  }
}

// Every line of `table` against `file`, and nothing more in the file.
void check_against_table(const std::string& file, const std::string& table) {
  INFO(file);
  torch_pt::File f = torch_pt::load(fixture(file));
  std::ifstream in(fixture(table));
  REQUIRE(in.good());
  size_t tensors = 0, values = 0;
  for (std::string line; std::getline(in, line);) {
    if (line.empty() || line[0] == '#') continue;
    std::istringstream s(line);
    std::string tag, name;
    s >> tag >> name;
    INFO(line.substr(0, 80));
    if (tag == "T") {
      REQUIRE(tensors < f.tensors.size());
      CHECK(f.tensors[tensors].first == name);  // in the pickle's order
      check_tensor(f.at(name), s);
      ++tensors;
    } else if (tag == "V") {
      REQUIRE(values < f.values.size());
      CHECK(f.values[values].first == name);
      const torch_pt::Value* v = f.find_value(name);
      REQUIRE(v != nullptr);
      check_value(*v, s);
      ++values;
    } else {
      REQUIRE(tag == "S");
      std::string other;
      s >> other;
      CHECK(f.at(name).storage().get() == f.at(other).storage().get());  // shared as in Python
    }
  }
  CHECK(tensors == f.tensors.size());
  CHECK(values == f.values.size());
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "no error";
}

std::vector<uint8_t> read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

}  // namespace

TEST_CASE("torch_pt reads what PyTorch 1.13 and 2.x wrote, exactly", "[torch_pt]") {
  for (std::string tag : {"113", "2"}) {
    for (std::string c : {"dtypes", "views", "nested", "linear"}) check_against_table(c + "_" + tag + ".pt", c + "_" + tag + ".txt");
    check_against_table("nested_p4_" + tag + ".pt", "nested_" + tag + ".txt");  // pickle protocol 4
  }
}

TEST_CASE("torch_pt: the object's structure, views and shared storages", "[torch_pt]") {
  torch_pt::File f = torch_pt::load(fixture("views_2.pt"));
  const Tensor& base = f.at("base");
  const Tensor& t = f.at("transposed");
  CHECK(t.strides() == Dims{1, 6});
  CHECK(f.at("sliced").offset() == 6);
  CHECK(f.at("sliced").strides() == Dims{6, 2});
  CHECK(f.at("expanded").strides() == Dims{0, 1});
  CHECK(f.at("tied.0").impl() == f.at("tied.1").impl());  // the memo gives the same tensor
  // a view sees writes through its base, as in Python
  base.narrow(0, 0, 1).fill_(7.0);
  CHECK(t.select(1, 0).to_vector<double>() == std::vector<double>(6, 7.0));

  torch_pt::File n = torch_pt::load(fixture("nested_113.pt"));
  REQUIRE(n.root.kind == torch_pt::Value::Kind::dict);
  REQUIRE(n.root.keys.size() == n.root.items.size());
  const torch_pt::Value& opt = n.root.items[1];
  CHECK(n.root.keys[1].s == "optimizer");
  const torch_pt::Value& state = opt.items[0];
  REQUIRE(state.keys.size() == 4);
  CHECK(state.keys[0].kind == torch_pt::Value::Kind::integer);  // int keys stay ints
  CHECK(state.keys[3].i == 3);
  const torch_pt::Value* shape = nullptr;
  for (size_t i = 0; i < n.root.keys.size(); ++i)
    if (n.root.keys[i].s == "shape") shape = &n.root.items[i];
  REQUIRE(shape != nullptr);
  CHECK(shape->kind == torch_pt::Value::Kind::tuple);
  CHECK(shape->items.size() == 2);
  CHECK(error_of([&] { n.at("epoch"); }).find("\"epoch\" is a plain value") != std::string::npos);
}

TEST_CASE("Module::load takes a .pt state dict with safetensors' checks", "[torch_pt]") {
  for (std::string tag : {"113", "2"}) {
    std::string path = fixture("linear_" + tag + ".pt");
    torch_pt::File f = torch_pt::load(path);
    nn::Linear lin(4, 3);
    lin.load(path);
    CHECK(lin.weight.to_vector<double>() == f.at("weight").to_vector<double>());
    CHECK(lin.bias.to_vector<double>() == f.at("bias").to_vector<double>());

    nn::Linear narrow(4, 2);
    Tensor before = narrow.weight.clone();
    std::string e = error_of([&] { narrow.load(path); });
    CHECK(e.find("\"weight\" has shape [3, 4], the model expects [2, 4]") != std::string::npos);
    CHECK(e.find("nothing was loaded") != std::string::npos);
    CHECK(narrow.weight.to_vector<double>() == before.to_vector<double>());
    nn::Linear nobias(4, 3, {.bias = false});
    CHECK(error_of([&] { nobias.load(path); }).find("unexpected \"bias\"") != std::string::npos);
    nn::BatchNorm1d bn(3);
    e = error_of([&] { bn.load(path); });
    CHECK(e.find("missing \"running_mean\"") != std::string::npos);
    CHECK(e.find("unexpected \"weight\"") == std::string::npos);  // weight [3, 4] is a shape mismatch
  }
  nn::Linear lin(3, 2);
  std::string e = error_of([&] { lin.load(fixture("nested_113.pt")); });
  CHECK(e.find("not a state dict") != std::string::npos);
  CHECK(e.find("\"epoch\" (int)") != std::string::npos);
  CHECK(error_of([&] { lin.load("/nonexistent/w.pth"); }).find("torch_pt: cannot open /nonexistent/w.pth") !=
        std::string::npos);
}

TEST_CASE("torch_pt refuses the legacy format, TorchScript, complex tensors and code", "[torch_pt]") {
  for (std::string tag : {"113", "2"}) {
    std::string e = error_of([&] { torch_pt::load(fixture("legacy_" + tag + ".pt")); });
    CHECK(e.find("legacy (pre-1.6, non-zip) format") != std::string::npos);
    CHECK(e.find("_use_new_zipfile_serialization=True") != std::string::npos);
    e = error_of([&] { torch_pt::load(fixture("script_" + tag + ".pt")); });
    CHECK(e.find("TorchScript archive (torch.jit.save)") != std::string::npos);
    e = error_of([&] { torch_pt::load(fixture("complex_" + tag + ".pt")); });
    CHECK(e.find("torch.ComplexFloatStorage: reel has no dtype") != std::string::npos);
    e = error_of([&] { torch_pt::load(fixture("evil_" + tag + ".pt")); });
    CHECK(e.find("refused global 'posix.system'") != std::string::npos);
    CHECK(e.find("nothing was called") != std::string::npos);
  }
  CHECK(error_of([] { torch_pt::load(REEL_SOURCE_DIR); }).find("a directory, not a regular file") !=
        std::string::npos);
}

TEST_CASE("torch_pt: every truncation and every flipped byte of a real file is an Error", "[torch_pt]") {
  for (std::string name : {"linear_113.pt", "views_2.pt"}) {
    std::vector<uint8_t> bytes = read_file(fixture(name));
    REQUIRE(bytes.size() > 1000);
    for (size_t n = 0; n < bytes.size(); ++n)
      CHECK_THROWS_AS(torch_pt::parse(bytes.data(), n, "cut"), Error);
    // a flipped byte is refused (CRC, structure) or, in the zip's unchecked fields, harmless
    for (size_t i = 0; i < bytes.size(); i += 3) {
      std::vector<uint8_t> b = bytes;
      b[i] ^= 0x5a;
      try {
        torch_pt::File f = torch_pt::parse(b.data(), b.size(), "flipped");
        CHECK(f.tensors.size() == torch_pt::parse(bytes.data(), bytes.size()).tensors.size());
      } catch (const Error&) {
      }
    }
  }
}

// torchvision's ResNets as torch.save wrote their state dicts (test/models/run.sh writes
// them with Debian's PyTorch 1.13 and, given REEL_TORCH2_PYTHON, with PyTorch 2.x):
// every tensor equals the safetensors copy bit for bit, and the models load them and
// give torchvision's outputs.
TEST_CASE("torchvision's ResNets load from .pt and match", "[.][torchvision]") {
  const char* dir = std::getenv("REEL_TORCHVISION_DIR");
  REQUIRE(dir != nullptr);
  for (std::string name : {"resnet18", "resnet50"}) {
    INFO(name);
    std::string base = std::string(dir) + "/" + name;
    torch_pt::File pt = torch_pt::load(base + ".pt");
    safetensors::File st = safetensors::load(base + ".safetensors");
    REQUIRE(pt.tensors.size() == st.tensors.size());
    CHECK(pt.values.empty());
    for (size_t i = 0; i < st.tensors.size(); ++i) {
      const auto& [n, want] = st.tensors[i];
      INFO(n);
      CHECK(pt.tensors[i].first == n);
      const Tensor& got = pt.at(n);
      REQUIRE(got.dtype() == want.dtype());
      REQUIRE(got.shape() == want.shape());
      Tensor c = got.contiguous();
      CHECK(std::memcmp(c.data_ptr(), want.data_ptr(), size_t(want.numel()) * want.element_size()) == 0);
    }
    auto net = name == "resnet18" ? nn::models::resnet18({.num_classes = 10}) : nn::models::resnet50({.num_classes = 10});
    net->load(base + ".pt");  // strict: every name and shape matches
    net->eval();
    safetensors::File ref = safetensors::load(base + ".ref.safetensors");
    NoGradGuard no_grad;
    Tensor y = (*net)(ref.at("input"));
    CHECK(sub(y, ref.at("logits")).abs().max().item<double>() < 2e-5 * ref.at("logits").abs().max().item<double>());
  }
}
