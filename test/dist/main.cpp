// The distributed tests run as one Catch2 program per rank under mpirun (ctest starts
// it with -np 2): every rank runs the same test cases in the same order, so their
// collectives meet. The process group is made before the first test.
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

#include <reel/reel.h>

int main(int argc, char** argv) {
  reel::dist::init();
  reel::set_num_threads(1);  // two ranks on two cores
  int rc = Catch::Session().run(argc, argv);
  // every rank learns whether any failed, so all exit non-zero together
  auto failed = reel::tensor({double(rc != 0)});
  reel::dist::world().all_reduce(failed, reel::dist::ReduceOp::max);
  reel::dist::finalize();
  return failed.item<float>() > 0 ? 1 : 0;
}
