// Pooling on channels-last and other strided CUDA tensors. cuda/pool.cu reads x and gy and
// writes out, indices and gx through each tensor's own strides, since a channels-last
// backend hands it NHWC outputs wherever x is NHWC and the low-precision layer stages an
// f16/bf16 pool on contiguous f32 twins beside NHWC indices. Every layout must give what
// the contiguous layout gives on the same GPU, bit for bit: values, indices (flat h*W+w
// within the plane whatever the layout) and gradients, in f32, bf16 and f16. The public
// ops reach the backend with an NHWC x (and, under REEL_CUDA_CHANNELS_LAST=on, NHWC
// outputs); the other layouts, the staged one among them, are handed to the backend
// directly.
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "../../autograd/op_support.h"
#include "../channels_last_check.h"
#include "compare.h"

using namespace reel;
using namespace reel::cuda_test;
using reel::test::channels_last;
using reel::test::to_channels_last;

namespace {

const DType kDtypes[] = {DType::f32, DType::bf16, DType::f16};

// plain: contiguous; nhwc: channels-last; gaps: NCHW order narrowed from a larger tensor;
// nhwc_gaps: NHWC order narrowed from a larger tensor (channel stride 1, pixels apart)
enum class L { plain, nhwc, gaps, nhwc_gaps };
const char* name(L l) {
  switch (l) {
    case L::plain: return "contiguous";
    case L::nhwc: return "channels-last";
    case L::gaps: return "NCHW with gaps";
    case L::nhwc_gaps: return "NHWC with gaps";
  }
  return "?";
}

// A GPU tensor of shape s [N, C, H, W] laid out l, filled with a sentinel that shows any
// element a kernel leaves unwritten
Tensor make(const Dims& s, DType d, L l) {
  const Options o{.dtype = d, .device = kGpu};
  Tensor t;
  switch (l) {
    case L::plain: t = empty(s, o); break;
    case L::nhwc: t = empty({s[0], s[2], s[3], s[1]}, o).permute({0, 3, 1, 2}); break;
    case L::gaps:
      t = empty({s[0], s[1] + 1, s[2] + 2, s[3] + 3}, o).narrow(1, 1, s[1]).narrow(2, 2, s[2]).narrow(3, 1, s[3]);
      break;
    case L::nhwc_gaps:
      t = empty({s[0], s[2], s[3] + 1, s[1] + 3}, o).narrow(2, 1, s[3]).narrow(3, 2, s[1]).permute({0, 3, 1, 2});
      break;
  }
  t.fill_(d == DType::i64 ? -7 : 1234);
  if (l == L::nhwc && s[1] > 1 && s[2] * s[3] > 1) REQUIRE(channels_last(t));
  return t;
}

// src's values laid out l
Tensor laid(const Tensor& src, L l) {
  Tensor t = make(src.shape(), src.dtype(), l);
  t.copy_(src);
  return t;
}


// [N, C, H, W] values on the GPU in dtype d: small integers (ties inside windows, so
// which maximum wins is checked), normal values (sums whose rounding depends on their
// order), or integers with NaN and -inf among them
enum class Values { ties, normal, nan };
Tensor input(const Dims& s, DType d, Values kind) {
  if (kind == Values::normal) return randn(s).to(d).to(kGpu);
  std::vector<float> v(size_t(numel_of(s)));
  for (size_t i = 0; i < v.size(); ++i) {
    v[i] = float(int((i * 37 + i / 5 * 11) % 9) - 4);
    if (kind == Values::nan && (i % 17 == 3 || i % 31 == 4)) v[i] = NAN;  // sometimes two in a window
    if (kind == Values::nan && i % 23 == 5) v[i] = -INFINITY;
  }
  return from_vector(v, s).to(d).to(kGpu);
}

struct Case {
  const char* what;
  Pool2dOptions opt;
};
const Case kCases[] = {
    {"2x2, stride 2", {.kernel = 2}},
    {"3x3, stride 2, padding 1 (overlapping)", {.kernel = 3, .stride = 2, .padding = 1}},
    {"3x3, stride 1, padding 1", {.kernel = 3, .stride = 1, .padding = 1}},
    {"3x2, stride [2, 1], padding [1, 0]", {.kernel = {3, 2}, .stride = {2, 1}, .padding = {1, 0}}},
    {"2x2, stride 3 (gaps between windows)", {.kernel = 2, .stride = 3}},
    {"3x3, stride 2, ceil_mode", {.kernel = 3, .stride = 2, .ceil_mode = true}},
};

// x's shapes: odd sizes; 32 channels (a warp's width across channels); one larger than
// a grid's worth of threads, so that the grid-stride loops go round
const Dims kShapes[] = {{2, 5, 9, 7}, {1, 32, 6, 5}, {4, 64, 56, 56}};

struct Max {
  Tensor y, idx, gx;
};

// max pooling of x (layouts xl, yl, il; gradient: gx laid gl from gy laid gyl)
Max max_pool(const Tensor& x, const Tensor& gy, const PoolParams& p, L xl, L yl, L il, L gl, L gyl) {
  Backend& be = backend_for(kGpu);
  Max r{make(gy.shape(), x.dtype(), yl), make(gy.shape(), DType::i64, il), make(x.shape(), x.dtype(), gl)};
  be.max_pool2d_forward(r.y, r.idx, laid(x, xl), p);
  be.max_pool2d_backward(r.gx, laid(gy, gyl), r.idx, p);
  return r;
}

void check_max(const Tensor& x, const Pool2dOptions& opt) {
  const PoolParams p = pool_params(opt);
  const Dims ys = max_pool2d(x, opt).shape();
  const Tensor gy = randn(ys).to(x.dtype()).to(kGpu);
  const Max ref = max_pool(x, gy, p, L::plain, L::plain, L::plain, L::plain, L::plain);
  // x, out, indices, gx, gy: every tensor channels-last; out contiguous beside channels-last
  // indices (with x channels-last; then with x contiguous too: the staged f16/bf16 layout
  // exactly); mixed; gaps
  const L layouts[][5] = {{L::nhwc, L::nhwc, L::nhwc, L::nhwc, L::nhwc},
                          {L::nhwc, L::plain, L::nhwc, L::plain, L::plain},
                          {L::plain, L::plain, L::nhwc, L::plain, L::plain},
                          {L::plain, L::nhwc, L::plain, L::nhwc, L::plain},
                          {L::nhwc, L::nhwc, L::plain, L::plain, L::nhwc},
                          {L::gaps, L::nhwc_gaps, L::gaps, L::nhwc_gaps, L::gaps},
                          {L::nhwc_gaps, L::gaps, L::nhwc_gaps, L::gaps, L::nhwc_gaps}};
  for (const auto& l : layouts) {
    INFO("x " << name(l[0]) << ", out " << name(l[1]) << ", indices " << name(l[2]) << ", gx " << name(l[3])
              << ", gy " << name(l[4]));
    const Max r = max_pool(x, gy, p, l[0], l[1], l[2], l[3], l[4]);
    CHECK(same_bits(r.y, ref.y) == "");
    CHECK(same_bits(r.idx, ref.idx) == "");
    CHECK(same_bits(r.gx, ref.gx) == "");
  }
  // a gradient broadcast from one value (the backward of a sum), read through stride 0
  const Tensor ones = full({1, 1, 1, 1}, 1.0, {.dtype = x.dtype(), .device = kGpu}).expand(ys);
  Tensor gx = make(x.shape(), x.dtype(), L::nhwc), gx_ref = make(x.shape(), x.dtype(), L::plain);
  backend_for(kGpu).max_pool2d_backward(gx, ones, laid(ref.idx, L::nhwc), p);
  backend_for(kGpu).max_pool2d_backward(gx_ref, ones.contiguous(), ref.idx, p);
  CHECK(same_bits(gx, gx_ref) == "");
}

// REEL_CUDA_CHANNELS_LAST for one scope
struct HalfChannelsLast {
  bool before;
  explicit HalfChannelsLast(bool on) : before(cuda::half_channels_last()) { cuda::set_half_channels_last(on); }
  ~HalfChannelsLast() { cuda::set_half_channels_last(before); }
};

// whether the public op hands the backend channels-last outputs for x channels-last
bool nhwc_outputs(const Tensor& x, const Dims& ys) {
  return is_low_precision(x.dtype()) && cuda::half_channels_last() && ys[1] > 1 && ys[2] * ys[3] > 1;
}

// the public op on x channels-last against x contiguous, through the tape, with
// REEL_CUDA_CHANNELS_LAST off (contiguous outputs) and on (f16/bf16: NHWC out and indices)
void check_max_public(const Tensor& x, const Pool2dOptions& opt) {
  for (bool on : {false, true}) {
    INFO("REEL_CUDA_CHANNELS_LAST " << (on ? "on" : "off"));
    HalfChannelsLast switch_(on);
    Tensor a = x.detach().clone().requires_grad_(), b = to_channels_last(x.detach()).requires_grad_();
    auto [ya, ia] = max_pool2d_with_indices(a, opt);
    auto [yb, ib] = max_pool2d_with_indices(b, opt);
    CHECK(channels_last(yb) == nhwc_outputs(x, yb.shape()));
    CHECK(channels_last(ib) == nhwc_outputs(x, yb.shape()));
    CHECK(same_bits(yb, ya) == "");
    CHECK(same_bits(ib, ia) == "");
    const Tensor w = randn(ya.shape()).to(x.dtype()).to(kGpu);
    (ya * w).sum().backward();
    (yb * w).sum().backward();
    CHECK(same_bits(b.grad(), a.grad()) == "");
  }
}

struct Avg {
  Tensor y, gx;
};

Avg avg_pool(const Tensor& x, const Tensor& gy, const PoolParams& p, L xl, L yl, L gl, L gyl) {
  Backend& be = backend_for(kGpu);
  Avg r{make(gy.shape(), x.dtype(), yl), make(x.shape(), x.dtype(), gl)};
  be.avg_pool2d_forward(r.y, laid(x, xl), p);
  be.avg_pool2d_backward(r.gx, laid(gy, gyl), p);
  return r;
}

// x, out, gx, gy: all channels-last; x alone (the public op without the switch); mixed;
// gaps
const L kAvgLayouts[][4] = {{L::nhwc, L::nhwc, L::nhwc, L::nhwc},
                            {L::nhwc, L::plain, L::plain, L::plain},
                            {L::plain, L::nhwc, L::nhwc, L::plain},
                            {L::nhwc, L::nhwc, L::plain, L::nhwc},
                            {L::gaps, L::nhwc_gaps, L::nhwc_gaps, L::gaps},
                            {L::nhwc_gaps, L::gaps, L::gaps, L::nhwc_gaps}};

void check_avg(const Tensor& x, const Pool2dOptions& opt) {
  const PoolParams p = pool_params(opt);
  const Dims ys = avg_pool2d(x, opt).shape();
  const Tensor gy = randn(ys).to(x.dtype()).to(kGpu);
  const Avg ref = avg_pool(x, gy, p, L::plain, L::plain, L::plain, L::plain);
  for (const auto& l : kAvgLayouts) {
    INFO("x " << name(l[0]) << ", out " << name(l[1]) << ", gx " << name(l[2]) << ", gy " << name(l[3]));
    const Avg r = avg_pool(x, gy, p, l[0], l[1], l[2], l[3]);
    CHECK(same_bits(r.y, ref.y) == "");
    CHECK(same_bits(r.gx, ref.gx) == "");
  }
}

void check_avg_public(const Tensor& x, const Pool2dOptions& opt) {
  for (bool on : {false, true}) {
    INFO("REEL_CUDA_CHANNELS_LAST " << (on ? "on" : "off"));
    HalfChannelsLast switch_(on);
    Tensor a = x.detach().clone().requires_grad_(), b = to_channels_last(x.detach()).requires_grad_();
    Tensor ya = avg_pool2d(a, opt), yb = avg_pool2d(b, opt);
    CHECK(channels_last(yb) == nhwc_outputs(x, yb.shape()));
    CHECK(same_bits(yb, ya) == "");
    const Tensor w = randn(ya.shape()).to(x.dtype()).to(kGpu);
    (ya * w).sum().backward();
    (yb * w).sum().backward();
    CHECK(same_bits(b.grad(), a.grad()) == "");
  }
}

}  // namespace

