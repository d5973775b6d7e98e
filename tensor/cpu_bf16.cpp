#include "internal/cpu_bf16.h"

#include <atomic>

namespace reel::internal {

namespace {
std::atomic<CpuBf16Facts (*)()> g_query{nullptr};
}

void register_cpu_bf16_facts(CpuBf16Facts (*query)()) { g_query.store(query); }

CpuBf16Facts cpu_bf16_facts() {
  auto* q = g_query.load();
  return q ? q() : CpuBf16Facts{};
}

}  // namespace reel::internal
