// expect: Sequential owns its modules: build it from temporaries
#include <reel/reel.h>
using namespace reel;
int main() {
  nn::Linear fc(4, 8);
  nn::ReLU act;
  nn::Sequential seq{fc, act};  // libtorch copies holders; reel's modules are moved in
}
