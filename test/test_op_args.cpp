// Typed op records: what each op keeps on its tape entry, read by name (autograd/op_args.h).
#include <catch2/catch.hpp>

#include <reel/reel.h>

using namespace reel;

TEST_CASE("conv2d keeps its ConvParams on the tape entry, read by name", "[op_args]") {
  Tensor x = randn({1, 3, 8, 8}).requires_grad_();
  Tensor w = randn({4, 3, 3, 3}).requires_grad_();
  Tensor y = conv2d(x, w, {}, {.stride = {2, 1}, .padding = {1, 0}, .dilation = {1, 2}});
  const Node& n = *y.grad_fn();
  const ConvParams& p = n.args<ConvParams>();
  CHECK(p.stride[0] == 2);
  CHECK(p.stride[1] == 1);
  CHECK(p.padding[0] == 1);
  CHECK(p.padding[1] == 0);
  CHECK(p.dilation[1] == 2);
  CHECK(p.groups == 1);
  CHECK(n.args_if<ConvParams>() == &p);
  CHECK(n.args_if<SoftmaxArgs>() == nullptr);
  CHECK(std::string(n.args_name()) == "ConvParams");
  CHECK(n.args_str() == "stride=[2, 1] padding=[1, 0] dilation=[1, 2] groups=1");
  CHECK(n.describe().find(" stride=[2, 1] padding=[1, 0] dilation=[1, 2] groups=1 at ") != std::string::npos);
  y.sum().backward();  // the rule reads them back
  CHECK(x.grad().defined());
}

TEST_CASE("reading an op's arguments as another type throws, naming the op and both types", "[op_args]") {
  Tensor x = randn({1, 3, 8, 8}).requires_grad_();
  Tensor w = randn({4, 3, 3, 3}).requires_grad_();
  Tensor y = conv2d(x, w, {});
  try {
    (void)y.grad_fn()->args<SoftmaxArgs>();
    FAIL("no throw");
  } catch (const Error& e) {
    std::string m = e.what();
    CHECK(m.find("conv2d") != std::string::npos);
    CHECK(m.find("ConvParams") != std::string::npos);
    CHECK(m.find("SoftmaxArgs") != std::string::npos);
  }
  Tensor z = x * x;  // mul of two tensors keeps nothing
  CHECK(z.grad_fn()->args_str().empty());
  CHECK(std::string(z.grad_fn()->args_name()).empty());
  CHECK_THROWS_AS(z.grad_fn()->args<ConvParams>(), Error);
}

TEST_CASE("OpArgs holds a value of one type, copies it, and prints it by field name", "[op_args]") {
  OpArgs a;
  CHECK(a.empty());
  CHECK(a.str().empty());
  a.set(ConvParams{.stride = {3, 3}, .groups = 2});
  OpArgs b = a;
  REQUIRE(b.get_if<ConvParams>() != nullptr);
  CHECK(b.get<ConvParams>().stride[0] == 3);
  CHECK(b.get<ConvParams>().groups == 2);
  CHECK_THROWS_AS(b.get<PoolArgs>(), Error);
  b.set(ReduceArgs{.dims = {0, 2}});
  CHECK(b.str() == "dims=[0, 2]");
  b.set(ActivationArgs{.kind = UnaryOp::softplus, .a = 2, .b = 1e-05});
  CHECK(b.str() == "kind=softplus a=2 b=1e-05");
  CHECK(a.holds<ConvParams>());  // a kept its own copy
}

TEST_CASE("an op hook reads an op's arguments, recorded or not", "[op_args][debug]") {
  std::vector<std::string> seen;
  std::vector<int64_t> strides;
  debug::HookHandle h = debug::add_op_hook([&](const debug::OpRecord& r) {
    if (r.phase != debug::Phase::forward || std::string_view(r.op) != "conv2d") return;
    seen.push_back(r.args.str());
    if (const ConvParams* p = r.args.get_if<ConvParams>()) strides.push_back(p->stride[0]);
    if (r.node) CHECK(r.node->args<ConvParams>().stride[0] == r.args.get<ConvParams>().stride[0]);
  });
  Tensor x = randn({1, 3, 8, 8});
  Tensor w = randn({4, 3, 3, 3});
  {
    NoGradGuard guard;
    (void)conv2d(x, w, {}, {.stride = {2, 2}});  // no tape entry: the hook still sees the arguments
  }
  (void)conv2d(x, w.detach().requires_grad_(), {}, {.stride = {1, 1}, .padding = {1, 1}});
  h.remove();
  REQUIRE(seen.size() == 2);
  CHECK(seen[0] == "stride=[2, 2] padding=[0, 0] dilation=[1, 1] groups=1");
  CHECK(seen[1] == "stride=[1, 1] padding=[1, 1] dilation=[1, 1] groups=1");
  CHECK(strides == std::vector<int64_t>{2, 1});
}

