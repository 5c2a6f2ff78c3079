// LinearInt8FewRowsBlocks' twin for CPUs with AVX512_BF16 (this file is compiled for
// it, so nothing here may run before FewRowsDpbf16Supported() says yes): the int8
// weights of two inputs k, k + 1 are converted in registers to float32, multiplied
// by their scales, rounded to bfloat16 and interleaved into the k pairs VDPBF16PS
// multiplies with x's pairs (PackBfloat16Pairs; kernels/linear/int8/bf16_pairs.h).
//
// Why: the float32 FMA kernel converts the weights once per 4-row tile and spends
// an FMA per weight and row, so 16 decode sessions cost ~4x one; here a weight pair
// costs 9 instructions once per up to 6 rows plus one VDPBF16PS per row (2 products).
// The operands are then Linear's for int8 weights: x and float32(q) * scale rounded
// to bfloat16, with float32 sums. When the groups are whole k blocks of 32
// (Int8ScalesGroupSums), as the AMX kernel does: q itself, exact in bfloat16 (7
// instructions a pair), and each group's sums times its scales. Like oneDNN's
// bfloat16 matmul (the same instruction), VDPBF16PS treats subnormal inputs as zero.
#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "kernels/linear/int8/bf16_pairs.h"
#include "kernels/linear/int8/int8_weights.h"
#include "kernels/linear/linear_internal.h"

namespace layerserve::kernels::internal {
namespace {

constexpr int64_t kVecs = kInt8BlockOut / 16;  // 4 vectors of 16 outputs.
constexpr int64_t kRowTile = 6;  // 24 accumulators + 4 weight vectors: 28 of 32.

// With kScaleSums (Int8ScalesGroupSums(w)), x times q itself: per group the
// registers sum from zero and are then multiplied by the group's scales into the
// row's sums (in memory, from the bias); else x times float32(q) * scale rounded to
// bfloat16, summed in the registers from the bias.
template <int64_t kTile, bool kScaleSums>
void Tile(const Int8Weights& w, const uint32_t* x, int64_t pairs, int64_t nb, float* y) {
  const int64_t n0 = nb * kInt8BlockOut;
  const int64_t columns = std::min(kInt8BlockOut, w.out - n0);
  alignas(64) float sums[kTile][kInt8BlockOut];
  for (int64_t m = 0; m < kTile; ++m) {
    std::fill(std::copy_n(w.bias.data() + n0, columns, sums[m]), sums[m] + kInt8BlockOut,
              0.0f);
  }
  __m512 acc[kTile][kVecs];
  auto start = [&] {
    for (int64_t m = 0; m < kTile; ++m) {
      for (int64_t v = 0; v < kVecs; ++v) {
        acc[m][v] = kScaleSums ? _mm512_setzero_ps() : _mm512_load_ps(&sums[m][v * 16]);
      }
    }
  };
  auto multiply = [&](int64_t p, const __m512i(&wv)[kVecs]) {
    for (int64_t m = 0; m < kTile; ++m) {
      const __m512i xp = _mm512_set1_epi32(static_cast<int>(x[m * pairs + p]));
      for (int64_t v = 0; v < kVecs; ++v) {
        acc[m][v] = _mm512_dpbf16_ps(acc[m][v], (__m512bh)wv[v], (__m512bh)xp);
      }
    }
  };
  const int8_t* q = w.q.data() + nb * w.in * kInt8BlockOut;
  const float* scales = w.scales.data() + nb * w.groups * kInt8BlockOut;
  if constexpr (kScaleSums) {
    const int64_t group_pairs = w.group / 2;
    for (int64_t g = 0; g < w.groups; ++g) {
      start();
      for (int64_t p = g * group_pairs; p < std::min(pairs, (g + 1) * group_pairs); ++p) {
        PrefetchPair(q + 2 * p * kInt8BlockOut);
        __m512i wv[kVecs];
        for (int64_t v = 0; v < kVecs; ++v) {
          wv[v] = Int8PairToExactBfloat16(q + 2 * p * kInt8BlockOut + v * 16,
                                          q + (2 * p + 1) * kInt8BlockOut + v * 16);
        }
        multiply(p, wv);
      }
      for (int64_t v = 0; v < kVecs; ++v) {
        const __m512 scale = _mm512_loadu_ps(scales + g * kInt8BlockOut + v * 16);
        for (int64_t m = 0; m < kTile; ++m) {
          _mm512_store_ps(
              &sums[m][v * 16],
              _mm512_fmadd_ps(acc[m][v], scale, _mm512_load_ps(&sums[m][v * 16])));
        }
      }
    }
  } else {
    start();
    ScaleGroupCursor cursor(w, scales);
    for (int64_t p = 0; p < pairs; ++p) {
      const int64_t k = 2 * p;
      const float *even_scale, *odd_scale;
      cursor.At(k, &even_scale, &odd_scale);
      PrefetchPair(q + k * kInt8BlockOut);
      __m512i wv[kVecs];
      for (int64_t v = 0; v < kVecs; ++v) {
        wv[v] =
            Int8PairToBfloat16(q + k * kInt8BlockOut + v * 16, even_scale + v * 16,
                               q + (k + 1) * kInt8BlockOut + v * 16, odd_scale + v * 16);
      }
      multiply(p, wv);
    }
    for (int64_t m = 0; m < kTile; ++m) {
      for (int64_t v = 0; v < kVecs; ++v) _mm512_store_ps(&sums[m][v * 16], acc[m][v]);
    }
  }
  for (int64_t m = 0; m < kTile; ++m) {
    std::memcpy(y + m * w.out + n0, sums[m], columns * sizeof(float));
  }
}

// Rows [0, rows) of block column nb in tiles of kRowTile rows and one of the rest.
template <bool kScaleSums>
void Column(const Int8Weights& w, const uint32_t* x, int64_t rows, int64_t nb, float* y) {
  const int64_t pairs = w.in / 2;
  int64_t m = 0;
  for (; m + kRowTile <= rows; m += kRowTile) {
    Tile<kRowTile, kScaleSums>(w, x + m * pairs, pairs, nb, y + m * w.out);
  }
  WithTileRows<kRowTile - 1>(rows - m, [&](auto tile_rows) {
    Tile<decltype(tile_rows)::value, kScaleSums>(w, x + m * pairs, pairs, nb,
                                                 y + m * w.out);
  });
}

}  // namespace

void LinearInt8FewRowsVdpbf16psBlocks(const Int8Weights& w, const uint32_t* x,
                                      int64_t rows, int64_t nb_begin, int64_t nb_end,
                                      float* y) {
  const bool scale_sums = Int8ScalesGroupSums(w);
  for (int64_t nb = nb_begin; nb < nb_end; ++nb) {
    if (scale_sums) {
      Column<true>(w, x, rows, nb, y);
    } else {
      Column<false>(w, x, rows, nb, y);
    }
  }
}

}  // namespace layerserve::kernels::internal
