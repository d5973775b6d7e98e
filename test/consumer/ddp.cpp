// Data parallel against the installed libreel_dist (the README's target reel::dist): started
// alone it is a world of one; DistributedDataParallel wraps a model and a step runs through
// it; the all-reduced sum of a rank's tensor is that tensor. Exits 0 when the figures hold.
#include <reel/dist/dist.h>
#include <reel/reel.h>

#include <cstdio>

int main() {
  auto& pg = reel::dist::init();
  reel::nn::Linear net(3, 1);
  reel::dist::DistributedDataParallel ddp(net, pg);
  reel::Tensor loss = ddp(reel::ones({2, 3})).sum();
  loss.backward();
  reel::Tensor t = reel::tensor({1.0, 2.0, 3.0});
  pg.all_reduce(t);
  std::printf("world of %d, rank %d, all_reduce [1, 2, 3] -> [%g, %g, %g], grad of the bias %g\n", pg.size(),
              pg.rank(), t.to_vector<float>()[0], t.to_vector<float>()[1], t.to_vector<float>()[2],
              net.bias.grad().item<float>());
  bool ok = pg.size() == 1 && t.to_vector<float>() == std::vector<float>{1, 2, 3} &&
            net.bias.grad().item<float>() == 2.0f;
  reel::dist::finalize();
  return ok ? 0 : 1;
}
