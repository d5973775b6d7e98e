#include "internal/core_load.h"

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cmath>

#ifdef __linux__
#include <fcntl.h>
#include <sched.h>
#include <sys/resource.h>
#include <unistd.h>
#endif

namespace reel::internal {

namespace {

// The numbers after "cpuN " (or "cpu "), as many as the line has.
std::vector<int64_t> fields(std::string_view line) {
  std::vector<int64_t> out;
  size_t i = line.find(' ');
  while (i != std::string_view::npos && i < line.size()) {
    while (i < line.size() && line[i] == ' ') ++i;
    int64_t v = 0;
    auto [end, ec] = std::from_chars(line.data() + i, line.data() + line.size(), v);
    if (ec != std::errc()) break;
    out.push_back(v);
    i = size_t(end - line.data());
  }
  return out;
}

// user nice system idle iowait irq softirq steal ...: all but idle and iowait. Guest
// time is already inside user and nice.
int64_t busy_of(std::string_view line) {
  std::vector<int64_t> f = fields(line);
  int64_t busy = 0;
  for (size_t k = 0; k < f.size() && k < 8; ++k)
    if (k != 3 && k != 4) busy += f[k];
  return busy;
}

}  // namespace

int64_t busy_ticks(std::string_view proc_stat, const std::vector<int>& cores) {
  int64_t busy = 0;
  size_t pos = 0;
  while (pos < proc_stat.size()) {
    size_t eol = proc_stat.find('\n', pos);
    if (eol == std::string_view::npos) eol = proc_stat.size();
    std::string_view line = proc_stat.substr(pos, eol - pos);
    pos = eol + 1;
    if (line.substr(0, 3) != "cpu") break;  // the cpu lines come first
    if (line.size() > 3 && line[3] == ' ') {
      if (cores.empty()) return busy_of(line);
      continue;
    }
    int core = -1;
    auto [end, ec] = std::from_chars(line.data() + 3, line.data() + line.size(), core);
    if (ec != std::errc() || end == line.data() + 3) continue;
    if (std::find(cores.begin(), cores.end(), core) != cores.end()) busy += busy_of(line);
  }
  return busy;
}

int threads_for_load(int ceiling, int current, double free_cores, double previous_free_cores) {
  ceiling = std::max(ceiling, 1);
  auto fit = [&](double free) { return std::clamp(int(std::floor(free + 0.5)), 1, ceiling); };
  const int now = fit(free_cores);
  if (now <= current) return now;  // fewer at once
  return std::max(std::min(current, ceiling), std::min(now, fit(previous_free_cores)));  // more when both agree
}

CoreLoadProbe::CoreLoadProbe() {
#ifdef __linux__
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) == 0)
    for (int c = 0; c < CPU_SETSIZE; ++c)
      if (CPU_ISSET(c, &set)) cores_.push_back(c);
#endif
  if (cores_.empty()) cores_.push_back(0);
  read(last_busy_, last_self_us_, last_wall_us_);
}

void CoreLoadProbe::read(int64_t& busy, int64_t& self_us, int64_t& wall_us) {
  wall_us = std::chrono::duration_cast<std::chrono::microseconds>(
                std::chrono::steady_clock::now().time_since_epoch())
                .count();
  ok_ = false;
#ifdef __linux__
  // /proc/stat's cpu lines fit in 64 KiB for a thousand cores; the rest is not needed
  static thread_local std::vector<char> buf(1 << 16);
  int fd = ::open("/proc/stat", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return;
  ssize_t n = 0, got = 0;
  while ((n = ::read(fd, buf.data() + got, buf.size() - size_t(got))) > 0 && size_t(got += n) < buf.size()) {
  }
  ::close(fd);
  if (got <= 0) return;
  busy = busy_ticks(std::string_view(buf.data(), size_t(got)), cores_);
  rusage ru{};
  if (getrusage(RUSAGE_SELF, &ru) != 0) return;
  self_us = (int64_t(ru.ru_utime.tv_sec) + int64_t(ru.ru_stime.tv_sec)) * 1000000 + ru.ru_utime.tv_usec +
            ru.ru_stime.tv_usec;
  ok_ = true;
#else
  (void)busy;
  (void)self_us;
#endif
}

double CoreLoadProbe::others_busy_cores() {
  int64_t busy = 0, self_us = 0, wall_us = 0;
  const bool was_ok = ok_;
  read(busy, self_us, wall_us);
  double others = 0;
#ifdef __linux__
  const double tick_us = 1e6 / double(sysconf(_SC_CLK_TCK));
  if (ok_ && was_ok && wall_us > last_wall_us_) {
    const double busy_us = double(busy - last_busy_) * tick_us;
    others = std::max(0.0, (busy_us - double(self_us - last_self_us_)) / double(wall_us - last_wall_us_));
  }
#endif
  last_busy_ = busy;
  last_self_us_ = self_us;
  last_wall_us_ = wall_us;
  return std::min(others, double(cores_.size()));
}

}  // namespace reel::internal
