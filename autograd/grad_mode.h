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

// Runs f with recording off and returns its result: auto y = reel::no_grad([&] { return model(x); });
template <typename F>
auto no_grad(F&& f) {
  NoGradGuard guard;
  return f();
}

}  // namespace reel
