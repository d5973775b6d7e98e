// Debugging inside modules (nn/module_call.cpp, debug/): every tool names the line
// inside a submodule's forward() and the module path ("feat.fc"); the user's ops in
// forward() report their own lines, a reel layer's ops the line that called the layer;
// Range / record_function; module forward and backward hooks.
#include <catch2/catch.hpp>
#include <reel/reel.h>

#include <cmath>
#include <set>
#include <sstream>

using namespace reel;

namespace {

std::string at(int line) { return "test_debug_modules.cpp:" + std::to_string(line); }
bool has(const std::string& text, const std::string& what) { return text.find(what) != std::string::npos; }

// The two-level tree of the checks below: Net { feat: Feat { fc: Linear }, head: Linear }.
// The lines of the calls inside forward() are kept where the tests can read them.
int g_fc_line = 0, g_sqrt_line = 0, g_feat_line = 0, g_head_line = 0;

struct Feat : nn::Module {
  nn::Linear fc{4, 3};
  Feat() { register_module("fc", fc); }
  Tensor forward(const Tensor& x) override {
    g_fc_line = __LINE__ + 1;
    Tensor h = fc(x);
    g_sqrt_line = __LINE__ + 1;
    return reel::sqrt(h);
  }
};

struct Net : nn::Module {
  Feat feat;
  nn::Linear head{3, 2};
  Net() {
    register_module("feat", feat);
    register_module("head", head);
  }
  Tensor forward(const Tensor& x) override {
    g_feat_line = __LINE__ + 1;
    Tensor f = feat(x);
    g_head_line = __LINE__ + 1;
    return head(f);
  }
};

// fc gives h = x W^T + b with W = 0.25 and b = 0: the sum of x's row over 4, so sqrt(h)
// is NaN for a negative row and has an infinite gradient for a zero row. head's weights
// are fixed too (-0.5), so the gradient reaching sqrt is -1 and its rule gives -inf
// whatever the random state before the test (it was the sign of random weights).
void set_weights(Net& net) {
  NoGradGuard no_grad;
  net.feat.fc.weight.fill_(0.25);
  net.feat.fc.bias.fill_(0.0);
  net.head.weight.fill_(-0.5);
}

}  // namespace

TEST_CASE("anomaly mode names the line inside the submodule's forward and its path", "[debug][modules]") {
  Net net;
  set_weights(net);
  Tensor x = tensor({{1, 2, 3, 4}, {0, 0, 0, 0}});  // row 1: h = 0, sqrt'(0) = inf
  SECTION("forward: the user's own op in Feat::forward") {
    debug::AnomalyMode anomaly;
    int call_line = __LINE__ + 1;
    REQUIRE_THROWS_WITH(net(-x), Catch::Contains("anomaly mode: sqrt gave NaN") &&
                                    Catch::Contains("/" + at(g_sqrt_line) + " in feat)") &&
                                    !Catch::Contains(at(call_line)));
  }
  SECTION("forward: a reel layer's op reports the line in forward() that called the layer") {
    {
      NoGradGuard no_grad;
      net.feat.fc.weight[0][1].fill_(NAN);  // h's column 0 is NaN
    }
    debug::AnomalyMode anomaly;
    REQUIRE_THROWS_WITH(net(x), Catch::Contains("anomaly mode: linear gave NaN") &&
                                    Catch::Contains("/" + at(g_fc_line) + " in feat.fc)"));
  }
  SECTION("backward: the rule of the op, the forward line and the module") {
    Tensor y = net(x);
    debug::AnomalyMode anomaly({.forward = false});
    REQUIRE_THROWS_WITH(y.sum().backward(), Catch::Contains("the backward rule of sqrt gave -inf") &&
                                                Catch::Contains("/" + at(g_sqrt_line) +
                                                                " in feat"));
  }
}

