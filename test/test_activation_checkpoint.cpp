// autograd::checkpoint: gradients equal to the plain computation's (inputs and the
// weights fn closes over), dropout masks replayed, the random stream left as the
// plain computation leaves it.
#include <catch2/catch.hpp>
#include <reel/reel.h>

#include "gradcheck.h"

using namespace reel;
using reel::test::gradcheck;
using reel::test::input;
using V = std::vector<Tensor>;

TEST_CASE("checkpoint's gradient matches finite differences and the plain computation", "[checkpoint_fn][gradcheck]") {
  auto f = [](const V& v) { return V{tanh(matmul(v[0], v[1])) * 2.0 + v[0].sum()}; };
  Tensor x = input({3, 4}), w = input({4, 4});
  CHECK(gradcheck([&](const V& v) { return autograd::checkpoint(f, v)[0]; }, {x, w}) == "");

  Tensor plain = f({x, w})[0];
  V g_plain = autograd::grad({plain.sum()}, {x, w});
  Tensor ck = autograd::checkpoint(f, {x, w})[0];
  CHECK(allclose(ck, plain, 0, 0));
  V g_ck = autograd::grad({ck.sum()}, {x, w});
  CHECK(allclose(g_ck[0], g_plain[0], 1e-12, 1e-14));
  CHECK(allclose(g_ck[1], g_plain[1], 1e-12, 1e-14));
}

TEST_CASE("checkpoint gives a module's weights their gradients", "[checkpoint_fn]") {
  manual_seed(1);
  nn::Sequential block{nn::Linear(5, 6), nn::GELU(), nn::Linear(6, 5)};
  Tensor x = randn({4, 5}).requires_grad_();
  square(block(x)).sum().backward();
  Tensor gw = block.at<nn::Linear>(0).weight.grad().clone(), gx = x.grad().clone();
  block.zero_grad();
  x.set_grad(Tensor());
  square(autograd::checkpoint([&](const Tensor& t) { return block(t); }, x)).sum().backward();
  CHECK(allclose(block.at<nn::Linear>(0).weight.grad(), gw, 1e-5, 1e-6));
  CHECK(allclose(x.grad(), gx, 1e-5, 1e-6));
}

TEST_CASE("checkpoint replays the forward's dropout mask and leaves the random stream in place",
          "[checkpoint_fn]") {
  auto f = [](const Tensor& t) { return dropout(t * 3.0, 0.5); };
  manual_seed(7);
  Tensor x = ones({64}, {.dtype = DType::f64}).requires_grad_();
  Tensor y = autograd::checkpoint(f, x);
  Tensor after_forward = rand({4});  // drawn between the forward and the backward
  y.sum().backward();
  // the recomputed mask is the forward's: d y / d x = 6 where y kept the element, else 0
  CHECK(allclose(x.grad(), (y.detach() != 0.0).to(DType::f64) * 6.0, 0, 0));
  Tensor after_backward = rand({4});

  manual_seed(7);
  Tensor y2 = f(ones({64}, {.dtype = DType::f64}));
  CHECK(allclose(y2, y.detach(), 0, 0));
  CHECK(allclose(rand({4}), after_forward, 0, 0));
  CHECK(allclose(rand({4}), after_backward, 0, 0));  // the backward's recompute drew nothing for good
}

TEST_CASE("checkpoint's errors", "[checkpoint_fn]") {
  Tensor x = input({3});
  Tensor y = autograd::checkpoint([](const Tensor& t) { return t * t; }, x);
  CHECK_THROWS_WITH(autograd::grad({y.sum()}, {x}, {}, {.create_graph = true}), Catch::Contains("create_graph"));
  CHECK_THROWS_WITH(autograd::checkpoint(autograd::CheckpointFn(), {x}), Catch::Contains("fn is empty"));
  // fn returning its input: the output is a handle of its own, the input stays a leaf
  Tensor same = autograd::checkpoint([](const Tensor& t) { return t; }, x);
  CHECK(x.is_leaf());
  same.sum().backward();
  CHECK(allclose(x.grad(), ones_like(x), 0, 0));
}
