// The default random stream's position (reel::rand, randn, dropout masks: a Philox
// seed and the blocks consumed so far on each device type), to save and restore:
// activation checkpointing replays a forward's random numbers with it.
//
//   RngState s = get_rng_state();  Tensor a = rand({3});
//   set_rng_state(s);              Tensor b = rand({3});  // b equals a
#pragma once
#include <cstdint>

namespace reel {

struct RngState {
  uint64_t seed = 0;
  uint64_t offset[2] = {0, 0};  // per device type (CPU, CUDA): Philox blocks consumed
};
RngState get_rng_state();
void set_rng_state(const RngState& state);

}  // namespace reel
