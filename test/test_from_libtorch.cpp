// libtorch's spellings, used the way libtorch code uses them, against values PyTorch 1.13
// computed for the same calls (test/reference/libtorch_surface.py): Tensor methods and
// their in-place forms, item(), grad_fn()->name(), custom functions written as the
// libtorch tutorial writes them, the small Sequential modules, nn::functional,
// nn::utils and optimizers with a positional learning rate (issues 35 and 36).
#include <catch2/catch.hpp>
#include <reel/reel.h>

#include <cmath>
#include <fstream>
#include <sstream>

#include "gradcheck.h"
#include "torch_table.h"

using namespace reel;
using reel::test::differ;
using reel::test::error_message;

namespace {
const reel::test::Table& table() { return reel::test::cached_torch_table("libtorch_surface.txt"); }
}  // namespace

TEST_CASE("libtorch spellings: comparisons, all, any and their in-place forms", "[libtorch]") {
  auto c = reel::test::find_case(table(), "compare");
  Tensor a = c.in("a"), b = c.in("b");
  CHECK_MATCHES(a.eq(b), c, "eq");
  CHECK_MATCHES(a.ne(b), c, "ne");
  CHECK_MATCHES(a.lt(b), c, "lt");
  CHECK_MATCHES(a.le(b), c, "le");
  CHECK_MATCHES(a.gt(b), c, "gt");
  CHECK_MATCHES(a.ge(b), c, "ge");
  CHECK_MATCHES(a.eq(0.25), c, "eq_s");
  CHECK_MATCHES(a.ne(0.25), c, "ne_s");
  CHECK_MATCHES(a.lt(0.25), c, "lt_s");
  CHECK_MATCHES(a.le(0.25), c, "le_s");
  CHECK_MATCHES(a.gt(0.25), c, "gt_s");
  CHECK_MATCHES(a.ge(0.25), c, "ge_s");
  // in place: 1 or 0 written in a's dtype (f32), as PyTorch
  CHECK_MATCHES(a.clone().eq_(b), c, "eq_");
  CHECK_MATCHES(a.clone().ne_(b), c, "ne_");
  CHECK_MATCHES(a.clone().lt_(b), c, "lt_");
  CHECK_MATCHES(a.clone().le_(b), c, "le_");
  CHECK_MATCHES(a.clone().gt_(b), c, "gt_");
  CHECK_MATCHES(a.clone().ge_(b), c, "ge_");
  CHECK_MATCHES(a.clone().eq_(0.25), c, "eq_s_");
  CHECK_MATCHES(a.clone().ne_(0.25), c, "ne_s_");
  CHECK_MATCHES(a.clone().lt_(0.25), c, "lt_s_");
  CHECK_MATCHES(a.clone().le_(0.25), c, "le_s_");
  CHECK_MATCHES(a.clone().gt_(0.25), c, "gt_s_");
  CHECK_MATCHES(a.clone().ge_(0.25), c, "ge_s_");
  CHECK_MATCHES(a.gt(-2).all(), c, "all");
  CHECK_MATCHES(a.gt(1.4).any(), c, "any");
  CHECK_MATCHES(a.ge(-0.5).all(0), c, "all0");
  CHECK_MATCHES(a.gt(1.0).any(1), c, "any1");
  // the in-place result must fit the tensor: a [3, 4] cannot become [2, 3, 4]
  CHECK_THAT(error_message([&] { a.clone().eq_(stack({b, b})); }),
             Catch::Contains("eq_: the result's shape [2, 3, 4] is not the tensor's [3, 4]"));
}

TEST_CASE("libtorch spellings: mm, addmm, bmm as methods; mm refuses what matmul would broadcast", "[libtorch]") {
  auto c = reel::test::find_case(table(), "products");
  Tensor m1 = c.in("m1"), m2 = c.in("m2");
  CHECK_MATCHES(m1.mm(m2), c, "mm", 1e-12);
  CHECK_MATCHES(mm(m1, m2), c, "mm", 1e-12);
  CHECK_MATCHES(c.in("m3").addmm(m1, m2, 0.5, 2), c, "addmm", 1e-12);
  CHECK_MATCHES(c.in("b1").bmm(c.in("b2")), c, "bmm", 1e-12);
  CHECK_MATCHES(m1.matmul(m2), c, "matmul", 1e-12);
  CHECK_THAT(error_message([&] { m1.mm(m2[0]); }),
             Catch::Contains("mm: expected two 2-D tensors, got [3, 4] and [2]; use matmul"));
  CHECK_THAT(error_message([&] { m1.mm(m1); }), Catch::Contains("mm: inner dims do not match: [3, 4] @ [3, 4]"));
  // and it is differentiable as matmul is
  CHECK(reel::test::gradcheck([](const std::vector<Tensor>& in) { return in[0].mm(in[1]); },
                              {reel::test::input({3, 4}), reel::test::input({4, 2})}) == "");
}

