// debug/: tape table and DOT, op hooks, breakpoints, step mode, anomaly mode, the
// profiler and its Chrome trace; autograd/function.h (custom functions), which the
// anomaly tests use to plant NaNs in a backward rule.
#include <catch2/catch.hpp>
#include <reel/reel.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <thread>

#include "gradcheck.h"

using namespace reel;
namespace fs = std::filesystem;

namespace {

std::string site_of(int line) { return "test_debug.cpp:" + std::to_string(line); }

std::string read_file(const std::string& path) {
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

size_t count_of(const std::string& s, const std::string& what) {
  size_t n = 0;
  for (size_t at = s.find(what); at != std::string::npos; at = s.find(what, at + what.size())) ++n;
  return n;
}

// Runs a shell command, returns its exit status and its output (stdout and stderr).
int run(const std::string& cmd, std::string* out = nullptr) {
  FILE* p = popen((cmd + " 2>&1").c_str(), "r");
  if (!p) return -1;
  char buf[4096];
  std::string text;
  while (size_t n = fread(buf, 1, sizeof buf, p)) text.append(buf, n);
  int rc = pclose(p);
  if (out) *out = text;
  return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

bool have(const char* program) { return run(std::string("command -v ") + program + " >/dev/null") == 0; }

fs::path scratch(const std::string& name) { return fs::temp_directory_path() / ("reel_debug_" + std::to_string(getpid()) + "_" + name); }

// A layer as nn::Module::operator() will be: it owns the site of everything inside.
Tensor fake_layer(const Tensor& x, const Tensor& w, Site site = {}) {
  SiteScope scope(site);
  return relu(x * w + 1.0);
}

// ---- custom functions
struct Cube : autograd::Function<Cube> {
  static constexpr const char* name = "cube";
  static Tensor forward(Context& ctx, const Tensor& x) {
    ctx.save_for_backward({x});
    return x * x * x;
  }
  static std::vector<Tensor> backward(Context& ctx, const std::vector<Tensor>& g) {
    Tensor x = ctx.saved()[0];
    return {g[0] * x * x * 3.0};
  }
};

// y = k a b + a (two tensor inputs, a number passed through, the output saved)
struct ScaledMul : autograd::Function<ScaledMul> {
  static constexpr const char* name = "scaled_mul";
  static Tensor forward(Context& ctx, const Tensor& a, double k, const Tensor& b) {
    ctx.saved_data["k"] = k;
    Tensor y = a * b * k + a;
    ctx.save_for_backward({a, b, y});
    return y;
  }
  static std::vector<Tensor> backward(Context& ctx, const std::vector<Tensor>& g) {
    auto s = ctx.saved();
    double k = ctx.saved_data.at("k").toDouble();
    Tensor ga = ctx.needs_input_grad(0) ? g[0] * (s[1] * k + 1.0) : Tensor();
    Tensor gb = ctx.needs_input_grad(1) ? sum_to(g[0] * s[0] * k, s[1].shape()) : Tensor();  // b broadcast
    return {ga, gb};
  }
};

// Two outputs: (x + y, x * y)
struct SumProd : autograd::Function<SumProd> {
  static std::vector<Tensor> forward(Context& ctx, const Tensor& x, const Tensor& y) {
    ctx.save_for_backward({x, y});
    return {x + y, x * y};
  }
  static std::vector<Tensor> backward(Context& ctx, const std::vector<Tensor>& g) {
    auto s = ctx.saved();
    return {g[0] + g[1] * s[1], g[0] + g[1] * s[0]};
  }
};

// The identity, returning its input as is.
struct Same : autograd::Function<Same> {
  static Tensor forward(Context&, const Tensor& x) { return x; }
  static std::vector<Tensor> backward(Context&, const std::vector<Tensor>& g) { return {g[0] * 2.0}; }
};

// Forward fine; backward divides zero by zero.
struct ZeroDiv : autograd::Function<ZeroDiv> {
  static constexpr const char* name = "zero_div";
  static Tensor forward(Context& ctx, const Tensor& x) {
    ctx.save_for_backward({x});
    return x * 2.0;
  }
  static std::vector<Tensor> backward(Context& ctx, const std::vector<Tensor>& g) {
    Tensor zero = ctx.saved()[0] * 0.0;
    return {g[0] * (zero / zero)};
  }
};

// Takes the log inside its forward.
struct LogInside : autograd::Function<LogInside> {
  static constexpr const char* name = "log_inside";
  static Tensor forward(Context&, const Tensor& x) { return log(x) + 1.0; }
  static std::vector<Tensor> backward(Context&, const std::vector<Tensor>& g) { return {g[0]}; }
};

// Backward adds tensors of shapes that do not broadcast: an error inside a rule.
struct BadShapes : autograd::Function<BadShapes> {
  static Tensor forward(Context&, const Tensor& x) { return x * 1.0; }
  static std::vector<Tensor> backward(Context&, const std::vector<Tensor>& g) { return {g[0] + ones({3})}; }
};

struct BadCount : autograd::Function<BadCount> {
  static Tensor forward(Context&, const Tensor& x) { return x * 1.0; }
  static std::vector<Tensor> backward(Context&, const std::vector<Tensor>& g) { return {g[0], g[0]}; }
};

}  // namespace

// ---------------------------------------------------------------- tape

TEST_CASE("print_tape lists each entry with shapes, dtypes, device and the user's line", "[debug]") {
  Tensor x = tensor({{1, 2, 3}, {4, 5, 6}}).requires_grad_();
  Tensor w = tensor({0.5, -1, 2}).requires_grad_();
  size_t before = autograd::tape_size();
  int l_mul = __LINE__ + 1;
  Tensor y = x * w;
  int l_var = __LINE__ + 1;
  Tensor v = var(y);  // composite: mean, sub, square, sum, div, each on the tape
  int l_layer = __LINE__ + 1;
  Tensor z = fake_layer(x, w);  // a layer owning the site, as nn modules do

  std::vector<Ref<Node>> entries = autograd::tape_entries();
  REQUIRE(entries.size() == before + 1 + 5 + 3);
  std::string text = debug::tape_str();
  std::vector<std::string> lines;
  std::istringstream is(text);
  for (std::string l; std::getline(is, l);) lines.push_back(l);
  REQUIRE(lines.size() == entries.size() + 1);
  CHECK(lines[0].rfind("#", 0) == 0);
  CHECK(lines[0].find("inputs") != std::string::npos);
  CHECK(lines[0].find("site") != std::string::npos);

  size_t first = before;  // entries made in this test
  const std::string& mul_row = lines[first + 1];
  CHECK(mul_row.find(" mul ") != std::string::npos);
  CHECK(mul_row.find("[2, 3] f32, [3] f32") != std::string::npos);
  CHECK(mul_row.find("[2, 3] f32  ") != std::string::npos);
  CHECK(mul_row.find(" cpu ") != std::string::npos);
  CHECK(mul_row.ends_with(site_of(l_mul)));
  // The composite's inner ops name the user's line, not reel's.
  std::vector<std::string> var_ops;
  for (size_t i = first + 1; i < first + 6; ++i) {
    const Node& n = *entries[i];
    var_ops.push_back(n.op);
    CHECK(n.site.str().ends_with(site_of(l_var)));
    CHECK(lines[i + 1].ends_with(site_of(l_var)));
  }
  // (a division by a number is a true division, as PyTorch's)
  CHECK(var_ops == std::vector<std::string>{"mean", "sub", "square", "sum", "div"});
  for (size_t i = first + 6; i < first + 9; ++i) CHECK(entries[i]->site.str().ends_with(site_of(l_layer)));
  CHECK(std::string(entries[first + 8]->op) == "relu");
  (void)v;
  (void)z;
}

TEST_CASE("tape_dot draws entries, leaves and constants with shapes on the edges", "[debug]") {
  Tensor x = tensor({{1, 2, 3}, {4, 5, 6}}).requires_grad_();
  Tensor w = tensor({0.5, -1, 2}).requires_grad_();
  Tensor c = tensor({1, 1, 1});  // no grad: a constant
  REQUIRE(autograd::tape_size() == 0);
  int line = __LINE__ + 1;
  Tensor loss = ((x * w + c).relu()).sum();
  std::string dot = debug::tape_dot();
  CHECK(dot.rfind("digraph tape {", 0) == 0);
  CHECK(dot.ends_with("}\n"));
  CHECK(count_of(dot, "shape=box") == 4);  // mul, add, relu, sum
  CHECK(count_of(dot, "label=\"leaf\\n") == 2);  // x and w, one node each
  CHECK(count_of(dot, "label=\"const\\n[3] f32\"") == 1);
  CHECK(dot.find("#0 mul\\n" + site_of(line)) != std::string::npos);
  CHECK(dot.find("#3 sum\\n" + site_of(line) + "\\n-> [] f32") != std::string::npos);
  // Every edge: "a -> b [label="[shape]"]"; the leaves feed mul, the chain links op to op.
  std::regex edge(R"re(  (\w+) -> (\w+) \[label="(\[[0-9, ]*\])"\];)re");
  std::vector<std::string> edges;
  for (std::sregex_iterator it(dot.begin(), dot.end(), edge), end; it != end; ++it)
    edges.push_back((*it)[1].str() + ">" + (*it)[2].str() + " " + (*it)[3].str());
  CHECK(edges == std::vector<std::string>{"leaf0>op0 [2, 3]", "leaf1>op0 [3]", "op0>op1 [2, 3]", "op1_const1>op1 [3]",
                                          "op1>op2 [2, 3]", "op2>op3 [2, 3]"});

  fs::path path = scratch("tape.dot");
  debug::write_dot(path.string());
  CHECK(read_file(path.string()) == dot);
  CHECK_FALSE(fs::exists(path.string() + ".tmp"));
  if (have("dot")) {
    std::string svg;
    REQUIRE(run("dot -Tsvg " + path.string(), &svg) == 0);
    CHECK(svg.find("<svg") != std::string::npos);
    CHECK(count_of(svg, "class=\"node\"") == 4 + 2 + 1);
    CHECK(count_of(svg, "class=\"edge\"") == 6);
  } else {
    WARN("Graphviz dot not found: the DOT output was checked for structure only");
  }
  fs::remove(path);
}

TEST_CASE("the tape shows an absent optional input as - and a 0-d constant as a node", "[debug]") {
  Tensor x = tensor({{1, 2}}).requires_grad_();
  Tensor w = tensor({{1, 0}, {0, 1}}).requires_grad_();
  Tensor y = linear(x, w) * scalar_tensor(2.0);  // no bias; a 0-d constant
  std::string text = debug::tape_str();
  CHECK(text.find(" linear  [1, 2] f32, [2, 2] f32, -  [1, 2] f32 ") != std::string::npos);
  std::string dot = debug::tape_dot();
  CHECK(count_of(dot, "label=\"const\\n") == 1);
  CHECK(dot.find("label=\"const\\n[] f32\"") != std::string::npos);
  CHECK(count_of(dot, " -> ") == 4);  // x, w -> linear; linear, constant -> mul
}

// ---------------------------------------------------------------- hooks and breakpoints

TEST_CASE("an op hook sees every op: forward, backward, recorded or not, nested", "[debug]") {
  std::vector<std::string> seen;
  std::vector<debug::OpRecord> recs;  // copies: the tensors stay alive
  debug::HookHandle h = debug::add_op_hook([&](const debug::OpRecord& r) {
    seen.push_back(r.name());
    recs.push_back(r);
    recs.back().parent = nullptr;
  });
  Tensor x = tensor({{1, 2}, {3, 4}}, {.dtype = DType::f64}).requires_grad_();
  int l_fwd = __LINE__ + 1;
  Tensor y = exp(x);
  int l_sum = __LINE__ + 1;
  Tensor loss = y.sum();
  Tensor mask = gt(x, 2.0);  // not differentiable: never reaches record()
  {
    NoGradGuard g;
    (void)neg(x);
  }
  int l_bwd = __LINE__ + 1;
  loss.backward();
  h.remove();
  (void)exp(x);  // not seen

  REQUIRE(recs.size() >= 6);
  const debug::OpRecord& e = recs[0];
  CHECK(seen[0] == "exp");
  CHECK(e.phase == debug::Phase::forward);
  CHECK(e.recorded);
  CHECK(e.node == y.grad_fn());
  CHECK(e.site.str().ends_with(site_of(l_fwd)));
  CHECK(e.depth == 0);
  REQUIRE(e.inputs.size() == 1);
  CHECK(e.inputs[0].impl() == x.impl());
  REQUIRE(e.outputs.size() == 1);
  CHECK(e.outputs[0].impl() == y.impl());
  CHECK(e.bytes == 4 * 8);
  CHECK(e.str() == "exp [2, 2] f64 -> [2, 2] f64 cpu at " + e.site.str());
  CHECK(seen[1] == "sum");
  CHECK(recs[1].outputs[0].shape() == Dims{});
  CHECK(seen[2] == "gt");
  CHECK_FALSE(recs[2].recorded);
  REQUIRE(recs[2].outputs.size() == 1);  // found among the tensors the op allocated
  CHECK(recs[2].outputs[0].dtype() == DType::boolean);
  CHECK(recs[2].outputs[0].to_vector<bool>() == mask.to_vector<bool>());
  CHECK(seen[3] == "neg");
  CHECK_FALSE(recs[3].recorded);
  CHECK(recs[3].node == nullptr);

  // Backward: the rules, each named for its forward op and line, then the pass itself.
  auto at = [&](const std::string& name) {
    for (size_t i = 4; i < seen.size(); ++i)
      if (seen[i] == name) return i;
    return size_t(-1);
  };
  size_t sb = at("sum_backward"), eb = at("exp_backward"), pass = at("backward");
  REQUIRE(sb != size_t(-1));
  REQUIRE(eb != size_t(-1));
  REQUIRE(pass == seen.size() - 1);
  CHECK(sb < eb);
  CHECK(recs[sb].phase == debug::Phase::backward);
  CHECK(recs[sb].site.str().ends_with(site_of(l_sum)));
  CHECK(recs[eb].site.str().ends_with(site_of(l_fwd)));
  CHECK(std::string(recs[eb].op) == "exp");
  CHECK(recs[eb].depth == 1);
  REQUIRE(recs[eb].outputs.size() == 1);
  CHECK(recs[eb].outputs[0].to_vector<double>() == y.to_vector<double>());  // d sum(e^x)/dx = e^x
  CHECK(recs[pass].site.str().ends_with(site_of(l_bwd)));
  // Ops inside a rule come before the rule and sit one level deeper.
  CHECK(std::count(seen.begin(), seen.end(), "exp") == 1);
  CHECK(std::count(seen.begin(), seen.end(), "mul") >= 1);
  for (size_t i = 4; i < seen.size(); ++i)
    if (seen[i] == "mul") CHECK(recs[i].depth == 2);
}

TEST_CASE("break_on raises SIGTRAP when a named op starts, forward or backward", "[debug]") {
  static std::vector<int> traps;
  traps.clear();
  auto old = std::signal(SIGTRAP, [](int sig) { traps.push_back(sig); });
  Tensor x = tensor({1, 2}).requires_grad_();
  debug::set_break_on(" tanh, exp_backward ");
  CHECK(debug::break_on() == "tanh,exp_backward");
  Tensor a = tanh(x);
  CHECK(traps.size() == 1);
  Tensor b = exp(x);
  CHECK(traps.size() == 1);  // exp forward: not named
  b.sum().backward();
  CHECK(traps.size() == 2);  // exp's rule
  debug::set_break_on("");
  (void)tanh(x);
  CHECK(traps.size() == 2);
  std::signal(SIGTRAP, old);
  (void)a;
}

// A child process: REEL_BREAK_ON comes from the environment, read when libreel loads.
TEST_CASE("debug break child", "[.]") {
  Tensor x = tensor({1, 2});
  (void)sigmoid(x);
  std::exit(0);  // not reached with REEL_BREAK_ON=sigmoid
}

TEST_CASE("REEL_BREAK_ON in the environment stops the program at that op", "[debug]") {
  std::string self = fs::read_symlink("/proc/self/exe").string();
  for (const char* env : {"REEL_BREAK_ON=relu,sigmoid", "REEL_BREAK_ON=relu"}) {
    const char* argv[] = {self.c_str(), "debug break child", nullptr};
    const char* envp[] = {env, "OMP_NUM_THREADS=1", nullptr};
    pid_t pid = 0;
    REQUIRE(posix_spawn(&pid, self.c_str(), nullptr, nullptr, const_cast<char**>(argv), const_cast<char**>(envp)) == 0);
    int status = 0;
    REQUIRE(waitpid(pid, &status, 0) == pid);
    if (std::string(env).find("sigmoid") != std::string::npos) {
      CHECK(WIFSIGNALED(status));
      CHECK(WTERMSIG(status) == SIGTRAP);
    } else {
      CHECK(WIFEXITED(status));
      CHECK(WEXITSTATUS(status) == 0);
    }
  }
}

// ---------------------------------------------------------------- step mode

TEST_CASE("step mode prints one line per op with its output's statistics", "[debug]") {
  std::ostringstream out;
  Tensor x = tensor({{1, 2.718281828459045}, {-1, 1}});
  int line = __LINE__ + 3;
  {
    debug::StepMode step({.out = &out});
    Tensor y = log(x);
    (void)y;
  }
  (void)log(x);  // after the guard: silent
  CHECK(out.str() == "[step] log at " + Site(__FILE__, uint32_t(line)).str() +
                         " -> [2, 2] f32 cpu  min 0 max 1 mean 0.3333 nan 1 inf 0\n");

  // Nested ops are indented under their depth; rules are named <op>_backward.
  std::ostringstream out2;
  Tensor w = tensor({1, 2}).requires_grad_();
  {
    debug::StepMode step({.out = &out2});
    var(w).backward();
  }
  std::string t2 = out2.str();
  CHECK(t2.find("[step]   mean at ") != std::string::npos);
  CHECK(t2.find("[step] var at ") != std::string::npos);
  CHECK(t2.find("-> [] f32 cpu  min 0.5 max 0.5 mean 0.5 nan 0 inf 0") != std::string::npos);
  CHECK(t2.find("[step]   square_backward at ") != std::string::npos);
  std::ostringstream out3;
  {
    debug::set_step_mode(true, {.out = &out3, .nested = false});
    (void)var(w);
    debug::set_step_mode(false);
  }
  CHECK(count_of(out3.str(), "[step]") == 1);
}

// ---------------------------------------------------------------- anomaly mode

TEST_CASE("anomaly mode names the op, its line and the first bad index in forward", "[debug]") {
  Tensor x = tensor({{1, 2, 3}, {4, -5, 6}}).requires_grad_();
  debug::AnomalyMode anomaly;
  int line = __LINE__ + 2;
  try {
    Tensor y = log(x);
    FAIL("no error");
  } catch (const Error& e) {
    CHECK(std::string(e.what()) == "anomaly mode: log gave NaN in its output [2, 3] f32 at index [1, 1] (at " +
                                       std::string(Site(__FILE__, uint32_t(line)).str()) + ")");
  }
  // Inside another op, the message says which.
  int line2 = __LINE__ + 1;
  CHECK_THROWS_WITH(LogInside::apply(x), Catch::Contains("log (inside log_inside) gave NaN") &&
                                             Catch::Contains("at index [1, 1]") && Catch::Contains(site_of(line2)));
  // Inf too, unless told otherwise.
  Tensor big = tensor({1, 1000});
  CHECK_THROWS_WITH(exp(big), Catch::Contains("exp gave inf in its output [2] f32 at index [1]"));
  {
    debug::AnomalyMode nan_only({.inf = false});
    CHECK_NOTHROW(exp(big));
  }
  CHECK_THROWS(exp(big));  // the outer guard again
}

TEST_CASE("anomaly mode names the backward rule, the forward op and its line", "[debug]") {
  debug::AnomalyMode anomaly;
  Tensor x = tensor({1, 2, 3}, {.dtype = DType::f64}).requires_grad_();
  int l_fwd = __LINE__ + 1;
  Tensor y = ZeroDiv::apply(x);  // fine in forward
  int l_bwd = __LINE__ + 2;
  try {
    y.sum().backward();
    FAIL("no error");
  } catch (const Error& e) {
    std::string m = e.what();
    CHECK(m.rfind("anomaly mode: the backward rule of zero_div gave NaN in the gradient for input 0 ([3] f64) at "
                  "index [0]; the forward zero_div was called at ", 0) == 0);
    CHECK(m.find(site_of(l_fwd) + " (backward called at ") != std::string::npos);
    INFO(m);
    CHECK(m.ends_with(site_of(l_bwd) + ")"));
  }
  // A built-in rule: sqrt at 0 has an infinite slope.
  Tensor z = tensor({{4, 0}}).requires_grad_();
  int l_sqrt = __LINE__ + 1;
  Tensor s = sqrt(z);
  CHECK_THROWS_WITH(s.sum().backward(),
                    Catch::Contains("backward rule of sqrt gave inf in the gradient for input 0 ([1, 2] f32) at index [0, 1]") &&
                        Catch::Contains(site_of(l_sqrt)));
}

TEST_CASE("without anomaly mode NaNs pass silently", "[debug]") {
  Tensor x = tensor({-1.0}).requires_grad_();
  Tensor y = log(x);
  CHECK(std::isnan(y.item<float>()));
  CHECK_NOTHROW(ZeroDiv::apply(x).sum().backward());
}

// ---------------------------------------------------------------- custom functions

TEST_CASE("autograd::Function: custom forward and backward, gradchecked in f64", "[debug][function]") {
  Tensor x = test::input({2, 3});
  Tensor y = Cube::apply(x);
  REQUIRE(y.grad_fn());
  CHECK(std::string(y.grad_fn()->op) == "cube");
  CHECK(allclose(y, x * x * x));
  CHECK_GRADIENTS([](const std::vector<Tensor>& in) { return Cube::apply(in[0]); }, x);
  CHECK_GRADIENTS([](const std::vector<Tensor>& in) { return ScaledMul::apply(in[0], 1.5, in[1]); }, test::input({2, 3}),
                  test::input({3}));
  CHECK_GRADIENTS([](const std::vector<Tensor>& in) {
    auto r = SumProd::apply(in[0], in[1]);
    return r[0] * 2.0 + r[1];
  }, test::input({4}), test::input({4}));

  // Only inputs that need a gradient get one.
  Tensor a = test::input({3}), b = tensor({1, 2, 3}, {.dtype = DType::f64});
  ScaledMul::apply(a, 2.0, b).sum().backward();
  CHECK(allclose(a.grad(), b * 2.0 + 1.0));
  CHECK_FALSE(b.grad().defined());

  // No input requires grad: no tape entry.
  size_t before = autograd::tape_size();
  Tensor c = Cube::apply(b);
  CHECK(autograd::tape_size() == before);
  CHECK_FALSE(c.requires_grad());
}

TEST_CASE("autograd::Function: aliases, in-place checks and errors", "[debug][function]") {
  Tensor x = tensor({1, 2}).requires_grad_();
  Tensor y = Same::apply(x);  // returns its input: the output gets its own handle
  CHECK(y.impl() != x.impl());
  CHECK(x.is_leaf());
  y.sum().backward();
  CHECK(x.grad().to_vector<float>() == std::vector<float>{2, 2});

  // A saved input written in place after the forward.
  Tensor a = tensor({1, 2}).requires_grad_();
  Tensor h = a * 1.0;
  Tensor z = Cube::apply(h);
  h.mul_(2.0);
  CHECK_THROWS_WITH(z.sum().backward(), Catch::Contains("modified in place"));

  int line = __LINE__ + 1;
  Tensor bad = BadCount::apply(x);
  CHECK_THROWS_WITH(bad.sum().backward(), Catch::Contains("BadCount: backward returned 2 gradients; expected 1 (one per argument of forward)") &&
                                              Catch::Contains(site_of(line)));
  // An op failing inside a backward rule names the forward call's line, not backward()'s.
  int forward_line = __LINE__ + 1;
  Tensor shapes = BadShapes::apply(x);
  int backward_line = __LINE__ + 1;
  CHECK_THROWS_WITH(shapes.sum().backward(), Catch::Contains("add: ") && Catch::Contains(site_of(forward_line)) &&
                                                 !Catch::Contains(site_of(backward_line)));
  // Saved tensors are freed by backward unless retain_graph.
  Tensor w = Cube::apply(x);
  Tensor s = w.sum();
  s.backward();
  CHECK_THROWS_WITH(s.backward(), Catch::Contains("already used by a backward pass"));
}

// ---------------------------------------------------------------- profiler

TEST_CASE("backward under the profiler takes each leaf's gradient as the engine does without it", "[debug]") {
  // The tools must not change the work they measure: a gradient kept alive by the
  // debug frames made the engine copy it into .grad (a clone per weight per step).
  nn::Linear fc(6, 4);
  Tensor x = randn({5, 6});
  debug::Profiler prof;
  relu(fc(x)).sum().backward();
  prof.stop();
  REQUIRE(fc.weight.grad().defined());
  for (const auto& r : prof.table()) CHECK(r.op != "clone");
  bool saw_rule = false;
  for (const auto& r : prof.table()) saw_rule = saw_rule || r.op == "linear_relu_backward" || r.op == "linear_backward";
  CHECK(saw_rule);
}

TEST_CASE("the profiler times every op, sums them by name and writes a Chrome trace", "[debug]") {
  Tensor x = randn({16, 8}).requires_grad_();
  Tensor w = randn({8}).requires_grad_();
  debug::Profiler prof;
  int line = __LINE__ + 2;
  for (int i = 0; i < 3; ++i) {
    Tensor y = (x * w).tanh();
    y.sum().backward();
  }
  prof.stop();
  (void)(x * w);  // after stop: not recorded

  const auto& ev = prof.events();
  size_t top_forward = 0;
  for (const auto& e : ev) {
    CHECK(e.dur_ns >= 0);
    CHECK(e.start_ns >= 0);
    if (e.depth == 0 && e.phase == debug::Phase::forward && std::string_view(e.op) != "backward") ++top_forward;
  }
  CHECK(top_forward == 3 * 3);  // mul, tanh, sum
  std::vector<debug::ProfileRow> rows = prof.table();
  auto row = [&](const std::string& op) {
    for (const auto& r : rows)
      if (r.op == op) return r;
    FAIL("no row " << op);
    return debug::ProfileRow{};
  };
  CHECK(row("tanh").calls == 3);
  CHECK(row("backward").calls == 3);
  CHECK(row("tanh_backward").calls == 3);
  CHECK(row("mul_backward").calls == 3);
  CHECK(row("tanh").bytes == 3 * 16 * 8 * 4);
  CHECK(row("backward").total_ms >= row("tanh_backward").total_ms);
  CHECK(row("backward").self_ms <= row("backward").total_ms);
  for (size_t i = 1; i < rows.size(); ++i) CHECK(rows[i - 1].total_ms >= rows[i].total_ms);
  for (const auto& r : rows) CHECK(r.percent <= 100.0 + 1e-9);

  std::string table = prof.summary();
  CHECK(table.rfind("op", 0) == 0);
  CHECK(table.find("calls") != std::string::npos);
  CHECK(table.find("% time") != std::string::npos);
  CHECK(std::regex_search(table, std::regex(R"(\ntanh_backward +3 +[0-9.]+ +[0-9.]+ +[0-9.]+ +[0-9.]+% +[0-9.]+\n)")));
  CHECK(table.find(std::to_string(ev.size()) + " events in ") != std::string::npos);

  // Chrome trace: one "X" event per profiled op, with shapes and the site.
  std::string json = prof.chrome_trace();
  CHECK(count_of(json, "\"ph\":\"X\"") == ev.size());
  CHECK(json.find("\"name\":\"tanh\",\"cat\":\"forward\",\"ph\":\"X\"") != std::string::npos);
  CHECK(json.find("\"inputs\":\"[16, 8] f32, [8] f32\",\"outputs\":\"[16, 8] f32\"") != std::string::npos);
  CHECK(json.find(site_of(line)) != std::string::npos);
  fs::path path = scratch("trace.json");
  prof.write_chrome_trace(path.string());
  CHECK(read_file(path.string()) == json);
  if (fs::exists("/usr/bin/python3")) {
    std::string out;
    std::string check =
        "import json,sys; d=json.load(open(sys.argv[1])); x=[e for e in d['traceEvents'] if e['ph']=='X'];"
        "assert all(isinstance(e['ts'],(int,float)) and e['dur']>=0 and e['name'] and 'site' in e['args'] for e in x);"
        "print(len(x), sum(e['name']=='tanh' for e in x), sum(e['cat']=='backward' for e in x))";
    REQUIRE(run("/usr/bin/python3 -c \"" + check + "\" " + path.string(), &out) == 0);
    size_t n_backward = 0;
    for (const auto& e : ev) n_backward += e.phase == debug::Phase::backward;
    CHECK(out == std::to_string(ev.size()) + " 3 " + std::to_string(n_backward) + "\n");
  } else {
    WARN("python3 not found: the Chrome trace was checked for structure only");
  }
  fs::remove(path);
}

TEST_CASE("profilers nest on a thread and ignore other threads", "[debug]") {
  Tensor x = tensor({1, 2});
  debug::Profiler outer;
  (void)exp(x);
  {
    debug::Profiler inner;
    (void)neg(x);
    inner.stop();
    CHECK(inner.events().size() == 1);
  }
  std::thread t([&] { (void)sin(x); });
  t.join();
  (void)relu(x);
  outer.stop();
  std::vector<std::string> names;
  for (const auto& e : outer.events()) names.push_back(e.name());
  CHECK(names == std::vector<std::string>{"exp", "relu"});
}
