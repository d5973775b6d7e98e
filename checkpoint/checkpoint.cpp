// The training-state checkpoint: each part's state under its own prefix in one
// safetensors file, checked as a whole before any part is restored.
#include "checkpoint.h"

#include <fmt/format.h>

#include <cstring>
#include <map>
#include <optional>
#include <set>

#include "../formats/safetensors.h"

namespace reel::checkpoint {

namespace {

constexpr const char* kFormat = "training_state 1";
constexpr const char* kScaler = "GradScaler";
constexpr const char* kScalerDisabled = "GradScaler (disabled)";

// uint64 words as the bits of an i64 tensor: safetensors has no unsigned 64-bit dtype
Tensor words(std::vector<uint64_t> w) {
  std::vector<int64_t> v(w.size());
  std::memcpy(v.data(), w.data(), w.size() * sizeof(uint64_t));
  return from_vector<int64_t>(v);
}
Tensor generator_tensor(const GeneratorState& s) { return words({s.seed, s.cpu_offset, s.cuda_offset}); }

struct Reader {
  const std::string& path;
  std::map<std::string, const Tensor*> by_name;
  std::set<std::string> used;

  [[noreturn]] void bad(const std::string& what) const {
    throw Error(fmt::format("checkpoint::load from {}: {}; nothing was loaded", path, what));
  }
  const Tensor& at(const std::string& name, const Dims& shape) {
    auto it = by_name.find(name);
    if (it == by_name.end()) bad(fmt::format("\"{}\" is missing", name));
    const Tensor& t = *it->second;
    if (t.dtype() != DType::i64 || t.shape() != shape)
      bad(fmt::format("\"{}\" is {} {}, expected i64 {}", name, dtype_name(t.dtype()), t.shape().str(), shape.str()));
    used.insert(name);
    return t;
  }
  // The stored bits themselves: to_vector() passes through double, which keeps 53 of a
  // seed's 64 bits (a generator seeded above 2^53 would resume on another stream)
  std::vector<uint64_t> words(const std::string& name, int64_t n) {
    Tensor t = at(name, Dims{n}).contiguous();
    std::vector<uint64_t> w(static_cast<size_t>(n));
    std::memcpy(w.data(), t.data<int64_t>(), size_t(n) * sizeof(int64_t));
    return w;
  }
  GeneratorState generator(const std::string& name) {
    std::vector<uint64_t> w = words(name, 3);
    return {.seed = w[0], .cpu_offset = w[1], .cuda_offset = w[2]};
  }
  // The entries under "<prefix>.", without the prefix.
  nn::NamedTensors part(const std::string& prefix) {
    nn::NamedTensors out;
    std::string p = prefix + ".";
    for (const auto& [name, t] : by_name)
      if (name.compare(0, p.size(), p) == 0) {
        out.emplace_back(name.substr(p.size()), *t);
        used.insert(name);
      }
    return out;
  }
  std::string meta(const safetensors::File& f, const std::string& key) const {
    auto it = f.metadata.find(key);
    return it == f.metadata.end() ? "" : it->second;
  }
  // A part present in the file exactly when the state has it.
  void same_presence(const char* part, bool here, bool there) const {
    if (here && !there) bad(fmt::format("it holds no {} state, but one was given to restore", part));
    if (!here && there) bad(fmt::format("it holds {} state, but no {} was given to restore it into", part, part));
  }
};

void prefixed(std::vector<std::pair<std::string, Tensor>>& out, const std::string& prefix, const nn::NamedTensors& part) {
  for (const auto& [name, t] : part) out.emplace_back(prefix + "." + name, t);
}

void check_generator_names(const TrainingState& state, const char* fn) {
  std::set<std::string> seen;
  for (const auto& [name, g] : state.generators) {
    if (name.empty() || name == "default")
      throw Error(fmt::format("checkpoint::{}: a generator may not be named \"{}\" (the thread's default generator is "
                              "always saved as \"default\")", fn, name));
    if (!g) throw Error(fmt::format("checkpoint::{}: generator \"{}\" is null", fn, name));
    if (!seen.insert(name).second) throw Error(fmt::format("checkpoint::{}: generator \"{}\" appears twice", fn, name));
  }
}

}  // namespace

void save(const std::string& path, const TrainingState& state) {
  check_generator_names(state, "save");
  std::vector<std::pair<std::string, Tensor>> ts;
  std::map<std::string, std::string> meta = {{"format", "pt"}, {"reel", kFormat}};
  if (state.model) {
    prefixed(ts, "model", state.model->state_dict());
    meta["model"] = state.model->type_name();
  }
  if (state.optimizer) {
    prefixed(ts, "optimizer", state.optimizer->state_dict());
    meta["optimizer"] = state.optimizer->name();
  }
  if (state.scheduler) {
    prefixed(ts, "scheduler", state.scheduler->state_dict());
    meta["scheduler"] = state.scheduler->name();
  }
  if (state.scaler) {
    prefixed(ts, "scaler", state.scaler->state_dict());
    meta["scaler"] = state.scaler->is_enabled() ? kScaler : kScalerDisabled;
  }
  if (state.loader) {
    data::DataLoaderState s = state.loader->state();
    ts.emplace_back("loader.position", from_vector<int64_t>({s.epoch, s.batch}));
    ts.emplace_back("loader.shuffle", generator_tensor(s.shuffle));
    if (Generator* g = state.loader->options().generator) ts.emplace_back("loader.generator", generator_tensor(g->get_state()));
  }
  ts.emplace_back("generator.default", generator_tensor(default_generator().get_state()));
  for (const auto& [name, g] : state.generators) ts.emplace_back("generator." + name, generator_tensor(g->get_state()));
  ts.emplace_back("step", from_vector<int64_t>({state.step}).reshape(Dims{}));
  safetensors::save(path, ts, meta);
}

void load(const std::string& path, TrainingState& state) {
  check_generator_names(state, "load");
  safetensors::File f = safetensors::load(path);
  Reader r{path, {}, {}};
  for (const auto& [name, t] : f.tensors) r.by_name[name] = &t;
  if (r.meta(f, "reel") != kFormat)
    r.bad(fmt::format("it is not a training checkpoint (metadata \"reel\" is \"{}\", expected \"{}\")", r.meta(f, "reel"),
                      kFormat));

  // ---- everything checked and decoded before anything changes
  nn::NamedTensors model = r.part("model"), optimizer = r.part("optimizer"), scheduler = r.part("scheduler"),
                   scaler = r.part("scaler");
  r.same_presence("model", state.model != nullptr, f.metadata.count("model") != 0);
  r.same_presence("optimizer", state.optimizer != nullptr, f.metadata.count("optimizer") != 0);
  r.same_presence("scheduler", state.scheduler != nullptr, f.metadata.count("scheduler") != 0);
  r.same_presence("loader", state.loader != nullptr, r.by_name.count("loader.position") != 0);
  r.same_presence("GradScaler", state.scaler != nullptr, f.metadata.count("scaler") != 0);
  if (state.scaler) {
    std::string kind = r.meta(f, "scaler");
    if (kind != kScaler && kind != kScalerDisabled)
      r.bad(fmt::format("its metadata \"scaler\" is \"{}\", expected \"{}\" or \"{}\"", kind, kScaler, kScalerDisabled));
    if (state.scaler->is_enabled() && kind == kScalerDisabled)
      r.bad("it holds the state of a disabled GradScaler (no scale), but the GradScaler given is enabled");
    if (!state.scaler->is_enabled() && kind == kScaler)
      r.bad("it holds the state of an enabled GradScaler, but the GradScaler given is disabled");
    state.scaler->check_state_dict(scaler, path);  // "GradScaler: load from <path>: ..." when it does not fit
  }
  if (state.optimizer && r.meta(f, "optimizer") != state.optimizer->name())
    r.bad(fmt::format("it holds optimizer state of kind {}, but the optimizer given is {}", r.meta(f, "optimizer"),
                      state.optimizer->name()));
  if (state.scheduler && r.meta(f, "scheduler") != state.scheduler->name())
    r.bad(fmt::format("it holds scheduler state of kind {}, but the scheduler given is {}", r.meta(f, "scheduler"),
                      state.scheduler->name()));
  if (state.model) {  // names and shapes: what Module::load_state_dict would refuse
    std::map<std::string, Dims> want;
    for (const auto& [name, t] : state.model->state_dict()) want[name] = t.shape();
    std::map<std::string, Dims> got;
    for (const auto& [name, t] : model) got[name] = t.shape();
    for (const auto& [name, shape] : want) {
      auto it = got.find(name);
      if (it == got.end()) r.bad(fmt::format("the model's \"{}\" is missing", name));
      if (it->second != shape)
        r.bad(fmt::format("the model's \"{}\" is {} in it but {} here", name, it->second.str(), shape.str()));
    }
    for (const auto& [name, shape] : got)
      if (!want.count(name)) r.bad(fmt::format("\"model.{}\" is not in the model", name));
  }
  data::DataLoaderState loader{};
  std::optional<GeneratorState> loader_generator;
  if (state.loader) {
    std::vector<uint64_t> pos = r.words("loader.position", 2);
    loader.epoch = int64_t(pos[0]);
    loader.batch = int64_t(pos[1]);
    if (loader.epoch < 0 || loader.batch < 0)
      r.bad(fmt::format("loader.position is epoch {} batch {}, expected both >= 0", loader.epoch, loader.batch));
    loader.shuffle = r.generator("loader.shuffle");
    bool has = state.loader->options().generator != nullptr;
    if (has != (r.by_name.count("loader.generator") != 0))
      r.bad(has ? "the loader has a generator but the checkpoint holds no loader.generator"
                : "it holds a loader.generator but the loader has no generator");
    if (has) loader_generator = r.generator("loader.generator");
  }
  GeneratorState default_state = r.generator("generator.default");
  std::vector<GeneratorState> named;
  for (const auto& [name, g] : state.generators) named.push_back(r.generator("generator." + name));
  int64_t step = r.at("step", Dims{}).item<int64_t>();
  for (const auto& [name, t] : f.tensors)
    if (!r.used.count(name))
      r.bad(fmt::format("unexpected \"{}\" (a generator or part the given state does not have)", name));

  // ---- restore: the parts that validate themselves first, then the rest (cannot fail)
  if (state.model) state.model->load_state_dict(model, true, path);
  if (state.optimizer) state.optimizer->load_state_dict(optimizer, path);
  if (state.scheduler) state.scheduler->load_state_dict(scheduler, path);
  if (state.scaler) state.scaler->load_state_dict(scaler, path);  // checked above: cannot fail
  if (state.loader) {
    state.loader->load_state(loader);
    if (loader_generator) state.loader->options().generator->set_state(*loader_generator);
  }
  default_generator().set_state(default_state);
  for (size_t i = 0; i < named.size(); ++i) state.generators[i].second->set_state(named[i]);
  state.step = step;
}

}  // namespace reel::checkpoint
