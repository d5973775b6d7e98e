// The whole stack of recurrent layers in one cuDNN call (REEL_CUDNN_RNN=stack; docs/cuda.md):
// cudnnRNNForward over every layer and both directions (numLayers L, CUDNN_BIDIRECTIONAL),
// cudnnRNNBackwardData_v8 then cudnnRNNBackwardWeights_v8 (CUDNN_WGRAD_MODE_ADD into a zeroed
// space) for every gradient. x and y stay in the caller's layout (seq- or batch-major, the
// padded "unpacked" layouts, no transposes); variable lengths go to cuDNN as seqLengthArray:
// it fills y past each sequence's end with 0 and takes hy at each sequence's last step, and
// starts the reverse direction there, as PyTorch's packed sequences give.
//
// Weights: packed at the offsets cudnnGetRNNWeightParams reports for every gate (asked once
// per configuration): one device copy per parameter where its gates lie in one run, as
// cuDNN's documented layout has them (internal/rnn_stack.h), one per gate otherwise. The packed space is cached per set of weights and reused while their
// storages' versions (bumped by every in-place write: optimizer steps, copy_,
// load_state_dict) and the count of graph replays stay put: a training loop packs once per
// optimizer step (rnn_stack_packs() counts). A repack writes a fresh space, so a tape entry
// keeps the space its forward read. During a graph capture every forward packs (a replay
// must repack from its own weights) and nothing is cached.
//
// Not served, the per-layer path (rnn.cpp) runs instead: dropout between layers in
// training (cuDNN would draw the masks from its own generator, not reel's Philox streams)
// and anything but float and double (internal/rnn_stack.h, refusal). Floor: compute (the
// recurrent GEMMs); over the per-layer path it saves the per-call packing, the reverse
// direction's flips and the per-layer glue (narrow, cat, stack, index_select for lengths).
#include <cudnn.h>
#include <fmt/format.h>

#include <atomic>
#include <cstdlib>
#include <list>
#include <map>
#include <mutex>
#include <vector>

#include "internal/allocator.h"
#include "internal/backend.h"
#include "internal/decide.h"
#include "internal/env_switch.h"
#include "internal/graph.h"
#include "internal/rnn_handle.h"
#include "internal/rnn_stack.h"
#include "cuda.h"