TEST_CASE("CUDA max pooling: every layout gives the contiguous one's values, indices and gradients",
          "[cuda][channels_last][pool]") {
  manual_seed(41);
  for (DType d : kDtypes)
    for (const Dims& s : kShapes)
      for (const Case& c : kCases) {
        INFO(dtype_name(d) << ", x " << s.str() << ", " << c.what);
        const Tensor x = input(s, d, Values::ties);
        check_max(x, c.opt);
        check_max_public(x, c.opt);
      }
}

TEST_CASE("CUDA max pooling with NaN and -inf: every layout picks the same winner", "[cuda][channels_last][pool]") {
  manual_seed(42);
  for (DType d : kDtypes)
    for (const Case& c : kCases) {
      INFO(dtype_name(d) << ", " << c.what);
      const Tensor x = input({2, 5, 9, 7}, d, Values::nan);
      check_max(x, c.opt);
      check_max_public(x, c.opt);
    }
  // and the winner is the CPU's: the first maximum, or the last NaN
  for (const Case& c : kCases)
    for (Values v : {Values::ties, Values::nan}) {
      INFO(c.what << (v == Values::nan ? ", with NaN" : ""));
      const Tensor x = input({2, 5, 9, 7}, DType::f32, v);
      auto [yg, ig] = max_pool2d_with_indices(to_channels_last(x), c.opt);
      auto [yc, ic] = max_pool2d_with_indices(x.cpu(), c.opt);
      CHECK(same_bits(yg, yc) == "");
      CHECK(same_bits(ig, ic) == "");
    }
}

