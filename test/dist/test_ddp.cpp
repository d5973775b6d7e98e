// DistributedDataParallel on two ranks against one process: each rank trains on its
// half of every batch; the weights after 50 steps must equal those of one model trained
// on the whole batches (the mean of the halves' mean gradients is the whole batch's).
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdlib>
#include <cstring>

#include <reel/reel.h>

#include "../user_optimizers.h"  // Adafactor as a user writes it

using namespace reel;

namespace {
dist::ProcessGroup& pg() { return dist::world(); }

struct Mlp : nn::Module {
  nn::Linear fc1{8, 16}, fc2{16, 16}, fc3{16, 4}, spare{4, 4};
  bool use_spare = false;
  explicit Mlp(bool with_spare = false) {
    register_module("fc1", fc1);
    register_module("fc2", fc2);
    register_module("fc3", fc3);
    if (with_spare) register_module("spare", spare);  // a layer forward() may leave out
  }
  Tensor forward(const Tensor& x) override {
    Tensor h = fc3(relu(fc2(relu(fc1(x)))));
    return use_spare ? spare(h) : h;
  }
};

void copy_weights(nn::Module& to, const nn::Module& from) { to.load_state_dict(from.state_dict()); }

// The largest |a - b| over every parameter.
double max_diff(const nn::Module& a, const nn::Module& b) {
  auto pa = a.parameters(), pb = b.parameters();
  double d = 0;
  for (size_t i = 0; i < pa.size(); ++i) d = std::max(d, (pa[i] - pb[i]).abs().max().item<double>());
  return d;
}

// rank r's copy of the parameters equals rank 0's
bool same_on_all_ranks(const nn::Module& m) {
  for (const Tensor& p : m.parameters()) {
    std::vector<Tensor> all = pg().all_gather(p.detach());
    for (auto& q : all)
      if ((q - all[0]).abs().max().item<double>() != 0) return false;
  }
  return true;
}

// The optimizer both models step with: SGD with momentum, or a user's own (Adafactor).
std::unique_ptr<optim::Optimizer> make_optimizer(bool user, std::vector<Tensor> params) {
  if (user) return std::make_unique<my_optim::Adafactor>(std::move(params), my_optim::AdafactorOptions{.lr = 0.01});
  return std::make_unique<optim::SGD>(std::move(params), optim::SGDOptions{.lr = 0.05, .momentum = 0.9});
}

void train_equality(dist::DistributedDataParallelOptions options, int64_t expect_buckets, bool user_optimizer = false) {
  const int n = pg().size(), r = pg().rank();
  const int64_t per_rank = 6, batch = per_rank * n, steps = 50;
  manual_seed(7);
  Mlp ddp_model, reference;
  copy_weights(reference, ddp_model);
  if (r == 1) {  // DistributedDataParallel must start every rank from rank 0's weights
    NoGradGuard g;
    ddp_model.fc1.weight.fill_(3.0);
  }
  dist::DistributedDataParallel ddp(ddp_model, pg(), options);
  CHECK(ddp.bucket_count() == expect_buckets);
  CHECK(max_diff(ddp_model, reference) == 0);
  std::unique_ptr<optim::Optimizer> opt = make_optimizer(user_optimizer, ddp_model.parameters());
  std::unique_ptr<optim::Optimizer> opt_ref = make_optimizer(user_optimizer, reference.parameters());
  Generator data(11);  // the same batches on every rank
  for (int64_t step = 0; step < steps; ++step) {
    Tensor x = randn({batch, 8}, data);
    Tensor y = randint(0, 4, {batch}, data);
    opt->zero_grad();
    cross_entropy(ddp(x.narrow(0, r * per_rank, per_rank)), y.narrow(0, r * per_rank, per_rank)).backward();
    opt->step();
    opt_ref->zero_grad();
    cross_entropy(reference(x), y).backward();
    opt_ref->step();
  }
  CHECK(max_diff(ddp_model, reference) < 2e-5);
  CHECK(same_on_all_ranks(ddp_model));
  // the weights moved: the comparison is not between two untrained models
  Mlp fresh;
  CHECK(max_diff(fresh, reference) > 1e-2);
}
}  // namespace

