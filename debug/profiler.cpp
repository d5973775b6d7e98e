// The profiler: one event per op (and per backward rule) on its thread, from the
// frames of debug/hooks.cpp, and one span per module call and Range; summary tables
// (per op, per module) and a Chrome trace.
#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <map>

#include "../tensor/atomic_file.h"
#include "internal/frames.h"

namespace reel::debug {

struct Profiler::State {
  ProfilerOptions opt;
  int64_t start_ns = 0;
  int64_t stop_ns = -1;  // -1 while running
  int tid = 0;
  Profiler::State* prev = nullptr;  // the profiler this one interrupted on the same thread
  std::vector<ProfileEvent> events;
  std::vector<ProfileSpan> spans;
};

namespace {
// Small, stable thread numbers for the trace (Perfetto draws one track per tid).
int this_thread_number() {
  static std::atomic<int> next{1};
  thread_local int n = next.fetch_add(1);
  return n;
}

std::string json_escape(const std::string& s) {
  std::string out;
  out.reserve(s.size());
  for (char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\t': out += "\\t"; break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) out += fmt::format("\\u{:04x}", int(c));
        else out += c;
    }
  }
  return out;
}

// For intervals (start, duration) on one thread, which nest: the time of each one's
// direct children (the intervals it encloses with no other between).
std::vector<int64_t> child_time(const std::vector<std::pair<int64_t, int64_t>>& iv) {
  std::vector<size_t> order(iv.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  // by start, the enclosing (longer) one first
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return iv[a].first != iv[b].first ? iv[a].first < iv[b].first : iv[a].second > iv[b].second;
  });
  std::vector<int64_t> child(iv.size(), 0);
  std::vector<size_t> open;
  for (size_t i : order) {
    int64_t end = iv[i].first + iv[i].second;
    while (!open.empty() && iv[open.back()].first + iv[open.back()].second < end) open.pop_back();
    if (!open.empty()) child[open.back()] += iv[i].second;
    open.push_back(i);
  }
  return child;
}

// Each op event's nested ops' time. Ops on one thread nest, so in start order an
// event's parent is the latest event one level up that encloses it.
std::vector<int64_t> op_child_ns(const std::vector<ProfileEvent>& ev) {
  std::vector<size_t> order(ev.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return ev[a].start_ns < ev[b].start_ns; });
  std::vector<int64_t> child_ns(ev.size(), 0);
  std::vector<std::ptrdiff_t> open_at;  // open_at[d]: the latest event seen at depth d
  for (size_t i : order) {
    const ProfileEvent& e = ev[i];
    size_t d = size_t(std::max(e.depth, 0));
    if (open_at.size() <= d) open_at.resize(d + 1, -1);
    if (d > 0 && open_at[d - 1] >= 0) {
      const ProfileEvent& p = ev[size_t(open_at[d - 1])];
      if (p.start_ns <= e.start_ns && e.start_ns + e.dur_ns <= p.start_ns + p.dur_ns)
        child_ns[size_t(open_at[d - 1])] += e.dur_ns;
    }
    open_at[d] = std::ptrdiff_t(i);
  }
  return child_ns;
}

}  // namespace

namespace detail {
void profiler_record(Profiler::State& p, const OpRecord& rec, int64_t t0_ns, int64_t t1_ns) {
  ProfileEvent e;
  e.op = rec.op;
  e.phase = rec.phase;
  e.site = rec.site;
  e.module = rec.module;
  e.depth = rec.depth;
  e.start_ns = t0_ns - p.start_ns;
  e.dur_ns = t1_ns - t0_ns;
  e.bytes = rec.bytes;
  e.inputs = shapes_str(rec.inputs);
  e.outputs = shapes_str(rec.outputs);
  p.events.push_back(std::move(e));
}
void profiler_span(Profiler::State& p, ProfileSpan::Kind kind, std::string name, const ModulePath* module,
                   int64_t t0_ns, int64_t t1_ns) {
  ProfileSpan s;
  s.kind = kind;
  s.name = std::move(name);
  s.module = module;
  s.start_ns = std::max<int64_t>(t0_ns - p.start_ns, 0);
  s.dur_ns = t1_ns - std::max(t0_ns, p.start_ns);
  p.spans.push_back(std::move(s));
}
bool profiler_synchronizes(const Profiler::State& p) { return p.opt.synchronize; }
}  // namespace detail

std::string ProfileEvent::name() const {
  return phase == Phase::backward ? std::string(op) + "_backward" : std::string(op);
}

Profiler::Profiler(ProfilerOptions opt) : state_(std::make_unique<State>()) {
  state_->opt = opt;
  state_->tid = this_thread_number();
  state_->start_ns = detail::now_ns();
  state_->prev = detail::exchange_thread_profiler(state_.get());
}

Profiler::~Profiler() { stop(); }

