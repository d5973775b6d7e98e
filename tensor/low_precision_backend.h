// f16 and bf16 as compute dtypes on a backend that computes in f32: the registered
// backend of a device is LowPrecisionBackend<ItsBackend>. A call whose tensors are all
// f32/f64/integer goes straight to the inner backend; one that touches f16/bf16 tensors
// runs the inner backend's f32 kernel on f32 twins of them and writes the outputs back
// rounded once. What the inner backend computes in low precision itself is its choice:
// native_product (matmul and convolution: oneDNN's bf16 kernels, cuBLASLt and cuDNN),
// native_unary/native_binary (hand-written bf16 elementwise kernels), copies, fills and
// the GradScaler's kernels.
#pragma once
#include <deque>
#include <span>
#include <utility>
#include <vector>

#include "backend.h"
#include "tensor.h"

namespace reel {
namespace low_precision {

inline bool low(const Tensor& t) { return t.defined() && is_low_precision(t.dtype()); }

template <typename... T>
bool any_low(const T&... t) {
  return (low(t) || ...);
}
inline bool any_low(const std::vector<Tensor>& ts) {
  for (const Tensor& t : ts)
    if (low(t)) return true;
  return false;
}

// How a Stage lays out its twins. `contiguous`: row-major, what every kernel takes.
// `as_source`: a twin of a tensor that is dense in another order than row-major (NHWC
// activations: the channels-last halves of autocast) has that tensor's strides, so that
// making it and writing it back are flat conversions instead of transposes each way; for
// the elementwise kernels alone, which walk any strides in the output's memory order.
enum class Twins { contiguous, as_source };

// The f32 twins of one call's f16/bf16 tensors; finish() rounds the written ones back.
class Stage {
 public:
  explicit Stage(Backend& inner, Twins twins = Twins::contiguous) : inner_(inner), twins_(twins) {}
  // a read-only argument
  Tensor in(const Tensor& t) {
    if (!low(t)) return t;
    Tensor c = twin(t);
    if (c.numel()) inner_.copy(c, t);
    return c;
  }
  // a written argument (read too when `read`: in-place updates)
  Tensor out(const Tensor& t, bool read = false) {
    if (!low(t)) return t;
    Tensor c = read ? in(t) : twin(t);
    back_.push_back({t, c});
    return c;
  }
  std::vector<Tensor> in(const std::vector<Tensor>& ts) {
    std::vector<Tensor> r;
    for (const Tensor& t : ts) r.push_back(in(t));
    return r;
  }
  std::vector<Tensor> out(const std::vector<Tensor>& ts, bool read) {
    std::vector<Tensor> r;
    for (const Tensor& t : ts) r.push_back(out(t, read));
    return r;
  }
  // a read-only argument whose strides the kernel is told separately (attention's mask
  // offsets): the f32 twin keeps them, over a converted copy of the whole storage
  Tensor in_same_layout(const Tensor& t) {
    if (!low(t)) return t;
    int64_t n = int64_t(t.storage()->nbytes() / dtype_size(t.dtype()));
    Tensor all = storage_view(t, {n}, {1}, 0), c = empty({n}, {.dtype = DType::f32, .device = t.device()});
    if (n) inner_.copy(c, all);
    return storage_view(c, t.shape(), t.strides(), t.offset());
  }
  // a written argument computed in `dtype` (a product the inner backend writes only in
  // its operands' dtype), converted into t by finish()
  Tensor out_as(const Tensor& t, DType dtype) {
    if (!t.defined() || t.dtype() == dtype) return t;
    Tensor c = empty(t.shape(), {.dtype = dtype, .device = t.device()});
    back_.push_back({t, c});
    return c;
  }
  void finish() {
    for (auto& [dst, src] : back_)
      if (dst.numel()) inner_.copy(dst, src);
  }

