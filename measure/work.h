// Work counted from the ops as they run: FLOPs and bytes moved per op and per module
// path, forward and backward apart, from one formula per op family (measure/formulas.cpp:
// matmul/linear, convolution and transposed convolution with groups, attention, recurrent
// layers, norms, pooling, softmax and losses, reductions, elementwise, copies and views).
// An op without a formula is listed (uncounted()), never counted as zero; an op without
// one whose parts have formulas is counted from its parts.
//
//   reel::bench::WorkCounter count;          // this thread, until stop() or destruction
//   Tensor loss = cross_entropy(net(x), y);
//   loss.backward();
//   count.stop();
//   std::cout << count.table();              // per op and per module, forward and backward
//   double gflop = count.total().flops / 1e9;
//
// It watches through the debug tools' op hook (debug/debug.h): with no counter alive an
// op pays what it pays today; with one, every op builds its hook record.
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "../debug/debug.h"
#include "peak.h"

namespace reel::bench {

struct Work {
  double flops = 0;          // every arithmetic operation (transcendentals count as one)
  double product_flops = 0;  // the part in products (matmul, convolution, attention's two products, RNN gates):
                             // what PyTorch's FlopCounterMode counts
  double bytes = 0;          // bytes read and written by the op's inputs and outputs (each tensor once)
  Work& operator+=(const Work& o) {
    flops += o.flops, product_flops += o.product_flops, bytes += o.bytes;
    return *this;
  }
  double intensity() const { return bytes > 0 ? flops / bytes : 0; }  // FLOP per byte
};

// The work of one op as the op hook reports it (a forward op, or a backward rule), or
// nothing when its family has no formula.
std::optional<Work> op_work(const debug::OpRecord& r);

struct OpWork {
  std::string op{};      // "linear", "linear_backward"
  debug::Phase phase = debug::Phase::forward;
  std::string module{};  // "fc1", the root module's type, or "-" outside any module ("" in by_op())
  std::string dtype{};   // of the op's first output ("" where mixed over the calls)
  int64_t calls = 0;
  Work work{};
  bool counted = true;  // false: no formula and no parts with one
  double time_s = 0;    // total time of its calls when the counter times ops (WorkOptions::time_ops)
};

struct WorkOptions {
  bool time_ops = false;  // also time each op (the debug profiler; it synchronises a GPU per op)
};

struct RooflineRow {
  std::string op{};
  debug::Phase phase = debug::Phase::forward;
  Work work{};
  double time_s = 0;
  double gflops = 0, gbs = 0;  // achieved (0 without times)
  double bound_s = 0;          // the roofline's lower bound for this work: max(flops / peak, bytes / bandwidth)
  std::string bound{};           // "compute" or "memory": which term of bound_s is larger
  double of_bound = 0;         // bound_s / time_s: the fraction of the machine's limit reached
};

class WorkCounter {
 public:
  explicit WorkCounter(WorkOptions opt = {});
  ~WorkCounter();
  WorkCounter(const WorkCounter&) = delete;
  WorkCounter& operator=(const WorkCounter&) = delete;
  void stop();   // stops counting (the destructor does it too)
  void reset();  // forgets what was counted so far (keeps counting)

  Work total() const;
  Work forward() const;
  Work backward() const;
  std::vector<OpWork> by_op() const;      // one row per (op, phase), by FLOPs, largest first
  std::vector<OpWork> by_module() const;  // one row per (module, phase): op "" (sums of the ops inside)
  std::vector<std::string> uncounted() const;  // ops (and rules) without a formula, sorted
  // The two tables as text, then the uncounted ops.
  std::string table(size_t max_rows = 40) const;

  // Per op against the machine's peak: which bound, the bound's time and, with times, the
  // fraction reached. In the order of by_op().
  std::vector<RooflineRow> roofline(const MachinePeak& peak, DType dtype = DType::f32) const;
  std::string roofline_table(const MachinePeak& peak, DType dtype = DType::f32) const;
  // The roofline as an SVG picture: log-log, FLOP/byte against GFLOP/s, the two roofs and
  // one point per op (achieved rate when timed, else at its bound), labelled.
  std::string roofline_svg(const MachinePeak& peak, DType dtype = DType::f32) const;
  void write_roofline_svg(const std::string& path, const MachinePeak& peak, DType dtype = DType::f32) const;

  struct State;  // measure/work.cpp

 private:
  std::unique_ptr<State> state_;
};

}  // namespace reel::bench
