// Joining and splitting: cat, stack, split, chunk. Values by hand, gradients by
// finite differences, errors by class.
#include "gradcheck.h"

using namespace reel;
using reel::test::input;
using V = std::vector<Tensor>;

namespace {
std::string message_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "no error";
}
bool has(const std::string& m, const std::string& part) { return m.find(part) != std::string::npos; }
}  // namespace

TEST_CASE("cat joins along any dim", "[join]") {
  Tensor a = tensor({{1, 2}, {3, 4}}), b = tensor({{5, 6}});
  Tensor r = cat({a, b});
  CHECK(r.shape() == Dims{3, 2});
  CHECK(r.to_vector<float>() == std::vector<float>{1, 2, 3, 4, 5, 6});
  Tensor c = cat({a, b.t(), a}, -1);  // b.t() is [2, 1] and non-contiguous
  CHECK(c.shape() == Dims{2, 5});
  CHECK(c.to_vector<float>() == std::vector<float>{1, 2, 5, 1, 2, 3, 4, 6, 3, 4});
  CHECK(cat({a}).to_vector<float>() == a.to_vector<float>());
  CHECK(cat({a, zeros({0, 2})}).shape() == Dims{2, 2});
  Tensor i = cat({arange(3), arange(2)});
  CHECK(i.to_vector<int64_t>() == std::vector<int64_t>{0, 1, 2, 0, 1});
  // many tensors (more than fit in a node's fixed slots)
  std::vector<Tensor> many;
  for (int k = 0; k < 20; ++k) many.push_back(full({1}, double(k)));
  CHECK(cat(many).to_vector<float>()[19] == 19.0f);
}

TEST_CASE("stack adds a new dim", "[join]") {
  Tensor a = tensor({1, 2, 3}), b = tensor({4, 5, 6});
  CHECK(stack({a, b}).shape() == Dims{2, 3});
  CHECK(stack({a, b}).to_vector<float>() == std::vector<float>{1, 2, 3, 4, 5, 6});
  Tensor s = stack({a, b}, 1);
  CHECK(s.shape() == Dims{3, 2});
  CHECK(s.to_vector<float>() == std::vector<float>{1, 4, 2, 5, 3, 6});
  CHECK(stack({a, b}, -1).shape() == Dims{3, 2});
  CHECK(stack({scalar_tensor(1), scalar_tensor(2)}).to_vector<float>() == std::vector<float>{1, 2});
}

TEST_CASE("split and chunk return views", "[join]") {
  Tensor x = arange(0.0, 10.0).reshape({5, 2});
  std::vector<Tensor> parts = split(x, 2);
  REQUIRE(parts.size() == 3);
  CHECK(parts[0].shape() == Dims{2, 2});
  CHECK(parts[2].shape() == Dims{1, 2});
  CHECK(parts[2].to_vector<float>() == std::vector<float>{8, 9});
  CHECK(parts[1].storage().get() == x.storage().get());  // a view, no copy
  std::vector<Tensor> cols = split(x, 1, 1);
  REQUIRE(cols.size() == 2);
  CHECK(cols[1].to_vector<float>() == std::vector<float>{1, 3, 5, 7, 9});
  std::vector<Tensor> ch = chunk(x, 3);  // ceil(5 / 3) = 2 rows each: 2, 2, 1
  REQUIRE(ch.size() == 3);
  CHECK(ch[2].shape() == Dims{1, 2});
  CHECK(chunk(arange(0.0, 6.0), 4).size() == 3);  // sizes 2, 2, 2: fewer chunks, as PyTorch
  CHECK(chunk(arange(0.0, 2.0), 5).size() == 2);
  CHECK(split(zeros({0, 3}), 2).size() == 1);
}

