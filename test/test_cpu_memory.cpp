// The CPU allocator's cache: size classes, reuse of freed blocks, the counters, empty_cache.
#include <catch2/catch.hpp>
#include <reel/reel.h>

using namespace reel;

TEST_CASE("CPU blocks above 4 MiB come in 8 size classes per power of two", "[cpu_memory]") {
  size_t before = cpu::memory_stats().allocated;
  Tensor t = empty({1250001});  // 5,000,004 bytes: 8 MiB / 16 = 512 KiB steps -> 5 MiB
  CHECK(cpu::memory_stats().allocated - before == size_t(5) << 20);
  Tensor u = empty({1280000});  // 5,120,000 bytes: the same class
  CHECK(cpu::memory_stats().allocated - before == size_t(10) << 20);
  Tensor s = empty({1024});  // 4 KiB: a 64-byte multiple below 64 KiB
  CHECK(cpu::memory_stats().allocated - before == (size_t(10) << 20) + 4096);
}

TEST_CASE("freed CPU blocks are kept for reuse until empty_cache", "[cpu_memory]") {
  cpu::empty_cache();
  CHECK(cpu::memory_stats().cached == 0);
  { Tensor t = ones({8 << 20}); }  // 32 MiB freed
#ifdef __SANITIZE_ADDRESS__
  CHECK(cpu::memory_stats().cached == 0);  // under ASan every block is freed at once
#else
  CHECK(cpu::memory_stats().cached == size_t(32) << 20);
  Tensor again = empty({8 << 20});  // the same class: the cached block
  CHECK(cpu::memory_stats().cached == 0);
  again = Tensor();
  CHECK(cpu::memory_stats().cached == size_t(32) << 20);
#endif
  cpu::empty_cache();
  CHECK(cpu::memory_stats().cached == 0);
  Tensor fresh = full({1000}, 2.0);
  CHECK(fresh.sum().item<float>() == 2000.0f);
}
