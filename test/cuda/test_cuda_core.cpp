// Device plumbing: copies both ways, pinned memory, the stream-ordered pool and its
// statistics, host synchronisations, errors across devices, faults found by kernels.
#include "compare.h"

using namespace reel;
using cuda_test::kGpu;

namespace {
std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}
}  // namespace

TEST_CASE("tensors move to the GPU and back unchanged", "[cuda][device]") {
  Tensor x = arange(0.0, 24.0).reshape({2, 3, 4});
  Tensor g = x.cuda();
  CHECK(g.device() == kGpu);
  CHECK(g.cpu().to_vector<float>() == x.to_vector<float>());
  CHECK(g.permute({2, 0, 1}).cpu().to_vector<float>() == x.permute({2, 0, 1}).to_vector<float>());
  CHECK(x.permute({2, 0, 1}).cuda().cpu().to_vector<float>() == x.permute({2, 0, 1}).to_vector<float>());
  CHECK(g.sum().item<float>() == 276.0f);
  CHECK_THAT(g.str(), Catch::Contains("device=cuda:0"));
  Tensor e = empty({0, 3}, {.device = kGpu});
  CHECK(e.cpu().numel() == 0);
}

TEST_CASE("pinned host memory copies asynchronously and is reused safely", "[cuda][device][pinned]") {
  Tensor p = cuda::pinned_empty({256, 128});
  CHECK(cuda::is_pinned(p));
  CHECK(p.device().is_cpu());
  p.fill_(3.0);
  uint64_t syncs = cuda::host_sync_count();
  Tensor g = p.cuda();
  CHECK(cuda::host_sync_count() == syncs);  // host to device never waits
  p = Tensor();  // released while the copy may still be queued: reused only after it
  Tensor q = cuda::pinned_empty({256, 128});
  q.fill_(5.0);
  CHECK(g.sum().item<double>() == 3.0 * 256 * 128);
  CHECK_FALSE(cuda::is_pinned(ones({2})));
}

TEST_CASE("a training step does not wait for the GPU until its loss is read", "[cuda][sync]") {
  manual_seed(1);
  Tensor w = (randn({64, 32}) * 0.1).cuda().detach().requires_grad_();
  Tensor b = zeros({64}, {.device = kGpu}).requires_grad_();
  Tensor x = randn({128, 32}).cuda(), y = randint(0, 64, {128}).cuda();
  optim::SGD opt({w, b}, {.lr = 0.1, .momentum = 0.9});
  auto step = [&] {
    opt.zero_grad();
    Tensor loss = cross_entropy(linear_relu(x, w, b), y);
    loss.backward();
    opt.step();
    return loss;
  };
  step().item<float>();  // warm-up: cuBLASLt plans, pool blocks, optimizer state
  uint64_t before = cuda::host_sync_count();
  Tensor loss = step();
  CHECK(cuda::host_sync_count() == before);
  float v = loss.item<float>();
  CHECK(cuda::host_sync_count() == before + 1);
  CHECK(std::isfinite(v));
}

TEST_CASE("the memory pool is reused across steps and its statistics add up", "[cuda][memory]") {
  cuda::synchronize();
  cuda::MemoryStats s0 = cuda::memory_stats();
  {
    Tensor t = empty({1 << 20}, {.device = kGpu});  // 4 MiB
    cuda::MemoryStats s1 = cuda::memory_stats();
    CHECK(s1.allocated == s0.allocated + (size_t(4) << 20));
    CHECK(s1.peak_allocated >= s1.allocated);
    CHECK(s1.reserved >= s1.allocated);
  }
  CHECK(cuda::memory_stats().allocated == s0.allocated);
  // The same sizes again: served from the pool, nothing new reserved. Each step holds two
  // 4 MiB blocks at once (the filled tensor and the product): the warm-up runs that very
  // pattern, so what the pool must reserve does not depend on which tests ran before (a
  // warm-up holding one block let a fresh pool grow in the checked loop).
  auto step = [] { Tensor t = (empty({1 << 20}, {.device = kGpu}).fill_(1.0) * 2.0); };
  for (int i = 0; i < 3; ++i) step();
  size_t reserved = cuda::memory_stats().reserved;
  for (int i = 0; i < 20; ++i) step();
  CHECK(cuda::memory_stats().reserved == reserved);
  cuda::reset_peak_memory_stats();
  CHECK(cuda::memory_stats().peak_allocated == cuda::memory_stats().allocated);
}

TEST_CASE("ops across devices throw an Error naming both", "[cuda][device][errors]") {
  Tensor c = ones({2, 3}), g = ones({2, 3}, {.device = kGpu});
  for (std::string e : {error_of([&] { (void)(c + g); }), error_of([&] { (void)matmul(g, c.t()); }),
                        error_of([&] { (void)where(g > 0.0, c, g); })}) {
    CHECK_THAT(e, Catch::Contains("cpu") && Catch::Contains("cuda:0"));
  }
  CHECK_THAT(error_of([&] { (void)zeros({2}, {.device = Device::cuda(cuda::device_count())}); }),
             Catch::Contains("no such CUDA device"));
}

TEST_CASE("an out-of-range label or index found by a kernel is an Error at the next sync", "[cuda][errors]") {
  Tensor logits = randn({4, 10}).cuda(), labels = tensor({1, 12, 3, 0}, {.dtype = DType::i64}).cuda();
  Tensor loss = cross_entropy(logits, labels);  // queued: the kernel finds the label, cannot throw
  CHECK_THAT(error_of([&] { loss.item<float>(); }), Catch::Contains("cross_entropy") && Catch::Contains("12"));
  CHECK(std::isfinite(cross_entropy(logits, tensor({1, 2, 3, 0}, {.dtype = DType::i64}).cuda()).item<float>()));
  Tensor t = randn({5, 3}).cuda();
  Tensor bad = index_select(t, 0, tensor({0, 7}, {.dtype = DType::i64}).cuda());
  CHECK_THAT(error_of([&] { cuda::synchronize(); }), Catch::Contains("index_select") && Catch::Contains("7"));
  CHECK(t.sum().item<float>() == Approx(t.cpu().sum().item<float>()));  // the device carries on
}

TEST_CASE("tensors copy between two GPUs", "[cuda][multi]") {
  if (cuda::device_count() < 2) {
    WARN("one GPU: the peer copy is not exercised");
    return;
  }
  Tensor x = randn({33, 17});
  Tensor a = x.cuda(0), b = a.to(Device::cuda(1));
  CHECK(b.device() == Device::cuda(1));
  CHECK(b.cpu().to_vector<float>() == x.to_vector<float>());
  CHECK(a.t().to(Device::cuda(1)).cpu().to_vector<float>() == x.t().to_vector<float>());
  CHECK((b * 2.0).sum().item<float>() == Approx((x * 2.0).sum().item<float>()));
}
