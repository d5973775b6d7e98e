// Autocast and f16/bf16 compute on the CPU: each op's dtype under the guard (the lists
// of docs/amp.md), nesting and enabled = false, values within bf16/f16 tolerance of f32,
// f32 gradients for f32 parameters, the native bf16 kernels against the f32 kernels on
// converted inputs, and the vector conversions against the scalar ones.
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <limits>
#include <map>
#include <string>

#include <reel/cpu/isa.h>

#include "gradcheck.h"
#include "low_precision_check.h"

using namespace reel;

namespace {

using test::rel_error;
using test::rounded;

// the same values, NaN where NaN
bool equal(const Tensor& a, const Tensor& b) {
  std::vector<float> x = a.to_vector<float>(), y = b.to_vector<float>();
  if (x.size() != y.size()) return false;
  for (size_t i = 0; i < x.size(); ++i)
    if (!(x[i] == y[i] || (std::isnan(x[i]) && std::isnan(y[i])))) return false;
  return true;
}

Tensor from(std::vector<float> v) {
  return from_blob(v.data(), {int64_t(v.size())}, DType::f32).clone();
}

}  // namespace

TEST_CASE("autocast picks each op's dtype from its list", "[autocast]") {
  manual_seed(1);
  Tensor x = randn({4, 8}), w = randn({6, 8}), b = randn({6});
  Tensor img = randn({2, 3, 8, 8}), k = randn({4, 3, 3, 3}), kb = randn({4});
  Tensor seq = randn({2, 3, 10}), k1 = randn({5, 3, 3});
  Tensor a3 = randn({2, 4, 5}), b3 = randn({2, 5, 3});
  Tensor labels = tensor({0, 1, 2, 3}, {.dtype = DType::i64});
  {
    AutocastGuard amp({.dtype = DType::bf16});
    CHECK(autocast_enabled(DeviceType::CPU));
    CHECK(autocast_dtype(DeviceType::CPU) == DType::bf16);
    // lower precision
    Tensor y = linear(x, w, b);
    CHECK(y.dtype() == DType::bf16);
    CHECK(linear_relu(x, w, b).dtype() == DType::bf16);
    CHECK(matmul(x, w.t()).dtype() == DType::bf16);
    CHECK(bmm(a3, b3).dtype() == DType::bf16);
    CHECK(conv2d(img, k, kb, {.padding = {1, 1}}).dtype() == DType::bf16);
    CHECK(conv2d_relu(img, k, kb).dtype() == DType::bf16);
    CHECK(conv1d(seq, k1).dtype() == DType::bf16);
    CHECK(conv_transpose2d(img, randn({3, 2, 3, 3})).dtype() == DType::bf16);
    // f32, whatever comes in
    CHECK(softmax(y, 1).dtype() == DType::f32);
    CHECK(log_softmax(y, 1).dtype() == DType::f32);
    CHECK(cross_entropy(y, labels).dtype() == DType::f32);
    CHECK(mse_loss(y, y.detach()).dtype() == DType::f32);
    CHECK(sum(y).dtype() == DType::f32);
    CHECK(mean(y, {1}).dtype() == DType::f32);
    CHECK(exp(y).dtype() == DType::f32);
    CHECK(log(abs(y) + 1.0).dtype() == DType::f32);
    CHECK(layer_norm(y, {6}).dtype() == DType::f32);
    // batch norm computes in f32; of channels-last bf16 activations (a convolution's
    // output on AMX CPUs) it is the mixed form: bf16 out, f32 inside
    const Tensor activation = conv2d(img, k);
    CHECK(batch_norm(activation, Tensor(), Tensor(), Tensor(), Tensor(), true, 0.1, 1e-5).dtype() ==
          (is_channels_last(activation.shape(), activation.strides()) ? DType::bf16 : DType::f32));
    CHECK(batch_norm(activation.contiguous(), Tensor(), Tensor(), Tensor(), Tensor(), true, 0.1, 1e-5).dtype() ==
          DType::f32);
    // the dtype that reaches them
    CHECK(relu(y).dtype() == DType::bf16);
    CHECK(y.reshape({-1}).dtype() == DType::bf16);
    CHECK(max_pool2d(conv2d(img, k), {.kernel = {2, 2}}).dtype() == DType::bf16);
    CHECK(dropout(y, 0.5, true).dtype() == DType::bf16);
    CHECK((y + x.narrow(1, 0, 6)).dtype() == DType::f32);  // promotion: bf16 + f32 -> f32
    // f64 is never cast
    CHECK(linear(x.to(DType::f64), w.to(DType::f64)).dtype() == DType::f64);
  }
  CHECK_FALSE(autocast_enabled(DeviceType::CPU));
  CHECK(linear(x, w, b).dtype() == DType::f32);
  CHECK(softmax(linear(x, w, b), 1).dtype() == DType::f32);
}

