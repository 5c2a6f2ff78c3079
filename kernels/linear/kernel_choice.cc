#include "kernels/linear/kernel_choice.h"

#include <cpuid.h>

#include "kernels/linear/linear_internal.h"

namespace layerserve::kernels {
namespace {

bool IsAmdFamily19h() {
  unsigned eax, ebx, ecx, edx;
  if (__get_cpuid(0, &eax, &ebx, &ecx, &edx) == 0) return false;
  // "AuthenticAMD" in ebx, edx, ecx.
  const bool amd = ebx == 0x68747541u && edx == 0x69746E65u && ecx == 0x444D4163u;
  if (!amd || __get_cpuid(1, &eax, &ebx, &ecx, &edx) == 0) return false;
  return ((eax >> 8) & 0xFu) + ((eax >> 20) & 0xFFu) == 0x19;
}

}  // namespace

const char* LinearKernelName(LinearKernel kernel) {
  switch (kernel) {
    case LinearKernel::kOneDnnMatmul:
      return "OneDnnMatmul";
    case LinearKernel::kAmxManyRows:
      return "AmxManyRows";
    case LinearKernel::kInt8OneDnnTiles:
      return "Int8OneDnnTiles";
    case LinearKernel::kInt8AmxManyRows:
      return "Int8AmxManyRows";
    case LinearKernel::kVdpbf16psManyRows:
      return "Vdpbf16psManyRows";
    case LinearKernel::kHwyFewRows:
      return "HwyFewRows";
    case LinearKernel::kVdpbf16psFewRows:
      return "Vdpbf16psFewRows";
    case LinearKernel::kAmxFewRows:
      return "AmxFewRows";
    case LinearKernel::kInt8HwyFewRows:
      return "Int8HwyFewRows";
    case LinearKernel::kInt8Vdpbf16psFewRows:
      return "Int8Vdpbf16psFewRows";
    case LinearKernel::kInt8AmxFewRows:
      return "Int8AmxFewRows";
  }
  return "?";
}

CpuFeatures ThisCpu() {
  static const bool zen4 = IsAmdFamily19h();
  static const CpuFeatures cpu{internal::FewRowsDpbf16Supported(),
                               internal::FewRowsAmxSupported(), !zen4, !zen4};
  return cpu;
}

LinearKernel ChooseLinearKernel(WeightType type, int64_t in, bool packed_for_few_rows,
                                LinearCall call, CpuFeatures cpu) {
  using K = LinearKernel;
  // Tiles take whole k blocks of 32: a partial last one would read the next row's
  // inputs. Where a Xeon has AMX it multiplies far faster than VDPBF16PS, and beat
  // oneDNN 2.6's matmul for many rows too (docs/perf/2026-12-03-linear-on-amx.md):
  // tiles for many rows too, which also gives a row the same bits through Linear
  // and LinearFewRows.
  const bool amx = cpu.avx512_bf16 && cpu.amx_bf16 && in % 32 == 0;
  // VDPBF16PS multiplies k pairs: an odd `in` would leave half a pair. It doubles
  // the float32 FMA loop's products per instruction, which is what beats oneDNN at
  // 8 to 32 rows (docs/perf/2026-11-30-decode-step-kernels.md).
  const bool vdpbf16ps = cpu.avx512_bf16 && in % 2 == 0;
  if (type == WeightType::kInt8) {
    if (call == LinearCall::kManyRows)
      return amx ? K::kInt8AmxManyRows : K::kInt8OneDnnTiles;
    if (amx) return K::kInt8AmxFewRows;
    return vdpbf16ps ? K::kInt8Vdpbf16psFewRows : K::kInt8HwyFewRows;
  }
  const bool bf16 = type == WeightType::kBfloat16;
  if (!packed_for_few_rows) return K::kOneDnnMatmul;
  if (call == LinearCall::kManyRows) {
    if (bf16 && amx) return K::kAmxManyRows;
    // Not beside AMX, where VDPBF16PS runs at half the float32 FMA's rate.
    const bool ours = bf16 && vdpbf16ps && !cpu.amx_bf16 && cpu.vdpbf16ps_for_many_rows;
    return ours ? K::kVdpbf16psManyRows : K::kOneDnnMatmul;
  }
  if (bf16 && amx) return K::kAmxFewRows;
  if (bf16 && vdpbf16ps) return K::kVdpbf16psFewRows;
  return K::kHwyFewRows;
}

}  // namespace layerserve::kernels
