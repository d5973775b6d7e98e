// Elementwise ops, reductions and copies on channels-last CUDA tensors (NHWC memory behind
// the [N, C, H, W] shape), against the same ops on contiguous CUDA tensors. The elementwise
// launcher orders dims by the output's strides (cuda/internal/elementwise_geometry.h), so
// all-NHWC operands take the dense vector kernel and an NHWC output with a [C] bias a 2-D
// geometry; reductions order dims by x's strides (geometry::reduce_dims), so a sum over
// {0, 2, 3} of NHWC is the column kernel's [N H W, C]; an NHWC <-> NCHW copy is copy.cu's
// tiled transpose. Elementwise results must be bit for bit those of the contiguous path,
// and channels-last where the op makes its output so (REEL_CUDA_CHANNELS_LAST: both states
// are run; the backend is also handed NHWC outputs directly). Tensors go to and come from
// the GPU already in their layout (transposed by the CPU, read back through a contiguous
// view), so no GPU copy kernel stands between the test and the kernels it checks.
#include <cstring>
#include <string>
#include <vector>

#include "../channels_last_check.h"
#include "compare.h"

using namespace reel;
using namespace reel::cuda_test;
using reel::test::channels_last;

namespace {

const DType kHalfAndSingle[] = {DType::f32, DType::f16, DType::bf16};
const DType kFloats[] = {DType::f32, DType::f64, DType::f16, DType::bf16};

// t (CPU, [N, C, H, W]) on the GPU: NHWC memory, transposed on the CPU; or contiguous
Tensor gpu_nhwc(const Tensor& t) { return t.permute({0, 2, 3, 1}).contiguous().to(kGpu).permute({0, 3, 1, 2}); }
Tensor gpu_plain(const Tensor& t) { return t.contiguous().to(kGpu); }

// an NHWC or a contiguous GPU tensor, filled with a sentinel that shows any element left unwritten
Tensor empty_nhwc(const Dims& s, DType d) {
  Tensor t = empty({s[0], s[2], s[3], s[1]}, {.dtype = d, .device = kGpu}).permute({0, 3, 1, 2});
  t.fill_(1234);
  return t;
}
Tensor empty_plain(const Dims& s, DType d) {
  Tensor t = empty(s, {.dtype = d, .device = kGpu});
  t.fill_(1234);
  return t;
}


// Odd sizes: 3 channels (a transposing copy too narrow to tile), 17 (partial tiles), 64;
// one pixel (NCHW and NHWC the same memory), one image, a 1 x W row
const Dims kShapes[] = {{2, 3, 5, 7}, {2, 17, 5, 7}, {3, 17, 1, 1}, {1, 64, 9, 9}, {2, 8, 1, 6}, {4, 32, 4, 4}};

// REEL_CUDA_CHANNELS_LAST for one scope (cuda::set_half_channels_last), put back after
struct HalfChannelsLast {
  bool before;
  explicit HalfChannelsLast(bool on) : before(cuda::half_channels_last()) { cuda::set_half_channels_last(on); }
  ~HalfChannelsLast() { cuda::set_half_channels_last(before); }
};

// Whether ops allocate channels-last outputs for channels-last inputs on the GPU (the rule of
// autograd/tape.cpp's new_in_layout_of: any dtype, once the backend keeps some dtype so)
bool gpu_keeps_channels_last() {
  const Backend& be = backend_for(kGpu);
  return be.channels_last(DType::bf16) || be.channels_last(DType::f16) || be.channels_last(DType::f32);
}

}  // namespace

