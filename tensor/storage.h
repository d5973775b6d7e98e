// Storage: one device allocation, shared by every view of it.
#pragma once
#include <cstddef>
#include <cstdint>

#include "device.h"
#include "ref.h"

namespace reel {

class Storage : public RefCounted {
 public:
  // Allocates `nbytes` on `device` through that device's backend.
  Storage(size_t nbytes, Device device);
  // Wraps memory the caller owns and keeps alive (no free on destruction).
  Storage(void* borrowed, size_t nbytes, Device device);
  // Takes memory allocated outside the backend (pinned host memory from cuda/), freed
  // by `release(data, nbytes)` on destruction.
  using Release = void (*)(void* data, size_t nbytes);
  Storage(void* data, size_t nbytes, Device device, Release release);
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;

  void* data() const { return data_; }
  size_t nbytes() const { return nbytes_; }
  Device device() const { return device_; }
  // Bumped by every in-place write; backward compares it with the value saved.
  uint32_t version() const { return version_.load(std::memory_order_relaxed); }
  void bump_version() { version_.fetch_add(1, std::memory_order_relaxed); }
  // An in-place op's write: bumps the version and remembers the op and the user's line,
  // so backward can say which write spoiled a saved value.
  void note_write(const char* op, const char* file, uint32_t line) {
    bump_version();
    last_writer_ = op;
    last_writer_file_ = file;
    last_writer_line_ = line;
  }
  const char* last_writer() const { return last_writer_; }  // null: none noted
  const char* last_writer_file() const { return last_writer_file_; }
  uint32_t last_writer_line() const { return last_writer_line_; }

 private:
  void* data_ = nullptr;
  size_t nbytes_ = 0;
  Device device_;
  bool owned_ = true;
  Release release_ = nullptr;
  std::atomic<uint32_t> version_{0};
  const char* last_writer_ = nullptr;
  const char* last_writer_file_ = nullptr;
  uint32_t last_writer_line_ = 0;
};

inline void ref_inc(Storage* s) { s->refs.fetch_add(1, std::memory_order_relaxed); }
inline void ref_dec(Storage* s) {
  if (s->refs.fetch_sub(1, std::memory_order_acq_rel) == 1) delete s;
}

}  // namespace reel
