// onnx::export_model on a full disk (the file size limit below the model's size): an
// Error naming the file and the cause, the previous .onnx whole, no temporary left.
// The other writers have the same check in test/test_atomic_file.cpp.
#include <reel/onnx/export.h>
#include <reel/reel.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>

#include "../file_limit.h"

using namespace reel;
namespace fs = std::filesystem;

int main() {
  std::string t = (fs::temp_directory_path() / "reel_onnx_full_XXXXXX").string();
  fs::path dir = mkdtemp(t.data());
  std::string path = (dir / "model.onnx").string();
  int failures = 0;
  auto check = [&](bool ok, const char* what) {
    if (!ok) std::fprintf(stderr, "FAILED: %s\n", what), ++failures;
  };
  nn::Sequential small{nn::Linear(2, 2)};
  onnx::export_model(small, {randn({1, 2})}, path);
  std::string before = test::file_bytes(path);
  check(!before.empty(), "the first export wrote a file");
  nn::Sequential big{nn::Linear(64, 64), nn::ReLU(), nn::Linear(64, 10)};
  std::string error =
      test::error_with_file_limit(uint64_t(before.size()), [&] { onnx::export_model(big, {randn({1, 64})}, path); });
  check(error.find(path) != std::string::npos && error.find("File too large") != std::string::npos,
        "the error names the file and the cause");
  check(test::file_bytes(path) == before, "the previous model is intact");
  check(test::temporaries_in(dir).empty(), "no temporary is left");
  fs::remove_all(dir);
  if (failures) std::fprintf(stderr, "error was: %s\n", error.c_str());
  else std::printf("onnx full disk: the previous model intact, no temporary (%s)\n", error.c_str());
  return failures ? 1 : 0;
}
