// The kernels the everyday ops added (Backend::sort, cumulative, scatter) and the ops
// built on them give the CPU's results on the GPU, gradients included.
#include "compare.h"

using namespace reel;
using cuda_test::leaf;
using V = std::vector<Tensor>;

TEST_CASE("sort, topk, argsort and max/min with indices match the CPU", "[cuda][everyday]") {
  manual_seed(3);
  Tensor x = leaf({17, 300});
  CHECK_SAME_ON_GPU([](const V& v) { return sort(v[0], 1).values; }, {x});
  CHECK_SAME_ON_GPU([](const V& v) { return sort(v[0], 0, true).values; }, {x});
  CHECK_SAME_ON_GPU([](const V& v) { return sort(v[0].t(), 1).indices; }, {x});
  CHECK_SAME_ON_GPU([](const V& v) { return topk(v[0], 5).values; }, {x});
  CHECK_SAME_ON_GPU([](const V& v) { return topk(v[0], 5, 0, false).indices; }, {x});
  CHECK_SAME_ON_GPU([](const V& v) { return argsort(v[0], 1, true); }, {x});
  CHECK_SAME_ON_GPU([](const V& v) { return max(v[0], 1).values; }, {x});
  // NaN above every number, -0 kept, ties in order, integers
  Tensor special = tensor({1, NAN, -1, 0, -0.0, 3, -INFINITY, 1});
  CHECK_SAME_ON_GPU([](const V& v) { return sort(v[0]).indices; }, {special});
  CHECK_SAME_ON_GPU([](const V& v) { return sort(v[0], -1, true).indices; }, {special});
  Tensor ints = randint(-5, 5, {4, 50});
  CHECK_SAME_ON_GPU([](const V& v) { return sort(v[0], 1).indices; }, {ints});
}

TEST_CASE("cumsum and cumprod match the CPU", "[cuda][everyday]") {
  manual_seed(4);
  Tensor x = leaf({33, 65}, 0.5, 1.5);
  CHECK_SAME_ON_GPU([](const V& v) { return cumsum(v[0], 1); }, {x});
  CHECK_SAME_ON_GPU([](const V& v) { return cumsum(v[0].t(), 1); }, {x});
  CHECK_SAME_ON_GPU([](const V& v) { return cumprod(v[0].narrow(1, 0, 10), 1); }, {x}, 1e-4);
  Tensor ints = randint(0, 9, {5, 7});
  CHECK_SAME_ON_GPU([](const V& v) { return cumsum(v[0], 0); }, {ints});
}

TEST_CASE("scatter, index_put and multinomial on the GPU", "[cuda][everyday]") {
  manual_seed(5);
  Tensor x = leaf({4, 6}), src = leaf({2, 6});
  Tensor perm = from_vector<int64_t>({0, 1, 2, 3, 0, 1, 3, 2, 1, 0, 2, 3}, {2, 6});
  CHECK_SAME_ON_GPU([perm](const V& v) { return scatter(v[0], 0, perm.to(v[0].device()), v[1]); }, {x, src});
  CHECK_SAME_ON_GPU([perm](const V& v) { return scatter_add(v[0], 0, perm.to(v[0].device()), v[1]); }, {x, src});
  Tensor p = tensor({0.1, 0.0, 0.6, 0.3}).to(Device::cuda(0));
  std::vector<int64_t> counts(4, 0);
  for (int64_t v : multinomial(p, 20000, true).cpu().to_vector<int64_t>()) ++counts[size_t(v)];
  CHECK(counts[1] == 0);
  CHECK(std::abs(counts[2] / 20000.0 - 0.6) < 0.015);
}
