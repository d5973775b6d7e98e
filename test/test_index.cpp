// Indexing: embedding, index_select, gather, one_hot. Values by hand, gradients by
// finite differences (repeated indices included), errors by class.
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
Tensor idx(std::vector<int64_t> v, const Dims& shape = {}) { return from_vector<int64_t>(v, shape); }
}  // namespace

TEST_CASE("embedding looks up rows for any-shaped indices", "[index]") {
  Tensor w = arange(0.0, 12.0).reshape({4, 3});
  Tensor y = embedding(w, idx({3, 0, 3, 1}, {2, 2}));
  CHECK(y.shape() == Dims{2, 2, 3});
  CHECK(y.to_vector<float>() == std::vector<float>{9, 10, 11, 0, 1, 2, 9, 10, 11, 3, 4, 5});
  Tensor s = embedding(w, scalar_tensor(2, {.dtype = DType::i64}));  // 0-d index: one row
  CHECK(s.shape() == Dims{3});
  CHECK(s.to_vector<float>() == std::vector<float>{6, 7, 8});
  // a transposed (non-contiguous) weight
  Tensor wt = arange(0.0, 12.0).reshape({3, 4}).t();  // [4, 3]
  CHECK(embedding(wt, idx({1})).to_vector<float>() == std::vector<float>{1, 5, 9});
}

TEST_CASE("embedding gradient accumulates repeated indices", "[index][grad]") {
  Tensor w = zeros({4, 2}).requires_grad_();
  embedding(w, idx({1, 3, 1, 1})).sum().backward();
  CHECK(w.grad().to_vector<float>() == std::vector<float>{0, 0, 3, 3, 0, 0, 1, 1});
  Tensor rep = idx({2, 0, 2, 2, 1, 0}, {2, 3});
  CHECK_GRADIENTS([rep](const V& v) { return embedding(v[0], rep); }, input({5, 3}));
  CHECK_GRADIENTS([rep](const V& v) { return embedding(v[0].t(), rep); }, input({3, 5}));  // strided weight
  // large enough to run the parallel accumulation
  Tensor big = randint(0, 7, {5000});
  Tensor wb = zeros({7, 64}).requires_grad_();
  embedding(wb, big).sum().backward();
  std::vector<int64_t> counts(7, 0);
  for (int64_t i : big.to_vector<int64_t>()) ++counts[size_t(i)];
  std::vector<float> g = wb.grad().to_vector<float>();
  for (size_t r = 0; r < 7; ++r) CHECK(g[r * 64 + 63] == float(counts[r]));
}

TEST_CASE("embedding padding_idx: its row gets no gradient", "[index][grad]") {
  Tensor w = arange(0.0, 8.0).reshape({4, 2}).detach().requires_grad_();
  Tensor y = embedding(w, idx({1, 2, 1, 0}), {.padding_idx = 1});
  CHECK(y.to_vector<float>() == std::vector<float>{2, 3, 4, 5, 2, 3, 0, 1});  // the lookup itself is unchanged
  (y * 2.0).sum().backward();
  CHECK(w.grad().to_vector<float>() == std::vector<float>{2, 2, 0, 0, 2, 2, 0, 0});
  // negative: from the end (-1 is row 3)
  Tensor w2 = zeros({4, 2}).requires_grad_();
  embedding(w2, idx({3, 0, 3}), {.padding_idx = -1}).sum().backward();
  CHECK(w2.grad().to_vector<float>() == std::vector<float>{1, 1, 0, 0, 0, 0, 0, 0});
  // f64 against the unpadded gradient with the padding row zeroed
  Tensor rep = idx({2, 0, 2, 4, 1, 0}, {2, 3});
  Tensor wd = input({5, 3}), r = randn({2, 3, 3}, {.dtype = DType::f64});
  Tensor with = autograd::grad({(embedding(wd, rep, {.padding_idx = 2}) * r).sum()}, {wd})[0];
  Tensor without = autograd::grad({(embedding(wd, rep) * r).sum()}, {wd})[0];
  without.select(0, 2).fill_(0.0);
  CHECK(allclose(with, without, 0, 1e-15));
  // twice differentiable, padding or not
  CHECK_SECOND_GRADIENTS([rep](const V& v) { return square(embedding(v[0], rep)); }, input({5, 3}));
  CHECK_SECOND_GRADIENTS([rep](const V& v) { return square(embedding(v[0], rep, {.padding_idx = -3})); }, input({5, 3}));
  // out of range
  std::string m = message_of([&] { embedding(w, idx({0}), {.padding_idx = 4}); });
  CHECK(has(m, "embedding"));
  CHECK(has(m, "padding_idx 4"));
  CHECK(has(m, "-4 to 3"));
  CHECK(has(message_of([&] { embedding(w, idx({0}), {.padding_idx = -5}); }), "padding_idx -5"));
}

