// Linear for bfloat16 weights with AMX tiles, for the many rows of a prefill (this
// file alone is compiled for AMX: nothing here may run before FewRowsAmxSupported()
// says yes).
//
// Why not the few-rows kernel: per k block it loads one tile of x and four of
// weights for its four products, and each load waits for the product before it
// (eight tile registers leave nothing to load ahead into). Here two 16-row groups
// share two 16-output weight tiles: four loads for four products, and the next k
// block's lines are prefetched into L1 meanwhile. Chosen because it beat the
// few-rows kernel at 128 and 512 rows, see docs/perf/2026-12-03-linear-on-amx.md.
// The k blocks go in chunks (kChunkKBlocks),
// every block and row group taking one chunk before the next, so that one chunk's x
// and weights stay in L2.
//
// Every row keeps the few-rows kernel's bits: its sums of each 16 outputs start from
// the bias and take the k blocks in order, one TDPBF16PS each, whatever the loops
// around (between chunks they wait in y as float32, exactly). x comes packed by
// PackAmxRowTiles (each 16-row group's 32 inputs of a k block are one contiguous 1 KiB
// tile; in place, at in = 4096, a tile's 16 rows would fall in one L1 set).
#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#include "kernels/linear/amx/tiles.h"
#include "kernels/linear/avx512_bf16/bfloat16_words.h"
#include "kernels/linear/linear_internal.h"