TEST_CASE("a shape error inside a submodule names the line in forward() and the path", "[debug][modules]") {
  Net net;
  Tensor x = ones({2, 5});  // fc wants 4 features
  REQUIRE_THROWS_WITH(net(x), Catch::Contains("Linear: expected input [*, 4], got [2, 5]") &&
                                  Catch::Contains("/" + at(g_fc_line) + " in feat.fc)"));
  // an op's own check, in an op called by the layer
  Net net2;
  {
    NoGradGuard no_grad;
    net2.head.weight = ones({2, 4}).requires_grad_();  // wrong in_features behind the Linear's back
    net2.head.in_features = 4;
  }
  Tensor ok = ones({2, 4});
  REQUIRE_THROWS_WITH(net2(ok), Catch::Contains("/" + at(g_head_line) + " in head)"));
}

TEST_CASE("the tape names the line inside forward() and the module path of each entry", "[debug][modules]") {
  Net net;
  set_weights(net);
  Tensor x = tensor({{1, 2, 3, 4}});
  size_t before = autograd::tape_size();
  int call_line = __LINE__ + 1;
  Tensor y = net(x);
  std::vector<Ref<Node>> entries = autograd::tape_entries();
  REQUIRE(entries.size() == before + 3);
  const Node& fc = *entries[before];
  const Node& root = *entries[before + 1];
  const Node& head = *entries[before + 2];
  CHECK(std::string(fc.op) == "linear");
  CHECK(fc.site.str().ends_with(at(g_fc_line)));
  REQUIRE(fc.module);
  CHECK(fc.module->path == "feat.fc");
  CHECK(fc.module->name == "fc");
  CHECK(fc.module->type == "Linear");
  CHECK(fc.module->parent->path == "feat");
  CHECK(fc.module->parent->parent->path == "");
  CHECK(fc.module->parent->parent->type == "Net");
  CHECK(std::string(root.op) == "sqrt");
  CHECK(root.site.str().ends_with(at(g_sqrt_line)));
  CHECK(root.module->path == "feat");
  CHECK(head.site.str().ends_with(at(g_head_line)));
  CHECK(head.module->str() == "head");
  CHECK(has(head.describe(), at(g_head_line) + " in head"));

  std::string table = debug::tape_str();
  CHECK(has(table, "module"));
  std::istringstream lines(table);
  int found = 0;
  for (std::string l; std::getline(lines, l);) {
    CHECK(!has(l, at(call_line)));  // nothing reports the line that called net(x)
    if (has(l, " linear ") && l.ends_with(at(g_fc_line))) found += has(l, " feat.fc ");
    if (has(l, " sqrt ") && l.ends_with(at(g_sqrt_line))) found += has(l, " feat ");
  }
  CHECK(found == 2);

  std::string dot = debug::tape_dot();
  CHECK(has(dot, "subgraph cluster_"));
  CHECK(has(dot, "label=\"Net\""));
  CHECK(has(dot, "label=\"feat (Feat)\""));
  CHECK(has(dot, "label=\"feat.fc (Linear)\""));
  CHECK(has(dot, "label=\"head (Linear)\""));
  // feat.fc's cluster opens inside feat's
  CHECK(dot.find("feat.fc (Linear)") > dot.find("feat (Feat)"));

  // after the call, ops outside any module have no path
  Tensor z = y * 2.0;
  CHECK(z.grad_fn()->module == nullptr);
}

TEST_CASE("step mode prints the line inside forward() and the module path", "[debug][modules]") {
  Net net;
  set_weights(net);
  std::ostringstream os;
  {
    debug::StepMode step({.out = &os, .nested = false});
    (void)net(tensor({{1, 2, 3, 4}}));
  }
  std::string out = os.str();
  INFO(out);
  // "[step] linear at <dir>/test_debug_modules.cpp:28 in feat.fc -> [1, 3] f32 cpu  min ..."
  std::vector<std::string> lines;
  std::istringstream is(out);
  for (std::string l; std::getline(is, l);) lines.push_back(l);
  REQUIRE(lines.size() == 3);
  CHECK(lines[0].starts_with("[step] linear at "));
  CHECK(has(lines[0], "/" + at(g_fc_line) + " in feat.fc -> [1, 3] f32 cpu"));
  CHECK(lines[1].starts_with("[step] sqrt at "));
  CHECK(has(lines[1], "/" + at(g_sqrt_line) + " in feat -> [1, 3] f32 cpu"));
  CHECK(lines[2].starts_with("[step] linear at "));
  CHECK(has(lines[2], "/" + at(g_head_line) + " in head -> [1, 2] f32 cpu"));
}

