// WorkCounter (measure/work.h): an op hook that attributes each op's work (formulas.cpp)
// to (op, phase, module), and the tables and roofline built from it.
//
// Ops nest (cross_entropy calls log_softmax; a backward rule calls ops). The hook reports
// an op when it ends, so its parts have been reported already: they wait in a list per
// depth, and the op either takes their place (it has a formula: its own count covers
// them) or hands them up (it has none, every part has one and some part computes: they
// are its count), or else is listed as uncounted under its own name.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <deque>
#include <map>
#include <mutex>
#include <string_view>
#include <thread>
#include <unordered_map>

#include "../debug/internal/frames.h"
#include "../tensor/atomic_file.h"
#include "timer.h"
#include "work.h"

namespace reel::bench {

bool transparent_op(const char* op);  // formulas.cpp

namespace {
// One op's count as the hook reports it: names stay pointers (op names are static, module
// paths interned) and the dtype an enum until a table asks, so counting an op allocates
// nothing once its row exists.
struct Entry {
  const char* op;
  debug::Phase phase;
  const ModulePath* module;
  int dtype;  // DType of the first output, -1: none
  Work work;
  bool counted;
};

// A row of the count: the op (by name, phase and module) and its sums.
struct Row {
  std::string op_name;  // the op's name (a rule's row: its forward op's; work.op adds "_backward")
  int dtype = -1;       // -2: mixed over the calls
  OpWork work;
};
struct RowKey {
  std::string_view op;  // into the row's op_name (rows never move: a deque)
  int phase;
  const ModulePath* module;
  bool operator==(const RowKey&) const = default;
};
struct RowKeyHash {
  size_t operator()(const RowKey& k) const {
    return std::hash<std::string_view>{}(k.op) ^ (std::hash<const void*>{}(k.module) * 31) ^ size_t(k.phase);
  }
};
}  // namespace

// A composite without a formula is counted from its parts when every part has a formula
// and some part computes: an op whose parts only move data (a sort that copies, then sorts
// in its kernel) has work of its own that no part shows.
static bool counted_by_parts(const std::vector<Entry>& parts) {
  if (parts.empty()) return false;
  bool computes = false;
  for (const Entry& e : parts) {
    if (!e.counted) return false;
    computes = computes || e.work.flops > 0;
  }
  return computes;
}

struct WorkCounter::State {
  std::thread::id thread = std::this_thread::get_id();
  debug::HookHandle hook;
  bool stopped = false;
  std::unique_ptr<debug::Profiler> profiler;
  std::vector<std::vector<Entry>> pending;  // parts reported at each depth, waiting for their op
  std::deque<Row> rows;                     // in order of first appearance
  std::unordered_map<RowKey, Row*, RowKeyHash> index;

  void on_op(const debug::OpRecord& r) {
    if (stopped || std::this_thread::get_id() != thread) return;
    const size_t d = size_t(r.depth);
    if (pending.size() < d + 2) pending.resize(d + 2);
    std::vector<Entry>& parts = pending[d + 1];
    std::optional<Work> w = op_work(r);
    if (w) {
      int dtype = -1;
      for (const Tensor& t : r.outputs)
        if (t.defined()) {
          dtype = int(t.dtype());
          break;
        }
      pending[d].push_back({r.op, r.phase, r.module, dtype, *w, true});  // its own count covers its parts
    } else if (transparent_op(r.op) || counted_by_parts(parts)) {
      pending[d].insert(pending[d].end(), parts.begin(), parts.end());  // counted from its parts
    } else {  // no formula, and parts without one too: the op is what the user sees listed
      pending[d].push_back({r.op, r.phase, r.module, -1, {}, false});
    }
    parts.clear();
    if (d == 0) {
      for (const Entry& e : pending[0]) add(e);
      pending[0].clear();
    }
  }

