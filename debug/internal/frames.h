// Between the debug tools' files: the op frames (hooks.cpp) and the profiler
// (profiler.cpp). Not installed.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "../../autograd/op_support.h"
#include "../debug.h"

namespace reel {

// An op in flight on this thread while some tool watches (see OpScope).
struct OpFrame {
  debug::OpRecord rec;
  int uncaught = 0;  // std::uncaught_exceptions() at the start: more at the end means unwinding
  bool io_reported = false;  // record() told us the inputs and outputs
  bool in_rule = false;  // this op runs inside a backward rule
  std::vector<Tensor> candidate;  // outputs when record() never ran: the last tensor made here
  int64_t t0_ns = 0;  // profiler clock at the start
};

namespace debug::detail {

int64_t now_ns();
void tools_add(int delta);  // counts active tools in g_debug_tools
// The profiler running on this thread (null: none); returns the previous one.
Profiler::State* exchange_thread_profiler(Profiler::State* p);
// Called by the frame machinery when an op ends while `p` runs on this thread.
void profiler_record(Profiler::State& p, const OpRecord& rec, int64_t t0_ns, int64_t t1_ns);
bool profiler_synchronizes(const Profiler::State& p);
void profiler_span(Profiler::State& p, ProfileSpan::Kind kind, std::string name, const ModulePath* module,
                   int64_t t0_ns, int64_t t1_ns);
// "train.cpp:12 in feat.fc", or "train.cpp:12" outside modules
std::string where_str(const Site& site, const ModulePath* module);
// A span (module call or Range) starting now: its start time, or -1 when no profiler
// runs on this thread; span_end records it.
int64_t span_begin();
void span_end(ProfileSpan::Kind kind, std::string name, const ModulePath* module, int64_t t0_ns);
// "[2, 3] f32, - , [3] f64" (undefined tensors as "-")
std::string shapes_str(const std::vector<Tensor>& ts);
// "[1, 0]": the multi-dim index of flat element `flat` of a row-major `shape`
std::string index_str(const Dims& shape, int64_t flat);

}  // namespace debug::detail
}  // namespace reel
