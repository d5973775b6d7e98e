// Tensor's methods under PyTorch's spellings: each is the free function of the same
// name (autograd/ops.h, ops_everyday.h), so it records and checks exactly as that does.
#include <limits>

#include "op_support.h"
#include "ops.h"

namespace reel {

Tensor Tensor::sum(int64_t dim, bool keepdim, Site site) const { return reel::sum(*this, Dims{dim}, keepdim, site); }
Tensor Tensor::mean(int64_t dim, bool keepdim, Site site) const {
  return reel::mean(*this, Dims{dim}, keepdim, site);
}
Tensor Tensor::min(Site site) const { return reel::amin(*this, {}, false, site); }
Tensor Tensor::min(int64_t dim, bool keepdim, Site site) const { return reel::amin(*this, Dims{dim}, keepdim, site); }
Tensor Tensor::argmin(int64_t dim, bool keepdim, Site site) const { return reel::argmin(*this, dim, keepdim, site); }
Tensor Tensor::std(int64_t dim, bool keepdim, Site site) const { return reel::std(*this, Dims{dim}, 1, keepdim, site); }
Tensor Tensor::var(int64_t dim, bool keepdim, Site site) const { return reel::var(*this, Dims{dim}, 1, keepdim, site); }
Tensor Tensor::norm(double p, Site site) const { return reel::norm(*this, p, {}, false, site); }
Tensor Tensor::softmax(int64_t dim, Site site) const { return reel::softmax(*this, dim, site); }
Tensor Tensor::log_softmax(int64_t dim, Site site) const { return reel::log_softmax(*this, dim, site); }
Tensor Tensor::clamp(double low, double high, Site site) const { return reel::clamp(*this, low, high, site); }
Tensor Tensor::clamp_min(double low, Site site) const { return reel::clamp_min(*this, low, site); }
Tensor Tensor::clamp_max(double high, Site site) const { return reel::clamp_max(*this, high, site); }
Tensor Tensor::masked_fill(const Tensor& mask, double value, Site site) const {
  return reel::masked_fill(*this, mask, value, site);
}
Tensor Tensor::cumsum(int64_t dim, Site site) const { return reel::cumsum(*this, dim, site); }
Tensor Tensor::flip(const Dims& dims, Site site) const { return reel::flip(*this, dims, site); }
Tensor Tensor::repeat(const Dims& reps, Site site) const { return reel::repeat(*this, reps, site); }
Tensor Tensor::to_float(Site site) const { return to(DType::f32, site); }
Tensor Tensor::to_double(Site site) const { return to(DType::f64, site); }
Tensor Tensor::to_long(Site site) const { return to(DType::i64, site); }
Tensor Tensor::to_int(Site site) const { return to(DType::i32, site); }
Tensor Tensor::to_bool(Site site) const { return to(DType::boolean, site); }

}  // namespace reel