TEST_CASE("index_select picks along any dim, for floats and integers", "[index]") {
  Tensor x = arange(0.0, 24.0).reshape({2, 3, 4});
  CHECK(index_select(x, 0, idx({1})).to_vector<float>() ==
        std::vector<float>{12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23});
  CHECK(index_select(x, 1, idx({2, 0})).to_vector<float>() ==
        std::vector<float>{8, 9, 10, 11, 0, 1, 2, 3, 20, 21, 22, 23, 12, 13, 14, 15});
  Tensor last = index_select(x, -1, idx({3, 3, 0}));
  CHECK(last.shape() == Dims{2, 3, 3});
  CHECK(last.to_vector<float>()[0] == 3);
  CHECK(last.to_vector<float>()[2] == 0);
  CHECK(last.to_vector<float>()[17] == 20);
  Tensor xi = arange(10);  // i64
  CHECK(index_select(xi, 0, idx({9, 2, 2})).to_vector<int64_t>() == std::vector<int64_t>{9, 2, 2});
  Tensor x32 = arange(0.0, 6.0, 1.0, {.dtype = DType::i32}).reshape({2, 3});
  CHECK(index_select(x32, 1, idx({2})).to_vector<int32_t>() == std::vector<int32_t>{2, 5});
  // from a non-contiguous input
  Tensor xt = x.permute({2, 0, 1});  // [4, 2, 3]
  CHECK(index_select(xt, 0, idx({1})).to_vector<float>() == std::vector<float>{1, 5, 9, 13, 17, 21});
  CHECK(index_select(x, 1, idx({})).shape() == Dims{2, 0, 4});
}

TEST_CASE("index_select of whole rows, large enough for the thread pool", "[index]") {
  // the row-gather path: rows of 700 elements, contiguous or strided, picked with repeats
  manual_seed(11);
  Tensor x = randn({900, 700});
  std::vector<int64_t> picks = randint(0, 900, {301}).to_vector<int64_t>();
  picks[7] = picks[8];
  for (Tensor src : {x, x.t().contiguous().t()}) {
    Tensor out = index_select(src, 0, from_vector<int64_t>(picks));
    REQUIRE(out.shape() == Dims{301, 700});
    std::vector<float> o = out.to_vector<float>(), all = src.contiguous().to_vector<float>();
    bool same = true;
    for (size_t j = 0; j < picks.size(); ++j)
      for (size_t c = 0; c < 700; ++c) same = same && o[j * 700 + c] == all[size_t(picks[j]) * 700 + c];
    CHECK(same);
  }
}

