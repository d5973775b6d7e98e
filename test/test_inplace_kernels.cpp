// The kernels under the in-place writes (add_ -> Backend::axpy, mul_ -> unary in place,
// gradient accumulation in backward) on tensors past the streaming-store size
// (cpu/stream_store.h): an output that aliases an input is written with plain stores, one
// pass, and gives the bits of the out-of-place ops; aliasing (a += a), strided views and the
// sizes on either side of the streaming threshold.
#include <cstring>

#include "gradcheck.h"

using namespace reel;

namespace {

// 5M floats (20 MB) is past kStreamingStoreBytes (16 MB); 1000 is far below it
constexpr int64_t kLarge = 5'000'000 + 7;  // and a tail that is not a multiple of 16

bool same_bits(const Tensor& a, const Tensor& b) {
  if (a.dtype() != b.dtype() || !(a.shape() == b.shape())) return false;
  Tensor x = a.contiguous(), y = b.contiguous();
  return std::memcmp(x.data_ptr(), y.data_ptr(), size_t(x.numel()) * x.element_size()) == 0;
}

}  // namespace

TEST_CASE("add_ and mul_ in place give the out-of-place bits at every size", "[inplace_kernels]") {
  manual_seed(5);
  for (int64_t n : {int64_t(1000), kLarge}) {
    INFO("n = " << n);
    Tensor a = randn({n}), b = randn({n});
    // alpha 1 and a power of two: the product is exact, so a fused and an unfused
    // multiply-add agree and the out-of-place ops are the reference
    Tensor want = add(a, b), want_half = add(a, mul(b, 0.5)), want_scaled = mul(a, 3.0);
    Tensor x = a.clone();
    x.add_(b);
    CHECK(same_bits(x, want));
    x = a.clone();
    x.add_(b, 0.5);
    CHECK(same_bits(x, want_half));
    x = a.clone();
    x.mul_(3.0);
    CHECK(same_bits(x, want_scaled));
    // f64 takes the same loops
    Tensor a64 = a.to(DType::f64), b64 = b.to(DType::f64);
    Tensor x64 = a64.clone();
    x64.add_(b64);
    CHECK(same_bits(x64, add(a64, b64)));
  }
}

TEST_CASE("mul_ and div_ by a tensor in one pass give the out-of-place bits; overlaps take the safe path",
          "[inplace_kernels]") {
  manual_seed(9);
  // t.op_(o) against op(t, o), on a fresh copy of t
  auto same_as_out_of_place = [](const Tensor& t, const Tensor& o, bool divide) {
    Tensor x = t.clone();
    divide ? x.div_(o) : x.mul_(o);
    return same_bits(x, divide ? div(t, o) : mul(t, o));
  };
  for (int64_t n : {int64_t(1000), kLarge}) {
    INFO("n = " << n);
    Tensor a = randn({n}), b = randn({n});
    CHECK(same_as_out_of_place(a, b, false));
    CHECK(same_as_out_of_place(a, b, true));
    Tensor x = a.clone();
    x.mul_(x);  // the operand is the output itself
    CHECK(same_bits(x, mul(a, a)));
  }
  // broadcast operands: a row, a column, a 0-dim tensor
  Tensor m = randn({300, 700}), row = randn({700}), col = randn({300, 1}), s = tensor({1.5});
  CHECK(same_as_out_of_place(m, row, false));
  CHECK(same_as_out_of_place(m, col, true));
  CHECK(same_as_out_of_place(m, s.reshape({}), false));
  // an operand overlapping the output shifted by one: computed from the old values, as
  // if read before any write (the fresh-buffer path)
  Tensor v = arange(10).to(DType::f32), want = mul(v.narrow(0, 1, 9), v.narrow(0, 0, 9));
  Tensor head = v.narrow(0, 1, 9);
  head.mul_(v.narrow(0, 0, 9));
  CHECK(same_bits(head, want));
  // other dtypes and a growing operand still take the out-of-place path and its checks
  Tensor i = arange(6).reshape({2, 3});
  i.mul_(tensor({2.0, 2.0, 2.0}).to(DType::i64));
  CHECK(i.to_vector<int64_t>() == std::vector<int64_t>{0, 2, 4, 6, 8, 10});
  Tensor small = randn({3});
  CHECK_THROWS_WITH(small.mul_(randn({2, 3})), Catch::Contains("mul_") && Catch::Contains("cannot grow"));
}