TEST_CASE("autocast guards nest, and enabled = false turns an inner scope off", "[autocast]") {
  Tensor x = randn({3, 4}), w = randn({2, 4});
  AutocastGuard outer({.dtype = DType::bf16});
  CHECK(linear(x, w).dtype() == DType::bf16);
  {
    AutocastGuard off({.enabled = false});
    CHECK_FALSE(autocast_enabled(DeviceType::CPU));
    CHECK(linear(x, w).dtype() == DType::f32);
    {
      AutocastGuard half({.dtype = DType::f16});
      CHECK(linear(x, w).dtype() == DType::f16);
    }
    CHECK(linear(x, w).dtype() == DType::f32);
  }
  CHECK(linear(x, w).dtype() == DType::bf16);
  CHECK(autocast_dtype(DeviceType::CPU) == DType::bf16);
  // another device type's state is its own
  CHECK_FALSE(autocast_enabled(DeviceType::CUDA));
}

TEST_CASE("AutocastGuard takes bf16 or f16 only", "[autocast]") {
  CHECK_THROWS_WITH(AutocastGuard({.dtype = DType::f32}), Catch::Contains("bf16 or f16") && Catch::Contains("f32"));
  CHECK_FALSE(autocast_enabled(DeviceType::CPU));
}

TEST_CASE("autocast results are within low-precision tolerance of f32", "[autocast]") {
  manual_seed(2);
  Tensor x = randn({16, 64}), w = randn({32, 64}) * 0.1, b = randn({32});
  Tensor img = randn({2, 8, 12, 12}), k = randn({16, 8, 3, 3}) * 0.1, kb = randn({16});
  Tensor a3 = randn({3, 16, 40}), b3 = randn({3, 40, 8});
  for (DType d : {DType::bf16, DType::f16}) {
    INFO(dtype_name(d));
    double tol = d == DType::bf16 ? 1.5e-2 : 2e-3;  // 8 vs 11 significant bits
    Tensor lin, mm, bm, cv, cvr, sm;
    {
      AutocastGuard amp({.dtype = d});
      lin = linear(x, w, b);
      mm = matmul(x, w.t());
      bm = bmm(a3, b3);
      cv = conv2d(img, k, kb, {.padding = {1, 1}});
      cvr = conv2d_relu(img, k, kb, {.stride = {2, 2}});
      sm = softmax(lin, 1);
    }
    CHECK(rel_error(lin, linear(x, w, b)) < tol);
    CHECK(rel_error(mm, matmul(x, w.t())) < tol);
    CHECK(rel_error(bm, bmm(a3, b3)) < tol);
    CHECK(rel_error(cv, conv2d(img, k, kb, {.padding = {1, 1}})) < tol);
    CHECK(rel_error(cvr, conv2d_relu(img, k, kb, {.stride = {2, 2}})) < tol);
    // softmax computes in f32 from the rounded logits: exactly the f32 softmax of them
    CHECK(rel_error(sm, softmax(lin.to(DType::f32), 1)) < 1e-6);
  }
}

TEST_CASE("autocast gradients reach f32 parameters as f32, close to the f32 ones", "[autocast]") {
  manual_seed(3);
  Tensor x = randn({8, 3, 10, 10});
  Tensor k = (randn({6, 3, 3, 3}) * 0.2).requires_grad_(), kb = zeros({6}).requires_grad_();
  Tensor w = (randn({5, 6 * 4 * 4}) * 0.1).requires_grad_(), b = zeros({5}).requires_grad_();
  Tensor labels = tensor({0, 1, 2, 3, 4, 0, 1, 2}, {.dtype = DType::i64});
  auto loss_of = [&] {
    // no relu here: on a problem this small, units flipping across zero under bf16 rounding
    // move the conv weight gradient by 5-12% (PyTorch 1.13's autocast does the same)
    Tensor h = avg_pool2d(conv2d(x, k, kb), {.kernel = {2, 2}});
    return cross_entropy(linear(h.flatten(1), w, b), labels);
  };
  std::vector<Tensor> params{k, kb, w, b}, ref;
  loss_of().backward();
  for (Tensor& p : params) ref.push_back(p.grad().clone()), p.set_grad(Tensor());
  Tensor loss;
  {
    AutocastGuard amp({.dtype = DType::bf16});
    loss = loss_of();
  }
  CHECK(loss.dtype() == DType::f32);
  loss.backward();
  for (size_t i = 0; i < params.size(); ++i) {
    INFO("parameter " << i);
    REQUIRE(params[i].grad().defined());
    CHECK(params[i].grad().dtype() == DType::f32);
    CHECK(rel_error(params[i].grad(), ref[i]) < 3e-2);
  }
}