 private:
  Tensor twin(const Tensor& t) const {
    if (twins_ == Twins::as_source && !t.is_contiguous() && dense_strides(t.shape(), t.strides())) {
      Tensor flat = empty({t.numel()}, {.dtype = DType::f32, .device = t.device()});
      return storage_view(flat, t.shape(), t.strides(), 0);
    }
    return empty(t.shape(), {.dtype = DType::f32, .device = t.device()});
  }
  Backend& inner_;
  Twins twins_;
  std::deque<std::pair<Tensor, Tensor>> back_;
};

}  // namespace low_precision

template <class Inner>
class LowPrecisionBackend : public Backend {
  using Stage = low_precision::Stage;
 public:
  template <typename... A>
  explicit LowPrecisionBackend(A&&... args) : k(std::forward<A>(args)...) {}
  Inner& inner() { return k; }
  Device device() const override { return k.device(); }
  void synchronize() override { k.synchronize(); }
  void* allocate(size_t nbytes) override { return k.allocate(nbytes); }
  void deallocate(void* ptr, size_t nbytes) override { k.deallocate(ptr, nbytes); }
  void copy(const Tensor& dst, const Tensor& src) override { k.copy(dst, src); }
  void fill(const Tensor& out, double value) override { k.fill(out, value); }

  void unary(UnaryOp op, const Tensor& out, const Tensor& x, double a, double b) override {
    if (!low_precision::any_low(out, x)) return k.unary(op, out, x, a, b);
    if (native_unary(op, out, x, a, b)) return;
    Stage s(k, low_precision::Twins::as_source);
    k.unary(op, s.out(out), s.in(x), a, b);
    s.finish();
  }
  void unary_backward(UnaryOp op, const Tensor& out, const Tensor& g, const Tensor& x, double a,
                      double b) override {
    if (!low_precision::any_low(out, g, x)) return k.unary_backward(op, out, g, x, a, b);
    Stage s(k, low_precision::Twins::as_source);
    k.unary_backward(op, s.out(out), s.in(g), s.in(x), a, b);
    s.finish();
  }
  void binary(BinaryOp op, const Tensor& out, const Tensor& a, const Tensor& b) override {
    if (!low_precision::any_low(out, a, b)) return k.binary(op, out, a, b);
    if (native_binary(op, out, a, b)) return;
    Stage s(k, low_precision::Twins::as_source);
    k.binary(op, s.out(out), s.in(a), s.in(b));
    s.finish();
  }
  void where(const Tensor& out, const Tensor& cond, const Tensor& a, const Tensor& b) override {
    if (!low_precision::any_low(out, a, b)) return k.where(out, cond, a, b);
    Stage s(k, low_precision::Twins::as_source);
    k.where(s.out(out), cond, s.in(a), s.in(b));
    s.finish();
  }
  void axpy(const Tensor& out, const Tensor& x, double alpha) override {
    if (!low_precision::any_low(out, x)) return k.axpy(out, x, alpha);
    Stage s(k, low_precision::Twins::as_source);
    k.axpy(s.out(out, true), s.in(x), alpha);
    s.finish();
  }
  void reduce(ReduceOp op, const Tensor& out, const Tensor& x, const std::vector<int>& dims) override {
    if (!low_precision::any_low(out, x)) return k.reduce(op, out, x, dims);
    Stage s(k);
    k.reduce(op, s.out(out), s.in(x), dims);
    s.finish();
  }
  void fill_uniform(const Tensor& out, double low_, double high, uint64_t seed, uint64_t offset) override {
    if (!low_precision::any_low(out)) return k.fill_uniform(out, low_, high, seed, offset);
    Stage s(k);
    k.fill_uniform(s.out(out), low_, high, seed, offset);
    s.finish();
  }
  // f16/bf16 x: the inner backend's one-pass kernel where it has one for that dtype, else
  // composed on this layer's kernels (staged)
  void dropout_forward(const Tensor& y, const Tensor& mask, const Tensor& x, double p, uint64_t seed,
                       uint64_t offset) override {
    if (!low_precision::any_low(y, mask, x)) return k.dropout_forward(y, mask, x, p, seed, offset);
    if (native_dropout_forward(y, mask, x, p, seed, offset)) return;
    Backend::dropout_forward(y, mask, x, p, seed, offset);
  }
  bool dropout_apply(const Tensor& y, const Tensor& x, double p, uint64_t seed, uint64_t offset) override {
    if (!low_precision::any_low(y, x)) return k.dropout_apply(y, x, p, seed, offset);
    return native_dropout_forward(y, Tensor(), x, p, seed, offset);
  }
  void fill_normal(const Tensor& out, double mean, double std, uint64_t seed, uint64_t offset) override {
    if (!low_precision::any_low(out)) return k.fill_normal(out, mean, std, seed, offset);
    Stage s(k);
    k.fill_normal(s.out(out), mean, std, seed, offset);
    s.finish();
  }
  // products run in low precision where the inner backend has kernels for the mix of
  // dtypes (native_product), else in f32 on twins
  void matmul(const Tensor& out, const Tensor& a, const Tensor& b, const Tensor& bias, bool relu) override {
    if (!low_precision::any_low(out, a, b, bias) || native_product(out, a, b, bias)) return k.matmul(out, a, b, bias, relu);
    Stage s(k);
    k.matmul(s.out(out), s.in(a), s.in(b), s.in(bias), relu);
    s.finish();
  }
  void conv2d_forward(const Tensor& out, const Tensor& x, const Tensor& w, const Tensor& bias, const ConvParams& p,
                      bool relu) override {
    if (!low_precision::any_low(out, x, w, bias) || native_product(out, x, w, bias)) return k.conv2d_forward(out, x, w, bias, p, relu);
    Stage s(k);
    k.conv2d_forward(s.out(out), s.in(x), s.in(w), s.in(bias), p, relu);
    s.finish();
  }
  int64_t conv2d_channel_block(DType dtype) const override { return k.conv2d_channel_block(dtype); }
  bool channels_last(DType dtype) const override { return k.channels_last(dtype); }
  bool mixed_batch_norm(DType dtype, bool x_channels_last) const override {
    return k.mixed_batch_norm(dtype, x_channels_last);
  }
  bool native_products(DType dtype) const override { return k.native_products(dtype); }
  void conv2d_backward_data(const Tensor& gx, const Tensor& gy, const Tensor& w, const ConvParams& p) override {
    if (!low_precision::any_low(gx, gy, w) || native_product(gx, gy, w, Tensor())) return k.conv2d_backward_data(gx, gy, w, p);
    Stage s(k);
    k.conv2d_backward_data(s.out(gx), s.in(gy), s.in(w), p);
    s.finish();
  }
  void conv2d_backward_weight(const Tensor& gw, const Tensor& gb, const Tensor& gy, const Tensor& x,
                              const ConvParams& p) override {
    if (!low_precision::any_low(gw, gb, gy, x) || native_product(gw, gy, x, gb)) return k.conv2d_backward_weight(gw, gb, gy, x, p);
    Stage s(k);
    k.conv2d_backward_weight(s.out(gw), s.out(gb), s.in(gy), s.in(x), p);
    s.finish();
  }
  void max_pool2d_forward(const Tensor& out, const Tensor& indices, const Tensor& x, const PoolParams& p) override {
    if (!low_precision::any_low(out, x)) return k.max_pool2d_forward(out, indices, x, p);
    if (native_max_pool_forward(out, indices, x, p)) return;
    Stage s(k);
    k.max_pool2d_forward(s.out(out), indices, s.in(x), p);
    s.finish();
  }
  void max_pool2d_backward(const Tensor& gx, const Tensor& gy, const Tensor& indices, const PoolParams& p) override {
    if (!low_precision::any_low(gx, gy)) return k.max_pool2d_backward(gx, gy, indices, p);
    if (native_max_pool_backward(gx, gy, indices, p)) return;
    Stage s(k);
    k.max_pool2d_backward(s.out(gx), s.in(gy), indices, p);
    s.finish();
  }
  void avg_pool2d_forward(const Tensor& out, const Tensor& x, const PoolParams& p) override {
    if (!low_precision::any_low(out, x)) return k.avg_pool2d_forward(out, x, p);
    if (native_avg_pool_forward(out, x, p)) return;
    Stage s(k);
    k.avg_pool2d_forward(s.out(out), s.in(x), p);
    s.finish();
  }
  void avg_pool2d_backward(const Tensor& gx, const Tensor& gy, const PoolParams& p) override {
    if (!low_precision::any_low(gx, gy)) return k.avg_pool2d_backward(gx, gy, p);
    if (native_avg_pool_backward(gx, gy, p)) return;
    Stage s(k);
    k.avg_pool2d_backward(s.out(gx), s.in(gy), p);
    s.finish();
  }
  void adaptive_avg_pool2d_forward(const Tensor& out, const Tensor& x) override {
    if (!low_precision::any_low(out, x)) return k.adaptive_avg_pool2d_forward(out, x);
    Stage s(k);
    k.adaptive_avg_pool2d_forward(s.out(out), s.in(x));
    s.finish();
  }
  void adaptive_avg_pool2d_backward(const Tensor& gx, const Tensor& gy) override {
    if (!low_precision::any_low(gx, gy)) return k.adaptive_avg_pool2d_backward(gx, gy);
    Stage s(k);
    k.adaptive_avg_pool2d_backward(s.out(gx), s.in(gy));
    s.finish();
  }
  void batch_norm_forward(const Tensor& out, const Tensor& save_mean, const Tensor& save_invstd, const Tensor& x,
                          const Tensor& weight, const Tensor& bias, const Tensor& running_mean,
                          const Tensor& running_var, bool training, double momentum, double eps) override {
    if (!low_precision::any_low(out, save_mean, save_invstd, x, weight, bias, running_mean, running_var))
      return k.batch_norm_forward(out, save_mean, save_invstd, x, weight, bias, running_mean, running_var, training,
                                  momentum, eps);
    if (native_batch_norm_forward(out, save_mean, save_invstd, {&x, 1}, weight, bias, running_mean, running_var,
                                  training, momentum, eps, false))
      return;
    Stage s(k);
    k.batch_norm_forward(s.out(out), s.out(save_mean), s.out(save_invstd), s.in(x), s.in(weight), s.in(bias),
                         s.out(running_mean, true), s.out(running_var, true), training, momentum, eps);
    s.finish();
  }
  void batch_norm_backward(const Tensor& gx, const Tensor& gw, const Tensor& gb, const Tensor& gy, const Tensor& x,
                           const Tensor& weight, const Tensor& save_mean, const Tensor& save_invstd,
                           bool training) override {
    if (!low_precision::any_low(gx, gw, gb, gy, x, weight, save_mean, save_invstd))
      return k.batch_norm_backward(gx, gw, gb, gy, x, weight, save_mean, save_invstd, training);
    if (native_batch_norm_backward({&gx, 1}, gw, gb, gy, {&x, 1}, Tensor(), weight, save_mean, save_invstd, training))
      return;
    Stage s(k);
    k.batch_norm_backward(s.out(gx), s.out(gw), s.out(gb), s.in(gy), s.in(x), s.in(weight), s.in(save_mean),
                          s.in(save_invstd), training);
    s.finish();
  }
  void batch_norm_relu_forward(const Tensor& out, const Tensor& save_mean, const Tensor& save_invstd,
                               const std::vector<Tensor>& xs, const Tensor& weight, const Tensor& bias,
                               const Tensor& running_mean, const Tensor& running_var, bool training, double momentum,
                               double eps) override {
    if (!low_precision::any_low(xs) && !low_precision::any_low(out, save_mean, save_invstd, weight, bias,
                                                                running_mean, running_var))
      return k.batch_norm_relu_forward(out, save_mean, save_invstd, xs, weight, bias, running_mean, running_var,
                                       training, momentum, eps);
    if (native_batch_norm_forward(out, save_mean, save_invstd, xs, weight, bias, running_mean, running_var, training,
                                  momentum, eps, true))
      return;
    Stage s(k);
    k.batch_norm_relu_forward(s.out(out), s.out(save_mean), s.out(save_invstd), s.in(xs), s.in(weight), s.in(bias),
                              s.out(running_mean, true), s.out(running_var, true), training, momentum, eps);
    s.finish();
  }
  void batch_norm_relu_backward(const std::vector<Tensor>& gxs, const Tensor& gw, const Tensor& gb, const Tensor& gy,
                                const std::vector<Tensor>& xs, const Tensor& y, const Tensor& weight,
                                const Tensor& save_mean, const Tensor& save_invstd, bool training) override {
    if (!low_precision::any_low(gxs) && !low_precision::any_low(xs) &&
        !low_precision::any_low(gw, gb, gy, y, weight, save_mean, save_invstd))
      return k.batch_norm_relu_backward(gxs, gw, gb, gy, xs, y, weight, save_mean, save_invstd, training);
    if (native_batch_norm_backward(gxs, gw, gb, gy, xs, y, weight, save_mean, save_invstd, training)) return;
    Stage s(k);
    k.batch_norm_relu_backward(s.out(gxs, false), s.out(gw), s.out(gb), s.in(gy), s.in(xs), s.in(y), s.in(weight),
                               s.in(save_mean), s.in(save_invstd), training);
    s.finish();
  }
  // low precision: the composed default (batch_norm_relu above, staged, and layout copies)
  void batch_norm_relu_blocked_forward(const Tensor& out, const Tensor& save_mean, const Tensor& save_invstd,
                                       const std::vector<Tensor>& xs, const Tensor& weight, const Tensor& bias,
                                       const Tensor& running_mean, const Tensor& running_var, bool training,
                                       double momentum, double eps) override {
    if (!low_precision::any_low(xs) && !low_precision::any_low(out, save_mean, save_invstd, weight, bias,
                                                                running_mean, running_var))
      return k.batch_norm_relu_blocked_forward(out, save_mean, save_invstd, xs, weight, bias, running_mean,
                                               running_var, training, momentum, eps);
    Backend::batch_norm_relu_blocked_forward(out, save_mean, save_invstd, xs, weight, bias, running_mean, running_var,
                                             training, momentum, eps);
  }
  void batch_norm_relu_blocked_backward(const std::vector<Tensor>& gxs, const Tensor& gw, const Tensor& gb,
                                        const Tensor& gz, const std::vector<Tensor>& xs, const Tensor& z,
                                        const Tensor& weight, const Tensor& save_mean, const Tensor& save_invstd,
                                        bool training) override {
    if (!low_precision::any_low(gxs) && !low_precision::any_low(xs) &&
        !low_precision::any_low(gw, gb, gz, z, weight, save_mean, save_invstd))
      return k.batch_norm_relu_blocked_backward(gxs, gw, gb, gz, xs, z, weight, save_mean, save_invstd, training);
    Backend::batch_norm_relu_blocked_backward(gxs, gw, gb, gz, xs, z, weight, save_mean, save_invstd, training);
  }
  void layer_norm_forward(const Tensor& out, const Tensor& save_mean, const Tensor& save_invstd, const Tensor& x,
                          const Tensor& weight, const Tensor& bias, double eps) override {
    if (!low_precision::any_low(out, save_mean, save_invstd, x, weight, bias))
      return k.layer_norm_forward(out, save_mean, save_invstd, x, weight, bias, eps);
    Stage s(k);
    k.layer_norm_forward(s.out(out), s.out(save_mean), s.out(save_invstd), s.in(x), s.in(weight), s.in(bias), eps);
    s.finish();
  }
  void layer_norm_backward(const Tensor& gx, const Tensor& gw, const Tensor& gb, const Tensor& gy, const Tensor& x,
                           const Tensor& weight, const Tensor& save_mean, const Tensor& save_invstd) override {
    if (!low_precision::any_low(gx, gw, gb, gy, x, weight, save_mean, save_invstd))
      return k.layer_norm_backward(gx, gw, gb, gy, x, weight, save_mean, save_invstd);
    Stage s(k);
    k.layer_norm_backward(s.out(gx), s.out(gw), s.out(gb), s.in(gy), s.in(x), s.in(weight), s.in(save_mean),
                          s.in(save_invstd));
    s.finish();
  }
  void softmax_forward(const Tensor& out, const Tensor& x, int dim, bool log) override {
    if (!low_precision::any_low(out, x)) return k.softmax_forward(out, x, dim, log);
    Stage s(k);
    k.softmax_forward(s.out(out), s.in(x), dim, log);
    s.finish();
  }
  void softmax_backward(const Tensor& gx, const Tensor& gy, const Tensor& y, int dim, bool log) override {
    if (!low_precision::any_low(gx, gy, y)) return k.softmax_backward(gx, gy, y, dim, log);
    Stage s(k);
    k.softmax_backward(s.out(gx), s.in(gy), s.in(y), dim, log);
    s.finish();
  }
  void cross_entropy_forward(const Tensor& losses, const Tensor& lse, const Tensor& logits, const Tensor& labels,
                             double label_smoothing, int64_t ignore_index) override {
    if (!low_precision::any_low(losses, lse, logits))
      return k.cross_entropy_forward(losses, lse, logits, labels, label_smoothing, ignore_index);
    Stage s(k);
    k.cross_entropy_forward(s.out(losses), s.out(lse), s.in(logits), labels, label_smoothing, ignore_index);
    s.finish();
  }
  void cross_entropy_backward(const Tensor& glogits, const Tensor& glosses, const Tensor& logits, const Tensor& lse,
                              const Tensor& labels, double label_smoothing, int64_t ignore_index) override {
    if (!low_precision::any_low(glogits, glosses, logits, lse))
      return k.cross_entropy_backward(glogits, glosses, logits, lse, labels, label_smoothing, ignore_index);
    Stage s(k);
    k.cross_entropy_backward(s.out(glogits), s.in(glosses), s.in(logits), s.in(lse), labels, label_smoothing,
                             ignore_index);
    s.finish();
  }
  // index and scatter ops move elements without arithmetic (index_add and scatter_add
  // add, in f32 here)
  void index_select(const Tensor& out, const Tensor& x, int dim, const Tensor& index) override {
    if (!low_precision::any_low(out, x)) return k.index_select(out, x, dim, index);
    Stage s(k);
    k.index_select(s.out(out), s.in(x), dim, index);
    s.finish();
  }
  void index_add(const Tensor& out, int dim, const Tensor& index, const Tensor& src) override {
    if (!low_precision::any_low(out, src)) return k.index_add(out, dim, index, src);
    Stage s(k);
    k.index_add(s.out(out, true), dim, index, s.in(src));
    s.finish();
  }
  void gather(const Tensor& out, const Tensor& x, int dim, const Tensor& index) override {
    if (!low_precision::any_low(out, x)) return k.gather(out, x, dim, index);
    Stage s(k);
    k.gather(s.out(out), s.in(x), dim, index);
    s.finish();
  }
  void scatter_add(const Tensor& out, int dim, const Tensor& index, const Tensor& src) override {
    if (!low_precision::any_low(out, src)) return k.scatter_add(out, dim, index, src);
    Stage s(k);
    k.scatter_add(s.out(out, true), dim, index, s.in(src));
    s.finish();
  }
  void sort(const Tensor& values, const Tensor& indices, const Tensor& x, bool descending) override {
    if (!low_precision::any_low(values, x)) return k.sort(values, indices, x, descending);
    Stage s(k);
    k.sort(s.out(values), indices, s.in(x), descending);
    s.finish();
  }
  void cumulative(ScanOp op, const Tensor& out, const Tensor& x, int dim, bool reverse) override {
    if (!low_precision::any_low(out, x)) return k.cumulative(op, out, x, dim, reverse);
    Stage s(k);
    k.cumulative(op, s.out(out), s.in(x), dim, reverse);
    s.finish();
  }
  void scatter(const Tensor& out, int dim, const Tensor& index, const Tensor& src) override {
    if (!low_precision::any_low(out, src)) return k.scatter(out, dim, index, src);
    Stage s(k);
    k.scatter(s.out(out, true), dim, index, s.in(src));
    s.finish();
  }
  // the workspace holds f32 values for a low-precision layer that runs on f32 twins
  bool rnn_native_bf16() const override { return k.rnn_native_bf16(); }
  int64_t rnn_workspace_bytes(const RnnParams& p, DType dtype) override {
    const bool native = dtype == DType::bf16 && k.rnn_native_bf16();
    return k.rnn_workspace_bytes(p, is_low_precision(dtype) && !native ? DType::f32 : dtype);
  }
  void rnn_forward(const RnnParams& p, const Tensor& y, const Tensor& hy, const Tensor& cy, const Tensor& ws,
                   const Tensor& x, const Tensor& hx, const Tensor& cx, const Tensor& w_ih, const Tensor& w_hh,
                   const Tensor& b_ih, const Tensor& b_hh) override {
    if (!low_precision::any_low(y, hy, cy, x, hx, cx, w_ih, w_hh, b_ih, b_hh) ||
        (x.dtype() == DType::bf16 && k.rnn_native_bf16()))
      return k.rnn_forward(p, y, hy, cy, ws, x, hx, cx, w_ih, w_hh, b_ih, b_hh);
    Stage s(k);
    k.rnn_forward(p, s.out(y), s.out(hy), s.out(cy), ws, s.in(x), s.in(hx), s.in(cx), s.in(w_ih), s.in(w_hh),
                  s.in(b_ih), s.in(b_hh));
    s.finish();
  }
  void rnn_backward(const RnnParams& p, const Tensor& gx, const Tensor& ghx, const Tensor& gcx, const Tensor& gw_ih,
                    const Tensor& gw_hh, const Tensor& gb_ih, const Tensor& gb_hh, const Tensor& gy,
                    const Tensor& ghy, const Tensor& gcy, const Tensor& x, const Tensor& hx, const Tensor& cx,
                    const Tensor& w_ih, const Tensor& w_hh, const Tensor& b_ih, const Tensor& b_hh, const Tensor& y,
                    const Tensor& hy, const Tensor& cy, const Tensor& ws) override {
    if (!low_precision::any_low(gx, ghx, gcx, gw_ih, gw_hh, gb_ih, gb_hh, gy, ghy, gcy, x, hx, cx, w_ih, w_hh, b_ih, b_hh, y, hy, cy) ||
        (x.dtype() == DType::bf16 && k.rnn_native_bf16()))
      return k.rnn_backward(p, gx, ghx, gcx, gw_ih, gw_hh, gb_ih, gb_hh, gy, ghy, gcy, x, hx, cx, w_ih, w_hh, b_ih,
                            b_hh, y, hy, cy, ws);
    Stage s(k);
    k.rnn_backward(p, s.out(gx), s.out(ghx), s.out(gcx), s.out(gw_ih), s.out(gw_hh), s.out(gb_ih), s.out(gb_hh),
                   s.in(gy), s.in(ghy), s.in(gcy), s.in(x), s.in(hx), s.in(cx), s.in(w_ih), s.in(w_hh), s.in(b_ih),
                   s.in(b_hh), s.in(y), s.in(hy), s.in(cy), ws);
    s.finish();
  }
  // the whole stack: float and double only (rnn() asks for no other dtype), straight through
  bool rnn_stack_serves(const RnnStackParams& p, DType dtype) override {
    return !is_low_precision(dtype) && k.rnn_stack_serves(p, dtype);
  }
  bool rnn_stack_forward(const RnnStackParams& p, const Tensor& y, const Tensor& hy, const Tensor& cy,
                         RnnStackState& state, const Tensor& x, const Tensor& hx, const Tensor& cx,
                         const std::vector<Tensor>& weights, const Tensor& lengths) override {
    if (low_precision::any_low(y, hy, cy, x, hx, cx) || low_precision::any_low(weights)) return false;
    return k.rnn_stack_forward(p, y, hy, cy, state, x, hx, cx, weights, lengths);
  }
  bool rnn_stack_backward(const RnnStackParams& p, const Tensor& gx, const Tensor& ghx, const Tensor& gcx,
                          const std::vector<Tensor>& gweights, const Tensor& gy, const Tensor& ghy, const Tensor& gcy,
                          const Tensor& x, const Tensor& hx, const Tensor& cx, const Tensor& y, const Tensor& lengths,
                          const RnnStackState& state) override {
    return k.rnn_stack_backward(p, gx, ghx, gcx, gweights, gy, ghy, gcy, x, hx, cx, y, lengths, state);
  }
  void attention_forward(const Tensor& out, const Tensor& lse, const Tensor& q, const Tensor& k_, const Tensor& v,
                         const Tensor& mask, const Tensor& mask_offsets, const AttentionParams& p) override {
    if (!low_precision::any_low(out, lse, q, k_, v, mask)) return k.attention_forward(out, lse, q, k_, v, mask, mask_offsets, p);
    Stage s(k);
    k.attention_forward(s.out(out), s.out(lse), s.in(q), s.in(k_), s.in(v), s.in_same_layout(mask), mask_offsets, p);
    s.finish();
  }
  void attention_backward(const Tensor& gq, const Tensor& gk, const Tensor& gv, const Tensor& go, const Tensor& q,
                          const Tensor& k_, const Tensor& v, const Tensor& out, const Tensor& lse, const Tensor& mask,
                          const Tensor& mask_offsets, const AttentionParams& p) override {
    if (!low_precision::any_low(gq, gk, gv, go, q, k_, v, out, lse, mask))
      return k.attention_backward(gq, gk, gv, go, q, k_, v, out, lse, mask, mask_offsets, p);
    Stage s(k);
    k.attention_backward(s.out(gq), s.out(gk), s.out(gv), s.in(go), s.in(q), s.in(k_), s.in(v), s.in(out), s.in(lse),
                         s.in_same_layout(mask), mask_offsets, p);
    s.finish();
  }
  // low-precision parameters and state (a model converted with .to(bf16)): the update
  // computes in f32 and rounds each written tensor once
  void optim_step(const OptimStep& step, const std::vector<Tensor>& params, const std::vector<Tensor>& grads,
                  const std::vector<Tensor>& state1, const std::vector<Tensor>& state2,
                  const std::vector<Tensor>& state3) override {
    if (!low_precision::any_low(params) && !low_precision::any_low(grads) && !low_precision::any_low(state1) && !low_precision::any_low(state2) && !low_precision::any_low(state3))
      return k.optim_step(step, params, grads, state1, state2, state3);
    Stage s(k);
    k.optim_step(step, s.out(params, true), s.in(grads), s.out(state1, true), s.out(state2, true),
                 s.out(state3, true));
    s.finish();
  }
  // the rounded copies are the inner backend's to write; low-precision parameters or
  // state go through optim_step's staging, with no copies
  bool optim_step_rounded(const OptimStep& step, const std::vector<Tensor>& params, const std::vector<Tensor>& grads,
                          const std::vector<Tensor>& state1, const std::vector<Tensor>& state2,
                          const std::vector<Tensor>& state3, const std::vector<Tensor>& rounded) override {
    if (low_precision::any_low(params) || low_precision::any_low(grads) || low_precision::any_low(state1) ||
        low_precision::any_low(state2) || low_precision::any_low(state3))
      return false;
    return k.optim_step_rounded(step, params, grads, state1, state2, state3, rounded);
  }
  // the scaler's own kernels read f16/bf16 gradients themselves (vectorised, in f32)
  void amp_unscale(const std::vector<Tensor>& grads, const Tensor& found_inf, const Tensor& inv_scale) override {
    k.amp_unscale(grads, found_inf, inv_scale);
  }
  void amp_update_scale(const Tensor& scale, const Tensor& growth_tracker, const Tensor& found_inf,
                        double growth_factor, double backoff_factor, int64_t growth_interval) override {
    k.amp_update_scale(scale, growth_tracker, found_inf, growth_factor, backoff_factor, growth_interval);
  }