TEST_CASE("libtorch spellings: in-place arithmetic, fills and clamps", "[libtorch]") {
  auto c = reel::test::find_case(table(), "inplace");
  Tensor x = c.in("x"), y = c.in("y"), mask = c.in("mask"), idx = c.in("idx");
  CHECK_MATCHES(x.clone().add_(3), c, "add_s", 1e-12);
  CHECK_MATCHES(x.clone().sub_(y, 2), c, "sub_", 1e-12);
  CHECK_MATCHES(x.clone().sub_(0.5), c, "sub_s", 1e-12);
  CHECK_MATCHES(x.clone().mul_(y), c, "mul_", 1e-12);
  CHECK_MATCHES(x.clone().div_(y), c, "div_", 1e-12);
  CHECK_MATCHES(x.clone().div_(4), c, "div_s", 1e-12);
  CHECK_MATCHES(x.clone().pow_(2), c, "pow_", 1e-12);
  CHECK_MATCHES(x.clone().neg_(), c, "neg_", 1e-12);
  CHECK_MATCHES(x.clone().abs_(), c, "abs_", 1e-12);
  CHECK_MATCHES(x.clone().exp_(), c, "exp_", 1e-12);
  CHECK_MATCHES(y.clone().sqrt_(), c, "sqrt_", 1e-12);
  CHECK_MATCHES(y.clone().log_(), c, "log_", 1e-12);
  CHECK_MATCHES(x.clone().relu_(), c, "relu_", 1e-12);
  CHECK_MATCHES(x.clone().sigmoid_(), c, "sigmoid_", 1e-12);
  CHECK_MATCHES(x.clone().tanh_(), c, "tanh_", 1e-12);
  CHECK_MATCHES(x.clone().clamp_(-0.5, 0.75), c, "clamp_", 1e-12);
  CHECK_MATCHES(x.clone().clamp_min_(0.2), c, "clamp_min_", 1e-12);
  CHECK_MATCHES(x.clone().clamp_max_(0.2), c, "clamp_max_", 1e-12);
  CHECK_MATCHES(x.clone().masked_fill_(mask, 7.0), c, "masked_fill_", 1e-12);
  CHECK_MATCHES(x.clone().index_fill_(1, idx, -1.0), c, "index_fill_", 1e-12);
  // the same tensor is written (a view sees it), and the result is returned by reference
  Tensor z = x.clone();
  Tensor row = z[1];
  Tensor& same = z.mul_(y).add_(1.0);
  CHECK(&same == &z);
  CHECK(row.to_vector<double>() == (x * y + 1.0)[1].to_vector<double>());
  // refused as every in-place write is: a leaf that requires grad, with grad mode on
  Tensor w = zeros({3}).requires_grad_();
  CHECK_THAT(error_message([&] { w.sub_(0.5); }), Catch::Contains("sub_: a leaf tensor [3] that requires grad"));
  CHECK_THAT(error_message([&] { w.uniform_(); }), Catch::Contains("uniform_: a leaf tensor [3] that requires grad"));
  CHECK_THAT(error_message([&] { w.normal_(0, 1); }), Catch::Contains("normal_: a leaf tensor [3] that requires grad"));
  {
    NoGradGuard no_grad;  // as libtorch's initialisation code does it
    w.uniform_(-0.1, 0.1);
  }
  CHECK(w.abs().max().item<double>() <= 0.1);
}

TEST_CASE("libtorch spellings: uniform_ and normal_ as methods draw the free functions' numbers", "[libtorch]") {
  Generator g1(7), g2(7);
  Tensor a = empty({1000}), b = empty({1000});
  a.uniform_(-2, 3, g1);
  uniform_(b, -2, 3, g2);
  CHECK(a.to_vector<float>() == b.to_vector<float>());
  CHECK(a.min().item<double>() >= -2);
  CHECK(a.max().item<double>() < 3);
  a.normal_(5, 0.5, g1);
  normal_(b, 5, 0.5, g2);
  CHECK(a.to_vector<float>() == b.to_vector<float>());
  CHECK(std::abs(a.mean().item<double>() - 5) < 0.1);
  manual_seed(3);
  Tensor c = empty({4}).uniform_();  // default [0, 1) from the thread's generator
  manual_seed(3);
  CHECK(c.to_vector<float>() == rand({4}).to_vector<float>());
  CHECK_THAT(error_message([&] { from_vector<int64_t>({1, 2}).uniform_(); }),
             Catch::Contains("uniform_: expected a floating-point tensor, got i64"));
}

