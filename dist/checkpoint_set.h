// dist::CheckpointSets: a data-parallel job's checkpoints as one set per step, complete
// only once every rank's files for that step are written, so that a rank lost at any
// moment (killed, out of memory, a host gone) never leaves a resume point that mixes
// steps.
//
//   dist::CheckpointSets sets(pg, {.dir = "out/checkpoints", .version = "train 1.2"});
//   std::optional<dist::CheckpointSet> from = resume ? sets.latest() : std::nullopt;
//   if (from) checkpoint::load(from->file("rank" + std::to_string(pg.rank()) + ".safetensors"), run);
//   sets.begin(from ? from->step : 0);          // drops what this run can no longer use
//   ... every N steps, on every rank:
//   sets.save(run.step, {{"global_batch", "128"}}, [&](const std::string& folder) {
//     checkpoint::save(folder + "/rank" + std::to_string(pg.rank()) + ".safetensors", run);
//     return std::vector<std::string>{"rank" + std::to_string(pg.rank()) + ".safetensors"};
//   });
//
// Layout: <dir>/step-<step, 10 digits>/ holds each rank's files and MANIFEST. save():
// every rank writes its files (each to a temporary, flushed, renamed: safetensors::save),
// hashes them (FNV-1a's 64-bit step over 8-byte words) and hands the list to rank 0; once every rank's list has come
// (the gather is the barrier), rank 0 writes MANIFEST (a temporary, fsync, rename, fsync
// of the folder), and only then removes sets older than the newest `keep`. A set without
// MANIFEST is incomplete and never read. latest() takes the newest complete set, checks
// every file it lists (present, same size, same hash) and that it was written by the same
// program version, else throws on every rank naming the file or both versions; it never
// falls back silently to an older set.
//
// MANIFEST (text): "reel checkpoint set 1", "step <n>", "world_size <W>", "version <v>",
// "meta <key> <value>" lines (what the caller recorded), "file <rank> <name> <bytes>
// <hash hex>" lines.
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "process_group.h"

namespace reel::dist {

struct CheckpointSetOptions {
  std::string dir;      // the sets' folder (on a file system every rank sees, across hosts too)
  std::string version;  // the program's version: every rank must pass the same, and a set must match it
  int keep = 2;         // complete sets kept (the newest); older ones go once a newer one is complete
};

struct CheckpointSetFile {
  int rank = 0;
  std::string name;
  uint64_t bytes = 0, hash = 0;
};

// One complete set, as its MANIFEST says.
struct CheckpointSet {
  int64_t step = 0;
  int world_size = 0;  // the ranks that wrote it
  std::string version;
  std::string folder;
  std::map<std::string, std::string> meta;
  std::vector<CheckpointSetFile> files;
  std::string file(const std::string& name) const { return folder + "/" + name; }
  // The files rank r wrote, in the order its writer listed them.
  std::vector<std::string> files_of(int rank) const;
};

class CheckpointSets {
 public:
  // Collective: every rank must pass the same folder and version (an Error on every rank
  // naming both otherwise).
  CheckpointSets(ProcessGroup& pg, CheckpointSetOptions opt, Site site = {});

  // Collective: the newest complete set under dir (the same answer on every rank), or
  // none. Rank 0 reads and checks it, so the files must be where rank 0 sees them.
  std::optional<CheckpointSet> latest(Site site = {});

  // Collective: this run continues from `step` (0: starts afresh). Rank 0 removes the
  // folders it can no longer use: incomplete sets and sets newer than `step` (a fresh run
  // removes an earlier run's sets: their steps would otherwise look newer than its own).
  void begin(int64_t step, Site site = {});

  // Collective: every rank's `write(folder)` writes its files into the step's folder and
  // returns their names; the set is complete (MANIFEST written) when save() returns on
  // any rank. A writer that throws on any rank is an Error on every rank naming that rank,
  // and no MANIFEST is written.
  void save(int64_t step, const std::map<std::string, std::string>& meta,
            const std::function<std::vector<std::string>(const std::string& folder)>& write, Site site = {});

  const std::string& dir() const { return opt_.dir; }
  std::string folder(int64_t step) const;  // <dir>/step-<step>

 private:
  ProcessGroup& pg_;
  CheckpointSetOptions opt_;
};

// Collective: runs `fn` on every rank; when it throws on any, every rank throws an Error
// from `op` naming the first rank that failed and its message (so no rank goes on alone
// into a collective the failed one will never join).
void on_every_rank(ProcessGroup& pg, const char* op, const std::function<void()>& fn, Site site = {});

// Collective: every rank's string, in rank order.
std::vector<std::string> all_gather_strings(ProcessGroup& pg, const std::string& mine, const char* op, Site site = {});
// Collective: root's string on every rank.
std::string broadcast_string(ProcessGroup& pg, const std::string& s, int root, const char* op, Site site = {});

// FNV-1a's 64-bit step over a file's 8-byte words (its tail bytes one at a time); Error naming the file when it cannot be read.
uint64_t file_hash(const std::string& path, uint64_t* bytes = nullptr);

}  // namespace reel::dist
