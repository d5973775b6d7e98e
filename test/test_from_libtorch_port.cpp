// What porting fifteen libtorch tutorials found (issue 41 point 4): libtorch's by-value
// forward, save("model.pt") and load("model.pt"), libtorch's dataset pipeline, the empty
// Sequential holder, operator<< for modules, rand_like / randn_like / new_zeros,
// REEL_CHECK, InferenceMode, detach_() and the recurrent layers' tuple forms.
#include <catch2/catch.hpp>
#include <reel/reel.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <tuple>

#include "gradcheck.h"

using namespace reel;
using reel::test::error_message;

namespace port_test {

bool has(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }
// one shape and the same values, exactly
bool same(const Tensor& a, const Tensor& b) {
  return a.shape() == b.shape() &&
         a.to(DType::f64).contiguous().to_vector<double>() == b.to(DType::f64).contiguous().to_vector<double>();
}

// ---- modules written with libtorch's `Tensor forward(Tensor x)`
struct ByValue : nn::Module {
  nn::Linear fc{3, 2};
  ByValue() { register_module("fc", fc); }
  Tensor forward(Tensor x) { return fc(x) * 2.0; }
};

struct ResidualBlock : nn::Module {
  nn::Linear fc{3, 3};
  ResidualBlock() { register_module("fc", fc); }
  Tensor forward(Tensor x) {
    Tensor out = fc(x);
    return out + x;
  }
};

template <typename Block>
struct ResNet : nn::Module {
  Block block;
  ResNet() { register_module("block", block); }
  Tensor forward(Tensor x) { return block(x) + 1.0; }
};

struct NoForward : nn::Module {};
template <typename T>
struct Holder : nn::Module {};

// both forms declared: the by-value one runs (as it would in libtorch, where it is the only one)
struct Both : nn::Module {
  Tensor forward(const Tensor& x) override { return x * 3.0; }
  Tensor forward(Tensor x) { return x * 5.0; }
};

// a subclass of one of reel's layers, written the libtorch way
struct ZeroLinear : nn::Linear {
  ZeroLinear() : nn::Linear(3, 2) {}
  Tensor forward(Tensor x) { return nn::Linear::forward(x) * 0.0; }
};

// ---- libtorch's ResidualBlock with its optional downsampler, `Sequential downsample = nullptr`
struct DownBlock : nn::Module {
  nn::Linear fc{3, 2};
  nn::Sequential downsample;
  explicit DownBlock(nn::Sequential ds = nullptr) : downsample(std::move(ds)) {
    register_module("fc", fc);
    if (downsample) register_module("downsample", downsample);
  }
  Tensor forward(Tensor x) {
    Tensor residual = downsample ? downsample(x) : x.narrow(1, 0, 2);
    return fc(x) + residual;
  }
};

// ---- a dataset written as libtorch's Dataset<Self>
struct Squares : data::datasets::Dataset<Squares> {
  explicit Squares(size_t n) : n(n) {}
  data::Example get(size_t i) override {
    ++gets;
    double v = double(i);
    return {full({1, 2, 2}, v * v), scalar_tensor(double(i % 3), {.dtype = DType::i64})};
  }
  std::optional<size_t> size() const override { return n; }
  size_t n;
  int gets = 0;
};
struct Unsized : data::datasets::Dataset<Unsized> {
  data::Example get(size_t) override { return {zeros({1}), zeros({})}; }
  std::optional<size_t> size() const override { return std::nullopt; }
};
struct AddOne : data::transforms::TensorTransform<> {
  Tensor operator()(Tensor input) override { return input + 1.0; }
};

int check_positive(const Tensor& x) {
  REEL_CHECK(x.min().item<double>() > 0, "expected positive values, got a minimum of ", x.min().item<double>());
  return 1;
}
int check_plain(int n) {
  REEL_CHECK(n % 2 == 0);
  return n;
}

// what f writes on stderr
template <typename F>
std::string stderr_of(F&& f) {
  std::fflush(stderr);
  std::string path = (std::filesystem::temp_directory_path() / ("reel_stderr_" + std::to_string(getpid()))).string();
  int saved = ::dup(2);
  std::FILE* sink = std::fopen(path.c_str(), "w");
  ::dup2(::fileno(sink), 2);
  f();
  std::fflush(stderr);
  ::dup2(saved, 2);
  ::close(saved);
  std::fclose(sink);
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  std::filesystem::remove(path);
  return text.str();
}

std::string temp(const std::string& name) {
  return (std::filesystem::temp_directory_path() / ("reel_port_" + std::to_string(getpid()) + "_" + name)).string();
}
std::string fixture(const std::string& name) { return std::string(REEL_SOURCE_DIR) + "/test/reference/torch_pt/" + name; }

}  // namespace port_test

