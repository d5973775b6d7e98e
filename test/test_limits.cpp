// The edges of the public API that used to crash: shapes whose element count, strides
// or byte size overflow int64, and methods and ops called on an undefined Tensor. Each
// must throw reel::Error naming the op (or method) and what came, never wrap or segfault.
#include <functional>

#include "gradcheck.h"

using namespace reel;
using Catch::Matchers::Contains;

namespace {

// The message of the reel::Error that `call` throws, or "no error".
std::string error_of(const std::function<void()>& call) {
  try {
    call();
  } catch (const Error& e) {
    return e.what();
  }
  return "no error";
}

}  // namespace

TEST_CASE("creation refuses shapes whose element count or byte size overflows int64", "[limits]") {
  // numel wrapped to 4 here (16 bytes allocated), and sum over dim 0 was a SIGSEGV
  CHECK_THAT(error_of([] { zeros({(int64_t(1) << 62) + 1, 4}); }),
             Contains("zeros") && Contains("[4611686018427387905, 4]") && Contains("overflow"));
  // numel wrapped to 0
  CHECK_THAT(error_of([] { zeros({int64_t(1) << 32, int64_t(1) << 32}); }),
             Contains("zeros") && Contains("[4294967296, 4294967296]"));
  // the element count fits, the byte count (2^63) does not
  CHECK_THAT(error_of([] { ones({int64_t(1) << 61}); }), Contains("ones") && Contains("[2305843009213693952]"));
  CHECK_THAT(error_of([] { empty({int64_t(1) << 61}, {.dtype = DType::f64}); }), Contains("empty"));
  CHECK_THAT(error_of([] { full({3, int64_t(1) << 62}, 1.0); }), Contains("full"));
  CHECK_THAT(error_of([] { rand({int64_t(1) << 40, int64_t(1) << 40}); }), Contains("rand"));
  CHECK_THAT(error_of([] { randn({int64_t(1) << 40, int64_t(1) << 40}); }), Contains("randn"));
  CHECK_THAT(error_of([] { randint(0, 5, {int64_t(1) << 40, int64_t(1) << 40}); }), Contains("randint"));
  float x = 0;
  CHECK_THAT(error_of([&] { from_blob(&x, {int64_t(1) << 40, int64_t(1) << 40}, DType::f32); }),
             Contains("from_blob"));
  CHECK_THAT(error_of([] { arange(0.0, 1e300); }), Contains("arange"));
  // zero elements, but the contiguous strides (2^64) overflow
  CHECK_THAT(error_of([] { zeros({0, int64_t(1) << 32, int64_t(1) << 32}); }), Contains("zeros"));
  // the element count fits and the allocation cannot be had: an Error, not a wrapped size class
  CHECK_THAT(error_of([] { empty({int64_t(1) << 61}, {.dtype = DType::u8}); }), Contains("out of memory"));
  CHECK_THAT(error_of([] { empty({int64_t(1) << 40, int64_t(1) << 10}, {.dtype = DType::u8}); }),
             Contains("out of memory"));
  // shapes that fit are untouched
  CHECK(zeros({0, int64_t(1) << 40}).numel() == 0);
}

