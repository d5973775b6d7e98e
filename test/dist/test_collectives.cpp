// Collectives on two ranks (or more) against values computed by hand: rank r fills its
// tensor from r, so every result is a closed formula of the rank count.
#include <catch2/catch.hpp>

#include <cstdlib>
#include <string>

#include <reel/reel.h>

using namespace reel;
using RO = dist::ReduceOp;

namespace {
dist::ProcessGroup& pg() { return dist::world(); }
std::vector<float> values(const Tensor& t) { return t.contiguous().to_vector<float>(); }
}  // namespace

TEST_CASE("dist: the world is the launched ranks", "[dist][collectives]") {
  REQUIRE(pg().size() >= 2);
  REQUIRE(pg().rank() >= 0);
  REQUIRE(pg().rank() < pg().size());
  REQUIRE(pg().local_size() >= 1);
}

TEST_CASE("dist: OpenMPI's nonblocking all-reduce takes its ring; a large one sums exactly", "[dist][collectives]") {
  // dist::init sets the algorithm (1: ring) before MPI_Init unless the launch named one
  const char* alg = std::getenv("OMPI_MCA_coll_libnbc_iallreduce_algorithm");
  REQUIRE(alg != nullptr);  // set by dist::init, or by a launch that chose (then kept)
  if (std::string(alg) != "1") WARN("the launch chose libnbc's all-reduce algorithm " << alg);
  // 3 M floats (12 MiB: the ring's chunks, several messages each): rank r holds i % 97 + r
  int r = pg().rank(), n = pg().size();
  const int64_t len = 3 << 20;
  Tensor t = empty({len});
  float* d = t.data<float>();
  for (int64_t i = 0; i < len; ++i) d[i] = float(i % 97 + r);  // small integers: every sum exact in f32
  pg().all_reduce(t, RO::sum);
  std::vector<float> got = values(t);
  bool exact = true;
  for (int64_t i = 0; i < len; ++i) exact = exact && got[size_t(i)] == float(n * (i % 97) + n * (n - 1) / 2);
  CHECK(exact);
}

TEST_CASE("dist: all_reduce sum, avg, max, min", "[dist][collectives]") {
  int r = pg().rank(), n = pg().size();
  // rank r holds [r, r + 1, 10 - r]
  auto make = [&] { return tensor({double(r), double(r + 1), double(10 - r)}); };
  double sum_r = n * (n - 1) / 2.0;
  Tensor s = make();
  pg().all_reduce(s, RO::sum);
  CHECK(values(s) == std::vector<float>{float(sum_r), float(sum_r + n), float(10 * n - sum_r)});
  Tensor a = make();
  pg().all_reduce(a, RO::avg);
  CHECK(values(a) == std::vector<float>{float(sum_r / n), float(sum_r / n + 1), float(10 - sum_r / n)});
  Tensor m = make();
  pg().all_reduce(m, RO::max);
  CHECK(values(m) == std::vector<float>{float(n - 1), float(n), 10.f});
  Tensor lo = make();
  pg().all_reduce(lo, RO::min);
  CHECK(values(lo) == std::vector<float>{0.f, 1.f, float(10 - (n - 1))});
}

TEST_CASE("dist: all_reduce of f64, i64, f16 and a non-contiguous view", "[dist][collectives]") {
  int r = pg().rank(), n = pg().size();
  Tensor d = full({2, 2}, r + 0.25, {.dtype = DType::f64});
  pg().all_reduce(d);
  CHECK(d.to_vector<double>() == std::vector<double>(4, n * (n - 1) / 2.0 + 0.25 * n));
  Tensor i = full({3}, r + 1, {.dtype = DType::i64});
  pg().all_reduce(i, RO::max);
  CHECK(i.to_vector<int64_t>() == std::vector<int64_t>(3, n));
  Tensor h = full({4}, r + 1, {.dtype = DType::f16});
  pg().all_reduce(h);
  CHECK(h.dtype() == DType::f16);
  CHECK(h.to(DType::f32).to_vector<float>() == std::vector<float>(4, float(n * (n + 1) / 2)));
  // a transposed view is reduced in place: the base sees the sums
  Tensor base = arange(0.0, 6.0).reshape({2, 3}) * double(r + 1);
  Tensor view = base.t();
  pg().all_reduce(view);
  double k = n * (n + 1) / 2.0;
  CHECK(values(base) == std::vector<float>{0.f, float(k), float(2 * k), float(3 * k), float(4 * k), float(5 * k)});
}

TEST_CASE("dist: broadcast from each root", "[dist][collectives]") {
  int r = pg().rank(), n = pg().size();
  for (int root = 0; root < n; ++root) {
    Tensor t = full({2, 3}, 100.0 * r + 7);
    pg().broadcast(t, root);
    CHECK(values(t) == std::vector<float>(6, float(100 * root + 7)));
  }
}