TEST_CASE("backward inside an autocast scope runs in the forward's dtypes", "[autocast]") {
  Tensor x = randn({4, 6}), w = randn({3, 6}).requires_grad_();
  AutocastGuard amp({.dtype = DType::bf16});
  Tensor y = linear(x, w);
  sum(y).backward();
  CHECK(w.grad().dtype() == DType::f32);
  // d sum(x W^T) / dW = column sums of x, from the bf16-rounded x, accumulated in f32
  Tensor want = sum(rounded(x, DType::bf16), {0}).expand({3, 6});
  CHECK(rel_error(w.grad(), want) < 1e-6);
}

struct AutocastRef {
  const char* name;
  std::vector<std::pair<Dims, std::vector<double>>> inputs;
  const char* dtype;  // PyTorch's output dtype
  Dims shape;
  std::vector<double> out, gy;
  std::vector<std::vector<double>> grads;  // of the f32 leaves, through sum(out * gy)
};
constexpr double kInf = std::numeric_limits<double>::infinity();
const double kNaN = std::numeric_limits<double>::quiet_NaN();
#include "reference/autocast.inc"

// "" when got matches want within tol * max |want| (NaN where NaN, the same infinities)
std::string matches(const std::vector<double>& got, const std::vector<double>& want, double tol) {
  if (got.size() != want.size()) return "sizes differ";
  double scale = 1e-30;
  for (double v : want)
    if (std::isfinite(v)) scale = std::max(scale, std::abs(v));
  for (size_t i = 0; i < want.size(); ++i) {
    if (std::isnan(want[i]) != std::isnan(got[i])) return "NaN differs at " + std::to_string(i);
    if (std::isinf(want[i]) && want[i] != got[i]) return "inf differs at " + std::to_string(i);
    if (std::isfinite(want[i]) && !(std::abs(got[i] - want[i]) <= tol * scale))
      return "element " + std::to_string(i) + ": " + std::to_string(got[i]) + " vs " + std::to_string(want[i]);
  }
  return "";
}

