// The whole-stack cuDNN RNN (cuda/rnn_stack.cpp, REEL_CUDNN_RNN=stack) as far as it needs no
// GPU: the switch, which configurations it serves and why others fall back to the per-layer
// path, where each of PyTorch's parameters lies in cuDNN's weight space, and when the packed
// weight space must be rewritten. Plain values in, plain values out, no CUDA header, so that
// reel_tests checks each rule in every build (test/test_cuda_rules.cpp).
//
// cuDNN's weight space (CUDNN_RNN_ALGO_STANDARD, documented with cudnnGetRNNWeightParams):
// pseudo-layers in order, pseudoLayer = layer D + direction (D = 2 when bidirectional); in
// each, the matrices of linLayerID 0 .. 2G-1, then their biases in the same order. IDs 0..G-1
// act on the layer's input, G..2G-1 on the recurrent state; the gates in PyTorch's order
// (RNN: 1; GRU: r z n; LSTM: i f g o), each block [H, in] row-major as PyTorch keeps it. So
// weight_ih_l{k} [G H, in] is G consecutive matrices, one contiguous run of the space, and
// so are weight_hh, bias_ih and bias_hh: packing is one copy per parameter.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "env_switch.h"

namespace reel::cuda::rnn_stack {

// ---- REEL_CUDNN_RNN: "layers" (the default: one cuDNN call per layer and direction,
// composed by autograd/ops_rnn.cpp) or "stack" (one call for every layer and direction)
enum class Path { layers, stack, invalid };
inline constexpr Choice<Path> kPaths[] = {{"layers", Path::layers}, {"stack", Path::stack}};
inline Path path_from_env(const char* value) { return parse_choice(value, kPaths, Path::layers, Path::invalid); }
inline std::string invalid_path_message(const char* value) {
  return choice_message("rnn", "REEL_CUDNN_RNN", kPaths, value);
}

// ---- what the stack serves
struct Config {
  int64_t layers = 1, directions = 1, T = 1, B = 1, I = 1, H = 1;
  bool float_type = true;  // f32 or f64 (cuDNN's float and double RNNs)
  double dropout = 0;      // between layers: the module's in training, 0 in eval
};
// "" when the stack serves c, else why it falls back to the per-layer path.
inline std::string refusal(const Config& c) {
  // cuDNN draws its dropout masks from its own generator (cudnnSetDropoutDescriptor's seed),
  // not from reel's Philox streams: a seeded run would not repeat the per-layer path's masks
  // and a resumed run would not continue them. The per-layer path applies reel's dropout.
  if (c.dropout > 0 && c.layers > 1)
    return "dropout between layers in training draws from cuDNN's generator, not reel's";
  // bf16 and f16 RNNs run on the per-layer path where a backend has them (rnn_native_bf16);
  // cuDNN's per-layer path here is float and double only, and so is the stack
  if (!c.float_type) return "only float32 and float64 inputs";
  // cuDNN's descriptors hold int sizes
  const int64_t limit = 2147483647;
  for (int64_t v : {c.T, c.B, c.I, c.H, c.layers * c.directions})
    if (v > limit) return "a size over cuDNN's int limit";
  return "";
}

// The input features of layer `layer`: the input's for the first, the previous layer's
// output (both directions concatenated) for the others.
inline int64_t layer_input_size(int64_t layer, int64_t I, int64_t directions, int64_t H) {
  return layer == 0 ? I : directions * H;
}

// ---- PyTorch's parameters in cuDNN's weight space
enum class Kind { w_ih, w_hh, b_ih, b_hh };
// "weight_ih_l1_reverse": the parameter's name in nn::RNN/GRU/LSTM (and PyTorch's)
inline std::string param_name(int64_t layer, int64_t direction, Kind kind) {
  const char* base = kind == Kind::w_ih ? "weight_ih" : kind == Kind::w_hh ? "weight_hh"
                     : kind == Kind::b_ih ? "bias_ih" : "bias_hh";
  return std::string(base) + "_l" + std::to_string(layer) + (direction == 1 ? "_reverse" : "");
}

struct Slot {
  std::string name;          // PyTorch's
  int64_t pseudo_layer = 0;  // cuDNN's: layer D + direction
  int32_t first_id = 0;      // the linLayerID of its first gate: 0 (input side) or G (recurrent)
  bool bias = false;         // cuDNN's bAddr (else mAddr)
  int64_t rows = 0, cols = 0;  // each gate's block: [H, in] for a matrix, [H] (cols 1) for a bias
  int64_t offset = 0;        // elements from the space's start to its first gate's block
  int64_t numel = 0;         // G rows cols: the whole parameter, one contiguous run
};
struct Layout {
  int64_t gates = 1;        // G: each slot's gate blocks
  std::vector<Slot> slots;  // weights' order: per layer-direction k = l D + d: w_ih, w_hh[, b_ih, b_hh]
  int64_t elements = 0;     // the whole space (cudnnGetRNNWeightSpaceSize / element size)
};
inline Layout layout(int64_t gates, int64_t layers, int64_t directions, int64_t I, int64_t H, bool bias) {
  Layout out;
  out.gates = gates;
  const int64_t G = gates;
  for (int64_t l = 0; l < layers; ++l)
    for (int64_t d = 0; d < directions; ++d) {
      const int64_t pseudo = l * directions + d, in = layer_input_size(l, I, directions, H);
      const int64_t start = out.elements;
      auto add = [&](Kind kind, int32_t first_id, bool is_bias, int64_t cols, int64_t offset) {
        out.slots.push_back({param_name(l, d, kind), pseudo, first_id, is_bias, H, cols, offset, G * H * cols});
      };
      add(Kind::w_ih, 0, false, in, start);
      add(Kind::w_hh, int32_t(G), false, H, start + G * H * in);
      const int64_t matrices = G * H * (in + H);
      if (bias) {
        add(Kind::b_ih, 0, true, 1, start + matrices);
        add(Kind::b_hh, int32_t(G), true, 1, start + matrices + G * H);
      }
      out.elements = start + matrices + (bias ? 2 * G * H : 0);
    }
  return out;
}
// Where gate `gate` of slot s starts, as cudnnGetRNNWeightParams should report it for
// (s.pseudo_layer, s.first_id + gate), in elements from the space's start.
inline int64_t gate_offset(const Slot& s, int64_t gate) { return s.offset + gate * s.rows * s.cols; }
// ---- packing by what cuDNN reports
// The layout above is what cuDNN's documentation describes; the runtime still packs by the
// offsets cudnnGetRNNWeightParams reports for every gate (once per configuration), so that a
// cuDNN which lays the space out otherwise (another order, padding) is packed right, not
// refused: one device copy a parameter where its gates lie in one run, one a gate otherwise.
// A copy of `count` elements from the parameter's element `from` to the space's element `to`
// (the gradient's unpacking runs it backwards).
struct Copy {
  int64_t from = 0, to = 0, count = 0;
};
// The copies for slot s, whose gate g cuDNN reports at reported[g] (elements from the space's
// start, -1: not placed), in a space of `space_elements`. Empty, with *why set, where a gate is
// not placed or does not fit: the stack cannot run (the caller names REEL_CUDNN_RNN=layers).
inline std::vector<Copy> gate_copies(const Slot& s, const std::vector<int64_t>& reported, int64_t space_elements,
                                     std::string* why) {
  const int64_t block = s.rows * s.cols;
  std::vector<Copy> out;
  for (size_t g = 0; g < reported.size(); ++g) {
    const int64_t at = reported[g];
    if (at < 0 || at + block > space_elements) {
      *why = "rnn: cuDNN's weight space " + std::string(at < 0 ? "has no place for " : "ends before ") + s.name +
             " gate " + std::to_string(g) + " (pseudoLayer " + std::to_string(s.pseudo_layer) + ", linLayerID " +
             std::to_string(s.first_id + int64_t(g)) + ", " + (s.bias ? "bias" : "matrix") + ", " +
             std::to_string(block) + " elements" + (at < 0 ? "" : " at element " + std::to_string(at)) + " of " +
             std::to_string(space_elements) + ")";
      return {};
    }
    const int64_t from = int64_t(g) * block;
    if (!out.empty() && out.back().from + out.back().count == from && out.back().to + out.back().count == at)
      out.back().count += block;  // the next gate right after the last: one run
    else
      out.push_back({from, at, block});
  }
  return out;
}

// ---- the packed weight space, cached: rewritten only when a weight changed
// A weight as the cache sees it: its storage (kept alive by the cache, so an address is
// never a new tensor's), its place in it, its size and the storage's version, which every
// in-place write bumps (copy_, the in-place ops, optimizer steps, load_state_dict).
struct Stamp {
  const void* storage = nullptr;
  int64_t offset = 0, numel = 0;
  uint32_t version = 0;
};
// Whether `cached` describes the same tensors as `now`: the cache entry to reuse or refresh.
inline bool same_weights(const std::vector<Stamp>& cached, const std::vector<Stamp>& now) {
  if (cached.size() != now.size()) return false;
  for (size_t i = 0; i < now.size(); ++i)
    if (cached[i].storage != now[i].storage || cached[i].offset != now[i].offset || cached[i].numel != now[i].numel)
      return false;
  return true;
}
// Whether the packed copy must be rewritten before cuDNN reads it: other tensors, any
// version moved since it was packed, or a CUDA graph replayed since (`replays`: the count
// of replays, process-wide, at packing and now): a replay's optimizer step writes the
// weights without its host code bumping their versions. A training loop packs once per
// optimizer step.
inline bool must_repack(const std::vector<Stamp>& cached, const std::vector<Stamp>& now, uint64_t cached_replays,
                        uint64_t replays) {
  if (cached.empty() || !same_weights(cached, now) || cached_replays != replays) return true;
  for (size_t i = 0; i < now.size(); ++i)
    if (cached[i].version != now[i].version) return true;
  return false;
}

}  // namespace reel::cuda::rnn_stack
