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
Tensor Tensor::min(Site site) const { return amin(*this, {}, false, site); }
Tensor Tensor::min(int64_t dim, bool keepdim, Site site) const { return amin(*this, Dims{dim}, keepdim, site); }
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
