// A path switch of the CUDA backend (REEL_CUDNN_RNN, REEL_CUDA_BN_RELU): read from its
// environment variable at the first call that asks, unless a setter chose first; then fixed
// for the process. A value the parser refuses is an Error at that first call, naming it.
#pragma once
#include <atomic>
#include <cstdlib>
#include <string>

#include "../../tensor/error.h"

namespace reel::cuda {

template <typename Path>
class EnvSwitch {
 public:
  using Parse = Path (*)(const char*);
  using Message = std::string (*)(const char*);
  EnvSwitch(const char* variable, Parse parse, Message message, Path invalid)
      : variable_(variable), parse_(parse), message_(message), invalid_(invalid) {}

  Path get() {
    int v = cell_.load(std::memory_order_relaxed);
    if (v >= 0) return Path(v);
    const char* env = std::getenv(variable_);
    const Path p = parse_(env);
    if (p == invalid_) throw Error(message_(env));
    cell_.compare_exchange_strong(v, int(p), std::memory_order_relaxed);  // a racing set() wins
    return Path(cell_.load(std::memory_order_relaxed));
  }
  void set(Path p) { cell_.store(int(p), std::memory_order_relaxed); }

 private:
  std::atomic<int> cell_{-1};  // the Path once read or set; -1 before
  const char* variable_;
  Parse parse_;
  Message message_;
  Path invalid_;
};

}  // namespace reel::cuda