TEST_CASE("each op family keeps its arguments by name", "[op_args]") {
  Tensor x = randn({2, 3, 6, 6}).requires_grad_();
  auto args_of = [](const Tensor& t) { return t.grad_fn()->args_str(); };
  CHECK(args_of(softmax(x, -1)) == "dim=3 log=false");
  CHECK(args_of(log_softmax(x, 1)) == "dim=1 log=true");
  CHECK(args_of(max_pool2d(x, {.kernel = {2, 2}, .stride = {2, 2}})) ==
        "kernel=[2, 2] stride=[2, 2] padding=[0, 0] count_include_pad=true ceil_mode=false");
  CHECK(args_of(avg_pool2d(x, {.kernel = {4, 4}, .stride = {4, 4}, .ceil_mode = true})) ==
        "kernel=[4, 4] stride=[4, 4] padding=[0, 0] count_include_pad=true ceil_mode=true");
  CHECK(args_of(x.transpose(1, -1)) == "dim0=1 dim1=3");
  CHECK(args_of(x.permute({0, 2, 3, 1})) == "order=[0, 2, 3, 1]");
  CHECK(args_of(x.slice(2, 1, 5, 2)) == "dim=2 start=1 step=2");
  CHECK(args_of(cat({x, x}, 1)) == "dim=1");
  CHECK(args_of(x.sum({3, 1})) == "dims=[1, 3]");
  CHECK(args_of(leaky_relu(x, 0.2)) == "slope=0.2");
  CHECK(args_of(clamp(x, -1.0, 2.0)) == "low=-1 high=2");
  CHECK(args_of(pow(x, 3.0)) == "exponent=3");
  CHECK(args_of(x * 2.5) == "scale=2.5");
  CHECK(args_of(gelu(x, "tanh")) == "kind=gelu_tanh a=0 b=0");
  CHECK(args_of(softplus(x, 2, 10)) == "kind=softplus a=2 b=10");
  CHECK(args_of(cumsum(x, 2)) == "dim=2 reverse=false");
  CHECK(args_of(layer_norm(x, {6}, {}, {}, 1e-3)) == "lead=3 eps=0.001");
  Tensor logits = randn({4, 5}).requires_grad_();
  CHECK(args_of(cross_entropy(logits, tensor({1, 0, 4, 2}).to(DType::i64), {.reduction = Reduction::none})) ==
        "label_smoothing=0 ignore_index=-100");

  // the backward rules read them back: gradients flow through each
  Tensor y = softmax(x, -1).sum() + max_pool2d(x, {.kernel = {2, 2}}).sum() + x.permute({0, 2, 3, 1}).sum() +
             x.slice(2, 1, 5, 2).sum() + x.sum({3, 1}).sum() + layer_norm(x, {6}, {}, {}, 1e-3).sum();
  y.backward();
  CHECK(x.grad().defined());
}

TEST_CASE("batch norm and the tape printer show the arguments kept", "[op_args][debug]") {
  Tensor x = randn({4, 3, 2, 2}).requires_grad_();
  Tensor rm = zeros({3}), rv = ones({3});
  Tensor y = batch_norm(x, {}, {}, rm, rv, true, 0.1, 1e-5);
  const BatchNormArgs& a = y.grad_fn()->args<BatchNormArgs>();
  CHECK(a.training);
  CHECK(a.eps == 1e-5);
  CHECK(a.pieces == 1);
  std::string table = debug::tape_str();
  CHECK(table.find(" args ") != std::string::npos);
  CHECK(table.find(" training=true eps=1e-05 pieces=1 ") != std::string::npos);
}

TEST_CASE("a multiply-accumulate counter reads conv2d's arguments from an op hook (docs/debugging.md)", "[op_args][debug]") {
  int64_t macs = 0;
  std::vector<std::string> lines;
  auto h = debug::add_op_hook([&](const debug::OpRecord& r) {
    if (r.phase != debug::Phase::forward) return;
    if (const ConvParams* p = r.args.get_if<ConvParams>()) {
      const Tensor& w = r.inputs[1];
      macs += r.outputs[0].numel() * w.size(1) * w.size(2) * w.size(3);
      lines.push_back(std::string(r.op) + " " + r.args.str());
      CHECK(p->groups == 1);
    }
  });
  nn::Conv2d conv(3, 8, 7, {.stride = 2, .padding = 3});
  {
    NoGradGuard guard;
    (void)conv(randn({1, 3, 16, 16}));
  }
  h.remove();
  CHECK(macs == 8 * 8 * 8 * 3 * 7 * 7);  // [1, 8, 8, 8] outputs, 3 x 7 x 7 taps each
  REQUIRE(lines.size() == 1);
  CHECK(lines[0] == "conv2d stride=[2, 2] padding=[3, 3] dilation=[1, 1] groups=1");
}
