// Moves between plain channel planes and oneDNN's channel-blocked activation layout
// [N, C/B, S, B] (nChw16c for B = 16, S = H W), fused with the elementwise step that
// sits at that boundary, so the layout change costs no pass of its own. Memory-bound:
// one read of each input and one write of the output. B = 16 f32 runs 16x16 register
// transposes on AVX-512 CPUs; every other case runs the scalar loops. Internal to cpu/.
#pragma once
#include <cstdint>

namespace reel::cpu {

// One [S, B] block of the blocked output from B channel planes: out[s B + i] =
// relu(plane[i][s] scale[i] + shift[i]) with relu NaN passing (as batch_norm_relu's plain write).
void write_blocked_scale_shift_relu(float* out, const float* const* plane, const float* scale, const float* shift,
                                    int64_t S, int64_t B);

// The inverse move, masked by relu's output: plane[i][s] = g[s B + i] where z[s B + i] > 0
// or is NaN, else +0 (relu's backward on the blocked gradient g and output z).
void read_blocked_relu_grad(float* const* plane, const float* g, const float* z, int64_t S, int64_t B);

}  // namespace reel::cpu