TEST_CASE("autocast matches PyTorch 1.13's torch.autocast on its products (generated table)", "[autocast][torch]") {
  std::map<std::string, std::function<Tensor(const std::vector<Tensor>&)>> ops{
      {"linear", [](const auto& v) { return linear(v[0], v[1], v[2]); }},
      {"linear, NaN and inf in x", [](const auto& v) { return linear(v[0], v[1], v[2]); }},
      {"linear, empty batch", [](const auto& v) { return linear(v[0], v[1], v[2]); }},
      {"matmul", [](const auto& v) { return matmul(v[0], v[1]); }},
      {"bmm", [](const auto& v) { return bmm(v[0], v[1]); }},
      {"conv2d", [](const auto& v) { return conv2d(v[0], v[1], v[2], {.padding = {1, 1}}); }},
      {"conv2d, stride 2", [](const auto& v) { return conv2d(v[0], v[1], v[2], {.stride = {2, 2}}); }},
      {"conv1d", [](const auto& v) { return conv1d(v[0], v[1], v[2], {.padding = 1}); }},
      {"conv_transpose2d", [](const auto& v) { return conv_transpose2d(v[0], v[1], v[2], {.stride = {2, 2}}); }},
      {"cross_entropy of a bf16 linear", [](const auto& v) {
         return cross_entropy(linear(v[0], v[1], v[2]), tensor({0, 3, 1, 2, 3}, {.dtype = DType::i64}));
       }}};
  // between the products: the norms (mixed on channels-last bf16), pooling, sums, a 1x1
  auto conv = [](const auto& v) { return conv2d(v[0], v[1], v[2], {.padding = {1, 1}}); };
  auto train_norm = [conv](const auto& v) { return batch_norm(conv(v), v[3], v[4], Tensor(), Tensor(), true); };
  ops["batch_norm of a bf16 conv2d, training"] = train_norm;
  ops["batch_norm of a bf16 conv2d, NaN and inf in x"] = train_norm;
  ops["batch_norm of a bf16 conv2d, empty batch"] = train_norm;
  ops["batch_norm of a bf16 conv2d, eval"] = [conv](const auto& v) {
    Tensor mean = tensor({-0.2f, -0.1f, 0.0f, 0.05f, 0.1f, 0.15f, 0.2f, 0.3f});
    Tensor var = tensor({0.5f, 0.75f, 1.0f, 1.25f, 1.5f, 0.6f, 0.9f, 1.1f});
    return batch_norm(conv(v), v[3], v[4], mean, var, false);
  };
  ops["relu(batch_norm) of a bf16 conv2d, training"] = [conv](const auto& v) {
    return batch_norm_relu({conv(v)}, v[3], v[4], Tensor(), Tensor(), true);
  };
  ops["avg_pool2d of a bf16 conv2d"] = [conv](const auto& v) {
    return avg_pool2d(conv(v), {.kernel = 3, .stride = 2, .padding = 1});
  };
  ops["relu(a + b) of two bf16 conv2d"] = [conv](const auto& v) {
    return add_relu(conv(v), conv2d(v[0], v[3], v[2], {.padding = {1, 1}}));
  };
  ops["1x1 conv2d after a bf16 conv2d"] = [conv](const auto& v) { return conv2d(conv(v), v[3]); };
  REQUIRE(kAutocastRefs.size() == ops.size());
  for (const AutocastRef& ref : kAutocastRefs) {
    INFO(ref.name);
    std::vector<Tensor> leaves;
    for (const auto& [shape, values] : ref.inputs)
      leaves.push_back(from_vector<double>(values, shape).to(DType::f32).requires_grad_());
    Tensor out;
    {
      AutocastGuard amp({.dtype = DType::bf16});
      out = ops.at(ref.name)(leaves);
    }
    // conv_transpose2d is lowered as in PyTorch 2.x; 1.13 left it f32 (docs/amp.md). A
    // batch norm is mixed (bf16 out, as PyTorch's) on channels-last bf16 activations, and
    // computes in f32 on the others (docs/amp.md's f32 list)
    const std::string name = ref.name;
    const bool norm = name.find("batch_norm") != std::string::npos;
    const bool lowered = norm ? backend_for(kCPU).channels_last(DType::bf16)
                              : std::string(ref.dtype) == "bfloat16" || name == "conv_transpose2d";
    CHECK(out.dtype() == (lowered ? DType::bf16 : DType::f32));
    REQUIRE(out.shape() == ref.shape);
    // one bf16 rounding of the result apart (accumulation orders differ)
    CHECK(matches(out.to_vector<double>(), ref.out, 1e-2) == "");
    Tensor gy = from_vector<double>(ref.gy, ref.shape).to(DType::f32);
    Tensor total = out.dim() == 0 ? out : sum(out.to(DType::f32) * gy);
    total.backward();
    for (size_t i = 0; i < leaves.size(); ++i) {
      INFO("gradient of input " << i);
      REQUIRE(leaves[i].grad().defined());
      CHECK(leaves[i].grad().dtype() == DType::f32);
      // PyTorch rounds the f32 leaves' gradients to bf16 (its product writes bf16); reel
      // writes them in f32: one bf16 rounding apart
      CHECK(matches(leaves[i].grad().to_vector<double>(), ref.grads[i], 2e-2) == "");
    }
  }
}

TEST_CASE("autocast converts a parameter once per scope and sees in-place updates", "[autocast]") {
  Tensor x = ones({1, 2}), w = tensor({{1.0f, 2.0f}}).requires_grad_();
  AutocastGuard amp({.dtype = DType::bf16});
  CHECK(linear(x, w).item<float>() == 3.0f);
  {
    NoGradGuard no_grad;
    w.mul_(2.0);
  }
  CHECK(linear(x, w).item<float>() == 6.0f);  // not the cached copy of the old values
}

