// A job in which rank 1 fails while rank 0 waits in a collective; fault.sh checks that
// mpirun ends the whole job quickly, non-zero, with the message on stderr.
//   throw:    rank 1 throws a reel::Error that escapes main()
//   abort:    rank 1 dies (SIGKILL, as an out-of-memory kill would)
//   mismatch: the ranks all-reduce different shapes and let the Error escape
//   hang:     rank 1 sleeps (60 s) before an all-reduce; under REEL_DIST_TIMEOUT=2 rank 0
//             names the all-reduce and rank 1 as the one that did not arrive
//   hang_ddp: rank 1 sleeps between its forward and its backward through
//             DistributedDataParallel; rank 0 names the bucket it waits for
#include <reel/reel.h>

#include <csignal>
#include <cstring>
#include <thread>

using namespace reel;

int main(int argc, char** argv) {
  const char* mode = argc > 1 ? argv[1] : "throw";
  auto& pg = dist::init();
  Tensor t = ones({4});
  pg.all_reduce(t);  // the group works
  if (std::strcmp(mode, "hang_ddp") == 0) {
    nn::Sequential net{nn::Linear(8, 16), nn::ReLU(), nn::Linear(16, 2)};
    dist::DistributedDataParallel ddp(net, pg);
    Tensor loss = ddp(ones({4, 8})).sum();
    if (pg.rank() == 1) std::this_thread::sleep_for(std::chrono::seconds(60));  // a stuck step
    loss.backward();  // rank 0 waits for its buckets' all-reduces here
    dist::finalize();
    return 0;
  }
  if (pg.rank() == 1) {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));  // rank 0 is waiting by now
    if (std::strcmp(mode, "hang") == 0) std::this_thread::sleep_for(std::chrono::seconds(60));
    if (std::strcmp(mode, "throw") == 0) throw Error("rank 1 ran into a bad batch");
    if (std::strcmp(mode, "abort") == 0) std::raise(SIGKILL);
  }
  Tensor u = zeros({3, pg.rank() == 1 && std::strcmp(mode, "mismatch") == 0 ? 5 : 4});
  pg.all_reduce(u);  // rank 0 waits here for a rank that never comes (throw, abort)
  pg.barrier();
  dist::finalize();
  return 0;
}
