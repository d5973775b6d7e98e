// expect: forward must be `static Tensor forward(Context& ctx, ...)` (or libtorch's `(AutogradContext* ctx, ...)`)
#include <reel/reel.h>
using namespace reel;
struct NoCtx : autograd::Function<NoCtx> {
  static Tensor forward(const Tensor& x) { return x * 2.0; }  // the context argument forgotten
  static std::vector<Tensor> backward(Context&, const std::vector<Tensor>& g) { return {g[0] * 2.0}; }
};
int main() { NoCtx::apply(ones({2})); }
