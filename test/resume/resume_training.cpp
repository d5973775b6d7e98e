// Exact resume across processes: a small MLP with dropout (one layer drawing from the
// thread's default generator, one from a generator of its own) trained on synthetic
// data by a shuffling DataLoader with worker threads and a random per-batch transform,
// AdamW and a StepLR schedule. run.sh trains 400 steps straight, and 200 + 16 + 184
// steps in three processes, each loading the checkpoint the previous one saved (the
// first stop is inside an epoch, the second at an epoch's end), and compares weights.
//
//   resume_training train --until N [--from CKPT] [--save CKPT] [--weights FILE] [--reseed]
//   resume_training compare A B     exit 0 when every tensor of A and B is bit-identical
//
// --reseed re-seeds the default generator after loading, as if the checkpoint had no
// generator state: run.sh checks that the weights then differ (dropout matters).
#include <reel/reel.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>

using namespace reel;

namespace {

struct Mlp : nn::Module {
  Generator drop_gen{99};
  nn::Linear fc1{10, 32};
  nn::Dropout drop1{0.2};
  nn::Linear fc2{32, 32};
  nn::Dropout drop2{0.1, &drop_gen};
  nn::Linear fc3{32, 4};
  Mlp() {
    register_module("fc1", fc1);
    register_module("drop1", drop1);
    register_module("fc2", fc2);
    register_module("drop2", drop2);
    register_module("fc3", fc3);
  }
  Tensor forward(const Tensor& x) override { return fc3(drop2(relu(fc2(drop1(relu(fc1(x))))))); }
};

int train(int argc, char** argv) {
  int64_t until = 0;
  std::string from, save, weights;
  bool reseed = false;
  for (int i = 2; i < argc; ++i) {
    std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "%s needs a value\n", a.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--until") until = std::atoll(value().c_str());
    else if (a == "--from") from = value();
    else if (a == "--save") save = value();
    else if (a == "--weights") weights = value();
    else if (a == "--reseed") reseed = true;
    else {
      std::fprintf(stderr, "unknown argument %s\n", a.c_str());
      return 2;
    }
  }

  Generator data_gen(2024);
  Tensor x = randn({96, 10}, data_gen);
  Tensor y = argmax(matmul(x, randn({10, 4}, data_gen)), 1);  // a learnable rule
  data::TensorDataset dataset(x, y);
  Generator shuffle(7);
  auto noise = [](data::Example b, uint64_t seed) {  // in the workers, from the batch's own seed
    Generator g(seed);
    b.data = b.data + 0.05 * randn(b.data.shape(), g);
    return b;
  };
  data::DataLoader loader(dataset, {.batch_size = 8, .shuffle = true, .workers = 2, .prefetch = 2,
                                    .transform = noise, .generator = &shuffle});
  manual_seed(1);
  Mlp net;
  optim::AdamW opt(net.parameters(), {.lr = 3e-3, .weight_decay = 0.01});
  optim::StepLR sched(opt, {.step_size = 50, .gamma = 0.7});
  checkpoint::TrainingState run{.model = &net, .optimizer = &opt, .scheduler = &sched, .loader = &loader,
                                .generators = {{"drop2", &net.drop_gen}}};
  if (!from.empty()) {
    checkpoint::load(from, run);
    if (reseed) manual_seed(1);
  }
  while (run.step < until)
    for (data::Example& b : loader) {
      opt.zero_grad();
      cross_entropy(net(b.data), b.target).backward();
      opt.step();
      sched.step();
      if (++run.step == until) break;
    }
  if (!save.empty()) checkpoint::save(save, run);
  if (!weights.empty()) net.save(weights);
  data::DataLoaderState s = loader.state();
  std::printf("step %lld: epoch %lld batch %lld, lr %g\n", (long long)run.step, (long long)s.epoch,
              (long long)s.batch, opt.lr());
  return 0;
}

int compare(const std::string& a, const std::string& b) {
  safetensors::File fa = safetensors::load(a), fb = safetensors::load(b);
  if (fa.tensors.size() != fb.tensors.size()) {
    std::printf("%zu tensors against %zu\n", fa.tensors.size(), fb.tensors.size());
    return 1;
  }
  int differ = 0;
  for (const auto& [name, t] : fa.tensors) {
    const Tensor& u = fb.at(name);
    bool same = t.dtype() == u.dtype() && t.shape() == u.shape() &&
                std::memcmp(t.data_ptr(), u.data_ptr(), size_t(t.numel()) * t.element_size()) == 0;
    if (!same) {
      double diff = amax(abs(t.to(DType::f64) - u.to(DType::f64))).item<double>();
      std::printf("%s differs (max |difference| %g)\n", name.c_str(), diff);
      ++differ;
    }
  }
  if (!differ) std::printf("all %zu tensors bit-identical\n", fa.tensors.size());
  return differ ? 1 : 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    if (argc >= 2 && std::string(argv[1]) == "train") return train(argc, argv);
    if (argc == 4 && std::string(argv[1]) == "compare") return compare(argv[2], argv[3]);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  std::fprintf(stderr, "usage: resume_training train --until N [...] | compare A B\n");
  return 2;
}