TEST_CASE("an inner guard of the other dtype does not reuse the outer scope's copy", "[autocast]") {
  Tensor x = ones({1, 2}), w = tensor({{1.0f, 2.0f}}).requires_grad_();
  AutocastGuard outer({.dtype = DType::bf16});
  CHECK(linear(x, w).dtype() == DType::bf16);
  {
    AutocastGuard inner({.dtype = DType::f16});
    CHECK(linear(x, w).dtype() == DType::f16);
  }
  CHECK(linear(x, w).dtype() == DType::bf16);
}

TEST_CASE("checkpoint recomputes a block under the forward's autocast settings", "[autocast][checkpoint_fn]") {
  manual_seed(8);
  // x requires grad: checkpoint records (and recomputes) only then, as PyTorch's reentrant one
  Tensor x = randn({4, 6}).requires_grad_(), w1 = randn({5, 6}).requires_grad_(), w2 = randn({3, 5}).requires_grad_();
  auto block = [&](const std::vector<Tensor>& in) { return std::vector<Tensor>{relu(linear(in[0], w1))}; };
  std::vector<Tensor> plain, checkpointed;
  for (bool ck : {false, true}) {
    Tensor loss;
    {
      AutocastGuard amp({.dtype = DType::bf16});
      Tensor h = ck ? autograd::checkpoint(block, {x})[0] : block({x})[0];
      CHECK(h.dtype() == DType::bf16);
      loss = sum(linear(h, w2).to(DType::f32));
    }
    loss.backward();  // outside the scope: the recomputation must still run in bf16
    for (Tensor* t : {&x, &w1, &w2}) {
      REQUIRE(t->grad().defined());
      (ck ? checkpointed : plain).push_back(t->grad().clone());
      t->set_grad(Tensor());
    }
  }
  for (int i = 0; i < 3; ++i) CHECK(equal(checkpointed[i], plain[i]));
}

TEST_CASE("f64 keeps exact gradients under autocast (gradcheck)", "[autocast]") {
  AutocastGuard amp({.dtype = DType::bf16});
  auto f = [](const std::vector<Tensor>& in) { return softmax(linear(in[0], in[1], in[2]), 1); };
  CHECK(test::gradcheck(f, {test::input({3, 4}), test::input({2, 4}), test::input({2})}) == "");
}

TEST_CASE("bf16 products run natively and match f32 on the rounded inputs", "[autocast][bf16]") {
  manual_seed(4);
  // big enough for oneDNN (not the tiny-product loops), and a tiny one
  for (int64_t m : {64, 3}) {
    Tensor a = rounded(randn({m, 96}), DType::bf16), b = rounded(randn({96, 48}), DType::bf16);
    Tensor bias = randn({48});
    Tensor want = linear(a, b.t(), bias);
    Tensor got = linear(a.to(DType::bf16), b.t().to(DType::bf16), bias.to(DType::bf16));
    CHECK(got.dtype() == DType::bf16);
    // f32 accumulation, one rounding of the result (and of the bias)
    CHECK(rel_error(got, want) < 8e-3);
    CHECK(rel_error(matmul(a.to(DType::bf16), b.to(DType::bf16)), matmul(a, b)) < 8e-3);
  }
  Tensor x = rounded(randn({2, 4, 9, 9}), DType::bf16), k = rounded(randn({8, 4, 3, 3}), DType::bf16);
  for (int64_t stride : {1, 2}) {
    Conv2dOptions o{.stride = {stride, stride}, .padding = {1, 1}};
    Tensor want = conv2d(x, k, {}, o);
    CHECK(rel_error(conv2d(x.to(DType::bf16), k.to(DType::bf16), {}, o), want) < 8e-3);
  }
}

