// Compare (measure/compare.h): the table and its files.
#include "compare.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>

#include "../debug/internal/frames.h"
#include "../tensor/atomic_file.h"

namespace reel::bench {
namespace {

std::string json_str(const std::string& s) {
  std::string o = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') o += '\\', o += c;
    else if (c == '\n') o += "\\n";
    else if (static_cast<unsigned char>(c) < 0x20) o += fmt::format("\\u{:04x}", int(c));
    else o += c;
  }
  return o + "\"";
}

std::string csv_str(const std::string& s) {
  if (s.find_first_of(",\"\n") == std::string::npos) return s;
  std::string o = "\"";
  for (char c : s) o += c == '"' ? std::string("\"\"") : std::string(1, c);
  return o + "\"";
}

// FLOPs with an SI prefix: "1.23 G"
std::string si(double x, int sig) {
  const char* units[] = {"", "k", "M", "G", "T", "P"};
  int u = 0;
  while (std::abs(x) >= 1000 && u < 5) x /= 1000, ++u;
  return format_sig(x, sig) + (u ? std::string(" ") + units[u] : std::string());
}

}  // namespace

Compare::Compare(CompareOptions opt) : opt_(std::move(opt)) {
  if (opt_.significant < 1 || opt_.significant > 17)
    throw Error(fmt::format("bench::Compare: expected 1 to 17 significant figures, got {}", opt_.significant));
}

void Compare::add(std::string row, std::string column, Measurement time, Work work) {
  if (time.blocks < 1 || time.median <= 0)
    throw Error(fmt::format("bench::Compare::add: expected a measurement with at least one block and a positive "
                            "median for ({}, {}), got {} blocks, median {}",
                            row, column, time.blocks, time.median));
  entries_.push_back({std::move(row), std::move(column), std::move(time), work});
}

void Compare::set_peak(const MachinePeak& peak, DType dtype) {
  has_peak_ = peak.gflops(dtype) > 0;
  peak_gflops_ = peak.gflops(dtype);
  peak_gbs_ = peak.bandwidth_gbs;
  peak_source_ = fmt::format("{} GFLOP/s {}, {} GB/s: {}", format_sig(peak_gflops_), dtype_name(dtype),
                             format_sig(peak_gbs_), peak.source);
}

void Compare::check() const {
  if (entries_.empty()) throw Error("bench::Compare: the table is empty (expected at least one add())");
  if (opt_.baseline.empty()) return;
  for (const CompareEntry& e : entries_)
    if (e.column == opt_.baseline) return;
  std::string cols;
  for (const CompareEntry& e : entries_)
    if (cols.find("'" + e.column + "'") == std::string::npos) cols += (cols.empty() ? "'" : ", '") + e.column + "'";
  throw Error(fmt::format("bench::Compare: the baseline '{}' is not a column of the table (its columns: {})",
                          opt_.baseline, cols));
}

std::vector<std::vector<std::string>> Compare::cells(bool) const {
  check();
  const int sig = opt_.significant;
  std::vector<std::string> head = {opt_.row_name, opt_.column_name, "time", "IQR"};
  if (!opt_.baseline.empty()) head.push_back("vs " + opt_.baseline);
  head.insert(head.end(), {"FLOPs", "GFLOP/s", "GB/s"});
  if (has_peak_) head.push_back("% of peak");
  std::vector<std::vector<std::string>> out = {head};
  // rows in the order first added; within a row, entries in the order added
  std::vector<std::string> rows;
  for (const CompareEntry& e : entries_)
    if (std::find(rows.begin(), rows.end(), e.row) == rows.end()) rows.push_back(e.row);
  for (const std::string& row : rows) {
    const CompareEntry* base = nullptr;
    for (const CompareEntry& e : entries_)
      if (e.row == row && e.column == opt_.baseline) base = &e;
    for (const CompareEntry& e : entries_) {
      if (e.row != row) continue;
      const double t = e.time.median;
      std::vector<std::string> c = {e.row, e.column, format_time(t, sig),
                                    fmt::format("{}%", format_sig(100 * e.time.iqr / t, 2))};
      if (!opt_.baseline.empty()) c.push_back(base ? format_sig(t / base->time.median, sig) + "x" : "-");
      const bool counted = e.work.flops > 0 || e.work.bytes > 0;
      c.push_back(counted ? si(e.work.flops, sig) : "-");
      c.push_back(counted ? format_sig(e.work.flops / t / 1e9, sig) : "-");
      c.push_back(counted ? format_sig(e.work.bytes / t / 1e9, sig) : "-");
      if (has_peak_) c.push_back(counted ? format_sig(100 * e.work.flops / t / 1e9 / peak_gflops_, sig) + "%" : "-");
      out.push_back(c);
    }
  }
  return out;
}

