// reel::cuda::EventTimer (cuda/cuda.h): two CUDA events on the device's stream and the
// time between them. The events are made with timing on (cudaEventDefault) and blocking
// sync, so that seconds() sleeps rather than spins while a long block runs.
#include <fmt/format.h>

#include "cuda.h"
#include "internal/context.h"

namespace reel::cuda {

namespace {
// The device's context, or an Error that names the op asking (without a driver or a GPU).
Context& context_for(const char* op, int device) {
  try {
    return context(device);
  } catch (const Error& e) {
    throw Error(fmt::format("{}: {}", op, e.what()));
  }
}
}  // namespace

struct EventTimer::State {
  cudaEvent_t begin = nullptr, end = nullptr;
  bool started = false, stopped = false;
};

EventTimer::EventTimer(int device) : state_(std::make_unique<State>()), device_(device) {
  context_for("cuda::EventTimer", device);  // makes it current
  check(cudaEventCreateWithFlags(&state_->begin, cudaEventBlockingSync), "cuda::EventTimer", "cudaEventCreate");
  cudaError_t e = cudaEventCreateWithFlags(&state_->end, cudaEventBlockingSync);
  if (e != cudaSuccess) {
    (void)cudaEventDestroy(state_->begin);
    fail_cuda("cuda::EventTimer", e, "cudaEventCreate");
  }
}

EventTimer::~EventTimer() {
  if (!state_) return;
  if (state_->begin) (void)cudaEventDestroy(state_->begin);
  if (state_->end) (void)cudaEventDestroy(state_->end);
}

void EventTimer::start() {
  Context& ctx = context_for("cuda::EventTimer::start", device_);
  check(cudaEventRecord(state_->begin, ctx.stream), "cuda::EventTimer::start", "cudaEventRecord");
  state_->started = true;
  state_->stopped = false;
}

void EventTimer::stop() {
  if (!state_->started)
    throw Error(fmt::format("cuda::EventTimer::stop: cuda:{}: expected start() before stop()", device_));
  Context& ctx = context_for("cuda::EventTimer::stop", device_);
  check(cudaEventRecord(state_->end, ctx.stream), "cuda::EventTimer::stop", "cudaEventRecord");
  state_->stopped = true;
}

double EventTimer::seconds() {
  if (!state_->started || !state_->stopped)
    throw Error(fmt::format("cuda::EventTimer::seconds: cuda:{}: expected start() and then stop(), got {}", device_,
                            state_->started ? "no stop()" : "no start()"));
  Context& ctx = context_for("cuda::EventTimer::seconds", device_);
  count_host_sync();
  check(cudaEventSynchronize(state_->end), "cuda::EventTimer::seconds", "cudaEventSynchronize");
  ctx.raise_fault("cuda::EventTimer::seconds");  // a bad index a kernel of the block found
  float ms = 0;
  check(cudaEventElapsedTime(&ms, state_->begin, state_->end), "cuda::EventTimer::seconds", "cudaEventElapsedTime");
  return double(ms) / 1e3;
}

}  // namespace reel::cuda
