// The thread count that follows the machine's load (tensor/parallel.h): the /proc/stat
// arithmetic, the rule, pinning, and (tag [.follow_load], run alone by the ctest
// follow_load) the live behaviour beside a busy process.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <reel/reel.h>
#include "../tensor/internal/core_load.h"

using namespace reel;
using internal::busy_ticks;
using internal::threads_for_load;

TEST_CASE("busy_ticks adds all but idle and iowait of the chosen cores", "[threads]") {
  const char* stat =
      "cpu  100 5 50 1000 20 3 2 7 0 0\n"
      "cpu0 60 5 30 500 10 2 1 4 0 0\n"
      "cpu1 40 0 20 500 10 1 1 3 0 0\n"
      "intr 12345 1 2 3\n"
      "ctxt 999\n";
  CHECK(busy_ticks(stat, {}) == 100 + 5 + 50 + 3 + 2 + 7);
  CHECK(busy_ticks(stat, {0}) == 60 + 5 + 30 + 2 + 1 + 4);
  CHECK(busy_ticks(stat, {1}) == 40 + 20 + 1 + 1 + 3);
  CHECK(busy_ticks(stat, {0, 1}) == 102 + 65);
  CHECK(busy_ticks(stat, {7}) == 0);  // a core the text lacks
  // an old kernel's four-field lines (no iowait and after)
  CHECK(busy_ticks("cpu  1 2 3 4\ncpu0 1 2 3 4\n", {0}) == 6);
  CHECK(busy_ticks("", {0}) == 0);
}

TEST_CASE("threads_for_load drops a thread at once and brings it back when two readings agree", "[threads]") {
  // idle 2 cores: both
  CHECK(threads_for_load(2, 2, 2.0, 2.0) == 2);
  // a busy process beside a 2-thread team shares the cores: others ~0.67 -> 1
  CHECK(threads_for_load(2, 2, 2.0 - 0.67, 2.0) == 1);
  // an editor's blips (others 0.3) keep both
  CHECK(threads_for_load(2, 2, 1.7, 2.0) == 2);
  // the busy process alone on its core: stays at 1
  CHECK(threads_for_load(2, 1, 1.0, 1.0) == 1);
  // it stopped: one free reading is not enough, two are
  CHECK(threads_for_load(2, 1, 2.0, 1.0) == 1);
  CHECK(threads_for_load(2, 1, 2.0, 2.0) == 2);
  // never below 1, never above the ceiling
  CHECK(threads_for_load(2, 2, -3.0, -3.0) == 1);
  CHECK(threads_for_load(4, 4, 16.0, 16.0) == 4);
  CHECK(threads_for_load(0, 1, 2.0, 2.0) == 1);
  // 16 cores, 3 taken: 13
  CHECK(threads_for_load(16, 16, 13.0, 16.0) == 13);
  CHECK(threads_for_load(16, 13, 16.0, 13.0) == 13);
  CHECK(threads_for_load(16, 13, 16.0, 15.9) == 16);
}

TEST_CASE("a probe reads a share of this machine's cores", "[threads]") {
  internal::CoreLoadProbe probe;
  REQUIRE(probe.allowed_cores() >= 1);
  const auto t0 = std::chrono::steady_clock::now();
  while (std::chrono::steady_clock::now() - t0 < std::chrono::milliseconds(50)) {
  }
  const double others = probe.others_busy_cores();
  CHECK(others >= 0.0);
  CHECK(others <= double(probe.allowed_cores()));
}

TEST_CASE("set_num_threads keeps its count; set_threads_follow_load(true) follows again", "[threads]") {
  const int before = num_threads();
  const bool followed = threads_follow_load();
  set_num_threads(1);
  CHECK_FALSE(threads_follow_load());
  Tensor a = randn({64, 64}), b = randn({64, 64});
  Tensor one = matmul(a, b);
  for (int i = 0; i < 100; ++i) (void)add(a, 1.0);
  CHECK(num_threads() == 1);
  // primitives are planned per thread count: the same product on two threads agrees
  set_num_threads(2);
  Tensor two = matmul(a, b);
  CHECK(allclose(one, two, 1e-5, 1e-5));
  set_threads_follow_load(true);
  CHECK(threads_follow_load());
  set_num_threads(before);
  set_threads_follow_load(followed);
}

// Run by the ctest follow_load (alone, without OMP_NUM_THREADS): the count drops by one
// beside a busy process and comes back after it ends.
TEST_CASE("the thread count follows a busy process", "[.follow_load]") {
  set_threads_follow_load(true);
  const int cores = internal::CoreLoadProbe().allowed_cores();
  if (cores < 2) {
    WARN("one core: no thread to drop");
    return;
  }
  Tensor a = randn({128, 128});
  // runs ops until the count is `want` or `seconds` pass; the count seen last
  auto settle = [&](int want, double seconds) {
    const auto t0 = std::chrono::steady_clock::now();
    while (std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() < seconds) {
      for (int i = 0; i < 64; ++i) a = tanh(matmul(a, a) * 0.01);
      if (num_threads() == want) break;
    }
    return num_threads();
  };
  REQUIRE(settle(cores, 5.0) == cores);
  const pid_t busy = fork();
  REQUIRE(busy >= 0);
  if (busy == 0) {
    volatile unsigned long spins = 0;
    for (;;) spins = spins + 1;  // the competing load: a core's worth of spinning, until killed
  }
  const int beside = settle(cores - 1, 5.0);
  kill(busy, SIGKILL);
  waitpid(busy, nullptr, 0);
  CHECK(beside == cores - 1);
  CHECK(settle(cores, 5.0) == cores);
}