std::string Compare::text() const {
  auto t = cells(false);
  std::vector<size_t> w(t[0].size(), 0);
  for (const auto& r : t)
    for (size_t i = 0; i < r.size(); ++i) w[i] = std::max(w[i], r[i].size());
  std::string s = opt_.title.empty() ? "" : opt_.title + "\n";
  for (size_t k = 0; k < t.size(); ++k) {
    for (size_t i = 0; i < t[k].size(); ++i)  // labels left-aligned, figures right-aligned
      s += i < 2 ? fmt::format("{:<{}}  ", t[k][i], w[i]) : fmt::format("{:>{}}  ", t[k][i], w[i]);
    while (!s.empty() && s.back() == ' ') s.pop_back();
    s += "\n";
  }
  if (has_peak_) s += "peak: " + peak_source_ + "\n";
  for (const CompareEntry& e : entries_)
    if (e.time.noisy) s += fmt::format("warning: ({}, {}) is noisy: {}\n", e.row, e.column, e.time.noise_reason);
  return s;
}

std::string Compare::markdown() const {
  auto t = cells(true);
  std::string s = opt_.title.empty() ? "" : "**" + opt_.title + "**\n\n";
  for (size_t k = 0; k < t.size(); ++k) {
    s += "|";
    for (const std::string& c : t[k]) s += " " + c + " |";
    s += "\n";
    if (k == 0) {
      s += "|";
      for (size_t i = 0; i < t[0].size(); ++i) s += i < 2 ? " --- |" : " ---: |";
      s += "\n";
    }
  }
  if (has_peak_) s += "\npeak: " + peak_source_ + "\n";
  for (const CompareEntry& e : entries_)
    if (e.time.noisy) s += fmt::format("\nwarning: ({}, {}) is noisy: {}\n", e.row, e.column, e.time.noise_reason);
  return s;
}

std::string Compare::csv() const {
  check();
  std::string s = fmt::format("{},{},median_s,q1_s,q3_s,min_s,max_s,blocks,runs,threads,device,flops,product_flops,"
                              "bytes,gflops_per_s,gb_per_s,percent_of_peak,relative_to_baseline,noisy\n",
                              csv_str(opt_.row_name), csv_str(opt_.column_name));
  for (const CompareEntry& e : entries_) {
    const CompareEntry* base = nullptr;
    for (const CompareEntry& b : entries_)
      if (b.row == e.row && b.column == opt_.baseline) base = &b;
    const double t = e.time.median;
    s += fmt::format("{},{},{:.9g},{:.9g},{:.9g},{:.9g},{:.9g},{},{},{},{},{:.9g},{:.9g},{:.9g},{:.6g},{:.6g},{},{},{}\n",
                     csv_str(e.row), csv_str(e.column), t, e.time.q1, e.time.q3, e.time.min, e.time.max, e.time.blocks,
                     e.time.runs, e.time.threads, e.time.device, e.work.flops, e.work.product_flops, e.work.bytes,
                     e.work.flops / t / 1e9, e.work.bytes / t / 1e9,
                     has_peak_ ? fmt::format("{:.6g}", 100 * e.work.flops / t / 1e9 / peak_gflops_) : "",
                     base ? fmt::format("{:.6g}", t / base->time.median) : "", e.time.noisy ? 1 : 0);
  }
  return s;
}

std::string Compare::json() const {
  check();
  std::string s = "[\n";
  for (size_t i = 0; i < entries_.size(); ++i) {
    const CompareEntry& e = entries_[i];
    const CompareEntry* base = nullptr;
    for (const CompareEntry& b : entries_)
      if (b.row == e.row && b.column == opt_.baseline) base = &b;
    const double t = e.time.median;
    s += fmt::format("  {{{}: {}, {}: {}, \"median_s\": {:.9g}, \"q1_s\": {:.9g}, \"q3_s\": {:.9g}, \"min_s\": {:.9g}, "
                     "\"max_s\": {:.9g}, \"blocks\": {}, \"runs\": {}, \"threads\": {}, \"device\": {}, "
                     "\"flops\": {:.9g}, \"product_flops\": {:.9g}, \"bytes\": {:.9g}",
                     json_str(opt_.row_name), json_str(e.row), json_str(opt_.column_name), json_str(e.column), t,
                     e.time.q1, e.time.q3, e.time.min, e.time.max, e.time.blocks, e.time.runs, e.time.threads,
                     json_str(e.time.device), e.work.flops, e.work.product_flops, e.work.bytes);
    if (has_peak_) s += fmt::format(", \"percent_of_peak\": {:.6g}", 100 * e.work.flops / t / 1e9 / peak_gflops_);
    if (base) s += fmt::format(", \"relative_to_baseline\": {:.6g}", t / base->time.median);
    if (e.time.noisy) s += ", \"noise\": " + json_str(e.time.noise_reason);
    s += i + 1 < entries_.size() ? "},\n" : "}\n";
  }
  return s + "]\n";
}