TEST_CASE("ddp: two ranks on halves of each batch end with one process's weights", "[dist][ddp]") {
  SECTION("one bucket") { train_equality({}, 1); }
  SECTION("a bucket per few parameters, progressed by the hooks") {
    train_equality({.bucket_cap_mb = 0.00005, .first_bucket_mb = 0.0003, .progress = dist::Progress::hooks}, 4);
  }
  SECTION("a bucket per few parameters, progressed by a thread") {
    train_equality({.bucket_cap_mb = 0.00005, .first_bucket_mb = 0.0003, .progress = dist::Progress::thread}, 4);
  }  SECTION("a user's optimizer (Adafactor, written outside the library)") { train_equality({}, 1, true); }
}

TEST_CASE("ddp: a bucket averages the ranks' gradients, divided while they are copied in", "[dist][ddp]") {
  const int n = pg().size(), r = pg().rank();
  manual_seed(9);
  Mlp m, local;
  copy_weights(local, m);
  // a bucket per few parameters: the division happens per gradient, in every bucket
  dist::DistributedDataParallel ddp(m, pg(), {.bucket_cap_mb = 0.00005, .first_bucket_mb = 0.0003});
  Generator data(uint64_t(40 + r));  // each rank its own batch
  auto check_step = [&](bool kept) {
    Tensor x = randn({5, 8}, data), y = randint(0, 4, {5}, data);
    if (kept) {  // zero_grad(false): backward accumulates into the bucket views themselves
      m.zero_grad(false);
    } else {
      m.zero_grad();
    }
    local.zero_grad();
    cross_entropy(ddp(x), y).backward();
    cross_entropy(local(x), y).backward();
    auto pm = m.parameters(), pl = local.parameters();
    for (size_t i = 0; i < pm.size(); ++i) {
      std::vector<Tensor> g = pg().all_gather(pl[i].grad());
      Tensor sum = g[0];
      for (int k = 1; k < n; ++k) sum = sum + g[size_t(k)];
      Tensor expect = sum * (1.0 / n);
      // with a power-of-two number of ranks dividing first and then summing gives the bits
      // of summing and then dividing
      if ((n & (n - 1)) == 0) CHECK((pm[i].grad() - expect).abs().max().item<double>() == 0);
      else CHECK((pm[i].grad() - expect).abs().max().item<double>() < 1e-6);
    }
  };
  check_step(false);
  check_step(true);
  check_step(true);
}

TEST_CASE("ddp: the all-reduces start during backward, in bucket order", "[dist][ddp]") {
  manual_seed(3);
  Mlp m;
  dist::DistributedDataParallel ddp(m, pg(), {.bucket_cap_mb = 0.00005, .first_bucket_mb = 0.0003});
  cross_entropy(ddp(randn({4, 8})), tensor({0, 1, 2, 3}).to_long()).backward();
  // every bucket but the last was started from a hook before backward ended
  CHECK(ddp.stats().launched_in_backward == ddp.bucket_count());
  CHECK(ddp.bucket_count() == 4);
  CHECK(ddp.stats().bytes == uint64_t(4 * (8 * 16 + 16 + 16 * 16 + 16 + 16 * 4 + 4)));
}

TEST_CASE("ddp: no_sync accumulates locally, the next backward all-reduces the sum", "[dist][ddp]") {
  const int n = pg().size(), r = pg().rank();
  manual_seed(5);
  Mlp m, reference;
  copy_weights(reference, m);
  dist::DistributedDataParallel ddp(m, pg());
  Generator data(2);
  std::vector<Tensor> xs, ys;
  for (int k = 0; k < 2 * n; ++k) {  // micro-batch k belongs to rank k / 2
    xs.push_back(randn({3, 8}, data));
    ys.push_back(randint(0, 4, {3}, data));
  }
  {
    auto guard = ddp.no_sync();
    cross_entropy(ddp(xs[size_t(2 * r)]), ys[size_t(2 * r)]).backward();
  }
  // not synchronised yet: each rank holds its own micro-batch's gradient
  std::vector<Tensor> g = pg().all_gather(m.fc1.weight.grad());
  CHECK((g[0] - g[1]).abs().max().item<double>() > 0);
  cross_entropy(ddp(xs[size_t(2 * r + 1)]), ys[size_t(2 * r + 1)]).backward();
  // the reference: the sum of each rank's two micro-batch losses, averaged over the ranks
  Tensor total = zeros({});
  for (int k = 0; k < 2 * n; ++k) total = total + cross_entropy(reference(xs[size_t(k)]), ys[size_t(k)]);
  (total / double(n)).backward();
  auto pm = m.parameters(), pr = reference.parameters();
  for (size_t i = 0; i < pm.size(); ++i) {
    CHECK((pm[i].grad() - pr[i].grad()).abs().max().item<double>() < 1e-6);
  }
}