void Profiler::stop() {
  if (state_->stop_ns >= 0) return;
  state_->stop_ns = detail::now_ns();
  // Stopped on its own thread, innermost first (as scopes end); restore the one it interrupted.
  Profiler::State* current = detail::exchange_thread_profiler(state_->prev);
  if (current != state_.get()) detail::exchange_thread_profiler(current);
}

const std::vector<ProfileEvent>& Profiler::events() const { return state_->events; }
const std::vector<ProfileSpan>& Profiler::spans() const { return state_->spans; }

Range::Range(std::string name) : name_(std::move(name)) {
  if (debug_tools_on()) [[unlikely]] t0_ns_ = detail::span_begin();
}
Range::~Range() {
  if (t0_ns_ >= 0) [[unlikely]] detail::span_end(ProfileSpan::range, std::move(name_), current_module(), t0_ns_);
}

double Profiler::wall_ms() const {
  int64_t end = state_->stop_ns >= 0 ? state_->stop_ns : detail::now_ns();
  return double(end - state_->start_ns) / 1e6;
}

std::vector<ProfileRow> Profiler::table() const {
  const auto& ev = state_->events;
  std::vector<int64_t> child_ns = op_child_ns(ev);
  std::map<std::string, ProfileRow> rows;
  for (size_t i = 0; i < ev.size(); ++i) {
    ProfileRow& r = rows[ev[i].name()];
    r.calls += 1;
    r.total_ms += double(ev[i].dur_ns) / 1e6;
    r.self_ms += double(ev[i].dur_ns - child_ns[i]) / 1e6;
    r.bytes += ev[i].bytes;
  }
  // Ranges: minus the ops called directly in them (depth 0) and the ranges inside them.
  std::vector<std::pair<int64_t, int64_t>> iv;
  std::vector<const ProfileSpan*> ranges;
  for (const ProfileSpan& s : state_->spans)
    if (s.kind == ProfileSpan::range) {
      iv.push_back({s.start_ns, s.dur_ns});
      ranges.push_back(&s);
    }
  if (!ranges.empty()) {
    for (const ProfileEvent& e : ev)
      if (e.depth == 0) iv.push_back({e.start_ns, e.dur_ns});
    std::vector<int64_t> inner = child_time(iv);
    for (size_t i = 0; i < ranges.size(); ++i) {
      ProfileRow& r = rows[ranges[i]->name];
      r.calls += 1;
      r.total_ms += double(ranges[i]->dur_ns) / 1e6;
      r.self_ms += double(ranges[i]->dur_ns - inner[i]) / 1e6;
    }
  }
  double wall = wall_ms();
  std::vector<ProfileRow> out;
  for (auto& [name, r] : rows) {
    r.op = name;
    r.mean_us = r.total_ms * 1e3 / double(r.calls);
    r.percent = wall > 0 ? 100.0 * r.total_ms / wall : 0.0;
    out.push_back(r);
  }
  std::stable_sort(out.begin(), out.end(), [](const ProfileRow& a, const ProfileRow& b) { return a.total_ms > b.total_ms; });
  return out;
}

std::string Profiler::summary(size_t max_rows) const {
  std::vector<ProfileRow> rows = table();
  size_t w = 2;
  for (const ProfileRow& r : rows) w = std::max(w, r.op.size());
  std::string s = fmt::format("{:<{}}  {:>7}  {:>10}  {:>10}  {:>10}  {:>7}  {:>9}\n", "op", w, "calls", "total ms",
                              "self ms", "mean us", "% time", "alloc MB");
  for (size_t i = 0; i < rows.size() && i < max_rows; ++i) {
    const ProfileRow& r = rows[i];
    s += fmt::format("{:<{}}  {:>7}  {:>10.3f}  {:>10.3f}  {:>10.2f}  {:>6.1f}%  {:>9.3f}\n", r.op, w, r.calls,
                     r.total_ms, r.self_ms, r.mean_us, r.percent, double(r.bytes) / 1e6);
  }
  if (rows.size() > max_rows) s += fmt::format("... {} more ops\n", rows.size() - max_rows);
  s += fmt::format("{} events in {:.3f} ms profiled (% time: an op's total, nested ops included, over that)\n",
                   state_->events.size(), wall_ms());
  return s;
}

