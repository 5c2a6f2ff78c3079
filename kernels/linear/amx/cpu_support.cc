// Whether LinearFewRows may use AMX: compiled for any x86-64, unlike the kernel.
#include <cpuid.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "kernels/linear/linear_internal.h"

namespace layerserve::kernels::internal {
namespace {

// CPUID leaf 7, subleaf 0, EDX: AMX-BF16 is bit 22, AMX-TILE bit 24. Read directly:
// clang 14's __builtin_cpu_supports knows no AMX feature names (gcc 12's does), and
// the thread-safety check and the fuzzers build with clang.
bool CpuHasAmxBf16() {
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  if (__get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx) == 0) return false;
  return (edx & (1u << 22)) != 0 && (edx & (1u << 24)) != 0;
}

}  // namespace

bool FewRowsAmxSupported() {
  static const bool supported = [] {
    if (!CpuHasAmxBf16() || !__builtin_cpu_supports("avx512bf16")) return false;
    // Linux (5.16 on) lets a process use the 8 KiB of tile data only after it asks;
    // the permission covers all its threads. oneDNN asks too: asking twice is fine.
    // An older kernel, or one that refuses, says no here (a tile instruction would
    // raise SIGILL).
    constexpr long kArchReqXcompPerm = 0x1023;  // ARCH_REQ_XCOMP_PERM
    constexpr long kXfeatureXtiledata = 18;     // XFEATURE_XTILEDATA
    return syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) == 0;
  }();
  return supported;
}

}  // namespace layerserve::kernels::internal