TEST_CASE("index_select gradients, repeated indices and views", "[index][grad]") {
  Tensor rep = idx({2, 0, 2, 3, 2});
  CHECK_GRADIENTS([rep](const V& v) { return index_select(v[0], 0, rep); }, input({4, 3}));
  CHECK_GRADIENTS([rep](const V& v) { return index_select(v[0], 1, rep); }, input({2, 4, 3}));
  CHECK_GRADIENTS([rep](const V& v) { return index_select(v[0], -1, rep); }, input({3, 4}));
  CHECK_GRADIENTS([rep](const V& v) { return index_select(v[0].t(), 1, rep); }, input({4, 3}));
  Tensor x = zeros({3}).requires_grad_();
  index_select(x, 0, idx({0, 0, 0, 2})).sum().backward();
  CHECK(x.grad().to_vector<float>() == std::vector<float>{3, 0, 1});
}

TEST_CASE("gather picks per position along dim", "[index]") {
  Tensor x = tensor({{1, 2, 3}, {4, 5, 6}});
  CHECK(gather(x, 1, idx({2, 0, 1, 1}, {2, 2})).to_vector<float>() == std::vector<float>{3, 1, 5, 5});
  CHECK(gather(x, 0, idx({1, 0, 1}, {1, 3})).to_vector<float>() == std::vector<float>{4, 2, 6});
  // index smaller than the input in the other dims
  CHECK(gather(x, 1, idx({0}, {1, 1})).to_vector<float>() == std::vector<float>{1});
  // non-contiguous input and integer dtype
  CHECK(gather(x.t(), 0, idx({1, 0}, {1, 2})).to_vector<float>() == std::vector<float>{2, 4});
  Tensor xi = arange(6).reshape({2, 3});
  CHECK(gather(xi, 1, idx({1, 1}, {2, 1})).to_vector<int64_t>() == std::vector<int64_t>{1, 4});
}

TEST_CASE("gather gradients accumulate repeated positions", "[index][grad]") {
  Tensor i1 = idx({0, 0, 2, 1, 1, 1, 3, 0, 3}, {3, 3});
  CHECK_GRADIENTS([i1](const V& v) { return gather(v[0], 1, i1); }, input({3, 4}));
  Tensor i0 = idx({2, 0, 2, 2, 1, 0}, {2, 3});
  CHECK_GRADIENTS([i0](const V& v) { return gather(v[0], 0, i0); }, input({3, 4}));
  CHECK_GRADIENTS([i0](const V& v) { return gather(v[0].t(), 0, i0); }, input({4, 3}));
  Tensor i3 = idx({1, 0, 1, 1}, {1, 2, 2});
  CHECK_GRADIENTS([i3](const V& v) { return gather(v[0], 2, i3); }, input({2, 2, 3}));
  Tensor x = zeros({1, 3}).requires_grad_();
  gather(x, 1, idx({2, 2, 0}, {1, 3})).sum().backward();
  CHECK(x.grad().to_vector<float>() == std::vector<float>{1, 0, 2});
}

