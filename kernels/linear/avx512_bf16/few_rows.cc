// LinearFewRows for bfloat16 weights on CPUs with AVX512_BF16 (this folder alone is
// compiled for it: nothing here runs unless kernel_choice.cc chose it). VDPBF16PS
// multiplies the k pairs the packed layout already holds and adds both products in
// one instruction: twice the products per instruction of the float32 FMA loop,
// which is what makes LinearFewRows beat oneDNN at 8 to 32 rows (many decode
// sessions in one batch) instead of losing to it. Like oneDNN's bfloat16 matmul
// (the same instruction), it treats subnormal inputs as zero. Where the CPU has AMX
// (Intel Xeons), kernel_choice.cc chooses kernels/linear/amx/few_rows.cc instead:
// there VDPBF16PS runs at half the float32 FMA's rate, see
// docs/perf/2026-12-06-kernel-choices.md.
#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#include "common/dtype.h"
#include "kernels/linear/avx512_bf16/bfloat16_words.h"
#include "kernels/linear/kernel_choice.h"
#include "kernels/linear/linear_internal.h"

namespace layerserve::kernels::internal {
namespace {

constexpr int64_t kVecs = kFewRowsBlockOut / 16;  // 4 vectors of 16 outputs.
constexpr int64_t kRowTile = 6;  // 24 accumulators + 4 weight vectors: 28 of 32.

// Up to kRowTile rows: one tile reads each block column's weights from memory, and
// prefetches them kPrefetchBytes ahead into L2 (the packed layout is contiguous from
// one column to the next). On Zen 5 the hardware prefetchers alone ran too short a
// distance ahead: chosen because it made 4 and 16 rows faster there, see
// docs/perf/2026-12-02-few-rows-prefetch.md.
constexpr uintptr_t kPrefetchBytes = 32 << 10;

// More rows: each block column runs in chunks of kChunkBlocks k blocks (128 KiB of
// its weights), all the row tiles over one chunk before the next, the tiles as even
// as can be (8 rows: 4 + 4). While they multiply, each k pair of every tile
// prefetches into L2 a few lines of the next chunk, spread so that the next chunk
// is in flight across the whole of this one: the weights' read runs beside the
// products instead of before them (the first tile of a whole column read it from
// memory while the others waited). A tile's partial sums wait between chunks in
// float32, so each sum still runs over k in order from the bias: the same bits as
// one pass. Chosen because 8 to 32 rows took 1-12% less time (8% in the median)
// on Zen 4, where neither chunks without that prefetch nor even tiles alone were
// faster: see docs/perf/2026-12-06-decode-step-overlap.md.
constexpr int64_t kChunkBlocks = 32;

// The next chunk's lines, taken a few per k pair by the tiles of this one.
struct ChunkPrefetch {
  const char* next;
  const char* end;
  int64_t lines_per_pair;
};

enum class Prefetch { kNone, kAhead, kChunk };

// The sums of one tile of `kTile` rows of x pairs (row stride `pairs` words) for
// block column nb over pairs [p_begin, p_end) (p_begin at a k block's start): from
// the bias when p_begin is 0, else from `partial` ([kTile][64]); stored into y when
// p_end is `pairs`, else into `partial`. Only kChunk tiles take part of the pairs
// (the others [0, pairs), without `partial` or `chunk`). kAhead: each weight load
// prefetches kPrefetchBytes further on; kChunk: each pair takes `chunk`'s next lines.
template <int64_t kTile, Prefetch kPrefetch>
void Tile(const FewRowsWeights& w, const uint32_t* x, int64_t pairs, int64_t nb,
          int64_t p_begin, int64_t p_end, float* partial, float* y,
          ChunkPrefetch* chunk) {
  const int64_t n0 = nb * kFewRowsBlockOut;
  __m512 acc[kTile][kVecs];
  constexpr bool kWhole = kPrefetch != Prefetch::kChunk;  // One pass: [0, pairs).
  if (kWhole || p_begin == 0) {
    for (int64_t v = 0; v < kVecs; ++v) {
      alignas(64) float bias[16];
      for (int64_t l = 0; l < 16; ++l) {
        const int64_t n = n0 + v * 16 + l;
        bias[l] = n < w.out ? w.bias[n] : 0.0f;
      }
      for (int64_t m = 0; m < kTile; ++m) acc[m][v] = _mm512_load_ps(bias);
    }
  } else {
    for (int64_t m = 0; m < kTile; ++m) {
      for (int64_t v = 0; v < kVecs; ++v) {
        acc[m][v] = _mm512_loadu_ps(partial + m * kFewRowsBlockOut + v * 16);
      }
    }
  }
  const auto* column = static_cast<const uint16_t*>(w.data) + nb * w.n_block_stride;
  const int64_t k_block_pairs = w.k_block / 2;
  for (int64_t p0 = p_begin; p0 < p_end; p0 += k_block_pairs) {
    const auto* block = reinterpret_cast<const uint32_t*>(column + (p0 / k_block_pairs) *
                                                                       w.k_block_stride);
    const int64_t block_pairs = std::min(k_block_pairs, p_end - p0);
    for (int64_t p = 0; p < block_pairs; ++p) {
      __m512i wv[kVecs];
      for (int64_t v = 0; v < kVecs; ++v) {
        const uint32_t* at = block + p * kFewRowsBlockOut + v * 16;
        wv[v] = _mm512_loadu_si512(at);
        if constexpr (kPrefetch == Prefetch::kAhead) {  // Past the end only a hint.
          _mm_prefetch(reinterpret_cast<const char*>(reinterpret_cast<uintptr_t>(at) +
                                                     kPrefetchBytes),
                       _MM_HINT_T1);
        }
      }
      if constexpr (kPrefetch == Prefetch::kChunk) {
        for (int64_t l = 0; l < chunk->lines_per_pair && chunk->next < chunk->end; ++l) {
          _mm_prefetch(chunk->next, _MM_HINT_T1);
          chunk->next += 64;
        }
      }
      for (int64_t m = 0; m < kTile; ++m) {
        const __m512i xp = _mm512_set1_epi32(static_cast<int>(x[m * pairs + p0 + p]));
        for (int64_t v = 0; v < kVecs; ++v) {
          acc[m][v] = _mm512_dpbf16_ps(acc[m][v], (__m512bh)wv[v], (__m512bh)xp);
        }
      }
    }
  }
  if (!kWhole && p_end < pairs) {
    for (int64_t m = 0; m < kTile; ++m) {
      for (int64_t v = 0; v < kVecs; ++v) {
        _mm512_storeu_ps(partial + m * kFewRowsBlockOut + v * 16, acc[m][v]);
      }
    }
    return;
  }
  const int64_t columns = std::min(kFewRowsBlockOut, w.out - n0);
  for (int64_t m = 0; m < kTile; ++m) {
    float* out = y + m * w.out + n0;
    alignas(64) float all[kFewRowsBlockOut];
    for (int64_t v = 0; v < kVecs; ++v) _mm512_store_ps(all + v * 16, acc[m][v]);
    std::memcpy(out, all, columns * sizeof(float));
  }
}

// Rows [0, rows <= kRowTile) of block columns [nb_begin, nb_end), one pass each.
template <Prefetch kPrefetch>
void OneTileColumns(const FewRowsWeights& w, const uint32_t* x, int64_t rows,
                    int64_t nb_begin, int64_t nb_end, float* y) {
  const int64_t pairs = w.in / 2;
  for (int64_t nb = nb_begin; nb < nb_end; ++nb) {
    WithTileRows<kRowTile>(rows, [&](auto tile_rows) {
      Tile<decltype(tile_rows)::value, kPrefetch>(w, x, pairs, nb, 0, pairs, nullptr, y,
                                                  nullptr);
    });
  }
}

// More rows, in chunks (kChunkBlocks).
void ChunkedColumns(const FewRowsWeights& w, const uint32_t* x, int64_t rows,
                    int64_t nb_begin, int64_t nb_end, float* y) {
  const int64_t pairs = w.in / 2;
  const int64_t chunk_pairs = kChunkBlocks * (w.k_block / 2);
  const int64_t tiles = (rows + kRowTile - 1) / kRowTile;
  // Each pair's weights are kVecs lines: the next chunk's, over all tiles' pairs.
  const int64_t lines_per_pair = (kVecs + tiles - 1) / tiles;
  const int64_t chunk_bytes = chunk_pairs * kFewRowsBlockOut * 4;
  thread_local std::vector<float> partial;
  partial.resize(rows * kFewRowsBlockOut);
  for (int64_t nb = nb_begin; nb < nb_end; ++nb) {
    const auto* column = static_cast<const char*>(w.data) + nb * w.n_block_stride * 2;
    for (int64_t p0 = 0; p0 < pairs; p0 += chunk_pairs) {
      const int64_t p1 = std::min(pairs, p0 + chunk_pairs);
      // The next chunk: this column's, or the next column's first (past the last
      // column's end it is only a hint).
      const char* next = p1 < pairs
                             ? column + (p1 / (w.k_block / 2)) * w.k_block_stride * 2
                             : column + w.n_block_stride * 2;
      ChunkPrefetch chunk{next, next + chunk_bytes, lines_per_pair};
      for (int64_t t = 0, m = 0; t < tiles; ++t) {
        const int64_t tile_rows = rows / tiles + (t < rows % tiles ? 1 : 0);
        WithTileRows<kRowTile>(tile_rows, [&](auto n) {
          Tile<decltype(n)::value, Prefetch::kChunk>(
              w, x + m * pairs, pairs, nb, p0, p1, partial.data() + m * kFewRowsBlockOut,
              y + m * w.out, &chunk);
        });
        m += tile_rows;
      }
    }
  }
}

}  // namespace

void PackBfloat16Pairs(const float* x, int64_t rows, int64_t in,
                       std::vector<uint32_t>& packed) {
  // Word p of a row holds k = 2p (low half) and 2p + 1 (high half), the order of
  // the weights' pairs: the row's bfloat16 values in order. (Sixteen at a time: a
  // call of Float32ToBfloat16 per value was 8% of a 32-session decode step.)
  const int64_t pairs = in / 2;
  packed.resize(rows * pairs);
  for (int64_t m = 0; m < rows; ++m) {
    RoundToBfloat16Words(x + m * in, 2 * pairs,
                         reinterpret_cast<uint16_t*>(packed.data() + m * pairs));
  }
}

void LinearFewRowsVdpbf16psBlocks(const FewRowsWeights& w, const uint32_t* x,
                                  int64_t rows, int64_t nb_begin, int64_t nb_end,
                                  float* y) {
  if (rows > kRowTile) return ChunkedColumns(w, x, rows, nb_begin, nb_end, y);
  // Not on Zen 4, where the hardware prefetchers alone were faster (CpuFeatures).
  if (ThisCpu().prefetch_few_rows_weights) {
    return OneTileColumns<Prefetch::kAhead>(w, x, rows, nb_begin, nb_end, y);
  }
  OneTileColumns<Prefetch::kNone>(w, x, rows, nb_begin, nb_end, y);
}

}  // namespace layerserve::kernels::internal