TEST_CASE("dist: broadcast is an in-place write that autocast's kept copy sees", "[dist][collectives]") {
  int r = pg().rank();
  Tensor w = full({4, 4}, 1.0 + r).requires_grad_();
  uint32_t before = w.storage()->version();
  Tensor old;
  {
    AutocastGuard amp({.dtype = DType::f16});
    old = autocast_lower(w);  // kept on w, at its current version
  }
  {
    NoGradGuard no_grad;
    pg().broadcast(w, 0);
  }
  CHECK(w.storage()->version() != before);
  AutocastGuard amp({.dtype = DType::f16});
  CHECK(autocast_lower(w).to(DType::f32).contiguous().to_vector<float>() == std::vector<float>(16, 1.0f));
}

TEST_CASE("dist: all_gather in rank order", "[dist][collectives]") {
  int r = pg().rank(), n = pg().size();
  Tensor t = tensor({double(r), double(r * r)});
  std::vector<Tensor> parts = pg().all_gather(t);
  REQUIRE(int(parts.size()) == n);
  for (int q = 0; q < n; ++q) CHECK(values(parts[size_t(q)]) == std::vector<float>{float(q), float(q * q)});
}

TEST_CASE("dist: reduce_scatter gives rank r block r of the sum", "[dist][collectives]") {
  int r = pg().rank(), n = pg().size();
  // rank r holds 2n values: element j is j + 100 r
  Tensor t = arange(0.0, 2.0 * n).reshape({n, 2}) + 100.0 * r;
  Tensor mine = pg().reduce_scatter(t);
  double ranks = 100.0 * n * (n - 1) / 2.0;
  CHECK(mine.shape() == Dims{1, 2});
  CHECK(values(mine) == std::vector<float>{float(n * 2 * r + ranks), float(n * (2 * r + 1) + ranks)});
  Tensor avg = pg().reduce_scatter(t, RO::avg);
  CHECK(values(avg) == std::vector<float>{float(2 * r + ranks / n), float(2 * r + 1 + ranks / n)});
  CHECK_THROWS_WITH(pg().reduce_scatter(ones({2 * n + 1})), Catch::Contains("divisible by the"));
}

TEST_CASE("dist: a shape or dtype mismatch across ranks is an Error on every rank", "[dist][collectives]") {
  int r = pg().rank();
  Tensor t = zeros({3, 4 + (r == 1)});
  CHECK_THROWS_WITH(pg().all_reduce(t), Catch::Contains("all_reduce: the ranks passed different tensors") &&
                                            Catch::Contains("rank 0 [3, 4] f32, rank 1 [3, 5] f32"));
  Tensor d = zeros({2}, {.dtype = r == 1 ? DType::f64 : DType::f32});
  CHECK_THROWS_WITH(pg().broadcast(d), Catch::Contains("broadcast") && Catch::Contains("rank 0 [2] f32, rank 1 [2] f64"));
  // different collectives on different ranks
  Tensor x = zeros({2});
  if (r == 1) {
    CHECK_THROWS_WITH(pg().broadcast(x), Catch::Contains("rank 0 all_reduce, rank 1 broadcast"));
  } else {
    CHECK_THROWS_WITH(pg().all_reduce(x), Catch::Contains("rank 0 all_reduce, rank 1 broadcast"));
  }
  // the group still works afterwards
  Tensor ok = ones({2});
  pg().all_reduce(ok);
  CHECK(values(ok) == std::vector<float>(2, float(pg().size())));
}

TEST_CASE("dist: barrier and nonblocking all_reduce", "[dist][collectives]") {
  int r = pg().rank(), n = pg().size();
  pg().barrier();
  Tensor t = full({1000}, r + 1.0);
  dist::Work w = pg().all_reduce_async(t, RO::avg);
  while (!w.test()) {
  }
  w.wait();  // a second finish does nothing
  CHECK(values(t) == std::vector<float>(1000, float((n + 1) / 2.0)));
}

TEST_CASE("dist: save_on_rank0 writes once, every rank loads it", "[dist][checkpoint]") {
  std::string path = "/tmp/reel_dist_save_on_rank0.safetensors";
  nn::Linear fc(3, 2);
  {
    NoGradGuard g;
    fc.weight.fill_(double(pg().rank() + 1));
  }
  int writes = 0;
  dist::save_on_rank0(pg(), [&] {
    fc.save(path);
    ++writes;
  });
  CHECK(writes == (pg().rank() == 0 ? 1 : 0));
  fc.load(path);
  CHECK(values(fc.weight) == std::vector<float>(6, 1.f));
  pg().barrier();  // nobody removes the file under a reader
  // a failed write on rank 0 is an Error on every rank
  CHECK_THROWS_WITH(dist::save_on_rank0(pg(), [&] { fc.save("/nonexistent-dir/x.safetensors"); }),
                    Catch::Contains("save_on_rank0: rank 0 failed to write"));
}
