// LinearInt8FewRowsDpbf16Blocks with AMX tiles (TDPBF16PS), on CPUs and kernels that
// allow them (this file is compiled for AMX, so nothing here may run before
// FewRowsAmxSupported() says yes).
//
// Why: on the Xeons with AMX, VDPBF16PS is slow (linear_few_rows_amx.cc), so the
// VDPBF16PS kernel made a 16-session decode step cost 3x bfloat16's; with tiles 16
// rows cost about what one does. The operands are the VDPBF16PS kernel's: each k
// block (32 inputs) of a 64-output block is converted in registers as there
// (linear_int8_bf16_pairs.h) into a 4 KiB buffer laid out as oneDNN packs bfloat16
// weights, which stays in L1, and the tile steps (few_rows_amx_tiles.h) read it as
// the bfloat16 kernel reads the packed weights.
#include <algorithm>
#include <cstdint>

#include "kernels/few_rows_amx_tiles.h"
#include "kernels/linear_int8.h"
#include "kernels/linear_int8_bf16_pairs.h"

namespace layerserve::kernels::internal {

static_assert(kInt8BlockOut == amx::kBlockOut);

void LinearInt8FewRowsAmxBlocks(const Int8Weights& w, const uint32_t* x, int64_t rows,
                                int64_t nb_begin, int64_t nb_end, float* y) {
  constexpr int64_t kPairs = amx::kKBlock / 2;
  const int64_t pairs = w.in / 2, k_blocks = w.in / amx::kKBlock;
  // Past 16 rows a block's weights are converted again per group of 16 rows; its
  // int8 (256 KiB at 4096 inputs) then comes from L2.
  amx::ForEachBlockAndRowGroup(
      rows, nb_begin, nb_end, [&](int64_t nb, int64_t m, int64_t group) {
        const int64_t n0 = nb * kInt8BlockOut;
        const int64_t columns = std::min(kInt8BlockOut, w.out - n0);
        amx::LoadBias(w.bias.data() + n0, columns);
        const int8_t* q = w.q.data() + nb * w.in * kInt8BlockOut;
        ScaleGroupCursor cursor(w, w.scales.data() + nb * w.groups * kInt8BlockOut);
        alignas(64) uint16_t block[kPairs][amx::kPairRow];
        for (int64_t kb = 0; kb < k_blocks; ++kb) {
          for (int64_t p = 0; p < kPairs; ++p) {
            const int64_t k = kb * amx::kKBlock + 2 * p;
            const float *even_scale, *odd_scale;
            cursor.At(k, &even_scale, &odd_scale);
            for (int64_t v = 0; v < kInt8BlockOut / 16; ++v) {
              _mm512_store_si512(
                  &block[p][v * 32],
                  Int8PairToBfloat16(q + k * kInt8BlockOut + v * 16, even_scale + v * 16,
                                     q + (k + 1) * kInt8BlockOut + v * 16,
                                     odd_scale + v * 16));
            }
          }
          amx::MultiplyKBlock(x + m * pairs + kb * kPairs, pairs * 4, &block[0][0]);
        }
        amx::StoreSums(y + m * w.out, w.out, n0, columns, group);
      });
}

}  // namespace layerserve::kernels::internal