TEST_CASE("libtorch spellings: methods for reel's free functions", "[libtorch]") {
  auto c = reel::test::find_case(table(), "methods");
  Tensor x = c.in("x"), pos = c.in("pos"), i0 = c.in("i0"), g1 = c.in("g1"), cond = c.in("cond");
  CHECK_MATCHES(x.index_select(0, i0), c, "index_select", 1e-12);
  CHECK_MATCHES(x.gather(1, g1), c, "gather", 1e-12);
  CHECK_MATCHES(x.add(pos, 0.5), c, "add_alpha", 1e-12);
  CHECK_MATCHES(x.sub(pos, 2), c, "sub_alpha", 1e-12);
  CHECK_MATCHES(x.mul(pos), c, "mul", 1e-12);
  CHECK_MATCHES(x.div(4), c, "div_s", 1e-12);
  CHECK_MATCHES(pos.pow(x), c, "pow_t", 1e-12);
  CHECK_MATCHES(x.maximum(pos - 1.0), c, "maximum", 1e-12);
  CHECK_MATCHES(x.neg(), c, "neg", 1e-12);
  CHECK_MATCHES(pos.rsqrt(), c, "rsqrt", 1e-12);
  CHECK_MATCHES(x.square(), c, "square", 1e-12);
  CHECK_MATCHES(x.sin(), c, "sin", 1e-12);
  CHECK_MATCHES(x.erf(), c, "erf", 1e-7);
  CHECK_MATCHES(pos.prod(), c, "prod", 1e-12);
  CHECK_MATCHES(pos.prod(1), c, "prod1", 1e-12);
  CHECK_MATCHES(x.std(), c, "std", 1e-12);
  CHECK_MATCHES(x.var(), c, "var", 1e-12);
  CHECK_MATCHES(x.amax({0}), c, "amax0", 1e-12);
  CHECK_MATCHES(x.argmax(), c, "argmax");
  CHECK_MATCHES(x.norm(1, {1}), c, "norm1", 1e-12);
  CHECK_MATCHES(x.norm(1, 1), c, "norm1", 1e-12);  // libtorch's x.norm(p, dim)
  CHECK_MATCHES(x.logsumexp({1}), c, "logsumexp", 1e-12);
  CHECK_MATCHES(pos.cumprod(1), c, "cumprod", 1e-12);
  auto [values, indices] = x.sort(1, true);
  CHECK_MATCHES(values, c, "sort_v", 1e-12);
  CHECK_MATCHES(indices, c, "sort_i");
  CHECK_MATCHES(x.topk(2).values, c, "topk_v", 1e-12);
  CHECK_MATCHES(x.argsort(1), c, "argsort");
  CHECK_MATCHES(x.where(cond, pos), c, "where", 1e-12);
  CHECK_MATCHES(x.lerp(pos, 0.25), c, "lerp", 1e-12);
  CHECK_MATCHES(x.tril(), c, "tril", 1e-12);
  CHECK_MATCHES(x.triu(1), c, "triu1", 1e-12);
  CHECK_MATCHES(x.roll({1}, {1}), c, "roll", 1e-12);
  CHECK_MATCHES(x[0].tile({2}), c, "tile", 1e-12);
  CHECK_MATCHES(x.chunk(2, 1)[1], c, "chunk1", 1e-12);
  CHECK_MATCHES(x.split(std::vector<int64_t>{1, 2}, 0)[1], c, "split0", 1e-12);
  CHECK_MATCHES(zeros({3, 4}, {.dtype = DType::f64}).scatter_add(1, g1, pos.narrow(1, 0, 1)), c, "scatter_add", 1e-12);
  CHECK_MATCHES(x.index_add(0, i0, pos, 2), c, "index_add", 1e-12);
  CHECK_MATCHES(x[0].outer(pos[1]), c, "outer", 1e-12);
  CHECK_MATCHES(cond.logical_and(x.lt(0.5)), c, "logical_and");
  CHECK_MATCHES(x.log().isfinite(), c, "isfinite");
  // the metadata spellings
  CHECK(x.ndimension() == 2);
  CHECK(x.scalar_type() == DType::f64);
  CHECK(!x.is_cuda());
  Tensor z = zeros({2}, x.options());
  CHECK(z.dtype() == DType::f64);
  CHECK(x.view_as(x.t().contiguous()).shape() == Dims{4, 3});
  CHECK(x.reshape_as(zeros({12})).shape() == Dims{12});
  CHECK(i0.type_as(x).dtype() == DType::f64);
  CHECK(x.data_ptr<double>() == x.data<double>());
  Tensor leaf = zeros({2});
  leaf.set_requires_grad(true);
  CHECK(leaf.requires_grad());
}