TEST_CASE("CUDA avg pooling: every layout gives the contiguous one's values and gradients",
          "[cuda][channels_last][pool]") {
  manual_seed(43);
  for (DType d : kDtypes)
    for (const Dims& s : kShapes)
      for (const Case& c : kCases)
        for (bool include_pad : {true, false}) {
          INFO(dtype_name(d) << ", x " << s.str() << ", " << c.what << ", count_include_pad " << include_pad);
          Pool2dOptions opt = c.opt;
          opt.count_include_pad = include_pad;
          const Tensor x = input(s, d, Values::normal);
          check_avg(x, opt);
          check_avg_public(x, opt);
        }
}

TEST_CASE("CUDA adaptive avg pooling: every layout gives the contiguous one's values and gradients",
          "[cuda][channels_last][pool]") {
  manual_seed(44);
  Backend& be = backend_for(kGpu);
  for (DType d : kDtypes)
    for (const Dims& s : kShapes)
      for (auto [oh, ow] : {std::pair<int64_t, int64_t>{4, 3}, {5, 5}, {1, 1}}) {
        INFO(dtype_name(d) << ", x " << s.str() << " to " << oh << "x" << ow);
        const Tensor x = input(s, d, Values::normal);
        const Dims ys{s[0], s[1], oh, ow};
        const Tensor gy = randn(ys).to(d).to(kGpu);
        Tensor y_ref = make(ys, d, L::plain), gx_ref = make(s, d, L::plain);
        be.adaptive_avg_pool2d_forward(y_ref, x);
        be.adaptive_avg_pool2d_backward(gx_ref, gy);
        for (const auto& l : kAvgLayouts) {
          INFO("x " << name(l[0]) << ", out " << name(l[1]) << ", gx " << name(l[2]) << ", gy " << name(l[3]));
          Tensor y = make(ys, d, l[1]), gx = make(s, d, l[2]);
          be.adaptive_avg_pool2d_forward(y, laid(x, l[0]));
          be.adaptive_avg_pool2d_backward(gx, laid(gy, l[3]));
          CHECK(same_bits(y, y_ref) == "");
          CHECK(same_bits(gx, gx_ref) == "");
        }
        Tensor a = x.detach().clone().requires_grad_(), b = to_channels_last(x.detach()).requires_grad_();
        Tensor ya = adaptive_avg_pool2d(a, oh, ow), yb = adaptive_avg_pool2d(b, oh, ow);
        CHECK(same_bits(yb, ya) == "");
        (ya * gy).sum().backward();
        (yb * gy).sum().backward();
        CHECK(same_bits(b.grad(), a.grad()) == "");
      }
}
