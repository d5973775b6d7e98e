// Trains an MLP, a CNN or a ResNet on Fashion-MNIST, the way one would in PyTorch: a
// seeded shuffling DataLoader whose worker prepares the next batches (and augments
// them: --augment crop-flip), Adam or SGD with a cosine schedule, a progress bar, test
// accuracy after every epoch, then a checkpoint and the curves as CSV; a TensorBoard
// log of the losses, accuracies, learning rate, weight histograms and a few test
// images as it trains.
//
//   train_fashion_mnist --model cnn --epochs 10       # out/cnn/, runs/train_fashion_mnist/cnn
//   train_fashion_mnist --model resnet --augment crop-flip --optimizer sgd --lr 0.05 --epochs 15
//   tensorboard --logdir runs                        # while it trains
//   scripts/plot_curves.py out/cnn/curves.csv        # out/cnn/curves.png, with matplotlib
//   evaluate_fashion_mnist --model cnn               # reads out/cnn/cnn.safetensors
//
// Stop and resume: the whole training state (checkpoint::TrainingState: model, optimizer,
// schedule, generators, the loader's place, the step) goes to <out>/checkpoint.safetensors
// every --checkpoint-every steps, at every epoch's end and on SIGINT or SIGTERM (Ctrl-C: the
// step in progress finishes, the state is saved, exit status 130); --resume continues
// from it, to the same weights bit for bit as a run that never stopped.
//
// --distributed trains data-parallel on the processes mpirun starts (a build with MPI):
// each rank a shard of every epoch (DistributedSampler), the model wrapped in
// DistributedDataParallel (gradients averaged over the ranks during backward); rank 0
// prints, writes the curves and saves the weights. The training state goes to
// <out>/checkpoints/step-<n>/ as a set (every rank's file, then a MANIFEST: complete only
// when every rank wrote; dist::CheckpointSets), and --resume continues from the newest
// complete set, on the same or another number of ranks (the global batch kept: see
// docs/distributed.md).
//   OMP_NUM_THREADS=1 mpirun -np 2 train_fashion_mnist --distributed --batch-size 64
// This program loads no MPI library: --distributed runs its twin
// train_fashion_mnist_distributed (the same source linked with libreel_dist, beside it)
// in its place (execv), so it starts on machines without OpenMPI.
#include <reel/reel.h>

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "fashion_mnist.h"

using namespace reel;
using Clock = std::chrono::steady_clock;

