// nn::ModuleList and nn::ModuleDict (PyTorch's names, order and printing), and the
// registration rule of nn/module.h: what is registered survives moves of the module,
// or is refused at registration with an Error naming it.
#include <catch2/catch.hpp>
#include <reel/reel.h>

#include <memory>
#include <string>
#include <vector>

using namespace reel;
using Catch::Matchers::Contains;

namespace {

std::vector<std::string> names(const nn::NamedTensors& v) {
  std::vector<std::string> out;
  for (auto& [n, t] : v) out.push_back(n);
  return out;
}

// Children kept in a std::vector member, registered one by one: the shape of the code
// that used to crash once the parent moved.
struct Tower : nn::Module {
  std::vector<nn::Linear> layers;
  explicit Tower(int depth) {
    for (int i = 0; i < depth; ++i) layers.emplace_back(3, 3);
    for (int i = 0; i < depth; ++i) register_module("l" + std::to_string(i), layers[size_t(i)]);
  }
  Tensor forward(const Tensor& x) override {
    Tensor y = x;
    for (nn::Linear& l : layers) y = l(y);
    return y;
  }
};

struct Blocks : nn::Module {
  nn::ModuleList blocks;
  nn::ModuleDict heads;
  explicit Blocks(int depth) {
    for (int i = 0; i < depth; ++i) blocks.push_back(nn::Linear(4, 4));
    heads.insert("cls", nn::Linear(4, 2));
    heads.insert("reg", nn::Linear(4, 1, {.bias = false}));
    register_module("blocks", blocks);
    register_module("heads", heads);
  }
  Tensor forward(const Tensor& x) override {
    Tensor y = x;
    for (nn::Module& b : blocks) y = relu(b(y));
    return heads["cls"](y);
  }
};

}  // namespace

TEST_CASE("ModuleList: children by index, PyTorch's keys, iteration and printing", "[nn][containers]") {
  nn::ModuleList list{nn::Linear(4, 8), nn::ReLU()};
  nn::Linear& last = list.append(nn::Linear(8, 2));
  REQUIRE(list.size() == 3);
  CHECK(&list.at<nn::Linear>(2) == &last);
  CHECK(list[1].type_name() == "ReLU");
  CHECK_THROWS_WITH(list[3], Contains("ModuleList") && Contains("index 3"));
  CHECK_THROWS_WITH(list.at<nn::Linear>(1), Contains("ReLU"));
  std::vector<std::string> types;
  for (nn::Module& m : list) types.push_back(m.type_name());
  CHECK(types == std::vector<std::string>{"Linear", "ReLU", "Linear"});
  CHECK(names(list.named_parameters()) == std::vector<std::string>{"0.weight", "0.bias", "2.weight", "2.bias"});
  CHECK(list.str() ==
        "ModuleList(\n"
        "  (0): Linear(in_features=4, out_features=8, bias=True)\n"
        "  (1): ReLU()\n"
        "  (2): Linear(in_features=8, out_features=2, bias=True)\n"
        ")");
}

TEST_CASE("ModuleDict: children by key in insertion order, replacement, lookup errors", "[nn][containers]") {
  nn::ModuleDict d;
  d.insert("enc", nn::Linear(2, 3));
  d.insert("act", nn::Tanh());
  CHECK(d.keys() == std::vector<std::string>{"enc", "act"});
  CHECK(d.contains("enc"));
  CHECK_FALSE(d.contains("dec"));
  CHECK_THROWS_WITH(d["dec"], Contains("\"dec\"") && Contains("\"enc\", \"act\""));
  CHECK_THROWS_WITH(d.insert("a.b", nn::ReLU()), Contains("\"a.b\""));
  // d[key] = m replaces in place, keeping the order
  nn::Linear& enc = d.insert("enc", nn::Linear(2, 5, {.bias = false}));
  CHECK(&d.at<nn::Linear>("enc") == &enc);
  CHECK(d.size() == 2);
  std::vector<std::string> seen;
  for (auto& [key, m] : d) seen.push_back(key + "=" + m->type_name());
  CHECK(seen == std::vector<std::string>{"enc=Linear", "act=Tanh"});
  CHECK(names(d.named_parameters()) == std::vector<std::string>{"enc.weight"});
  CHECK(d.str() ==
        "ModuleDict(\n"
        "  (enc): Linear(in_features=2, out_features=5, bias=False)\n"
        "  (act): Tanh()\n"
        ")");
}