using namespace port_test;

TEST_CASE("a module declaring libtorch's by-value forward is called by net(x)", "[libtorch][port]") {
  manual_seed(1);
  Tensor x = randn({4, 3});
  ByValue net;
  Tensor y = net(x);
  CHECK(same(y, net.fc(x) * 2.0));
  y.sum().backward();
  CHECK(net.fc.weight.grad().defined());
  CHECK(same(net.fc.bias.grad(), full({2}, 8.0)));  // d(sum(2 (W x + b)))/db = 2 per row, 4 rows

  ResNet<ResidualBlock> resnet;
  CHECK(same(resnet(x), resnet.block.fc(x) + x + 1.0));
  CHECK(resnet.type_name() == "ResNet<ResidualBlock>");
  CHECK(has(resnet.str(), "ResNet<ResidualBlock>(\n  (block): ResidualBlock("));

  Both both;
  CHECK(same(both(x), x * 5.0));
  ZeroLinear zero;
  CHECK(same(zero(x), zeros({4, 2})));

  // through a Sequential, with hooks, and through forward() named on the module itself
  nn::Sequential seq{ByValue(), nn::ReLU()};
  CHECK(same(seq(x), relu(seq.at<ByValue>(0).fc(x) * 2.0)));
  int hooked = 0;
  net.register_forward_hook([&](nn::Module&, const Tensor&, const Tensor&) { ++hooked; });
  CHECK(same(net(x), net.fc(x) * 2.0));
  CHECK(hooked == 1);
  CHECK(same(net.forward(x), net.fc(x) * 2.0));
}

TEST_CASE("a module without forward names its own class, templates included", "[libtorch][port][errors]") {
  Tensor x = zeros({2, 3});
  NoForward plain;
  std::string e = error_message([&] { plain(x); });
  CHECK(e.rfind("NoForward: forward is not defined for this module", 0) == 0);
  CHECK(has(e, "Tensor forward(Tensor x)"));
  Holder<NoForward> held;
  CHECK(error_message([&] { held(x); }).rfind("Holder<NoForward>: forward is not defined", 0) == 0);
  CHECK(held.type_name() == "Holder<NoForward>");
  CHECK(nn::Sequential().type_name() == "Sequential");
  struct Local : nn::Module {};  // a class local to a function: "C_A_T_C_H_T_E_S_T_2()::Local"
  CHECK(Local().type_name() == "Local");
  CHECK(Holder<Holder<Local>>().type_name() == "Holder<Holder<Local>>");
}

TEST_CASE("save to a .pt name writes safetensors, says so, and load reads it back", "[libtorch][port][files]") {
  manual_seed(2);
  nn::Linear a(4, 3), b(4, 3);
  std::string pt = temp("model.pt"), pth = temp("model.pth");
  std::string said = stderr_of([&] {
    a.save(pt);
    a.save(pth);
  });
  // once per process: either this test's first save said it, or an earlier one in this process did
  CHECK(std::count(said.begin(), said.end(), '\n') <= 1);
  if (!said.empty()) {
    CHECK(has(said, "model.pt is written in the safetensors format, not torch.save's"));
    CHECK(has(said, "safetensors.torch.load_file"));
  }
  b.load(pt);
  CHECK(same(b.weight, a.weight));
  CHECK(same(b.bias, a.bias));
  nn::Linear c(4, 3);
  c.load(pth);
  CHECK(same(c.weight, a.weight));
  CHECK(safetensors::load(pt).tensors.size() == 2);  // it is safetensors
  CHECK(stderr_of([&] { a.save(temp("model.safetensors")); }).empty());
  for (const std::string& p : {pt, pth, temp("model.safetensors")}) std::filesystem::remove(p);
}

