// expect: Sequential owns its modules: pass a temporary, seq.add(nn::Linear(4, 8)), or move a named one in
#include <reel/reel.h>
using namespace reel;
int main() {
  nn::Sequential seq;
  nn::Linear fc(4, 8);
  seq.add(fc);
}
