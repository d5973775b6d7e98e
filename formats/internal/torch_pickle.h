// The restricted unpickler behind torch_pt (see torch_pt.h for what it accepts).
// Internal; not part of reel.h.
#pragma once
#include <cstdint>
#include <functional>
#include <span>
#include <string>

#include "../torch_pt.h"

namespace reel::detail {

// Gives the whole storage a persistent id names, ('storage', torch.<type>, key,
// location, numel), as a 1-D CPU tensor of its dtype; throws Error when it cannot.
using StorageLoader = std::function<Tensor(const std::string& type, const std::string& key, int64_t numel)>;

// Unpickles `pickle` (data.pkl). `prefix` starts every Error. Objects referenced
// more than once (the memo) are copied into the result except tensors, which share;
// the copies, the strings and the nodes together may take at most 32 bytes per byte
// of `pickle` plus 16 MiB, and containers may nest at most torch_pt::kMaxDepth deep.
torch_pt::Value unpickle(std::span<const uint8_t> pickle, const StorageLoader& load_storage,
                         const std::string& prefix);

}  // namespace reel::detail