TEST_CASE("libtorch spellings: item() without a template argument, shapes printed, free view functions",
          "[libtorch]") {
  Tensor loss = tensor({0.25, 0.5}).sum();
  double v = loss.item();  // a Scalar converts to double
  CHECK(v == 0.75);
  CHECK(loss.item().toDouble() == 0.75);
  CHECK(loss.item().toFloat() == 0.75f);
  CHECK(loss.item().isFloatingPoint());
  // an i64 keeps all its bits (a double would round 2^53 + 1)
  int64_t big = (int64_t(1) << 53) + 1;
  Scalar s = from_vector<int64_t>({big}).item();
  CHECK(s.isIntegral());
  CHECK(s.toLong() == big);
  CHECK(s.to<int64_t>() == big);
  CHECK(from_vector<int64_t>({-7}).item().toInt() == -7);
  CHECK(from_vector<int64_t>({3}).sum().item<int64_t>() == 3);
  Scalar b = tensor({1.0}).gt(0.5).item();
  CHECK(b.isBoolean());
  CHECK(b.toBool());
  std::ostringstream os;
  os << tensor({{1, 2, 3}, {4, 5, 6}}).shape() << " " << tensor({{1, 2, 3}, {4, 5, 6}}).sizes() << " "
     << from_vector<int64_t>({12}).sum().item() << " " << tensor({2.5}).item() << " " << b;
  CHECK(os.str() == "[2, 3] [2, 3] 12 2.5 true");
  CHECK_THAT(error_message([] { (void)zeros({2}).item(); }),
             Catch::Contains("item: expected a tensor of one element, got shape [2]"));
  CHECK_THAT(error_message([] { (void)Tensor().item(); }), Catch::Contains("item"));

  Tensor x = arange(0.0, 24.0).requires_grad_();
  CHECK(reshape(x, {2, -1, 4}).shape() == Dims{2, 3, 4});
  CHECK(flatten(reshape(x, {2, 3, 4}), 1).shape() == Dims{2, 12});
  CHECK(transpose(reshape(x, {4, 6}), 0, 1).shape() == Dims{6, 4});
  CHECK(permute(reshape(x, {2, 3, 4}), {2, 0, 1}).shape() == Dims{4, 2, 3});
  CHECK(unsqueeze(x, 0).shape() == Dims{1, 24});
  CHECK(squeeze(unsqueeze(x, 1), 1).shape() == Dims{24});
  CHECK(narrow(x, 0, 3, 2).to_vector<float>() == std::vector<float>{3, 4});
  reshape(x, {4, 6}).narrow(1, 1, 2).sum().backward();  // the free forms record as the methods do
  CHECK(x.grad().sum().item<double>() == 8);
  CHECK_THAT(error_message([&] { reshape(x, {5, -1}); }), Catch::Contains("reshape"));
}

