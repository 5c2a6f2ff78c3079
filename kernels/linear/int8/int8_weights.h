// Internal to the linear kernels: weight-only int8 quantization (WeightType::kInt8),
// its layout and the kernels of kernels/linear/int8/ (and the int8 kernels of
// avx512_bf16/ and amx/) that compute with it. As for linear_internal.h: block
// kernels write only their block columns, may run at once on disjoint ones, throw
// nothing but std::bad_alloc (from scratch buffers) unless they say so, and take
// unchecked sizes (REQUIRES); x and y must not overlap.
//
// Why: a one-token decode step reads every weight once, so at bfloat16 it cannot
// beat the weights' bytes over memory bandwidth; int8 halves the bytes. Weights are
// quantized once, at load, symmetric: w[o][k] ~ q[o][k] * scale[o][k / group], q in
// [-127, 127], scale = max |w| of the group / 127 (0 for an all-zero group). Only
// the weights: activations, biases and sums stay float32 (LinearFewRows), or are
// rounded to bfloat16 for oneDNN's matmul (Linear), as with bfloat16 weights.
#ifndef LAYERSERVE_KERNELS_LINEAR_INT8_H_
#define LAYERSERVE_KERNELS_LINEAR_INT8_H_

#include <cstdint>
#include <cstring>
#include <vector>

namespace layerserve::kernels {
class LinearWeights;
}  // namespace layerserve::kernels

namespace layerserve::kernels::internal {

// Outputs per block of the int8 layout: the few-rows kernels hold one block's sums
// in registers (4 AVX-512 vectors), as they do for oneDNN's layouts.
inline constexpr int64_t kInt8BlockOut = 64;

// The packed weights. Outputs are padded to whole blocks (q and scales 0 there).
//   q:      [out_blocks][in][kInt8BlockOut], a block's 64 outputs of one input
//           side by side (the few-rows kernels load them as vectors);
//   scales: [out_blocks][groups][kInt8BlockOut], likewise.
struct Int8Weights {
  int64_t in = 0, out = 0;
  int64_t group = 0;   // Inputs per scale, 1..in; the last group may be shorter.
  int64_t groups = 0;  // ceil(in / group).
  int64_t out_blocks = 0;
  std::vector<int8_t> q;
  std::vector<float> scales;
  std::vector<float> bias;  // [out], zeros when the layer has none.

  int8_t Q(int64_t o, int64_t k) const {
    return q[((o / kInt8BlockOut) * in + k) * kInt8BlockOut + o % kInt8BlockOut];
  }
  float Scale(int64_t o, int64_t k) const {
    return scales[((o / kInt8BlockOut) * groups + k / group) * kInt8BlockOut +
                  o % kInt8BlockOut];
  }
  // What the kernels multiply by for w[o][k]: float(q) * scale, rounded to float32.
  float Dequantized(int64_t o, int64_t k) const { return float(Q(o, k)) * Scale(o, k); }
  int64_t bytes() const {
    return static_cast<int64_t>(q.size() + scales.size() * sizeof(float) +
                                bias.size() * sizeof(float));
  }
};

// The int8 weights of a kInt8 LinearWeights (empty for other types): for tests.
struct Int8Weights;
const Int8Weights& Int8LayoutOf(const LinearWeights& w);

// Quantizes `weight` ([out, in] row-major, or [in, out] when `in_by_out`) with
// `group_size` inputs per scale (0 or >= in: one scale per output). `bias` [out] or
// null. A group holding a NaN or Inf weight gets a NaN scale (and q 0): every
// weight of it dequantizes to NaN. REQUIRES: in, out >= 1, group_size >= 0.
Int8Weights QuantizeInt8(const float* weight, int64_t out, int64_t in, bool in_by_out,
                         const float* bias, int64_t group_size);

// The weights the kernels compute with, [out, in] row-major: Dequantized(o, k).
std::vector<float> DequantizeInt8(const Int8Weights& w);

// Outputs of 64-output blocks [nb_begin, nb_end) of y[rows, out] = x[rows, in] ·
// W^T + bias with W = DequantizeInt8(w): per output, from the bias, over k in order,
// acc = fma(x[k], float(q) * scale, acc) in float32. The int8 weights are converted
// in registers (Highway: AVX-512, AVX2, ... chosen at run time). Blocks are
// independent: calls for disjoint ranges may run at once on one y. Each row's
// result depends on that row only.
void LinearInt8FewRowsBlocks(const Int8Weights& w, const float* x, int64_t rows,
                             int64_t nb_begin, int64_t nb_end, float* y);

// The scalar twin of LinearInt8FewRowsBlocks, computing the same operations in the
// same order with std::fma (bit-identical wherever the vector kernel fuses its
// multiply-adds, as on AVX2 and AVX-512).
void LinearInt8FewRowsBlocksReference(const Int8Weights& w, const float* x, int64_t rows,
                                      int64_t nb_begin, int64_t nb_end, float* y);

// The same product on CPUs with AVX512_BF16 (FewRowsDpbf16Supported(), in
// linear_internal.h), with Linear's operands: x as PackBfloat16Pairs left it (x
// rounded to bfloat16) and the weights float32(q) * scale rounded to bfloat16, the
// products summed by VDPBF16PS in float32 (kernels/linear/avx512_bf16/int8_few_rows.cc).
// REQUIRES: w.in even (LinearFewRows takes the float32 kernel for odd ones).
// Where the CPU has AMX (FewRowsAmxSupported()) and w.in is a multiple of 32, the
// products and sums run on AMX tiles (TDPBF16PS, kernels/linear/amx/int8_few_rows.cc),
// else on VDPBF16PS; either way the kernel depends on the CPU and w, never on the rows.
// When Int8ScalesGroupSums(w), both kernels take q itself as the weight operands
// (not rounded: int8 is exact in bfloat16) and multiply each group's float32 sums
// by its scales: per output, from the bias, sums = fma(group sum, scale, sums).
void LinearInt8FewRowsDpbf16Blocks(const Int8Weights& w, const uint32_t* x, int64_t rows,
                                   int64_t nb_begin, int64_t nb_end, float* y);
// The two kernels it chooses from, for the tests and benchmarks. AMX: REQUIRES also
// FewRowsAmxSupported() and w.in % 32 == 0.
void LinearInt8FewRowsVdpbf16psBlocks(const Int8Weights& w, const uint32_t* x,
                                      int64_t rows, int64_t nb_begin, int64_t nb_end,
                                      float* y);
void LinearInt8FewRowsAmxBlocks(const Int8Weights& w, const uint32_t* x, int64_t rows,
                                int64_t nb_begin, int64_t nb_end, float* y);

// Whether those kernels scale group sums: the groups end on k blocks of 32 (the AMX
// kernel's; the VDPBF16PS kernel follows, so that both compute the same sums).
inline bool Int8ScalesGroupSums(const Int8Weights& w) { return w.group % 32 == 0; }

// Their reference: x rounded to bfloat16, the weights float32(q) * scale rounded to
// bfloat16 (or, with `exact_weights`, not rounded: the group-scaled kernels'),
// products and sums in double, rounded once.
void LinearInt8Bfloat16Reference(const Int8Weights& w, const float* x, int64_t rows,
                                 bool exact_weights, float* y);

// Float32ToBfloat16 (common/dtype.h), inline so the dequantizing loops vectorize.
// Exact for finite values; the only NaN a dequantized weight can be (0 times a NaN
// scale, 0x7FC00000 or its negative) stays a NaN.
inline uint16_t FiniteToBfloat16(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof bits);
  return static_cast<uint16_t>((bits + 0x7FFFu + ((bits >> 16) & 1u)) >> 16);
}

