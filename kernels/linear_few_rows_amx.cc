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
// k pair, 64 outputs' two weights side by side (linear_internal.h), so the 16 k pairs
// x 16 outputs of a B tile are 16 rows of 64 bytes 256 bytes apart. The A tile is up
// to 16 rows of x's pairs as PackBfloat16Pairs left them (the row stride is x's).
// Like VDPBF16PS, TDPBF16PS treats subnormal inputs and outputs as zero.
#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "kernels/linear_internal.h"

namespace layerserve::kernels::internal {
namespace {

// GCC 12's AMX intrinsics under-declare what they read: _tile_loadconfig 8 bytes of
// the 64-byte config, _tile_loadd no memory at all. So the stores that fill a local
// config or bias buffer may be dropped as dead (a test program built with them at
// -O2 ran LDTILECFG on a half-written config: SIGILL). These two say what they read
// (the second level expands a tile's name to its number before # makes it text).
#define LS_TILE_LOAD(tile, base, stride) LS_TILE_LOAD_NUMBER(tile, base, stride)
#define LS_TILE_LOAD_NUMBER(tile, base, stride)                \
  asm volatile("tileloadd (%0,%1,1), %%tmm" #tile ::"r"(base), \
               "r"(static_cast<int64_t>(stride))               \
               : "memory")

// Tile registers: C0..C3 hold the sums of the 16 outputs each of one block column,
// A the rows' 32 inputs of one k block, B0 and B1 take the 16 outputs' weights in
// turn. Tile numbers must be immediates.
#define LS_C0 0
#define LS_C1 1
#define LS_C2 2
#define LS_C3 3
#define LS_A 4
#define LS_B0 5
#define LS_B1 6

constexpr int64_t kTileRows = 16;  // Rows of x per tile: AMX's maximum.
constexpr int kTileBytes = 64;     // Bytes per tile row: AMX's maximum.

// The LDTILECFG operand (palette 1).
struct alignas(64) TileConfig {
  uint8_t palette = 1;
  uint8_t start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t bytes_per_row[16] = {};
  uint8_t rows[16] = {};
};

// C and A tiles of `rows` rows (the rows of x in this group), B tiles of 16 k pairs.
void Configure(int64_t rows) {
  TileConfig config;
  for (int t : {LS_C0, LS_C1, LS_C2, LS_C3, LS_A}) {
    config.rows[t] = static_cast<uint8_t>(rows);
    config.bytes_per_row[t] = kTileBytes;
  }
  for (int t : {LS_B0, LS_B1}) {
    config.rows[t] = 16;
    config.bytes_per_row[t] = kTileBytes;
  }
  asm volatile("ldtilecfg %0" ::"m"(config));
}

// The `rows` rows (as configured) of x pairs (row stride `pairs` words) against
// block column nb, into the same rows of y. Each row's sums start from the bias and
// take the k blocks in order; a row's bits do not depend on the other rows of its
// tile (the tile's rows are independent products).
void Column(const FewRowsWeights& w, const uint32_t* x, int64_t pairs, int64_t nb,
            int64_t rows, float* y) {
  const int64_t n0 = nb * kFewRowsBlockOut;
  const int64_t columns = std::min(kFewRowsBlockOut, w.out - n0);
  // Past the last output the bias is not there: start those columns from 0. A
  // stride of 0 loads the same 64 bytes into every row of a C tile.
  alignas(64) float bias[kFewRowsBlockOut] = {};
  std::memcpy(bias, w.bias + n0, columns * sizeof(float));
  LS_TILE_LOAD(LS_C0, bias, 0);
  LS_TILE_LOAD(LS_C1, bias + 16, 0);
  LS_TILE_LOAD(LS_C2, bias + 32, 0);
  LS_TILE_LOAD(LS_C3, bias + 48, 0);
  const auto* column = static_cast<const uint16_t*>(w.data) + nb * w.n_block_stride;
  // In locals: the loads' memory clobber would have w's fields read again each time.
  const int64_t k_blocks = w.in / w.k_block, k_block_stride = w.k_block_stride;
  const int64_t x_block = w.k_block / 2, x_stride = pairs * 4;
  constexpr int64_t kPairRow = 2 * kFewRowsBlockOut;  // bfloat16 values per k pair.
  for (int64_t kb = 0; kb < k_blocks; ++kb) {
    const uint16_t* block = column + kb * k_block_stride;
    LS_TILE_LOAD(LS_A, x + kb * x_block, x_stride);
    LS_TILE_LOAD(LS_B0, block, kPairRow * 2);
    _tile_dpbf16ps(LS_C0, LS_A, LS_B0);
    LS_TILE_LOAD(LS_B1, block + 32, kPairRow * 2);
    _tile_dpbf16ps(LS_C1, LS_A, LS_B1);
    LS_TILE_LOAD(LS_B0, block + 64, kPairRow * 2);
    _tile_dpbf16ps(LS_C2, LS_A, LS_B0);
    LS_TILE_LOAD(LS_B1, block + 96, kPairRow * 2);
    _tile_dpbf16ps(LS_C3, LS_A, LS_B1);
  }
  if (columns == kFewRowsBlockOut) {
    const int64_t y_stride = w.out * 4;
    _tile_stored(LS_C0, y + n0, y_stride);
    _tile_stored(LS_C1, y + n0 + 16, y_stride);
    _tile_stored(LS_C2, y + n0 + 32, y_stride);
    _tile_stored(LS_C3, y + n0 + 48, y_stride);
    return;
  }
  alignas(64) float all[kTileRows][kFewRowsBlockOut];
  constexpr int64_t kAllStride = kFewRowsBlockOut * 4;
  _tile_stored(LS_C0, &all[0][0], kAllStride);
  _tile_stored(LS_C1, &all[0][16], kAllStride);
  _tile_stored(LS_C2, &all[0][32], kAllStride);
  _tile_stored(LS_C3, &all[0][48], kAllStride);
  for (int64_t m = 0; m < rows; ++m) {
    std::memcpy(y + m * w.out + n0, all[m], columns * sizeof(float));
  }
}

}  // namespace

void LinearFewRowsAmxBlocks(const FewRowsWeights& w, const uint32_t* x, int64_t rows,
                            int64_t nb_begin, int64_t nb_end, float* y) {
  const int64_t pairs = w.in / 2;
  int64_t configured = 0;
  // Block columns outside, groups of 16 rows inside: past 16 rows a column's weights
  // (512 KB at 4096 inputs) come again from L2, not from memory.
  for (int64_t nb = nb_begin; nb < nb_end; ++nb) {
    for (int64_t m = 0; m < rows; m += kTileRows) {
      const int64_t group = std::min(kTileRows, rows - m);
      if (group != configured) {
        Configure(group);
        configured = group;
      }
      Column(w, x + m * pairs, pairs, nb, group, y + m * w.out);
    }
  }
  // Back to the initial state: a thread that holds tile data costs every context
  // switch an 8 KiB save, and other code may assume AMX unused.
  _tile_release();
}

}  // namespace layerserve::kernels::internal
