// One way to write a file: every file reel writes (safetensors weights and checkpoints,
// ONNX models, PNG images, profiler traces, a sample's CSV curves) goes through
// write_file_atomically, so a full disk, a size limit or a kill leaves the previous file
// whole and no temporary behind.
//
//   reel::write_file_atomically("curves.csv", text, "write_curves");
//   reel::write_file_atomically("w.bin", [&](reel::FileSink& out) {
//     out.write(header.data(), header.size());
//     out.write(body.data(), body.size());
//   }, "save_weights");
#pragma once
#include <cstddef>
#include <functional>
#include <string>
#include <string_view>

namespace reel {

// The open temporary a write_file_atomically callback fills. A failed write throws
// Error naming the target file and the cause ("No space left on device").
class FileSink {
 public:
  void write(const void* data, size_t n);
  void write(std::string_view s) { write(s.data(), s.size()); }

 private:
  friend void write_file_atomically(const std::string&, const std::function<void(FileSink&)>&, std::string_view);
  FileSink(int fd, const std::string& target, std::string_view op) : fd_(fd), target_(target), op_(op) {}
  int fd_;
  const std::string& target_;
  std::string_view op_;
};

// Writes `path` through a temporary in the same folder (`path.tmp-XXXXXX`, locked while
// it is written): `fill` writes the bytes, then the temporary is flushed (fsync), given
// the usual permissions (0666 less the umask), renamed over `path`, and the folder
// flushed. On any failure (a write, the flush, the rename, an exception from `fill`)
// the temporary is removed and `path` keeps its previous contents; the Error names `op`,
// the file and the cause, and an exception from `fill` passes through unchanged. A
// `path` that is a symbolic link stays one: the file it names is replaced. A temporary
// left by a killed writer (unlocked) is removed by the next write of the same file.
void write_file_atomically(const std::string& path, const std::function<void(FileSink&)>& fill, std::string_view op);
// The same, for bytes already in memory.
void write_file_atomically(const std::string& path, std::string_view bytes, std::string_view op);

}  // namespace reel
