// dist::CheckpointSets on every rank of the job: a set is complete only with its MANIFEST,
// latest() takes the newest complete one and refuses a damaged one naming the file, ranks
// or sets of another program version are Errors on every rank, older sets go only once a
// newer one is complete.
#include <catch2/catch.hpp>

#include <reel/reel.h>

#include <filesystem>
#include <fstream>

using namespace reel;
namespace fs = std::filesystem;

namespace {

// A fresh folder every rank sees (rank 0 makes it, the others hear its name).
std::string shared_folder(dist::ProcessGroup& pg) {
  std::string made;
  if (pg.rank() == 0) {
    char tmpl[] = "/tmp/reel_ckpt_set_XXXXXX";
    made = ::mkdtemp(tmpl);
  }
  return dist::broadcast_string(pg, made, 0, "test");
}

// Each rank writes rank<r>.bin holding `value` (and rank 0 a second file).
std::vector<std::string> write_ranks(dist::ProcessGroup& pg, const std::string& folder, int value) {
  std::vector<std::string> names{"rank" + std::to_string(pg.rank()) + ".bin"};
  std::ofstream(folder + "/" + names[0]) << value << " from rank " << pg.rank();
  if (pg.rank() == 0) {
    names.push_back("shared.bin");
    std::ofstream(folder + "/shared.bin") << "shared " << value;
  }
  return names;
}

std::string read(const std::string& path) {
  std::ifstream f(path);
  std::string s;
  std::getline(f, s);
  return s;
}

}  // namespace

TEST_CASE("checkpoint sets: save, the newest complete set, keep", "[dist][checkpoint]") {
  auto& pg = dist::world();
  std::string dir = shared_folder(pg);
  dist::CheckpointSets sets(pg, {.dir = dir, .version = "test 1", .keep = 2});
  CHECK_FALSE(sets.latest().has_value());
  sets.begin(0);
  for (int step : {10, 20, 30})
    sets.save(step, {{"global_batch", "64"}}, [&](const std::string& f) { return write_ranks(pg, f, step); });
  std::optional<dist::CheckpointSet> s = sets.latest();
  REQUIRE(s.has_value());
  CHECK(s->step == 30);
  CHECK(s->world_size == pg.size());
  CHECK(s->version == "test 1");
  CHECK(s->meta.at("global_batch") == "64");
  CHECK(s->files_of(pg.rank()).front() == "rank" + std::to_string(pg.rank()) + ".bin");
  CHECK(read(s->file("rank" + std::to_string(pg.rank()) + ".bin")) == "30 from rank " + std::to_string(pg.rank()));
  pg.barrier();
  // keep 2: step 10 went once 30 was complete
  CHECK_FALSE(fs::exists(sets.folder(10)));
  CHECK(fs::exists(sets.folder(20) + "/MANIFEST"));

  // a step whose files are written but whose MANIFEST is not (a rank died before the
  // gather) is never taken; the complete set before it is
  if (pg.rank() == 0) {
    fs::create_directories(sets.folder(40));
    std::ofstream(sets.folder(40) + "/rank0.bin") << "40 from rank 0";
  }
  pg.barrier();
  CHECK(sets.latest()->step == 30);
  // resuming from 30 drops the incomplete 40
  sets.begin(30);
  CHECK_FALSE(fs::exists(sets.folder(40)));
  pg.barrier();
  if (pg.rank() == 0) fs::remove_all(dir);
}

TEST_CASE("checkpoint sets: a damaged or missing rank file, another version: Errors on every rank naming it",
          "[dist][checkpoint]") {
  auto& pg = dist::world();
  std::string dir = shared_folder(pg);
  {
    dist::CheckpointSets sets(pg, {.dir = dir, .version = "test 1"});
    sets.save(5, {}, [&](const std::string& f) { return write_ranks(pg, f, 5); });
    sets.save(6, {}, [&](const std::string& f) { return write_ranks(pg, f, 6); });
    const std::string last = pg.size() > 1 ? "rank1.bin" : "rank0.bin";
    pg.barrier();
    if (pg.rank() == 0) std::ofstream(sets.folder(6) + "/" + last, std::ios::app) << "x";  // a changed byte count
    pg.barrier();
    CHECK_THROWS_WITH(sets.latest(), Catch::Contains("is damaged") && Catch::Contains(sets.folder(6) + "/" + last) &&
                                         Catch::Contains("its manifest says"));
    pg.barrier();
    if (pg.rank() == 0) fs::remove(sets.folder(6) + "/" + last);
    pg.barrier();
    CHECK_THROWS_WITH(sets.latest(), Catch::Contains(last + " is missing"));
    pg.barrier();
  }
  {
    dist::CheckpointSets other(pg, {.dir = dir, .version = "test 2"});
    CHECK_THROWS_WITH(other.latest(), Catch::Contains("program version 'test 1'") &&
                                          Catch::Contains("this program is 'test 2'"));
  }
  if (pg.size() > 1) {
    // ranks of different program versions never start
    std::string v = "test " + std::to_string(pg.rank() == 0 ? 1 : 2);
    CHECK_THROWS_WITH(dist::CheckpointSets(pg, {.dir = dir, .version = v}),
                      Catch::Contains("rank 0 has program version 'test 1', rank 1 has program version 'test 2'"));
  }
  // a writer that throws on one rank: every rank throws, naming it; no MANIFEST
  dist::CheckpointSets sets(pg, {.dir = dir, .version = "test 1"});
  const int bad = pg.size() - 1;
  CHECK_THROWS_WITH(sets.save(7, {}, [&](const std::string& f) {
    if (pg.rank() == bad) throw Error("disk full");
    return write_ranks(pg, f, 7);
  }), Catch::Contains("rank " + std::to_string(bad) + ": disk full"));
  CHECK_FALSE(fs::exists(sets.folder(7) + "/MANIFEST"));
  pg.barrier();
  if (pg.rank() == 0) fs::remove_all(dir);
}

TEST_CASE("checkpoint sets: a collective timeout is a setting of the group", "[dist][checkpoint]") {
  // ctest's environment sets no REEL_DIST_TIMEOUT: the generous default
  CHECK(dist::world().timeout_s() == 600);
}