TEST_CASE("grad_fn()->name() gives libtorch's node names beside reel's op", "[libtorch]") {
  std::map<std::string, std::string> want;
  std::ifstream f(std::string(REEL_SOURCE_DIR) + "/test/reference/grad_fn_names.txt");
  REQUIRE(f.good());
  std::string call, name;
  while (f >> call >> name)
    if (call[0] != '#') want[call] = name;
    else std::getline(f, name);
  auto ramp = [](Dims shape, double scale, double shift) {
    int64_t n = numel_of(shape);
    std::vector<double> v(size_t(n), 0.0);
    for (int64_t i = 0; i < n; ++i) v[size_t(i)] = double(i * 7 % 11) * scale - shift;
    return from_vector<double>(v, shape).requires_grad_();
  };
  Tensor x = ramp({3, 4}, 0.25, 1.0), y = (ramp({3, 4}, 0.25, 0.0) + 0.5).detach().requires_grad_();
  Tensor m = ramp({4, 5}, 0.25, 1.0), bb = ramp({5}, 0.25, 1.0);
  Tensor b3 = ramp({2, 3, 4}, 0.25, 0), c3 = ramp({2, 4, 5}, 0.25, 0);
  Tensor img = ramp({2, 3, 6, 6}, 0.25, 0), cw = ramp({4, 3, 3, 3}, 0.25, 0);
  Tensor lab = from_vector<int64_t>({0, 1, 3});
  std::map<std::string, std::function<Tensor()>> calls = {
      {"add", [&] { return x + y; }}, {"sub", [&] { return x - y; }}, {"mul", [&] { return x * y; }},
      {"div", [&] { return x / y; }}, {"neg", [&] { return -x; }}, {"exp", [&] { return x.exp(); }},
      {"log", [&] { return y.log(); }}, {"sqrt", [&] { return y.sqrt(); }}, {"relu", [&] { return x.relu(); }},
      {"sigmoid", [&] { return x.sigmoid(); }}, {"tanh", [&] { return x.tanh(); }},
      {"gelu", [&] { return gelu(x); }}, {"leaky_relu", [&] { return leaky_relu(x, 0.2); }},
      {"pow", [&] { return x.pow(2.0); }}, {"pow_tensor", [&] { return y.pow(x); }},
      {"clamp", [&] { return x.clamp(-0.5, 0.5); }}, {"sum", [&] { return x.sum(); }},
      {"sum_dim", [&] { return x.sum(1); }}, {"mean", [&] { return x.mean(); }},
      {"mean_dim", [&] { return x.mean(1); }}, {"mm", [&] { return x.mm(m); }},
      {"matmul", [&] { return x.matmul(m); }}, {"bmm", [&] { return b3.bmm(c3); }},
      {"linear", [&] { return linear(x, m.t(), bb); }}, {"addmm", [&] { return addmm(bb, x, m); }},
      {"softmax", [&] { return x.softmax(1); }}, {"log_softmax", [&] { return x.log_softmax(1); }},
      {"cross_entropy", [&] { return cross_entropy(x, lab); }}, {"mse_loss", [&] { return mse_loss(x, y); }},
      {"conv2d", [&] { return conv2d(img, cw); }}, {"max_pool2d", [&] { return max_pool2d(img, {.kernel = 2}); }},
      {"avg_pool2d", [&] { return avg_pool2d(img, {.kernel = 2}); }},
      {"layer_norm", [&] { return layer_norm(x, {4}); }},
      {"batch_norm", [&] { return batch_norm(img, {}, {}, {}, {}, true); }},
      {"view", [&] { return x.view({12}); }}, {"reshape", [&] { return x.reshape({4, 3}); }},
      {"transpose", [&] { return x.transpose(0, 1); }}, {"permute", [&] { return x.permute({1, 0}); }},
      {"select", [&] { return x.select(0, 1); }}, {"unsqueeze", [&] { return x.unsqueeze(0); }},
      {"squeeze", [&] { return x.unsqueeze(0).squeeze(0); }},
      {"expand", [&] { return x.narrow(0, 0, 1).expand({3, 4}); }}, {"cat", [&] { return cat({x, y}); }},
      {"stack", [&] { return stack({x, y}); }}, {"index_select", [&] { return x.index_select(0, lab.narrow(0, 0, 2)); }},
      {"gather", [&] { return x.gather(1, lab.unsqueeze(1)); }}, {"where", [&] { return where(x.gt(0), x, y); }},
      {"masked_fill", [&] { return x.masked_fill(x.gt(0), 0.0); }}, {"cumsum", [&] { return x.cumsum(1); }},
      {"clone", [&] { return x.clone(); }}, {"to", [&] { return x.to(DType::f32); }},
      {"embedding", [&] { return embedding(m, lab); }}, {"maximum", [&] { return maximum(x, y); }},
  };
  // reel builds these from other ops (PyTorch has one kernel each): their grad_fn() is the
  // last op's node, named as libtorch names that op (the call named in the second column)
  std::map<std::string, std::string> composite = {
      {"addmm", "add"}, {"cross_entropy", "mean"}, {"mse_loss", "mean"}, {"masked_fill", "where"},
      {"select", "squeeze"}};
  CHECK(calls.size() == want.size());
  for (auto& [k, fn] : calls) {
    INFO(k);
    REQUIRE(want.count(k));
    Tensor out = fn();
    REQUIRE(out.grad_fn() != nullptr);
    CHECK(out.grad_fn()->name() == want[composite.count(k) ? composite[k] : k]);
  }
  CHECK(std::string((x + y).grad_fn()->op) == "add");  // reel's name stays beside it
}

