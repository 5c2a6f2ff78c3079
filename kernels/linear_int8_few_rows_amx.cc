// LinearInt8FewRowsDpbf16Blocks with AMX tiles (TDPBF16PS), on CPUs and kernels that
// allow them (this file alone is compiled for AMX, so nothing here may run before
// FewRowsAmxSupported() says yes).
//
// Why: on the Xeons with AMX, VDPBF16PS is slow (linear_few_rows_amx.cc), so the
// VDPBF16PS kernel made a 16-session decode step cost far more than one; with tiles
// 16 rows cost what one does. The operands are the VDPBF16PS kernel's: each k block
// (32 inputs) of a 64-output block is converted in registers, as there, to
// bfloat16(float32(q) * scale) in k pairs, into a 4 KiB buffer laid out as oneDNN
// packs bfloat16 weights (a k pair's 64 outputs side by side); the B tiles are then
// loaded from that buffer, which stays in L1. Like VDPBF16PS, TDPBF16PS treats
// subnormal inputs and outputs as zero.
#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "kernels/linear_int8.h"
#include "kernels/linear_internal.h"

namespace layerserve::kernels::internal {
namespace {

// As in linear_few_rows_amx.cc: GCC 12's _tile_loadd declares no memory read, so
// the stores filling the buffer could be dropped as dead; this one says it reads.
#define LS_TILE_LOAD(tile, base, stride) LS_TILE_LOAD_NUMBER(tile, base, stride)
#define LS_TILE_LOAD_NUMBER(tile, base, stride)                \
  asm volatile("tileloadd (%0,%1,1), %%tmm" #tile ::"r"(base), \
               "r"(static_cast<int64_t>(stride))               \
               : "memory")

// C0..C3: the sums of one block's 64 outputs, 16 each; A: the rows' 32 inputs of one
// k block; B0, B1: 16 outputs' weights of that k block, in turn.
#define LS_C0 0
#define LS_C1 1
#define LS_C2 2
#define LS_C3 3
#define LS_A 4
#define LS_B0 5
#define LS_B1 6

constexpr int64_t kTileRows = 16;                // Rows of x per tile: AMX's maximum.
constexpr int64_t kKBlock = 32;                  // Inputs per A tile row (64 bytes).
constexpr int64_t kPairs = kKBlock / 2;          // k pairs per k block: B tile rows.
constexpr int64_t kPairRow = 2 * kInt8BlockOut;  // bfloat16 values per k pair.

struct alignas(64) TileConfig {
  uint8_t palette = 1;
  uint8_t start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t bytes_per_row[16] = {};
  uint8_t rows[16] = {};
};

void Configure(int64_t rows) {
  TileConfig config;
  for (int t : {LS_C0, LS_C1, LS_C2, LS_C3, LS_A}) {
    config.rows[t] = static_cast<uint8_t>(rows);
    config.bytes_per_row[t] = 64;
  }
  for (int t : {LS_B0, LS_B1}) {
    config.rows[t] = kPairs;
    config.bytes_per_row[t] = 64;
  }
  asm volatile("ldtilecfg %0" ::"m"(config));
}

// 16 weights of one input (one vector of outputs) as float32 times their scales.
inline __m512 Weights(const int8_t* q, const float* scale) {
  const __m128i bytes = _mm_loadu_si128(reinterpret_cast<const __m128i*>(q));
  return _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(bytes)),
                       _mm512_loadu_ps(scale));
}

// Follows the scale group of input k as k grows by pairs (no division per pair).
struct GroupCursor {
  explicit GroupCursor(const Int8Weights& w) : size(w.group), next_k(w.group) {}
  // The scale rows of inputs k and k + 1 (k even, never smaller than the last k).
  void At(const float* scales, int64_t k, const float** even, const float** odd) {
    while (k >= next_k) {
      ++group;
      next_k += size;
    }
    *even = scales + group * kInt8BlockOut;
    *odd = scales + (k + 1 < next_k ? group : group + 1) * kInt8BlockOut;
  }
  const int64_t size;
  int64_t group = 0, next_k;
};