std::vector<ModuleRow> Profiler::module_table() const {
  const auto& ev = state_->events;
  std::vector<const ProfileSpan*> calls;
  std::vector<std::pair<int64_t, int64_t>> iv;
  for (const ProfileSpan& s : state_->spans)
    if (s.kind == ProfileSpan::module_call) {
      calls.push_back(&s);
      iv.push_back({s.start_ns, s.dur_ns});
    }
  std::vector<int64_t> inner = child_time(iv);
  struct Group {
    ModuleRow row;
    std::map<std::string, ModuleRow> ops;
  };
  std::map<std::string, Group> groups;
  for (size_t i = 0; i < calls.size(); ++i) {
    ModuleRow& r = groups[calls[i]->name].row;
    r.calls += 1;
    r.total_ms += double(calls[i]->dur_ns) / 1e6;
    r.self_ms += double(calls[i]->dur_ns - inner[i]) / 1e6;
  }
  std::vector<int64_t> nested = op_child_ns(ev);
  for (size_t i = 0; i < ev.size(); ++i) {
    std::string name = ev[i].module ? ev[i].module->str() : std::string("-");
    ModuleRow& r = groups[name].ops[ev[i].name()];
    r.calls += 1;
    r.total_ms += double(ev[i].dur_ns) / 1e6;
    r.self_ms += double(ev[i].dur_ns - nested[i]) / 1e6;
  }
  std::vector<std::pair<std::string, Group*>> order;
  for (auto& [name, g] : groups) order.push_back({name, &g});
  // modules by total time; ops outside modules ("-", no call rows) by their ops' time, last among equals
  auto weight = [](const Group& g) {
    if (g.row.calls) return g.row.total_ms;
    double t = 0;
    for (const auto& [op, r] : g.ops) t += r.self_ms;
    return t;
  };
  std::stable_sort(order.begin(), order.end(), [&](const auto& a, const auto& b) { return weight(*a.second) > weight(*b.second); });
  std::vector<ModuleRow> out;
  for (auto& [name, g] : order) {
    g->row.module = name;
    out.push_back(g->row);
    std::vector<ModuleRow> ops;
    for (auto& [op, r] : g->ops) {
      r.module = name;
      r.op = op;
      ops.push_back(r);
    }
    std::stable_sort(ops.begin(), ops.end(), [](const ModuleRow& a, const ModuleRow& b) { return a.total_ms > b.total_ms; });
    out.insert(out.end(), ops.begin(), ops.end());
  }
  return out;
}

std::string Profiler::module_summary(size_t max_rows) const {
  std::vector<ModuleRow> rows = module_table();
  size_t w = 6;
  for (const ModuleRow& r : rows) w = std::max(w, r.op.empty() ? r.module.size() : r.op.size() + 2);
  std::string s = fmt::format("{:<{}}  {:>7}  {:>10}  {:>10}\n", "module", w, "calls", "total ms", "self ms");
  for (size_t i = 0; i < rows.size() && i < max_rows; ++i) {
    const ModuleRow& r = rows[i];
    std::string label = r.op.empty() ? r.module : "  " + r.op;
    s += fmt::format("{:<{}}  {:>7}  {:>10.3f}  {:>10.3f}\n", label, w, r.calls, r.total_ms, r.self_ms);
  }
  if (rows.size() > max_rows) s += fmt::format("... {} more rows\n", rows.size() - max_rows);
  s += "(a module's calls time its forward(); its ops include the backward rules of the ops it ran)\n";
  return s;
}

std::string Profiler::chrome_trace() const {
  const State& st = *state_;
  std::string s = "{\"displayTimeUnit\":\"ms\",\"traceEvents\":[\n";
  s += fmt::format("{{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":1,\"tid\":{},\"args\":{{\"name\":\"reel thread {}\"}}}}",
                   st.tid, st.tid);
  for (const ProfileEvent& e : st.events) {
    s += fmt::format(
        ",\n{{\"name\":\"{}\",\"cat\":\"{}\",\"ph\":\"X\",\"ts\":{:.3f},\"dur\":{:.3f},\"pid\":1,\"tid\":{},"
        "\"args\":{{\"inputs\":\"{}\",\"outputs\":\"{}\",\"site\":\"{}\",\"module\":\"{}\",\"bytes\":{},"
        "\"depth\":{}}}}}",
        json_escape(e.name()), e.phase == Phase::backward ? "backward" : "forward", double(e.start_ns) / 1e3,
        double(e.dur_ns) / 1e3, st.tid, json_escape(e.inputs), json_escape(e.outputs), json_escape(e.site.str()),
        json_escape(e.module ? e.module->str() : ""), e.bytes, e.depth);
  }
  // module calls and ranges enclose their ops: the viewer draws them as the rows above
  for (const ProfileSpan& sp : st.spans) {
    bool mod = sp.kind == ProfileSpan::module_call;
    s += fmt::format(
        ",\n{{\"name\":\"{}\",\"cat\":\"{}\",\"ph\":\"X\",\"ts\":{:.3f},\"dur\":{:.3f},\"pid\":1,\"tid\":{},"
        "\"args\":{{\"type\":\"{}\",\"module\":\"{}\"}}}}",
        json_escape(mod && !sp.module->path.empty() ? sp.name + " (" + sp.module->type + ")" : sp.name), mod ? "module" : "range",
        double(sp.start_ns) / 1e3, double(sp.dur_ns) / 1e3, st.tid, json_escape(mod ? sp.module->type : "range"),
        json_escape(sp.module ? sp.module->str() : ""));
  }
  s += "\n]}\n";
  return s;
}

void Profiler::write_chrome_trace(const std::string& path) const {
  write_file_atomically(path, chrome_trace(), "write_chrome_trace");
}

}  // namespace reel::debug
