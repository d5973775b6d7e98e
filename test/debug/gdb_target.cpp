// A small program for test/debug/gdb_printers.cmake: gdb stops in reel_gdb_stop()
// (or at REEL_BREAK_ON=exp) and prints the tensors of main's frame.
#include <reel/reel.h>

// Not inlined, so gdb can break on it; the caller's frame holds the tensors.
__attribute__((noinline)) void reel_gdb_stop() { asm volatile(""); }

// A two-level model: the output's grad_fn is the linear of block.lin, made on the
// marked line inside Block::forward.
struct Block : reel::nn::Module {
  reel::nn::Linear lin{2, 2};
  Block() { register_module("lin", lin); }
  reel::Tensor forward(const reel::Tensor& x) override {
    return lin(reel::tanh(x));  // gdb line: block
  }
};
struct Model : reel::nn::Module {
  Block block;
  Model() { register_module("block", block); }
  reel::Tensor forward(const reel::Tensor& x) override { return block(x); }
};

int main() {
  reel::Tensor t = reel::arange(0.0, 6.0).reshape({3, 2}).t();  // a strided view: [[0, 2, 4], [1, 3, 5]]
  reel::Tensor w = reel::full({2, 3}, 0.5).requires_grad_();
  reel::Tensor y = t * w;  // gdb line: mul
  reel::Tensor big = reel::arange(0.0, 100.0, 1.0, {.dtype = reel::DType::f64});
  reel::Tensor flags = reel::gt(t, 2.0);
  reel::Tensor none;
  reel::Tensor e = reel::exp(w);  // gdb line: exp
  Model model;
  reel::Tensor m = model(t.t());
  reel_gdb_stop();
  return int(y.numel() + big.numel() + flags.numel() + e.numel() + m.numel()) - 124 + int(none.defined());
}
