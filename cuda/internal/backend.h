// The CUDA backend: one instance per device, every method of the Backend contract
// (tensor/backend.h) queued on the device's one compute stream. Internal to cuda/.
//
// Where each method lives:
//   backend.cpp      memory, copies between devices and the host, synchronize, registration
//   copy.cu          same-device copy with dtype conversion, fill, where, axpy
//   unary.cu         unary ops;  binary.cu: binary ops (elementwise.cuh: the loops)
//   activation.cu    the activations' gradients (unary_backward)
//   reduce.cu        reductions (CUB for whole-tensor ones, split segmented kernels otherwise)
//   random.cu        Philox uniform/normal fills, the same numbers as the CPU
//   matmul.cpp       cuBLASLt with bias/ReLU epilogues
//   conv.cpp         cuDNN convolution with cached algorithm search; GEMM lowering
//   pool.cu          max/avg/adaptive-avg pooling
//   norm.cu          batch norm and layer norm
//   softmax.cu       softmax, log-softmax, fused softmax cross-entropy
//   index.cu         index_select, index_add, gather, scatter_add, scatter
//   sort.cu          sort (CUB segmented radix sort), cumulative (running sums and products)
//   optim.cu         the fused multi-tensor optimizer step; GradScaler's unscale and scale update
//   rnn.cpp          recurrent layers, one cuDNN call per layer and direction
//   rnn_stack.cpp    the whole stack in one cuDNN call (REEL_CUDNN_RNN=stack)
//   attention.cu     scaled dot-product attention, online softmax (forward and backward)
#pragma once
#include <initializer_list>

#include "context.h"

namespace reel::cuda {

class CudaBackend final : public Backend {
 public:
  explicit CudaBackend(int device) : device_(Device::cuda(device)) {}
  Device device() const override { return device_; }

  void* allocate(size_t nbytes) override;
  void deallocate(void* ptr, size_t nbytes) override;
  void copy(const Tensor& dst, const Tensor& src) override;
  void fill(const Tensor& out, double value) override;
  void synchronize() override;

  void unary(UnaryOp op, const Tensor& out, const Tensor& x, double a, double b) override;
  void unary_backward(UnaryOp op, const Tensor& out, const Tensor& g, const Tensor& x, double a, double b) override;
  void binary(BinaryOp op, const Tensor& out, const Tensor& a, const Tensor& b) override;
  void where(const Tensor& out, const Tensor& cond, const Tensor& a, const Tensor& b) override;
  void axpy(const Tensor& out, const Tensor& x, double alpha) override;
  void reduce(ReduceOp op, const Tensor& out, const Tensor& x, const std::vector<int>& dims) override;
  void fill_uniform(const Tensor& out, double low, double high, uint64_t seed, uint64_t offset) override;
  void fill_normal(const Tensor& out, double mean, double std, uint64_t seed, uint64_t offset) override;

