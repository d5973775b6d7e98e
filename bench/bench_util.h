// Shared by the bench programs: repeated timing with medians, the human table, and
// one JSON object per measurement as ../shared/BENCH.md specifies. Header-only and
// free of reel and torch, so reel's programs and the libtorch references share it.
#pragma once
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

namespace bench {

struct Args {
  std::string json;  // --json PATH, "-" for stdout, empty for none
  int threads = int(std::thread::hardware_concurrency());
  bool threads_given = false;  // --threads N: reel keeps exactly N; without it reel's default follows the load
  int reps = 7;
  std::string device = "cpu";  // --device cpu|cuda[:N]
  std::string amp;  // --amp bf16|f16: the forward under autocast (reel) or torch.autocast (peers)
  std::vector<std::string> rest;
  // The value after `--name` among the program's own options, or `fallback`.
  long long get(const char* name, long long fallback) const {
    for (size_t i = 0; i + 1 < rest.size(); ++i)
      if (rest[i] == name) return std::atoll(rest[i + 1].c_str());
    return fallback;
  }
};

inline Args parse_args(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    std::string s = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "%s needs a value\n", s.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (s == "--json") a.json = next();
    else if (s == "--threads") {
      a.threads = std::atoi(next().c_str());
      a.threads_given = true;
    }
    else if (s == "--reps") a.reps = std::atoi(next().c_str());
    else if (s == "--device") a.device = next();
    else if (s == "--amp") a.amp = next();
    else a.rest.push_back(s);
  }
  return a;
}

struct Stats {
  double median = 0, min = 0, max = 0;
  int n = 0;
};

inline Stats stats_of(std::vector<double> v) {
  Stats s;
  if (v.empty()) return s;
  std::sort(v.begin(), v.end());
  s.n = int(v.size());
  s.min = v.front();
  s.max = v.back();
  s.median = v.size() % 2 ? v[v.size() / 2] : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]);
  return s;
}

inline double now_s() {
  using namespace std::chrono;
  return duration<double>(steady_clock::now().time_since_epoch()).count();
}

// Appends one measurement as a JSON line to args.json and prints a table row.
inline void report(const Args& args, const char* workload, const char* system, const char* device,
                   const char* metric, const Stats& s, const std::string& extra = "") {
  std::printf("%-4s %-9s %-6s %-22s median %12.4f  min %12.4f  max %12.4f  n %d\n", workload, system, device, metric,
              s.median, s.min, s.max, s.n);
  if (args.json.empty()) return;
  char line[8192];  // room for the samples list
  std::snprintf(line, sizeof line,
                "{\"workload\": \"%s\", \"system\": \"%s\", \"device\": \"%s\", \"threads\": %d, "
                "\"metric\": \"%s\", \"median\": %.6g, \"min\": %.6g, \"max\": %.6g, \"n\": %d%s%s}\n",
                workload, system, device, args.threads, metric, s.median, s.min, s.max, s.n,
                extra.empty() ? "" : ", ", extra.c_str());
  if (args.json == "-") {
    std::fputs(line, stdout);
  } else {
    FILE* f = std::fopen(args.json.c_str(), "a");
    if (!f) {
      std::fprintf(stderr, "cannot open %s\n", args.json.c_str());
      std::exit(1);
    }
    std::fputs(line, f);
    std::fclose(f);
  }
}

// The same, from the raw samples, which also go into the JSON line ("samples"): the
// comparison driver pools them over the runs it alternates.
inline void report(const Args& args, const char* workload, const char* system, const char* device,
                   const char* metric, const std::vector<double>& samples, const std::string& extra = "") {
  std::string all = "\"samples\": [";
  char num[32];
  for (size_t i = 0; i < samples.size(); ++i) {
    std::snprintf(num, sizeof num, "%s%.6g", i ? ", " : "", samples[i]);
    all += num;
  }
  all += "]";
  report(args, workload, system, device, metric, stats_of(samples), extra.empty() ? all : extra + ", " + all);
}

// Synthetic sizes for W6: 100 tensors totalling exactly 10,000,000 floats, in
// weights 1..23 (the last takes the rounding remainder). Every system uses these.
inline std::vector<long long> w6_sizes() {
  constexpr long long kTotal = 10000000;
  std::vector<long long> w(100), s(100);
  long long sum = 0, used = 0;
  for (int i = 0; i < 100; ++i) sum += w[i] = 1 + (i * 37) % 23;
  for (int i = 0; i < 99; ++i) used += s[i] = kTotal * w[i] / sum;
  s[99] = kTotal - used;
  return s;
}

}  // namespace bench