TEST_CASE("ddp: an unused parameter is an Error naming it, or zeros with find_unused_parameters", "[dist][ddp]") {
  manual_seed(1);
  Mlp m(/*with_spare=*/true);
  m.use_spare = false;
  {
    dist::DistributedDataParallel ddp(m, pg());
    CHECK_THROWS_WITH(cross_entropy(ddp(randn({2, 8})), tensor({0, 1}).to_long()).backward(),
                      Catch::Contains("DistributedDataParallel: 2 parameter(s) got no gradient") &&
                          Catch::Contains("spare.weight, spare.bias") && Catch::Contains("find_unused_parameters"));
  }
  m.zero_grad();
  // rank 0 uses the spare layer, rank 1 does not: both all-reduce it, rank 1 as zeros
  m.use_spare = pg().rank() == 0;
  dist::DistributedDataParallel ddp(m, pg(), {.find_unused_parameters = true});
  cross_entropy(ddp(randn({2, 8})), tensor({0, 1}).to_long()).backward();
  REQUIRE(m.spare.weight.grad().defined());
  std::vector<Tensor> g = pg().all_gather(m.spare.weight.grad());
  CHECK((g[0] - g[1]).abs().max().item<double>() == 0);
  CHECK(g[0].abs().max().item<double>() > 0);
}

TEST_CASE("ddp: BatchNorm's running statistics come from rank 0 before each forward", "[dist][ddp]") {
  struct Net : nn::Module {
    nn::Linear fc{4, 3};
    nn::BatchNorm1d bn{3};
    Net() {
      register_module("fc", fc);
      register_module("bn", bn);
    }
    Tensor forward(const Tensor& x) override { return bn(fc(x)); }
  } net;
  dist::DistributedDataParallel ddp(net, pg());
  if (pg().rank() == 1) {
    NoGradGuard g;
    net.bn.running_mean.fill_(5.0);
  }
  Tensor x = full({6, 4}, 1.0);  // the same input on each rank
  ddp(x).sum().backward();
  std::vector<Tensor> rm = pg().all_gather(net.bn.running_mean);
  CHECK((rm[0] - rm[1]).abs().max().item<double>() == 0);
}

