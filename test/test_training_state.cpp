// checkpoint::save/load (checkpoint/checkpoint.h): a run resumed from its training
// state continues bit for bit, and files that do not fit the state are refused before
// anything changes. (The same across processes: test/resume.)
#include <catch2/catch.hpp>
#include <reel/reel.h>

#include <unistd.h>

#include <filesystem>
#include <memory>
#include <string>
#include <vector>

using namespace reel;
namespace fs = std::filesystem;

namespace {

struct TempDir {
  fs::path path;
  TempDir() {
    std::string t = (fs::temp_directory_path() / "reel_state_XXXXXX").string();
    path = mkdtemp(t.data());
  }
  ~TempDir() { fs::remove_all(path); }
  std::string file(const std::string& name) const { return (path / name).string(); }
};

struct Net : nn::Module {
  nn::Linear fc1{4, 12};
  nn::Dropout drop{0.25};
  nn::Linear fc2{12, 3};
  Net() {
    register_module("fc1", fc1);
    register_module("drop", drop);
    register_module("fc2", fc2);
  }
  Tensor forward(const Tensor& x) override { return fc2(drop(relu(fc1(x)))); }
};

data::TensorDataset make_data() {
  Generator g(77);
  return data::TensorDataset(randn({40, 4}, g), randint(0, 3, {40}, g));
}

// One training run: everything a checkpoint holds, made the same way every time.
struct Run {
  data::TensorDataset dataset = make_data();
  Generator shuffle{31};
  Generator noise{32};  // a named generator: input noise each step
  std::unique_ptr<Net> net;
  std::unique_ptr<optim::Adam> opt;
  std::unique_ptr<optim::StepLR> sched;
  std::unique_ptr<data::DataLoader> loader;
  checkpoint::TrainingState state;

  Run() {
    manual_seed(3);
    net = std::make_unique<Net>();
    opt = std::make_unique<optim::Adam>(net->parameters(), optim::AdamOptions{.lr = 0.01});
    sched = std::make_unique<optim::StepLR>(*opt, optim::StepLROptions{.step_size = 7, .gamma = 0.5});
    loader = std::make_unique<data::DataLoader>(
        dataset, data::DataLoaderOptions{.batch_size = 6, .shuffle = true, .workers = 1, .generator = &shuffle});
    state = {.model = net.get(), .optimizer = opt.get(), .scheduler = sched.get(), .loader = loader.get(),
             .generators = {{"noise", &noise}}};
  }
  // Trains until state.step == until (7 batches an epoch: 6 of 6 and one of 4), saving
  // to `path` after step `save_at`.
  void train(int64_t until, int64_t save_at = -1, const std::string& path = "") {
    while (state.step < until)
      for (data::Example& b : *loader) {
        Tensor x = b.data + 0.01 * randn(b.data.shape(), noise);
        opt->zero_grad();
        cross_entropy((*net)(x), b.target).backward();
        opt->step();
        sched->step();
        if (++state.step == save_at) checkpoint::save(path, state);
        if (state.step == until) break;
      }
  }
  std::vector<float> weights() const {
    std::vector<float> out;
    for (const Tensor& p : net->parameters())
      for (float v : p.to_vector<float>()) out.push_back(v);
    return out;
  }
};

}  // namespace

TEST_CASE("a run resumed from its training checkpoint equals the uninterrupted run", "[checkpoint][random]") {
  TempDir dir;
  for (int64_t stop : {3, 10, 14}) {  // inside epoch 0, inside epoch 1, at the end of epoch 1
    INFO("saved after step " << stop);
    std::string path = dir.file("run.safetensors");
    Run straight;
    straight.train(40);

    Run first;
    first.train(40, stop, path);
    CHECK(first.weights() == straight.weights());  // saving changes nothing in the run

    Run resumed;
    manual_seed(12345);  // elsewhere in the default stream: load puts it back
    checkpoint::load(path, resumed.state);
    CHECK(resumed.state.step == stop);
    CHECK(resumed.opt->steps_taken() == stop);
    CHECK(resumed.sched->last_epoch() == stop);
    resumed.train(40);
    CHECK(resumed.weights() == straight.weights());
  }
}

