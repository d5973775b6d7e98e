// The CPU backend: oneDNN primitives for the heavy NN ops (matmul, convolution,
// pooling, normalisation, softmax) and vectorised OpenMP loops for the rest, all on
// oneDNN's own OpenMP pool. Internal: users never include this.
#pragma once
#include "../tensor/backend.h"

namespace reel::cpu {

// The activations and the f32 transcendentals with vector kernels (cpu/activation.cpp):
// true when it computed out = f(x), false for an op it does not own.
bool activation_unary(UnaryOp op, const Tensor& out, const Tensor& x, double a, double b);

class CpuBackend final : public Backend {
 public:
  Device device() const override { return kCPU; }

  void* allocate(size_t nbytes) override;
  void deallocate(void* ptr, size_t nbytes) override;
  void copy(const Tensor& dst, const Tensor& src) override;
  void fill(const Tensor& out, double value) override;

  void unary(UnaryOp op, const Tensor& out, const Tensor& x, double a, double b) override;
  void unary_backward(UnaryOp op, const Tensor& out, const Tensor& g, const Tensor& x, double a, double b) override;
  void binary(BinaryOp op, const Tensor& out, const Tensor& a, const Tensor& b) override;
  void where(const Tensor& out, const Tensor& cond, const Tensor& a, const Tensor& b) override;
  void axpy(const Tensor& out, const Tensor& x, double alpha) override;
  void reduce(ReduceOp op, const Tensor& out, const Tensor& x, const std::vector<int>& dims) override;
  void fill_uniform(const Tensor& out, double low, double high, uint64_t seed, uint64_t offset) override;
  void dropout_forward(const Tensor& y, const Tensor& mask, const Tensor& x, double p, uint64_t seed,
                       uint64_t offset) override;
  bool dropout_apply(const Tensor& y, const Tensor& x, double p, uint64_t seed, uint64_t offset) override;
  void fill_normal(const Tensor& out, double mean, double std, uint64_t seed, uint64_t offset) override;

  void matmul(const Tensor& out, const Tensor& a, const Tensor& b, const Tensor& bias, bool relu) override;
  void conv2d_forward(const Tensor& out, const Tensor& x, const Tensor& w, const Tensor& bias, const ConvParams& p,
                      bool relu) override;
  void conv2d_backward_data(const Tensor& gx, const Tensor& gy, const Tensor& w, const ConvParams& p) override;
  void conv2d_backward_weight(const Tensor& gw, const Tensor& gb, const Tensor& gy, const Tensor& x,
                              const ConvParams& p) override;
  int64_t conv2d_channel_block(DType dtype) const override;
  bool channels_last(DType dtype) const override;
  bool native_products(DType dtype) const override;
  bool rnn_native_bf16() const override;
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
  void batch_norm_relu_forward(const Tensor& out, const Tensor& save_mean, const Tensor& save_invstd,
                               const std::vector<Tensor>& xs, const Tensor& weight, const Tensor& bias,
                               const Tensor& running_mean, const Tensor& running_var, bool training, double momentum,
                               double eps) override;
  void batch_norm_relu_backward(const std::vector<Tensor>& gxs, const Tensor& gw, const Tensor& gb, const Tensor& gy,
                                const std::vector<Tensor>& xs, const Tensor& y, const Tensor& weight,
                                const Tensor& save_mean, const Tensor& save_invstd, bool training) override;
  void batch_norm_relu_blocked_forward(const Tensor& out, const Tensor& save_mean, const Tensor& save_invstd,
                                       const std::vector<Tensor>& xs, const Tensor& weight, const Tensor& bias,
                                       const Tensor& running_mean, const Tensor& running_var, bool training,
                                       double momentum, double eps) override;
  void batch_norm_relu_blocked_backward(const std::vector<Tensor>& gxs, const Tensor& gw, const Tensor& gb,
                                        const Tensor& gz, const std::vector<Tensor>& xs, const Tensor& z,
                                        const Tensor& weight, const Tensor& save_mean, const Tensor& save_invstd,
                                        bool training) override;
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
  void attention_forward(const Tensor& out, const Tensor& lse, const Tensor& q, const Tensor& k, const Tensor& v,
                         const Tensor& mask, const Tensor& mask_offsets, const AttentionParams& p) override;
  void attention_backward(const Tensor& gq, const Tensor& gk, const Tensor& gv, const Tensor& go, const Tensor& q,
                          const Tensor& k, const Tensor& v, const Tensor& out, const Tensor& lse, const Tensor& mask,
                          const Tensor& mask_offsets, const AttentionParams& p) override;
  void optim_step(const OptimStep& step, const std::vector<Tensor>& params, const std::vector<Tensor>& grads,
                  const std::vector<Tensor>& state1, const std::vector<Tensor>& state2,
                  const std::vector<Tensor>& state3) override;
  bool optim_step_rounded(const OptimStep& step, const std::vector<Tensor>& params, const std::vector<Tensor>& grads,
                          const std::vector<Tensor>& state1, const std::vector<Tensor>& state2,
                          const std::vector<Tensor>& state3, const std::vector<Tensor>& rounded) override;
  void amp_unscale(const std::vector<Tensor>& grads, const Tensor& found_inf, const Tensor& inv_scale) override;
  void amp_update_scale(const Tensor& scale, const Tensor& growth_tracker, const Tensor& found_inf,
                        double growth_factor, double backoff_factor, int64_t growth_interval) override;
};

// Recurrent layers as loops of matrix products (cpu/rnn_loops.cpp): every f64 call, and
// f32 while rnn_use_loops(true) is set (tests and benchmarks compare it with oneDNN's).
void rnn_use_loops(bool on);
bool rnn_loops_on();
int64_t rnn_loops_workspace_bytes(const RnnParams& p, DType dtype);
void rnn_loops_forward(const RnnParams& p, const Tensor& y, const Tensor& hy, const Tensor& cy, const Tensor& ws,
                       const Tensor& x, const Tensor& hx, const Tensor& cx, const Tensor& w_ih, const Tensor& w_hh,
                       const Tensor& b_ih, const Tensor& b_hh);
void rnn_loops_backward(const RnnParams& p, const Tensor& gx, const Tensor& ghx, const Tensor& gcx,
                        const Tensor& gw_ih, const Tensor& gw_hh, const Tensor& gb_ih, const Tensor& gb_hh,
                        const Tensor& gy, const Tensor& ghy, const Tensor& gcy, const Tensor& x, const Tensor& hx,
                        const Tensor& cx, const Tensor& w_ih, const Tensor& w_hh, const Tensor& y,
                        const Tensor& ws);

}  // namespace reel::cpu
