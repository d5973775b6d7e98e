// REEL_CUDA_CHANNELS_LAST's rules (cuda/internal/channels_last.h), which need no GPU: the
// switch, which dtypes the CUDA backend keeps channels-last, the layout a convolution hands
// cuDNN, which operands it takes as they lie, and that cached plans keep the layouts apart;
// and REEL_CUDA_HALF_NORM's (internal/half_norm.h): which batch norms of those activations
// cuDNN takes, in which mode.
#include <catch2/catch.hpp>

#include <reel/reel.h>

#include "../cuda/internal/channels_last.h"
#include "../cuda/internal/half_norm.h"

namespace cl = reel::cuda::channels_last;
namespace hn = reel::cuda::half_norm;
using reel::Dims;
using reel::DType;

TEST_CASE("REEL_CUDA_CHANNELS_LAST takes off or on, else an error naming it, the value and the choices",
          "[cuda][rules][channels_last]") {
  CHECK(cl::path_from_env(nullptr) == cl::Path::off);  // the default: NCHW, as before
  CHECK(cl::path_from_env("") == cl::Path::off);
  CHECK(cl::path_from_env("off") == cl::Path::off);
  CHECK(cl::path_from_env("on") == cl::Path::on);
  CHECK(cl::path_from_env("1") == cl::Path::invalid);
  CHECK(cl::path_from_env("ON") == cl::Path::invalid);
  CHECK(cl::path_from_env("nhwc") == cl::Path::invalid);
  CHECK(cl::invalid_path_message("nhwc") == "conv2d: REEL_CUDA_CHANNELS_LAST must be off or on, got \"nhwc\"");
}

TEST_CASE("the CUDA backend keeps only f16 and bf16 channels-last, and only when switched on",
          "[cuda][rules][channels_last]") {
  CHECK(cl::keeps(cl::Path::on, DType::bf16));
  CHECK(cl::keeps(cl::Path::on, DType::f16));
  CHECK_FALSE(cl::keeps(cl::Path::on, DType::f32));
  CHECK_FALSE(cl::keeps(cl::Path::on, DType::f64));
  for (DType d : {DType::bf16, DType::f16, DType::f32}) CHECK_FALSE(cl::keeps(cl::Path::off, d));
}

TEST_CASE("a convolution convolves in the layout of the tensor it writes; f64 stays NCHW",
          "[cuda][rules][channels_last]") {
  for (DType d : {DType::bf16, DType::f16, DType::f32}) {
    CHECK(cl::conv_layout(true, d) == cl::Layout::nhwc);
    CHECK(cl::conv_layout(false, d) == cl::Layout::nchw);
  }
  // an f64 channels-last output is written NCHW into a scratch tensor and copied
  CHECK(cl::conv_layout(true, DType::f64) == cl::Layout::nchw);
  CHECK(cl::key_slot(cl::Layout::nhwc) != cl::key_slot(cl::Layout::nchw));
}

TEST_CASE("packed NHWC: channels-last tensors, and contiguous ones with one channel or one pixel",
          "[cuda][rules][channels_last]") {
  const Dims shape{2, 3, 4, 5};
  CHECK(cl::packed_nhwc(shape, reel::channels_last_strides(shape)));
  CHECK(cl::packed_nhwc(shape, Dims{60, 1, 15, 3}));
  CHECK_FALSE(cl::packed_nhwc(shape, reel::contiguous_strides(shape)));
  // NCHW and NHWC are one memory: a first convolution's RGB is not, a grey image is
  CHECK(cl::packed_nhwc(Dims{2, 1, 4, 5}, reel::contiguous_strides(Dims{2, 1, 4, 5})));
  CHECK(cl::packed_nhwc(Dims{2, 7, 1, 1}, reel::contiguous_strides(Dims{2, 7, 1, 1})));
  // a filter [O, I, kh, kw] in KRSC, cuDNN's NHWC filter
  CHECK(cl::packed_nhwc(Dims{8, 4, 3, 3}, Dims{36, 1, 12, 4}));
  // a slice along channels of an NHWC tensor (DenseNet's pieces) is strided: copied
  CHECK_FALSE(cl::packed_nhwc(Dims{2, 2, 4, 5}, Dims{60, 1, 15, 3}));
  // a slice of the batch is still packed; the offset is the view's own
  CHECK(cl::packed_nhwc(Dims{1, 3, 4, 5}, Dims{60, 1, 15, 3}));
  CHECK_FALSE(cl::packed_nhwc(Dims{3, 4, 5}, Dims{20, 5, 1}));  // not 4-D
  // the tensors reel makes: a channels-last activation is packed, its NCHW copy is not
  reel::Tensor x = reel::randn({2, 3, 4, 5});
  reel::Tensor nhwc = x.permute({0, 2, 3, 1}).contiguous().permute({0, 3, 1, 2});
  CHECK(cl::packed_nhwc(nhwc.shape(), nhwc.strides()));
  CHECK_FALSE(cl::packed_nhwc(x.shape(), x.strides()));
}

