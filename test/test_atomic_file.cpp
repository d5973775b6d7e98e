// write_file_atomically (tensor/atomic_file.h) and every writer built on it: with the
// disk "full" (the file size limit below the new file's size) each writer throws an Error
// naming the file and the cause, the previous file keeps its bytes and no temporary is
// left. The ONNX exporter, in its own library, has the same check in test/onnx/full_disk.cpp.
#include <catch2/catch.hpp>
#include <reel/reel.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <stdexcept>
#include <string>

#include "file_limit.h"

using namespace reel;
using Catch::Matchers::Contains;
namespace fs = std::filesystem;

namespace {

struct TempDir {
  fs::path path;
  TempDir() {
    std::string t = (fs::temp_directory_path() / "reel_atomic_XXXXXX").string();
    path = mkdtemp(t.data());
  }
  ~TempDir() { fs::remove_all(path); }
  std::string file(const std::string& name) const { return (path / name).string(); }
};

constexpr uint64_t kLimit = 64;  // bytes: smaller than every new file below

// Writes `path` with `write`, keeps its bytes, then writes it again (`rewrite`, a longer
// file) past the size limit: the second write must fail naming the file and why, and
// leave the first file's bytes and no temporary.
void check_full_disk(const TempDir& dir, const std::string& name, const std::function<void(const std::string&)>& write,
                     const std::function<void(const std::string&)>& rewrite) {
  INFO(name);
  std::string path = dir.file(name);
  write(path);
  std::string before = test::file_bytes(path);
  REQUIRE(!before.empty());
  std::string error = test::error_with_file_limit(kLimit, [&] { rewrite(path); });
  CHECK_THAT(error, Contains(path) && Contains("File too large"));
  CHECK(test::file_bytes(path) == before);
  CHECK(test::temporaries_in(dir.path).empty());
}

}  // namespace

TEST_CASE("write_file_atomically replaces a file whole, with the usual permissions", "[files]") {
  TempDir dir;
  std::string path = dir.file("a.txt");
  write_file_atomically(path, "first", "test");
  CHECK(test::file_bytes(path) == "first");
  write_file_atomically(path, [](FileSink& out) { out.write("sec"), out.write("ond", 3); }, "test");
  CHECK(test::file_bytes(path) == "second");
  mode_t mask = ::umask(0);
  ::umask(mask);
  struct stat st;
  REQUIRE(::stat(path.c_str(), &st) == 0);
  CHECK((st.st_mode & 0777) == (0666 & ~mask));
  CHECK(test::temporaries_in(dir.path).empty());
}

TEST_CASE("an exception from the writer's callback removes the temporary and passes through", "[files]") {
  TempDir dir;
  std::string path = dir.file("a.txt");
  write_file_atomically(path, "kept", "test");
  CHECK_THROWS_WITH(write_file_atomically(
                        path,
                        [](FileSink& out) {
                          out.write("partial");
                          throw std::runtime_error("the caller's own failure");
                        },
                        "test"),
                    "the caller's own failure");
  CHECK(test::file_bytes(path) == "kept");
  CHECK(test::temporaries_in(dir.path).empty());
}

TEST_CASE("a write into a missing folder names the folder's file and the cause", "[files]") {
  TempDir dir;
  std::string path = dir.file("absent/a.txt");
  CHECK_THROWS_WITH(write_file_atomically(path, "x", "write_curves"),
                    Contains("write_curves") && Contains(path) && Contains("No such file or directory"));
}

TEST_CASE("every writer, on a full disk, keeps the previous file and leaves no temporary", "[files]") {
  TempDir dir;
  std::string big(4096, 'x');
  check_full_disk(
      dir, "curves.csv", [](const std::string& p) { write_file_atomically(p, "epoch,loss\n1,0.5\n", "write_curves"); },
      [&](const std::string& p) { write_file_atomically(p, big, "write_curves"); });
  check_full_disk(
      dir, "stream.bin", [](const std::string& p) { write_file_atomically(p, "old", "test"); },
      [&](const std::string& p) {
        write_file_atomically(p, [&](FileSink& out) { for (int i = 0; i < 4; ++i) out.write(big); }, "test");
      });

  check_full_disk(
      dir, "t.safetensors", [](const std::string& p) { safetensors::save(p, {{"w", ones({2})}}); },
      [](const std::string& p) { safetensors::save(p, {{"w", zeros({1000})}}); });

  nn::Linear model(32, 32);
  check_full_disk(
      dir, "model.safetensors", [&](const std::string& p) { model.save(p); },
      [&](const std::string& p) {
        NoGradGuard g;
        model.weight.fill_(0.5);
        model.save(p);
      });

  optim::Adam opt(model.parameters(), {.lr = 1e-3});
  model(ones({2, 32})).sum().backward();
  opt.step();
  check_full_disk(
      dir, "adam.safetensors", [&](const std::string& p) { opt.save(p); },
      [&](const std::string& p) {
        opt.step();
        opt.save(p);
      });

  optim::StepLR sched(opt, {.step_size = 2});
  checkpoint::TrainingState run{.model = &model, .optimizer = &opt, .scheduler = &sched, .step = 3};
  check_full_disk(
      dir, "run.safetensors", [&](const std::string& p) { checkpoint::save(p, run); },
      [&](const std::string& p) {
        run.step = 4;
        checkpoint::save(p, run);
      });

  std::vector<uint8_t> pixels(32 * 32 * 3);
  for (size_t i = 0; i < pixels.size(); ++i) pixels[i] = uint8_t(i * 2654435761u >> 13);  // incompressible
  check_full_disk(
      dir, "image.png", [&](const std::string& p) { write_png(p, pixels.data(), 2, 2, 3); },
      [&](const std::string& p) { write_png(p, pixels.data(), 32, 32, 3); });

  Tensor x = ones({3}).requires_grad_();
  {
    debug::Profiler prof;
    Tensor y = relu(x * 2.0).sum();
    prof.stop();
    check_full_disk(
        dir, "trace.json", [&](const std::string& p) { write_file_atomically(p, "{}", "test"); },
        [&](const std::string& p) { prof.write_chrome_trace(p); });
    check_full_disk(
        dir, "tape.dot", [&](const std::string& p) { write_file_atomically(p, "digraph {}", "test"); },
        [&](const std::string& p) { debug::write_dot(p); });
  }
}
