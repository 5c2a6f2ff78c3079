// LinearFewRows for bfloat16 weights with AMX tiles (TDPBF16PS), on CPUs and kernels
// that allow them (this file alone is compiled for AMX, so nothing here may run
// before FewRowsAmxSupported(), in kernels/linear/amx/cpu_support.cc, says yes).
//
// Why: on the Intel Xeons with AMX, VDPBF16PS is slow (half the float32 FMA's rate),
// so a 16-session decode step was bound by arithmetic, not by reading the weights.
// One TDPBF16PS multiplies 16 rows by 32 inputs by 16 outputs: 16 rows cost what one
// does and the product reads the weights at memory speed (the rates:
// docs/perf/2026-12-01-decode-16-sessions-8b.md).
//
// The weights are read where oneDNN packed them: a 32 k x 64 n block holds, for each
// k pair, 64 outputs' two weights side by side (linear_internal.h), the layout the
// tile steps (kernels/linear/amx/tiles.h) read.
#include <algorithm>
#include <cstdint>

#include "kernels/linear/amx/tiles.h"
#include "kernels/linear/linear_internal.h"

namespace layerserve::kernels::internal {

static_assert(kFewRowsBlockOut == amx::kBlockOut);

// Each k block's weights (4 KiB) are prefetched into L2 this far ahead, as the
// VDPBF16PS kernel's are (kernels/linear/avx512_bf16/few_rows.cc): the packed layout runs
// on from one k block and block column to the next, and past its end a prefetch is only a
// hint. Chosen because it made the two-thread decode step faster, see
// docs/perf/2026-12-02-int8-group-sums-on-amx.md.
constexpr uintptr_t kPrefetchBytes = 32 << 10;
constexpr uintptr_t kKBlockBytes = amx::kKBlock / 2 * amx::kPairRow * sizeof(uint16_t);

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
          const uint16_t* block = column + kb * k_block_stride;
          const auto ahead = reinterpret_cast<uintptr_t>(block) + kPrefetchBytes;
          for (uintptr_t line = 0; line < kKBlockBytes; line += 64) {
            _mm_prefetch(reinterpret_cast<const char*>(ahead + line), _MM_HINT_T1);
          }
          amx::MultiplyKBlock(xm + kb * x_block, pairs * 4, block);
        }
        amx::StoreSums(y + m * w.out, w.out, n0, columns, group);
      });
}

}  // namespace layerserve::kernels::internal
