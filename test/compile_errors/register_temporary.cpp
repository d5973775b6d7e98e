// expect: register_module takes a member module: declare `nn::Linear fc{4, 8}
#include <reel/reel.h>
using namespace reel;
struct Net : nn::Module {
  Net() { register_module("fc", nn::Linear(4, 8)); }  // libtorch's holder idiom
};
int main() { Net net; }