TEST_CASE("unary and binary ops on channels-last CUDA tensors equal the contiguous path bit for bit",
          "[cuda][channels_last]") {
  manual_seed(31);
  Backend& be = backend_for(kGpu);
  for (bool on : {false, true}) {
    HalfChannelsLast sw(on);
    const bool keeps = gpu_keeps_channels_last();
    for (DType d : kHalfAndSingle)
      for (const Dims& s : kShapes) {
        INFO("REEL_CUDA_CHANNELS_LAST " << (on ? "on" : "off") << ", " << dtype_name(d) << " " << s.str());
        const Tensor xc = randn(s).to(d), yc = randn(s).to(d), bc = randn({s[1], 1, 1}).to(d);
        const Tensor x = gpu_nhwc(xc), y = gpu_nhwc(yc), xp = gpu_plain(xc), yp = gpu_plain(yc), b = gpu_plain(bc);
        const bool cl = channels_last(x);
        // the public ops: values, and the layout the op gives its output
        auto check_op = [&](const char* what, const Tensor& got, const Tensor& want) {
          INFO(what);
          CHECK(same_bits(got, want) == "");
          if (cl) CHECK(channels_last(got) == keeps);
        };
        check_op("relu", relu(x), relu(xp));
        check_op("sigmoid", sigmoid(x), sigmoid(xp));
        check_op("add with a [C, 1, 1] bias", add(x, b), add(xp, b));
        check_op("mul", mul(x, y), mul(xp, yp));
        check_op("add_relu", add_relu(x, y), add_relu(xp, yp));
        check_op("mul by a scalar", x * 0.5, xp * 0.5);
        // the backend handed channels-last outputs, whatever the switch (what the ops hand it
        // under REEL_CUDA_CHANNELS_LAST=on): all operands NHWC (one dense run), an NHWC output
        // with a [C] bias broadcast onto it (two dims), and an NHWC output of NCHW inputs
        const Tensor bias = b.expand(s);  // strides {0, 1, 0, 0}
        for (BinaryOp op : {BinaryOp::add, BinaryOp::mul, BinaryOp::relu_backward, BinaryOp::add_relu}) {
          INFO("binary op " << int(op));
          Tensor want = empty_plain(s, d);
          be.binary(op, want, xp, yp);
          Tensor got = empty_nhwc(s, d);
          be.binary(op, got, x, y);
          CHECK(same_bits(got, want) == "");
          got = empty_nhwc(s, d);
          be.binary(op, got, xp, yp);
          CHECK(same_bits(got, want) == "");
          Tensor want_b = empty_plain(s, d), got_b = empty_nhwc(s, d);
          be.binary(op, want_b, xp, bias);
          be.binary(op, got_b, x, bias);
          CHECK(same_bits(got_b, want_b) == "");
        }
        for (UnaryOp op : {UnaryOp::relu, UnaryOp::neg, UnaryOp::exp}) {
          INFO("unary op " << int(op));
          Tensor want = empty_plain(s, d), got = empty_nhwc(s, d);
          be.unary(op, want, xp, 0, 0);
          be.unary(op, got, x, 0, 0);
          CHECK(same_bits(got, want) == "");
        }
      }
  }
}

TEST_CASE("casts f32 <-> bf16/f16 of channels-last CUDA tensors equal the contiguous path and keep the layout",
          "[cuda][channels_last]") {
  manual_seed(32);
  Backend& be = backend_for(kGpu);
  for (bool on : {false, true}) {
    HalfChannelsLast sw(on);
    const bool keeps = gpu_keeps_channels_last();
    for (const Dims& s : kShapes)
      for (DType from : kHalfAndSingle)
        for (DType to : kHalfAndSingle) {
          if (from == to || (from != DType::f32 && to != DType::f32)) continue;
          INFO("REEL_CUDA_CHANNELS_LAST " << (on ? "on" : "off") << ", " << dtype_name(from) << " -> "
                                          << dtype_name(to) << " " << s.str());
          const Tensor xc = (randn(s) * 100).to(from);
          const Tensor x = gpu_nhwc(xc), xp = gpu_plain(xc);
          const Tensor got = x.to(to), want = xp.to(to);
          CHECK(same_bits(got, want) == "");
          CHECK(same_bits(want, xc.to(to).to(kGpu)) == "");  // the CPU's conversion, bit for bit
          if (channels_last(x)) CHECK(channels_last(got) == keeps);
          // NHWC into NHWC (a flat conversion) and across layouts, handed to the backend
          for (bool out_nhwc : {true, false})
            for (bool in_nhwc : {true, false}) {
              INFO("out " << (out_nhwc ? "NHWC" : "NCHW") << ", in " << (in_nhwc ? "NHWC" : "NCHW"));
              Tensor o = out_nhwc ? empty_nhwc(s, to) : empty_plain(s, to);
              be.copy(o, in_nhwc ? x : xp);
              CHECK(same_bits(o, want) == "");
            }
        }
  }
}