// Dequantizes block columns [nb_begin, nb_end) to bfloat16 (float(q) * scale rounded
// to nearest even) as a dense [in][(nb_end - nb_begin) * 64] matrix, the `ab`
// layout of oneDNN's weights {in, columns}: Linear's tiles for its bfloat16 matmul.
void DequantizeInt8ToBfloat16(const Int8Weights& w, int64_t nb_begin, int64_t nb_end,
                              uint16_t* dst);

// Dequantizes block columns [nb_begin, nb_end) like DequantizeInt8ToBfloat16, into
// oneDNN's BA16a64b2a layout for bfloat16 weights {in, columns}: 32 k x 64 n blocks
// holding k pairs side by side, element (k, n) of block column nb - nb_begin at
// dst[(nb - nb_begin) * n_block_stride + (k / 32) * k_block_stride +
// (k % 32 / 2) * 128 + 2 * n + k % 2]. k past `in` is not written, except the pair
// partner of an odd `in`'s last k, written 0. Vectorized with Highway (any x86
// target, chosen at run time); the reference is the same loop one value at a time.
// REQUIRES: dst 4-byte aligned (written as 32-bit pairs).
void DequantizeInt8Blocked(const Int8Weights& w, int64_t nb_begin, int64_t nb_end,
                           int64_t k_block_stride, int64_t n_block_stride, uint16_t* dst);
void DequantizeInt8BlockedReference(const Int8Weights& w, int64_t nb_begin,
                                    int64_t nb_end, int64_t k_block_stride,
                                    int64_t n_block_stride, uint16_t* dst);

// Linear's product for int8 weights, block columns [nb_begin, nb_end) of y[rows,
// out] = x · W^T + bias, x [rows, in] already rounded to bfloat16: the block
// columns are dequantized to bfloat16 (DequantizeInt8ToBfloat16) kInt8TileBlocks
// at a time into this thread's buffer, each tile then one oneDNN bfloat16 matmul
// (so this one allocates, and throws dnnl::error or std::bad_alloc).
// Why not oneDNN's int8 matmul: it multiplies int8 by int8, the activations would
// have to be quantized too.
inline constexpr int64_t kInt8TileBlocks = 4;
void LinearInt8ManyRows(const Int8Weights& w, const uint16_t* x, int64_t rows,
                        int64_t nb_begin, int64_t nb_end, float* y);

// The same tiles multiplied by Linear's bfloat16 AMX kernel (LinearManyRowsAmxBlocks,
// sums from the bias), on CPUs that run it on bfloat16 weights of w.in inputs
// (Int8AmxRunsLinear); chosen because it beat oneDNN's matmul on the same tiles, see
// docs/perf/2026-12-06-kernel-choices.md. x as PackAmxRowTiles leaves it.
bool Int8AmxRunsLinear(const Int8Weights& w);
void LinearInt8ManyRowsAmx(const Int8Weights& w, const uint32_t* x_tiles, int64_t rows,
                           int64_t nb_begin, int64_t nb_end, float* y);

}  // namespace layerserve::kernels::internal

#endif  // LAYERSERVE_KERNELS_LINEAR_INT8_H_
