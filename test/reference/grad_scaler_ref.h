// PyTorch 1.13's GradScaler on a scripted series of overflows (test/reference/grad_scaler.py
// writes grad_scaler.inc): the step records both the CPU and the CUDA tests replay.
#pragma once
#include <cstdint>
#include <limits>
#include <vector>

constexpr double kInf = std::numeric_limits<double>::infinity();
const double kNaN = std::numeric_limits<double>::quiet_NaN();

struct RefInject {
  int param;  // 0 weight, 1 bias, -1 none
  int64_t index;
  double value;
};
struct RefStep {
  int step;
  RefInject inject;
  bool unscale;
  double new_scale;  // update(new_scale) when not 0
  double scale_before;
  bool stepped;
  double scale_after;
  int64_t tracker;
  double loss;
  std::vector<double> weight, bias;
};
#include "grad_scaler.inc"
