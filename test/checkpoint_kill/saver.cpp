// The process the checkpoint kill-test kills. Usage:
//   checkpoint_saver loop PATH    checks PATH as `check` does (printing "whole" or
//                                 failing), then saves step 1, 2, ... to PATH until killed
//   checkpoint_saver once PATH    one save, then exit
//   checkpoint_saver check PATH   exit 0 when PATH is a whole checkpoint of one step
// Each checkpoint holds "w" (2^20 floats, all equal to the step: 4 MiB, so that a kill
// often lands mid-write) and "step", and the step in its metadata.
#include <reel/reel.h>

#include <cstdio>
#include <string>

using namespace reel;

namespace {

void save_step(const std::string& path, int64_t step) {
  Tensor w = full({int64_t(1) << 20}, double(step));
  Tensor s = from_vector<int64_t>({step});
  safetensors::save(path, {{"w", w}, {"step", s}}, {{"step", std::to_string(step)}});
}

int check(const std::string& path) {
  safetensors::File f = safetensors::load(path);
  int64_t step = std::stoll(f.metadata.at("step"));
  if (f.at("step").item<int64_t>() != step) return std::fprintf(stderr, "%s: step tensor differs\n", path.c_str()), 1;
  Tensor w = f.at("w");
  if (w.numel() != int64_t(1) << 20) return std::fprintf(stderr, "%s: w has %ld elements\n", path.c_str(), long(w.numel())), 1;
  for (float v : w.to_vector<float>())
    if (v != float(step)) return std::fprintf(stderr, "%s: w holds %g in a checkpoint of step %ld\n", path.c_str(), v, long(step)), 1;
  std::printf("%s: a whole checkpoint of step %ld\n", path.c_str(), long(step));
  std::fflush(stdout);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) return std::fprintf(stderr, "usage: %s loop|once|check PATH\n", argv[0]), 2;
  std::string mode = argv[1], path = argv[2];
  try {
    if (mode == "check") return check(path);
    if (mode == "once") return save_step(path, 1), 0;
    if (check(path) != 0) return 1;  // what the previous, killed, process left
    for (int64_t step = 1;; ++step) {
      save_step(path, step);
      if (step == 1) std::printf("saving\n"), std::fflush(stdout);  // the test kills from here on
    }
  } catch (const Error& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
}