TEST_CASE("load reads a file's format from its bytes, not its name", "[libtorch][port][files]") {
  // a torch.save zip under a safetensors name, and safetensors under a torch name
  std::string zip_named_st = temp("linear.safetensors");
  std::filesystem::copy_file(fixture("linear_113.pt"), zip_named_st, std::filesystem::copy_options::overwrite_existing);
  nn::Linear lin(4, 3);
  lin.load(zip_named_st);
  torch_pt::File f = torch_pt::load(fixture("linear_113.pt"));
  CHECK(same(lin.weight, f.at("weight")));

  std::string st_named_bin = temp("weights.bin");
  nn::Linear src(4, 3), dst(4, 3);
  src.save(st_named_bin);
  dst.load(st_named_bin);
  CHECK(same(dst.weight, src.weight));

  // legacy torch.save under any name: refused with the way to convert it
  std::string legacy_named_st = temp("legacy.safetensors");
  std::filesystem::copy_file(fixture("legacy_113.pt"), legacy_named_st, std::filesystem::copy_options::overwrite_existing);
  std::string e = error_message([&] { lin.load(legacy_named_st); });
  CHECK(has(e, "legacy (pre-1.6, non-zip) format"));
  CHECK(has(e, "torch.save(torch.load(old), new)"));

  // neither: the reader the name suggests says what is wrong
  std::string junk_pt = temp("junk.pt"), junk_st = temp("junk.safetensors");
  for (const std::string& p : {junk_pt, junk_st}) std::ofstream(p) << "not weights at all";
  CHECK(has(error_message([&] { lin.load(junk_pt); }), "not a torch.save file"));
  CHECK(has(error_message([&] { lin.load(junk_st); }), "safetensors"));
  CHECK(has(error_message([&] { lin.load("/nonexistent/w.safetensors"); }), "safetensors: cannot open"));

  using formats::Format;
  const uint8_t zip[] = {'P', 'K', 3, 4, 0, 0, 0, 0, 0}, pickle[] = {0x80, 2, ']', 'q', 0};
  const uint8_t st[] = {2, 0, 0, 0, 0, 0, 0, 0, '{', '}'}, short_st[] = {200, 0, 0, 0, 0, 0, 0, 0, '{', '}'};
  CHECK(formats::detect(zip, 9, 100) == Format::torch_zip);
  CHECK(formats::detect(pickle, 5, 5) == Format::torch_legacy);
  CHECK(formats::detect(st, 10, 10) == Format::safetensors);
  CHECK(formats::detect(short_st, 10, 10) == Format::unknown);  // a header longer than the file
  CHECK(formats::detect(st, 3, 3) == Format::unknown);
  const uint8_t st384[] = {0x80, 1, 0, 0, 0, 0, 0, 0, '{'};  // a 384-byte header opens like a pickle
  CHECK(formats::detect(st384, 9, 8 + 384) == Format::safetensors);
  CHECK(formats::detect(st384, 9, 100) == Format::torch_legacy);  // too short for that header
  CHECK(std::string(formats::format_name(Format::torch_zip)) == "torch.save zip archive");
  CHECK(formats::detect_file(zip_named_st) == Format::torch_zip);
  CHECK(formats::detect_file(st_named_bin) == Format::safetensors);
  CHECK(!formats::detect_file("/nonexistent/w.pt"));
  for (const std::string& p : {zip_named_st, st_named_bin, legacy_named_st, junk_pt, junk_st}) std::filesystem::remove(p);
}

