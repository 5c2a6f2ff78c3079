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
#include <cpuid.h>
#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#include "common/dtype.h"
#include "kernels/linear/avx512_bf16/bfloat16_words.h"
#include "kernels/linear/linear_internal.h"

namespace layerserve::kernels::internal {
namespace {

constexpr int64_t kVecs = kFewRowsBlockOut / 16;  // 4 vectors of 16 outputs.
constexpr int64_t kRowTile = 6;  // 24 accumulators + 4 weight vectors: 28 of 32.
// The first row tile of a block column reads its weights from memory, and prefetches
// them this far ahead into L2 (the packed layout is contiguous from one column to
// the next); the later tiles find them in L2. On Zen 5 the hardware prefetchers
// alone ran too short a distance ahead: chosen because it made 4 and 16 rows faster
// there, see docs/perf/2026-12-02-few-rows-prefetch.md.
constexpr uintptr_t kPrefetchBytes = 32 << 10;

// Whether the first tile prefetches: not on AMD's family 19h, whose only CPUs with
// AVX512_BF16 are Zen 4. There a Llama-3-8B decode step's products took less time
// with the hardware prefetchers alone than with these prefetches at every row count
// (14% less at 1 row, 28% at 4, 15% at 8, 0-7% at 16 to 64), and any distance of 4
// KiB or more cost as much as 32 KiB: see docs/perf/2026-12-06-decode-step-overlap.md.
// Elsewhere (Zen 5, Intel without AMX) as before. Results are the same bits either way.
bool PrefetchesWeights() {
  static const bool prefetches = [] {
    unsigned eax, ebx, ecx, edx;
    if (__get_cpuid(0, &eax, &ebx, &ecx, &edx) == 0) return true;
    // "AuthenticAMD" in ebx, edx, ecx.
    const bool amd = ebx == 0x68747541u && edx == 0x69746E65u && ecx == 0x444D4163u;
    if (!amd || __get_cpuid(1, &eax, &ebx, &ecx, &edx) == 0) return true;
    const unsigned family = ((eax >> 8) & 0xFu) + ((eax >> 20) & 0xFFu);
    return family != 0x19;
  }();
  return prefetches;
}

// One tile of `kTile` rows of x pairs (row stride `pairs` words) against block
// column nb.
template <int64_t kTile, bool kPrefetch>
void Tile(const FewRowsWeights& w, const uint32_t* x, int64_t pairs, int64_t nb,
          float* y) {
  const int64_t n0 = nb * kFewRowsBlockOut;
  __m512 acc[kTile][kVecs];
  for (int64_t v = 0; v < kVecs; ++v) {
    alignas(64) float bias[16];
    for (int64_t l = 0; l < 16; ++l) {
      const int64_t n = n0 + v * 16 + l;
      bias[l] = n < w.out ? w.bias[n] : 0.0f;
    }
    for (int64_t m = 0; m < kTile; ++m) acc[m][v] = _mm512_load_ps(bias);
  }
  const auto* column = static_cast<const uint16_t*>(w.data) + nb * w.n_block_stride;
  for (int64_t k0 = 0; k0 < w.in; k0 += w.k_block) {
    const auto* block =
        reinterpret_cast<const uint32_t*>(column + (k0 / w.k_block) * w.k_block_stride);
    const int64_t block_pairs = std::min(w.k_block, w.in - k0) / 2;
    for (int64_t p = 0; p < block_pairs; ++p) {
      __m512i wv[kVecs];
      for (int64_t v = 0; v < kVecs; ++v) {
        const uint32_t* at = block + p * kFewRowsBlockOut + v * 16;
        wv[v] = _mm512_loadu_si512(at);
        if constexpr (kPrefetch) {  // Past the weights' end it is only a hint.
          _mm_prefetch(reinterpret_cast<const char*>(reinterpret_cast<uintptr_t>(at) +
                                                     kPrefetchBytes),
                       _MM_HINT_T1);
        }
      }
      for (int64_t m = 0; m < kTile; ++m) {
        const __m512i xp = _mm512_set1_epi32(static_cast<int>(x[m * pairs + k0 / 2 + p]));
        for (int64_t v = 0; v < kVecs; ++v) {
          acc[m][v] = _mm512_dpbf16_ps(acc[m][v], (__m512bh)wv[v], (__m512bh)xp);
        }
      }
    }
  }
  const int64_t columns = std::min(kFewRowsBlockOut, w.out - n0);
  for (int64_t m = 0; m < kTile; ++m) {
    float* out = y + m * w.out + n0;
    alignas(64) float all[kFewRowsBlockOut];
    for (int64_t v = 0; v < kVecs; ++v) _mm512_store_ps(all + v * 16, acc[m][v]);
    std::memcpy(out, all, columns * sizeof(float));
  }
}

// Tile for the `rows` (0 to kRowTile - 1) left after the full tiles.
template <bool kPrefetch>
void LastTile(int64_t rows, const FewRowsWeights& w, const uint32_t* x, int64_t pairs,
              int64_t nb, float* y) {
  WithTileRows<kRowTile - 1>(rows, [&](auto tile_rows) {
    Tile<decltype(tile_rows)::value, kPrefetch>(w, x, pairs, nb, y);
  });
}

// Block columns [nb_begin, nb_end), each in tiles of kRowTile rows and one of the
// rest; the first tile of each prefetches its weights when kPrefetch.
template <bool kPrefetch>
void Columns(const FewRowsWeights& w, const uint32_t* x, int64_t rows, int64_t nb_begin,
             int64_t nb_end, float* y) {
  const int64_t pairs = w.in / 2;
  for (int64_t nb = nb_begin; nb < nb_end; ++nb) {
    int64_t m = 0;
    for (; m + kRowTile <= rows; m += kRowTile) {
      if (m == 0) {
        Tile<kRowTile, kPrefetch>(w, x, pairs, nb, y);
      } else {
        Tile<kRowTile, false>(w, x + m * pairs, pairs, nb, y + m * w.out);
      }
    }
    const uint32_t* xm = x + m * pairs;
    float* ym = y + m * w.out;
    // The last rows: the first tile when rows < kRowTile.
    if (m == 0) {
      LastTile<kPrefetch>(rows, w, xm, pairs, nb, ym);
    } else {
      LastTile<false>(rows - m, w, xm, pairs, nb, ym);
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
  if (PrefetchesWeights()) {
    Columns<true>(w, x, rows, nb_begin, nb_end, y);
  } else {
    Columns<false>(w, x, rows, nb_begin, nb_end, y);
  }
}

}  // namespace layerserve::kernels::internal
