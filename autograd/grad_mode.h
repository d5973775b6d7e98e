// Grad mode: whether ops record on the tape. On by default, per thread.
#pragma once

namespace reel {

bool grad_enabled();
void set_grad_enabled(bool on);

// Turns recording off for a scope (evaluation, optimizer steps).
//   { reel::NoGradGuard guard; auto y = model(x); }
class NoGradGuard {
 public:
  NoGradGuard() : prev_(grad_enabled()) { set_grad_enabled(false); }
  ~NoGradGuard() { set_grad_enabled(prev_); }
  NoGradGuard(const NoGradGuard&) = delete;
  NoGradGuard& operator=(const NoGradGuard&) = delete;

 private:
  bool prev_;
};

// libtorch's c10::InferenceMode: for a scope, grad mode off (InferenceMode(false): on), as
// libtorch sets it. reel has no separate inference tensors: what is made inside is an
// ordinary tensor that a later graph may use, and nothing is recorded inside, as under
// NoGradGuard.
//   { reel::InferenceMode guard; auto y = model(x); }
class InferenceMode {
 public:
  explicit InferenceMode(bool enabled = true) : prev_(grad_enabled()) { set_grad_enabled(!enabled); }
  ~InferenceMode() { set_grad_enabled(prev_); }
  InferenceMode(const InferenceMode&) = delete;
  InferenceMode& operator=(const InferenceMode&) = delete;

 private:
  bool prev_;
};

// Runs f with recording off and returns its result: auto y = reel::no_grad([&] { return model(x); });
template <typename F>
auto no_grad(F&& f) {
  NoGradGuard guard;
  return f();
}

}  // namespace reel