  void add(const Entry& e) {
    auto it = index.find(RowKey{e.op, int(e.phase), e.module});
    Row* row;
    if (it != index.end()) {
      row = it->second;
    } else {
      row = &rows.emplace_back();
      row->op_name = e.op;
      row->dtype = e.dtype;
      OpWork& o = row->work;
      o.op = e.phase == debug::Phase::backward ? row->op_name + "_backward" : row->op_name;
      o.phase = e.phase, o.module = e.module ? e.module->str() : "-", o.counted = e.counted;
      o.dtype = e.dtype >= 0 ? dtype_name(DType(e.dtype)) : "";
      index.emplace(RowKey{row->op_name, int(e.phase), e.module}, row);
    }
    if (row->dtype != e.dtype && row->dtype != -2) {
      row->dtype = -2;
      row->work.dtype = "";
    }
    row->work.calls += 1;
    row->work.work += e.work;
  }
};

WorkCounter::WorkCounter(WorkOptions opt) : state_(std::make_unique<State>()) {
  State* s = state_.get();
  s->hook = debug::add_op_hook([s](const debug::OpRecord& r) { s->on_op(r); });
  if (opt.time_ops) s->profiler = std::make_unique<debug::Profiler>();
}

WorkCounter::~WorkCounter() { stop(); }

void WorkCounter::stop() {
  if (state_->stopped) return;
  state_->stopped = true;
  state_->hook.remove();
  if (state_->profiler) state_->profiler->stop();
}

void WorkCounter::reset() {
  state_->rows.clear();
  state_->index.clear();
  state_->pending.clear();
}

Work WorkCounter::total() const {
  Work w;
  for (const Row& row : state_->rows) w += row.work.work;
  return w;
}
Work WorkCounter::forward() const {
  Work w;
  for (const Row& row : state_->rows)
    if (row.work.phase == debug::Phase::forward) w += row.work.work;
  return w;
}
Work WorkCounter::backward() const {
  Work w;
  for (const Row& row : state_->rows)
    if (row.work.phase == debug::Phase::backward) w += row.work.work;
  return w;
}

std::vector<OpWork> WorkCounter::by_op() const {
  std::map<std::pair<std::string, int>, OpWork> merged;
  std::vector<std::pair<std::string, int>> order;
  for (const Row& r : state_->rows) {
    const OpWork& row = r.work;
    auto key = std::make_pair(row.op, int(row.phase));
    auto [it, fresh] = merged.try_emplace(key, row);
    if (fresh) {
      order.push_back(key);
      it->second.module = "";
      continue;
    }
    it->second.calls += row.calls;
    it->second.work += row.work;
    if (it->second.dtype != row.dtype) it->second.dtype = "";
  }
  // times from the profiler, by the same names (an op's total covers the ops inside it)
  if (state_->profiler)
    for (const debug::ProfileRow& p : state_->profiler->table())
      for (auto& [key, row] : merged)
        if (row.op == p.op) row.time_s = p.total_ms / 1e3;
  std::vector<OpWork> out;
  for (const auto& key : order) out.push_back(merged.at(key));
  std::stable_sort(out.begin(), out.end(), [](const OpWork& a, const OpWork& b) { return a.work.flops > b.work.flops; });
  return out;
}

std::vector<OpWork> WorkCounter::by_module() const {
  std::map<std::pair<std::string, int>, OpWork> merged;
  std::vector<std::pair<std::string, int>> order;
  for (const Row& r : state_->rows) {
    const OpWork& row = r.work;
    auto key = std::make_pair(row.module, int(row.phase));
    auto [it, fresh] = merged.try_emplace(key);
    OpWork& m = it->second;
    if (fresh) {
      order.push_back(key);
      m.module = row.module, m.phase = row.phase, m.dtype = row.dtype;
    }
    m.calls += row.calls;
    m.work += row.work;
    if (!row.counted) m.counted = false;
  }
  std::vector<OpWork> out;
  for (const auto& key : order) out.push_back(merged.at(key));
  return out;
}

std::vector<std::string> WorkCounter::uncounted() const {
  std::vector<std::string> out;
  for (const Row& r : state_->rows)
    if (!r.work.counted && std::find(out.begin(), out.end(), r.work.op) == out.end()) out.push_back(r.work.op);
  std::sort(out.begin(), out.end());
  return out;
}

namespace {
std::string flop_str(double f) { return format_sig(f / 1e6) + " M"; }
std::string byte_str(double b) { return format_sig(b / 1e6) + " MB"; }
const char* phase_str(debug::Phase p) { return p == debug::Phase::forward ? "fwd" : "bwd"; }
}  // namespace

std::string WorkCounter::table(size_t max_rows) const {
  std::string s = fmt::format("{:<34} {:>4} {:>6} {:>12} {:>12} {:>12} {:>8}\n", "op", "pass", "calls", "FLOPs",
                              "in products", "bytes", "FLOP/B");
  std::vector<OpWork> ops = by_op();
  for (size_t i = 0; i < ops.size() && i < max_rows; ++i) {
    const OpWork& o = ops[i];
    if (!o.counted) continue;
    s += fmt::format("{:<34} {:>4} {:>6} {:>12} {:>12} {:>12} {:>8}\n", o.op, phase_str(o.phase), o.calls,
                     flop_str(o.work.flops), flop_str(o.work.product_flops), byte_str(o.work.bytes),
                     format_sig(o.work.intensity()));
  }
  s += fmt::format("\n{:<34} {:>4} {:>6} {:>12} {:>12} {:>12}\n", "module", "pass", "ops", "FLOPs", "in products",
                   "bytes");
  for (const OpWork& m : by_module())
    s += fmt::format("{:<34} {:>4} {:>6} {:>12} {:>12} {:>12}\n", m.module, phase_str(m.phase), m.calls,
                     flop_str(m.work.flops), flop_str(m.work.product_flops), byte_str(m.work.bytes));
  Work f = forward(), b = backward();
  s += fmt::format("\nforward {} FLOPs ({} in products), {}; backward {} FLOPs ({} in products), {}\n",
                   flop_str(f.flops), flop_str(f.product_flops), byte_str(f.bytes), flop_str(b.flops),
                   flop_str(b.product_flops), byte_str(b.bytes));
  std::vector<std::string> none = uncounted();
  if (!none.empty()) {
    s += "no formula (not counted):";
    for (const std::string& op : none) s += " " + op;
    s += "\n";
  }
  return s;
}

// ---- roofline

std::vector<RooflineRow> WorkCounter::roofline(const MachinePeak& peak, DType dtype) const {
  if (peak.bandwidth_gbs <= 0 || peak.gflops(dtype) <= 0)
    throw Error("bench::WorkCounter::roofline: expected a measured peak (bandwidth and FLOP/s above 0), got zeros");
  std::vector<RooflineRow> out;
  for (const OpWork& o : by_op()) {
    if (!o.counted || (o.work.flops == 0 && o.work.bytes == 0)) continue;
    RooflineRow r;
    r.op = o.op, r.phase = o.phase, r.work = o.work, r.time_s = o.time_s;
    double compute_s = o.work.flops / (peak.gflops(dtype) * 1e9), memory_s = o.work.bytes / (peak.bandwidth_gbs * 1e9);
    r.bound_s = std::max(compute_s, memory_s);
    r.bound = compute_s >= memory_s ? "compute" : "memory";
    if (o.time_s > 0) {
      r.gflops = o.work.flops / o.time_s / 1e9;
      r.gbs = o.work.bytes / o.time_s / 1e9;
      r.of_bound = r.bound_s / o.time_s;
    }
    out.push_back(r);
  }
  return out;
}

std::string WorkCounter::roofline_table(const MachinePeak& peak, DType dtype) const {
  std::string s = fmt::format("{:<34} {:>4} {:>8} {:>8} {:>10} {:>10} {:>10} {:>10} {:>8}\n", "op", "pass", "FLOP/B",
                              "bound", "bound time", "time", "GFLOP/s", "GB/s", "of bound");
  for (const RooflineRow& r : roofline(peak, dtype))
    s += fmt::format("{:<34} {:>4} {:>8} {:>8} {:>10} {:>10} {:>10} {:>10} {:>8}\n", r.op, phase_str(r.phase),
                     format_sig(r.work.intensity()), r.bound, format_time(r.bound_s),
                     r.time_s > 0 ? format_time(r.time_s) : "-", r.time_s > 0 ? format_sig(r.gflops) : "-",
                     r.time_s > 0 ? format_sig(r.gbs) : "-",
                     r.time_s > 0 ? fmt::format("{:.0f}%", 100 * r.of_bound) : "-");
  s += fmt::format("peak: {} GFLOP/s ({}), {} GB/s; ridge at {} FLOP/B ({})\n", format_sig(peak.gflops(dtype)),
                   dtype_name(dtype), format_sig(peak.bandwidth_gbs), format_sig(peak.ridge(dtype)), peak.source);
  return s;
}

std::string WorkCounter::roofline_svg(const MachinePeak& peak, DType dtype) const {
  std::vector<RooflineRow> rows = roofline(peak, dtype);
  const double W = 720, H = 480, L = 70, R = 20, T = 30, B = 50;
  const double P = peak.gflops(dtype), BW = peak.bandwidth_gbs;
  // axes: intensity 1e-3 .. 1e4 FLOP/B, rate from 1e-3 of the peak to 2x it (decades)
  double x0 = -3, x1 = 4, y1 = std::ceil(std::log10(2 * P)), y0 = y1 - 6;
  auto X = [&](double ai) { return L + (std::log10(std::max(ai, 1e-3)) - x0) / (x1 - x0) * (W - L - R); };
  auto Y = [&](double g) { return H - B - (std::log10(std::max(g, std::pow(10, y0))) - y0) / (y1 - y0) * (H - T - B); };
  std::string s = fmt::format(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{}\" height=\"{}\" font-family=\"sans-serif\" "
      "font-size=\"11\">\n<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n",
      W, H);
  s += fmt::format("<text x=\"{}\" y=\"18\" font-size=\"13\">roofline: {} GFLOP/s {}, {} GB/s ({})</text>\n", L,
                   format_sig(P), dtype_name(dtype), format_sig(BW), peak.model);
  for (int e = int(x0); e <= int(x1); ++e)
    s += fmt::format("<line x1=\"{0}\" y1=\"{1}\" x2=\"{0}\" y2=\"{2}\" stroke=\"#ddd\"/><text x=\"{0}\" y=\"{3}\" "
                     "text-anchor=\"middle\">1e{4}</text>\n",
                     X(std::pow(10, e)), T, H - B, H - B + 15, e);
  for (int e = int(y0); e <= int(y1); ++e)
    s += fmt::format("<line x1=\"{0}\" y1=\"{1}\" x2=\"{2}\" y2=\"{1}\" stroke=\"#ddd\"/><text x=\"{3}\" y=\"{4}\" "
                     "text-anchor=\"end\">1e{5}</text>\n",
                     L, Y(std::pow(10, e)), W - R, L - 5, Y(std::pow(10, e)) + 4, e);
  s += fmt::format("<text x=\"{}\" y=\"{}\" text-anchor=\"middle\">arithmetic intensity (FLOP/byte)</text>\n",
                   (L + W - R) / 2, H - 12);
  s += fmt::format("<text x=\"14\" y=\"{}\" transform=\"rotate(-90 14 {})\" text-anchor=\"middle\">GFLOP/s</text>\n",
                   (T + H - B) / 2, (T + H - B) / 2);
  // the roofs: bandwidth x intensity up to the ridge, then the peak
  double ridge = P / BW;
  s += fmt::format("<polyline fill=\"none\" stroke=\"black\" stroke-width=\"2\" points=\"{},{} {},{} {},{}\"/>\n",
                   X(1e-3), Y(BW * 1e-3), X(ridge), Y(P), X(1e4), Y(P));
  for (const RooflineRow& r : rows) {
    double ai = r.work.intensity();
    if (ai <= 0) continue;
    double g = r.time_s > 0 ? r.gflops : std::min(P, BW * ai);
    const char* color = r.phase == debug::Phase::forward ? "#1f77b4" : "#d62728";
    s += fmt::format("<circle cx=\"{:.1f}\" cy=\"{:.1f}\" r=\"4\" fill=\"{}\"/><text x=\"{:.1f}\" y=\"{:.1f}\">{}</text>\n",
                     X(ai), Y(g), color, X(ai) + 6, Y(g) - 4, r.op);
  }
  s += fmt::format("<text x=\"{}\" y=\"{}\" fill=\"#1f77b4\">forward</text><text x=\"{}\" y=\"{}\" "
                   "fill=\"#d62728\">backward</text>\n</svg>\n",
                   W - R - 110, T + 14, W - R - 55, T + 14);
  return s;
}

void WorkCounter::write_roofline_svg(const std::string& path, const MachinePeak& peak, DType dtype) const {
  write_file_atomically(path, roofline_svg(peak, dtype), "bench::WorkCounter::write_roofline_svg");
}

}  // namespace reel::bench
