// The NCCL path: collectives on CUDA tensors (one GPU per rank: rank r on cuda:r) against
// the same collectives on CPU tensors through MPI, and a DDP step on the GPU against
// the same step on the CPU. Skipped (exit 77) unless every rank has its own GPU.
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

#include <reel/reel.h>

#include <cstdio>
#include <vector>

using namespace reel;

namespace {
double max_diff(const Tensor& a, const Tensor& b) { return sub(a.cpu(), b.cpu()).abs().max().item<double>(); }
Device my_gpu() { return Device::cuda(dist::world().rank()); }
}  // namespace

TEST_CASE("NCCL collectives on CUDA tensors equal MPI's on CPU tensors", "[nccl]") {
  auto& pg = dist::world();
  manual_seed(uint64_t(10 + pg.rank()));
  Tensor x = randn({5, 7});
  for (auto op : {dist::ReduceOp::sum, dist::ReduceOp::avg, dist::ReduceOp::max}) {
    Tensor c = x.clone(), g = x.to(my_gpu());
    pg.all_reduce(c, op);
    pg.all_reduce(g, op);
    CHECK(max_diff(g, c) < 1e-5);
  }
  Tensor bc = x.clone(), bg = x.to(my_gpu());
  pg.broadcast(bc, 1);
  pg.broadcast(bg, 1);
  CHECK(max_diff(bg, bc) == 0);
  std::vector<Tensor> gc = pg.all_gather(x), gg = pg.all_gather(x.to(my_gpu()));
  REQUIRE(gg.size() == gc.size());
  for (size_t i = 0; i < gc.size(); ++i) CHECK(max_diff(gg[i], gc[i]) == 0);
  Tensor rows = randn({4 * pg.size(), 3});
  CHECK(max_diff(pg.reduce_scatter(rows.to(my_gpu())), pg.reduce_scatter(rows)) < 1e-5);
}

TEST_CASE("DistributedDataParallel on the GPU takes the CPU's step", "[nccl]") {
  auto& pg = dist::world();
  manual_seed(3);
  nn::Linear cpu_model(6, 4), gpu_model(6, 4);
  gpu_model.weight = cpu_model.weight.detach().clone();
  gpu_model.bias = cpu_model.bias.detach().clone();
  gpu_model.to(my_gpu());
  dist::DistributedDataParallel cpu_ddp(cpu_model, pg), gpu_ddp(gpu_model, pg);
  manual_seed(uint64_t(20 + pg.rank()));
  Tensor x = randn({8, 6});
  sum(cpu_ddp(x)).backward();
  sum(gpu_ddp(x.to(my_gpu()))).backward();
  CHECK(max_diff(gpu_model.weight.grad(), cpu_model.weight.grad()) < 1e-5);
  CHECK(max_diff(gpu_model.bias.grad(), cpu_model.bias.grad()) < 1e-5);
}

int main(int argc, char** argv) {
  auto& pg = dist::init();
  // every rank must have a GPU of its own; all ranks agree before any of them skips
  Tensor ok = tensor({double(cuda::is_available() && cuda::device_count() > pg.rank())});
  pg.all_reduce(ok, dist::ReduceOp::min);
  if (ok.item<float>() == 0) {
    if (pg.rank() == 0)
      std::printf("SKIPPED: the NCCL tests need one GPU per rank (%d ranks; %s)\n", pg.size(),
                  cuda::is_available() ? "too few GPUs" : cuda::unavailable_reason().c_str());
    dist::finalize();
    return 77;
  }
  int rc = Catch::Session().run(argc, argv);
  Tensor failed = tensor({double(rc != 0)});
  pg.all_reduce(failed, dist::ReduceOp::max);
  dist::finalize();
  return failed.item<float>() > 0 ? 1 : 0;
}
