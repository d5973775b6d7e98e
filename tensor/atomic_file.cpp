// write_file_atomically: a temporary beside the target, flushed, renamed over it, the
// folder flushed. A writer killed at any moment leaves the old file or the new one, whole,
// and at most its own temporary, which the next write of the same file removes.
#include "atomic_file.h"

#include <dirent.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "error.h"

namespace reel {

namespace {

std::string dir_of(const std::string& path) {
  size_t slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : path.substr(0, slash);
}

// The file a write replaces: `path`, or what it names when it is a symbolic link (a link
// to the latest checkpoint stays a link), followed up to 40 links as the kernel does.
std::string write_target(const std::string& path, std::string_view op) {
  std::string p = path;
  for (int hops = 0; hops < 40; ++hops) {
    struct stat st;
    if (::lstat(p.c_str(), &st) != 0 || !S_ISLNK(st.st_mode)) return p;
    std::string link(size_t(st.st_size) + 256, '\0');
    ssize_t n = ::readlink(p.c_str(), link.data(), link.size());
    if (n < 0) throw Error(fmt::format("{}: cannot read the link {}: {}", op, p, std::strerror(errno)));
    link.resize(size_t(n));
    p = !link.empty() && link[0] == '/' ? link : dir_of(p) + "/" + link;
  }
  throw Error(fmt::format("{}: {}: too many levels of symbolic links", op, path));
}

// A temporary is locked (flock) while it is written; one left behind by a writer that was
// killed is unlocked (the kernel drops the lock with the process), and the next write of
// the same target removes it. A temporary of a write still running elsewhere is locked,
// and stays.
void remove_stale_temporaries(const std::string& target) {
  std::string dir = dir_of(target);
  size_t slash = target.rfind('/');
  std::string prefix = (slash == std::string::npos ? target : target.substr(slash + 1)) + ".tmp-";
  DIR* d = ::opendir(dir.c_str());
  if (!d) return;  // mkostemp reports what is wrong with the directory
  while (dirent* e = ::readdir(d)) {
    std::string name = e->d_name;
    if (name.size() != prefix.size() + 6 || name.compare(0, prefix.size(), prefix) != 0) continue;
    std::string stale = dir + "/" + name;
    int fd = ::open(stale.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0) continue;
    if (::flock(fd, LOCK_EX | LOCK_NB) == 0) ::unlink(stale.c_str());
    ::close(fd);
  }
  ::closedir(d);
}

void fsync_dir(const std::string& target, std::string_view op) {
  int fd = ::open(dir_of(target).c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) throw Error(fmt::format("{}: cannot open the folder of {}: {}", op, target, std::strerror(errno)));
  int r = ::fsync(fd);
  std::string reason = std::strerror(errno);
  ::close(fd);
  if (r != 0) throw Error(fmt::format("{}: cannot flush the folder of {}: {}", op, target, reason));
}

}  // namespace

void FileSink::write(const void* data, size_t n) {
  const char* b = static_cast<const char*>(data);
  while (n > 0) {
    ssize_t w = ::write(fd_, b, n);
    if (w < 0 && errno == EINTR) continue;
    // write() returns 0 only for n == 0; a short write is followed by the failing one
    if (w <= 0) throw Error(fmt::format("{}: cannot write {}: {}", op_, target_, std::strerror(errno)));
    b += w;
    n -= size_t(w);
  }
}

void write_file_atomically(const std::string& path, const std::function<void(FileSink&)>& fill, std::string_view op) {
  std::string target = write_target(path, op);
  remove_stale_temporaries(target);
  std::string tmp;
  int fd = -1;
  for (;;) {
    tmp = target + ".tmp-XXXXXX";
    fd = ::mkostemp(tmp.data(), O_CLOEXEC);
    if (fd < 0)
      throw Error(fmt::format("{}: cannot create a temporary file beside {}: {}", op, target, std::strerror(errno)));
    // Another writer's cleanup may have locked and removed it between mkostemp and flock:
    // then it has no name any more, and we make another.
    struct stat st;
    if (::flock(fd, LOCK_EX) == 0 && ::fstat(fd, &st) == 0 && st.st_nlink > 0) break;
    ::close(fd);
  }
  auto fail = [&](const char* what) {
    std::string reason = std::strerror(errno);
    throw Error(fmt::format("{}: cannot {} {}: {}", op, what, target, reason));
  };
  try {
    FileSink sink(fd, target, op);
    fill(sink);
    mode_t mask = ::umask(0);  // mkostemp makes 0600; give the file the usual permissions
    ::umask(mask);
    if (::fchmod(fd, 0666 & ~mask) != 0) fail("set permissions of");
    if (::fsync(fd) != 0) fail("flush");
    if (std::rename(tmp.c_str(), target.c_str()) != 0) fail("rename the temporary file to");
  } catch (...) {
    ::unlink(tmp.c_str());
    ::close(fd);
    throw;
  }
  if (::close(fd) != 0)  // after the rename: the lock is held until the name is gone
    throw Error(fmt::format("{}: cannot write {}: {}", op, target, std::strerror(errno)));
  fsync_dir(target, op);
}

void write_file_atomically(const std::string& path, std::string_view bytes, std::string_view op) {
  write_file_atomically(path, [&](FileSink& out) { out.write(bytes); }, op);
}

}  // namespace reel