TEST_CASE("copy_ of a large tensor on all threads, onto itself, and between overlapping views",
          "[inplace_kernels]") {
  manual_seed(10);
  Tensor src = randn({kLarge}), dst = zeros({kLarge});
  dst.copy_(src);
  CHECK(same_bits(dst, src));
  dst.copy_(dst);  // onto itself: nothing changes
  CHECK(same_bits(dst, src));
  // overlapping views of one storage, either direction: the old values, as if read first
  Tensor v = arange(kLarge).to(DType::f32), old = v.clone();
  v.narrow(0, 1, kLarge - 1).copy_(v.narrow(0, 0, kLarge - 1));
  CHECK(same_bits(v.narrow(0, 1, kLarge - 1), old.narrow(0, 0, kLarge - 1)));
  Tensor w = old.clone();
  w.narrow(0, 0, kLarge - 3).copy_(w.narrow(0, 3, kLarge - 3));
  CHECK(same_bits(w.narrow(0, 0, kLarge - 3), old.narrow(0, 3, kLarge - 3)));
}

TEST_CASE("a large copy covers every byte whatever share of it each thread takes", "[inplace_kernels]") {
  // The parts were bytes / threads rounded up to 64: when that quotient was already a multiple of
  // 64 the last bytes % threads stayed uncopied (a 2^24 + 8 byte index on 16 threads, seen on a GPU).
  const int before = num_threads();
  const bool follow = threads_follow_load();
  for (int threads : {2, 3, 4, 7, 16}) {
    set_num_threads(threads);
    for (int64_t tail : {1, 8, 63}) {
      const int64_t n = threads * (int64_t(1) << 20) + tail;
      INFO(threads << " threads, " << n << " bytes");
      Tensor src = full({n}, 3.0, {.dtype = DType::u8}), dst = zeros({n}, {.dtype = DType::u8});
      dst.copy_(src);
      CHECK(dst.slice(0, n - tail, n).to(DType::i64).sum().item<int64_t>() == 3 * tail);
      CHECK(same_bits(dst, src));
      CHECK(same_bits(src.clone(), src));
    }
  }
  set_num_threads(before);
  set_threads_follow_load(follow);
}

TEST_CASE("a += a and a *= s where the output is the input", "[inplace_kernels]") {
  manual_seed(6);
  Tensor a = randn({kLarge});
  Tensor twice = mul(a, 2.0), nothing = zeros({kLarge});  // x - x is +0
  Tensor x = a.clone();
  x.add_(x);
  CHECK(same_bits(x, twice));
  x = a.clone();
  x.add_(x, -1.0);
  CHECK(same_bits(x, nothing));
  // a view of the same storage as the source: b is a itself, seen through a reshape
  x = a.clone();
  Tensor same = x.reshape({kLarge});
  x.add_(same);
  CHECK(same_bits(x, twice));
}

TEST_CASE("add_ and mul_ into strided views of a large tensor", "[inplace_kernels]") {
  manual_seed(7);
  Tensor base = randn({2048, 2600});  // 21 MB
  Tensor b = randn({2600, 2048});
  SECTION("a transposed destination") {
    Tensor x = base.clone();
    Tensor xt = x.t();
    Tensor want = add(base.t(), b);
    xt.add_(b);
    CHECK(same_bits(xt, want));
    CHECK(same_bits(x, want.t()));
  }
  SECTION("a column block: rows with gaps") {
    Tensor x = base.clone();
    Tensor block = x.narrow(1, 100, 2400);  // 19.7 MB: past the streaming size too
    Tensor src = randn({2048, 2500}).narrow(1, 50, 2400);
    Tensor want = add(base.narrow(1, 100, 2400), src);
    block.add_(src);
    CHECK(same_bits(block, want));
    // the columns outside the block are untouched
    CHECK(same_bits(x.narrow(1, 0, 100), base.narrow(1, 0, 100)));
    CHECK(same_bits(x.narrow(1, 2500, 100), base.narrow(1, 2500, 100)));
    block.mul_(0.25);
    CHECK(same_bits(block, mul(want, 0.25)));
  }
}

TEST_CASE("backward accumulates a large leaf's gradient in place, as the sum of its uses", "[inplace_kernels]") {
  manual_seed(8);
  Tensor w = randn({kLarge}).requires_grad_();
  Tensor u = randn({kLarge}), v = randn({kLarge});
  ((w * u).sum() + (w * v).sum() + (w * u).sum()).backward();
  // the engine adds the three gradients in the order it meets them; each is exact (u, v
  // themselves), so any order of two float adds of the same values is checked against
  Tensor got = w.grad();
  Tensor want_a = add(add(u, v), u), want_b = add(add(u, u), v);
  CHECK((same_bits(got, want_a) || same_bits(got, want_b)));
}