 protected:
  // Whether the inner backend computes this product (matmul, or a convolution direction:
  // out, its two operands, the bias or its gradient) on these dtypes itself.
  virtual bool native_product(const Tensor& out, const Tensor& a, const Tensor& b, const Tensor& bias) const = 0;
  // Low-precision elementwise kernels of the inner backend: true when it ran one
  virtual bool native_unary(UnaryOp, const Tensor&, const Tensor&, double, double) { return false; }
  virtual bool native_binary(BinaryOp, const Tensor&, const Tensor&, const Tensor&) { return false; }
  // ... and its low-precision max and average pooling (channels-last activations): true when it ran
  virtual bool native_max_pool_forward(const Tensor&, const Tensor&, const Tensor&, const PoolParams&) { return false; }
  virtual bool native_max_pool_backward(const Tensor&, const Tensor&, const Tensor&, const PoolParams&) { return false; }
  // ... and its dropout (y, mask, x, p, seed, offset; an undefined mask: y alone, dropout_apply)
  virtual bool native_dropout_forward(const Tensor&, const Tensor&, const Tensor&, double, uint64_t, uint64_t) {
    return false;
  }
  virtual bool native_avg_pool_forward(const Tensor&, const Tensor&, const PoolParams&) { return false; }
  virtual bool native_avg_pool_backward(const Tensor&, const Tensor&, const PoolParams&) { return false; }
  // ... and its batch norm of low-precision activations with f32 parameters (autocast's
  // mixed form), relu fused when `relu` (backward: when y, the forward's output, is given)
  virtual bool native_batch_norm_forward(const Tensor&, const Tensor&, const Tensor&, std::span<const Tensor>,
                                         const Tensor&, const Tensor&, const Tensor&, const Tensor&, bool, double,
                                         double, bool) {
    return false;
  }
  virtual bool native_batch_norm_backward(std::span<const Tensor>, const Tensor&, const Tensor&, const Tensor&,
                                          std::span<const Tensor>, const Tensor&, const Tensor&, const Tensor&,
                                          const Tensor&, bool) {
    return false;
  }
  Inner k;
};

}  // namespace reel