namespace {

const char* kUsage =
    "usage: train_fashion_mnist [--model mlp|cnn|resnet] [--epochs N] [--data DIR] [--out DIR] [--logdir DIR|none]\n"
    "                           [--checkpoint-every N] [--resume]\n"
    "                           [--batch-size N] [--lr X] [--seed N] [--workers N] [--device cpu|cuda]\n"
    "                           [--augment none|crop-flip] [--optimizer adam|sgd] [--weight-decay X]\n"
    "                           [--steps-per-epoch N] [--amp none|bf16|f16] [--distributed]\n"
    "                           [--global-batch-size N] [--resume-or-start] [--dist-timeout S] [--stop-after N]\n"
    "                           [--dropout P]\n"
    "  --distributed: under mpirun; --batch-size is then per rank\n"
    "  --global-batch-size N: (--distributed) N images a step over all ranks, N / ranks each (instead of --batch-size)\n"
    "  --resume-or-start: --resume when a training state exists, else start afresh (for restart loops)\n"
    "  --stop-after N: stop after step N as on SIGINT (save, exit 130): a job's share of a time-limited run\n"
    "  --dropout P: every dropout layer's probability (default: the model's; 0: none)\n"
    "  --dist-timeout S: (--distributed) end the job when a collective waits S seconds (default\n"
    "                    $REEL_DIST_TIMEOUT, else 600)\n"
    "  --augment crop-flip: each training image padded by 2, cropped back to 28x28 at a random offset and\n"
    "                       mirrored with probability 1/2, on the loader's workers\n"
    "  --optimizer sgd: momentum 0.9 (Nesterov); --weight-decay applies to either optimizer\n"
    "  --steps-per-epoch: stop each epoch after N steps (0: the whole set), e.g. to time a configuration\n"
    "  --amp: the forward under autocast in that dtype (parameters and optimizer stay f32; f16 with a GradScaler)\n"
    "  --out: weights, curves.csv and the training state (default out/<model>)\n"
    "  --logdir: the TensorBoard log folder (default runs/train_fashion_mnist/<model>; none: no log)\n"
    "  --checkpoint-every N: save the training state every N steps (0: only at epochs' ends and on SIGINT)\n"
    "  --resume: continue from <out>/checkpoint.safetensors (--distributed: the newest complete set in\n"
    "            <out>/checkpoints), bit for bit (same options)\n";

// SIGINT, SIGTERM: finish the step, save, exit. A second signal ends the process at once.
std::atomic<int> g_stop_signal{0};
extern "C" void request_stop(int sig) {
  g_stop_signal.store(sig);
  std::signal(sig, SIG_DFL);
}

// The world size a launcher (mpirun, srun) gave this process in its environment; 0 when none.
int launcher_world_size() {
  for (const char* v : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_SIZE", "SLURM_NTASKS"})
    if (const char* s = std::getenv(v)) return std::atoi(s);
  return std::getenv("PMIX_RANK") ? 1 : 0;
}

struct EpochLog {
  double train_loss, train_acc, test_loss, test_acc, lr, seconds;
};

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

void progress(int epoch, int epochs, int64_t done, int64_t total, double loss, double images_per_s) {
  constexpr int kWidth = 30;
  int filled = int(kWidth * done / std::max<int64_t>(total, 1));
  std::string bar(size_t(filled), '=');
  if (filled < kWidth) bar += '>' + std::string(size_t(kWidth - filled - 1), ' ');
  std::fprintf(stderr, "\repoch %d/%d [%s] %lld/%lld  loss %.4f  %.0f img/s ", epoch, epochs, bar.c_str(),
               (long long)done, (long long)total, loss, images_per_s);
  std::fflush(stderr);
}

// Rewritten whole after every epoch (reel::write_file_atomically): an interrupted run or a
// full disk still leaves complete curves.
void write_curves(const std::filesystem::path& out, const std::vector<EpochLog>& log) {
  std::ostringstream f;
  f << "epoch,train_loss,train_accuracy,test_loss,test_accuracy,lr,seconds\n";
  for (size_t i = 0; i < log.size(); ++i)
    f << i + 1 << ',' << log[i].train_loss << ',' << log[i].train_acc << ',' << log[i].test_loss << ','
      << log[i].test_acc << ',' << log[i].lr << ',' << log[i].seconds << '\n';
  reel::write_file_atomically((out / "curves.csv").string(), f.str(), "write_curves");
}

// The epochs a resumed run had finished, from its curves.csv.
std::vector<EpochLog> read_curves(const std::filesystem::path& out, int64_t epochs) {
  std::vector<EpochLog> log;
  std::ifstream f(out / "curves.csv");
  std::string line;
  std::getline(f, line);  // the header
  while (int64_t(log.size()) < epochs && std::getline(f, line)) {
    std::replace(line.begin(), line.end(), ',', ' ');
    std::istringstream row(line);
    int epoch = 0;
    EpochLog e{};
    row >> epoch >> e.train_loss >> e.train_acc >> e.test_loss >> e.test_acc >> e.lr >> e.seconds;
    log.push_back(e);
  }
  if (int64_t(log.size()) != epochs)
    throw Error("--resume: " + (out / "curves.csv").string() + " has " + std::to_string(log.size()) +
                " epochs, the checkpoint " + std::to_string(epochs));
  return log;
}

// The running sums of the epoch in progress go beside the training state (written
// first, tagged with the step): a resumed epoch then reports all of its batches.
struct EpochSums {
  Tensor loss_sum, correct;
  int64_t seen = 0;
};
void save_sums(const std::filesystem::path& path, const EpochSums& e, int64_t step) {
  safetensors::save(path.string(), {{"loss_sum", e.loss_sum.defined() ? e.loss_sum.to(kCPU) : scalar_tensor(0.0)},
                                    {"correct", e.correct.defined() ? e.correct.to(kCPU) : scalar_tensor(0.0)},
                                    {"seen_step", tensor({double(e.seen), double(step)}, {.dtype = DType::i64})}});
}
EpochSums load_sums(const std::filesystem::path& path, int64_t step, Device device) {
  if (!std::filesystem::exists(path)) return {};
  safetensors::File f = safetensors::load(path.string());
  auto seen_step = f.at("seen_step").to_vector<int64_t>();
  if (seen_step[1] != step) return {};  // from another step than the state: a kill between the two saves
  if (seen_step[0] == 0) return {};
  return {f.at("loss_sum").to(device), f.at("correct").to(device), seen_step[0]};
}

#ifndef REEL_HAS_DIST
// Runs train_fashion_mnist_distributed, the twin linked with libreel_dist, in this
// process's place: only --distributed loads MPI.
[[noreturn]] void exec_distributed_twin(char** argv) {
  std::filesystem::path twin = std::filesystem::read_symlink("/proc/self/exe").parent_path() /
                               "train_fashion_mnist_distributed";
  if (!std::filesystem::exists(twin))
    throw Error("--distributed runs " + twin.string() +
                ", which is not there: it is built when MPI is found (apt-get install libopenmpi-dev openmpi-bin)");
  ::execv(twin.c_str(), argv);
  throw Error("--distributed: cannot run " + twin.string() + ": " + std::strerror(errno));
}
#endif

int run(int argc, char** argv) {
  // --distributed and --resume take no value: taken out before the key-value options are parsed
  bool distributed = false, resume = false, resume_or_start = false;
  std::vector<char*> rest;
  for (int i = 0; i < argc; ++i) {
    if (std::string(argv[i]) == "--distributed") distributed = true;
    else if (std::string(argv[i]) == "--resume") resume = true;
    else if (std::string(argv[i]) == "--resume-or-start") resume_or_start = true;
    else rest.push_back(argv[i]);
  }
  const int launched_as = launcher_world_size();
#ifdef REEL_HAS_DIST
  if (distributed && launched_as == 0)
    throw Error("--distributed: this process was not started by mpirun (or srun), so it would train alone as a "
                "world of one; start the processes with `mpirun -np 2 " + std::string(argv[0]) +
                " --distributed ...` (as root, `mpirun --allow-run-as-root -np 2 ...`)");
  double dist_timeout = 0;  // --dist-timeout, read before init (the options are parsed below)
  for (size_t i = 0; i + 1 < rest.size(); ++i)
    if (std::string(rest[i]) == "--dist-timeout") dist_timeout = std::stod(rest[i + 1]);
  dist::ProcessGroup* pg = distributed ? &dist::init({.timeout_s = dist_timeout}) : nullptr;
  const bool rank0 = !pg || pg->rank() == 0;
  std::string ranks = pg ? ", " + std::to_string(pg->size()) + " ranks (data-parallel)" : "";
#else
  if (distributed) exec_distributed_twin(argv);
  const bool rank0 = true;
  std::string ranks;
#endif
  if (!distributed && launched_as > 1) {
    const char* r = std::getenv("OMPI_COMM_WORLD_RANK");
    if (!r || std::string(r) == "0")
      std::fprintf(stderr,
                   "train_fashion_mnist: warning: started by mpirun as one of %d processes without --distributed: "
                   "each process trains the whole model alone, and they write the same files. Add --distributed "
                   "to train data-parallel.\n",
                   launched_as);
  }
  argc = int(rest.size());
  argv = rest.data();
  auto args = fashion::parse_args(argc, argv,
                                  {{"model", "mlp"}, {"epochs", "10"}, {"data", "/usr/share/datasets/fashion-mnist"},
                                   {"out", ""}, {"logdir", ""}, {"batch-size", "128"}, {"lr", "1e-3"}, {"seed", "1"},
                                   {"workers", "1"}, {"device", "cpu"}, {"amp", "none"}, {"augment", "none"},
                                   {"optimizer", "adam"}, {"weight-decay", "0"}, {"steps-per-epoch", "0"},
                                   {"checkpoint-every", "0"}, {"global-batch-size", "0"}, {"dist-timeout", "0"},
                                   {"stop-after", "0"}, {"dropout", ""}},
                                  kUsage);
  // each model its own folders by default: two runs of different models never share files
  if (args["out"].empty()) args["out"] = "out/" + args["model"];
  if (args["logdir"].empty()) args["logdir"] = "runs/train_fashion_mnist/" + args["model"];
  int epochs = std::stoi(args["epochs"]);
  int64_t batch_size = std::stoll(args["batch-size"]);
  const int64_t global_batch_arg = std::stoll(args["global-batch-size"]);
  const int64_t stop_after = std::stoll(args["stop-after"]);
  uint64_t seed = std::stoull(args["seed"]);
  const int64_t checkpoint_every = std::stoll(args["checkpoint-every"]);
  if (checkpoint_every < 0) throw Error("--checkpoint-every: expected a number of steps >= 0, got " + args["checkpoint-every"]);
  Device device = fashion::parse_device(args["device"]);
  const AutocastOptions amp = fashion::parse_amp(args["amp"], device);
  std::filesystem::path out = args["out"];
  std::filesystem::create_directories(out);
  std::filesystem::path state_path = out / "checkpoint.safetensors";
  std::filesystem::path sums_path = out / "epoch_sums.safetensors";
  if (resume_or_start && !distributed) resume = std::filesystem::exists(state_path);
#ifdef REEL_HAS_DIST
  // Distributed: the state is a set of every rank's files per step (dist::CheckpointSets);
  // rank r writes rank<r>.safetensors and epoch_sums.rank<r>.safetensors.
  std::optional<dist::CheckpointSets> sets;
  std::optional<dist::CheckpointSet> from;
  if (pg) {
    sets.emplace(*pg, dist::CheckpointSetOptions{.dir = (out / "checkpoints").string(),
                                                  .version = std::string("train_fashion_mnist ") + REEL_SAMPLE_VERSION});
    if (resume || resume_or_start) from = sets->latest();
    if (resume && !from)
      throw Error("--resume: no complete training state set in " + (out / "checkpoints").string() +
                  " (written by --checkpoint-every, at an epoch's end, or on Ctrl-C)");
    resume = bool(from);
    // the global batch: --global-batch-size, else --batch-size on each rank; a resumed run keeps its set's
    int64_t global_batch = global_batch_arg > 0 ? global_batch_arg : batch_size * pg->size();
    if (from) {
      int64_t saved = std::stoll(from->meta.at("global_batch"));
      if (saved != global_batch)
        throw Error("--resume: the set at step " + std::to_string(from->step) + " was trained with a global batch of " +
                    std::to_string(saved) + " images (" + std::to_string(from->world_size) + " ranks), this run's is " +
                    std::to_string(global_batch) + " (" + std::to_string(pg->size()) + " ranks): pass --global-batch-size " +
                    std::to_string(saved) + " to keep it");
    }
    if (global_batch % pg->size() != 0)
      throw Error("--global-batch-size: " + std::to_string(global_batch) + " images do not split evenly over " +
                  std::to_string(pg->size()) + " ranks (give a multiple of " + std::to_string(pg->size()) + ")");
    batch_size = global_batch / pg->size();
    // which old rank's state this rank takes: its own; after a resize, rank r % W's (the
    // model, optimizer, schedule, step and loader position are the same on every rank)
    if (from) {
      int src = pg->rank() % from->world_size;
      state_path = from->file("rank" + std::to_string(src) + ".safetensors");
      sums_path = from->file("epoch_sums.rank" + std::to_string(src) + ".safetensors");
    }
  } else if (global_batch_arg > 0) {
    batch_size = global_batch_arg;
  }
#else
  if (global_batch_arg > 0) batch_size = global_batch_arg;
#endif
  if (resume && !distributed && !std::filesystem::exists(state_path))
    throw Error("--resume: no training state at " + state_path.string() + " (written by --checkpoint-every, at an "
                "epoch's end, or on Ctrl-C)");

  // The whole set is normalised once, up front: batches are then plain row copies.
  // Augmented training batches are normalised after the crop instead, so that the
  // padding is the images' own background (0), not a gray border.
  const std::string augment = args["augment"];
  if (augment != "none" && augment != "crop-flip")
    throw Error("--augment: expected none or crop-flip, got '" + augment + "'");
  data::ImageSet train = data::load_mnist(args["data"], data::Split::train);
  data::ImageSet test = data::load_mnist(args["data"], data::Split::test);
  if (augment == "none") train.images = data::normalize(train.images, {fashion::kMean}, {fashion::kStd});
  test.images = data::normalize(test.images, {fashion::kMean}, {fashion::kStd});
  data::TensorDataset train_set(train.images, train.labels), test_set(test.images, test.labels);
  int workers = std::stoi(args["workers"]);
  data::DataLoaderOptions train_options{.batch_size = batch_size, .shuffle = true, .seed = seed,
                                        .workers = workers, .device = device};
  if (augment == "crop-flip")  // on the loader's worker threads, seeded per (epoch, batch)
    train_options.transform = [](data::Example b, uint64_t batch_seed) {
      b.data = data::random_horizontal_flip(data::random_crop(b.data, 2, batch_seed), batch_seed);
      b.data = data::normalize(b.data, {fashion::kMean}, {fashion::kStd});
      return b;
    };
  const int64_t steps_per_epoch = std::stoll(args["steps-per-epoch"]);
#ifdef REEL_HAS_DIST
  // each rank its shard of each epoch's permutation of (seed, epoch)
  std::optional<data::DistributedSampler> shard;
  if (pg) {
    shard.emplace(train_set.size(), data::DistributedSamplerOptions{.num_replicas = pg->size(), .rank = pg->rank(),
                                                                     .seed = seed});
    train_options.shuffle = false;
    train_options.sampler = &*shard;
  }
#endif
  data::DataLoader train_loader(train_set, train_options);
  data::DataLoader test_loader(test_set, {.batch_size = 1000, .workers = workers, .device = device});

  manual_seed(seed);
  std::unique_ptr<nn::Module> made = fashion::make_model(args["model"]);
  nn::Module& model = *made;
  if (!args["dropout"].empty()) {  // every dropout layer's probability (0: none)
    const double p = std::stod(args["dropout"]);
    if (!(p >= 0 && p < 1)) throw Error("--dropout: expected a probability in [0, 1), got " + args["dropout"]);
    for (nn::Module* m : model.modules())
      if (auto* d = dynamic_cast<nn::Dropout*>(m)) d->p = p;
  }
  model.to(device);
#ifdef REEL_HAS_DIST
  std::optional<dist::DistributedDataParallel> ddp;  // rank 0's initial weights on every rank
  if (pg) ddp.emplace(model, *pg);
  // Each rank its own dropout stream (the same masks on every rank would drop the same
  // units of every rank's i-th image): the default generator reseeded from (seed, rank).
  if (pg) manual_seed(seed ^ (0x9e3779b97f4a7c15ull * uint64_t(pg->rank() + 1)));
  auto forward = [&](const Tensor& x) { return ddp ? (*ddp)(x) : model(x); };
#else
  auto forward = [&](const Tensor& x) { return model(x); };
#endif
  const double lr0 = std::stod(args["lr"]), weight_decay = std::stod(args["weight-decay"]);
  std::unique_ptr<optim::Optimizer> optimizer;
  if (args["optimizer"] == "adam")
    optimizer = std::make_unique<optim::Adam>(model.parameters(), optim::AdamOptions{.lr = lr0, .weight_decay = weight_decay});
  else if (args["optimizer"] == "sgd")
    optimizer = std::make_unique<optim::SGD>(
        model.parameters(), optim::SGDOptions{.lr = lr0, .momentum = 0.9, .weight_decay = weight_decay, .nesterov = true});
  else
    throw Error("--optimizer: expected adam or sgd, got '" + args["optimizer"] + "'");
  optim::Optimizer& opt = *optimizer;
  optim::CosineAnnealingLR schedule(opt, {.T_max = epochs});
  // loss scaling for f16 only: bf16 has f32's range (a disabled scaler passes through)
  optim::GradScaler scaler({.enabled = amp.enabled && amp.dtype == DType::f16});

  // Step s (1-based) is batch (s - 1) % steps of epoch (s - 1) / steps + 1, in every run.
  const int64_t steps = steps_per_epoch > 0 ? std::min(steps_per_epoch, train_loader.size()) : train_loader.size();
  checkpoint::TrainingState state{
      .model = &model, .optimizer = &opt, .scaler = &scaler, .scheduler = &schedule, .loader = &train_loader};
  std::vector<EpochLog> log;
  EpochSums sums;
  if (resume) {
    auto load = [&] {
      checkpoint::load(state_path.string(), state);
      data::DataLoaderState at = train_loader.state();
      if (at.epoch != state.step / steps || at.batch != state.step % steps)
        throw Error("--resume: " + state_path.string() + " is at step " + std::to_string(state.step) + ", epoch " +
                    std::to_string(at.epoch + 1) + " batch " + std::to_string(at.batch) + ": not where a run with " +
                    std::to_string(steps) + " steps an epoch would be (other --batch-size or --steps-per-epoch?)");
      if (rank0) log = read_curves(out, state.step / steps);
      sums = load_sums(sums_path, state.step, device);
#ifdef REEL_HAS_DIST
      // After a resize: each rank's dropout stream starts afresh from (seed, rank, step) (no
      // old rank's stream maps to a new one), and the epoch's running sums so far are rank
      // 0's: every old rank's added.
      if (pg && from->world_size != pg->size()) {
        manual_seed(seed ^ (0x9e3779b97f4a7c15ull * uint64_t(pg->rank() + 1)) ^ (0xbf58476d1ce4e5b9ull * uint64_t(state.step)));
        sums = {};
        if (pg->rank() == 0)
          for (int r = 0; r < from->world_size; ++r) {
            EpochSums e = load_sums(from->file("epoch_sums.rank" + std::to_string(r) + ".safetensors"), state.step, device);
            if (e.seen == 0) continue;
            sums.loss_sum = sums.loss_sum.defined() ? sums.loss_sum + e.loss_sum : e.loss_sum;
            sums.correct = sums.correct.defined() ? sums.correct + e.correct : e.correct;
            sums.seen += e.seen;
          }
      }
#endif
    };
#ifdef REEL_HAS_DIST
    if (pg) dist::on_every_rank(*pg, "--resume", load);  // a bad file on one rank stops all of them
    else load();
#else
    load();
#endif
  }
#ifdef REEL_HAS_DIST
  if (sets) sets->begin(state.step);  // drops incomplete sets, and an earlier run's when starting afresh
#endif
  const int first_epoch = int(state.step / steps) + 1;
  std::string resumed_from;
#ifdef REEL_HAS_DIST
  if (from)
    resumed_from = " from the set " + from->folder + ", written by " + std::to_string(from->world_size) + " ranks" +
                   (from->world_size != pg->size() ? " (global batch " + std::to_string(batch_size * pg->size()) +
                                                         " kept: " + std::to_string(batch_size) + " a rank)"
                                                   : "");
#endif
  if (rank0)
    std::printf("%s: %zu parameter tensors, %lld training images, %lld test images, %s%s%s\n", args["model"].c_str(),
                model.parameters().size(), (long long)train_set.size(), (long long)test_set.size(),
                device.str().c_str(), ranks.c_str(),
                resume ? (", resumed at step " + std::to_string(state.step) + " (epoch " + std::to_string(first_epoch) +
                          ")" + resumed_from).c_str()
                       : "");

  std::string logdir = args["logdir"];
  std::unique_ptr<SummaryWriter> tb;
  if (logdir != "none" && rank0) {  // one log, written by rank 0
    tb = std::make_unique<SummaryWriter>(logdir);
    if (!resume) {
      std::string config;
      for (const auto& [key, value] : args) config += "- " + key + ": `" + value + "`\n";
      tb->add_text("config", config, 0);
      tb->add_image("test_images/first", clamp(test.images[0] * fashion::kStd + fashion::kMean, 0, 1), 0);
    }
  }

  std::signal(SIGINT, request_stop);
  std::signal(SIGTERM, request_stop);
  // Every rank saves at the same step: a signal seen by one rank stops all of them.
  auto stop_now = [&] {
    bool stop = g_stop_signal.load() != 0;
#ifdef REEL_HAS_DIST
    if (pg) {
      Tensor flag = scalar_tensor(stop ? 1.0 : 0.0);
      pg->all_reduce(flag);
      stop = flag.item<double>() > 0;
    }
#endif
    return stop;
  };
  int64_t saved_at = -1;  // a stop at an epoch's end finds its state saved already
  auto save_state = [&] {
    if (state.step == saved_at) return;
    saved_at = state.step;
#ifdef REEL_HAS_DIST
    if (sets) {
      const std::string r = std::to_string(pg->rank());
      sets->save(state.step, {{"global_batch", std::to_string(batch_size * pg->size())}},
                 [&](const std::string& folder) {
                   save_sums(folder + "/epoch_sums.rank" + r + ".safetensors", sums, state.step);
                   checkpoint::save(folder + "/rank" + r + ".safetensors", state);
                   return std::vector<std::string>{"rank" + r + ".safetensors", "epoch_sums.rank" + r + ".safetensors"};
                 });
      state_path = sets->folder(state.step);
      return;
    }
#endif
    save_sums(sums_path, sums, state.step);
    checkpoint::save(state_path.string(), state);
  };
  bool stopped = false;
  for (int epoch = first_epoch; epoch <= epochs && !stopped; ++epoch) {
    auto start = Clock::now();
    double lr = opt.lr();
    int64_t step = state.step % steps;  // 0 unless resumed inside this epoch
    double shown_loss = 0;
    auto last_shown = start;
    const int64_t seen_before = sums.seen;  // a resumed epoch's images before the resume
    {
      for (data::Example& batch : train_loader) {
        Tensor logits, loss;
        {
          AutocastGuard autocast(amp);  // a no-op unless --amp
          logits = forward(batch.data);
          loss = cross_entropy(logits, batch.target);
        }
        opt.zero_grad();
        scaler.scale(loss).backward();  // f16: the loss scaled so small gradients stay above f16's range
        scaler.step(opt);               // skipped when a gradient overflowed
        scaler.update();
        {
          NoGradGuard no_grad;
          Tensor l = loss.detach() * double(batch.data.size(0));
          Tensor c = eq(argmax(logits.detach(), 1), batch.target).to(DType::i64).sum();
          sums.loss_sum = sums.loss_sum.defined() ? sums.loss_sum + l : l;
          sums.correct = sums.correct.defined() ? sums.correct + c : c;
        }
        sums.seen += batch.data.size(0);
        ++step;
        ++state.step;
        if (tb && state.step % 50 == 0) tb->add_scalar("loss/train_step", loss.item<double>(), state.step);
        if (rank0 && (seconds_since(last_shown) > 0.25 || step == steps)) {
          shown_loss = sums.loss_sum.item<double>() / double(sums.seen);
          progress(epoch, epochs, step, steps, shown_loss, double(sums.seen - seen_before) / seconds_since(start));
          last_shown = Clock::now();
        }
        if (step == steps) break;  // the epoch's end saves after its evaluation, below
        if (stop_now() || state.step == stop_after) {
          stopped = true;
          break;
        }
        if (checkpoint_every > 0 && state.step % checkpoint_every == 0) save_state();
      }
    }
    if (stopped) break;
    // the next epoch starts at its batch 0 also where --steps-per-epoch left this one early
    train_loader.load_state({.epoch = epoch, .batch = 0});
    double train_seconds = seconds_since(start);
    Tensor loss_sum = sums.loss_sum, correct = sums.correct;
    int64_t seen = sums.seen;
    const double images_per_s = double(seen - seen_before) / train_seconds;
#ifdef REEL_HAS_DIST
    if (pg) {  // the epoch's figures over every rank's shard
      Tensor totals = tensor({loss_sum.item<double>(), double(correct.item<int64_t>()), double(seen)});
      pg->all_reduce(totals);
      auto v = totals.to_vector<float>();
      loss_sum = scalar_tensor(v[0]);
      correct = scalar_tensor(v[1], {.dtype = DType::i64});
      seen = int64_t(v[2]);
    }
#endif
    sums = {};
    schedule.step();
    fashion::Score score = fashion::evaluate(model, test_loader, amp);
    log.push_back({loss_sum.item<double>() / double(seen), double(correct.item<int64_t>()) / double(seen), score.loss,
                   score.accuracy, lr, train_seconds});
    if (rank0) {
      std::fprintf(stderr, "\n");
      std::printf("epoch %2d/%d  train loss %.4f acc %.2f%%  test loss %.4f acc %.2f%%  lr %.2e  %.1f s  %.0f img/s\n",
                  epoch, epochs, log.back().train_loss, 100 * log.back().train_acc, score.loss, 100 * score.accuracy,
                  lr, train_seconds, images_per_s);
      std::fflush(stdout);
      write_curves(out, log);
      if (tb) {
        const EpochLog& e = log.back();
        tb->add_scalars("loss", {{"train", e.train_loss}, {"test", e.test_loss}}, epoch);
        tb->add_scalars("accuracy", {{"train", e.train_acc}, {"test", e.test_acc}}, epoch);
        tb->add_scalar("lr", lr, epoch);
        for (auto& [name, p] : model.named_parameters()) tb->add_histogram(name, p, epoch);
        tb->flush();
      }
    }
    save_state();
    stopped = epoch < epochs && (stop_now() || state.step == stop_after);
  }
  if (stopped) {
    save_state();
    if (rank0)
      std::printf("\n%s at step %lld: saved the training state to %s; continue with the same options and --resume\n",
                  g_stop_signal.load() ? strsignal(g_stop_signal.load()) : "--stop-after", (long long)state.step,
                  state_path.c_str());
#ifdef REEL_HAS_DIST
    if (pg) dist::finalize();
#endif
    return 130;
  }
  std::filesystem::path checkpoint = out / (args["model"] + ".safetensors");
#ifdef REEL_HAS_DIST
  if (pg) {
    dist::save_on_rank0(*pg, [&] { model.save(checkpoint.string()); });
    dist::finalize();
    if (!rank0) return 0;
  } else {
    model.save(checkpoint.string());
  }
#else
  model.save(checkpoint.string());
#endif
  std::printf("test accuracy %.2f%%; wrote %s, %s, %s%s%s\n", 100 * log.back().test_acc, checkpoint.c_str(),
              (out / "curves.csv").c_str(), state_path.c_str(), tb ? ", TensorBoard log in " : "",
              tb ? logdir.c_str() : "");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "\ntrain_fashion_mnist: %s\n", e.what());
    return 1;
  }
}
