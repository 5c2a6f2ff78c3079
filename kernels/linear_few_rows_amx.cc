// LinearFewRows for bfloat16 weights with AMX tiles (TDPBF16PS), on CPUs and kernels
// that allow them (this file alone is compiled for AMX, so nothing here may run
// before FewRowsAmxSupported(), in linear_few_rows_amx_support.cc, says yes).
//
// Why: on the Intel Xeons with AMX, VDPBF16PS is slow (116 GFLOP/s per core
// measured, half the float32 FMA's rate), so a 16-session decode step of a
// Llama-3-8B layer (7 GFLOP) took ~60 ms of one core's arithmetic for 436 MB of
// weights that one core reads in ~15-20 ms. One TDPBF16PS multiplies 16 rows by 32
// inputs by 16 outputs (3.6 TFLOP/s per core measured): 16 rows cost what one does
// and the product reads the weights at memory speed.
//
// The weights are read where oneDNN packed them: a 32 k x 64 n block holds, for each
// k pair, 64 outputs' two weights side by side (linear_internal.h), the layout the
// tile steps (few_rows_amx_tiles.h) read.
#include <algorithm>
#include <cstdint>

#include "kernels/few_rows_amx_tiles.h"
#include "kernels/linear_internal.h"

namespace layerserve::kernels::internal {

static_assert(kFewRowsBlockOut == amx::kBlockOut);

void LinearFewRowsAmxBlocks(const FewRowsWeights& w, const uint32_t* x, int64_t rows,
                            int64_t nb_begin, int64_t nb_end, float* y) {
  const int64_t pairs = w.in / 2;
  // In locals: the tile loads' memory clobber would have w's fields read again.
  const int64_t k_blocks = w.in / w.k_block, k_block_stride = w.k_block_stride;
  const int64_t x_block = w.k_block / 2, n_block_stride = w.n_block_stride;
  const auto* weights = static_cast<const uint16_t*>(w.data);
  amx::ForEachBlockAndRowGroup(
      rows, nb_begin, nb_end, [&](int64_t nb, int64_t m, int64_t group) {
        const int64_t n0 = nb * kFewRowsBlockOut;
        const int64_t columns = std::min(kFewRowsBlockOut, w.out - n0);
        amx::LoadBias(w.bias + n0, columns);
        const uint16_t* column = weights + nb * n_block_stride;
        const uint32_t* xm = x + m * pairs;
        for (int64_t kb = 0; kb < k_blocks; ++kb) {
          amx::MultiplyKBlock(xm + kb * x_block, pairs * 4, column + kb * k_block_stride);
        }
        amx::StoreSums(y + m * w.out, w.out, n0, columns, group);
      });
}

}  // namespace layerserve::kernels::internal
