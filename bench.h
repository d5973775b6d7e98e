// reel::bench: time model variants, count their work and compare them with each other and
// with what the machine can do, in a few lines of a user's own program. Not part of
// <reel/reel.h>: include it beside it. See docs/benchmarking.md.
//
//   #include <reel/reel.h>
//   #include <reel/bench.h>
//   auto ms = reel::bench::interleaved({{"dense", dense_step}, {"conv1x1", conv_step}});
//   reel::bench::Compare table({.baseline = "dense"});
//   for (auto& m : ms) table.add("batch 128", m.label, m);
//   std::cout << table.text();
#pragma once
#include "measure/timer.h"    // Timer, Measurement, interleaved, ratio, measure_phases, measure_memory
#include "measure/peak.h"     // machine_peak: memory bandwidth and peak FLOP/s, cached per machine
#include "measure/work.h"     // WorkCounter: FLOPs and bytes per op and module, the roofline
#include "measure/compare.h"  // Compare: the table, as text, Markdown, CSV, JSON and a bar chart
