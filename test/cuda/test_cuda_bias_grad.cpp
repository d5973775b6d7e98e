// Broadcast-bias gradients on the GPU against the CPU: per-channel sums of [N, C, H, W]
// (CUB's segmented reduction over the N·C runs of H·W, or with REEL_CUDA_CHANNEL_SUMS=warps
// a warp a run, then the columns, when runs are at least 64 long; the split kernels
// otherwise) and batch sums of [N, C] (the column kernel).
#include "compare.h"

using namespace reel;
using cuda_test::leaf;
using V = std::vector<Tensor>;

TEST_CASE("per-channel sums of NCHW match the CPU on both paths", "[cuda][reduce][bias]") {
  manual_seed(8);
  // runs of 1024, 144, exactly 64 (CUB), 49 and 4 (split kernels); one image; many images
  for (Dims shape : {Dims{4, 8, 32, 32}, Dims{3, 5, 12, 12}, Dims{2, 16, 8, 8}, Dims{6, 7, 7, 7}, Dims{5, 9, 2, 2},
                     Dims{1, 3, 16, 16}, Dims{64, 32, 16, 16}}) {
    INFO(shape.str());
    Tensor x = leaf(shape);
    CHECK_SAME_ON_GPU([](const V& v) { return v[0].sum({0, 2, 3}); }, {x}, 1e-4, 1e-4);
    CHECK_SAME_ON_GPU([](const V& v) { return v[0].mean({0, 2, 3}, true); }, {x}, 1e-4, 1e-5);
    Tensor x64 = leaf(shape, -2, 2, DType::f64);
    CHECK_SAME_ON_GPU([](const V& v) { return v[0].sum({0, 2, 3}); }, {x64}, 1e-12, 1e-12);
  }
  // runs whose 16-byte loads would straddle (81 and 130 floats), and runs from a base 4 bytes
  // off (REEL_CUDA_CHANNEL_SUMS=warps reads those element by element; gpu-run.sh runs this
  // file with it)
  for (Dims shape : {Dims{3, 5, 9, 9}, Dims{2, 3, 10, 13}}) {
    INFO(shape.str());
    CHECK_SAME_ON_GPU([](const V& v) { return v[0].sum({0, 2, 3}); }, {leaf(shape)}, 1e-4, 1e-4);
    CHECK_SAME_ON_GPU([](const V& v) { return v[0].sum({0, 2, 3}); }, {leaf(shape, -2, 2, DType::f64)}, 1e-12,
                      1e-12);
  }
  CHECK_SAME_ON_GPU([](const V& v) { return v[0].narrow(0, 1, 4 * 3 * 64).reshape({4, 3, 8, 8}).sum({0, 2, 3}); },
                    {leaf({1 + 4 * 3 * 64})}, 1e-4, 1e-4);
  // not contiguous, but each channel's plane is one run in memory (H and W swapped, or N and C):
  // ordered by x's strides (geometry::reduce_dims), the per-channel sums take them
  CHECK_SAME_ON_GPU([](const V& v) { return v[0].permute({0, 1, 3, 2}).sum({0, 2, 3}); }, {leaf({4, 6, 16, 12})},
                    1e-4, 1e-4);
  CHECK_SAME_ON_GPU([](const V& v) { return v[0].permute({1, 0, 2, 3}).sum({0, 2, 3}); }, {leaf({4, 6, 16, 12})},
                    1e-4, 1e-4);
}

TEST_CASE("conv2d and linear bias gradients match the CPU", "[cuda][reduce][bias][conv]") {
  manual_seed(9);
  Conv2dOptions pad1{.padding = {1, 1}};
  // output 12x12 (CUB path) and 5x5 (split path)
  for (Dims xs : {Dims{4, 3, 12, 12}, Dims{4, 3, 5, 5}}) {
    INFO(xs.str());
    CHECK_SAME_ON_GPU([&](const V& v) { return conv2d(v[0], v[1], v[2], pad1); },
                      {leaf(xs), leaf({8, 3, 3, 3}, -0.5, 0.5), leaf({8})}, 1e-4, 1e-3);
    CHECK_SAME_ON_GPU([&](const V& v) { return conv2d_relu(v[0], v[1], v[2], pad1); },
                      {leaf(xs), leaf({8, 3, 3, 3}, -0.5, 0.5), leaf({8})}, 1e-4, 1e-3);
  }
  CHECK_SAME_ON_GPU([](const V& v) { return linear(v[0], v[1], v[2]); },
                    {leaf({128, 300}), leaf({200, 300}, -0.1, 0.1), leaf({200})}, 1e-4, 1e-3);
  CHECK_SAME_ON_GPU([](const V& v) { return linear_relu(v[0], v[1], v[2]); },
                    {leaf({7, 30}), leaf({20, 30}, -0.1, 0.1), leaf({20})}, 1e-4, 1e-3);
}