TEST_CASE("bf16 conv and linear gradients match f32 on the rounded inputs", "[autocast][bf16]") {
  manual_seed(7);
  // f32 leaves, bf16 compute: gradients come back in f32, accumulated in f32 by oneDNN
  Tensor x = rounded(randn({4, 3, 10, 10}), DType::bf16), k = rounded(randn({6, 3, 3, 3}), DType::bf16);
  Tensor kb = rounded(randn({6}), DType::bf16), g = rounded(randn({4, 6, 5, 5}), DType::bf16);
  Tensor w = rounded(randn({7, 150}), DType::bf16), wb = rounded(randn({7}), DType::bf16);
  Tensor gl = rounded(randn({4, 7}), DType::bf16);
  std::vector<Tensor> leaves{x, k, kb, w, wb};
  for (Tensor& t : leaves) t.requires_grad_();
  std::vector<std::vector<Tensor>> grads;
  for (bool low : {false, true}) {
    Tensor y, z;
    {
      AutocastGuard amp({.dtype = DType::bf16, .enabled = low});
      y = conv2d(x, k, kb, {.stride = {2, 2}, .padding = {1, 1}});
      z = linear(x.flatten(1).narrow(1, 0, 150), w, wb);
    }
    CHECK(y.dtype() == (low ? DType::bf16 : DType::f32));
    (sum(y.to(DType::f32) * g) + sum(z.to(DType::f32) * gl)).backward();
    grads.emplace_back();
    for (Tensor& t : leaves) grads.back().push_back(t.grad().clone()), t.set_grad(Tensor());
  }
  for (size_t i = 0; i < leaves.size(); ++i) {
    INFO("leaf " << i);
    CHECK(grads[1][i].dtype() == DType::f32);
    CHECK(rel_error(grads[1][i], grads[0][i]) < 8e-3);
  }
}

TEST_CASE("bf16 and f16 elementwise ops compute in f32 and round once", "[autocast][bf16]") {
  manual_seed(5);
  Tensor a = rounded(randn({1000}), DType::bf16), b = rounded(randn({1000}), DType::bf16);
  for (DType d : {DType::bf16, DType::f16}) {
    INFO(dtype_name(d));
    Tensor ad = a.to(d), bd = b.to(d);
    CHECK(equal((ad * bd).to(DType::f32), rounded(a * b, d)));
    CHECK(equal((ad + bd).to(DType::f32), rounded(a + b, d)));
    CHECK(equal((ad - bd).to(DType::f32), rounded(a - b, d)));
    CHECK(equal(relu(ad).to(DType::f32), rounded(relu(a), d)));
    CHECK(equal(tanh(ad).to(DType::f32), rounded(tanh(a.to(d).to(DType::f32)), d)));
    CHECK(equal(sum(ad).to(DType::f32), rounded(sum(a.to(d).to(DType::f32)), d)));
    // strided and broadcast operands take the f32-twin path: same values
    Tensor m = ad.reshape({10, 100});
    CHECK(equal((m.t() * bd.narrow(0, 0, 10)).to(DType::f32),
                rounded(a.reshape({10, 100}).t() * b.narrow(0, 0, 10), d)));
  }
  // relu of the specials: -0 -> +0, -inf -> 0, NaN stays NaN
  float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  std::vector<float> r = relu(from({-0.0f, -inf, inf, nan, -1.5f, 2.5f}).to(DType::bf16))
                             .to(DType::f32).to_vector<float>();
  CHECK(r[0] == 0.0f);
  CHECK_FALSE(std::signbit(r[0]));
  CHECK(r[1] == 0.0f);
  CHECK(r[2] == inf);
  CHECK(std::isnan(r[3]));
  CHECK(r[4] == 0.0f);
  CHECK(r[5] == 2.5f);
}

TEST_CASE("vector conversions to and from f16/bf16 match the scalar ones", "[autocast][bf16]") {
  manual_seed(6);
  float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  std::vector<float> v = (randn({4099}) * 1000.0).to_vector<float>();
  for (float s : {0.0f, -0.0f, inf, -inf, nan, 1e-40f, -3e-39f, 65504.0f, 65520.0f, 1e9f, 6e-8f, 3e-5f,
                  1.00390625f, 1.01171875f, 3.4e38f})
    v.push_back(s);
  Tensor t = from(v);  // contiguous: the vector path; a strided view: the scalar one
  Tensor strided = stack({t, t}, 1).select(1, 0);
  REQUIRE_FALSE(strided.is_contiguous());
  for (DType d : {DType::bf16, DType::f16}) {
    INFO(dtype_name(d));
    std::vector<float> fast = t.to(d).to(DType::f32).to_vector<float>();
    std::vector<float> slow = strided.to(d).to(DType::f32).to_vector<float>();
    REQUIRE(fast.size() == slow.size());
    for (size_t i = 0; i < fast.size(); ++i) {
      INFO("value " << v[i]);
      if (std::isnan(slow[i])) CHECK(std::isnan(fast[i]));
      else CHECK(std::memcmp(&fast[i], &slow[i], 4) == 0);
    }
  }
}

