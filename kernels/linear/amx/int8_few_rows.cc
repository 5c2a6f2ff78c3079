// LinearInt8FewRowsDpbf16Blocks with AMX tiles (TDPBF16PS), on CPUs and kernels that
// allow them (this file is compiled for AMX, so nothing here may run before
// FewRowsAmxSupported() says yes).
//
// Why: on the Xeons with AMX, VDPBF16PS is slow (kernels/linear/amx/few_rows.cc), so the
// VDPBF16PS kernel made a 16-session decode step cost 3x bfloat16's; with tiles 16
// rows cost about what one does. Each k block (32 inputs) of a 64-output block is
// converted in registers (kernels/linear/int8/bf16_pairs.h) into a 4 KiB buffer laid out
// as oneDNN packs bfloat16 weights, which stays in L1, and the tile steps
// (kernels/linear/amx/tiles.h) read it as the bfloat16 kernel reads the packed weights.
//
// Two ways to apply the scales (Int8ScalesGroupSums):
//  - groups in whole k blocks: the tiles multiply x by q itself (exact in bfloat16)
//    and each group's sums, stored, are multiplied by its scales into the row's
//    float32 sums. The conversion is then the whole cost of a one-session step, and
//    this one takes 7 instructions per 32 weights where scaling first takes 9.
//  - other groups (a group boundary inside a k block): the VDPBF16PS kernel's
//    operands, float32(q) * scale rounded to bfloat16.
#include <algorithm>
#include <cstdint>
#include <cstring>

#include "kernels/linear/amx/tiles.h"
#include "kernels/linear/int8/bf16_pairs.h"
#include "kernels/linear/int8/int8_weights.h"

namespace layerserve::kernels::internal {
namespace {

static_assert(kInt8BlockOut == amx::kBlockOut);
constexpr int64_t kPairs = amx::kKBlock / 2;
using KBlock = uint16_t[kPairs][amx::kPairRow];

// k block kb of block column nb, unscaled, into `block`.
void ConvertExact(const Int8Weights& w, int64_t nb, int64_t kb, KBlock& block) {
  const int8_t* q = w.q.data() + (nb * w.in + kb * amx::kKBlock) * kInt8BlockOut;
  for (int64_t p = 0; p < kPairs; ++p) {
    PrefetchPair(q + 2 * p * kInt8BlockOut);
    for (int64_t v = 0; v < kInt8BlockOut / 16; ++v) {
      _mm512_store_si512(
          &block[p][v * 32],
          Int8PairToExactBfloat16(q + 2 * p * kInt8BlockOut + v * 16,
                                  q + (2 * p + 1) * kInt8BlockOut + v * 16));
    }
  }
}

// Rows [m, m + rows) of block column nb: per group, the tiles' sums of x times q,
// then sums = fma(group sums, the group's scales, sums) from the bias, in float32.
void GroupScaledColumn(const Int8Weights& w, const uint32_t* x, int64_t nb, int64_t m,
                       int64_t rows, float* y) {
  const int64_t pairs = w.in / 2, n0 = nb * kInt8BlockOut;
  const int64_t columns = std::min(kInt8BlockOut, w.out - n0);
  // Only the rows' sums are set (zeroing all 16 rows showed in a one-row profile).
  alignas(64) float sums[amx::kTileRows][kInt8BlockOut];
  alignas(64) float group_sums[amx::kTileRows][kInt8BlockOut];
  for (int64_t r = 0; r < rows; ++r) {
    std::fill(std::copy_n(w.bias.data() + n0, columns, sums[r]), sums[r] + kInt8BlockOut,
              0.0f);
  }
  alignas(64) KBlock block;
  for (int64_t g = 0; g < w.groups; ++g) {
    const int64_t kb_begin = g * w.group / amx::kKBlock;
    const int64_t kb_end = std::min(w.in, (g + 1) * w.group) / amx::kKBlock;
    amx::ZeroSums();
    for (int64_t kb = kb_begin; kb < kb_end; ++kb) {
      ConvertExact(w, nb, kb, block);
      amx::MultiplyKBlock(x + m * pairs + kb * kPairs, pairs * 4, &block[0][0]);
    }
    amx::StoreSums(&group_sums[0][0], kInt8BlockOut, 0, kInt8BlockOut, rows);
    const float* scales = w.scales.data() + (nb * w.groups + g) * kInt8BlockOut;
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t v = 0; v < kInt8BlockOut; v += 16) {
        _mm512_store_ps(&sums[r][v], _mm512_fmadd_ps(_mm512_load_ps(&group_sums[r][v]),
                                                     _mm512_loadu_ps(scales + v),
                                                     _mm512_load_ps(&sums[r][v])));
      }
    }
  }
  for (int64_t r = 0; r < rows; ++r) {
    std::memcpy(y + (m + r) * w.out + n0, sums[r], columns * sizeof(float));
  }
}

// Rows [m, m + rows) of block column nb with the weights scaled before the tiles.
void ScaledWeightsColumn(const Int8Weights& w, const uint32_t* x, int64_t nb, int64_t m,
                         int64_t rows, float* y) {
  const int64_t pairs = w.in / 2, k_blocks = w.in / amx::kKBlock;
  const int64_t n0 = nb * kInt8BlockOut;
  const int64_t columns = std::min(kInt8BlockOut, w.out - n0);
  amx::LoadBias(w.bias.data() + n0, columns);
  const int8_t* q = w.q.data() + nb * w.in * kInt8BlockOut;
  ScaleGroupCursor cursor(w, w.scales.data() + nb * w.groups * kInt8BlockOut);
  alignas(64) KBlock block;
  for (int64_t kb = 0; kb < k_blocks; ++kb) {
    for (int64_t p = 0; p < kPairs; ++p) {
      const int64_t k = kb * amx::kKBlock + 2 * p;
      const float *even_scale, *odd_scale;
      cursor.At(k, &even_scale, &odd_scale);
      PrefetchPair(q + k * kInt8BlockOut);
      for (int64_t v = 0; v < kInt8BlockOut / 16; ++v) {
        _mm512_store_si512(
            &block[p][v * 32],
            Int8PairToBfloat16(q + k * kInt8BlockOut + v * 16, even_scale + v * 16,
                               q + (k + 1) * kInt8BlockOut + v * 16, odd_scale + v * 16));
      }
    }
    amx::MultiplyKBlock(x + m * pairs + kb * kPairs, pairs * 4, &block[0][0]);
  }
  amx::StoreSums(y + m * w.out, w.out, n0, columns, rows);
}

}  // namespace

void LinearInt8FewRowsAmxBlocks(const Int8Weights& w, const uint32_t* x, int64_t rows,
                                int64_t nb_begin, int64_t nb_end, float* y) {
  const bool group_scaled = Int8ScalesGroupSums(w);
  // Past 16 rows a block's weights are converted again per group of 16 rows; its
  // int8 (256 KiB at 4096 inputs) then comes from L2.
  amx::ForEachBlockAndRowGroup(rows, nb_begin, nb_end,
                               [&](int64_t nb, int64_t m, int64_t tile_rows) {
                                 if (group_scaled) {
                                   GroupScaledColumn(w, x, nb, m, tile_rows, y);
                                 } else {
                                   ScaledWeightsColumn(w, x, nb, m, tile_rows, y);
                                 }
                               });
}

}  // namespace layerserve::kernels::internal
