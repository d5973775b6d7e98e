// One warp's float32 matrix products on the tensor cores, as the attention kernels of
// REEL_CUDA_ATTENTION=mma use them (cuda/attention_mma.cu, cuda/attention_mma_backward.cu):
// mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 with 3xTF32 (each operand x split into
// big = tf32(x) and small = tf32(x - big); D += a_big b_small + a_small b_big, then
// a_big b_big, the small terms first as cutlass's OpMultiplyAddFastF32 does: the products
// of 11-bit significands are exact, the dropped small x small term is ~2^-22 of the product,
// so the result is float32's up to rounding).
//
// Which lane holds which element (PTX ISA, "Matrix Fragments for mma.m16n8k8", .tf32;
// g = lane / 4, t = lane % 4):
//   A 16 x 8 (row):   a0 = A[g][t], a1 = A[g + 8][t], a2 = A[g][t + 4], a3 = A[g + 8][t + 4]
//   B 8 x 8 (k x n):  b0 = B[t][g], b1 = B[t + 4][g]
//   C/D 16 x 8:       c0 = C[g][2t], c1 = C[g][2t + 1], c2 = C[g + 8][2t], c3 = C[g + 8][2t + 1]
// A C fragment (scores, probabilities, dS) becomes the next product's A operand without a
// shuffle by relabelling the 8 keys of a k-step: A's column k is key key_of(k) (t -> 2t,
// t + 4 -> 2t + 1), so a = {c0, c2, c1, c3} and the B operand reads the same relabelled rows.
//
// The warp-level products below (xyT, py, the online softmax) take the three warp
// operations from a policy Ops (split, mma, shfl_xor): the kernels pass the PTX
// (attention_mma.cuh), reel_tests an emulation of the 32 lanes on the CPU built from the
// maps above (test/test_cuda_mma_fragments.cpp), so the index arithmetic the kernels run is
// the arithmetic the test checks. Plain C++, no CUDA types. Internal to cuda/.
#pragma once
#include <cmath>
#include <cstdint>
#include <cstring>

#if defined(__CUDACC__)
#define REEL_MMA_FN __host__ __device__ __forceinline__
#else
#define REEL_MMA_FN inline
#endif
#if defined(__CUDA_ARCH__)  // the device pass only: the host compiler knows no such pragma
#define REEL_MMA_UNROLL _Pragma("unroll")
#else
#define REEL_MMA_UNROLL
#endif

