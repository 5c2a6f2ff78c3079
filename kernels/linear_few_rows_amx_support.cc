// Whether LinearFewRows may use AMX: compiled for any x86-64, unlike the kernel.
#include <sys/syscall.h>
#include <unistd.h>

#include "kernels/linear_internal.h"

namespace layerserve::kernels::internal {

bool FewRowsAmxSupported() {
  static const bool supported = [] {
    if (!__builtin_cpu_supports("amx-tile") || !__builtin_cpu_supports("amx-bf16") ||
        !__builtin_cpu_supports("avx512bf16")) {
      return false;
    }
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