TEST_CASE("index_select and gather are twice differentiable (create_graph)", "[index][grad][grad2]") {
  // L = sum gather(x)^2 with x picked at [2, 2, 0]: dL/dx = [2 x0, 0, 4 x2], so d/dx sum(dL/dx) = [2, 0, 4]
  Tensor x = tensor({1, 2, 3}, {.dtype = DType::f64}).reshape({1, 3}).detach().requires_grad_();
  Tensor g = autograd::grad({square(gather(x, 1, idx({2, 2, 0}, {1, 3}))).sum()}, {x}, {}, {.create_graph = true})[0];
  CHECK(g.to_vector<double>() == std::vector<double>{2, 0, 12});
  CHECK(autograd::grad({g.sum()}, {x})[0].to_vector<double>() == std::vector<double>{2, 0, 4});
  Tensor gs = autograd::grad({square(index_select(x, 1, idx({0, 2, 0}))).sum()}, {x}, {}, {.create_graph = true})[0];
  CHECK(gs.to_vector<double>() == std::vector<double>{4, 0, 6});
  CHECK(autograd::grad({gs.sum()}, {x})[0].to_vector<double>() == std::vector<double>{4, 0, 2});

  // linear ops: the second derivative flows through the incoming gradient only
  Tensor rep = idx({2, 0, 2, 3, 2});
  CHECK_SECOND_GRADIENTS([rep](const V& v) { return index_select(v[0], 1, rep); }, input({2, 4, 3}));
  CHECK_SECOND_GRADIENTS([rep](const V& v) { return square(index_select(v[0], 0, rep)); }, input({4, 3}));
  CHECK_SECOND_GRADIENTS([rep](const V& v) { return square(index_select(v[0].t(), -1, rep)); }, input({4, 3}));
  Tensor i1 = idx({0, 0, 2, 1, 1, 1, 3, 0, 3}, {3, 3});
  CHECK_SECOND_GRADIENTS([i1](const V& v) { return gather(v[0], 1, i1); }, input({3, 4}));
  CHECK_SECOND_GRADIENTS([i1](const V& v) { return square(gather(v[0], 1, i1)); }, input({3, 4}));
  Tensor i0 = idx({2, 0, 2, 2, 1, 0}, {2, 3});
  CHECK_SECOND_GRADIENTS([i0](const V& v) { return square(gather(v[0].t(), 0, i0)); }, input({4, 3}));
  Tensor i3 = idx({1, 0, 1, 1}, {1, 2, 2});
  CHECK_SECOND_GRADIENTS([i3](const V& v) { return mul(gather(v[0], 2, i3), exp(gather(v[0], 2, i3))); },
                         input({2, 2, 3}));
}

TEST_CASE("one_hot", "[index]") {
  Tensor y = one_hot(idx({2, 0, 1}), 4);
  CHECK(y.shape() == Dims{3, 4});
  CHECK(y.dtype() == DType::f32);
  CHECK(y.to_vector<float>() == std::vector<float>{0, 0, 1, 0, 1, 0, 0, 0, 0, 1, 0, 0});
  CHECK(one_hot(idx({1, 1}, {2, 1}), 2).shape() == Dims{2, 1, 2});
}

TEST_CASE("index errors name the op, the index and the dim size", "[index][errors]") {
  Tensor w = zeros({5, 3});
  std::string m = message_of([&] { embedding(w, idx({0, 5})); });
  CHECK(has(m, "embedding"));
  CHECK(has(m, "index 5"));
  CHECK(has(m, "size 5"));
  CHECK(has(m, "[5, 3]"));
  CHECK(has(m, "test_index.cpp"));
  m = message_of([&] { embedding(w, tensor({1, 2})); });  // float indices
  CHECK(has(m, "i64"));
  CHECK(has(m, "f32"));
  m = message_of([&] { index_select(w, 1, idx({0, -1})); });
  CHECK(has(m, "index_select"));
  CHECK(has(m, "index -1"));
  CHECK(has(m, "size 3"));
  m = message_of([&] { index_select(w, 2, idx({0})); });
  CHECK(has(m, "index_select"));
  CHECK(has(m, "dim 2"));
  m = message_of([&] { index_select(w, 0, idx({0, 1}, {1, 2})); });
  CHECK(has(m, "1-D"));
  m = message_of([&] { gather(w, 1, idx({0, 3}, {1, 2})); });
  CHECK(has(m, "gather"));
  CHECK(has(m, "index 3"));
  m = message_of([&] { gather(w, 1, idx({0, 1}, {2})); });
  CHECK(has(m, "gather"));
  CHECK(has(m, "[5, 3]"));
  CHECK(has(m, "[2]"));
  m = message_of([&] { gather(w, 1, zeros({6, 1}, {.dtype = DType::i64})); });
  CHECK(has(m, "[6, 1]"));
  m = message_of([&] { one_hot(idx({0, 4}), 4); });
  CHECK(has(m, "one_hot"));
  CHECK(has(m, "index 4"));
  CHECK(has(message_of([&] { one_hot(idx({0}), 0); }), "num_classes"));
}
