// Recurrent layers through cuDNN's RNN API (cudnnRNNForward, cudnnRNNBackwardData_v8,
// cudnnRNNBackwardWeights_v8): one layer, one direction per call, as the backend
// contract has it (autograd/ops_rnn.cpp composes layers, directions and lengths).
//
// Weights: cuDNN keeps all of a layer's matrices and biases in one weight space whose
// offsets cudnnGetRNNWeightParams reports per linear layer; cuDNN's gate order and its
// per-gate [H, in] row-major blocks are PyTorch's (LSTM i f g o, GRU r z n, and GRU's
// n gate with the reset applied after the hidden bias, as PyTorch), so packing is one
// device copy per gate matrix and bias, in stream order; the gradients unpack the same
// way. The reverse direction runs forward over the sequence flipped in time (cuDNN's
// unidirectional mode has no right-to-left), flipping y back (and gy, gx in backward).
// The workspace of the backend contract is cuDNN's reserve space; cuDNN's temporary
// work space comes from the allocator per call. Floor: compute (the recurrent GEMMs).
#include <cudnn.h>
#include <fmt/format.h>

#include <map>
#include <mutex>
#include <vector>

#include "internal/allocator.h"
#include "internal/backend.h"
#include "internal/decide.h"
#include "internal/graph.h"
#include "internal/rnn_algo.h"
#include "internal/rnn_handle.h"
#include "cuda.h"