TEST_CASE("nn: Functional, Unflatten, LogSoftmax and the padding layers against PyTorch",
          "[libtorch][nn]") {
  auto c = reel::test::find_case(table(), "modules");
  Tensor x = c.in("x"), img = c.in("img");
  nn::Unflatten unflatten(1, {2, 3});
  CHECK_MATCHES(unflatten(x), c, "unflatten", 1e-12);
  CHECK_MATCHES(nn::Unflatten(-1, {-1, 3})(x), c, "unflatten", 1e-12);
  CHECK_MATCHES(nn::LogSoftmax(1)(x), c, "log_softmax", 1e-12);
  CHECK_MATCHES(nn::ZeroPad2d({1, 0, 2, 1})(img), c, "zero_pad", 1e-12);
  CHECK_MATCHES(nn::ConstantPad2d(1, 3.5)(img), c, "constant_pad", 1e-12);
  CHECK_MATCHES(nn::ReflectionPad2d(1)(img), c, "reflection_pad", 1e-12);
  CHECK_MATCHES(nn::ReplicationPad2d({2, 1, 0, 1})(img), c, "replication_pad", 1e-12);
  // libtorch's Sequential with Functional: a function with a bound argument, and a lambda
  nn::Sequential seq{nn::Unflatten(1, {2, 3}), nn::Flatten(1), nn::Functional(reel::leaky_relu, 0.2)};
  CHECK_MATCHES(seq(x), c, "functional_seq", 1e-12);
  nn::Sequential lam{nn::Functional([](const Tensor& t) { return t.pow(2.0); }), nn::Functional(reel::relu)};
  CHECK(differ(lam(x), x.pow(2.0), 1e-12) == "");
  // custom-dataset's AlexNet tail: functions with their options bound
  nn::Sequential tail{nn::Functional(reel::max_pool2d, Pool2dOptions{.kernel = 2, .stride = 2}),
                      nn::Functional(reel::reshape, Dims{-1, 4}), nn::Functional(reel::log_softmax, 1)};
  Tensor maps = reel::test::input({2, 3, 4, 4});
  CHECK(differ(tail(maps), log_softmax(max_pool2d(maps, {.kernel = 2}).reshape({-1, 4}), 1), 1e-12) == "");
  nn::Sequential pushed;
  pushed.push_back(nn::Linear(6, 2)).weight.requires_grad_(false);  // libtorch's push_back returns the layer
  CHECK(pushed.size() == 1);
  CHECK(pushed(x.to_float()).shape() == Dims{2, 2});
  CHECK(seq.str().find("(1): Flatten(start_dim=1, end_dim=-1)") != std::string::npos);
  CHECK(unflatten.str() == "Unflatten(dim=1, unflattened_size=(2, 3))");
  CHECK(nn::ZeroPad2d(2).str() == "ZeroPad2d((2, 2, 2, 2))");
  // gradients flow through as through the ops they are
  CHECK(reel::test::gradcheck(
            [](const std::vector<Tensor>& in) {
              nn::Sequential s{nn::Unflatten(1, {2, 2}), nn::ReflectionPad2d(1), nn::Functional(reel::tanh),
                               nn::Flatten(1), nn::LogSoftmax(1)};
              return s(in[0]);
            },
            {reel::test::input({2, 4})}) == "");
  // bad input names the module and the shapes
  CHECK_THAT(error_message([&] { unflatten(zeros({2, 5})); }),
             Catch::Contains("Unflatten: dim 1 of input [2, 5] has size 5, which sizes [2, 3] do not multiply to"));
  CHECK_THAT(error_message([] { nn::Unflatten(1, {-1, -1}); }), Catch::Contains("at most one -1"));
  CHECK_THAT(error_message([] { nn::ZeroPad2d(std::vector<int64_t>{1, 2}); }),
             Catch::Contains("ZeroPad2d: expected one padding or four (left, right, top, bottom), got 2"));
  CHECK_THAT(error_message([] { nn::ReflectionPad2d(1)(zeros({4})); }),
             Catch::Contains("ReflectionPad2d: expected input [N, C, H, W] or [C, H, W], got [4]"));
}

TEST_CASE("nn: Dropout1d and Dropout3d zero whole channels", "[libtorch][nn]") {
  manual_seed(5);
  nn::Dropout1d d1(0.5);
  Tensor x = ones({8, 16, 10});
  Tensor y = d1(x);
  // each (n, c) channel is all zero or all 2 (= 1 / (1 - p))
  Tensor per_channel_max = y.amax({2}), per_channel_min = y.amin({2});
  CHECK(per_channel_max.eq(per_channel_min).all().item<bool>());
  CHECK(per_channel_max.eq(0).logical_or(per_channel_max.eq(2)).all().item<bool>());
  double kept = per_channel_max.gt(0).to_double().mean().item<double>();
  CHECK(kept > 0.3);
  CHECK(kept < 0.7);
  d1.eval();
  CHECK(d1(x).eq(x).all().item<bool>());
  nn::Dropout3d d3(0.25);
  Tensor v = ones({2, 4, 3, 3, 3});
  Tensor w = d3(v);
  CHECK(w.amax({2, 3, 4}).eq(w.amin({2, 3, 4})).all().item<bool>());
  CHECK(d3(ones({4, 3, 3, 3})).shape() == Dims{4, 3, 3, 3});  // unbatched
  CHECK_THAT(error_message([&] { d1(zeros({2, 3, 4, 5})); }),
             Catch::Contains("Dropout1d: expected input [N, C, L] or [C, L], got [2, 3, 4, 5]"));
  CHECK_THAT(error_message([] { nn::Dropout3d(1.5); }), Catch::Contains("Dropout3d: p must be in [0, 1], got 1.5"));
  CHECK(nn::Dropout1d(0.2).str() == "Dropout1d(p=0.2, inplace=False)");
}