TEST_CASE("containers in a model: state_dict keys, moves, checkpoints round trip", "[nn][containers]") {
  Blocks a(3);
  CHECK(names(a.state_dict()) ==
        std::vector<std::string>{"blocks.0.weight", "blocks.0.bias", "blocks.1.weight", "blocks.1.bias",
                                 "blocks.2.weight", "blocks.2.bias", "heads.cls.weight", "heads.cls.bias",
                                 "heads.reg.weight"});
  Tensor x = randn({5, 4});
  std::vector<float> before = a(x).to_vector<float>();
  // moved whole, then into a Sequential: every registration follows
  nn::Sequential seq;
  Blocks& moved = seq.add(std::move(a));
  CHECK(moved(x).to_vector<float>() == before);
  CHECK(names(seq.named_parameters()).front() == "0.blocks.0.weight");
  std::string path = "test_containers_roundtrip.safetensors";
  seq.save(path);
  nn::Sequential other;
  other.add(Blocks(3));
  other.load(path);
  CHECK(other.at<Blocks>(0)(x).to_vector<float>() == before);
  std::remove(path.c_str());
}

TEST_CASE("a std::vector of layers registered as children survives moves of the parent", "[nn][containers]") {
  Tower t(3);
  Tensor x = randn({2, 3});
  std::vector<float> before = t(x).to_vector<float>();
  Tower t2 = std::move(t);
  CHECK(names(t2.named_parameters()).size() == 6);
  nn::Sequential seq;
  seq.add(std::move(t2));  // was a SIGSEGV: the children were found by offset
  CHECK(seq(x).to_vector<float>() == before);
  CHECK(seq.parameters().size() == 6);
  seq.to(DType::f64);
  CHECK(seq.parameters()[5].dtype() == DType::f64);
  // the vector reallocating moves its layers: the parent follows them
  Tower& moved = seq.at<Tower>(0);
  moved.layers.reserve(64);
  CHECK(moved.named_children()[2].second == &moved.layers[2]);
  CHECK(seq(x.to(DType::f64)).to_vector<float>().size() == before.size());
  // an element erased while registered: a clear error, not a dangling pointer
  moved.layers.pop_back();
  CHECK_THROWS_WITH(seq.parameters(), Contains("Tower") && Contains("\"l2\"") && Contains("destroyed"));
}

TEST_CASE("registration refuses what could not survive a move, naming it", "[nn][containers]") {
  // The local check compares stack addresses: it sees a local of a constructor that has
  // its own frame (not inlined into the frame that holds the module), as here.
  struct LocalTensor : nn::Module {
    [[gnu::noinline]] LocalTensor() {
      Tensor w = zeros({2});
      register_parameter("w", w);  // w dies at the end of the constructor
    }
  };
  CHECK_THROWS_WITH(LocalTensor(), Contains("LocalTensor") && Contains("\"w\"") && Contains("local"));
  CHECK_THROWS_WITH(std::make_unique<LocalTensor>(), Contains("local"));
  struct LocalChild : nn::Module {
    [[gnu::noinline]] LocalChild() {
      nn::Linear l(2, 2);
      register_module("l", l);
    }
  };
  CHECK_THROWS_WITH(LocalChild(), Contains("LocalChild") && Contains("\"l\"") && Contains("local"));
  // tensors kept in a std::vector: fine until the module is put where it will move
  struct VectorTensors : nn::Module {
    std::vector<Tensor> ws{zeros({2}), zeros({3})};
    VectorTensors() {
      register_parameter("w0", ws[0]);
      register_parameter("w1", ws[1]);
    }
  };
  VectorTensors v;
  CHECK(v.parameters().size() == 2);
  nn::ModuleList list;
  CHECK_THROWS_WITH(list.push_back(std::move(v)),
                    Contains("VectorTensors") && Contains("\"w0\"") && Contains("not a member"));
  struct Holder : nn::Module {
    VectorTensors inner;
    Holder() { register_module("inner", inner); }
  };
  CHECK_THROWS_WITH(Holder(), Contains("\"w0\"") && Contains("not a member"));
  // one parent per module
  struct Twice : nn::Module {
    nn::Linear l{2, 2};
    nn::ModuleList a, b;
    Twice() {
      register_module("l", l);
      register_module("again", l);
    }
  };
  CHECK_THROWS_WITH(Twice(), Contains("already registered"));
}

TEST_CASE("a member child assigned a new layer stays registered", "[nn][containers]") {
  struct Net : nn::Module {
    nn::Linear fc{2, 3};
    Net() { register_module("fc", fc); }
  };
  Net n;
  n.fc = nn::Linear(2, 7);
  CHECK(n.named_parameters()[0].second.shape() == Dims{7, 2});
  Net m = std::move(n);
  m.fc = nn::Linear(2, 5);
  CHECK(m.named_parameters()[0].second.shape() == Dims{5, 2});
  Net k;
  k = std::move(m);
  CHECK(k.named_children()[0].second == &k.fc);
  CHECK(k.named_parameters()[0].second.shape() == Dims{5, 2});
}