namespace reel::cuda {
namespace {

constexpr const char* kOp = "rnn";
void check_dnn(cudnnStatus_t s, const char* what) {
  if (s != CUDNN_STATUS_SUCCESS) fail_cudnn(kOp, int(s), what);
}

std::atomic<uint64_t> g_packs{0};
EnvSwitch<rnn_stack::Path> g_path("REEL_CUDNN_RNN", rnn_stack::path_from_env, rnn_stack::invalid_path_message,
                                  rnn_stack::Path::invalid);
rnn_stack::Path chosen_path() { return g_path.get(); }

// One set of weights packed into cuDNN's weight space, and what it was packed from.
struct Packed {
  std::vector<Ref<Storage>> pins;  // the stamps' storages, kept so that no new tensor takes their address
  std::vector<rnn_stack::Stamp> stamps;
  uint64_t replays = 0;
  Tensor space;  // u8 [weight bytes]
};
constexpr size_t kPackedPerPlan = 4;  // sets of weights cached per configuration (models alive at once)

// One configuration's RNN descriptor, made once; its layout checked against cuDNN's.
struct StackPlan {
  cudnnRNNDescriptor_t rnn = nullptr;
  size_t weight_bytes = 0;
  rnn_stack::Layout layout;
  std::vector<std::vector<rnn_stack::Copy>> copies;  // per slot: where its gates go (map_layout)
  int64_t covered = 0;  // elements the copies write: fewer than the space's where cuDNN pads it
  std::map<std::pair<int64_t, int64_t>, Tensor> full_lengths;  // (T, B) -> i32 [B] of T, on the device
  std::list<Packed> packed;  // most recently used first
};

// cuDNN state of one device: its handle (internal/rnn_handle.h), the descriptors
// cudnnGetRNNWeightParams writes, the plans.
struct StackState : RnnHandle {
  cudnnTensorDescriptor_t m = nullptr, b = nullptr;
  std::map<std::vector<int64_t>, StackPlan> plans;
};
StackState& state_of(Context& ctx) { return rnn_state_of<StackState>(ctx, kOp); }

// Asks cuDNN where it puts every gate of every parameter, and turns the answers into the
// copies that pack the weights (and unpack their gradients).
void map_layout(Context& ctx, StackState& st, StackPlan& pl, size_t elem) {
  if (!st.m) check_dnn(cudnnCreateTensorDescriptor(&st.m), "cudnnCreateTensorDescriptor");
  if (!st.b) check_dnn(cudnnCreateTensorDescriptor(&st.b), "cudnnCreateTensorDescriptor");
  DeviceBuffer space(ctx, pl.weight_bytes);  // only addresses are computed from it
  const char* base = static_cast<const char*>(space.get());
  pl.copies.clear();
  for (const rnn_stack::Slot& s : pl.layout.slots) {
    std::vector<int64_t> reported;
    for (int64_t g = 0; g < pl.layout.gates; ++g) {
      void* m = nullptr;
      void* b = nullptr;
      check_dnn(cudnnGetRNNWeightParams(st.handle, pl.rnn, int32_t(s.pseudo_layer), pl.weight_bytes, space.get(),
                                        int32_t(s.first_id + g), st.m, &m, st.b, &b),
                "cudnnGetRNNWeightParams");
      const char* at = static_cast<const char*>(s.bias ? b : m);
      reported.push_back(at ? int64_t(at - base) / int64_t(elem) : -1);
    }
    std::string why;
    pl.copies.push_back(rnn_stack::gate_copies(s, reported, int64_t(pl.weight_bytes / elem), &why));
    if (!why.empty()) throw Error(why + "; run with REEL_CUDNN_RNN=layers");
    for (const rnn_stack::Copy& c : pl.copies.back()) pl.covered += c.count;
  }
}

StackPlan& plan_for(Context& ctx, StackState& st, const RnnStackParams& p, DType dtype) {
  const bool tf32 = dtype == DType::f32 && allow_tf32();
  std::vector<int64_t> key{int64_t(p.mode), p.layers, p.directions, p.I, p.H, p.bias, int64_t(dtype), tf32};
  auto it = st.plans.find(key);
  if (it != st.plans.end()) return it->second;
  forbid_in_capture(ctx, kOp, "would create cuDNN descriptors for a stack not seen before; run the step once "
                              "before capturing it (the warm-up rule of cuda::Graph)");
  StackPlan pl;
  const cudnnDataType_t type = rnn_data_type(dtype);
  check_dnn(cudnnCreateRNNDescriptor(&pl.rnn), "cudnnCreateRNNDescriptor");
  check_dnn(cudnnSetRNNDescriptor_v8(pl.rnn, CUDNN_RNN_ALGO_STANDARD, rnn_cell(p.mode),
                                     p.bias ? CUDNN_RNN_DOUBLE_BIAS : CUDNN_RNN_NO_BIAS,
                                     p.directions == 2 ? CUDNN_BIDIRECTIONAL : CUDNN_UNIDIRECTIONAL,
                                     CUDNN_LINEAR_INPUT, type, type, decide::float_math(dtype == DType::f32, tf32),
                                     int32_t(p.I), int32_t(p.H), int32_t(p.H), int32_t(p.layers), st.dropout,
                                     CUDNN_RNN_PADDED_IO_ENABLED),
            "cudnnSetRNNDescriptor_v8");
  check_dnn(cudnnGetRNNWeightSpaceSize(st.handle, pl.rnn, &pl.weight_bytes), "cudnnGetRNNWeightSpaceSize");
  pl.layout = rnn_stack::layout(rnn_gates(p.mode), p.layers, p.directions, p.I, p.H, p.bias);
  map_layout(ctx, st, pl, dtype_size(dtype));
  return st.plans.emplace(key, std::move(pl)).first->second;
}

// seqLengthArray: every sequence T steps, or the caller's lengths
std::vector<int> host_lengths(const RnnStackParams& p, const Tensor& lengths) {
  if (!lengths.defined()) return std::vector<int>(size_t(p.B), int(p.T));
  std::vector<int32_t> l = lengths.to_vector<int32_t>();
  return std::vector<int>(l.begin(), l.end());
}

// One call's data descriptors (x, y: its steps, batch and lengths; h, c: [L D, B, H]) and
// the temporary sizes cuDNN wants for them.
struct CallDescs {
  cudnnRNNDataDescriptor_t x = nullptr, y = nullptr;
  cudnnTensorDescriptor_t h = nullptr;
  size_t work = 0, reserve = 0;
  CallDescs(StackState& st, const StackPlan& pl, const RnnStackParams& p, DType dtype, const Tensor& lengths,
            bool training) {
    const std::vector<int> len = host_lengths(p, lengths);
    const cudnnDataType_t type = rnn_data_type(dtype);
    const cudnnRNNDataLayout_t layout =
        p.batch_first ? CUDNN_RNN_DATA_LAYOUT_BATCH_MAJOR_UNPACKED : CUDNN_RNN_DATA_LAYOUT_SEQ_MAJOR_UNPACKED;
    double fill64 = 0;
    float fill32 = 0;
    void* fill = dtype == DType::f64 ? static_cast<void*>(&fill64) : static_cast<void*>(&fill32);
    try {
      make(st, pl, p, type, layout, len, fill, training);
    } catch (...) {
      release();  // a constructor that throws runs no destructor
      throw;
    }
  }
  ~CallDescs() { release(); }
  CallDescs(const CallDescs&) = delete;
  CallDescs& operator=(const CallDescs&) = delete;

