// DType: the element types a Tensor can hold, and their C++ counterparts.
#pragma once
#include <cstdint>
#include <cstring>

namespace reel {

enum class DType : uint8_t { f32, f64, f16, bf16, i32, i64, u8, boolean };

// IEEE half and bfloat16 as storage types: convert to float to compute.
struct Half {
  uint16_t bits = 0;
  Half() = default;
  explicit Half(float f);
  explicit operator float() const;
};
struct BFloat16 {
  uint16_t bits = 0;
  BFloat16() = default;
  explicit BFloat16(float f) {
    uint32_t u;
    std::memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) { bits = 0x7fc0; return; }  // NaN stays NaN
    u += 0x7fffu + ((u >> 16) & 1u);  // round to nearest even
    bits = uint16_t(u >> 16);
  }
  explicit operator float() const {
    uint32_t u = uint32_t(bits) << 16;
    float f;
    std::memcpy(&f, &u, 4);
    return f;
  }
};

// f16 and bf16: stored in 16 bits, computed in f32
constexpr bool is_low_precision(DType t) { return t == DType::f16 || t == DType::bf16; }

constexpr int dtype_size(DType t) {
  switch (t) {
    case DType::f32: case DType::i32: return 4;
    case DType::f64: case DType::i64: return 8;
    case DType::f16: case DType::bf16: return 2;
    case DType::u8: case DType::boolean: return 1;
  }
  return 0;
}

constexpr const char* dtype_name(DType t) {
  switch (t) {
    case DType::f32: return "f32";
    case DType::f64: return "f64";
    case DType::f16: return "f16";
    case DType::bf16: return "bf16";
    case DType::i32: return "i32";
    case DType::i64: return "i64";
    case DType::u8: return "u8";
    case DType::boolean: return "bool";
  }
  return "?";
}

constexpr bool is_floating(DType t) {
  return t == DType::f32 || t == DType::f64 || t == DType::f16 || t == DType::bf16;
}
constexpr bool is_integral(DType t) { return !is_floating(t); }

// The dtype a C++ type maps to: dtype_of<float> == DType::f32.
template <typename T> constexpr DType dtype_of_v = DType::f32;
template <> inline constexpr DType dtype_of_v<double> = DType::f64;
template <> inline constexpr DType dtype_of_v<Half> = DType::f16;
template <> inline constexpr DType dtype_of_v<BFloat16> = DType::bf16;
template <> inline constexpr DType dtype_of_v<int32_t> = DType::i32;
template <> inline constexpr DType dtype_of_v<int64_t> = DType::i64;
template <> inline constexpr DType dtype_of_v<uint8_t> = DType::u8;
template <> inline constexpr DType dtype_of_v<bool> = DType::boolean;

// Type promotion for binary ops: float beats integer beats bool; wider beats narrower.
DType promote(DType a, DType b);

}  // namespace reel
