// Error: the one exception type for bad input. Site: the user's file:line.
#pragma once
#include <cstdint>
#include <source_location>
#include <stdexcept>
#include <string>

namespace reel {

// A call site. Every public op takes `Site site = {}` as its last parameter, so the
// compiler fills in the caller's file and line at no runtime cost.
struct Site {
  const char* file = nullptr;
  uint32_t line = 0;
  Site(std::source_location l = std::source_location::current())
      : file(l.file_name()), line(l.line()) {}
  Site(const char* f, uint32_t l) : file(f), line(l) {}
  bool known() const { return file != nullptr && line != 0; }
  std::string str() const;  // "train.cpp:42", or "unknown site"
};

// The outermost public call on this thread owns the site: ops called from inside
// reel (a Linear calling linear, cross_entropy calling log_softmax) report the
// user's line, not reel's. Scopes nest; only the outermost one counts.
class SiteScope {
 public:
  explicit SiteScope(const Site& site);
  // Replaces the current site until destroyed: the engine runs each backward rule at
  // the site of its forward call, inside backward()'s own scope.
  struct Replace {};
  SiteScope(const Site& site, Replace);
  ~SiteScope();
  SiteScope(const SiteScope&) = delete;
  SiteScope& operator=(const SiteScope&) = delete;
  static Site current(const Site& fallback);  // the outermost site, else `fallback`
 private:
  bool owner_;
  bool replaced_ = false;
  bool saved_active_ = false;
  Site saved_{nullptr, 0};
};

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& what) : std::runtime_error(what) {}
};

// Throws Error("op: message (at file:line)").
[[noreturn]] void fail(const char* op, const std::string& message, const Site& site);

}  // namespace reel
