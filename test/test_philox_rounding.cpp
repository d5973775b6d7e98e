// The CPU's Philox fills round lo + scale * u (and mean + std * z) as a multiply and an
// add, never one fused multiply-add, as the GPU's kernels do (cuda/random.cu): the same
// seed then gives the same floats on both devices whatever the compiler would contract.
// cpu/backend.cpp is built with -ffp-contract=off for this (CMakeLists.txt).
#include <catch2/catch.hpp>

#include <cmath>
#include <ios>
#include <vector>

#include "../tensor/philox.h"
#include <reel/reel.h>

using namespace reel;

namespace {
// a * b + c rounded twice; volatile keeps this file's own compiler from contracting it
template <typename T>
T mul_add_rounded(T a, T b, T c) {
  volatile T p = a * b;
  return c + p;
}
}  // namespace

TEMPLATE_TEST_CASE("Philox fills on the CPU round like the GPU's: no FMA contraction", "[random][philox]", float,
                   double) {
  using T = TestType;
  DType dt = std::is_same_v<T, float> ? DType::f32 : DType::f64;
  const int64_t n = 4096;
  const T lo = T(0.1), hi = T(1.8), mean = T(0.3), sd = T(1.7);
  manual_seed(91);
  Tensor u = empty({n}, {.dtype = dt});
  uniform_(u, double(lo), double(hi));
  manual_seed(91);
  Tensor g = empty({n}, {.dtype = dt});
  normal_(g, double(mean), double(sd));
  std::vector<T> uv = u.to_vector<T>(), gv = g.to_vector<T>();
  const T scale = T(double(hi) - double(lo));
  int fused_differs = 0;  // how many elements an FMA would change: the test must be able to fail
  int mismatches = 0;
  for (int64_t i = 0; i < n; ++i) {
    T unit = T(philox::to_unit(philox::generate(91, uint64_t(i) / 4).w[i % 4]));
    philox::NormalPair p = philox::normal_pair(91, uint64_t(i) / 2);
    T z = T(i % 2 == 0 ? p.even : p.odd);
    T want_u = mul_add_rounded(scale, unit, lo), want_g = mul_add_rounded(sd, z, mean);
    fused_differs += std::fma(scale, unit, lo) != want_u;
    fused_differs += std::fma(sd, z, mean) != want_g;
    if ((uv[size_t(i)] != want_u || gv[size_t(i)] != want_g) && mismatches++ == 0)
      FAIL_CHECK("element " << i << std::hexfloat << ": uniform " << uv[size_t(i)] << " vs " << want_u
                            << ", normal " << gv[size_t(i)] << " vs " << want_g);
  }
  CHECK(mismatches == 0);
  CHECK(fused_differs > n / 20);
}