TEST_CASE("the profiler times each module and each op inside it, with lines and paths", "[debug][modules]") {
  Net net;
  set_weights(net);
  Tensor x = tensor({{1, 2, 3, 4}, {2, 3, 4, 5}});
  debug::Profiler prof;
  for (int i = 0; i < 2; ++i) {
    auto r = debug::record_function("step");
    Tensor loss = net(x).sum();
    {
      debug::Range b("backward pass");
      loss.backward();
    }
  }
  prof.stop();
  bool saw_log = false, saw_rule = false;
  for (const debug::ProfileEvent& e : prof.events()) {
    if (std::string_view(e.op) == "sqrt" && e.phase == debug::Phase::forward) {
      saw_log = true;
      CHECK(e.site.str().ends_with(at(g_sqrt_line)));
      CHECK(e.module->path == "feat");
    }
    if (std::string_view(e.op) == "linear" && e.phase == debug::Phase::backward && e.module->path == "feat.fc") {
      saw_rule = true;  // a rule is timed in its forward op's module, at its forward line
      CHECK(e.site.str().ends_with(at(g_fc_line)));
    }
  }
  CHECK(saw_log);
  CHECK(saw_rule);

  std::vector<debug::ModuleRow> rows = prof.module_table();
  auto row = [&](const std::string& module, const std::string& op) -> const debug::ModuleRow* {
    for (const auto& r : rows)
      if (r.module == module && r.op == op) return &r;
    return nullptr;
  };
  for (const char* m : {"Net", "feat", "feat.fc", "head"}) {
    const debug::ModuleRow* r = row(m, "");
    REQUIRE(r);
    CHECK(r->calls == 2);
    CHECK(r->self_ms <= r->total_ms);
  }
  const debug::ModuleRow *net_row = row("Net", ""), *feat = row("feat", ""), *fc = row("feat.fc", "");
  CHECK(feat->total_ms <= net_row->total_ms);
  CHECK(fc->total_ms <= feat->total_ms);
  CHECK(feat->self_ms == Approx(feat->total_ms - fc->total_ms).margin(1e-9));
  REQUIRE(row("feat.fc", "linear"));
  CHECK(row("feat.fc", "linear")->calls == 2);
  CHECK(row("feat.fc", "linear_backward")->calls == 2);
  CHECK(row("feat", "sqrt")->calls == 2);
  CHECK(row("feat", "sqrt_backward")->calls == 2);
  CHECK(row("head", "linear")->calls == 2);
  CHECK(row("-", "sum")->calls == 2);  // called outside the model
  std::string text = prof.module_summary();
  CHECK(has(text, "feat.fc"));
  CHECK(has(text, "  linear_backward"));

  // ranges: rows of the op table and spans of the trace
  std::vector<debug::ProfileRow> table = prof.table();
  auto op_row = [&](const std::string& op) -> const debug::ProfileRow* {
    for (const auto& r : table)
      if (r.op == op) return &r;
    return nullptr;
  };
  REQUIRE(op_row("step"));
  REQUIRE(op_row("backward pass"));
  CHECK(op_row("step")->calls == 2);
  CHECK(op_row("backward pass")->total_ms <= op_row("step")->total_ms);
  CHECK(op_row("step")->self_ms < op_row("step")->total_ms);
  std::string trace = prof.chrome_trace();
  CHECK(has(trace, "\"name\":\"step\",\"cat\":\"range\""));
  CHECK(has(trace, "\"name\":\"feat.fc (Linear)\",\"cat\":\"module\""));
  CHECK(has(trace, "\"module\":\"feat.fc\""));
}

