// f16/bf16 scaled dot-product attention on CUDA: the switch (REEL_CUDA_HALF_ATTENTION),
// which calls cuDNN's fused attention may take, and the layouts and cache key its graphs
// are built with. No CUDA header: reel_tests checks these rules in every build
// (test/test_cuda_rules.cpp); cuda/attention_cudnn.cpp builds and runs the graphs through
// the cuDNN frontend, cuda/low_precision.cpp chooses between it and the staged path.
//
// Why cuDNN: its fused attention (the cuDNN frontend's sdpa / sdpa_backward nodes) runs the
// products on tensor cores in the half dtype with f32 softmax statistics; reel's own tiled
// kernels are f32 only, so f16/bf16 attention otherwise runs in f32 twins of its inputs
// (staged: widen, attend in f32, round once).
#pragma once
#include <array>
#include <cstdint>
#include <string>
#include <tuple>

#include "../../tensor/dtype.h"
#include "env_switch.h"

namespace reel {
class Tensor;
struct AttentionParams;
}  // namespace reel

namespace reel::cuda {
struct Context;
}

namespace reel::cuda::half_attention {

// ---- REEL_CUDA_HALF_ATTENTION: "staged" (the default until a GPU has measured cudnn) or "cudnn"
enum class Path { staged, cudnn, invalid };
inline constexpr Choice<Path> kPaths[] = {{"staged", Path::staged}, {"cudnn", Path::cudnn}};
// unset or empty: `fallback`, cudnn in a build with the cuDNN frontend's headers, else staged
inline Path path_from_env(const char* value, Path fallback) {
  return parse_choice(value, kPaths, fallback, Path::invalid);
}
inline std::string invalid_path_message(const char* value) {
  return choice_message("scaled_dot_product_attention", "REEL_CUDA_HALF_ATTENTION", kPaths, value);
}

// ---- one call, as the backend sees it (q [BH, L, E], k [BH, S, E], v [BH, S, Ev])
struct Call {
  DType q = DType::f32, k = DType::f32, v = DType::f32;
  DType out = DType::f32;  // out forward; go and gq/gk/gv backward (all must be q's)
  DType lse = DType::f32;
  int64_t BH = 0, L = 0, S = 0, E = 0, Ev = 0;
  bool mask = false;
  double dropout_p = 0;  // not a reason to refuse (above); kept for the record
  int cc_major = 0;      // the device's compute capability
  bool aligned = false;  // every pointer 16-byte aligned
};

// Why cuDNN's fused attention does not take the call ("" when it may: cuDNN's own support
// check decides last, and a graph it refuses runs staged for that shape from then on).
// Dropout is taken: cuDNN draws the mask from its own Philox generator, seeded with reel's
// seed and offset (so a seeded run repeats on this path, and the backward replays the
// forward's mask), but its bits are not those of reel's CPU and staged kernels.
inline std::string refusal(const Call& c) {
  if (!is_low_precision(c.q)) return "not f16/bf16";
  if (c.k != c.q || c.v != c.q || c.out != c.q) return "q, k, v and the outputs not of one dtype";
  if (c.lse != DType::f32) return "lse not f32";
  if (c.mask)
    return "a mask (reel's masks broadcast through per-plane offsets; cuDNN's bias input is a strided 4-d tensor)";
  if (c.BH < 1 || c.L < 1 || c.S < 1) return "an empty plane";
  if (c.E != c.Ev) return "heads of q and v that differ";
  if (c.E % 8 != 0 || c.E > 128) return "a head that is not a multiple of 8 up to 128";
  if (c.cc_major < 8) return "a GPU older than Ampere (compute capability 8)";
  if (!c.aligned) return "a pointer not 16-byte aligned";
  return "";
}

// ---- cuDNN's view of reel's planes: [b, h, s, d] with b = BH, h = 1 (the planes are
// contiguous [BH, rows, d]); the statistics (lse) [BH, 1, L, 1] in f32
struct Layout {
  std::array<int64_t, 4> dim, stride;
};
inline Layout plane_layout(int64_t BH, int64_t rows, int64_t d) {
  return {{BH, 1, rows, d}, {rows * d, rows * d, d, 1}};
}
inline Layout stats_layout(int64_t BH, int64_t L) { return {{BH, 1, L, 1}, {L, L, 1, 1}}; }

// The uids the graphs give their tensors (the variant pack's keys)
enum Uid : int64_t { kQ = 1, kK, kV, kO, kStats, kGradO, kGradQ, kGradK, kGradV, kSeed, kOffset };

// ---- a graph per device, direction, dtype, shape, causal flag, scale and dropout
struct Key {
  int device = 0;
  bool backward = false;
  DType dtype = DType::bf16;
  int64_t BH = 0, L = 0, S = 0, E = 0;
  bool causal = false;
  float scale = 1;    // cuDNN takes the scale as a float by value, baked into the graph
  float dropout = 0;  // likewise the dropout probability (seed and offset come per call)
  auto tie() const { return std::tie(device, backward, dtype, BH, L, S, E, causal, scale, dropout); }
  bool operator<(const Key& o) const { return tie() < o.tie(); }
  bool operator==(const Key& o) const { return tie() == o.tie(); }
};

// ---- cuda/attention_cudnn.cpp (built with the cuDNN frontend's headers): cuDNN's fused
// attention for a call `refusal` accepted, on c's stream. false: cuDNN refused the graph
// (GRAPH_NOT_SUPPORTED: remembered per Key, and that shape runs staged); any other failure
// is an Error naming the op.
bool cudnn_forward(Context& c, const Tensor& out, const Tensor& lse, const Tensor& q, const Tensor& k,
                   const Tensor& v, const AttentionParams& p);
bool cudnn_backward(Context& c, const Tensor& gq, const Tensor& gk, const Tensor& gv, const Tensor& go,
                    const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out, const Tensor& lse,
                    const AttentionParams& p);

}  // namespace reel::cuda::half_attention
