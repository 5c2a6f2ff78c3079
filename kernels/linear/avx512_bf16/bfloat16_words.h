// float32 to bfloat16 words sixteen at a time with AVX-512, for the kernels that
// multiply bfloat16 pairs (kernels/linear/avx512_bf16/few_rows.cc packs rows of them,
// kernels/linear/amx/many_rows.cc AMX tiles, 32 values at a time), one copy of the
// rounding for both. Include only from files compiled for AVX-512 (-mavx512f -mavx512bw).
#ifndef LAYERSERVE_KERNELS_BFLOAT16_WORDS_AVX512_H_
#define LAYERSERVE_KERNELS_BFLOAT16_WORDS_AVX512_H_

#include <immintrin.h>

#include <cstdint>

#include "common/dtype.h"

namespace layerserve::kernels::internal {

// The `n` values rounded to bfloat16 in order, each word Float32ToBfloat16's: its
// integer rounding (not VCVTNE2PS2BF16, which flushes subnormals), NaN kept quiet.
// No alignment needed; values and out must not overlap. Thread-safe.
inline void RoundToBfloat16Words(const float* values, int64_t n, uint16_t* out) {
  const __m512i magnitude = _mm512_set1_epi32(0x7FFFFFFF),
                inf = _mm512_set1_epi32(0x7F800000);
  const __m512i half = _mm512_set1_epi32(0x7FFF), one = _mm512_set1_epi32(1);
  const __m512i quiet = _mm512_set1_epi32(0x0040);
  // The zero-masked forms: GCC 12's plain ones read an "undefined" register and
  // warn (-Wmaybe-uninitialized) wherever they are inlined.
  constexpr __mmask16 kAll = 0xFFFF;
  int64_t k = 0;
  for (; k + 16 <= n; k += 16) {
    const __m512i u = _mm512_loadu_si512(values + k);
    const __m512i high = _mm512_maskz_srli_epi32(kAll, u, 16);
    const __m512i rounded = _mm512_maskz_srli_epi32(
        kAll, _mm512_add_epi32(u, _mm512_add_epi32(half, _mm512_and_si512(high, one))),
        16);
    const __mmask16 nan = _mm512_cmpgt_epu32_mask(_mm512_and_si512(u, magnitude), inf);
    const __m512i bits = _mm512_mask_or_epi32(rounded, nan, high, quiet);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + k),
                        _mm512_maskz_cvtepi32_epi16(kAll, bits));
  }
  for (; k < n; ++k) out[k] = Float32ToBfloat16(values[k]);
}

}  // namespace layerserve::kernels::internal

#endif  // LAYERSERVE_KERNELS_BFLOAT16_WORDS_AVX512_H_
