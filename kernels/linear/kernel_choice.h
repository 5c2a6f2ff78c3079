// The one place that chooses which implementation computes a linear layer's
// product: ChooseLinearKernel, from the weight format, the kind of call and the
// CPU's features. Each implementation lives in the sub-folder of kernels/linear/
// its comment names.
//
// The choice never depends on how many rows share a call (nor on which rows): a
// row's bits must not change with batching. It is made once per weights, at
// packing (LinearWeights::kernel). Every function here is thread-safe and never
// throws. Why each rule: the comments in kernel_choice.cc.
#ifndef LAYERSERVE_KERNELS_LINEAR_KERNEL_CHOICE_H_
#define LAYERSERVE_KERNELS_LINEAR_KERNEL_CHOICE_H_

#include <cstdint>

#include "kernels/linear/linear.h"

namespace layerserve::kernels {

enum class LinearKernel {
  // Linear():
  kOneDnnMatmul,       // oneDNN's matmul on the packed weights (linear.cc)
  kAmxManyRows,        // amx/many_rows.cc
  kInt8OneDnnTiles,    // int8/many_rows.cc: dequantized tiles, oneDNN's bfloat16 matmul
  kInt8AmxManyRows,    // int8/many_rows.cc: dequantized tiles, amx/many_rows.cc
  kVdpbf16psManyRows,  // avx512_bf16/few_rows.cc, in passes of rows (linear.cc)
  // LinearFewRows():
  kHwyFewRows,            // hwy/few_rows.cc: float32 FMA (bfloat16 weights: x rounded)
  kVdpbf16psFewRows,      // avx512_bf16/few_rows.cc
  kAmxFewRows,            // amx/few_rows.cc
  kInt8HwyFewRows,        // int8/few_rows.cc
  kInt8Vdpbf16psFewRows,  // avx512_bf16/int8_few_rows.cc
  kInt8AmxFewRows,        // amx/int8_few_rows.cc
};

// The enumerator's name without its k ("AmxFewRows"), for logs and tests.
const char* LinearKernelName(LinearKernel kernel);

// Linear()'s many rows (prefill) or LinearFewRows()' few (decode steps).
enum class LinearCall { kManyRows, kFewRows };

struct CpuFeatures {
  bool avx512_bf16 = false;  // VDPBF16PS
  // AMX-BF16 tiles (with AVX512_BF16), and the OS lets this process use them.
  bool amx_bf16 = false;
  // Whether the VDPBF16PS few-rows kernel prefetches its weights in software
  // (avx512_bf16/few_rows.cc): not on AMD's family 19h, whose only AVX512_BF16 CPUs
  // are Zen 4, where the hardware prefetchers alone took 9-28% less time at 1 to 8
  // rows (docs/perf/2026-12-06-decode-step-overlap.md). The same bits either way.
  bool prefetch_few_rows_weights = true;
  // Whether Linear() runs the VDPBF16PS kernel (kVdpbf16psManyRows) for bfloat16
  // weights instead of oneDNN's matmul, where there is no AMX: on Zen 5 it took
  // 0.85-0.95x oneDNN 2.6's time at 128 and 512 rows of the 8B-shaped block's
  // products, 0.72-0.88x at 2048 in passes of 256 rows
  // (docs/perf/2026-12-07-one-kernel-for-every-row.md), and a row then has
  // the same bits through Linear and LinearFewRows. Not on AMD's family 19h (Zen 4),
  // where it was never measured against oneDNN.
  bool vdpbf16ps_for_many_rows = true;
};

// This CPU's, asked once. Thread-safe.
CpuFeatures ThisCpu();

// `in`: the weights' inputs. `packed_for_few_rows`: whether float32 or bfloat16
// weights are in the blocked layout the few-rows and AMX kernels read
// (FewRowsWeights; oneDNN chooses the layout, so on some CPUs they are not);
// ignored for int8, which is always ours. LinearFewRows() on weights not so packed
// runs Linear(): the answer is then kOneDnnMatmul. Pure: the same arguments give the
// same kernel on any machine (tests pass any CpuFeatures).
LinearKernel ChooseLinearKernel(WeightType type, int64_t in, bool packed_for_few_rows,
                                LinearCall call, CpuFeatures cpu);

}  // namespace layerserve::kernels

#endif  // LAYERSERVE_KERNELS_LINEAR_KERNEL_CHOICE_H_