TEST_CASE("nn: AlphaDropout and FeatureAlphaDropout keep a SELU network's mean and variance", "[libtorch][nn]") {
  manual_seed(11);
  const double p = 0.2, alpha = 1.7580993408473766;
  const double a = 1 / std::sqrt((alpha * alpha * p + 1) * (1 - p));  // PyTorch's constants
  Tensor x = randn({200000}, {.dtype = DType::f64});
  nn::AlphaDropout drop(p);
  Tensor y = drop(x);
  // every element is either kept, a x + alpha a p, or dropped to -alpha a + alpha a p
  Tensor kept = (y - (x * a + alpha * a * p)).abs().lt(1e-12);
  Tensor dropped = (y - (alpha * a * p - alpha * a)).abs().lt(1e-12);
  CHECK(kept.logical_or(dropped).all().item<bool>());
  CHECK(kept.to_double().mean().item<double>() == Approx(1 - p).margin(0.01));
  CHECK(y.mean().item<double>() == Approx(0).margin(0.01));
  CHECK(y.var().item<double>() == Approx(1).margin(0.02));
  drop.eval();
  CHECK(drop(x).eq(x).all().item<bool>());
  // whole channels
  nn::FeatureAlphaDropout fdrop(0.5);
  Tensor z = fdrop(ones({4, 6, 5, 5}));
  CHECK(z.amax({2, 3}).eq(z.amin({2, 3})).all().item<bool>());
  CHECK_THAT(error_message([&] { fdrop(ones({3})); }),
             Catch::Contains("FeatureAlphaDropout: expected input [N, C, *] of at least 2 dims, got [3]"));
  CHECK_THAT(error_message([] { nn::AlphaDropout(-0.1); }), Catch::Contains("AlphaDropout: p must be in [0, 1]"));
  // the gradient is the kept elements' a, as the mask's
  Tensor xs = randn({50}, {.dtype = DType::f64}).requires_grad_();
  nn::AlphaDropout d2(0.5);
  Tensor out = d2(xs);
  out.sum().backward();
  const double a2 = 1 / std::sqrt((alpha * alpha * 0.5 + 1) * 0.5);
  Tensor kept2 = (out.detach() - (xs.detach() * a2 + alpha * a2 * 0.5)).abs().lt(1e-12);
  CHECK(differ(xs.grad(), kept2.to_double() * a2, 1e-12) == "");
}

TEST_CASE("nn::functional's names, nn::utils' clipping and optimizers with a positional lr, against PyTorch",
          "[libtorch][optim]") {
  namespace F = reel::nn::functional;
  Tensor x = tensor({{-1.0, 0.5}, {2.0, -3.0}});
  CHECK(differ(F::relu(x), relu(x)) == "");
  CHECK(differ(F::relu6(x * 4.0), clamp(x * 4.0, 0, 6)) == "");
  CHECK(differ(F::hardtanh(x), clamp(x, -1, 1)) == "");
  CHECK(differ(F::gelu(x), gelu(x)) == "");
  CHECK(differ(F::log_softmax(x, 1), log_softmax(x, 1)) == "");
  CHECK(differ(F::dropout(x, 0.5, false), x) == "");
  CHECK(differ(F::softmax(x, 1), softmax(x, 1)) == "");
  CHECK(differ(F::mse_loss(x, zeros({2, 2})), mean(x * x)) == "");
  CHECK(differ(F::l1_loss(x, zeros({2, 2})), mean(abs(x))) == "");

  auto c = reel::test::find_case(table(), "clip");
  auto params = [&] {
    Tensor p1 = c.in("p1").clone().requires_grad_(), p2 = c.in("p2").clone().requires_grad_();
    p1.set_grad(c.in("g1").clone());
    p2.set_grad(c.in("g2").clone());
    return std::vector<Tensor>{p1, p2};
  };
  std::vector<Tensor> ps = params();
  double total = nn::utils::clip_grad_norm_(ps, 1.5);
  CHECK(total == Approx(c.out("total").item<double>()).epsilon(1e-12));
  CHECK_MATCHES(ps[0].grad(), c, "g1", 1e-12);
  CHECK_MATCHES(ps[1].grad(), c, "g2", 1e-12);
  ps = params();
  nn::utils::clip_grad_value_(ps, 0.6);
  CHECK_MATCHES(ps[0].grad(), c, "g1_value", 1e-12);
  CHECK_MATCHES(ps[1].grad(), c, "g2_value", 1e-12);
  ps = params();
  optim::Adam adam(ps, 1e-2);  // libtorch's positional lr
  adam.step();
  adam.step();
  CHECK_MATCHES(ps[0], c, "p1_adam", 1e-12);
  CHECK_MATCHES(ps[1], c, "p2_adam", 1e-12);
  ps = params();
  optim::SGD sgd({ps[0]}, 0.1);
  sgd.step();
  CHECK_MATCHES(ps[0], c, "p1_sgd", 1e-12);
  CHECK(optim::AdamW(ps, 3e-4).lr() == 3e-4);
  CHECK(optim::RMSprop(ps, 1).lr() == 1.0);  // an integer lr, as libtorch takes it too
  CHECK(optim::Adagrad(ps, 0.5).lr() == 0.5);
  CHECK(optim::Adamax(ps, 0.25).lr() == 0.25);
  CHECK(optim::SGD(ps, {}).lr() == 1e-3);  // {} picks the options, not an lr of 0

  ps = params();
  ps[1].grad().fill_(INFINITY);
  CHECK_THAT(error_message([&] { nn::utils::clip_grad_norm_(ps, 1.0, 2.0, true); }),
             Catch::Contains("clip_grad_norm_: the total norm of order 2 of the gradients is inf"));
  CHECK(ps[0].grad().to_vector<double>() == c.in("g1").to_vector<double>());  // refused: nothing scaled
}