TEST_CASE("libtorch's dataset pipeline: Dataset<Self>, map, Normalize, Stack, get_batch", "[libtorch][port][data]") {
  auto ds = Squares(6).map(data::transforms::Normalize<>(1.0, 2.0)).map(data::transforms::Stack<>());
  CHECK(ds.size() == 6);
  data::Example one = ds.get(3);
  CHECK(one.data.shape() == Dims{1, 2, 2});
  CHECK(same(one.data, full({1, 2, 2}, (9.0 - 1.0) / 2.0)));
  std::vector<int64_t> idx{5, 0, 2};
  data::Example b = ds.get_batch(idx);
  CHECK(b.data.shape() == Dims{3, 1, 2, 2});
  CHECK(b.target.to_vector<int64_t>() == std::vector<int64_t>{2, 0, 2});
  CHECK(b.data.select(1, 0).select(1, 0).select(1, 0).to_vector<float>() == std::vector<float>{12, -0.5f, 1.5f});

  data::DataLoader loader(ds, {.batch_size = 4});
  std::vector<int64_t> sizes;
  double total = 0;
  for (auto& batch : loader) {
    sizes.push_back(batch.data.size(0));
    total += batch.data.sum().item<double>();
  }
  CHECK(sizes == std::vector<int64_t>{4, 2});
  CHECK(total == Approx(4 * ((0 + 1 + 4 + 9 + 16 + 25) - 6) / 2.0));

  // libtorch's get_batch on an unstacked dataset: examples, one get each, transformed
  auto mapped = Squares(4).map(AddOne());
  std::vector<size_t> at{1, 3};
  std::vector<data::Example> examples = mapped.get_batch(at);
  REQUIRE(examples.size() == 2);
  CHECK(same(examples[1].data, full({1, 2, 2}, 10.0)));
  CHECK(mapped.dataset().gets == 2);
  CHECK(mapped.size() == std::optional<size_t>(4));

  // TensorLambda, Lambda, a map of a named dataset (copied), and per-channel Normalize
  Squares named(3);
  auto lambdas = named.map(data::transforms::TensorLambda<>([](Tensor x) { return x * 10.0; }))
                     .map(data::transforms::Lambda<data::Example>([](data::Example e) {
                       e.data = e.data + 1.0;
                       return e;
                     }));
  data::Example l = lambdas.get(2);
  CHECK(same(l.data, full({1, 2, 2}, 41.0)));
  CHECK(l.target.item<int64_t>() == 2);
  CHECK(named.gets == 0);
  data::transforms::Normalize<> per_channel({1.0, 2.0}, {0.5, 4.0});
  Tensor img = ones({2, 1, 3});
  Tensor n = per_channel(img);
  CHECK(n.select(0, 0).to_vector<float>() == std::vector<float>{0, 0, 0});
  CHECK(n.select(0, 1).to_vector<float>() == std::vector<float>{-0.25f, -0.25f, -0.25f});
  CHECK(same(data::transforms::Normalize<>(2.0, 4.0)(full({5}, 6.0, {.dtype = DType::i64})), full({5}, 1.0)));
}

TEST_CASE("libtorch's dataset pipeline refuses what it cannot serve", "[libtorch][port][data][errors]") {
  auto ds = Squares(3).map(data::transforms::Stack<>());
  CHECK(error_message([&] { ds.get(3); }) == "Stack: index 3 is out of range for a dataset of 3 examples");
  std::vector<int64_t> bad{0, -1};
  CHECK(has(error_message([&] { ds.get_batch(bad); }), "Stack: index -1 is out of range"));
  auto unsized = Unsized().map(data::transforms::Stack<>());
  CHECK(has(error_message([&] { data::DataLoader loader(unsized, {.batch_size = 2}); }),
            "Stack: the dataset's size() is std::nullopt"));
  CHECK(error_message([] { data::transforms::Normalize<>({0.5, 0.5}, {1.0}); }) ==
        "Normalize: expected as many means as stddevs, at least one, got 2 and 1");
  CHECK(has(error_message([] { data::transforms::Normalize<>(0.5, 0.0); }), "expected every stddev nonzero"));
  data::transforms::Normalize<> rgb({0.1, 0.2, 0.3}, {1.0, 1.0, 1.0});
  CHECK(error_message([&] { rgb(zeros({784})); }) ==
        "Normalize: 3 means and stddevs are one per channel of [C, H, W] data with C = 3; got data [784]");
  CHECK(has(error_message([&] { rgb(zeros({1, 28, 28})); }), "got data [1, 28, 28]"));
}