TEST_CASE("views refuse shapes that overflow int64", "[limits]") {
  Tensor empty0 = zeros({0});
  CHECK_THAT(error_of([&] { empty0.reshape({int64_t(1) << 32, int64_t(1) << 32, 0}); }),
             Contains("reshape") && Contains("[4294967296, 4294967296, 0]"));
  CHECK_THAT(error_of([&] { empty0.reshape({-1, int64_t(1) << 62, 8}); }), Contains("reshape"));
  CHECK_THAT(error_of([&] { empty0.view({0, int64_t(1) << 40, int64_t(1) << 40}); }), Contains("view"));
  Tensor four = zeros({4});
  CHECK_THAT(error_of([&] { four.view({int64_t(1) << 62, 4, 0, -1}); }), Contains("view"));
  Tensor one = zeros({1, 1});
  CHECK_THAT(error_of([&] { one.expand({int64_t(1) << 32, int64_t(1) << 32}); }),
             Contains("expand") && Contains("[4294967296, 4294967296]"));
  // two expanded views that broadcast to 2^64 elements
  Tensor a = one.expand({int64_t(1) << 31, 1}), b = one.expand({1, int64_t(1) << 33});
  CHECK_THAT(error_of([&] { (void)(a + b); }), Contains("add") && Contains("[2147483648, 8589934592]"));
  CHECK_THAT(error_of([&] { matmul(zeros({int64_t(1) << 32, 0}), zeros({0, int64_t(1) << 32})); }),
             Contains("overflow"));
  // the unchecked helpers throw rather than wrap
  CHECK_THROWS_AS(numel_of(Dims{int64_t(1) << 62, 8}), Error);
  CHECK_THROWS_AS(contiguous_strides(Dims{0, int64_t(1) << 62, 8, 1}), Error);
}

TEST_CASE("methods of an undefined Tensor throw naming the method", "[limits]") {
  Tensor t;
  const std::vector<std::pair<const char*, std::function<void()>>> methods = {
      {"dim", [&] { (void)t.dim(); }},
      {"shape", [&] { (void)t.shape(); }},
      {"numel", [&] { (void)t.numel(); }},
      {"dtype", [&] { (void)t.dtype(); }},
      {"device", [&] { (void)t.device(); }},
      {"size", [&] { (void)t.size(0); }},
      {"stride", [&] { (void)t.stride(0); }},
      {"strides", [&] { (void)t.strides(); }},
      {"is_contiguous", [&] { (void)t.is_contiguous(); }},
      {"is_leaf", [&] { (void)t.is_leaf(); }},
      {"element_size", [&] { (void)t.element_size(); }},
      {"data_ptr", [&] { (void)t.data_ptr(); }},
      {"data", [&] { (void)t.data<float>(); }},
      {"item", [&] { (void)t.item<float>(); }},
      {"to_vector", [&] { (void)t.to_vector<float>(); }},
      {"set_grad", [&] { t.set_grad(zeros({1})); }},
      {"reshape", [&] { t.reshape({2}); }},
      {"contiguous", [&] { t.contiguous(); }},
      {"sum", [&] { t.sum(); }},
      {"relu", [&] { t.relu(); }},
      {"to", [&] { t.to(DType::f64); }},
      {"fill_", [&] { t.fill_(1.0); }},
      {"backward", [&] { t.backward(); }},
  };
  for (const auto& [name, call] : methods) {
    INFO(name);
    CHECK_THAT(error_of(call), Contains(name) && Contains("undefined"));
  }
  CHECK(t.str() == "tensor(undefined)");
  CHECK_FALSE(t.requires_grad());
}

TEST_CASE("ops given an undefined Tensor throw naming the op", "[limits]") {
  Tensor u, x = ones({2, 3});
  const std::vector<std::pair<const char*, std::function<void()>>> ops = {
      {"add", [&] { add(u, x); }},
      {"mul", [&] { mul(x, u); }},
      {"matmul", [&] { matmul(u, x); }},
      {"linear", [&] { linear(x, u); }},
      {"relu", [&] { relu(u); }},
      {"softmax", [&] { softmax(u, 1); }},
      {"sum", [&] { sum(u, {0}); }},
      {"cat", [&] { cat({x, u}); }},
      {"mse_loss", [&] { mse_loss(u, x); }},
      {"cross_entropy", [&] { cross_entropy(u, from_vector<int64_t>({0, 1})); }},
      {"conv2d", [&] { conv2d(u, ones({1, 1, 1, 1})); }},
      {"index_select", [&] { index_select(x, 0, u); }},
      {"where", [&] { where(u, x, x); }},
      {"zeros_like", [&] { zeros_like(u); }},
  };
  for (const auto& [name, call] : ops) {
    INFO(name);
    CHECK_THAT(error_of(call), Contains(name) && Contains("undefined"));
  }
}