TEST_CASE("REEL_CUDA_HALF_NORM takes staged or cudnn, else an error naming it, the value and the choices",
          "[cuda][rules][channels_last][norm]") {
  CHECK(hn::path_from_env(nullptr) == hn::Path::staged);
  CHECK(hn::path_from_env("") == hn::Path::staged);
  CHECK(hn::path_from_env("staged") == hn::Path::staged);
  CHECK(hn::path_from_env("cudnn") == hn::Path::cudnn);
  CHECK(hn::path_from_env("fused") == hn::Path::invalid);
  CHECK(hn::invalid_path_message("fused") == "batch_norm: REEL_CUDA_HALF_NORM must be staged or cudnn, got \"fused\"");
}

TEST_CASE("cuDNN takes the mixed batch norm of NHWC or row-major halves, in training or with running statistics",
          "[cuda][rules][channels_last][norm]") {
  const hn::Call served{.path = hn::Path::cudnn, .n = 32, .c = 64, .hw = 56 * 56};
  CHECK(hn::refusal(served).empty());
  CHECK(hn::mode_of(served) == hn::Mode::spatial_persistent);
  for (DType d : {DType::bf16, DType::f16}) {
    hn::Call c = served;
    c.x = c.y = d;
    CHECK(hn::refusal(c).empty());
  }
  auto refused = [&](auto change) {
    hn::Call c = served;
    change(c);
    return !hn::refusal(c).empty();
  };
  CHECK(refused([](hn::Call& c) { c.path = hn::Path::staged; }));  // the default
  CHECK(refused([](hn::Call& c) { c.dims = 3; }));                  // batch_norm over [N, C, L]
  CHECK(refused([](hn::Call& c) { c.x = c.y = DType::f32; }));      // f32 runs reel's own kernels
  CHECK(refused([](hn::Call& c) { c.y = DType::f32; }));
  CHECK(refused([](hn::Call& c) { c.same_dtypes = false; }));       // DenseNet pieces of two dtypes
  CHECK(refused([](hn::Call& c) { c.nhwc = false, c.nchw = false; }));  // a mix of layouts, or strided
  // row-major halves (since 11-30): SPATIAL in training, as PyTorch runs NCHW
  hn::Call nchw = served;
  nchw.nhwc = false;
  CHECK(hn::refusal(nchw).empty());
  CHECK(hn::mode_of(nchw) == hn::Mode::spatial);
  CHECK_FALSE(hn::nhwc_descriptor(nchw));
  CHECK(hn::nhwc_descriptor(served));  // both (one channel, one pixel): NHWC
  CHECK(refused([](hn::Call& c) { c.params_f32 = false; }));
  CHECK(refused([](hn::Call& c) { c.params_dense = false; }));
  CHECK(refused([](hn::Call& c) { c.n = 1, c.hw = 1; }));           // one value a channel
  CHECK(refused([](hn::Call& c) { c.n = 1 << 16, c.c = 1 << 10, c.hw = 1 << 6; }));  // 2^32 elements
  // evaluation: the forward with running statistics; its backward's are constants
  hn::Call eval = served;
  eval.training = false;
  CHECK(hn::refusal(eval).empty());
  CHECK(hn::mode_of(eval) == hn::Mode::spatial);
  eval.n = eval.hw = 1;  // one value a channel is fine with running statistics
  CHECK(hn::refusal(eval).empty());
  CHECK(refused([](hn::Call& c) { c.training = false, c.running = false; }));
  CHECK(refused([](hn::Call& c) { c.training = false, c.backward = true; }));
  hn::Call train_backward = served;
  train_backward.backward = true;
  CHECK(hn::refusal(train_backward).empty());
  CHECK(hn::mode_of(train_backward) == hn::Mode::spatial_persistent);  // the forward's mode
}