// Rows (as configured) of x pairs (row stride `pairs` words) against block nb.
void Column(const Int8Weights& w, const uint32_t* x, int64_t pairs, int64_t nb,
            int64_t rows, float* y) {
  const int64_t n0 = nb * kInt8BlockOut;
  const int64_t columns = std::min(kInt8BlockOut, w.out - n0);
  alignas(64) float bias[kInt8BlockOut] = {};  // 0 past the last output.
  std::memcpy(bias, w.bias.data() + n0, columns * sizeof(float));
  LS_TILE_LOAD(LS_C0, bias, 0);  // Stride 0: the same 64 bytes in every row.
  LS_TILE_LOAD(LS_C1, bias + 16, 0);
  LS_TILE_LOAD(LS_C2, bias + 32, 0);
  LS_TILE_LOAD(LS_C3, bias + 48, 0);
  // Word i of a pair's vector: bfloat16 i of the even input (low half), then of the
  // odd one; _mm512_cvtne2ps_pbh puts the odd input's 16 values after the even's.
  const __m512i interleave =
      _mm512_set_epi16(31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10, 25, 9, 24, 8, 23,
                       7, 22, 6, 21, 5, 20, 4, 19, 3, 18, 2, 17, 1, 16, 0);
  const int8_t* q = w.q.data() + nb * w.in * kInt8BlockOut;
  const float* scales = w.scales.data() + nb * w.groups * kInt8BlockOut;
  GroupCursor cursor(w);
  alignas(64) uint16_t block[kPairs][kPairRow];
  const int64_t k_blocks = w.in / kKBlock, x_stride = pairs * 4;
  for (int64_t kb = 0; kb < k_blocks; ++kb) {
    for (int64_t p = 0; p < kPairs; ++p) {
      const int64_t k = kb * kKBlock + 2 * p;
      const float *even_scale, *odd_scale;
      cursor.At(scales, k, &even_scale, &odd_scale);
      for (int64_t v = 0; v < kInt8BlockOut / 16; ++v) {
        const __m512 even = Weights(q + k * kInt8BlockOut + v * 16, even_scale + v * 16);
        const __m512 odd =
            Weights(q + (k + 1) * kInt8BlockOut + v * 16, odd_scale + v * 16);
        _mm512_store_si512(&block[p][v * 32],
                           _mm512_permutexvar_epi16(
                               interleave, (__m512i)_mm512_cvtne2ps_pbh(odd, even)));
      }
    }
    LS_TILE_LOAD(LS_A, x + kb * kPairs, x_stride);
    LS_TILE_LOAD(LS_B0, &block[0][0], kPairRow * 2);
    _tile_dpbf16ps(LS_C0, LS_A, LS_B0);
    LS_TILE_LOAD(LS_B1, &block[0][32], kPairRow * 2);
    _tile_dpbf16ps(LS_C1, LS_A, LS_B1);
    LS_TILE_LOAD(LS_B0, &block[0][64], kPairRow * 2);
    _tile_dpbf16ps(LS_C2, LS_A, LS_B0);
    LS_TILE_LOAD(LS_B1, &block[0][96], kPairRow * 2);
    _tile_dpbf16ps(LS_C3, LS_A, LS_B1);
  }
  if (columns == kInt8BlockOut) {
    const int64_t y_stride = w.out * 4;
    _tile_stored(LS_C0, y + n0, y_stride);
    _tile_stored(LS_C1, y + n0 + 16, y_stride);
    _tile_stored(LS_C2, y + n0 + 32, y_stride);
    _tile_stored(LS_C3, y + n0 + 48, y_stride);
    return;
  }
  alignas(64) float all[kTileRows][kInt8BlockOut];
  constexpr int64_t kAllStride = kInt8BlockOut * 4;
  _tile_stored(LS_C0, &all[0][0], kAllStride);
  _tile_stored(LS_C1, &all[0][16], kAllStride);
  _tile_stored(LS_C2, &all[0][32], kAllStride);
  _tile_stored(LS_C3, &all[0][48], kAllStride);
  for (int64_t m = 0; m < rows; ++m) {
    std::memcpy(y + m * w.out + n0, all[m], columns * sizeof(float));
  }
}

}  // namespace

void LinearInt8FewRowsAmxBlocks(const Int8Weights& w, const uint32_t* x, int64_t rows,
                                int64_t nb_begin, int64_t nb_end, float* y) {
  const int64_t pairs = w.in / 2;
  int64_t configured = 0;
  for (int64_t nb = nb_begin; nb < nb_end; ++nb) {
    // Past 16 rows the block's weights are converted again per group of 16 rows: the
    // int8 column (256 KiB at 4096 inputs) then comes from L2.
    for (int64_t m = 0; m < rows; m += kTileRows) {
      const int64_t group = std::min(kTileRows, rows - m);
      if (group != configured) {
        Configure(group);
        configured = group;
      }
      Column(w, x + m * pairs, pairs, nb, group, y + m * w.out);
    }
  }
  // Back to the initial state (see linear_few_rows_amx.cc).
  _tile_release();
}

}  // namespace layerserve::kernels::internal
