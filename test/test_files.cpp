// Files from the outside: IDX headers whose sizes overflow, zero-element IDX tensors,
// gzip input that would inflate far past what its header promises, loads of things
// that are not regular files; and checkpoint writes: stale temporaries of killed saves
// removed, locked ones (a save in flight) kept, symbolic links written through.
#include <fcntl.h>
#include <sys/file.h>
#include <sys/resource.h>
#include <unistd.h>
#include <zlib.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <functional>

#include "gradcheck.h"

using namespace reel;
using Catch::Matchers::Contains;
namespace fs = std::filesystem;
using Bytes = std::vector<uint8_t>;

namespace {

std::string error_of(const std::function<void()>& call) {
  try {
    call();
  } catch (const Error& e) {
    return e.what();
  }
  return "no error";
}

fs::path temp_dir() {
  static std::atomic<int> counter{0};
  fs::path d = fs::temp_directory_path() /
               ("reel_test_files_" + std::to_string(::getpid()) + "_" + std::to_string(counter++));
  fs::create_directories(d);
  return d;
}

void put32(Bytes& b, uint32_t v) {
  for (int s = 24; s >= 0; s -= 8) b.push_back(uint8_t(v >> s));
}

Bytes idx(uint32_t magic, const std::vector<uint32_t>& dims, const Bytes& payload) {
  Bytes b;
  put32(b, magic);
  for (uint32_t d : dims) put32(b, d);
  b.insert(b.end(), payload.begin(), payload.end());
  return b;
}

long max_rss_kib() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return u.ru_maxrss;
}

std::vector<std::string> temporaries(const fs::path& dir) {
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.path().filename().string().find(".tmp-") != std::string::npos) out.push_back(e.path().filename());
  return out;
}

}  // namespace

TEST_CASE("IDX headers whose sizes overflow, and zero-element IDX tensors", "[files]") {
  // 0 x (2^32-1) x (2^32-1): no data to miss, but the strides overflow int64
  CHECK_THAT(error_of([] { data::parse_idx(idx(0x00000803, {0, 0xffffffffu, 0xffffffffu}, {}), "zero.idx"); }),
             Contains("zero.idx") && Contains("0x4294967295x4294967295") && Contains("too large"));
  // zero elements: an empty tensor of the header's shape (no copy from or to a null pointer)
  Tensor e = data::parse_idx(idx(0x00000D02, {0, 5}, {}), "empty.idx");
  CHECK(e.shape() == Dims{0, 5});
  CHECK(e.dtype() == DType::f32);
  CHECK(data::parse_idx(idx(0x00000801, {0}, {}), "none.idx").numel() == 0);
}

TEST_CASE("a gzip IDX file is inflated no further than its header promises", "[files]") {
  fs::path dir = temp_dir();
  // a header for 3x2x3 bytes, then 256 MiB of zeros: 250 KiB of gzip
  std::string path = (dir / "bomb.gz").string();
  {
    gzFile f = gzopen(path.c_str(), "wb9");
    REQUIRE(f);
    Bytes head = idx(0x00000803, {3, 2, 3}, {});
    gzwrite(f, head.data(), unsigned(head.size()));
    std::vector<uint8_t> zeros(1 << 20, 0);
    for (int i = 0; i < 256; ++i) gzwrite(f, zeros.data(), unsigned(zeros.size()));
    gzclose(f);
  }
  CHECK(fs::file_size(path) < (size_t(1) << 20));
  long before = max_rss_kib();
  CHECK_THAT(error_of([&] { data::read_idx(path); }),
             Contains("read_idx: " + path) && Contains("more than the 18 bytes of data its header says"));
  // the old reader inflated all 256 MiB before it failed
  CHECK(max_rss_kib() - before < 64 * 1024);
  fs::remove_all(dir);
}

TEST_CASE("loading a directory or a special file names the path", "[files]") {
  fs::path dir = temp_dir();
  std::string d = dir.string();
  CHECK_THAT(error_of([&] { safetensors::load(d); }), Contains(d) && Contains("a directory"));
  nn::Linear l(2, 2);
  CHECK_THAT(error_of([&] { l.load(d); }), Contains(d) && Contains("a directory"));
  CHECK_THAT(error_of([] { safetensors::load("/dev/null"); }), Contains("/dev/null") && Contains("not a regular file"));
  CHECK_THAT(error_of([&] { data::read_idx(d); }), Contains(d) && Contains("a directory"));
  CHECK_THAT(error_of([&] { safetensors::load(d + "/absent"); }), Contains(d + "/absent"));
  fs::remove_all(dir);
}

TEST_CASE("a save removes the temporaries of killed saves of the same file, not live ones", "[files]") {
  fs::path dir = temp_dir();
  std::string path = (dir / "ckpt.safetensors").string();
  auto make_temp = [&](const std::string& suffix) {
    std::ofstream(path + ".tmp-" + suffix) << "partial";
    return path + ".tmp-" + suffix;
  };
  std::string dead = make_temp("aB3xYz");
  std::string other = (dir / "other.safetensors.tmp-aB3xYz").string();  // another file's
  std::ofstream(other) << "partial";
  // a save in flight holds a lock on its temporary
  std::string live = make_temp("L1v3zz");
  int fd = ::open(live.c_str(), O_RDONLY);
  REQUIRE(fd >= 0);
  REQUIRE(::flock(fd, LOCK_EX | LOCK_NB) == 0);
  safetensors::save(path, {{"w", ones({3})}});
  CHECK_FALSE(fs::exists(dead));
  CHECK(fs::exists(live));
  CHECK(fs::exists(other));
  ::close(fd);  // the saver died: its lock is gone
  nn::Linear l(2, 2);
  l.save(path);
  CHECK_FALSE(fs::exists(live));
  CHECK(temporaries(dir) == std::vector<std::string>{"other.safetensors.tmp-aB3xYz"});
  fs::remove_all(dir);
}

TEST_CASE("a save through a symbolic link replaces the file it names, not the link", "[files]") {
  fs::path dir = temp_dir();
  fs::create_directories(dir / "runs");
  fs::create_symlink("runs/step_100.safetensors", dir / "latest.safetensors");
  fs::create_symlink("latest.safetensors", dir / "best.safetensors");  // a link to a link
  safetensors::save((dir / "best.safetensors").string(), {{"w", full({2}, 7.0)}});
  CHECK(fs::is_symlink(dir / "best.safetensors"));
  CHECK(fs::is_symlink(dir / "latest.safetensors"));
  CHECK(fs::is_regular_file(fs::symlink_status(dir / "runs/step_100.safetensors")));
  CHECK(safetensors::load((dir / "latest.safetensors").string()).at("w").to_vector<float>() ==
        std::vector<float>{7, 7});
  CHECK(temporaries(dir / "runs").empty());
  fs::create_symlink("loop_b", dir / "loop_a");
  fs::create_symlink("loop_a", dir / "loop_b");
  CHECK_THAT(error_of([&] { safetensors::save((dir / "loop_a").string(), {{"w", ones({1})}}); }),
             Contains("symbolic links"));
  fs::remove_all(dir);
}