TEST_CASE("large f32 -> bf16 conversions (streamed out) match the scalar ones", "[autocast][bf16]") {
  manual_seed(9);
  // 9M elements: an 18 MB bf16 output takes the streaming-store path; starting at element
  // 3 puts the output off its 32-byte alignment, so the scalar head runs too
  Tensor big = randn({9 * 1024 * 1024 + 5}) * 100.0;
  big.narrow(0, 7, 1).fill_(std::numeric_limits<float>::quiet_NaN());
  big.narrow(0, 11, 1).fill_(1e-40);
  Tensor t = big.narrow(0, 3, big.size(0) - 3);
  REQUIRE(t.is_contiguous());
  std::vector<uint16_t> fast(size_t(t.numel())), slow(size_t(t.numel()));
  Tensor f = t.to(DType::bf16);
  Tensor strided = stack({t, t}, 1).select(1, 0).to(DType::bf16);  // the scalar conversion
  std::memcpy(fast.data(), f.data_ptr(), fast.size() * 2);
  std::memcpy(slow.data(), strided.contiguous().data_ptr(), slow.size() * 2);
  size_t differ = 0;
  for (size_t i = 0; i < fast.size(); ++i) differ += fast[i] != slow[i];
  CHECK(differ == 0);
  CHECK(fast[4] == 0x7fc0);  // the NaN, canonical
}

// The ctest autocast_bf16_fallback runs this with ONEDNN_MAX_CPU_ISA=AVX512_CORE (oneDNN's
// kernels as on a CPU without AVX512-BF16): the products must then stay f32, bitwise the
// f32 ones. Run plainly, it checks the native side on this CPU.
TEST_CASE("CPU autocast computes bf16 products in f32 where the CPU has no bf16 kernels", "[autocast_fallback]") {
  const char* cap = std::getenv("ONEDNN_MAX_CPU_ISA");
  bool capped = cap && (std::string(cap) == "AVX512_CORE" || std::string(cap) == "AVX2");
  if (capped) CHECK_FALSE(cpu::bf16_products_native());
  manual_seed(11);
  Tensor x = randn({64, 96}), w = randn({48, 96}), b = randn({48}), img = randn({2, 3, 12, 12}), k = randn({8, 3, 3, 3});
  Tensor y32 = linear(x, w, b), c32 = conv2d(img, k, {}, {.padding = {1, 1}});
  AutocastGuard amp({.dtype = DType::bf16});
  Tensor y = linear(x, w, b), c = conv2d(img, k, {}, {.padding = {1, 1}});
  Tensor mixed = linear(x.to(DType::bf16), w, b);  // a bf16 input meets f32 weights
  if (cpu::bf16_products_native()) {
    CHECK(y.dtype() == DType::bf16);
    CHECK(c.dtype() == DType::bf16);
    CHECK(mixed.dtype() == DType::bf16);
    CHECK(rel_error(y, y32) < 1.6e-2);
  } else {
    CHECK(y.dtype() == DType::f32);
    CHECK(c.dtype() == DType::f32);
    CHECK(mixed.dtype() == DType::f32);
    CHECK(equal(y, y32));
    CHECK(equal(c, c32));
  }
  // the other lists are untouched: softmax still f32, f16 autocast still f16
  CHECK(softmax(y, 1).dtype() == DType::f32);
  AutocastGuard half({.dtype = DType::f16});
  CHECK(linear(x, w, b).dtype() == DType::f16);
}

TEST_CASE("autocast: batch_norm_relu joins f32 and bf16 pieces in f32 (a DenseNet's features)", "[autocast]") {
  manual_seed(12);
  Tensor a = randn({4, 3, 5, 5}), b = rounded(randn({4, 2, 5, 5}), DType::bf16);
  Tensor w = rand({5}), bias = randn({5});
  Tensor want = relu(batch_norm(cat({a, b}, 1), w, bias, Tensor(), Tensor(), true));
  Tensor got;
  {
    AutocastGuard amp({.dtype = DType::bf16});
    got = batch_norm_relu({a, b.to(DType::bf16)}, w, bias, Tensor(), Tensor(), true);
  }
  CHECK(got.dtype() == DType::f32);
  CHECK(rel_error(got, want) < 1e-5);
  // outside autocast mixed pieces are still refused
  CHECK_THROWS_WITH(batch_norm_relu({a, b.to(DType::bf16)}, w, bias, Tensor(), Tensor(), true),
                    Catch::Matchers::Contains("expected one dtype"));
}