TEST_CASE("a range outside any profiler costs nothing and records nothing", "[debug][modules]") {
  { debug::Range r("idle"); }
  debug::Profiler prof;
  prof.stop();
  { debug::Range r("after stop"); }
  CHECK(prof.spans().empty());
}

TEST_CASE("ops in a user's forward report their own lines; in reel's layers, the caller's", "[debug][modules]") {
  // Every layer of nn/layers.h inside a user module: each entry names this file.
  struct All : nn::Module {
    nn::Sequential seq{nn::Conv2d(2, 3, 3, {.padding = 1}), nn::BatchNorm2d(3), nn::ReLU(), nn::MaxPool2d(2),
                       nn::AvgPool2d(1), nn::AdaptiveAvgPool2d(1), nn::Flatten(), nn::Linear(3, 4), nn::LayerNorm({4}),
                       nn::GELU(), nn::Tanh(), nn::Sigmoid(), nn::Dropout(0.1), nn::Linear(4, 4), nn::ReLU(),
                       nn::SiLU(), nn::ELU(), nn::LeakyReLU(), nn::Softplus(), nn::Mish(), nn::Hardswish(),
                       nn::Softmax(1), nn::Identity()};
    nn::Sequential seq2{nn::GroupNorm(1, 2), nn::InstanceNorm2d(2), nn::Dropout2d(0.1)};
    nn::Embedding emb{10, 4};
    All() {
      register_module("seq", seq);
      register_module("seq2", seq2);
      register_module("emb", emb);
    }
    int line = 0;
    Tensor forward(const Tensor& x) override {
      line = __LINE__ + 1;
      return seq(x) + emb(full({2}, 3, {.dtype = DType::i64})) + seq2(x).sum();
    }
  };
  All m;
  Tensor x = randn({2, 2, 4, 4});
  size_t before = autograd::tape_size();
  Tensor out = m(x);
  std::vector<Ref<Node>> entries = autograd::tape_entries();
  REQUIRE(entries.size() > before + 10);
  std::set<std::string> paths;
  for (size_t i = before; i < entries.size(); ++i) {
    INFO(entries[i]->describe());
    CHECK(entries[i]->site.str().ends_with(at(m.line)));
    REQUIRE(entries[i]->module);
    paths.insert(entries[i]->module->str());
  }
  // a fused Linear + ReLU runs as the Linear ("seq.13"); the add is the user's own op
  for (const char* p : {"seq.0", "seq.1", "seq.7", "seq.13", "seq.15", "seq.21", "emb", "seq2.0", "seq2.1", "seq2.2",
                        "All"}) {
    INFO(p);
    CHECK(paths.count(p) == 1);
  }
  CHECK(paths.count("seq.14") == 0);
}

TEST_CASE("a module called on its own is the root; one called twice keeps its path", "[debug][modules]") {
  Net net;
  set_weights(net);
  Tensor x = tensor({{1, 2, 3, 4}});
  Tensor y = net.feat(x);  // feat as a model of its own
  REQUIRE(y.grad_fn());
  CHECK(y.grad_fn()->module->str() == "Feat");
  CHECK(y.grad_fn()->module->path == "");
  Tensor h = net.head(y);
  CHECK(h.grad_fn()->module->str() == "Linear");
  Tensor z = net(x);
  CHECK(z.grad_fn()->module->str() == "head");
  Tensor z2 = net(x);
  CHECK(z2.grad_fn()->module == z.grad_fn()->module);  // one interned path
}