TEST_CASE("a training checkpoint that does not fit is refused before anything changes", "[checkpoint]") {
  TempDir dir;
  std::string path = dir.file("run.safetensors");
  Run a;
  a.train(9);
  checkpoint::save(path, a.state);
  safetensors::File f = safetensors::load(path);
  CHECK(f.metadata.at("reel") == "training_state 1");
  CHECK(f.metadata.at("optimizer") == "Adam");
  CHECK(f.metadata.at("scheduler") == "StepLR");
  CHECK(f.find("model.fc1.weight") != nullptr);
  CHECK(f.at("step").item<int64_t>() == 9);
  CHECK(f.at("loader.position").to_vector<int64_t>() == std::vector<int64_t>{1, 2});

  Run b;
  b.train(2);
  nn::Linear other(4, 12);  // (its init draws from the default generator)
  std::vector<float> w = b.weights();
  GeneratorState g = default_generator().get_state(), noise = b.noise.get_state();
  data::DataLoaderState pos = b.loader->state();
  auto unchanged = [&] {
    CHECK(b.weights() == w);
    CHECK(default_generator().get_state() == g);
    CHECK(b.noise.get_state() == noise);
    CHECK(b.loader->state() == pos);
    CHECK(b.state.step == 2);
  };
  auto refused = [&](checkpoint::TrainingState s, const std::string& why) {
    INFO(why);
    try {
      checkpoint::load(path, s);
      FAIL("no error");
    } catch (const Error& e) {
      CHECK_THAT(e.what(), Catch::Contains(why) && Catch::Contains(path));
    }
    unchanged();
  };
  checkpoint::TrainingState s = b.state;
  s.generators.clear();
  refused(s, "unexpected \"generator.noise\"");
  s = b.state;
  s.generators.push_back({"other", &b.noise});
  refused(s, "\"generator.other\" is missing");
  s = b.state;
  s.scheduler = nullptr;
  refused(s, "it holds scheduler state, but no scheduler was given");
  s = b.state;
  s.loader = nullptr;
  refused(s, "it holds loader state, but no loader was given");
  optim::SGD sgd(b.net->parameters(), {.lr = 0.1});
  s = b.state;
  s.optimizer = &sgd;
  refused(s, "it holds optimizer state of kind Adam, but the optimizer given is SGD");
  s = b.state;
  s.model = &other;
  refused(s, "the model's \"bias\" is missing");

  std::string plain = dir.file("model.safetensors");
  b.net->save(plain);
  try {
    checkpoint::load(plain, b.state);
    FAIL("no error");
  } catch (const Error& e) {
    CHECK_THAT(e.what(), Catch::Contains("is not a training checkpoint"));
  }
  unchanged();
  CHECK_THROWS_WITH(checkpoint::save(path, {.generators = {{"default", &b.noise}}}),
                    Catch::Contains("may not be named \"default\""));
}

TEST_CASE("a generator seeded above 2^53 resumes on its own stream (all 64 bits of the seed)", "[checkpoint][random]") {
  TempDir dir;
  const uint64_t seed = 0x9e3779b97f4a7c15ull;  // not a double: its low bits would be lost through one
  Generator named(seed ^ 1);
  manual_seed(seed);
  (void)rand({7});
  checkpoint::TrainingState run{.generators = {{"mine", &named}}};
  checkpoint::save(dir.file("state.safetensors"), run);
  GeneratorState want = default_generator().get_state(), want_named = named.get_state();
  manual_seed(1);
  named.manual_seed(2);
  checkpoint::load(dir.file("state.safetensors"), run);
  CHECK(default_generator().get_state() == want);
  CHECK(named.get_state() == want_named);
  CHECK(default_generator().seed() == seed);
}