namespace layerserve::kernels::internal {
namespace {

constexpr int64_t kTileWords = amx::kTileRows * amx::kKBlock / 2;  // One x tile.
constexpr int64_t kGroupSums = amx::kTileRows * amx::kBlockOut;    // A group's sums.
constexpr int64_t kHalf = amx::kBlockOut / 2;  // Outputs per half block: 2 C tiles.
constexpr int64_t kWeightsStride = amx::kPairRow * sizeof(uint16_t);  // A k pair's.
// k blocks per pass over the blocks (4096 inputs). A pass's x (1 MiB at 128 rows)
// and a block's weights for it (512 KiB) stay in L2 while every row group takes
// them. Unchunked, the down projection (14336 inputs: x 3.5 MiB at 128 rows)
// streamed x through L2 for every block and evicted the weights the next groups
// needed. Projections of 4096 inputs stay one pass: smaller chunks made them slower,
// see docs/perf/2026-12-03-k-chunks.md.
constexpr int64_t kChunkKBlocks = 128;

// Tile registers: C0 = A x B0 and C1 = A x B1 are group g's sums of the half
// block's two 16-output tiles, C2 = A1 x B0 and C3 = A1 x B1 group g + 1's.
#define LS_A1 7

// Every tile 16 rows of 64 bytes.
void ConfigureTiles() {
  amx::TileConfig config;
  for (int t = 0; t < 8; ++t) {
    config.rows[t] = amx::kTileRows;
    config.bytes_per_row[t] = 64;
  }
  asm volatile("ldtilecfg %0" ::"m"(config));
}

// Into L1: the 16 rows of the x tile at `a` and the half block's weights of one k
// block (16 k pairs of two 64-byte lines).
void PrefetchX(const uint32_t* a) {
  const auto* lines = reinterpret_cast<const char*>(a);
  for (int64_t r = 0; r < amx::kTileRows; ++r) _mm_prefetch(lines + r * 64, _MM_HINT_T0);
}
void PrefetchWeights(const uint16_t* weights) {
  const auto* lines = reinterpret_cast<const char*>(weights);
  for (int64_t p = 0; p < amx::kKBlock / 2; ++p) {
    _mm_prefetch(lines + p * kWeightsStride, _MM_HINT_T0);
    _mm_prefetch(lines + p * kWeightsStride + 64, _MM_HINT_T0);
  }
}

// Where a group's sums of one half block live between k chunks (and end up): y
// itself, or a buffer copied into y at the end. Group g + 1's 16 rows follow g's.
struct SumsAt {
  float* at;
  int64_t stride;  // Floats between rows.
};

// Group g's (and g + 1's) sums of one half block over k blocks [kb_begin, kb_end):
// from the bias when kb_begin is 0, else from `sums`, where they go back. `a0` is
// group g's first x tile (group g + 1's follow `group_words` later); the weights of
// k block kb are at half_column + kb * k_block_stride.
template <bool kTwoGroups>
void HalfBlock(const uint32_t* a0, int64_t group_words, int64_t kb_begin, int64_t kb_end,
               const uint16_t* half_column, int64_t k_block_stride,
               const float* half_bias, SumsAt sums) {
  const int64_t bytes = sums.stride * static_cast<int64_t>(sizeof(float));
  float* next = sums.at + amx::kTileRows * sums.stride;
  if (kb_begin == 0) {
    LS_TILE_LOAD(LS_C0, half_bias, 0);  // Stride 0: the bias in every row.
    LS_TILE_LOAD(LS_C1, half_bias + 16, 0);
    if constexpr (kTwoGroups) {
      LS_TILE_LOAD(LS_C2, half_bias, 0);
      LS_TILE_LOAD(LS_C3, half_bias + 16, 0);
    }
  } else {  // float32 sums stored and loaded back exactly: the bits do not change.
    LS_TILE_LOAD(LS_C0, sums.at, bytes);
    LS_TILE_LOAD(LS_C1, sums.at + 16, bytes);
    if constexpr (kTwoGroups) {
      LS_TILE_LOAD(LS_C2, next, bytes);
      LS_TILE_LOAD(LS_C3, next + 16, bytes);
    }
  }
  const uint32_t* a1 = a0 + group_words;
  for (int64_t kb = kb_begin; kb < kb_end; ++kb) {
    // One k block ahead (past the last, a hint the CPU may drop).
    const uint16_t* weights = half_column + kb * k_block_stride;
    PrefetchWeights(weights + k_block_stride);
    PrefetchX(a0 + (kb + 1) * kTileWords);
    if constexpr (kTwoGroups) PrefetchX(a1 + (kb + 1) * kTileWords);
    LS_TILE_LOAD(LS_A, a0 + kb * kTileWords, 64);
    LS_TILE_LOAD(LS_B0, weights, kWeightsStride);
    LS_TILE_LOAD(LS_B1, weights + 32, kWeightsStride);
    _tile_dpbf16ps(LS_C0, LS_A, LS_B0);
    _tile_dpbf16ps(LS_C1, LS_A, LS_B1);
    if constexpr (kTwoGroups) {
      LS_TILE_LOAD(LS_A1, a1 + kb * kTileWords, 64);
      _tile_dpbf16ps(LS_C2, LS_A1, LS_B0);
      _tile_dpbf16ps(LS_C3, LS_A1, LS_B1);
    }
  }
  _tile_stored(LS_C0, sums.at, bytes);
  _tile_stored(LS_C1, sums.at + 16, bytes);
  if constexpr (kTwoGroups) {
    _tile_stored(LS_C2, next, bytes);
    _tile_stored(LS_C3, next + 16, bytes);
  }
}

}  // namespace

void PackAmxRowTiles(const float* x, int64_t rows, int64_t in,
                     std::vector<uint32_t>& tiles) {
  // Straight from float32: rounding into pairs first and then regrouping them was
  // two passes over x and a zero fill of the whole buffer.
  const int64_t k_blocks = in / amx::kKBlock;
  const int64_t groups = (rows + amx::kTileRows - 1) / amx::kTileRows;
  constexpr int64_t kPairs = amx::kKBlock / 2;
  tiles.resize(groups * k_blocks * kTileWords);
  for (int64_t m = 0; m < groups * amx::kTileRows; ++m) {
    uint32_t* row = tiles.data() + (m / amx::kTileRows) * k_blocks * kTileWords +
                    (m % amx::kTileRows) * kPairs;
    for (int64_t kb = 0; kb < k_blocks; ++kb) {
      uint32_t* words = row + kb * kTileWords;
      if (m < rows) {
        RoundToBfloat16Words(x + m * in + kb * amx::kKBlock, amx::kKBlock,
                             reinterpret_cast<uint16_t*>(words));
      } else {  // The last group's rows past `rows`.
        std::memset(words, 0, kPairs * sizeof(uint32_t));
      }
    }
  }
}

void LinearManyRowsAmxBlocks(const FewRowsWeights& w, const uint32_t* tiles, int64_t rows,
                             int64_t nb_begin, int64_t nb_end, float* y,
                             int64_t y_stride) {
  // In locals: the tile loads' memory clobber would have w's fields read again.
  const int64_t k_blocks = w.in / w.k_block, k_block_stride = w.k_block_stride;
  const int64_t n_block_stride = w.n_block_stride, out = w.out;
  const int64_t groups = (rows + amx::kTileRows - 1) / amx::kTileRows;
  const int64_t whole = rows / amx::kTileRows;  // Groups of 16 rows.
  const int64_t group_words = k_blocks * kTileWords;
  const auto* weights = static_cast<const uint16_t*>(w.data);
  // Whole groups of whole blocks keep their sums in y. A last short group's sums
  // (its padding rows must not reach y) are in `short_sums`, [16, range] floats; a
  // last block narrower than 64 outputs keeps every group's in `narrow_sums`.
  const int64_t range = (nb_end - nb_begin) * amx::kBlockOut;
  const int64_t narrow_columns = out - (nb_end - 1) * amx::kBlockOut;
  const bool narrow = narrow_columns < amx::kBlockOut;
  thread_local std::vector<float> short_sums, narrow_sums;
  if (whole < groups) short_sums.resize(amx::kTileRows * range);
  if (narrow) narrow_sums.resize(groups * kGroupSums);
  ConfigureTiles();
  for (int64_t kb_begin = 0; kb_begin < k_blocks; kb_begin += kChunkKBlocks) {
    const int64_t kb_end = std::min(k_blocks, kb_begin + kChunkKBlocks);
    for (int64_t nb = nb_begin; nb < nb_end; ++nb) {
      const int64_t n0 = nb * kFewRowsBlockOut;
      const bool narrow_block = narrow && nb == nb_end - 1;
      alignas(64) float bias[amx::kBlockOut] = {};
      std::memcpy(bias, w.bias + n0, std::min(amx::kBlockOut, out - n0) * sizeof(float));
      for (int64_t half = 0; half < 2; ++half) {
        // Each k pair's 64 outputs lie side by side: the second half's start 32
        // outputs' pairs in.
        const uint16_t* half_column = weights + nb * n_block_stride + half * 2 * kHalf;
        const float* half_bias = bias + half * kHalf;
        auto sums_of = [&](int64_t g) -> SumsAt {
          if (narrow_block)
            return {narrow_sums.data() + g * kGroupSums + half * kHalf, amx::kBlockOut};
          if (g == whole)
            return {short_sums.data() + (nb - nb_begin) * amx::kBlockOut + half * kHalf,
                    range};
          return {y + g * amx::kTileRows * y_stride + n0 + half * kHalf, y_stride};
        };
        // Pairs share a SumsAt: both whole groups, or both in narrow_sums.
        const int64_t paired = (narrow_block ? groups : whole) / 2 * 2;
        int64_t g = 0;
        for (; g < paired; g += 2) {
          HalfBlock<true>(tiles + g * group_words, group_words, kb_begin, kb_end,
                          half_column, k_block_stride, half_bias, sums_of(g));
        }
        for (; g < groups; ++g) {
          HalfBlock<false>(tiles + g * group_words, group_words, kb_begin, kb_end,
                           half_column, k_block_stride, half_bias, sums_of(g));
        }
      }
    }
  }
  _tile_release();
  const int64_t wide_columns = narrow ? range - amx::kBlockOut : range;
  for (int64_t m = whole * amx::kTileRows; m < rows; ++m) {
    std::memcpy(y + m * y_stride + nb_begin * amx::kBlockOut,
                short_sums.data() + (m - whole * amx::kTileRows) * range,
                wide_columns * sizeof(float));
  }
  if (narrow) {
    for (int64_t m = 0; m < rows; ++m) {
      std::memcpy(y + m * y_stride + (nb_end - 1) * amx::kBlockOut,
                  narrow_sums.data() + m * amx::kBlockOut,
                  narrow_columns * sizeof(float));
    }
  }
}

}  // namespace layerserve::kernels::internal