// ---- hooks
TEST_CASE("forward pre and post hooks see and may replace the input and the output", "[nn][hooks]") {
  nn::Linear fc(2, 2);
  {
    NoGradGuard no_grad;
    fc.weight.copy_(tensor({{1, 0}, {0, 1}}));
    fc.bias.fill_(0.0);
  }
  std::vector<std::string> log;
  auto pre = fc.register_forward_pre_hook([&](nn::Module& m, const Tensor& in) -> std::optional<Tensor> {
    log.push_back("pre " + m.type_name());
    return in * 2.0;
  });
  std::vector<float> post_in, post_out;
  auto post = fc.register_forward_hook([&](nn::Module&, const Tensor& in, const Tensor& out) {
    log.push_back("post");
    post_in = in.to_vector<float>();
    post_out = out.to_vector<float>();
  });
  auto post2 = fc.register_forward_hook(
      [&](nn::Module&, const Tensor&, const Tensor& out) -> std::optional<Tensor> { return out + 1.0; });
  Tensor y = fc(tensor({{1, 2}}));
  CHECK(y.to_vector<float>() == std::vector<float>{3, 5});
  CHECK(log == std::vector<std::string>{"pre Linear", "post"});
  CHECK(post_in == std::vector<float>{2, 4});  // the input forward() got
  CHECK(post_out == std::vector<float>{2, 4});  // forward()'s output, before the next hook
  pre.remove();
  post2.remove();
  post2.remove();  // twice: nothing
  CHECK(fc(tensor({{1, 2}})).to_vector<float>() == std::vector<float>{1, 2});
  post.remove();
  CHECK(!fc.has_hooks());
  log.clear();
  (void)fc(tensor({{1, 2}}));
  CHECK(log.empty());
  {
    nn::Linear gone(2, 2);
    post = gone.register_forward_hook([](nn::Module&, const Tensor&, const Tensor&) {});
  }
  post.remove();  // the module is gone: nothing to do
}

TEST_CASE("backward hooks get grad_input and grad_output and may replace them", "[nn][hooks]") {
  // y = 3 x (a Linear of one weight), loss = sum(y * c)
  nn::Linear fc(1, 1, {.bias = false});
  {
    NoGradGuard no_grad;
    fc.weight.fill_(3.0);
  }
  Tensor x = tensor({1.0f, 2.0f}).reshape({2, 1}).detach().requires_grad_();
  Tensor c = tensor({1.0f, 10.0f}).reshape({2, 1});
  std::vector<std::string> order;
  std::vector<float> seen_in, seen_out, seen_pre;
  auto pre = fc.register_full_backward_pre_hook([&](nn::Module&, const Tensor& g_out) -> std::optional<Tensor> {
    order.push_back("pre");
    seen_pre = g_out.to_vector<float>();
    return g_out * 2.0;  // the module sees twice the gradient
  });
  auto post = fc.register_full_backward_hook([&](nn::Module& m, const Tensor& g_in, const Tensor& g_out) {
    order.push_back("post " + m.type_name());
    seen_in = g_in.to_vector<float>();
    seen_out = g_out.to_vector<float>();
  });
  (fc(x) * c).sum().backward();
  CHECK(order == std::vector<std::string>{"pre", "post Linear"});
  CHECK(seen_pre == std::vector<float>{1, 10});
  CHECK(seen_out == std::vector<float>{2, 20});  // as the pre hook replaced it
  CHECK(seen_in == std::vector<float>{6, 60});
  CHECK(x.grad().to_vector<float>() == std::vector<float>{6, 60});
  CHECK(fc.weight.grad().to_vector<float>() == std::vector<float>{2 * 1 + 20 * 2});

  // a backward hook replaces grad_input
  pre.remove();
  post.remove();
  x.set_grad(Tensor());
  auto zero = fc.register_full_backward_hook(
      [](nn::Module&, const Tensor& g_in, const Tensor&) -> std::optional<Tensor> { return g_in * 0.0; });
  (fc(x) * c).sum().backward();
  CHECK(x.grad().to_vector<float>() == std::vector<float>{0, 0});
  zero.remove();

  // an input without grad: the hook runs with an undefined grad_input
  bool undefined_in = false;
  auto post2 = fc.register_full_backward_hook([&](nn::Module&, const Tensor& g_in, const Tensor& g_out) {
    undefined_in = !g_in.defined() && g_out.defined();
  });
  (fc(ones({1, 1})) * 1.0).sum().backward();
  CHECK(undefined_in);

  // a replacement of the wrong shape is an error naming the module
  post2.remove();
  auto bad = fc.register_full_backward_pre_hook(
      [](nn::Module&, const Tensor&) -> std::optional<Tensor> { return ones({3}); });
  REQUIRE_THROWS_WITH((fc(x) * c).sum().backward(), Catch::Contains("Linear: a backward pre hook returned a gradient of shape [3]"));
}