namespace reel {

// ---- more of libtorch's method spellings (tensor/tensor.h lists them)
Tensor Tensor::add(const Tensor& other, double alpha, Site site) const {
  return alpha == 1 ? reel::add(*this, other, site) : reel::add(*this, other, alpha, site);
}
Tensor Tensor::add(double other, Site site) const { return reel::add(*this, other, site); }
Tensor Tensor::sub(const Tensor& other, double alpha, Site site) const {
  return alpha == 1 ? reel::sub(*this, other, site) : reel::sub(*this, other, alpha, site);
}
Tensor Tensor::sub(double other, Site site) const { return reel::sub(*this, other, site); }
Tensor Tensor::mul(const Tensor& other, Site site) const { return reel::mul(*this, other, site); }
Tensor Tensor::mul(double other, Site site) const { return reel::mul(*this, other, site); }
Tensor Tensor::div(const Tensor& other, Site site) const { return reel::div(*this, other, site); }
Tensor Tensor::div(double other, Site site) const { return reel::div(*this, other, site); }
Tensor Tensor::pow(const Tensor& exponent, Site site) const { return reel::pow(*this, exponent, site); }
Tensor Tensor::maximum(const Tensor& other, Site site) const { return reel::maximum(*this, other, site); }
Tensor Tensor::minimum(const Tensor& other, Site site) const { return reel::minimum(*this, other, site); }
Tensor Tensor::neg(Site site) const { return reel::neg(*this, site); }
Tensor Tensor::rsqrt(Site site) const { return reel::rsqrt(*this, site); }
Tensor Tensor::square(Site site) const { return reel::square(*this, site); }
Tensor Tensor::reciprocal(Site site) const { return reel::reciprocal(*this, site); }
Tensor Tensor::sin(Site site) const { return reel::sin(*this, site); }
Tensor Tensor::cos(Site site) const { return reel::cos(*this, site); }
Tensor Tensor::erf(Site site) const { return reel::erf(*this, site); }
Tensor Tensor::sign(Site site) const { return reel::sign(*this, site); }
Tensor Tensor::lerp(const Tensor& end, double weight, Site site) const { return reel::lerp(*this, end, weight, site); }
Tensor Tensor::lerp(const Tensor& end, const Tensor& weight, Site site) const {
  return reel::lerp(*this, end, weight, site);
}
Tensor Tensor::where(const Tensor& condition, const Tensor& other, Site site) const {
  return reel::where(condition, *this, other, site);
}
Tensor Tensor::nan_to_num(double nan, std::optional<double> posinf, std::optional<double> neginf, Site site) const {
  return reel::nan_to_num(*this, nan, posinf, neginf, site);
}

Tensor Tensor::eq(const Tensor& other, Site site) const { return reel::eq(*this, other, site); }
Tensor Tensor::ne(const Tensor& other, Site site) const { return reel::ne(*this, other, site); }
Tensor Tensor::lt(const Tensor& other, Site site) const { return reel::lt(*this, other, site); }
Tensor Tensor::le(const Tensor& other, Site site) const { return reel::le(*this, other, site); }
Tensor Tensor::gt(const Tensor& other, Site site) const { return reel::gt(*this, other, site); }
Tensor Tensor::ge(const Tensor& other, Site site) const { return reel::ge(*this, other, site); }
Tensor Tensor::eq(double other, Site site) const { return reel::eq(*this, other, site); }
Tensor Tensor::ne(double other, Site site) const { return reel::ne(*this, other, site); }
Tensor Tensor::lt(double other, Site site) const { return reel::lt(*this, other, site); }
Tensor Tensor::le(double other, Site site) const { return reel::le(*this, other, site); }
Tensor Tensor::gt(double other, Site site) const { return reel::gt(*this, other, site); }
Tensor Tensor::ge(double other, Site site) const { return reel::ge(*this, other, site); }
Tensor Tensor::logical_not(Site site) const { return reel::logical_not(*this, site); }
Tensor Tensor::logical_and(const Tensor& other, Site site) const { return reel::logical_and(*this, other, site); }
Tensor Tensor::logical_or(const Tensor& other, Site site) const { return reel::logical_or(*this, other, site); }
Tensor Tensor::isnan(Site site) const { return reel::isnan(*this, site); }
Tensor Tensor::isinf(Site site) const { return reel::isinf(*this, site); }
Tensor Tensor::isfinite(Site site) const { return reel::isfinite(*this, site); }
Tensor Tensor::all(Site site) const { return reel::all(*this, {}, false, site); }
Tensor Tensor::all(int64_t dim, bool keepdim, Site site) const { return reel::all(*this, Dims{dim}, keepdim, site); }
Tensor Tensor::any(Site site) const { return reel::any(*this, {}, false, site); }
Tensor Tensor::any(int64_t dim, bool keepdim, Site site) const { return reel::any(*this, Dims{dim}, keepdim, site); }

Tensor Tensor::prod(Site site) const { return reel::prod(*this, {}, false, site); }
Tensor Tensor::prod(int64_t dim, bool keepdim, Site site) const { return reel::prod(*this, Dims{dim}, keepdim, site); }
Tensor Tensor::amax(const Dims& dims, bool keepdim, Site site) const { return reel::amax(*this, dims, keepdim, site); }
Tensor Tensor::amin(const Dims& dims, bool keepdim, Site site) const { return reel::amin(*this, dims, keepdim, site); }
Tensor Tensor::argmax(Site site) const { return reel::argmax(*this, site); }
Tensor Tensor::argmin(Site site) const { return reel::argmin(*this, site); }
Tensor Tensor::std(Site site) const { return reel::std(*this, {}, 1, false, site); }
Tensor Tensor::var(Site site) const { return reel::var(*this, {}, 1, false, site); }
Tensor Tensor::norm(double p, const Dims& dims, bool keepdim, Site site) const {
  return reel::norm(*this, p, dims, keepdim, site);
}
Tensor Tensor::norm(double p, int64_t dim, bool keepdim, Site site) const {
  return reel::norm(*this, p, Dims{dim}, keepdim, site);
}
Tensor Tensor::logsumexp(const Dims& dims, bool keepdim, Site site) const {
  return reel::logsumexp(*this, dims, keepdim, site);
}
Tensor Tensor::cumprod(int64_t dim, Site site) const { return reel::cumprod(*this, dim, site); }
ValuesIndices Tensor::sort(int64_t dim, bool descending, Site site) const {
  return reel::sort(*this, dim, descending, site);
}
Tensor Tensor::argsort(int64_t dim, bool descending, Site site) const {
  return reel::argsort(*this, dim, descending, site);
}
ValuesIndices Tensor::topk(int64_t k, int64_t dim, bool largest, Site site) const {
  return reel::topk(*this, k, dim, largest, site);
}
Tensor Tensor::multinomial(int64_t num_samples, bool replacement, Site site) const {
  return reel::multinomial(*this, num_samples, replacement, site);
}

Tensor Tensor::mm(const Tensor& other, Site site) const { return reel::mm(*this, other, site); }
Tensor Tensor::bmm(const Tensor& other, Site site) const { return reel::bmm(*this, other, site); }
Tensor Tensor::outer(const Tensor& other, Site site) const { return reel::outer(*this, other, site); }
Tensor Tensor::addmm(const Tensor& m1, const Tensor& m2, double beta, double alpha, Site site) const {
  return reel::addmm(*this, m1, m2, beta, alpha, site);
}
Tensor Tensor::baddbmm(const Tensor& b1, const Tensor& b2, double beta, double alpha, Site site) const {
  return reel::baddbmm(*this, b1, b2, beta, alpha, site);
}

Tensor Tensor::tile(const Dims& reps, Site site) const { return reel::tile(*this, reps, site); }
Tensor Tensor::roll(const Dims& shifts, const Dims& dims, Site site) const {
  return reel::roll(*this, shifts, dims, site);
}
Tensor Tensor::tril(int64_t diagonal, Site site) const { return reel::tril(*this, diagonal, site); }
Tensor Tensor::triu(int64_t diagonal, Site site) const { return reel::triu(*this, diagonal, site); }
std::vector<Tensor> Tensor::split(int64_t split_size, int64_t dim, Site site) const {
  return reel::split(*this, split_size, dim, site);
}
std::vector<Tensor> Tensor::split(const std::vector<int64_t>& sizes, int64_t dim, Site site) const {
  return reel::split(*this, sizes, dim, site);
}
std::vector<Tensor> Tensor::chunk(int64_t chunks, int64_t dim, Site site) const {
  return reel::chunk(*this, chunks, dim, site);
}
Tensor Tensor::index_select(int64_t dim, const Tensor& index, Site site) const {
  return reel::index_select(*this, dim, index, site);
}
Tensor Tensor::gather(int64_t dim, const Tensor& index, Site site) const {
  return reel::gather(*this, dim, index, site);
}
Tensor Tensor::scatter(int64_t dim, const Tensor& index, const Tensor& src, Site site) const {
  return reel::scatter(*this, dim, index, src, site);
}
Tensor Tensor::scatter(int64_t dim, const Tensor& index, double value, Site site) const {
  return reel::scatter(*this, dim, index, value, site);
}
Tensor Tensor::scatter_add(int64_t dim, const Tensor& index, const Tensor& src, Site site) const {
  return reel::scatter_add(*this, dim, index, src, site);
}
Tensor Tensor::index_add(int64_t dim, const Tensor& index, const Tensor& src, double alpha, Site site) const {
  return reel::index_add(*this, dim, index, src, alpha, site);
}
Tensor Tensor::index_put(const std::vector<Tensor>& indices, const Tensor& values, bool accumulate, Site site) const {
  return reel::index_put(*this, indices, values, accumulate, site);
}
Tensor Tensor::masked_fill(const Tensor& mask, const Tensor& value, Site site) const {
  return reel::masked_fill(*this, mask, value, site);
}

// libtorch's mm: the product of two matrices. Checked here so that a vector or a batch
// (which matmul would take) is refused under the name the user called; dy as matmul's.
Tensor mm(const Tensor& a, const Tensor& b, Site site) {
  OpScope op("mm", site);
  check_defined(op, a, "the first matrix");
  check_defined(op, b, "the second matrix");
  if (a.dim() != 2 || b.dim() != 2)
    fail(op.op, fmt::format("expected two 2-D tensors, got {} and {}; use matmul for vectors and batches",
                            a.shape().str(), b.shape().str()), op.site);
  if (a.size(1) != b.size(0))
    fail(op.op, fmt::format("inner dims do not match: {} @ {} ({} columns against {} rows)", a.shape().str(),
                            b.shape().str(), a.size(1), b.size(0)), op.site);
  return matmul(a, b);
}

Options Tensor::options() const { return Options{.dtype = dtype(), .device = device()}; }

Tensor& Tensor::detach_(Site site) {
  if (!defined()) fail("detach_", "the tensor is undefined", site);
  // as libtorch: a view's history is its root's (autograd/inplace.h), not its own to drop
  if (impl_->view_base)
    fail("detach_", fmt::format("the tensor {} is a view of another tensor and cannot be detached in place; "
                                "use detach(), which makes a new tensor", shape().str()), site);
  impl_->grad_fn.reset();
  impl_->output_nr = 0;
  impl_->requires_grad = false;
  return *this;
}

// ---- libtorch's free spellings of the view methods
Tensor reshape(const Tensor& x, const Dims& shape, Site site) { return x.reshape(shape, site); }
Tensor flatten(const Tensor& x, int64_t start_dim, int64_t end_dim, Site site) {
  return x.flatten(start_dim, end_dim, site);
}
Tensor transpose(const Tensor& x, int64_t d0, int64_t d1, Site site) { return x.transpose(d0, d1, site); }
Tensor permute(const Tensor& x, const Dims& order, Site site) { return x.permute(order, site); }
Tensor unsqueeze(const Tensor& x, int64_t dim, Site site) { return x.unsqueeze(dim, site); }
Tensor squeeze(const Tensor& x, int64_t dim, Site site) { return x.squeeze(dim, site); }
Tensor narrow(const Tensor& x, int64_t dim, int64_t start, int64_t length, Site site) {
  return x.narrow(dim, start, length, site);
}

}  // namespace reel
