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

// A module's place in the model, by PyTorch's named_modules names: "feat.fc" (path),
// its last part "fc" (name) and its class "Linear" (type); the module a model was
// called through has the empty path. Interned: one object per distinct (parent, name,
// type) for the life of the program, so an op records where it ran as one pointer.
struct ModulePath {
  const ModulePath* parent = nullptr;
  std::string name, path, type;
  // "feat.fc", or the type for the root module ("Net")
  const std::string& str() const { return path.empty() ? type : path; }
  // The one object for (parent, name, type); thread-safe.
  static const ModulePath* intern(const ModulePath* parent, const std::string& name, const std::string& type);
};

// The module whose forward() runs on this thread (the innermost one), or null.
const ModulePath* current_module();
// Sets current_module() until destroyed (nn::Module's call operator; the engine runs
// each backward rule in the module of its forward op).
class ModuleScope {
 public:
  explicit ModuleScope(const ModulePath* module);
  ~ModuleScope();
  ModuleScope(const ModuleScope&) = delete;
  ModuleScope& operator=(const ModuleScope&) = delete;
 private:
  const ModulePath* saved_;
};

// Which line an op reports: the innermost line of the user's code. The outermost
// public call on this thread owns the site, so ops called from inside reel (a Linear
// calling linear, cross_entropy calling log_softmax) report the user's line, not
// reel's; scopes nest and only the outermost one counts. User code that reel calls
// (a module's forward(), via the module's call operator) opens a UserCode scope: the
// ops it calls own their sites again, so an op in forward() reports its own line.
class SiteScope {
 public:
  explicit SiteScope(const Site& site);
  // Replaces the current site until destroyed: the engine runs each backward rule at
  // the site of its forward call, inside backward()'s own scope.
  struct Replace {};
  SiteScope(const Site& site, Replace);
  // The user's code runs in this scope: the next public call owns the site again.
  struct UserCode {};
  explicit SiteScope(UserCode);
  // Changes nothing (a scope for code that has no better site to give).
  struct Keep {};
  explicit SiteScope(Keep) : owner_(false) {}
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

// Throws Error("op: message (at file:line)"), or "(at file:line in feat.fc)" inside a
// module's forward (see current_module()).
[[noreturn]] void fail(const char* op, const std::string& message, const Site& site);

}  // namespace reel