TEST_CASE("Sequential{nullptr}: libtorch's empty holder tests false until given modules", "[libtorch][port][nn]") {
  manual_seed(3);
  nn::Sequential none{nullptr};
  CHECK(!none);
  CHECK(nn::Sequential());
  CHECK(has(error_message([&] { none(zeros({1, 3})); }), "Sequential: called while null"));
  none = nn::Sequential(nn::Linear(3, 2));
  CHECK(none);
  CHECK(none(zeros({1, 3})).shape() == Dims{1, 2});
  nn::Sequential grows{nullptr};
  grows.add(nn::ReLU());
  CHECK(grows);

  Tensor x = randn({2, 3});
  DownBlock plain;
  CHECK(!plain.downsample);
  CHECK(plain.named_parameters().size() == 2);
  CHECK(same(plain(x), plain.fc(x) + x.narrow(1, 0, 2)));
  DownBlock down(nn::Sequential(nn::Linear(3, 2)));
  CHECK(down.named_parameters().size() == 4);
  CHECK(down.named_parameters()[2].first == "downsample.0.weight");
  CHECK(same(down(x), down.fc(x) + down.downsample(x)));
}

TEST_CASE("operator<< prints a module as str()", "[libtorch][port][nn]") {
  nn::Sequential seq{nn::Linear(3, 2), nn::ReLU()};
  std::ostringstream os;
  os << seq;
  CHECK(os.str() == seq.str());
  CHECK(has(os.str(), "(0): Linear(in_features=3, out_features=2, bias=True)"));
}

TEST_CASE("rand_like, randn_like and new_zeros take the tensor's shape, dtype and device", "[libtorch][port][random]") {
  Tensor t = zeros({2, 3}, {.dtype = DType::f64});
  manual_seed(4);
  Tensor a = randn_like(t);
  manual_seed(4);
  CHECK(same(a, randn({2, 3}, {.dtype = DType::f64})));
  Generator g(9), h(9);
  CHECK(same(rand_like(t, g), rand({2, 3}, h, {.dtype = DType::f64})));
  Tensor u = rand_like(t);
  CHECK(u.dtype() == DType::f64);
  CHECK(u.min().item<double>() >= 0);
  CHECK(u.max().item<double>() < 1);
  CHECK(randn_like(t, g).shape() == Dims{2, 3});

  Tensor z = t.new_zeros({4});
  CHECK(z.dtype() == DType::f64);
  CHECK(z.to_vector<double>() == std::vector<double>(4, 0.0));
  CHECK(t.new_ones({2}).to_vector<double>() == std::vector<double>{1, 1});
  CHECK(t.new_full({3}, 2.5).to_vector<double>() == std::vector<double>{2.5, 2.5, 2.5});
  CHECK(t.new_empty({1, 5}).shape() == Dims{1, 5});
  CHECK(!t.new_zeros({2}).requires_grad());
  CHECK(zeros({2}, {.dtype = DType::i64}).new_zeros({1}).dtype() == DType::i64);
  Tensor undefined;
  CHECK(has(error_message([&] { randn_like(undefined); }), "randn_like: the input is an undefined tensor"));
  CHECK(has(error_message([&] { rand_like(undefined); }), "rand_like: the input is an undefined tensor"));
  CHECK(has(error_message([&] { undefined.new_zeros({1}); }), "new_zeros: the input is an undefined tensor"));
}

TEST_CASE("REEL_CHECK throws Error naming the function, the message, the condition and the line",
          "[libtorch][port][errors]") {
  CHECK(check_positive(ones({2})) == 1);
  std::string e = error_message([] { check_positive(tensor({1.0, -2.0})); });
  CHECK(e.rfind("check_positive: expected positive values, got a minimum of -2; `x.min().item<double>() > 0` is false "
                "(at ", 0) == 0);
  CHECK(has(e, "test_from_libtorch_port.cpp:"));
  CHECK(check_plain(4) == 4);
  e = error_message([] { check_plain(3); });
  CHECK(e.rfind("check_plain: `n % 2 == 0` is false (at ", 0) == 0);
}

TEST_CASE("InferenceMode turns recording off for its scope, as NoGradGuard", "[libtorch][port][autograd]") {
  Tensor w = ones({2}, {.requires_grad = true});
  {
    InferenceMode guard;
    CHECK(!grad_enabled());
    CHECK(!(w * 2.0).requires_grad());
    {
      InferenceMode off(false);  // libtorch's InferenceMode(false): grad mode on again
      CHECK(grad_enabled());
      CHECK((w * 2.0).requires_grad());
    }
    CHECK(!grad_enabled());
  }
  CHECK(grad_enabled());
  CHECK((w * 2.0).requires_grad());
}