// pytorch/examples/cpp/regression, ported: only the namespace alias and smooth_l1_loss's
// namespace change (a tensor plus b.item(), SGD with a positional lr, item<float>()).
namespace torch = reel;
namespace {
constexpr int64_t kPolyDegree = 4;
torch::Tensor make_features(torch::Tensor x) {
  x = x.unsqueeze(1);
  std::vector<torch::Tensor> xs;
  for (int64_t i = 0; i < kPolyDegree; ++i) xs.push_back(x.pow(i + 1));
  return torch::cat(xs, 1);
}
torch::Tensor f(torch::Tensor x, torch::Tensor W_target, torch::Tensor b_target) {
  return x.mm(W_target) + b_target.item();
}
}  // namespace

TEST_CASE("libtorch's regression example, ported, fits its polynomial", "[libtorch][train]") {
  torch::manual_seed(2);
  auto W_target = torch::randn({kPolyDegree, 1}) * 5;
  auto b_target = torch::randn({1}) * 5;
  auto fc = torch::nn::Linear(W_target.size(0), 1);
  torch::optim::SGD optim(fc.parameters(), .1);
  float loss = 0;
  int64_t batch_idx = 0;
  while (++batch_idx < 20000) {
    auto x = make_features(torch::randn({32}));
    auto y = f(x, W_target, b_target);
    optim.zero_grad();
    auto output = torch::nn::functional::smooth_l1_loss(fc(x), y);
    loss = output.item<float>();
    output.backward();
    optim.step();
    if (loss < 1e-3f) break;
  }
  CHECK(loss < 1e-3f);
  CHECK(differ(fc.weight.view({-1}), W_target.view({-1}), 0.05) == "");
  CHECK(fc.bias.item<double>() == Approx(b_target.item<double>()).margin(0.1));
  // f's + b.item() is the scalar add it reads as
  Tensor xs = make_features(torch::arange(0.0, 3.0));
  CHECK(differ(f(xs, W_target, b_target), xs.mm(W_target) + b_target.item<double>(), 1e-6) == "");
}

// libtorch's MNIST example's network and loop (examples/cpp/mnist), spelled as there
// except for its holders (TORCH_MODULE) and option builders: see docs/from-libtorch.md.
namespace {
struct Net : torch::nn::Module {
  Net() {
    register_module("conv1", conv1);
    register_module("conv2", conv2);
    register_module("conv2_drop", conv2_drop);
    register_module("fc1", fc1);
    register_module("fc2", fc2);
  }
  torch::Tensor forward(const torch::Tensor& input) override {
    namespace F = torch::nn::functional;
    auto x = F::relu(F::max_pool2d(conv1(input), {.kernel = 2}));
    x = F::relu(F::max_pool2d(conv2_drop(conv2(x)), {.kernel = 2}));
    x = x.view({-1, 320});
    x = F::relu(fc1(x));
    x = F::dropout(x, 0.5, is_training());
    x = fc2(x);
    return F::log_softmax(x, 1);
  }
  torch::nn::Conv2d conv1{1, 10, 5};
  torch::nn::Conv2d conv2{10, 20, 5};
  torch::nn::Dropout2d conv2_drop;
  torch::nn::Linear fc1{320, 50};
  torch::nn::Linear fc2{50, 10};
};
}  // namespace

TEST_CASE("libtorch's MNIST loop, ported line for line, learns a fixed batch", "[libtorch][train]") {
  torch::manual_seed(1);
  Net model;
  torch::optim::SGD optimizer(model.parameters(), {.lr = 0.05, .momentum = 0.5});
  auto data = torch::randn({16, 1, 28, 28});
  auto targets = torch::randint(0, 10, {16});
  double first = 0, last = 0;
  model.train();
  for (int step = 0; step < 60; ++step) {
    optimizer.zero_grad();
    auto output = model(data);
    auto loss = torch::nll_loss(output, targets);
    REQUIRE(std::isfinite(loss.item<float>()));
    loss.backward();
    torch::nn::utils::clip_grad_norm_(model.parameters(), 10.0);
    optimizer.step();
    (step == 0 ? first : last) = loss.item().toDouble();
  }
  model.eval();
  torch::NoGradGuard no_grad;
  auto output = model(data);
  auto pred = output.argmax(1);
  int64_t correct = pred.eq(targets).sum().item<int64_t>();
  CHECK(last < first * 0.5);
  CHECK(correct >= 12);
  CHECK(output.grad_fn() == nullptr);
}