TEST_CASE("hooks on a Sequential's modules run, and keep a Linear + ReLU unfused", "[nn][hooks]") {
  nn::Sequential seq{nn::Linear(2, 2), nn::ReLU()};
  {
    NoGradGuard no_grad;
    seq.at<nn::Linear>(0).weight.copy_(tensor({{1, 0}, {0, -1}}));
    seq.at<nn::Linear>(0).bias.fill_(0.0);
  }
  std::vector<float> linear_out;
  auto h = seq[0].register_forward_hook(
      [&](nn::Module&, const Tensor&, const Tensor& out) { linear_out = out.to_vector<float>(); });
  Tensor x = tensor({{1, 2}});
  size_t before = autograd::tape_size();
  Tensor y = seq(x.requires_grad_());
  CHECK(linear_out == std::vector<float>{1, -2});  // before the relu
  CHECK(y.to_vector<float>() == std::vector<float>{1, 0});
  std::vector<Ref<Node>> entries = autograd::tape_entries();
  REQUIRE(entries.size() == before + 2);
  CHECK(std::string(entries[before]->op) == "linear");
  CHECK(entries[before]->module->path == "0");
  CHECK(std::string(entries[before + 1]->op) == "relu");
  CHECK(entries[before + 1]->module->path == "1");
  h.remove();
  before = autograd::tape_size();
  Tensor y2 = seq(x);
  REQUIRE(autograd::tape_size() == before + 1);  // fused again
  CHECK(std::string(y2.grad_fn()->op) == "linear_relu");
  CHECK(y2.grad_fn()->module->path == "0");
}

TEST_CASE("recurrent layers called with several inputs report the caller's line and their path", "[debug][modules]") {
  struct Seq : nn::Module {
    nn::GRU gru{3, 4, {.batch_first = true}};
    nn::LSTM lstm{4, 2};
    nn::GRUCell cell{3, 4};
    Seq() {
      register_module("gru", gru);
      register_module("lstm", lstm);
      register_module("cell", cell);
    }
    int line = 0;
    Tensor forward(const Tensor& x) override {
      line = __LINE__ + 1;  // one line, so that every op of the three calls names it
      auto [y, h] = gru(x, Tensor()); auto [z, s] = lstm(y, nn::LSTMState{}); auto c = cell(x.select(1, 0), h.select(0, 0));
      return (z.sum() + s.h.sum()) + c.sum();  // the user's own ops: line + 1
    }
  };
  Seq m;
  Tensor x = randn({2, 5, 3});
  size_t before = autograd::tape_size();
  Tensor out = m(x);
  std::vector<Ref<Node>> entries = autograd::tape_entries();
  REQUIRE(entries.size() > before + 3);
  std::set<std::string> paths;
  for (size_t i = before; i < entries.size(); ++i) {
    INFO(entries[i]->describe());
    REQUIRE(entries[i]->module);
    std::string path = entries[i]->module->str(), site = entries[i]->site.str();
    CHECK((site.ends_with(at(m.line)) || (path == "Seq" && site.ends_with(at(m.line + 1)))));
    paths.insert(path);
  }
  for (const char* p : {"gru", "lstm", "cell", "Seq"}) {
    INFO(p);
    CHECK(paths.count(p) == 1);
  }
}