// Also run on 3 and 4 ranks (ctest dist_ddp_ring3, dist_ddp_ring4), where the order of
// summation shows in the last bits.
TEST_CASE("ddp: ranks on one host sum their buckets in shared memory, with the bits of MPI's ring",
          "[dist][ddp][ddp_ring]") {
  const int r = pg().rank();
  const bool one_host = pg().local_size() == pg().size();
  for (DType dtype : {DType::f32, DType::f64}) {
    INFO(dtype_name(dtype));
    manual_seed(21);
    Mlp a, b;
    copy_weights(b, a);
    a.to(dtype), b.to(dtype);
    // a bucket per few parameters, the last one large enough for uneven segments
    dist::DistributedDataParallelOptions small{.bucket_cap_mb = 0.00005, .first_bucket_mb = 0.0003};
    dist::DistributedDataParallelOptions shared = small, mpi = small;
    shared.shared_memory = true, mpi.shared_memory = false;
    dist::DistributedDataParallel over_shm(a, pg(), shared), over_mpi(b, pg(), mpi);
    CHECK(over_shm.stats().shared_memory == one_host);
    CHECK((over_shm.stats().transport == "shared memory") == one_host);
    CHECK(!over_mpi.stats().shared_memory);
    CHECK(over_mpi.stats().transport == "MPI");
    optim::SGD opt_a(a.parameters(), {.lr = 0.01, .momentum = 0.9}), opt_b(b.parameters(), {.lr = 0.01, .momentum = 0.9});
    Generator data(uint64_t(60 + r));
    for (int step = 0; step < 4; ++step) {
      // each rank's gradients at another scale: a sum's rounding depends on its order
      Tensor x = (randn({5, 8}, data) * std::ldexp(1.0, 3 * r)).to(dtype), y = randint(0, 4, {5}, data);
      if (step == 2) a.zero_grad(false), b.zero_grad(false);  // backward accumulates into the shared views
      else opt_a.zero_grad(), opt_b.zero_grad();
      cross_entropy(over_shm(x), y).backward();
      cross_entropy(over_mpi(x), y).backward();
      auto pa = a.parameters(), pb = b.parameters();
      for (size_t i = 0; i < pa.size(); ++i) {
        INFO("step " << step << ", parameter " << i);
        REQUIRE(pa[i].grad().defined());
        CHECK(std::memcmp(pa[i].grad().contiguous().data_ptr(), pb[i].grad().contiguous().data_ptr(),
                          size_t(pa[i].numel()) * pa[i].element_size()) == 0);
      }
      opt_a.step(), opt_b.step();
    }
    CHECK(max_diff(a, b) == 0);
    CHECK(same_on_all_ranks(a));
  }
  SECTION("a gradient outlives its DistributedDataParallel (the view keeps its shared memory)") {
    manual_seed(22);
    Mlp m;
    Tensor grad;
    std::vector<float> values;
    {
      dist::DistributedDataParallel ddp(m, pg());
      cross_entropy(ddp(randn({3, 8})), tensor({0, 1, 2}).to_long()).backward();
      grad = m.fc1.weight.grad();
      values = grad.contiguous().to_vector<float>();
    }
    CHECK(grad.contiguous().to_vector<float>() == values);
    grad.add_(1.0);  // still writable
    CHECK(grad.contiguous().to_vector<float>()[0] == values[0] + 1.0f);
  }
  SECTION("ranks that disagree on shared memory get an Error naming both, before any collective of it") {
    Mlp m;
    dist::DistributedDataParallelOptions o;
    o.shared_memory = r != 0;
    CHECK_THROWS_WITH(dist::DistributedDataParallel(m, pg(), o),
                      Catch::Contains("the ranks differ") && Catch::Contains("shared memory where they can be: no") &&
                          Catch::Contains("shared memory where they can be: yes"));
  }
  SECTION("REEL_DDP_SHARED_MEMORY=0 keeps MPI") {
    setenv("REEL_DDP_SHARED_MEMORY", "0", 1);
    Mlp m;
    dist::DistributedDataParallel ddp(m, pg());
    unsetenv("REEL_DDP_SHARED_MEMORY");
    CHECK(!ddp.stats().shared_memory);
  }
}

// Run by test/dist/shm_full.sh (ctest dist_shm_full) with a 1 MiB /dev/shm of its own.
TEST_CASE("ddp: buckets that do not fit in /dev/shm are summed through MPI", "[.ddp_shm_full]") {
  const int n = pg().size(), r = pg().rank();
  manual_seed(23);
  nn::Linear big(1024, 512), local(1024, 512);  // 2 MiB of gradients a rank
  copy_weights(local, big);
  dist::DistributedDataParallel ddp(big, pg());
  CHECK(!ddp.stats().shared_memory);
  CHECK_THAT(ddp.stats().transport, Catch::StartsWith("MPI (") && Catch::Contains("MiB in /dev/shm"));
  Tensor x = randn({4, 1024}) * double(r + 1);
  ddp(x).square().sum().backward();
  local(x).square().sum().backward();
  std::vector<Tensor> g = pg().all_gather(local.weight.grad());
  Tensor sum = g[0];
  for (int k = 1; k < n; ++k) sum = sum + g[size_t(k)];
  CHECK((big.weight.grad() - sum * (1.0 / n)).abs().max().item<double>() == 0);
  Mlp small;  // a few KiB: still fits
  dist::DistributedDataParallel fits(small, pg());
  CHECK(fits.stats().shared_memory);
}
