// LinearInt8FewRowsBlocks' twin for CPUs with AVX512_BF16 (this file is compiled for
// it, so nothing here may run before FewRowsDpbf16Supported() says yes): the int8
// weights of two inputs k, k + 1 are converted in registers to float32, multiplied
// by their scales, rounded to bfloat16 and interleaved into the k pairs VDPBF16PS
// multiplies with x's pairs (PackBfloat16Pairs; linear_int8_bf16_pairs.h).
//
// Why: the float32 FMA kernel converts the weights once per 4-row tile and spends
// an FMA per weight and row, so 16 decode sessions cost ~4x one; here a weight pair
// costs 8 instructions once per up to 6 rows plus one VDPBF16PS per row (2 products).
// The operands are then Linear's for int8 weights: x and float32(q) * scale rounded
// to bfloat16, with float32 sums. Like oneDNN's bfloat16 matmul (the same
// instruction), VDPBF16PS treats subnormal inputs as zero.
#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "kernels/linear_int8.h"
#include "kernels/linear_int8_bf16_pairs.h"
#include "kernels/linear_internal.h"

namespace layerserve::kernels::internal {
namespace {

constexpr int64_t kVecs = kInt8BlockOut / 16;  // 4 vectors of 16 outputs.
constexpr int64_t kRowTile = 6;  // 24 accumulators + 4 weight vectors: 28 of 32.

template <int64_t kTile>
void Tile(const Int8Weights& w, const uint32_t* x, int64_t pairs, int64_t nb, float* y) {
  const int64_t n0 = nb * kInt8BlockOut;
  __m512 acc[kTile][kVecs];
  for (int64_t v = 0; v < kVecs; ++v) {
    alignas(64) float bias[16];
    for (int64_t l = 0; l < 16; ++l) {
      const int64_t n = n0 + v * 16 + l;
      bias[l] = n < w.out ? w.bias[n] : 0.0f;
    }
    for (int64_t m = 0; m < kTile; ++m) acc[m][v] = _mm512_load_ps(bias);
  }
  const int8_t* q = w.q.data() + nb * w.in * kInt8BlockOut;
  ScaleGroupCursor cursor(w, w.scales.data() + nb * w.groups * kInt8BlockOut);
  for (int64_t p = 0; p < pairs; ++p) {
    const int64_t k = 2 * p;
    const float *even_scale, *odd_scale;
    cursor.At(k, &even_scale, &odd_scale);
    __m512i wv[kVecs];
    for (int64_t v = 0; v < kVecs; ++v) {
      wv[v] =
          Int8PairToBfloat16(q + k * kInt8BlockOut + v * 16, even_scale + v * 16,
                             q + (k + 1) * kInt8BlockOut + v * 16, odd_scale + v * 16);
    }
    for (int64_t m = 0; m < kTile; ++m) {
      const __m512i xp = _mm512_set1_epi32(static_cast<int>(x[m * pairs + p]));
      for (int64_t v = 0; v < kVecs; ++v) {
        acc[m][v] = _mm512_dpbf16_ps(acc[m][v], (__m512bh)wv[v], (__m512bh)xp);
      }
    }
  }
  const int64_t columns = std::min(kInt8BlockOut, w.out - n0);
  for (int64_t m = 0; m < kTile; ++m) {
    alignas(64) float all[kInt8BlockOut];
    for (int64_t v = 0; v < kVecs; ++v) _mm512_store_ps(all + v * 16, acc[m][v]);
    std::memcpy(y + m * w.out + n0, all, columns * sizeof(float));
  }
}

}  // namespace

void LinearInt8FewRowsDpbf16Blocks(const Int8Weights& w, const uint32_t* x, int64_t rows,
                                   int64_t nb_begin, int64_t nb_end, float* y) {
  // As for bfloat16 weights (linear_few_rows_dpbf16.cc): where the CPU has AMX,
  // tiles; not for a partial last k block, where the A tile would read the next row.
  if (w.in % 32 == 0 && FewRowsAmxSupported()) {
    return LinearInt8FewRowsAmxBlocks(w, x, rows, nb_begin, nb_end, y);
  }
  LinearInt8FewRowsVdpbf16psBlocks(w, x, rows, nb_begin, nb_end, y);
}

void LinearInt8FewRowsVdpbf16psBlocks(const Int8Weights& w, const uint32_t* x,
                                      int64_t rows, int64_t nb_begin, int64_t nb_end,
                                      float* y) {
  const int64_t pairs = w.in / 2;
  for (int64_t nb = nb_begin; nb < nb_end; ++nb) {
    int64_t m = 0;
    for (; m + kRowTile <= rows; m += kRowTile) {
      Tile<kRowTile>(w, x + m * pairs, pairs, nb, y + m * w.out);
    }
    const uint32_t* xm = x + m * pairs;
    float* ym = y + m * w.out;
    switch (rows - m) {
      case 5:
        Tile<5>(w, xm, pairs, nb, ym);
        break;
      case 4:
        Tile<4>(w, xm, pairs, nb, ym);
        break;
      case 3:
        Tile<3>(w, xm, pairs, nb, ym);
        break;
      case 2:
        Tile<2>(w, xm, pairs, nb, ym);
        break;
      case 1:
        Tile<1>(w, xm, pairs, nb, ym);
        break;
      default:
        break;
    }
  }
}

}  // namespace layerserve::kernels::internal