namespace reel::cuda {
namespace {

constexpr const char* kOp = "rnn";

// One layer shape's descriptors, made once.
struct RnnPlan {
  cudnnRNNDescriptor_t rnn = nullptr;
  cudnnRNNDataDescriptor_t x = nullptr, y = nullptr;
  cudnnTensorDescriptor_t h = nullptr;
  cudnnTensorDescriptor_t m = nullptr, b = nullptr;  // cudnnGetRNNWeightParams's outputs
  size_t weight_bytes = 0, work_train = 0, work_infer = 0, reserve = 0;
  Tensor seq_lengths;  // i32 [B] on the device, all T
};

// cuDNN state of one device: its handle (internal/rnn_handle.h) and the plans.
struct RnnState : RnnHandle {
  std::map<std::vector<int64_t>, RnnPlan> plans;
};
RnnState& state_of(Context& ctx) { return rnn_state_of<RnnState>(ctx, kOp); }

int to_int(int64_t v, const char* what) {
  if (v > int64_t(INT32_MAX)) throw Error(fmt::format("rnn: {} = {} is over cuDNN's int limit", what, v));
  return int(v);
}

EnvSwitch<rnn_algo::Path> g_rnn_algo("REEL_CUDA_RNN_ALGO", rnn_algo::path_from_env, rnn_algo::invalid_path_message,
                                     rnn_algo::Path::invalid);

RnnPlan& plan_for(Context& ctx, RnnState& st, const RnnParams& p, DType dtype) {
  bool tf32 = dtype == DType::f32 && allow_tf32();
  const bool small_h = g_rnn_algo.get() == rnn_algo::Path::small_h &&
                       rnn_algo::small_h_serves(p.mode, p.H, dtype == DType::f32, ctx.cc_major);
  std::vector<int64_t> key{int64_t(p.mode), p.T, p.B, p.I, p.H, p.bias, int64_t(dtype), tf32, small_h};
  auto it = st.plans.find(key);
  if (it != st.plans.end()) return it->second;
  forbid_in_capture(ctx, kOp, "would create cuDNN descriptors for a layer shape not seen before; run the step once "
                              "before capturing it (the warm-up rule of cuda::Graph)");
  RnnPlan pl;
  cudnnDataType_t type = rnn_data_type(dtype);
  check_dnn(cudnnCreateRNNDescriptor(&pl.rnn), kOp, "cudnnCreateRNNDescriptor");
  // every sequence of a call is T long, so the unpacked layout holds no padding either way;
  // the small-h kernel wants padded I/O on, as PyTorch sets it for unpacked inputs
  check_dnn(cudnnSetRNNDescriptor_v8(pl.rnn, small_h ? CUDNN_RNN_ALGO_PERSIST_STATIC_SMALL_H : CUDNN_RNN_ALGO_STANDARD,
                                     rnn_cell(p.mode),
                                     p.bias ? CUDNN_RNN_DOUBLE_BIAS : CUDNN_RNN_NO_BIAS, CUDNN_UNIDIRECTIONAL,
                                     CUDNN_LINEAR_INPUT, type, type,
                                     decide::float_math(dtype == DType::f32, tf32),
                                     to_int(p.I, "input size"), to_int(p.H, "hidden size"), to_int(p.H, "hidden size"),
                                     1, st.dropout, small_h ? CUDNN_RNN_PADDED_IO_ENABLED : CUDNN_RNN_PADDED_IO_DISABLED),
            kOp, "cudnnSetRNNDescriptor_v8");
  std::vector<int> lengths(size_t(p.B), to_int(p.T, "sequence length"));
  double fill64 = 0;
  float fill32 = 0;
  void* fill = dtype == DType::f64 ? static_cast<void*>(&fill64) : static_cast<void*>(&fill32);
  check_dnn(cudnnCreateRNNDataDescriptor(&pl.x), kOp, "cudnnCreateRNNDataDescriptor");
  check_dnn(cudnnCreateRNNDataDescriptor(&pl.y), kOp, "cudnnCreateRNNDataDescriptor");
  check_dnn(cudnnSetRNNDataDescriptor(pl.x, type, CUDNN_RNN_DATA_LAYOUT_SEQ_MAJOR_UNPACKED, to_int(p.T, "steps"),
                                      to_int(p.B, "batch"), to_int(p.I, "input size"), lengths.data(), fill),
            kOp, "x data descriptor");
  check_dnn(cudnnSetRNNDataDescriptor(pl.y, type, CUDNN_RNN_DATA_LAYOUT_SEQ_MAJOR_UNPACKED, to_int(p.T, "steps"),
                                      to_int(p.B, "batch"), to_int(p.H, "hidden size"), lengths.data(), fill),
            kOp, "y data descriptor");
  int dims[3] = {1, to_int(p.B, "batch"), to_int(p.H, "hidden size")};
  int strides[3] = {dims[1] * dims[2], dims[2], 1};
  check_dnn(cudnnCreateTensorDescriptor(&pl.h), kOp, "cudnnCreateTensorDescriptor");
  check_dnn(cudnnSetTensorNdDescriptor(pl.h, type, 3, dims, strides), kOp, "h descriptor");
  check_dnn(cudnnCreateTensorDescriptor(&pl.m), kOp, "cudnnCreateTensorDescriptor");
  check_dnn(cudnnCreateTensorDescriptor(&pl.b), kOp, "cudnnCreateTensorDescriptor");
  check_dnn(cudnnGetRNNWeightSpaceSize(st.handle, pl.rnn, &pl.weight_bytes), kOp, "cudnnGetRNNWeightSpaceSize");
  check_dnn(cudnnGetRNNTempSpaceSizes(st.handle, pl.rnn, CUDNN_FWD_MODE_TRAINING, pl.x, &pl.work_train, &pl.reserve),
            kOp, "cudnnGetRNNTempSpaceSizes");
  size_t unused = 0;
  check_dnn(cudnnGetRNNTempSpaceSizes(st.handle, pl.rnn, CUDNN_FWD_MODE_INFERENCE, pl.x, &pl.work_infer, &unused),
            kOp, "cudnnGetRNNTempSpaceSizes");
  std::vector<int32_t> dev_lengths(size_t(p.B), int32_t(p.T));
  pl.seq_lengths = from_vector(dev_lengths).to(Device::cuda(ctx.device));
  return st.plans.emplace(key, std::move(pl)).first->second;
}

// Copies between our per-layer tensors and cuDNN's weight space, gate by gate:
// to_space packs (weights -> space), else unpacks (space -> gradients).
void move_weights(Context& ctx, RnnState& st, RnnPlan& pl, const RnnParams& p, void* space, const Tensor& w_ih,
                  const Tensor& w_hh, const Tensor& b_ih, const Tensor& b_hh, bool to_space) {
  const int64_t G = rnn_gates(p.mode);
  const size_t elem = dtype_size(w_ih.dtype());
  for (int64_t id = 0; id < 2 * G; ++id) {
    bool hidden = id >= G;
    int64_t g = hidden ? id - G : id, in = hidden ? p.H : p.I;
    void* m = nullptr;
    void* b = nullptr;
    check_dnn(cudnnGetRNNWeightParams(st.handle, pl.rnn, 0, pl.weight_bytes, space, int32_t(id), pl.m, &m, pl.b, &b),
              kOp, "cudnnGetRNNWeightParams");
    const Tensor& w = hidden ? w_hh : w_ih;
    char* ours = static_cast<char*>(w.data_ptr()) + size_t(g * p.H * in) * elem;
    size_t bytes = size_t(p.H * in) * elem;
    check(cudaMemcpyAsync(to_space ? m : ours, to_space ? ours : m, bytes, cudaMemcpyDeviceToDevice, ctx.stream), kOp,
          "weight copy");
    if (p.bias && b) {
      const Tensor& bias = hidden ? b_hh : b_ih;
      char* ob = static_cast<char*>(bias.data_ptr()) + size_t(g * p.H) * elem;
      check(cudaMemcpyAsync(to_space ? b : ob, to_space ? ob : b, size_t(p.H) * elem, cudaMemcpyDeviceToDevice,
                            ctx.stream),
            kOp, "bias copy");
    }
  }
}

// t [T, ...] flipped in time, as a new dense tensor
Tensor flipped(CudaBackend& be, const Tensor& t) {
  int64_t T = t.size(0);
  std::vector<int64_t> idx(static_cast<size_t>(T));
  for (int64_t i = 0; i < T; ++i) idx[size_t(i)] = T - 1 - i;
  Tensor index = from_vector(idx).to(t.device());
  Tensor out = scratch(be.ctx(), t.shape(), t.dtype());
  be.index_select(out, t, 0, index);
  return out;
}

}  // namespace

void make_rnn_handle(Context& ctx, RnnHandle& h, const char* op) {
  forbid_in_capture(ctx, op, "would create cuDNN's RNN handle (the first recurrent layer on this device); run "
                             "the step once before capturing it (the warm-up rule of cuda::Graph)");
  h.handle = create_dnn_handle(ctx, op);
  check_dnn(cudnnCreateDropoutDescriptor(&h.dropout), op, "cudnnCreateDropoutDescriptor");
  size_t bytes = 0;
  check_dnn(cudnnDropoutGetStatesSize(h.handle, &bytes), op, "cudnnDropoutGetStatesSize");
  h.dropout_states = scratch(ctx, {int64_t(bytes)}, DType::u8);
  check_dnn(cudnnSetDropoutDescriptor(h.dropout, h.handle, 0.0f, h.dropout_states.data_ptr(), bytes, 0), op,
            "cudnnSetDropoutDescriptor");
}

int64_t CudaBackend::rnn_workspace_bytes(const RnnParams& p, DType dtype) {
  Context& c = ctx();
  RnnState& st = state_of(c);
  std::lock_guard<std::mutex> lock(st.mu);
  return int64_t(plan_for(c, st, p, dtype).reserve);
}

void CudaBackend::rnn_forward(const RnnParams& p, const Tensor& y, const Tensor& hy, const Tensor& cy,
                              const Tensor& workspace, const Tensor& x, const Tensor& hx, const Tensor& cx,
                              const Tensor& w_ih, const Tensor& w_hh, const Tensor& b_ih, const Tensor& b_hh) {
  expect_here(kOp, {&y, &hy, &cy, &workspace, &x, &hx, &cx, &w_ih, &w_hh, &b_ih, &b_hh});
  Context& c = ctx();
  RnnState& st = state_of(c);
  std::lock_guard<std::mutex> lock(st.mu);
  RnnPlan& pl = plan_for(c, st, p, x.dtype());
  DeviceBuffer weights(c, pl.weight_bytes);
  move_weights(c, st, pl, p, weights.get(), w_ih, w_hh, b_ih, b_hh, true);
  Tensor xin = p.reverse ? flipped(*this, x) : x;
  Tensor yout = p.reverse ? scratch(c, y.shape(), y.dtype()) : y;
  DeviceBuffer work(c, p.training ? pl.work_train : pl.work_infer);
  bool lstm = p.mode == RnnMode::lstm;
  check_dnn(cudnnRNNForward(st.handle, pl.rnn, p.training ? CUDNN_FWD_MODE_TRAINING : CUDNN_FWD_MODE_INFERENCE,
                            static_cast<const int32_t*>(pl.seq_lengths.data_ptr()), pl.x, xin.data_ptr(), pl.y,
                            yout.data_ptr(), pl.h, hx.data_ptr(), hy.data_ptr(), pl.h,
                            lstm ? cx.data_ptr() : nullptr, lstm ? cy.data_ptr() : nullptr, pl.weight_bytes,
                            weights.get(), work.size(), work.get(), p.training ? pl.reserve : 0,
                            p.training ? workspace.data_ptr() : nullptr),
            kOp, "cudnnRNNForward");
  if (p.reverse) copy_same_device(y, flipped(*this, yout));
}

void CudaBackend::rnn_backward(const RnnParams& p, const Tensor& gx, const Tensor& ghx, const Tensor& gcx,
                               const Tensor& gw_ih, const Tensor& gw_hh, const Tensor& gb_ih, const Tensor& gb_hh,
                               const Tensor& gy, const Tensor& ghy, const Tensor& gcy, const Tensor& x,
                               const Tensor& hx, const Tensor& cx, const Tensor& w_ih, const Tensor& w_hh,
                               const Tensor& b_ih, const Tensor& b_hh, const Tensor& y, const Tensor&,
                               const Tensor&, const Tensor& workspace) {
  expect_here(kOp, {&gx, &ghx, &gcx, &gw_ih, &gw_hh, &gb_ih, &gb_hh, &gy, &ghy, &gcy, &x, &hx, &cx, &w_ih, &w_hh,
                    &b_ih, &b_hh, &y, &workspace});
  Context& c = ctx();
  RnnState& st = state_of(c);
  std::lock_guard<std::mutex> lock(st.mu);
  RnnPlan& pl = plan_for(c, st, p, x.dtype());
  DeviceBuffer weights(c, pl.weight_bytes), dweights(c, pl.weight_bytes);
  move_weights(c, st, pl, p, weights.get(), w_ih, w_hh, b_ih, b_hh, true);
  check(cudaMemsetAsync(dweights.get(), 0, pl.weight_bytes, c.stream), kOp, "cudaMemsetAsync");
  // the layer as cuDNN ran it: time-flipped for the reverse direction
  Tensor xs = p.reverse ? flipped(*this, x) : x, ys = p.reverse ? flipped(*this, y) : y,
         gys = p.reverse ? flipped(*this, gy) : gy;
  Tensor gxs = p.reverse ? scratch(c, gx.shape(), gx.dtype()) : gx;
  DeviceBuffer work(c, pl.work_train);
  bool lstm = p.mode == RnnMode::lstm;
  const int32_t* lengths = static_cast<const int32_t*>(pl.seq_lengths.data_ptr());
  check_dnn(cudnnRNNBackwardData_v8(st.handle, pl.rnn, lengths, pl.y, ys.data_ptr(), gys.data_ptr(), pl.x,
                                    gxs.data_ptr(), pl.h, hx.data_ptr(), ghy.data_ptr(), ghx.data_ptr(), pl.h,
                                    lstm ? cx.data_ptr() : nullptr, lstm ? gcy.data_ptr() : nullptr,
                                    lstm ? gcx.data_ptr() : nullptr, pl.weight_bytes, weights.get(), work.size(),
                                    work.get(), pl.reserve, workspace.data_ptr()),
            kOp, "cudnnRNNBackwardData_v8");
  check_dnn(cudnnRNNBackwardWeights_v8(st.handle, pl.rnn, CUDNN_WGRAD_MODE_ADD, lengths, pl.x, xs.data_ptr(), pl.h,
                                       hx.data_ptr(), pl.y, ys.data_ptr(), pl.weight_bytes, dweights.get(),
                                       work.size(), work.get(), pl.reserve, workspace.data_ptr()),
            kOp, "cudnnRNNBackwardWeights_v8");
  move_weights(c, st, pl, p, dweights.get(), gw_ih, gw_hh, gb_ih, gb_hh, false);
  if (p.reverse) copy_same_device(gx, flipped(*this, gxs));
}

}  // namespace reel::cuda
