// Errors name the op the user called (issue 35, section 5): every public op of
// autograd/ops.h, ops_everyday.h, ops_rnn.h, ops_attention.h, nn/losses.h and
// nn/functional.h, called with a bad argument, throws a reel::Error whose message starts
// with that op's name, even where the op is composed of others (conv1d of conv2d,
// max_pool1d of max_pool2d, addmm of matmul, masked_fill of where, clamp_min of clamp,
// ...); and the composites that reshape check in the shapes the user gave.
#include <fstream>
#include <functional>
#include <regex>
#include <set>
#include <sstream>

#include "gradcheck.h"

using namespace reel;
using namespace reel::test;
namespace F = reel::nn::functional;

namespace {
struct Bad {
  const char* op;  // the name the error must start with
  std::function<void()> call;
  const char* fn = nullptr;  // the function called, where not `op`
};

// The table: one bad call per public op (per overload where they differ). `u` is an
// undefined tensor; x a [2, 3] f32, v a [3] f32, m a [2, 3] bool mask, i an i64 index.
std::vector<Bad> bad_calls() {
  const Tensor u;
  const Tensor x = ones({2, 3}), v = ones({3}), m = zeros({2, 3}, {.dtype = DType::boolean});
  const Tensor i = zeros({2}, {.dtype = DType::i64}), x4 = ones({1, 2, 4, 4}), x3 = ones({1, 2, 5});
  return {
      // elementwise unary
      {"neg", [=] { neg(u); }},
      {"abs", [=] { abs(u); }},
      {"exp", [=] { exp(u); }},
      {"log", [=] { log(u); }},
      {"sqrt", [=] { sqrt(u); }},
      {"rsqrt", [=] { rsqrt(u); }},
      {"square", [=] { square(u); }},
      {"reciprocal", [=] { reciprocal(u); }},
      {"sin", [=] { sin(u); }},
      {"cos", [=] { cos(u); }},
      {"relu", [=] { relu(u); }},
      {"add_relu", [=] { add_relu(x, ones({4})); }},
      {"leaky_relu", [=] { leaky_relu(u); }},
      {"gelu", [=] { gelu(x, "fast"); }},
      {"erf", [=] { erf(u); }},
      {"silu", [=] { silu(u); }},
      {"mish", [=] { mish(u); }},
      {"hardswish", [=] { hardswish(u); }},
      {"softplus", [=] { softplus(u); }},
      {"elu", [=] { elu(u); }},
      {"hardtanh", [=] { hardtanh(x, 1.0, -1.0); }},
      {"relu6", [=] { relu6(u); }},
      {"hardsigmoid", [=] { hardsigmoid(u); }},
      {"threshold", [=] { threshold(u, 0.0, 0.0); }},
      {"sigmoid", [=] { sigmoid(u); }},
      {"tanh", [=] { tanh(u); }},
      {"pow", [=] { pow(u, 2.0); }},
      {"clamp", [=] { clamp(x, 2.0, 1.0); }},
      {"clamp", [=] { clamp(x, u, u); }},
      {"sign", [=] { sign(u); }},
      {"logical_not", [=] { logical_not(u); }},
      // elementwise binary
      {"add", [=] { add(x, ones({4})); }},
      {"sub", [=] { sub(x, ones({4})); }},
      {"add", [=] { add(x, ones({4}), 2.0); }},
      {"sub", [=] { sub(x, ones({4}), 2.0); }},
      {"mul", [=] { mul(x, ones({4})); }},
      {"div", [=] { div(x, ones({4})); }},
      {"maximum", [=] { maximum(x, ones({4})); }},
      {"minimum", [=] { minimum(x, ones({4})); }},
      {"pow", [=] { pow(x, ones({4})); }},
      {"add", [=] { add(u, 1.0); }},
      {"sub", [=] { sub(u, 1.0); }},
      {"mul", [=] { mul(u, 1.0); }},
      {"div", [=] { div(u, 1.0); }},
      {"eq", [=] { eq(x, ones({4})); }},
      {"ne", [=] { ne(x, ones({4})); }},
      {"lt", [=] { lt(x, ones({4})); }},
      {"le", [=] { le(x, ones({4})); }},
      {"gt", [=] { gt(x, ones({4})); }},
      {"ge", [=] { ge(x, ones({4})); }},
      {"eq", [=] { eq(u, 1.0); }},
      {"ne", [=] { ne(u, 1.0); }},
      {"lt", [=] { lt(u, 1.0); }},
      {"le", [=] { le(u, 1.0); }},
      {"gt", [=] { gt(u, 1.0); }},
      {"ge", [=] { ge(u, 1.0); }},
      {"logical_and", [=] { logical_and(x, ones({4})); }},
      {"logical_or", [=] { logical_or(x, ones({4})); }},
      {"where", [=] { where(m, x, ones({4})); }},
      // operators: the op they spell
      {"add", [=] { (void)(x + ones({4})); }},
      {"sub", [=] { (void)(x - ones({4})); }},
      {"mul", [=] { (void)(x * ones({4})); }},
      {"div", [=] { (void)(x / ones({4})); }},
      {"lt", [=] { (void)(x < ones({4})); }},
      // reductions
      {"sum", [=] { sum(x, {2}); }},
      {"mean", [=] { mean(x, {2}); }},
      {"prod", [=] { prod(x, {2}); }},
      {"amax", [=] { amax(x, {2}); }},
      {"amin", [=] { amin(x, {2}); }},
      {"argmax", [=] { argmax(x, 2); }},
      {"argmin", [=] { argmin(x, 2); }},
      {"argmax", [=] { argmax(u); }},
      {"argmin", [=] { argmin(u); }},
      {"var", [=] { var(x, {}, -1); }},
      {"sum_to", [=] { sum_to(x, {4}); }},
      // linear algebra
      {"matmul", [=] { matmul(x, x); }},
      {"bmm", [=] { bmm(x, x); }},
      {"linear", [=] { linear(x, ones({4, 4})); }},
      {"linear_relu", [=] { linear_relu(x, ones({4, 4})); }},
      {"outer", [=] { outer(x, v); }},
      {"addmm", [=] { addmm(x, x, x); }},
      {"baddbmm", [=] { baddbmm(x, ones({2, 2, 3}), ones({2, 2, 3})); }},
      {"einsum", [=] { einsum("ij,jk->ik", {x, x}); }},
      // convolution, pooling
      {"conv2d", [=] { conv2d(x4, ones({3, 3, 3, 3})); }},
      {"conv2d_relu", [=] { conv2d_relu(x4, ones({3, 3, 3, 3})); }},
      {"conv2d_blocked", [=] { conv2d_blocked(x4, ones({3, 3, 3, 3})); }},
      {"conv1d", [=] { conv1d(x3, ones({3, 3, 3})); }},
      {"conv_transpose2d", [=] { conv_transpose2d(x4, ones({3, 3, 3, 3})); }},
      {"max_pool2d", [=] { max_pool2d(x4, {.kernel = 5}); }},
      {"max_pool2d", [=] { max_pool2d_with_indices(x4, {.kernel = 5}); }, "max_pool2d_with_indices"},
      {"avg_pool2d", [=] { avg_pool2d(x4, {.kernel = 5}); }},
      {"adaptive_avg_pool2d", [=] { adaptive_avg_pool2d(x4, 0, 1); }},
      {"max_pool1d", [=] { max_pool1d(x3, {.kernel = 7}); }},
      {"avg_pool1d", [=] { avg_pool1d(x3, {.kernel = 7}); }},
      {"adaptive_avg_pool1d", [=] { adaptive_avg_pool1d(x3, 0); }},
      {"to_channel_blocks", [=] { to_channel_blocks(x4, 3); }},
      {"from_channel_blocks", [=] { from_channel_blocks(x4); }},
      // normalisation
      {"batch_norm", [=] { batch_norm(x4, ones({3}), ones({3}), u, u, true); }},
      {"batch_norm_relu", [=] { batch_norm_relu({x4}, ones({3}), ones({3}), u, u, true); }},
      {"batch_norm_relu_blocked", [=] { batch_norm_relu_blocked({x4}, ones({3}), ones({3}), u, u, true, 0.1, 1e-5, 8); }},
      {"layer_norm", [=] { layer_norm(x, {4}); }},
      // softmax and losses
      {"softmax", [=] { softmax(x, 2); }},
      {"log_softmax", [=] { log_softmax(x, 2); }},
      {"cross_entropy", [=] { cross_entropy(x, zeros({3}, {.dtype = DType::i64})); }},
      {"nll_loss", [=] { nll_loss(x, zeros({3}, {.dtype = DType::i64})); }},
      {"mse_loss", [=] { mse_loss(x, v); }},
      {"binary_cross_entropy_with_logits", [=] { binary_cross_entropy_with_logits(x, v); }},
      {"binary_cross_entropy_with_logits", [=] { binary_cross_entropy_with_logits(x, v, BCEWithLogitsOptions{}); }},
      {"l1_loss", [=] { F::l1_loss(x, v); }},
      {"smooth_l1_loss", [=] { F::smooth_l1_loss(x, v); }},
      {"huber_loss", [=] { F::huber_loss(x, v); }},
      {"kl_div", [=] { F::kl_div(x, v); }},
      {"binary_cross_entropy", [=] { F::binary_cross_entropy(x, v); }},
      {"cosine_embedding_loss", [=] { F::cosine_embedding_loss(x, v, v); }},
      // nn::functional's fused forms
      {"conv2d_bias_relu", [=] { F::conv2d_bias_relu(x4, ones({3, 3, 3, 3}), u); }},
      {"linear_bias_relu", [=] { F::linear_bias_relu(x, ones({4, 4}), u); }},
      // randomness
      {"dropout", [=] { dropout(x, 1.5); }},
      {"dropout", [=] {
         Generator g(1);
         dropout(x, 1.5, g);
       }},
      {"multinomial", [=] { multinomial(x, 0); }},
      // indexing, joining
      {"embedding", [=] { embedding(x, v); }},
      {"index_select", [=] { index_select(x, 2, i); }},
      {"gather", [=] { gather(x, 2, i); }},
      {"one_hot", [=] { one_hot(x, 3); }},
      {"cat", [=] { cat({x, v}); }},
      {"stack", [=] { stack({x, v}); }},
      {"split", [=] { split(x, 0); }},
      {"split", [=] { split(x, std::vector<int64_t>{1, 2}, 0); }},
      {"chunk", [=] { chunk(x, 0); }},
      {"allclose", [=] { allclose(x, ones({4})); }},
      // creation
      {"linspace", [=] { linspace(0, 1, -1); }},
      {"eye", [=] { eye(-2); }},
      // masks, triangles, tests of values
      {"masked_fill", [=] { masked_fill(x, zeros({4, 2, 3}, {.dtype = DType::boolean}), 1.0); }},
      {"masked_fill", [=] { masked_fill(x, m, ones({2})); }},
      {"tril", [=] { tril(v); }},
      {"triu", [=] { triu(v); }},
      {"isnan", [=] { isnan(u); }},
      {"isinf", [=] { isinf(u); }},
      {"isfinite", [=] { isfinite(u); }},
      {"nan_to_num", [=] { nan_to_num(u); }},
      {"any", [=] { any(u); }},
      {"all", [=] { all(u); }},
      {"clamp_min", [=] { clamp_min(u, 0.0); }},
      {"clamp_max", [=] { clamp_max(u, 0.0); }},
      {"lerp", [=] { lerp(x, ones({4}), 0.5); }},
      {"lerp", [=] { lerp(x, x, ones({4})); }},
      // sorting, selection
      {"max", [=] { max(x, 2); }},
      {"min", [=] { min(x, 2); }},
      {"sort", [=] { sort(x, 2); }},
      {"argsort", [=] { argsort(x, 2); }},
      {"topk", [=] { topk(x, 4); }},
      // scans, statistics, norms
      {"cumsum", [=] { cumsum(x, 2); }},
      {"cumprod", [=] { cumprod(x, 2); }},
      {"logsumexp", [=] { logsumexp(x, {2}); }},
      {"std", [=] { reel::std(x, {2}); }},
      {"norm", [=] { norm(x, 2, {2}); }},
      {"normalize", [=] { normalize(x, 2, 2); }},
      {"cosine_similarity", [=] { cosine_similarity(x, ones({4})); }},
      // shape
      {"repeat", [=] { repeat(x, {2}); }},
      {"tile", [=] { tile(x, {-1}); }},
      {"flip", [=] { flip(x, {2}); }},
      {"roll", [=] { roll(x, {1, 1}, {0}); }},
      // scatter
      {"scatter", [=] { scatter(x, 2, i, x); }},
      {"scatter", [=] { scatter(x, 2, i, 1.0); }},
      {"scatter_add", [=] { scatter_add(x, 2, i, x); }},
      {"index_add", [=] { index_add(x, 2, i, x); }},
      {"index_put", [=] { index_put(x, {x}, v); }},
      // padding, resampling
      {"pad", [=] { pad(x, {1}); }},
      {"interpolate", [=] { interpolate(x, {.size = {4}}); }},
      // recurrent layers, attention
      // the recurrent ops are named by their mode, as PyTorch's rnn_tanh, lstm, gru
      {"rnn_tanh", [=] { rnn_layer(RnnMode::rnn_tanh, x, u, u, x, x); }, "rnn_layer"},
      {"lstm", [=] { rnn(x3, u, u, {}, {.mode = RnnMode::lstm}); }, "rnn"},
      {"scaled_dot_product_attention", [=] { scaled_dot_product_attention(x, v, v); }},
  };
}
}  // namespace

