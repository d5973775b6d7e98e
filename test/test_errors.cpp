// Bad input of every class gives a reel::Error whose message names the op, what was
// expected and what came (shapes, dtypes), and the caller's line in this file.
// Wrong-device errors need a second device: they are tested only in CUDA builds with a GPU.
#include <functional>

#include "gradcheck.h"

using namespace reel;

namespace {

struct Case {
  const char* what;  // the class of bad input
  std::function<void()> call;
  std::vector<std::string> parts;  // each must appear in the message
};

// Runs each case: it must throw reel::Error (nothing else) and name every part and this file.
void run_cases(const std::vector<Case>& cases) {
  for (const Case& c : cases) {
    INFO(c.what);
    std::string message = "no error";
    bool thrown = false;
    try {
      c.call();
    } catch (const Error& e) {
      thrown = true;
      message = e.what();
    }
    INFO(message);
    CHECK(thrown);
    for (const std::string& part : c.parts) {
      INFO("expected to find: " << part);
      CHECK(message.find(part) != std::string::npos);
    }
    CHECK(message.find("test_errors.cpp") != std::string::npos);
  }
}

}  // namespace

TEST_CASE("shape mismatches name the op and both shapes", "[errors]") {
  Tensor a = zeros({2, 3}), b = zeros({4}), m = zeros({4, 5});
  run_cases({
      {"binary op", [&] { (void)(a + b); }, {"add", "[2, 3]", "[4]"}},
      {"binary op, named", [&] { mul(a, zeros({3, 2})); }, {"mul", "[2, 3]", "[3, 2]"}},
      {"matmul inner dims", [&] { matmul(a, m); }, {"matmul", "[2, 3]", "[4, 5]"}},
      {"loss input vs target", [&] { mse_loss(a, b); }, {"mse_loss", "[2, 3]", "[4]"}},
      {"cat", [&] { cat({a, m}); }, {"cat", "[2, 3]", "[4, 5]"}},
      {"labels vs logits", [&] { cross_entropy(a, from_vector<int64_t>({0, 1, 2})); },
       {"cross_entropy", "[2, 3]", "[3]"}},
  });
}

TEST_CASE("wrong dtypes name the op, the dtype expected and the one that came", "[errors]") {
  Tensor x = zeros({2, 3});
  run_cases({
      {"float labels", [&] { cross_entropy(x, tensor({0, 1})); }, {"cross_entropy", "i64", "f32", "[2]"}},
      {"float index", [&] { index_select(x, 0, tensor({0})); }, {"index_select", "i64", "f32"}},
      {"mixed dtypes in cat", [&] { cat({x, zeros({1, 3}, {.dtype = DType::f64})}); }, {"cat", "f32", "f64"}},
      {"integer tensor requiring grad", [&] { arange(3).requires_grad_(); }, {"requires_grad_", "i64"}},
  });
}

TEST_CASE("dims out of range name the op, the dim and the rank", "[errors]") {
  Tensor x = zeros({2, 3});
  run_cases({
      {"sum over dim 5 of a 2-D tensor", [&] { sum(x, {5}); }, {"sum", "dim 5", "2 dims"}},
      {"transpose", [&] { x.transpose(0, 2); }, {"transpose", "dim 2", "2 dims"}},
      {"index_select dim", [&] { index_select(x, -3, from_vector<int64_t>({0})); }, {"index_select", "dim -3"}},
      {"argmax dim", [&] { argmax(x, 2); }, {"argmax", "dim 2"}},
  });
}

TEST_CASE("indices out of range name the op, the index and the size", "[errors]") {
  Tensor x = zeros({3, 4});
  run_cases({
      {"index_select", [&] { index_select(x, 1, from_vector<int64_t>({0, 4})); },
       {"index_select", "index 4", "size 4", "[3, 4]"}},
      {"embedding", [&] { embedding(x, from_vector<int64_t>({3})); }, {"embedding", "index 3", "size 3"}},
      {"gather", [&] { gather(x, 0, from_vector<int64_t>({0, 5}, {1, 2})); }, {"gather", "index 5", "size 3"}},
      {"label", [&] { cross_entropy(x, from_vector<int64_t>({0, 1, 4})); }, {"cross_entropy", "label 4", "4 classes"}},
      // narrow is slice(start, start + length): its errors come from slice
      {"narrow past the end", [&] { x.narrow(0, 2, 3); }, {"narrow", "start 2 + length 3", "size 3", "[3, 4]"}},
      {"select past the end", [&] { x.select(1, 4); }, {"select", "index 4", "size 4", "[3, 4]"}},
  });
}

TEST_CASE("a second backward without retain_graph names the op and both calls", "[errors]") {
  Tensor w = ones({3}).requires_grad_();
  Tensor loss = (w * w).sum();
  loss.backward();
  run_cases({
      {"backward twice", [&] { loss.backward(); }, {"backward", "retain_graph", "already used"}},
  });
  // with retain_graph the second pass works and accumulates
  Tensor v = ones({3}).requires_grad_();
  Tensor l2 = (v * v).sum();
  l2.backward({}, true);
  l2.backward();
  CHECK(v.grad().to_vector<float>() == std::vector<float>{4, 4, 4});
}

TEST_CASE("empty tensors where a value is needed", "[errors]") {
  run_cases({
      // as PyTorch: no maximum of nothing (an empty cross_entropy batch is nan: test_semantics.cpp)
      {"max of an empty tensor", [] { zeros({0, 3}).max(); }, {"amax", "no elements", "[0, 3]"}},
      {"argmax of an empty tensor", [] { argmax(zeros({0}), 0); }, {"argmax", "non-empty", "[0]"}},
      {"cat of no tensors", [] { cat({}); }, {"cat", "empty list"}},
  });
}

TEST_CASE("reshapes and views that cannot be", "[errors]") {
  Tensor x = zeros({2, 3});
  run_cases({
      {"reshape to an incompatible shape", [&] { x.reshape({4, 2}); }, {"reshape", "[4, 2]", "6 elements", "[2, 3]"}},
      {"two inferred dims", [&] { x.reshape({-1, -1}); }, {"reshape", "-1"}},
      {"view of non-viewable strides", [&] { x.t().view({6}); }, {"view", "[3, 2]", "[1, 3]", "[6]", "reshape()"}},
      {"expand a non-1 dim", [&] { x.expand({4, 3}); }, {"expand", "[2, 3]", "[4, 3]"}},
  });
}

TEST_CASE("undefined tensors and in-place writes to leaves", "[errors]") {
  Tensor x = zeros({2});
  Tensor leaf = zeros({2}).requires_grad_();
  run_cases({
      {"undefined operand", [&] { add(Tensor(), x); }, {"add", "undefined"}},
      {"undefined logits", [&] { cross_entropy(Tensor(), from_vector<int64_t>({0})); }, {"cross_entropy", "undefined"}},
      {"in-place on a leaf that requires grad", [&] { leaf.mul_(2.0); }, {"mul_", "[2]", "NoGradGuard"}},
  });
}

#ifdef REEL_HAS_CUDA
TEST_CASE("tensors on different devices name both devices", "[errors][cuda]") {
  Tensor g;
  try {
    g = zeros({2}, {.device = Device::cuda()});
  } catch (const Error& e) {
    WARN("skipped: no usable CUDA device (" << e.what() << ")");
    return;
  }
  Tensor c = zeros({2});
  run_cases({
      {"binary op across devices", [&] { (void)(c + g); }, {"add", "cpu", "cuda"}},
      {"cat across devices", [&] { cat({c, g}); }, {"cat", "cpu", "cuda"}},
  });
}
#endif
