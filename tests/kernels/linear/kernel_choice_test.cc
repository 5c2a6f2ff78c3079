// The linear kernel choice: the whole table on every CPU kind this service has met,
// and which kernel each case gets on this CPU, through LinearWeights as the server
// packs them.
#include "kernels/linear/kernel_choice.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <string>
#include <vector>

#include "kernels/linear/linear.h"

namespace layerserve::kernels {
namespace {

using K = LinearKernel;
constexpr CpuFeatures kPlainX86{false, false};   // AVX2 or AVX-512 without BF16
constexpr CpuFeatures kAvx512Bf16{true, false};  // AMD Zen 5
constexpr CpuFeatures kZen4{true, false, false, false};
constexpr CpuFeatures kAmx{true, true};  // Intel Xeon, Sapphire Rapids on

struct Case {
  WeightType type;
  int64_t in;
  bool packed_for_few_rows;
  LinearCall call;
  CpuFeatures cpu;
  LinearKernel want;
};

std::string Describe(const Case& c) {
  const char* type = c.type == WeightType::kFloat32    ? "float32"
                     : c.type == WeightType::kBfloat16 ? "bfloat16"
                                                       : "int8";
  return std::string(type) + " in=" + std::to_string(c.in) +
         (c.packed_for_few_rows ? " packed" : " not-packed") +
         (c.call == LinearCall::kManyRows ? " many-rows" : " few-rows") +
         " avx512_bf16=" + std::to_string(c.cpu.avx512_bf16) +
         " amx=" + std::to_string(c.cpu.amx_bf16) +
         " vdpbf16ps_for_many_rows=" + std::to_string(c.cpu.vdpbf16ps_for_many_rows);
}

TEST(KernelChoiceTest, TheWholeTable) {
  constexpr auto F32 = WeightType::kFloat32;
  constexpr auto BF16 = WeightType::kBfloat16;
  constexpr auto I8 = WeightType::kInt8;
  constexpr auto Many = LinearCall::kManyRows;
  constexpr auto Few = LinearCall::kFewRows;
  const std::vector<Case> cases = {
      // float32: oneDNN for many rows everywhere; our FMA loop for few.
      {F32, 4096, true, Many, kAmx, K::kOneDnnMatmul},
      {F32, 4096, true, Few, kAmx, K::kHwyFewRows},
      {F32, 4096, true, Few, kAvx512Bf16, K::kHwyFewRows},
      {F32, 4096, false, Few, kPlainX86, K::kOneDnnMatmul},
      // bfloat16: tiles where there are tiles (whole k blocks of 32 only)...
      {BF16, 4096, true, Many, kAmx, K::kAmxManyRows},
      {BF16, 4096, true, Few, kAmx, K::kAmxFewRows},
      {BF16, 4098, true, Many, kAmx, K::kOneDnnMatmul},
      {BF16, 4098, true, Few, kAmx, K::kVdpbf16psFewRows},
      // ... VDPBF16PS with AVX512_BF16 (even inputs only), for many rows too but
      // not on Zen 4 ...
      {BF16, 4096, true, Many, kAvx512Bf16, K::kVdpbf16psManyRows},
      {BF16, 4096, true, Few, kAvx512Bf16, K::kVdpbf16psFewRows},
      {BF16, 4096, true, Many, kZen4, K::kOneDnnMatmul},
      {BF16, 4096, true, Few, kZen4, K::kVdpbf16psFewRows},
      {BF16, 7, true, Many, kAvx512Bf16, K::kOneDnnMatmul},
      {BF16, 7, true, Few, kAvx512Bf16, K::kHwyFewRows},
      {F32, 4096, true, Many, kAvx512Bf16, K::kOneDnnMatmul},
      // ... the FMA loop on x rounded to bfloat16 elsewhere ...
      {BF16, 4096, true, Few, kPlainX86, K::kHwyFewRows},
      // ... and oneDNN's matmul when oneDNN packed them in a layout we do not read.
      {BF16, 4096, false, Many, kAmx, K::kOneDnnMatmul},
      {BF16, 4096, false, Few, kAmx, K::kOneDnnMatmul},
      // int8: always our layout.
      {I8, 4096, false, Many, kAmx, K::kInt8AmxManyRows},
      {I8, 4096, true, Few, kAmx, K::kInt8AmxFewRows},
      {I8, 4098, true, Many, kAmx, K::kInt8OneDnnTiles},
      {I8, 4098, true, Few, kAmx, K::kInt8Vdpbf16psFewRows},
      {I8, 4096, true, Many, kAvx512Bf16, K::kInt8OneDnnTiles},
      {I8, 4096, true, Few, kAvx512Bf16, K::kInt8Vdpbf16psFewRows},
      {I8, 7, true, Few, kAvx512Bf16, K::kInt8HwyFewRows},
      {I8, 4096, true, Few, kPlainX86, K::kInt8HwyFewRows},
      {I8, 4096, true, Many, kPlainX86, K::kInt8OneDnnTiles},
  };
  for (const Case& c : cases) {
    EXPECT_STREQ(LinearKernelName(ChooseLinearKernel(c.type, c.in, c.packed_for_few_rows,
                                                     c.call, c.cpu)),
                 LinearKernelName(c.want))
        << Describe(c);
  }
}

TEST(KernelChoiceTest, ThisCpuHasWhatItSays) {
  const CpuFeatures cpu = ThisCpu();
  EXPECT_EQ(cpu.avx512_bf16, __builtin_cpu_supports("avx512bf16") != 0);
  if (cpu.amx_bf16) {
    EXPECT_TRUE(cpu.avx512_bf16);
  }
}

// Which kernel each weight format gets on this CPU, for real weights packed as the
// server packs them (recorded in the test's XML and printed): the same answers as
// the table for this CPU's features.
TEST(KernelChoiceTest, WhatThisCpuRuns) {
  const CpuFeatures cpu = ThisCpu();
  std::printf("this CPU: avx512_bf16=%d amx_bf16=%d\n", cpu.avx512_bf16, cpu.amx_bf16);
  for (const WeightType type :
       {WeightType::kFloat32, WeightType::kBfloat16, WeightType::kInt8}) {
    for (const int64_t in : {int64_t{256}, int64_t{258}, int64_t{7}}) {
      const int64_t out = 128;
      std::vector<float> weight(out * in, 0.25f);
      const LinearWeights w(weight.data(), out, in, /*in_by_out=*/false, nullptr, type);
      for (const LinearCall call : {LinearCall::kManyRows, LinearCall::kFewRows}) {
        const Case c{type, in, w.few_rows_native(), call, cpu, w.kernel(call)};
        const std::string name = LinearKernelName(w.kernel(call));
        std::printf("%s -> %s\n", Describe(c).c_str(), name.c_str());
        RecordProperty(Describe(c), name);
        EXPECT_EQ(w.kernel(call),
                  ChooseLinearKernel(type, in, w.few_rows_native(), call, cpu))
            << Describe(c);
      }
    }
  }
}

}  // namespace
}  // namespace layerserve::kernels
