// LinearInt8FewRowsBlocks' twin for CPUs with AVX512_BF16 (this file alone is
// compiled for it, so nothing here may run before FewRowsDpbf16Supported() says
// yes): the int8 weights of two inputs k, k + 1 are converted in registers to
// float32, multiplied by their scales, rounded to bfloat16 and interleaved into the
// k pairs VDPBF16PS multiplies with x's pairs (PackBfloat16Pairs).
//
// Why: the float32 FMA kernel converts the weights once per 4-row tile and spends
// an FMA per weight and row, so 16 decode sessions cost ~4x one; here a weight pair
// costs 8 instructions once per up to 16 rows plus one VDPBF16PS per row (2
// products).
// The operands are then Linear's for int8 weights: x and float32(q) * scale rounded
// to bfloat16, with float32 sums. Like oneDNN's bfloat16 matmul (the same
// instruction), VDPBF16PS treats subnormal inputs as zero.
#include <immintrin.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>
#include <utility>

#include "kernels/linear_int8.h"

namespace layerserve::kernels::internal {
namespace {

// Up to 16 rows share one pass over 16 outputs: 16 accumulators, so the weights are
// converted once per call up to 16 rows (at 6 rows x 64 outputs a tile, 16 rows
// converted them 3 times and cost 2.4x one row).
constexpr int64_t kRowTile = 16;

// 16 weights of input k (outputs of one vector) as float32 times their scales.
inline __m512 Weights(const int8_t* q, const float* scale) {
  const __m128i bytes = _mm_loadu_si128(reinterpret_cast<const __m128i*>(q));
  return _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(bytes)),
                       _mm512_loadu_ps(scale));
}

// Rows [0, kTile) of x against the 16 outputs n0 + [0, 16) (n0 = 64 nb + 16 v).
template <int64_t kTile>
void Tile(const Int8Weights& w, const uint32_t* x, int64_t pairs, int64_t nb, int64_t v,
          float* y) {
  const int64_t n0 = nb * kInt8BlockOut + v * 16;
  alignas(64) float bias[16];
  for (int64_t l = 0; l < 16; ++l) bias[l] = n0 + l < w.out ? w.bias[n0 + l] : 0.0f;
  __m512 acc[kTile];
  for (int64_t m = 0; m < kTile; ++m) acc[m] = _mm512_load_ps(bias);
  // Word i of the interleaved pair: bfloat16 i of the even input (low half), then
  // bfloat16 i of the odd one (high half); _mm512_cvtne2ps_pbh puts the odd input's
  // 16 values after the even one's.
  const __m512i interleave =
      _mm512_set_epi16(31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10, 25, 9, 24, 8, 23,
                       7, 22, 6, 21, 5, 20, 4, 19, 3, 18, 2, 17, 1, 16, 0);
  const int8_t* q = w.q.data() + nb * w.in * kInt8BlockOut + v * 16;
  const float* scales = w.scales.data() + nb * w.groups * kInt8BlockOut + v * 16;
  for (int64_t p = 0; p < pairs; ++p) {
    const int64_t k = 2 * p;
    const __m512 even =
        Weights(q + k * kInt8BlockOut, scales + (k / w.group) * kInt8BlockOut);
    const __m512 odd = Weights(q + (k + 1) * kInt8BlockOut,
                               scales + ((k + 1) / w.group) * kInt8BlockOut);
    const __m512i wv =
        _mm512_permutexvar_epi16(interleave, (__m512i)_mm512_cvtne2ps_pbh(odd, even));
    for (int64_t m = 0; m < kTile; ++m) {
      const __m512i xp = _mm512_set1_epi32(static_cast<int>(x[m * pairs + p]));
      acc[m] = _mm512_dpbf16_ps(acc[m], (__m512bh)wv, (__m512bh)xp);
    }
  }
  const int64_t columns = std::min<int64_t>(16, w.out - n0);
  for (int64_t m = 0; m < kTile; ++m) {
    alignas(64) float all[16];
    _mm512_store_ps(all, acc[m]);
    std::memcpy(y + m * w.out + n0, all, columns * sizeof(float));
  }
}

using TileFunction = void (*)(const Int8Weights&, const uint32_t*, int64_t, int64_t,
                              int64_t, float*);

// Tile<1> ... Tile<kRowTile>, indexed by rows - 1.
template <size_t... kRows>
constexpr std::array<TileFunction, sizeof...(kRows)> Tiles(
    std::index_sequence<kRows...>) {
  return {&Tile<static_cast<int64_t>(kRows) + 1>...};
}
constexpr auto kTiles = Tiles(std::make_index_sequence<kRowTile>());

}  // namespace

void LinearInt8FewRowsDpbf16Blocks(const Int8Weights& w, const uint32_t* x, int64_t rows,
                                   int64_t nb_begin, int64_t nb_end, float* y) {
  const int64_t pairs = w.in / 2;
  for (int64_t nb = nb_begin; nb < nb_end; ++nb) {
    // Vectors past the last output hold padding only: skip them.
    const int64_t vectors = std::min<int64_t>(4, (w.out - nb * kInt8BlockOut + 15) / 16);
    for (int64_t v = 0; v < vectors; ++v) {
      for (int64_t m = 0; m < rows; m += kRowTile) {
        const int64_t tile = std::min(kRowTile, rows - m);
        kTiles[tile - 1](w, x + m * pairs, pairs, nb, v, y + m * w.out);
      }
    }
  }
}

}  // namespace layerserve::kernels::internal