 private:
  void make(StackState& st, const StackPlan& pl, const RnnStackParams& p, cudnnDataType_t type,
            cudnnRNNDataLayout_t layout, const std::vector<int>& len, void* fill, bool training) {
    check_dnn(cudnnCreateRNNDataDescriptor(&x), "cudnnCreateRNNDataDescriptor");
    check_dnn(cudnnCreateRNNDataDescriptor(&y), "cudnnCreateRNNDataDescriptor");
    check_dnn(cudnnCreateTensorDescriptor(&h), "cudnnCreateTensorDescriptor");
    check_dnn(cudnnSetRNNDataDescriptor(x, type, layout, int(p.T), int(p.B), int(p.I), len.data(), fill),
              "x data descriptor");
    check_dnn(cudnnSetRNNDataDescriptor(y, type, layout, int(p.T), int(p.B), int(p.directions * p.H), len.data(),
                                        fill),
              "y data descriptor");
    int dims[3] = {int(p.layers * p.directions), int(p.B), int(p.H)};
    int strides[3] = {dims[1] * dims[2], dims[2], 1};
    check_dnn(cudnnSetTensorNdDescriptor(h, type, 3, dims, strides), "h descriptor");
    const cudnnForwardMode_t mode = training ? CUDNN_FWD_MODE_TRAINING : CUDNN_FWD_MODE_INFERENCE;
    check_dnn(cudnnGetRNNTempSpaceSizes(st.handle, pl.rnn, mode, x, &work, &reserve), "cudnnGetRNNTempSpaceSizes");
  }
  void release() noexcept {
    if (x) cudnnDestroyRNNDataDescriptor(x);
    if (y) cudnnDestroyRNNDataDescriptor(y);
    if (h) cudnnDestroyTensorDescriptor(h);
    x = y = nullptr, h = nullptr;
  }
};


// cuDNN's devSeqLengths: i32 [B] on the device; every sequence T long: made once per (T, B).
Tensor device_lengths(Context& ctx, StackPlan& pl, const RnnStackParams& p, const Tensor& lengths) {
  if (lengths.defined()) {
    forbid_in_capture(ctx, kOp, "would copy this batch's sequence lengths to the device (variable lengths)");
    return lengths.to(Device::cuda(ctx.device));
  }
  Tensor& t = pl.full_lengths[{p.T, p.B}];
  if (!t.defined()) {
    forbid_in_capture(ctx, kOp, "would copy the sequence lengths of a (steps, batch) not seen before to the device");
    t = from_vector(std::vector<int32_t>(size_t(p.B), int32_t(p.T))).to(Device::cuda(ctx.device));
  }
  return t;
}

// The weights in cuDNN's weight space: the cached space while must_repack says it still
// holds them, else a fresh one with one device copy per parameter.
Tensor packed_weights(Context& ctx, StackPlan& pl, const std::vector<Tensor>& w) {
  const std::vector<rnn_stack::Slot>& slots = pl.layout.slots;
  if (w.size() != slots.size())
    throw Error(fmt::format("rnn: expected {} weight tensors for the stack, got {}", slots.size(), w.size()));
  std::vector<rnn_stack::Stamp> now;
  for (size_t i = 0; i < w.size(); ++i) {
    if (w[i].numel() != slots[i].numel)
      throw Error(fmt::format("rnn: expected {} of {} elements, got {}", slots[i].name, slots[i].numel,
                              w[i].shape().str()));
    now.push_back({w[i].storage().get(), w[i].offset(), w[i].numel(), w[i].storage()->version()});
  }
  const uint64_t replays = graph_replay_count();
  const bool capturing = stream_capturing(ctx);
  auto hit = pl.packed.begin();
  while (hit != pl.packed.end() && !rnn_stack::same_weights(hit->stamps, now)) ++hit;
  if (!capturing && hit != pl.packed.end() && !rnn_stack::must_repack(hit->stamps, now, hit->replays, replays)) {
    pl.packed.splice(pl.packed.begin(), pl.packed, hit);
    return hit->space;
  }
  Tensor space = scratch(ctx, {int64_t(pl.weight_bytes)}, DType::u8);
  const size_t elem = dtype_size(w[0].dtype());
  char* base = static_cast<char*>(space.data_ptr());
  if (size_t(pl.covered) * elem < pl.weight_bytes)  // padding cuDNN may read: defined, not stale
    check(cudaMemsetAsync(base, 0, pl.weight_bytes, ctx.stream), kOp, "cudaMemsetAsync");
  for (size_t i = 0; i < w.size(); ++i)
    for (const rnn_stack::Copy& c : pl.copies[i])
      check(cudaMemcpyAsync(base + size_t(c.to) * elem, static_cast<const char*>(w[i].data_ptr()) + size_t(c.from) * elem,
                            size_t(c.count) * elem, cudaMemcpyDeviceToDevice, ctx.stream),
            kOp, "weight packing copy");
  g_packs.fetch_add(1, std::memory_order_relaxed);
  if (capturing) return space;
  Packed entry{{}, now, replays, space};
  for (const Tensor& t : w) entry.pins.push_back(t.storage());
  if (hit != pl.packed.end()) pl.packed.erase(hit);
  pl.packed.push_front(std::move(entry));
  if (pl.packed.size() > kPackedPerPlan) pl.packed.pop_back();
  return space;
}

}  // namespace

// REEL_CUDNN_RNN=stack and a configuration it serves (rnn_stack::refusal); an invalid
// REEL_CUDNN_RNN is an Error here, at the first recurrent call on a GPU
bool CudaBackend::rnn_stack_serves(const RnnStackParams& p, DType dtype) {
  if (chosen_path() != rnn_stack::Path::stack) return false;
  const rnn_stack::Config cfg{.layers = p.layers, .directions = p.directions, .T = p.T, .B = p.B, .I = p.I,
                              .H = p.H, .float_type = dtype == DType::f32 || dtype == DType::f64,
                              .dropout = p.dropout};
  return rnn_stack::refusal(cfg).empty();
}

bool CudaBackend::rnn_stack_forward(const RnnStackParams& p, const Tensor& y, const Tensor& hy, const Tensor& cy,
                                    RnnStackState& state, const Tensor& x, const Tensor& hx, const Tensor& cx,
                                    const std::vector<Tensor>& weights, const Tensor& lengths) {
  if (!rnn_stack_serves(p, x.dtype())) return false;
  expect_here(kOp, {&y, &hy, &cy, &x, &hx, &cx});
  for (const Tensor& w : weights) expect_here(kOp, {&w});
  Context& c = ctx();
  StackState& st = state_of(c);
  std::lock_guard<std::mutex> lock(st.mu);
  StackPlan& pl = plan_for(c, st, p, x.dtype());
  CallDescs d(st, pl, p, x.dtype(), lengths, p.training);
  Tensor dev_len = device_lengths(c, pl, p, lengths), space = packed_weights(c, pl, weights);
  DeviceBuffer work(c, d.work);
  Tensor reserve = p.training ? scratch(c, {int64_t(d.reserve)}, DType::u8) : Tensor();
  const bool lstm = p.mode == RnnMode::lstm;
  // y, hy, cy of every layer and direction: T B G H (in + H) multiply-adds per layer-direction
  check_dnn(cudnnRNNForward(st.handle, pl.rnn, p.training ? CUDNN_FWD_MODE_TRAINING : CUDNN_FWD_MODE_INFERENCE,
                            static_cast<const int32_t*>(dev_len.data_ptr()), d.x, x.data_ptr(), d.y, y.data_ptr(),
                            d.h, hx.data_ptr(), hy.data_ptr(), d.h, lstm ? cx.data_ptr() : nullptr,
                            lstm ? cy.data_ptr() : nullptr, pl.weight_bytes, space.data_ptr(), work.size(),
                            work.get(), p.training ? d.reserve : 0, p.training ? reserve.data_ptr() : nullptr),
            "cudnnRNNForward");
  if (p.training) state = RnnStackState{reserve, space, dev_len};
  return true;
}

bool CudaBackend::rnn_stack_backward(const RnnStackParams& p, const Tensor& gx, const Tensor& ghx, const Tensor& gcx,
                                     const std::vector<Tensor>& gweights, const Tensor& gy, const Tensor& ghy,
                                     const Tensor& gcy, const Tensor& x, const Tensor& hx, const Tensor& cx,
                                     const Tensor& y, const Tensor& lengths, const RnnStackState& state) {
  if (!state.workspace.defined() || !state.weights.defined() || !state.lengths.defined()) return false;
  expect_here(kOp, {&gx, &ghx, &gcx, &gy, &ghy, &gcy, &x, &hx, &cx, &y, &state.workspace, &state.weights});
  for (const Tensor& g : gweights) expect_here(kOp, {&g});
  Context& c = ctx();
  StackState& st = state_of(c);
  std::lock_guard<std::mutex> lock(st.mu);
  StackPlan& pl = plan_for(c, st, p, x.dtype());
  CallDescs d(st, pl, p, x.dtype(), lengths, true);
  if (int64_t(d.reserve) != state.workspace.numel())
    throw Error(fmt::format("rnn: the stack's backward expected cuDNN's reserve space of {} bytes, the forward left {}",
                            d.reserve, state.workspace.numel()));
  DeviceBuffer dweights(c, pl.weight_bytes), work(c, d.work);
  check(cudaMemsetAsync(dweights.get(), 0, pl.weight_bytes, c.stream), kOp, "cudaMemsetAsync");
  // past each sequence's end x reached nothing: its gradient there is 0, whatever cuDNN leaves
  const size_t elem = dtype_size(x.dtype());
  if (lengths.defined())
    check(cudaMemsetAsync(gx.data_ptr(), 0, size_t(gx.numel()) * elem, c.stream), kOp, "cudaMemsetAsync");
  const bool lstm = p.mode == RnnMode::lstm;
  const int32_t* dev_len = static_cast<const int32_t*>(state.lengths.data_ptr());
  // gx, ghx, gcx through every layer and direction: the forward's GEMMs transposed
  check_dnn(cudnnRNNBackwardData_v8(st.handle, pl.rnn, dev_len, d.y, y.data_ptr(), gy.data_ptr(), d.x,
                                    gx.data_ptr(), d.h, hx.data_ptr(), ghy.data_ptr(), ghx.data_ptr(), d.h,
                                    lstm ? cx.data_ptr() : nullptr, lstm ? gcy.data_ptr() : nullptr,
                                    lstm ? gcx.data_ptr() : nullptr, pl.weight_bytes, state.weights.data_ptr(),
                                    work.size(), work.get(), d.reserve, state.workspace.data_ptr()),
            "cudnnRNNBackwardData_v8");
  // every weight's gradient, added into the zeroed space: T B G H (in + H) multiply-adds per layer-direction
  check_dnn(cudnnRNNBackwardWeights_v8(st.handle, pl.rnn, CUDNN_WGRAD_MODE_ADD, dev_len, d.x, x.data_ptr(), d.h,
                                       hx.data_ptr(), d.y, y.data_ptr(), pl.weight_bytes, dweights.get(),
                                       work.size(), work.get(), d.reserve, state.workspace.data_ptr()),
            "cudnnRNNBackwardWeights_v8");
  const std::vector<rnn_stack::Slot>& slots = pl.layout.slots;
  if (gweights.size() != slots.size())
    throw Error(fmt::format("rnn: expected {} weight gradients for the stack, got {}", slots.size(), gweights.size()));
  for (size_t i = 0; i < slots.size(); ++i)
    for (const rnn_stack::Copy& k : pl.copies[i])
      check(cudaMemcpyAsync(static_cast<char*>(gweights[i].data_ptr()) + size_t(k.from) * elem,
                            dweights.as<char>() + size_t(k.to) * elem, size_t(k.count) * elem,
                            cudaMemcpyDeviceToDevice, c.stream),
            kOp, "weight gradient copy");
  return true;
}

void set_cudnn_rnn(CudnnRnn path) {
  g_path.set(path == CudnnRnn::stack ? rnn_stack::Path::stack : rnn_stack::Path::layers);
}
CudnnRnn cudnn_rnn() { return chosen_path() == rnn_stack::Path::stack ? CudnnRnn::stack : CudnnRnn::layers; }
uint64_t rnn_stack_packs() { return g_packs.load(std::memory_order_relaxed); }

}  // namespace reel::cuda