TEST_CASE("every public op's error names that op, composites included", "[errors][op_names]") {
  for (const Bad& b : bad_calls()) {
    std::string e = error_message(b.call);
    INFO(b.op << ": " << e);
    CHECK(e.rfind(std::string(b.op) + ": ", 0) == 0);
  }
}

TEST_CASE("the op-name table covers every op the headers declare", "[errors][op_names]") {
  std::set<std::string> covered;
  for (const Bad& b : bad_calls()) covered.insert(b.fn ? b.fn : b.op);
  // every free function taking a Site in the op headers: "Tensor name(..., Site site = {});"
  const std::regex decl(R"(\n(?:Tensor|std::vector<Tensor>|ValuesIndices|PoolWithIndices|RnnResult|RnnLayerResult|bool) (\w+)\(([^;]*);)");
  int declared = 0;
  for (const char* header : {"autograd/ops.h", "autograd/ops_everyday.h", "autograd/ops_rnn.h",
                             "autograd/ops_attention.h", "nn/losses.h", "nn/functional.h"}) {
    std::ifstream f(std::string(REEL_SOURCE_DIR) + "/" + header);
    REQUIRE(f.good());
    std::stringstream text;
    text << f.rdbuf();
    const std::string s = text.str();
    for (std::sregex_iterator it(s.begin(), s.end(), decl), end; it != end; ++it) {
      if ((*it)[2].str().find("Site site") == std::string::npos) continue;
      ++declared;
      INFO(header << ": " << (*it)[1].str());
      CHECK(covered.count((*it)[1].str()) == 1);
    }
  }
  CHECK(declared > 150);
}

