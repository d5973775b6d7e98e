// Random number generators: a seed and how far each device's stream has been used.
// Numbers are Philox4x32-10 blocks (tensor/philox.h) keyed by the seed: block k of a
// stream is a function of (seed, k) alone, so a fill on the CPU and the same fill on a
// GPU give the same bits, and a state (seed, offsets) saved and restored continues
// the stream bit for bit.
//
//   reel::Generator g(42);
//   Tensor a = reel::randn({3, 4}, g);                 // draws from g
//   reel::GeneratorState s = g.get_state();
//   Tensor b = reel::rand({5}, g);
//   g.set_state(s);                                    // rand({5}, g) gives b again
//
// Default generators, one per thread (as the tape is per thread): every op called
// without a Generator draws from its thread's own default generator, so threads never
// take each other's numbers. A thread's default generator starts from
//   - the seed given to reel::manual_seed(seed) in that thread (the rule to rely on:
//     seed each thread that draws, e.g. manual_seed(base + rank)), or else
//   - the process seed 0x5eed5eed for the first thread that draws (usually main), and a
//     seed derived from (process seed, k) for the k-th thread to draw after it: fixed
//     for a given order of first draws, which concurrent threads do not fix.
// manual_seed in one thread changes no other thread's generator.
//
// A Generator is not synchronised: share one between threads only under your own lock.
#pragma once
#include <cstdint>

#include "device.h"

namespace reel {

// Everything a generator is: its seed and the Philox blocks used so far on the CPU
// stream and on the CUDA stream (one stream per device type, all GPUs sharing it).
struct GeneratorState {
  uint64_t seed = 0;
  uint64_t cpu_offset = 0;
  uint64_t cuda_offset = 0;
  bool operator==(const GeneratorState&) const = default;
};

class Generator {
 public:
  static constexpr uint64_t kDefaultSeed = 0x5eed5eedULL;
  explicit Generator(uint64_t seed = kDefaultSeed) : state_{.seed = seed} {}

  // Restarts both streams from `seed`.
  void manual_seed(uint64_t seed) { state_ = {.seed = seed}; }
  uint64_t seed() const { return state_.seed; }
  GeneratorState get_state() const { return state_; }
  void set_state(const GeneratorState& state) { state_ = state; }

  // For ops that draw Philox blocks themselves: reserves `blocks` consecutive blocks
  // of the stream of `device`'s type and returns the index of the first.
  uint64_t take(Device device, uint64_t blocks);

 private:
  GeneratorState state_;
};

// This thread's default generator (see the rule above).
Generator& default_generator();
// Seeds this thread's default generator (both streams restart); other threads keep theirs.
void manual_seed(uint64_t seed);

}  // namespace reel
