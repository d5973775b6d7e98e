// How many of this process's cores other processes are using: the measurement behind
// the thread count that follows the machine's load (tensor/parallel.h). Linux reads
// /proc/stat (busy time of the cores this process may run on) and getrusage (this
// process's own time); elsewhere nothing is measured and all cores count as free.
// Internal to tensor/; the parsing and the rule are plain functions so tests can feed
// them made-up readings.
#pragma once
#include <cstdint>
#include <string_view>
#include <vector>

namespace reel::internal {

// Busy time of the given cores in /proc/stat's text, in clock ticks: everything but
// idle and iowait (steal counts as busy: a core the hypervisor took is not ours).
// cores empty: the aggregate "cpu" line. A core missing from the text counts 0.
int64_t busy_ticks(std::string_view proc_stat, const std::vector<int>& cores);

// The thread count for the next interval. free_cores = allowed cores minus the cores
// other processes kept busy over the last interval. A thread is dropped as soon as
// others hold more than half a core of ours, so that a waiting team never waits on
// a thread the scheduler parked behind someone else's; one comes back only when the
// last two intervals both left room for it (no flapping, which would re-plan oneDNN's
// primitives). Always within [1, ceiling].
int threads_for_load(int ceiling, int current, double free_cores, double previous_free_cores);

// The live readings: the cores this process may run on, and a probe that, called
// again after some time, says how many of them others kept busy in between.
class CoreLoadProbe {
 public:
  CoreLoadProbe();
  int allowed_cores() const { return int(cores_.size()); }
  // Cores that processes other than this one used since the last call (or since
  // construction), averaged over that time; 0 where it cannot be measured.
  double others_busy_cores();

 private:
  std::vector<int> cores_;
  int64_t last_busy_ = 0;    // ticks
  int64_t last_self_us_ = 0;  // this process's user + system time
  int64_t last_wall_us_ = 0;
  bool ok_ = false;
  void read(int64_t& busy, int64_t& self_us, int64_t& wall_us);
};

// Called on entry to every op the user calls (tensor/core.cpp's enter_user_op): every
// 16th call on a thread that follows the load, applies the count the last measurement
// asks for, measuring anew (on one thread at a time) when that one is a quarter second old.
void follow_load_tick();

}  // namespace reel::internal
