// The int8 weights' conversion both kernels on bfloat16 operands share (VDPBF16PS,
// kernels/linear/avx512_bf16/int8_few_rows.cc; AMX, kernels/linear/amx/int8_few_rows.cc):
// two inputs k, k + 1 of 16 outputs, converted in registers to float32, multiplied by
// their scales, rounded to bfloat16 and interleaved into the k pairs both instructions
// multiply with x's pairs (PackBfloat16Pairs). Include only from files compiled for
// AVX512_BF16, and run nothing here before FewRowsDpbf16Supported() says yes.
#ifndef LAYERSERVE_KERNELS_LINEAR_INT8_BF16_PAIRS_H_
#define LAYERSERVE_KERNELS_LINEAR_INT8_BF16_PAIRS_H_

#include <immintrin.h>

#include <cstdint>

#include "kernels/linear/int8/int8_weights.h"

namespace layerserve::kernels::internal {

// 16 weights of one input (one vector of outputs) as float32. The zero-masking
// forms with every lane kept compile to the same instructions: GCC 12 builds the
// plain ones on _mm512_undefined_*() and warns (falsely) that it may be used
// uninitialized wherever they are inlined.
inline __m512 Int8ToFloat(const int8_t* q) {
  const __m128i bytes = _mm_loadu_si128(reinterpret_cast<const __m128i*>(q));
  constexpr __mmask16 kAll = 0xFFFF;
  return _mm512_maskz_cvtepi32_ps(kAll, _mm512_maskz_cvtepi8_epi32(kAll, bytes));
}

// The same times their scales.
inline __m512 Int8TimesScales(const int8_t* q, const float* scale) {
  return _mm512_mul_ps(Int8ToFloat(q), _mm512_loadu_ps(scale));
}

// The 32 bfloat16 of a k pair of 16 outputs: word 2i is output i's weight of the even
// input (low half of dword i), word 2i + 1 its weight of the odd one.
inline __m512i Int8PairToBfloat16(const int8_t* even_q, const float* even_scale,
                                  const int8_t* odd_q, const float* odd_scale) {
  // _mm512_cvtne2ps_pbh puts the odd input's 16 values after the even one's.
  const __m512i interleave =
      _mm512_set_epi16(31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10, 25, 9, 24, 8, 23,
                       7, 22, 6, 21, 5, 20, 4, 19, 3, 18, 2, 17, 1, 16, 0);
  const __m512bh pair = _mm512_cvtne2ps_pbh(Int8TimesScales(odd_q, odd_scale),
                                            Int8TimesScales(even_q, even_scale));
  return _mm512_permutexvar_epi16(interleave, (__m512i)pair);
}

// The same pairs of q itself, unscaled: an int8 value is exact in bfloat16, so each
// float32's high half is its bfloat16; a shift and a blend replace the scaling,
// rounding and permute of Int8PairToBfloat16 (7 instructions per pair against 9;
// the caller multiplies the sums by the scales instead).
inline __m512i Int8PairToExactBfloat16(const int8_t* even_q, const int8_t* odd_q) {
  const __m512i even = _mm512_castps_si512(Int8ToFloat(even_q));
  const __m512i odd = _mm512_castps_si512(Int8ToFloat(odd_q));
  // Even words: the even input's high half, shifted down; odd words: the odd one's.
  // (The zero-masking shift for the reason Int8ToFloat gives.)
  return _mm512_mask_blend_epi16(0xAAAAAAAAu, _mm512_maskz_srli_epi32(0xFFFF, even, 16),
                                 odd);
}

// Prefetches into L2, kInt8PrefetchBytes ahead, the weights of k pair `even_q`
// starts (two 64-byte rows: inputs k and k + 1 of a block's 64 outputs). Why: the
// hardware prefetchers alone ran too short a distance ahead of the conversion
// (as for the bfloat16 VDPBF16PS kernel, its kPrefetchBytes). Chosen because both
// kernels took less time with it, see docs/perf/2026-12-02-int8-group-sums-on-amx.md.
// Blocks follow each other in q, so this reads on into the next block column; past
// the weights' end it is only a hint.
inline constexpr uintptr_t kInt8PrefetchBytes = 32 << 10;
inline void PrefetchPair(const int8_t* even_q) {
  const auto at = reinterpret_cast<uintptr_t>(even_q) + kInt8PrefetchBytes;
  _mm_prefetch(reinterpret_cast<const char*>(at), _MM_HINT_T1);
  _mm_prefetch(reinterpret_cast<const char*>(at + kInt8BlockOut), _MM_HINT_T1);
}

// The scale rows of inputs k and k + 1 of one block, followed as k grows by pairs
// (a 64-bit division per pair cost more than the conversion).
class ScaleGroupCursor {
 public:
  ScaleGroupCursor(const Int8Weights& w, const float* block_scales)
      : scales_(block_scales), size_(w.group), next_k_(w.group) {}
  // REQUIRES: k even, not below the k of the last call.
  void At(int64_t k, const float** even, const float** odd) {
    while (k >= next_k_) {
      ++group_;
      next_k_ += size_;
    }
    *even = scales_ + group_ * kInt8BlockOut;
    *odd = scales_ + (k + 1 < next_k_ ? group_ : group_ + 1) * kInt8BlockOut;
  }

 private:
  const float* const scales_;
  const int64_t size_;
  int64_t group_ = 0, next_k_;
};

}  // namespace layerserve::kernels::internal

#endif  // LAYERSERVE_KERNELS_LINEAR_INT8_BF16_PAIRS_H_