TEST_CASE("sums and means of channels-last CUDA tensors equal the contiguous path", "[cuda][channels_last][reduce]") {
  manual_seed(33);
  // 256 pixels: the contiguous path takes the per-channel sums (CUB or REEL_CUDA_CHANNEL_SUMS=warps),
  // the NHWC one the column kernel; 9 and 35 pixels: both split kernels; many images: splits
  const Dims shapes[] = {{8, 32, 16, 16}, {2, 3, 9, 9}, {4, 17, 5, 7}, {64, 8, 3, 3}, {2, 5, 1, 1}, {3, 1, 4, 4}};
  for (DType d : kHalfAndSingle)
    for (const Dims& s : shapes) {
      INFO(dtype_name(d) << " " << s.str());
      // Small integers: every partial sum is exact in the f32 accumulators (and the halves
      // accumulate in f32 twins), so every summation order gives the same bits, and the
      // layouts must agree bit for bit
      const Tensor ic = randint(-4, 5, s).to(DType::f32), ix = gpu_nhwc(ic.to(d)), ip = gpu_plain(ic.to(d));
      CHECK(same_bits(ix.sum({0, 2, 3}), ip.sum({0, 2, 3})) == "");
      CHECK(same_bits(ix.sum({0, 2, 3}, true), ip.sum({0, 2, 3}, true)) == "");
      CHECK(same_bits(ix.mean({0, 2, 3}), ip.mean({0, 2, 3})) == "");
      CHECK(same_bits(ix.sum({1}), ip.sum({1})) == "");
      CHECK(same_bits(ix.sum({0}), ip.sum({0})) == "");
      CHECK(same_bits(ix.mean({2, 3}), ip.mean({2, 3})) == "");
      CHECK(same_bits(ix.amax({0, 2, 3}), ip.amax({0, 2, 3})) == "");
      // Normal values: the column kernel adds a channel's N H W values in another order than
      // the per-channel sums or the split kernels do, so f32 sums differ in their last bits
      // (relative 1e-5 of the largest partial sum over 2048 terms), and a half result by at
      // most one rounding step of its dtype (2^-8 relative for f16's 11 bits, 2^-7 for bf16's 8)
      const Tensor nc = randn(s).to(d), nx = gpu_nhwc(nc), np = gpu_plain(nc);
      const double rtol = d == DType::f32 ? 1e-5 : d == DType::f16 ? 1.0 / 256 : 1.0 / 128;
      const double atol = d == DType::f32 ? 5e-4 : d == DType::f16 ? 2e-2 : 1e-1;  // sums near 0 of ~50 magnitude
      CHECK(close(host(nx.sum({0, 2, 3})), host(np.sum({0, 2, 3})), rtol, atol) == "");
      CHECK(close(host(nx.mean({0, 2, 3})), host(np.mean({0, 2, 3})), rtol, atol / 64) == "");
      CHECK(close(host(nx.sum({1})), host(np.sum({1})), rtol, atol) == "");
      CHECK(close(host(nx.sum({0})), host(np.sum({0})), rtol, atol) == "");
      // against the CPU too: the column kernel's sums are sums
      if (d == DType::f32) CHECK(close(host(nx.sum({0, 2, 3})), nc.sum({0, 2, 3}), 1e-5, 5e-4) == "");
    }
  // f64: the column kernel in double
  const Tensor c64 = randn({4, 17, 5, 7}, {.dtype = DType::f64});
  CHECK(close(host(gpu_nhwc(c64).sum({0, 2, 3})), c64.sum({0, 2, 3}), 1e-12, 1e-12) == "");
}