TEST_CASE("split is one node whose gradient joins the parts' gradients", "[join][grad]") {
  Tensor x = zeros({3, 4}, {.dtype = DType::f64}).requires_grad_();
  std::vector<Tensor> p = split(x, std::vector<int64_t>{1, 2, 1}, 1);
  REQUIRE(p.size() == 3);
  CHECK(p[0].grad_fn() == p[2].grad_fn());  // one node, three outputs (PyTorch's SplitWithSizesBackward)
  CHECK(p[2].impl()->output_nr == 2);
  CHECK(p[1].storage().get() == x.storage().get());
  // part 1 unused: its columns get zeros; the others their own factors
  (p[0] * 2.0 + p[2] * 3.0).sum().backward();
  CHECK(x.grad().to_vector<double>() == std::vector<double>{2, 0, 0, 3, 2, 0, 0, 3, 2, 0, 0, 3});
  CHECK_GRADIENTS([](const V& v) {
    std::vector<Tensor> q = split(v[0], 2, -1);  // [3, 2] each
    return q[0] * q[1] + q[2].exp();
  }, input({3, 6}));
  CHECK_GRADIENTS([](const V& v) {  // a view of a transposed input, a part unused
    std::vector<Tensor> q = chunk(v[0].t(), 3, 0);
    return cat({q[2], q[0].sin()}, 0);
  }, input({2, 6}));
  // a part written in place: the other parts and x still see the new values' history
  CHECK_GRADIENTS([](const V& v) {
    Tensor y = v[0] * 1.0;
    std::vector<Tensor> q = split(y, 2, 0);
    q[0].mul_(v[1]);
    return q[1] * y.narrow(0, 0, 2) + q[0];
  }, input({4, 3}), input({2, 3}));
}

TEST_CASE("join gradients match finite differences", "[join][grad]") {
  CHECK_GRADIENTS([](const V& v) { return cat({v[0], v[1]}, 0); }, input({2, 3}), input({4, 3}));
  CHECK_GRADIENTS([](const V& v) { return cat({v[0], v[1].t(), v[0]}, 1); }, input({3, 2}), input({1, 3}));
  CHECK_GRADIENTS([](const V& v) { return stack({v[0], v[1], v[0]}, 1); }, input({2, 3}), input({2, 3}));
  CHECK_GRADIENTS([](const V& v) { return split(v[0], 2, 1)[1] * split(v[0], 2, 1)[0]; }, input({3, 4}));
  CHECK_GRADIENTS([](const V& v) {
    std::vector<Tensor> c = chunk(v[0], 3, 0);
    return cat({c[2], c[0]}, 0);
  }, input({7, 2}));
  // only the input that requires grad gets one
  Tensor a = input({2}), b = zeros({3}, {.dtype = DType::f64});
  cat({b, a}).sum().backward();
  CHECK(a.grad().to_vector<double>() == std::vector<double>{1, 1});
  CHECK_FALSE(b.grad().defined());
}

TEST_CASE("join errors name the op and the shapes", "[join][errors]") {
  std::string m = message_of([] { cat({zeros({2, 3}), zeros({2, 4})}); });
  CHECK(has(m, "cat"));
  CHECK(has(m, "[2, 3]"));
  CHECK(has(m, "[2, 4]"));
  CHECK(has(m, "dim 0"));
  CHECK(has(m, "test_join.cpp"));
  m = message_of([] { cat({zeros({2, 3}), zeros({2, 3, 1})}, 1); });
  CHECK(has(m, "[2, 3, 1]"));
  m = message_of([] { cat({zeros({2}), zeros({2}, {.dtype = DType::f64})}); });
  CHECK(has(m, "f32"));
  CHECK(has(m, "f64"));
  CHECK(has(message_of([] { cat({}); }), "empty list"));
  CHECK(has(message_of([] { cat({zeros({2})}, 1); }), "dim 1"));
  CHECK(has(message_of([] { cat({scalar_tensor(1)}); }), "0-d"));
  m = message_of([] { stack({zeros({2, 3}), zeros({3, 2})}); });
  CHECK(has(m, "stack"));
  CHECK(has(m, "[2, 3]"));
  CHECK(has(m, "[3, 2]"));
  CHECK(has(message_of([] { stack({zeros({2}), zeros({2})}, 3); }), "stack"));
  m = message_of([] { split(zeros({4, 2}), 0); });
  CHECK(has(m, "split"));
  CHECK(has(m, "[4, 2]"));
  CHECK(has(message_of([] { chunk(zeros({4}), 0); }), "chunk"));
  CHECK(has(message_of([] { split(zeros({4}), 2, 1); }), "split"));
}
