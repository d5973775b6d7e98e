// A path switch of the CUDA backend (REEL_CUDNN_RNN, REEL_CUDA_BN_RELU,
// REEL_CUDA_HALF_ATTENTION, REEL_CUDA_CHANNEL_SUMS, ...): read from its environment variable
// at the first call that asks, unless a setter chose first; then fixed for the process. A
// value the parser refuses is an Error at that first call, naming it. No CUDA header: the
// switches' parsers (parse_choice below) are tested by reel_tests in every build.
#pragma once
#include <atomic>
#include <cstddef>
#include <cstdlib>
#include <string>
#include <string_view>

#include "../../tensor/error.h"

namespace reel::cuda {

// One value a switch takes: its spelling and the path it names.
template <typename Path>
struct Choice {
  const char* name;
  Path path;
};
// The path `value` spells among `choices`; unset or empty: `fallback`; anything else: `invalid`.
template <typename Path, size_t N>
Path parse_choice(const char* value, const Choice<Path> (&choices)[N], Path fallback, Path invalid) {
  if (!value || !*value) return fallback;
  for (const Choice<Path>& c : choices)
    if (std::string_view(value) == c.name) return c.path;
  return invalid;
}
// "op: VARIABLE must be a, b or c, got \"value\""
template <typename Path, size_t N>
std::string choice_message(const char* op, const char* variable, const Choice<Path> (&choices)[N],
                           const char* value) {
  std::string m = std::string(op) + ": " + variable + " must be ";
  for (size_t i = 0; i < N; ++i) m += std::string(i == 0 ? "" : i + 1 == N ? " or " : ", ") + choices[i].name;
  return m + ", got \"" + (value ? value : "") + "\"";
}

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