  void matmul(const Tensor& out, const Tensor& a, const Tensor& b, const Tensor& bias, bool relu) override;
  void conv2d_forward(const Tensor& out, const Tensor& x, const Tensor& w, const Tensor& bias, const ConvParams& p,
                      bool relu) override;
  void conv2d_backward_data(const Tensor& gx, const Tensor& gy, const Tensor& w, const ConvParams& p) override;
  void conv2d_backward_weight(const Tensor& gw, const Tensor& gb, const Tensor& gy, const Tensor& x,
                              const ConvParams& p) override;
  // f16/bf16 under REEL_CUDA_CHANNELS_LAST=on (conv.cpp, internal/channels_last.h)
  bool channels_last(DType dtype) const override;
  // and, with REEL_CUDA_HALF_NORM=cudnn, row-major halves' batch norms mixed too (norm_cudnn.cpp)
  bool mixed_batch_norm(DType dtype, bool x_channels_last) const override;
  void max_pool2d_forward(const Tensor& out, const Tensor& indices, const Tensor& x, const PoolParams& p) override;
  void max_pool2d_backward(const Tensor& gx, const Tensor& gy, const Tensor& indices, const PoolParams& p) override;
  void avg_pool2d_forward(const Tensor& out, const Tensor& x, const PoolParams& p) override;
  void avg_pool2d_backward(const Tensor& gx, const Tensor& gy, const PoolParams& p) override;
  void adaptive_avg_pool2d_forward(const Tensor& out, const Tensor& x) override;
  void adaptive_avg_pool2d_backward(const Tensor& gx, const Tensor& gy) override;
  void batch_norm_forward(const Tensor& out, const Tensor& save_mean, const Tensor& save_invstd, const Tensor& x,
                          const Tensor& weight, const Tensor& bias, const Tensor& running_mean,
                          const Tensor& running_var, bool training, double momentum, double eps) override;
  void batch_norm_backward(const Tensor& gx, const Tensor& gw, const Tensor& gb, const Tensor& gy, const Tensor& x,
                           const Tensor& weight, const Tensor& save_mean, const Tensor& save_invstd,
                           bool training) override;
  // REEL_CUDA_BN_RELU=fused: norm.cu's fused kernels (internal/bn_relu.h); else Backend's composed path
  void batch_norm_relu_forward(const Tensor& out, const Tensor& save_mean, const Tensor& save_invstd,
                               const std::vector<Tensor>& xs, const Tensor& weight, const Tensor& bias,
                               const Tensor& running_mean, const Tensor& running_var, bool training, double momentum,
                               double eps) override;
  void batch_norm_relu_backward(const std::vector<Tensor>& gxs, const Tensor& gw, const Tensor& gb, const Tensor& gy,
                                const std::vector<Tensor>& xs, const Tensor& y, const Tensor& weight,
                                const Tensor& save_mean, const Tensor& save_invstd, bool training) override;
  void layer_norm_forward(const Tensor& out, const Tensor& save_mean, const Tensor& save_invstd, const Tensor& x,
                          const Tensor& weight, const Tensor& bias, double eps) override;
  void layer_norm_backward(const Tensor& gx, const Tensor& gw, const Tensor& gb, const Tensor& gy, const Tensor& x,
                           const Tensor& weight, const Tensor& save_mean, const Tensor& save_invstd) override;
  void softmax_forward(const Tensor& out, const Tensor& x, int dim, bool log) override;
  void softmax_backward(const Tensor& gx, const Tensor& gy, const Tensor& y, int dim, bool log) override;
  void cross_entropy_forward(const Tensor& losses, const Tensor& lse, const Tensor& logits, const Tensor& labels,
                             double label_smoothing, int64_t ignore_index) override;
  void cross_entropy_backward(const Tensor& glogits, const Tensor& glosses, const Tensor& logits, const Tensor& lse,
                              const Tensor& labels, double label_smoothing, int64_t ignore_index) override;
  void index_select(const Tensor& out, const Tensor& x, int dim, const Tensor& index) override;
  void index_add(const Tensor& out, int dim, const Tensor& index, const Tensor& src) override;
  void gather(const Tensor& out, const Tensor& x, int dim, const Tensor& index) override;
  void scatter_add(const Tensor& out, int dim, const Tensor& index, const Tensor& src) override;
  void sort(const Tensor& values, const Tensor& indices, const Tensor& x, bool descending) override;
  void cumulative(ScanOp op, const Tensor& out, const Tensor& x, int dim, bool reverse) override;
  void scatter(const Tensor& out, int dim, const Tensor& index, const Tensor& src) override;
  int64_t rnn_workspace_bytes(const RnnParams& p, DType dtype) override;
  void rnn_forward(const RnnParams& p, const Tensor& y, const Tensor& hy, const Tensor& cy, const Tensor& workspace,
                   const Tensor& x, const Tensor& hx, const Tensor& cx, const Tensor& w_ih, const Tensor& w_hh,
                   const Tensor& b_ih, const Tensor& b_hh) override;
  void rnn_backward(const RnnParams& p, const Tensor& gx, const Tensor& ghx, const Tensor& gcx, const Tensor& gw_ih,
                    const Tensor& gw_hh, const Tensor& gb_ih, const Tensor& gb_hh, const Tensor& gy,
                    const Tensor& ghy, const Tensor& gcy, const Tensor& x, const Tensor& hx, const Tensor& cx,
                    const Tensor& w_ih, const Tensor& w_hh, const Tensor& b_ih, const Tensor& b_hh,
                    const Tensor& y, const Tensor& hy, const Tensor& cy, const Tensor& workspace) override;
  bool rnn_stack_serves(const RnnStackParams& p, DType dtype) override;
  bool rnn_stack_forward(const RnnStackParams& p, const Tensor& y, const Tensor& hy, const Tensor& cy,
                         RnnStackState& state, const Tensor& x, const Tensor& hx, const Tensor& cx,
                         const std::vector<Tensor>& weights, const Tensor& lengths) override;
  bool rnn_stack_backward(const RnnStackParams& p, const Tensor& gx, const Tensor& ghx, const Tensor& gcx,
                          const std::vector<Tensor>& gweights, const Tensor& gy, const Tensor& ghy, const Tensor& gcy,
                          const Tensor& x, const Tensor& hx, const Tensor& cx, const Tensor& y, const Tensor& lengths,
                          const RnnStackState& state) override;
  void attention_forward(const Tensor& out, const Tensor& lse, const Tensor& q, const Tensor& k, const Tensor& v,
                         const Tensor& mask, const Tensor& mask_offsets, const AttentionParams& p) override;
  void attention_backward(const Tensor& gq, const Tensor& gk, const Tensor& gv, const Tensor& go, const Tensor& q,
                          const Tensor& k, const Tensor& v, const Tensor& out, const Tensor& lse, const Tensor& mask,
                          const Tensor& mask_offsets, const AttentionParams& p) override;
  void optim_step(const OptimStep& step, const std::vector<Tensor>& params, const std::vector<Tensor>& grads,
                  const std::vector<Tensor>& state1, const std::vector<Tensor>& state2,
                  const std::vector<Tensor>& state3) override;
  void amp_unscale(const std::vector<Tensor>& grads, const Tensor& found_inf, const Tensor& inv_scale) override;
  void amp_update_scale(const Tensor& scale, const Tensor& growth_tracker, const Tensor& found_inf,
                        double growth_factor, double backoff_factor, int64_t growth_interval) override;

  // dst = src on this device, any strides, converting dtype (copy.cu).
  void copy_same_device(const Tensor& dst, const Tensor& src);
  // This device's context, made current.
  Context& ctx() const { return context(device_.index); }
  // Throws Error naming `op` and both devices when a defined tensor lives elsewhere.
  void expect_here(const char* op, std::initializer_list<const Tensor*> ts) const;

 private:
  Device device_;
};

// The backend of a CUDA tensor's device.
CudaBackend& backend_of(const Tensor& t);
// low_precision.cpp: the registered backend of a device (CudaBackend behind the f16/bf16
// layer), and the CudaBackend inside it
Backend* make_backend(int device);
CudaBackend& inner_backend(Backend& be);

// ---- small tensor helpers for the backend's own scratch tensors and views
// A new contiguous tensor on ctx's device.
Tensor scratch(Context& ctx, const Dims& shape, DType dtype);
// A view of t's storage with other geometry.
Tensor view_of(const Tensor& t, const Dims& shape, const Dims& strides, int64_t offset);
// t itself when contiguous, else a contiguous copy on the same device.
Tensor contiguous_copy(const Tensor& t);

}  // namespace reel::cuda