namespace reel::cuda::mma {

constexpr int kM = 16, kN = 8, kK = 8;  // the instruction's shape
constexpr int kWarpRows = kM;           // rows a warp owns in the attention kernels

REEL_MMA_FN constexpr int group(int lane) { return lane >> 2; }
REEL_MMA_FN constexpr int in_group(int lane) { return lane & 3; }

// A [16][8]: register i of `lane` holds A[a_row][a_col]
REEL_MMA_FN constexpr int a_row(int lane, int i) { return group(lane) + 8 * (i & 1); }
REEL_MMA_FN constexpr int a_col(int lane, int i) { return in_group(lane) + 4 * (i >> 1); }
// B [8][8] (k x n): register i holds B[b_k][b_n]
REEL_MMA_FN constexpr int b_k(int lane, int i) { return in_group(lane) + 4 * i; }
REEL_MMA_FN constexpr int b_n(int lane, int /*i*/) { return group(lane); }
// C, D [16][8]: register i holds C[c_row][c_col]
REEL_MMA_FN constexpr int c_row(int lane, int i) { return group(lane) + 8 * (i >> 1); }
REEL_MMA_FN constexpr int c_col(int lane, int i) { return 2 * in_group(lane) + (i & 1); }

// The relabelling of a k-step whose A operand is a C fragment: A's column k is C's column
// key_of(k), and A's register i is C's register c_of_a(i)
REEL_MMA_FN constexpr int key_of(int k) { return k < 4 ? 2 * k : 2 * (k - 4) + 1; }
REEL_MMA_FN constexpr int c_of_a(int i) { return i == 1 ? 2 : i == 2 ? 1 : i; }

// Offsets of a lane's operand elements in row-major shared-memory tiles [rows][stride]:
// A from X [m][k] (the tile's first row and column at 0)
REEL_MMA_FN constexpr int a_offset(int lane, int i, int stride) { return a_row(lane, i) * stride + a_col(lane, i); }
// B of a product X Y^T from Y [n][k]: B[k][n] = Y[n][k] (keys of Q K^T, dO V^T, K Q^T, V dO^T)
REEL_MMA_FN constexpr int b_offset_nk(int lane, int i, int stride) {
  return b_n(lane, i) * stride + b_k(lane, i);
}
// B of a product P Y, P a relabelled C fragment, from Y [k][n]: B[k][n] = Y[key_of(k)][n]
// (P V, dS K, P^T dO, dS^T Q)
REEL_MMA_FN constexpr int b_offset_kn(int lane, int i, int stride) {
  return key_of(b_k(lane, i)) * stride + b_n(lane, i);
}

// The three operations of the 32 lanes together, each: D += A_big B_small, A_small B_big, A_big B_big
template <typename Ops>
REEL_MMA_FN void mma3(float (&d)[4], const uint32_t (&ab)[4], const uint32_t (&as)[4], const uint32_t (&bb)[2],
                      const uint32_t (&bs)[2]) {
  Ops::mma(d, ab, bs);
  Ops::mma(d, as, bb);
  Ops::mma(d, ab, bb);
}

// c[nt] += X Y^T for a warp: X the warp's 16 rows [16][K] (stride xs), Y NT x 8 rows [8 NT][K]
// (stride ys); c[nt] is the C fragment of columns 8 nt..8 nt + 7. K a multiple of 8.
template <typename Ops, int NT, int K>
REEL_MMA_FN void xyT(float (&c)[NT][4], const float* x, int xs, const float* y, int ys, int lane) {
  REEL_MMA_UNROLL
  for (int k0 = 0; k0 < K; k0 += kK) {
    uint32_t ab[4], as[4];
    REEL_MMA_UNROLL
    for (int i = 0; i < 4; ++i) Ops::split(x[a_offset(lane, i, xs) + k0], ab[i], as[i]);
    REEL_MMA_UNROLL
    for (int nt = 0; nt < NT; ++nt) {
      uint32_t bb[2], bs[2];
      REEL_MMA_UNROLL
      for (int i = 0; i < 2; ++i) Ops::split(y[kN * nt * ys + b_offset_nk(lane, i, ys) + k0], bb[i], bs[i]);
      mma3<Ops>(c[nt], ab, as, bb, bs);
    }
  }
}

// c[nt] += P Y for a warp: P the C fragments p[ks] of 16 rows x 8 KT columns (keys), Y
// [8 KT][8 NO] (stride ys); c[nt] the C fragment of Y's columns 8 nt..8 nt + 7
template <typename Ops, int KT, int NO>
REEL_MMA_FN void py(float (&c)[NO][4], const float (&p)[KT][4], const float* y, int ys, int lane) {
  REEL_MMA_UNROLL
  for (int ks = 0; ks < KT; ++ks) {
    uint32_t ab[4], as[4];
    REEL_MMA_UNROLL
    for (int i = 0; i < 4; ++i) Ops::split(p[ks][c_of_a(i)], ab[i], as[i]);
    REEL_MMA_UNROLL
    for (int nt = 0; nt < NO; ++nt) {
      uint32_t bb[2], bs[2];
      REEL_MMA_UNROLL
      for (int i = 0; i < 2; ++i) Ops::split(y[kK * ks * ys + b_offset_kn(lane, i, ys) + kN * nt], bb[i], bs[i]);
      mma3<Ops>(c[nt], ab, as, bb, bs);
    }
  }
}

// max and sum over the 4 lanes of a quad (same g: the lanes that hold one row of a C fragment)
template <typename Ops>
REEL_MMA_FN float quad_max(float v) {
  v = fmaxf(v, Ops::shfl_xor(v, 1));
  return fmaxf(v, Ops::shfl_xor(v, 2));
}
template <typename Ops>
REEL_MMA_FN float quad_sum(float v) {
  v += Ops::shfl_xor(v, 1);
  return v + Ops::shfl_xor(v, 2);
}

// One key tile of the online softmax for a warp's 16 rows, as the tiles' forward does it: s
// the masked, scaled scores (-inf where masked), NT fragments; h = 0 the lane's row g
// (registers 0, 1), h = 1 row g + 8 (2, 3). m, l: the running max and sum; o: the output
// fragments, rescaled. On return s holds p = e^(s - m) (0 where masked), before dropout.
template <typename Ops, int NT, int NO>
REEL_MMA_FN void online_softmax(float (&s)[NT][4], float (&m)[2], float (&l)[2], float (&o)[NO][4]) {
  REEL_MMA_UNROLL
  for (int h = 0; h < 2; ++h) {
    float mx = -INFINITY;
    REEL_MMA_UNROLL
    for (int nt = 0; nt < NT; ++nt) mx = fmaxf(mx, fmaxf(s[nt][2 * h], s[nt][2 * h + 1]));
    const float mt = fmaxf(m[h], quad_max<Ops>(mx));
    const float alpha = m[h] == -INFINITY ? 0.f : expf(m[h] - mt);
    float sum = 0.f;
    REEL_MMA_UNROLL
    for (int nt = 0; nt < NT; ++nt)
      REEL_MMA_UNROLL
      for (int c = 2 * h; c < 2 * h + 2; ++c) {
        s[nt][c] = s[nt][c] == -INFINITY ? 0.f : expf(s[nt][c] - mt);
        sum += s[nt][c];
      }
    l[h] = l[h] * alpha + quad_sum<Ops>(sum);
    m[h] = mt;
    REEL_MMA_UNROLL
    for (int nt = 0; nt < NO; ++nt) {
      o[nt][2 * h] *= alpha;
      o[nt][2 * h + 1] *= alpha;
    }
  }
}

// cvt.rna.tf32.f32 on the host (the CPU test's emulation): the nearest value with 10
// fraction bits, ties away from zero, as a float32 bit pattern with the low 13 bits clear
inline uint32_t tf32_bits(float x) {
  uint32_t u;
  std::memcpy(&u, &x, 4);
  if ((u & 0x7f800000u) == 0x7f800000u) return (u & 0x7fffffu) ? (u | 0x400000u) & 0xffffe000u : u;  // NaN, inf
  return (u + 0x1000u) & 0xffffe000u;
}

}  // namespace reel::cuda::mma