TEST_CASE("copies NHWC <-> NCHW in every float dtype, with and without conversion, copy every value",
          "[cuda][channels_last][copy]") {
  manual_seed(34);
  Backend& be = backend_for(kGpu);
  // tiled (17 and 64 channels, partial tiles), too narrow to tile (3 channels), one pixel,
  // several tiles a plane with ragged edges
  const Dims shapes[] = {{2, 3, 5, 7}, {2, 17, 5, 7}, {3, 17, 1, 1}, {1, 64, 9, 9}, {2, 40, 33, 35}, {1, 8, 8, 1}};
  for (const Dims& s : shapes)
    for (DType from : kFloats)
      for (DType to : kFloats) {
        INFO(dtype_name(from) << " -> " << dtype_name(to) << " " << s.str());
        const Tensor xc = (randn(s, {.dtype = DType::f64}) * 300).to(from), want = xc.to(to).to(kGpu);
        const Tensor x = gpu_nhwc(xc), xp = gpu_plain(xc);
        Tensor to_plain = empty_plain(s, to), to_nhwc = empty_nhwc(s, to);
        be.copy(to_plain, x);
        be.copy(to_nhwc, xp);
        CHECK(same_bits(to_plain, want) == "");
        CHECK(same_bits(to_nhwc, want) == "");
        if (from == to) {  // contiguous_copy and the staging's twins go through the same copy
          CHECK(same_bits(x.contiguous(), want) == "");
          CHECK(same_bits(xp.permute({0, 2, 3, 1}).contiguous().permute({0, 3, 1, 2}), want) == "");  // into NHWC
        }
      }
  // NaN, infinities, signed zeros and an f16 overflow through the tile: the bits the dense
  // conversion of the same values gives (the GPU's NaN patterns, whatever the CPU's), the values
  // the CPU's conversion gives
  std::vector<float> v(2 * 16 * 3 * 5);
  for (size_t i = 0; i < v.size(); ++i) v[i] = float(i) * 0.37f - 20.f;
  v[3] = NAN, v[40] = INFINITY, v[77] = -INFINITY, v[101] = -0.f, v[150] = 1e30f;
  const Tensor special = from_vector(v, {2, 16, 3, 5});
  for (DType from : kFloats)
    for (DType to : kFloats) {
      INFO("specials " << dtype_name(from) << " -> " << dtype_name(to));
      const Tensor src = special.to(from);
      Tensor o = empty_plain({2, 16, 3, 5}, to), dense = empty_plain({2, 16, 3, 5}, to);
      be.copy(o, gpu_nhwc(src));
      be.copy(dense, gpu_plain(src));
      CHECK(same_bits(o, dense) == "");
      CHECK(close(host(o), src.to(to), 0, 0) == "");  // NaN where NaN, else equal
    }
  // more batches than gridDim.y takes (65535): the tile kernel's batch loop goes round
  const Dims many{70000, 8, 2, 4};
  const Tensor mc = randn(many);
  Tensor o = empty_plain(many, DType::f32);
  be.copy(o, gpu_nhwc(mc));
  CHECK(same_bits(o, mc.to(kGpu)) == "");
  // a plain 2-D transpose and a slice with a row pitch take the tiles too
  const Tensor m = randn({40, 33});
  CHECK(same_bits(m.to(kGpu).t().contiguous(), m.t().contiguous().to(kGpu)) == "");
  const Tensor wide = randn({50, 45});
  CHECK(same_bits(wide.to(kGpu).narrow(1, 3, 40).t().contiguous(), wide.narrow(1, 3, 40).t().contiguous().to(kGpu)) ==
        "");
}