TEST_CASE("detach_ takes a tensor off the tape in place", "[libtorch][port][autograd]") {
  Tensor x = tensor({1.0, 2.0}).requires_grad_();
  Tensor y = x * 3.0;
  Tensor same = y;  // another handle on the same tensor
  CHECK(y.grad_fn() != nullptr);
  Tensor& r = y.detach_();
  CHECK(&r == &y);
  CHECK(!y.requires_grad());
  CHECK(y.is_leaf());
  CHECK(!same.requires_grad());
  CHECK(same.grad_fn() == nullptr);
  CHECK(y.to_vector<float>() == std::vector<float>{3, 6});
  Tensor z = y * x;  // y is now a constant
  z.sum().backward();
  CHECK(x.grad().to_vector<float>() == std::vector<float>{3, 6});
  Tensor undefined;
  CHECK(has(error_message([&] { undefined.detach_(); }), "detach_: the tensor is undefined"));
  Tensor view = (x * 1.0).narrow(0, 0, 1);  // as libtorch: a view is detached with detach()
  CHECK(has(error_message([&] { view.detach_(); }), "cannot be detached in place; use detach()"));
}

TEST_CASE("recurrent layers give libtorch's tuples beside reel's structs", "[libtorch][port][rnn]") {
  manual_seed(5);
  nn::LSTM lstm(3, 4, {.num_layers = 2});
  nn::GRU gru(3, 4);
  Tensor x = randn({5, 2, 3}), h0 = randn({2, 2, 4}), c0 = randn({2, 2, 4});
  nn::LSTMOutput s = lstm(x, {h0, c0});
  auto t = lstm.forward(x, std::make_tuple(h0, c0));  // libtorch's spelling, libtorch's result
  static_assert(std::is_same_v<decltype(t), std::tuple<Tensor, std::tuple<Tensor, Tensor>>>);
  CHECK(same(std::get<0>(t), s.output));
  CHECK(same(std::get<0>(std::get<1>(t)), s.state.h));
  CHECK(same(std::get<1>(std::get<1>(t)), s.state.c));
  auto called = lstm(x, std::make_tuple(h0, c0));
  CHECK(same(std::get<1>(std::get<1>(called)), s.state.c));
  std::tuple<Tensor, std::tuple<Tensor, Tensor>> converted = s;
  CHECK(same(std::get<0>(std::get<1>(converted)), s.state.h));

  nn::RNNOutput g = gru(x, h0.narrow(0, 0, 1));
  std::tuple<Tensor, Tensor> gt = gru(x, h0.narrow(0, 0, 1));
  CHECK(same(std::get<0>(gt), g.output));
  CHECK(same(std::get<1>(gt), g.h_n));

  nn::LSTMCell cell(3, 4);
  Tensor hc = randn({2, 4}), cc = randn({2, 4});
  nn::LSTMState one = cell(x.select(0, 0), {hc, cc});
  auto ct = cell.forward(x.select(0, 0), std::make_tuple(hc, cc));
  static_assert(std::is_same_v<decltype(ct), std::tuple<Tensor, Tensor>>);
  CHECK(same(std::get<0>(ct), one.h));
  CHECK(same(std::get<1>(cell(x.select(0, 0), std::make_tuple(hc, cc))), one.c));
}

TEST_CASE("the losses with written-out rules are autograd ops, named in nn::functional too", "[libtorch][port][loss]") {
  Tensor p = tensor({0.25, 0.5}), y = tensor({0.0, 1.0});
  CHECK(same(binary_cross_entropy(p, y), nn::functional::binary_cross_entropy(p, y)));
  CHECK(binary_cross_entropy(p, y).item<double>() == Approx(-(std::log(0.75) + std::log(0.5)) / 2));
  nn::KLDivOptions opt{.reduction = nn::KLDivReduction::sum};
  Tensor lp = log(tensor({0.5, 0.5})), q = tensor({0.25, 0.75});
  CHECK(kl_div(lp, q, opt).item<double>() ==
        Approx(0.25 * (std::log(0.25) - std::log(0.5)) + 0.75 * (std::log(0.75) - std::log(0.5))));
  CHECK(smooth_l1_loss(tensor({0.0, 3.0}), tensor({0.5, 0.0}), {.beta = 1.0}).item<double>() ==
        Approx((0.125 + 2.5) / 2));
}
