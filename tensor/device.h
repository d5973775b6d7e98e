// Device: where a tensor's storage lives. Ops never move data between devices silently.
#pragma once
#include <cstdint>
#include <string>

namespace reel {

enum class DeviceType : uint8_t { CPU, CUDA };

struct Device {
  DeviceType type = DeviceType::CPU;
  int8_t index = 0;

  static constexpr Device cpu() { return {DeviceType::CPU, 0}; }
  static constexpr Device cuda(int i = 0) { return {DeviceType::CUDA, int8_t(i)}; }
  bool is_cpu() const { return type == DeviceType::CPU; }
  bool is_cuda() const { return type == DeviceType::CUDA; }
  friend bool operator==(Device a, Device b) { return a.type == b.type && a.index == b.index; }
  std::string str() const;  // "cpu", "cuda:0"
};

inline constexpr Device kCPU = Device::cpu();

}  // namespace reel
