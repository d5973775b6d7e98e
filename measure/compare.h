// Compare: measurements as one table, grouped by a row label (a size, a batch) and a
// column label (the variant), each time relative to a chosen baseline column of the same
// row, with the work done (FLOPs, bytes), the rates reached and the share of the
// machine's peak; significant figures trimmed; as text, Markdown, CSV or JSON.
//
//   reel::bench::Compare table({.baseline = "dense", .row_name = "batch"});
//   table.set_peak(reel::bench::machine_peak());
//   table.add("128", "dense", m_dense, work_dense);
//   table.add("128", "conv1x1", m_conv, work_conv);
//   std::cout << table.text();
//   table.write_csv("mlp.csv");
#pragma once
#include <string>
#include <vector>

#include "peak.h"
#include "timer.h"
#include "work.h"

namespace reel::bench {

struct CompareOptions {
  std::string baseline{};                 // the column others are relative to ("" : no relative figures)
  std::string row_name = "row";         // the header of the row label
  std::string column_name = "variant";  // the header of the column label
  int significant = 3;                  // figures kept in every number
  std::string title{};
};

struct CompareEntry {
  std::string row{}, column{};
  Measurement time{};
  Work work{};  // zero: not counted (the FLOP columns print "-")
};

class Compare {
 public:
  explicit Compare(CompareOptions opt = {});
  void add(std::string row, std::string column, Measurement time, Work work = {});
  // The peak that "% of peak" is against (products in `dtype`); without one the column is left out.
  void set_peak(const MachinePeak& peak, DType dtype = DType::f32);
  const std::vector<CompareEntry>& entries() const { return entries_; }

  // One line per entry, rows in the order first added, then the noise warnings. Throws
  // Error when the table is empty or the baseline is not one of its columns.
  std::string text() const;
  std::string markdown() const;
  std::string csv() const;   // every figure unrounded, one line per entry, with a header
  std::string json() const;  // an array of objects, one per entry
  void write_csv(const std::string& path) const;
  void write_json(const std::string& path) const;
  // Time per entry as a bar chart (SVG), grouped by row, one colour per column.
  std::string bars_svg() const;
  void write_bars_svg(const std::string& path) const;

 private:
  std::vector<std::vector<std::string>> cells(bool markdown) const;
  void check() const;
  CompareOptions opt_;
  std::vector<CompareEntry> entries_;
  bool has_peak_ = false;
  double peak_gflops_ = 0, peak_gbs_ = 0;
  std::string peak_source_{};
};

}  // namespace reel::bench
