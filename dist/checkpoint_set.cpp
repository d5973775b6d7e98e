// Checkpoint sets: per-step folders, each rank's files hashed, a MANIFEST written last by
// rank 0 (see checkpoint_set.h for the protocol).
#include "checkpoint_set.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "internal/state.h"

namespace fs = std::filesystem;

namespace reel::dist {

namespace {

constexpr const char* kHeader = "reel checkpoint set 1";
constexpr const char* kManifest = "MANIFEST";

// The steps' folders sort by name as by step.
std::string step_name(int64_t step) { return fmt::format("step-{:010d}", step); }

std::optional<int64_t> step_of(const fs::path& p) {
  std::string n = p.filename().string();
  if (n.size() != 15 || n.rfind("step-", 0) != 0) return std::nullopt;
  for (size_t i = 5; i < n.size(); ++i)
    if (n[i] < '0' || n[i] > '9') return std::nullopt;
  return std::stoll(n.substr(5));
}

// Writes `text` to `path` durably: a temporary, flushed, renamed, then the folder flushed.
void write_durably(const fs::path& path, const std::string& text) {
  fs::path tmp = path;
  tmp += ".tmp";
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) throw Error(fmt::format("cannot create {}: {}", tmp.string(), std::strerror(errno)));
  size_t done = 0;
  while (done < text.size()) {
    ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      ::close(fd);
      throw Error(fmt::format("cannot write {}: {}", tmp.string(), std::strerror(errno)));
    }
    done += size_t(n);
  }
  if (::fsync(fd) != 0 || ::close(fd) != 0) throw Error(fmt::format("cannot flush {}", tmp.string()));
  fs::rename(tmp, path);
  int dfd = ::open(path.parent_path().c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    ::fsync(dfd);
    ::close(dfd);
  }
}

// Parses a MANIFEST; Error naming it and the line when it is not one.
CheckpointSet parse_manifest(const std::string& text, const std::string& where) {
  CheckpointSet s;
  std::istringstream in(text);
  std::string line;
  auto bad = [&](const std::string& why) -> Error {
    return Error(fmt::format("{}: not a checkpoint set's manifest: {}", where, why));
  };
  if (!std::getline(in, line) || line != kHeader) throw bad(fmt::format("the first line is '{}', expected '{}'", line, kHeader));
  bool has_step = false, has_world = false, has_version = false;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    std::istringstream row(line);
    std::string key;
    row >> key;
    if (key == "step") has_step = bool(row >> s.step);
    else if (key == "world_size") has_world = bool(row >> s.world_size);
    else if (key == "version") {
      std::getline(row >> std::ws, s.version);
      has_version = true;
    } else if (key == "meta") {
      std::string k, v;
      row >> k;
      std::getline(row >> std::ws, v);
      s.meta[k] = v;
    } else if (key == "file") {
      CheckpointSetFile f;
      std::string hash;
      if (!(row >> f.rank >> f.name >> f.bytes >> hash)) throw bad(fmt::format("a malformed line '{}'", line));
      f.hash = std::stoull(hash, nullptr, 16);
      s.files.push_back(f);
    } else {
      throw bad(fmt::format("an unknown line '{}'", line));
    }
  }
  if (!has_step || !has_world || !has_version || s.world_size < 1)
    throw bad("it lacks its step, world_size or version line");
  for (int r = 0; r < s.world_size; ++r)
    if (std::none_of(s.files.begin(), s.files.end(), [&](const CheckpointSetFile& f) { return f.rank == r; }))
      throw bad(fmt::format("it was written by {} ranks but lists no file of rank {}", s.world_size, r));
  return s;
}

std::string read_text(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  std::ostringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

}  // namespace

std::vector<std::string> CheckpointSet::files_of(int rank) const {
  std::vector<std::string> names;
  for (const CheckpointSetFile& f : files)
    if (f.rank == rank) names.push_back(f.name);
  return names;
}

uint64_t file_hash(const std::string& path, uint64_t* bytes) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw Error(fmt::format("cannot read {}: {}", path, std::strerror(errno)));
  uint64_t h = 0xcbf29ce484222325ull, n = 0;
  std::vector<unsigned char> buf(1 << 20);
  while (true) {
    ssize_t got = ::read(fd, buf.data(), buf.size());
    if (got < 0) {
      if (errno == EINTR) continue;
      ::close(fd);
      throw Error(fmt::format("cannot read {}: {}", path, std::strerror(errno)));
    }
    if (got == 0) break;
    // FNV-1a's step over 8-byte words (the tail a byte at a time): one multiply per word,
    // memory-bound (a byte at a time took 15-19 ms for a 6.4 MB rank file here)
    size_t i = 0, len = size_t(got);
    for (; i + 8 <= len; i += 8) {
      uint64_t w;
      std::memcpy(&w, buf.data() + i, 8);
      h = (h ^ w) * 0x100000001b3ull;
    }
    for (; i < len; ++i) h = (h ^ buf[i]) * 0x100000001b3ull;
    n += uint64_t(got);
  }
  ::close(fd);
  if (bytes) *bytes = n;
  return h;
}

