// batch_norm_relu, add_relu and the channel-blocked batch_norm_relu_blocked and
// conv2d_blocked against PyTorch 1.13's unfused relu(batch_norm(cat)), relu(a + b),
// reshape/permute and conv2d on test/reference/fused17.txt (made by
// test/reference/fused17.py): outputs, running statistics and every gradient, with NaN,
// inf and empty inputs.
#include "torch_table.h"

using namespace reel;
using namespace reel::test;

namespace {
const Table& table() {
  static const Table t = load_torch_table("fused17.txt");
  return t;
}

// The case's pieces x0, x1, ... as leaves; runs batch_norm_relu (batch_norm_relu_blocked
// where the case has a "block"), backward with g, and checks y, the running statistics and
// the gradients.
void check_bn_relu(const std::string& name, bool training) {
  Case c = find_case(table(), name);
  std::vector<Tensor> xs;
  for (int i = 0; c.m.count("x" + std::to_string(i)); ++i) xs.push_back(c.in("x" + std::to_string(i)).clone().requires_grad_());
  Tensor w = c.in("w").clone().requires_grad_(), b = c.in("b").clone().requires_grad_();
  Tensor rm = c.in("rm").clone(), rv = c.in("rv").clone();
  Tensor y = c.m.count("block")
                 ? batch_norm_relu_blocked(xs, w, b, rm, rv, training, 0.1, 1e-5, c.in("block").item<int64_t>())
                 : batch_norm_relu(xs, w, b, rm, rv, training, 0.1, 1e-5);
  CHECK_MATCHES(y, c, "y");
  CHECK_MATCHES(rm, c, "rm");
  CHECK_MATCHES(rv, c, "rv");
  y.backward(c.in("g"));
  for (size_t i = 0; i < xs.size(); ++i) CHECK_MATCHES(xs[i].grad(), c, "gx" + std::to_string(i), 1e-4);
  CHECK_MATCHES(w.grad(), c, "gw", 1e-4);
  CHECK_MATCHES(b.grad(), c, "gb", 1e-4);
}

// conv2d_blocked, or conv2d when not `blocked`
void check_conv(const std::string& name, bool blocked) {
  Case c = find_case(table(), name);
  Tensor x = c.in("x").clone().requires_grad_(), w = c.in("w").clone().requires_grad_(),
         b = c.in("b").clone().requires_grad_();
  const Conv2dOptions opt{.padding = c.in("padding").item<int64_t>()};
  Tensor y = blocked ? conv2d_blocked(x, w, b, opt) : conv2d(x, w, b, opt);
  CHECK_MATCHES(y, c, "y", 1e-4);
  y.backward(c.in("g"));
  CHECK_MATCHES(x.grad(), c, "gx", 1e-4);
  CHECK_MATCHES(w.grad(), c, "gw", 1e-4);
  CHECK_MATCHES(b.grad(), c, "gb", 1e-4);
}
}  // namespace

TEST_CASE("batch_norm_relu_blocked matches PyTorch's blocked relu(batch_norm(cat)), non-finite and empty inputs included",
          "[channel_blocks][torch]") {
  check_bn_relu("bn_relu_blocked_train", true);
  check_bn_relu("bn_relu_blocked_eval", false);
  check_bn_relu("bn_relu_blocked_b8", true);
  check_bn_relu("bn_relu_blocked_eval_nonfinite", false);
  check_bn_relu("bn_relu_blocked_train_nonfinite", true);
  check_bn_relu("bn_relu_blocked_empty", false);
}

TEST_CASE("conv2d_blocked matches PyTorch's conv2d of the unblocked input, non-finite and empty inputs included",
          "[channel_blocks][torch]") {
  check_conv("conv_blocked", true);
  check_conv("conv_blocked_b8", true);
  check_conv("conv_blocked_nonfinite", true);
  check_conv("conv_blocked_empty", true);
}

TEST_CASE("1x1 conv2d (the batched weight-gradient product) matches PyTorch, non-finite and empty inputs included",
          "[conv][torch]") {
  check_conv("conv1x1", false);
  check_conv("conv1x1_nonfinite", false);
  check_conv("conv1x1_empty", false);
}

TEST_CASE("batch_norm_relu matches PyTorch's relu(batch_norm(cat))", "[bn_relu][torch]") {
  check_bn_relu("bn_relu_train", true);
  check_bn_relu("bn_relu_eval", false);
  check_bn_relu("bn_relu_2d", true);
}

TEST_CASE("batch_norm_relu matches PyTorch on NaN, inf and empty inputs", "[bn_relu][torch]") {
  check_bn_relu("bn_relu_eval_nonfinite", false);
  check_bn_relu("bn_relu_train_nonfinite", true);
  check_bn_relu("bn_relu_empty", false);
}

TEST_CASE("add_relu matches PyTorch's relu(a + b), non-finite and empty inputs included", "[add_relu][torch]") {
  Case c = find_case(table(), "add_relu");
  Tensor a = c.in("a").clone().requires_grad_(), b = c.in("b").clone().requires_grad_();
  Tensor y = add_relu(a, b);
  CHECK_MATCHES(y, c, "y");
  y.backward(c.in("g"));
  CHECK_MATCHES(a.grad(), c, "ga");
  CHECK_MATCHES(b.grad(), c, "gb");
  Case e = find_case(table(), "add_relu_empty");
  CHECK_MATCHES(add_relu(e.in("a"), e.in("b")), e, "y");
}
