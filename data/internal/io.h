// File reading and seeded randomness shared by the readers, the loader and the
// transforms. Not installed, not for users.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace reel::data::internal {

// The whole file, gunzipped when it is gzip (zlib reads plain files through the
// same API). Throws Error naming `op` and the path when it cannot be read or the
// gzip stream is corrupt or cut short. At most `max_bytes` are read (a reader that knows
// from a header how much it wants caps it, so a small gzip file cannot inflate to
// gigabytes); `more`, when given, tells whether the file holds more than that.
std::vector<uint8_t> read_file(const char* op, const std::string& path, size_t max_bytes = SIZE_MAX,
                               bool* more = nullptr);

// SplitMix64: a small, portable generator, so the same seed gives the same
// shuffle and the same augmentations on every platform and standard library
// (std::uniform_int_distribution is not specified bit for bit).
class SplitMix {
 public:
  explicit SplitMix(uint64_t seed) : s_(seed) {}
  uint64_t next() {
    uint64_t z = (s_ += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  // uniform in [0, n), n > 0; Lemire's multiply-shift (the bias is below 2^-40 for our n)
  uint64_t below(uint64_t n) { return uint64_t((unsigned __int128)next() * n >> 64); }
  // uniform in [0, 1)
  double unit() { return double(next() >> 11) * 0x1.0p-53; }

 private:
  uint64_t s_;
};

// A seed for one stream derived from a parent seed and a stream number: two
// different (seed, stream) pairs give unrelated sequences.
inline uint64_t derive_seed(uint64_t seed, uint64_t stream) {
  SplitMix a(seed ^ (stream * 0xD1B54A32D192ED03ull));
  a.next();
  return a.next();
}

}  // namespace reel::data::internal