std::vector<std::string> all_gather_strings(ProcessGroup& pg, const std::string& mine, const char* op, Site site) {
  GroupState& g = pg.state();
  if (g.size == 1) return {mine};
  uint64_t seq = ++g.seq;
  int len = int(mine.size());
  std::vector<int> lens(size_t(g.size));
  MPI_Request req;
  check_mpi(MPI_Iallgather(&len, 1, MPI_INT, lens.data(), 1, MPI_INT, g.comm, &req), op, site);
  wait_request(g, req, op, "the lengths of every rank's text", seq);
  std::vector<int> offsets(size_t(g.size), 0);
  for (int r = 1; r < g.size; ++r) offsets[size_t(r)] = offsets[size_t(r - 1)] + lens[size_t(r - 1)];
  std::string all(size_t(offsets.back() + lens.back()), '\0');
  check_mpi(MPI_Iallgatherv(mine.data(), len, MPI_CHAR, all.data(), lens.data(), offsets.data(), MPI_CHAR, g.comm,
                            &req), op, site);
  wait_request(g, req, op, "every rank's text", seq);
  std::vector<std::string> out;
  for (int r = 0; r < g.size; ++r) out.push_back(all.substr(size_t(offsets[size_t(r)]), size_t(lens[size_t(r)])));
  return out;
}

std::string broadcast_string(ProcessGroup& pg, const std::string& s, int root, const char* op, Site site) {
  GroupState& g = pg.state();
  if (g.size == 1) return s;
  uint64_t seq = ++g.seq;
  int len = int(s.size());
  MPI_Request req;
  check_mpi(MPI_Ibcast(&len, 1, MPI_INT, root, g.comm, &req), op, site);
  wait_request(g, req, op, "the length of a text from one rank", seq);
  std::string out = g.rank == root ? s : std::string(size_t(len), '\0');
  if (len > 0) {
    check_mpi(MPI_Ibcast(out.data(), len, MPI_CHAR, root, g.comm, &req), op, site);
    wait_request(g, req, op, "a text from one rank", seq);
  }
  return out;
}

void on_every_rank(ProcessGroup& pg, const char* op, const std::function<void()>& fn, Site site) {
  std::string error;
  try {
    fn();
  } catch (const std::exception& e) {
    error = e.what();
    if (error.empty()) error = "an exception without a message";
  }
  // "ok" or "failed: ..." from every rank: all of them see the same failures
  std::vector<std::string> all = all_gather_strings(pg, error.empty() ? "ok" : "failed: " + error, op, site);
  for (size_t r = 0; r < all.size(); ++r)
    if (all[r] != "ok") {
      int failed = 0;
      for (auto& a : all) failed += a != "ok";
      throw Error(fmt::format("{}: rank {}{}: {}{}", op, r, failed > 1 ? fmt::format(" (and {} more)", failed - 1) : "",
                              all[r].substr(8), site.known() ? " (at " + site.str() + ")" : ""));
    }
}

CheckpointSets::CheckpointSets(ProcessGroup& pg, CheckpointSetOptions opt, Site site) : pg_(pg), opt_(std::move(opt)) {
  const char* op = "dist::CheckpointSets";
  if (opt_.dir.empty()) fail(op, "expected a folder, got an empty path", site);
  if (opt_.keep < 1) fail(op, fmt::format("keep must be at least 1, got {}", opt_.keep), site);
  pg.check_same(op, fmt::format("program version '{}'", opt_.version), site);
  pg.check_same(op, fmt::format("checkpoint folder '{}' keeping {}", opt_.dir, opt_.keep), site);
  on_every_rank(pg, op, [&] { fs::create_directories(opt_.dir); }, site);
}

std::string CheckpointSets::folder(int64_t step) const { return (fs::path(opt_.dir) / step_name(step)).string(); }

