// Philox4x32-10 words many blocks at a time, for the CPU's random fills and attention's
// dropout (internal to cpu/). The same numbers as tensor/philox.h's generate().
#pragma once
#include <cstdint>

namespace reel::cpu {

// w[4 b + k] = word k of philox::generate(seed, counter + b), for b in [0, n)
void philox_words(uint64_t seed, uint64_t counter, int64_t n, uint32_t* w);

}  // namespace reel::cpu
