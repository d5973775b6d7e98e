// What the CPU backend says about bf16 products, for CPU autocast's choice
// (autograd/autocast_products.h): registered by cpu/ when the library loads, so that
// autograd/ asks without depending on cpu/. Internal to reel.
#pragma once

namespace reel::internal {

struct CpuBf16Facts {
  bool native = false;  // bf16 instructions: AVX512-BF16 or AMX, as oneDNN sees them
  bool faster = false;  // and bf16 products outrun f32 ones with them
  const char* how = "no CPU backend";  // which of the CPU's features decided, in words
};
void register_cpu_bf16_facts(CpuBf16Facts (*query)());
// The registered answer; the defaults above when no CPU backend registered one.
CpuBf16Facts cpu_bf16_facts();

}  // namespace reel::internal
