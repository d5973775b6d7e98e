// PyTorch's semantics on the GPU as on the CPU (issue 13, items 8-10): NaN through relu,
// max/min and maximum/minimum, empty batches, the pooling and loss options. The CPU's
// answers are checked against PyTorch in test/test_semantics.cpp; here the GPU must
// give the CPU's answers, gradients included.
#include <cmath>

#include "compare.h"

using namespace reel;
using cuda_test::kGpu;
using cuda_test::leaf;
using V = std::vector<Tensor>;

namespace {
// x with NaN at every `every`-th element
Tensor with_nans(const Dims& shape, int64_t every) {
  Tensor x = leaf(shape, -2, 2, DType::f32, false).contiguous();
  float* p = x.data<float>();
  for (int64_t i = 0; i < x.numel(); i += every) p[i] = std::nanf("");
  return x.requires_grad_();
}
}  // namespace

TEST_CASE("NaN rules match the CPU: relu, pow at 0, max/min, maximum/minimum, softmax with inf",
          "[cuda][semantics]") {
  manual_seed(31);
  Tensor x = with_nans({9, 17}, 7), y = with_nans({9, 17}, 5);
  CHECK_SAME_ON_GPU([](const V& v) { return relu(v[0]); }, {x});
  CHECK_SAME_ON_GPU([](const V& v) { return amax(v[0]); }, {x});
  CHECK_SAME_ON_GPU([](const V& v) { return amin(v[0], {1}); }, {x});
  CHECK_SAME_ON_GPU([](const V& v) { return argmax(v[0]).to(DType::f32); }, {x});
  CHECK_SAME_ON_GPU([](const V& v) { return maximum(v[0], v[1]); }, {x, y});
  CHECK_SAME_ON_GPU([](const V& v) { return minimum(v[0], v[1]); }, {x, y});
  Tensor z = leaf({7}).detach();
  z.data<float>()[2] = 0;
  CHECK_SAME_ON_GPU([](const V& v) { return pow(v[0], 0.0); }, {z.requires_grad_()});
  Tensor s = tensor({{INFINITY, 1, 2}, {-INFINITY, 0, 1}, {-INFINITY, -INFINITY, -INFINITY}}).requires_grad_();
  CHECK_SAME_ON_GPU([](const V& v) { return softmax(v[0], 1); }, {s});
  CHECK_SAME_ON_GPU([](const V& v) { return log_softmax(v[0], 1); }, {s});
}

TEST_CASE("pooling options match the CPU: unbatched, ceil_mode, indices", "[cuda][semantics][pool]") {
  manual_seed(32);
  Tensor x = leaf({3, 9, 11});
  for (Pool2dOptions o : {Pool2dOptions{.kernel = 2, .ceil_mode = true}, Pool2dOptions{.kernel = 3, .stride = 2, .padding = 1, .ceil_mode = true},
                          Pool2dOptions{.kernel = 3, .stride = 2, .count_include_pad = false, .ceil_mode = true}}) {
    CHECK_SAME_ON_GPU([&](const V& v) { return max_pool2d(v[0], o); }, {x});
    CHECK_SAME_ON_GPU([&](const V& v) { return max_pool2d_with_indices(v[0], o).indices.to(DType::f32); }, {x});
    CHECK_SAME_ON_GPU([&](const V& v) { return avg_pool2d(v[0], o); }, {x});
  }
  CHECK_SAME_ON_GPU([](const V& v) { return adaptive_avg_pool2d(v[0], 4, 3); }, {x});
}

TEST_CASE("loss options match the CPU: class weights, [N, C, d] scores, empty batches, BCE weights",
          "[cuda][semantics][loss]") {
  manual_seed(33);
  Tensor logits = leaf({6, 5, 3}), w = leaf({5}, 0.5, 2, DType::f32, false);
  Tensor labels = tensor({{0, 4, 2}, {1, -100, 3}, {4, 4, 0}, {2, 1, 1}, {3, 0, -100}, {0, 2, 4}}, {.dtype = DType::i64});
  for (CrossEntropyOptions o : {CrossEntropyOptions{}, CrossEntropyOptions{.label_smoothing = 0.1, .weight = w},
                                CrossEntropyOptions{.reduction = Reduction::none, .weight = w}}) {
    CHECK_SAME_ON_GPU([&](const V& v) {
      CrossEntropyOptions g = o;
      if (g.weight.defined()) g.weight = g.weight.to(v[0].device());
      return cross_entropy(v[0], labels.to(v[0].device()), g);
    }, {logits});
  }
  Tensor empty = zeros({0, 4}).requires_grad_();
  CHECK_SAME_ON_GPU([](const V& v) { return cross_entropy(v[0], zeros({0}, {.dtype = DType::i64}).to(v[0].device())); },
                    {empty});
  Tensor bx = leaf({4, 3}, -4, 4), bt = leaf({4, 3}, 0, 1), pw = leaf({3}, 0.5, 3, DType::f32, false);
  CHECK_SAME_ON_GPU([&](const V& v) {
    return binary_cross_entropy_with_logits(v[0], v[1], {.weight = w.narrow(0, 0, 3).to(v[0].device()),
                                                         .pos_weight = pw.to(v[0].device())});
  }, {bx, bt});
}