TEST_CASE("composites that reshape report the shapes the user gave", "[errors][op_names]") {
  // conv1d runs conv2d on [N, C, 1, L]: its errors speak of the 3-d shapes
  std::string e = error_message([] { conv1d(ones({1, 2, 5}), ones({3, 3, 3})); });
  INFO(e);
  CHECK(e.rfind("conv1d: the input [1, 2, 5] has 2 channels but the weight [3, 3, 3]", 0) == 0);
  e = error_message([] { conv1d(ones({1, 2, 2}), ones({3, 2, 4})); });
  CHECK(e.rfind("conv1d: the kernel 4 (dilation 1) is longer than the padded input 2 (input [1, 2, 2]", 0) == 0);
  e = error_message([] { conv1d(ones({2, 5}), ones({3, 2, 3})); });
  CHECK(e.rfind("conv1d: expected the input [N, C, L] to have 3 dims, got shape [2, 5]", 0) == 0);
  e = error_message([] { max_pool1d(ones({1, 2, 5}), {.kernel = 7}); });
  CHECK(e.rfind("max_pool1d: the kernel 7 (dilation 1) is longer than the padded input 5 (input [1, 2, 5]", 0) == 0);
  e = error_message([] { avg_pool1d(ones({1, 2, 5}), {.kernel = 3, .padding = 2}); });
  CHECK(e.rfind("avg_pool1d: expected kernel >= 1, stride >= 1, dilation >= 1 and 0 <= padding <= kernel / 2", 0) == 0);
  e = error_message([] { addmm(ones({2, 4}), ones({2, 3}), ones({2, 4})); });
  CHECK(e.rfind("addmm: the first matrix [2, 3] and the second [2, 4] do not chain", 0) == 0);
  e = error_message([] { masked_fill(ones({3}), zeros({2, 3}, {.dtype = DType::boolean}), 0.0); });
  CHECK(e.rfind("masked_fill: the mask [2, 3] does not broadcast to the input's shape [3]", 0) == 0);
  // an op inside the composite that still complains is named after the user's op
  e = error_message([] { clamp_min(Tensor(), 0.0); });
  INFO(e);
  CHECK(e.rfind("clamp_min: ", 0) == 0);
}

TEST_CASE("an op called from a module's forward is the user's op again", "[errors][op_names]") {
  struct Net : nn::Module {
    Tensor forward(const Tensor& x) override { return matmul(x, ones({4, 2})); }
    std::string type_name() const override { return "Net"; }
  } net;
  std::string e = error_message([&] { net(ones({2, 3})); });
  INFO(e);
  CHECK(e.rfind("matmul: ", 0) == 0);
  nn::Conv1d conv(2, 3, 3);
  e = error_message([&] { conv(ones({1, 2, 2})); });
  INFO(e);
  CHECK(e.rfind("conv1d: ", 0) == 0);
}