std::optional<CheckpointSet> CheckpointSets::latest(Site site) {
  const char* op = "dist::CheckpointSets::latest";
  // rank 0 finds and checks the newest complete set; "" (none), "E<error>" or the manifest
  std::string answer;
  if (pg_.rank() == 0) {
    try {
      std::vector<std::pair<int64_t, fs::path>> complete;
      for (const fs::directory_entry& e : fs::directory_iterator(opt_.dir))
        if (auto step = step_of(e.path()); step && fs::exists(e.path() / kManifest)) complete.emplace_back(*step, e.path());
      std::sort(complete.begin(), complete.end());
      if (!complete.empty()) {
        const fs::path& folder = complete.back().second;
        std::string text = read_text(folder / kManifest);
        CheckpointSet s = parse_manifest(text, (folder / kManifest).string());
        if (s.step != complete.back().first)
          throw Error(fmt::format("{} says step {}, its folder step {}", (folder / kManifest).string(), s.step,
                                  complete.back().first));
        if (s.version != opt_.version)
          throw Error(fmt::format("the newest complete set, {}, was written by program version '{}'; this program is "
                                  "'{}' (resume with the program that wrote it)",
                                  folder.string(), s.version, opt_.version));
        for (const CheckpointSetFile& f : s.files) {
          fs::path p = folder / f.name;
          if (!fs::exists(p))
            throw Error(fmt::format("the newest complete set (step {}) is damaged: rank {}'s file {} is missing", s.step,
                                    f.rank, p.string()));
          uint64_t bytes = 0, hash = file_hash(p.string(), &bytes);
          if (bytes != f.bytes || hash != f.hash)
            throw Error(fmt::format("the newest complete set (step {}) is damaged: rank {}'s file {} has {} bytes, "
                                    "hash {:016x}; its manifest says {} bytes, hash {:016x}",
                                    s.step, f.rank, p.string(), bytes, hash, f.bytes, f.hash));
        }
        answer = "M" + text;
      }
    } catch (const std::exception& e) {
      answer = std::string("E") + e.what();
    }
  }
  answer = broadcast_string(pg_, answer, 0, op, site);
  if (answer.empty()) return std::nullopt;
  if (answer[0] == 'E') fail(op, answer.substr(1), site);
  CheckpointSet s = parse_manifest(answer.substr(1), opt_.dir + "/.../MANIFEST");
  s.folder = folder(s.step);
  return s;
}

void CheckpointSets::begin(int64_t step, Site site) {
  on_every_rank(pg_, "dist::CheckpointSets::begin", [&] {
    if (pg_.rank() != 0) return;
    for (const fs::directory_entry& e : fs::directory_iterator(opt_.dir)) {
      auto s = step_of(e.path());
      if (!s) continue;
      if (step == 0 || *s > step || !fs::exists(e.path() / kManifest)) fs::remove_all(e.path());
    }
  }, site);
}

void CheckpointSets::save(int64_t step, const std::map<std::string, std::string>& meta,
                          const std::function<std::vector<std::string>(const std::string& folder)>& write, Site site) {
  const char* op = "dist::CheckpointSets::save";
  const std::string dir = folder(step);
  // each rank's files, then their list ("<name> <bytes> <hash>" lines) gathered by every rank
  std::string mine;
  on_every_rank(pg_, op, [&] {
    fs::create_directories(dir);
    std::vector<std::string> names = write(dir);
    if (names.empty()) throw Error("the writer returned no file names");
    for (const std::string& n : names) {
      if (n.empty() || n.find_first_of(" \n/") != std::string::npos || n == kManifest)
        throw Error(fmt::format("the writer returned '{}': expected a plain file name (no space, no '/')", n));
      uint64_t bytes = 0, hash = file_hash((fs::path(dir) / n).string(), &bytes);
      mine += fmt::format("file {} {} {} {:016x}\n", pg_.rank(), n, bytes, hash);
    }
  }, site);
  std::vector<std::string> lists = all_gather_strings(pg_, mine, op, site);
  // rank 0 writes the manifest; every rank hears whether it did
  on_every_rank(pg_, op, [&] {
    if (pg_.rank() != 0) return;
    std::string text = fmt::format("{}\nstep {}\nworld_size {}\nversion {}\n", kHeader, step, pg_.size(), opt_.version);
    for (auto& [k, v] : meta) {
      if (k.empty() || k.find_first_of(" \n") != std::string::npos || v.find('\n') != std::string::npos)
        throw Error(fmt::format("a meta entry '{}' = '{}': expected a key without spaces, a one-line value", k, v));
      text += fmt::format("meta {} {}\n", k, v);
    }
    for (const std::string& l : lists) text += l;
    write_durably(fs::path(dir) / kManifest, text);
    // the new set is complete: older sets beyond `keep` (and incomplete older folders) go
    std::vector<std::pair<int64_t, fs::path>> older;
    for (const fs::directory_entry& e : fs::directory_iterator(opt_.dir))
      if (auto s = step_of(e.path()); s && *s < step) older.emplace_back(*s, e.path());
    std::sort(older.begin(), older.end());
    int complete_kept = 1;  // the new one
    for (auto it = older.rbegin(); it != older.rend(); ++it) {
      bool complete = fs::exists(it->second / kManifest);
      if (complete && complete_kept < opt_.keep) {
        ++complete_kept;
        continue;
      }
      std::error_code ec;  // a folder that will not go is only disk space
      fs::remove_all(it->second, ec);
    }
  }, site);
}

}  // namespace reel::dist
