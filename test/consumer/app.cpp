// Trains y = 2x + 1 for a few steps against the installed package; exits 0 on success.
#include <reel/reel.h>

#include <cmath>
#include <cstdio>

int main() {
  reel::Tensor x = reel::tensor({0.0, 1.0, 2.0, 3.0}).reshape({4, 1});
  reel::Tensor y = x * 2.0 + 1.0;
  reel::Tensor w = reel::zeros({1, 1}).requires_grad_();
  reel::Tensor b = reel::zeros({1}).requires_grad_();
  for (int step = 0; step < 500; ++step) {
    reel::Tensor loss = reel::mse_loss(reel::linear(x, w, b), y);
    loss.backward();
    reel::NoGradGuard guard;
    w.add_(w.grad(), -0.05);
    b.add_(b.grad(), -0.05);
    w.grad().zero_();
    b.grad().zero_();
  }
  float wv = w.item<float>(), bv = b.item<float>();
  std::printf("w = %.3f, b = %.3f\n", wv, bv);
  return std::abs(wv - 2.0f) < 0.05f && std::abs(bv - 1.0f) < 0.05f ? 0 : 1;
}
