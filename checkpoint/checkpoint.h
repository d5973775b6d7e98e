// A training run's whole state in one safetensors file, so that a run stopped and
// resumed in a new process continues bit for bit as if it had never stopped: the
// model, the optimizer, the LR scheduler, the generators (this thread's default one,
// the loader's, and any named here), the DataLoader's position (epoch, batch within
// it, its shuffle) and the step count. Written like Module::save: to a temporary,
// then renamed over `path`, so a crash never leaves a partial checkpoint.
//
//   checkpoint::TrainingState run{.model = &net, .optimizer = &opt, .scheduler = &sched,
//                                 .loader = &loader};
//   if (std::filesystem::exists(path)) checkpoint::load(path, run);  // run.step resumes too
//   while (run.step < total_steps)
//     for (data::Example& b : loader) {
//       opt.zero_grad(); cross_entropy(net(b.data), b.target).backward(); opt.step(); sched.step();
//       if (++run.step % 100 == 0) checkpoint::save(path, run);
//       if (run.step == total_steps) break;
//     }
//
// What makes a resume exact: build the same model, optimizer, scheduler and loader
// (same dataset and options) before load(); save after a step is complete (the loader
// counts every batch it handed out as used); let each random draw come from a
// generator the checkpoint knows: the thread's default generator (dropout, init), the
// loader's own generator, or one listed in `generators` (a Dropout given its own).
//
// File layout (names inside the safetensors file): "model.<name>", "optimizer.<name>",
// "scheduler.<name>" (each part's state_dict), "generator.default" and
// "generator.<name>" (i64 [3]: seed, CPU offset, CUDA offset, as bits), "loader.position"
// (i64 [2]: epoch, batch), "loader.shuffle" and "loader.generator" (i64 [3]), "scaler.<name>"
// (a GradScaler's state_dict: none for a disabled one), "step" (i64 []); metadata "reel" =
// "training_state 1" and the kinds of model, optimizer and scheduler, and "scaler" =
// "GradScaler" or "GradScaler (disabled)" (which parts the file holds).
// With mixed precision, the GradScaler joins the run (its scale and growth tracker resume):
//   checkpoint::TrainingState run{.model = &net, .optimizer = &opt, .scaler = &scaler};
#pragma once
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "../data/dataloader.h"
#include "../nn/module.h"
#include "../optim/grad_scaler.h"
#include "../optim/optimizer.h"
#include "../optim/scheduler.h"

namespace reel::checkpoint {

// The parts of a run; null parts are not part of the checkpoint. The pointed-to
// objects must stay alive during save() and load().
struct TrainingState {
  nn::Module* model = nullptr;
  optim::Optimizer* optimizer = nullptr;
  optim::GradScaler* scaler = nullptr;  // mixed precision's loss scale (optim/grad_scaler.h)
  optim::LRScheduler* scheduler = nullptr;
  data::DataLoader* loader = nullptr;
  // Generators besides the calling thread's default one (always saved) and the
  // loader's (saved with the loader), by name.
  std::vector<std::pair<std::string, Generator*>> generators = {};
  int64_t step = 0;
};

void save(const std::string& path, const TrainingState& state);

// Restores every part of `state` (and this thread's default generator, and state.step)
// from `path`. The file must hold exactly the parts `state` has, with the same
// optimizer and scheduler kinds and generator names; every such mismatch and every
// generator, loader, scaler or step entry is checked before anything changes (a scaler
// saved disabled restores into a disabled one only). The model,
// optimizer and scheduler then load in that order, each validating before it copies:
// a shape mismatch found in a later part throws with the earlier ones already loaded.
void load(const std::string& path, TrainingState& state);

}  // namespace reel::checkpoint