void Compare::write_csv(const std::string& path) const {
  write_file_atomically(path, csv(), "bench::Compare::write_csv");
}
void Compare::write_json(const std::string& path) const {
  write_file_atomically(path, json(), "bench::Compare::write_json");
}

std::string Compare::bars_svg() const {
  check();
  std::vector<std::string> rows, cols;
  for (const CompareEntry& e : entries_) {
    if (std::find(rows.begin(), rows.end(), e.row) == rows.end()) rows.push_back(e.row);
    if (std::find(cols.begin(), cols.end(), e.column) == cols.end()) cols.push_back(e.column);
  }
  double tmax = 0;
  for (const CompareEntry& e : entries_) tmax = std::max(tmax, e.time.q3);
  const char* colors[] = {"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b"};
  const double L = 60, T = 40, B = 60, H = 360, bar = 18, gap = 14;
  const double W = L + 20 + double(rows.size()) * (double(cols.size()) * bar + gap);
  auto Y = [&](double t) { return H - B - t / tmax * (H - T - B); };
  std::string s = fmt::format("<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{:.0f}\" height=\"{:.0f}\" "
                              "font-family=\"sans-serif\" font-size=\"11\">\n<rect width=\"100%\" height=\"100%\" "
                              "fill=\"white\"/>\n<text x=\"{}\" y=\"18\" font-size=\"13\">{}</text>\n",
                              W, H, L, opt_.title.empty() ? "median time per run (whiskers: IQR)" : opt_.title);
  for (int k = 0; k <= 4; ++k) {
    double t = tmax * k / 4;
    s += fmt::format("<line x1=\"{}\" y1=\"{:.1f}\" x2=\"{:.0f}\" y2=\"{:.1f}\" stroke=\"#ddd\"/><text x=\"{}\" "
                     "y=\"{:.1f}\" text-anchor=\"end\">{}</text>\n",
                     L, Y(t), W - 10, Y(t), L - 4, Y(t) + 4, format_time(t, 2));
  }
  for (size_t r = 0; r < rows.size(); ++r) {
    double x = L + 10 + double(r) * (double(cols.size()) * bar + gap);
    s += fmt::format("<text x=\"{:.1f}\" y=\"{:.0f}\" text-anchor=\"middle\">{}</text>\n",
                     x + double(cols.size()) * bar / 2, H - B + 15, rows[r]);
    for (size_t c = 0; c < cols.size(); ++c)
      for (const CompareEntry& e : entries_)
        if (e.row == rows[r] && e.column == cols[c]) {
          double bx = x + double(c) * bar;
          s += fmt::format("<rect x=\"{:.1f}\" y=\"{:.1f}\" width=\"{}\" height=\"{:.1f}\" fill=\"{}\"/>"
                           "<line x1=\"{:.1f}\" y1=\"{:.1f}\" x2=\"{:.1f}\" y2=\"{:.1f}\" stroke=\"black\"/>\n",
                           bx, Y(e.time.median), bar - 2, Y(0) - Y(e.time.median), colors[c % 6], bx + bar / 2 - 1,
                           Y(e.time.q1), bx + bar / 2 - 1, Y(e.time.q3));
        }
  }
  for (size_t c = 0; c < cols.size(); ++c)
    s += fmt::format("<rect x=\"{:.0f}\" y=\"{:.0f}\" width=\"10\" height=\"10\" fill=\"{}\"/><text x=\"{:.0f}\" "
                     "y=\"{:.0f}\">{}</text>\n",
                     L + double(c) * 110, H - 25, colors[c % 6], L + double(c) * 110 + 14, H - 16, cols[c]);
  return s + fmt::format("<text x=\"{}\" y=\"{:.0f}\">{}</text>\n</svg>\n", L, H - 2, opt_.row_name);
}

void Compare::write_bars_svg(const std::string& path) const {
  write_file_atomically(path, bars_svg(), "bench::Compare::write_bars_svg");
}

}  // namespace reel::bench
