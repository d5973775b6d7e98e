// Exports a small model with the installed libreel_onnx (the README's target reel::onnx); exits 0 when
// the file is written.
#include <reel/onnx/export.h>
#include <reel/reel.h>

#include <cstdio>
#include <filesystem>

int main() {
  reel::nn::Sequential model{reel::nn::Linear(4, 8), reel::nn::ReLU(), reel::nn::Linear(8, 2)};
  model.eval();
  reel::onnx::export_model(model, {reel::randn({3, 4})}, "consumer.onnx");
  auto size = std::filesystem::file_size("consumer.onnx");
  std::printf("consumer.onnx: %ju bytes\n", uintmax_t(size));
  return size > 0 ? 0 : 1;
}
