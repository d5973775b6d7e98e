// Scalar (item() without a template argument) and the printing of a shape: what
// libtorch users write first, `x.item().toDouble()` and `std::cout << x.sizes()`.
#include <fmt/format.h>

#include <ostream>

#include "tensor.h"

namespace reel {

double Scalar::toDouble() const {
  return std::visit([](auto v) { return double(v); }, v_);
}
int64_t Scalar::toLong() const {
  return std::visit([](auto v) { return int64_t(v); }, v_);
}
bool Scalar::toBool() const {
  return std::visit([](auto v) { return v != decltype(v)(0); }, v_);
}

std::ostream& operator<<(std::ostream& os, const Scalar& s) {
  if (s.isBoolean()) return os << (s.toBool() ? "true" : "false");
  if (s.isIntegral()) return os << s.toLong();
  return os << fmt::format("{}", s.toDouble());  // the shortest text that reads back the same
}

Scalar Tensor::item() const {
  DType d = live("item").dtype;
  if (d == DType::boolean) return Scalar(item<bool>());
  if (is_floating(d)) return Scalar(item<double>());
  return Scalar(item<int64_t>());
}

std::ostream& operator<<(std::ostream& os, const Dims& shape) { return os << shape.str(); }

}  // namespace reel
