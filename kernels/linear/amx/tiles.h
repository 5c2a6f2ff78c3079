// The AMX tile steps both few-rows AMX kernels take (bfloat16 weights,
// kernels/linear/amx/few_rows.cc; int8 weights, kernels/linear/amx/int8_few_rows.cc): up
// to 16 rows of x against one 64-output block, k block by k block. Include only from
// files compiled for AMX, and run nothing here before FewRowsAmxSupported() says yes.
//
// Tile registers: C0..C3 hold the sums of the block's 64 outputs, 16 each; A the
// rows' 32 inputs of one k block (x's pairs as PackBfloat16Pairs left them); B0 and
// B1 take 16 outputs' weights of that k block in turn: 16 k pairs of 64 bytes, from
// a k block laid out as oneDNN packs bfloat16 weights (each k pair's 64 outputs side
// by side, 256 bytes a pair). Like VDPBF16PS, TDPBF16PS treats subnormal inputs and
// outputs as zero. Each row's sums start from the bias and take the k blocks in
// order; a row's bits do not depend on the other rows of its tile. Tile registers
// and their configuration belong to the thread, so threads never share them; a
// kernel configures before its first step and releases after its last
// (ForEachBlockAndRowGroup does both). Nothing here allocates or throws.
#ifndef LAYERSERVE_KERNELS_FEW_ROWS_AMX_TILES_H_
#define LAYERSERVE_KERNELS_FEW_ROWS_AMX_TILES_H_

#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <cstring>

namespace layerserve::kernels::internal::amx {

// GCC 12's AMX intrinsics under-declare what they read: _tile_loadconfig 8 bytes of
// the 64-byte config, _tile_loadd no memory at all. So the stores that fill a local
// config, bias or weights buffer may be dropped as dead (a test program built with
// them at -O2 ran LDTILECFG on a half-written config: SIGILL). These two say what
// they read (the second level expands a tile's name to its number before # makes it
// text).
#define LS_TILE_LOAD(tile, base, stride) LS_TILE_LOAD_NUMBER(tile, base, stride)
#define LS_TILE_LOAD_NUMBER(tile, base, stride)                \
  asm volatile("tileloadd (%0,%1,1), %%tmm" #tile ::"r"(base), \
               "r"(static_cast<int64_t>(stride))               \
               : "memory")

// Tile numbers must be immediates.
#define LS_C0 0
#define LS_C1 1
#define LS_C2 2
#define LS_C3 3
#define LS_A 4
#define LS_B0 5
#define LS_B1 6

inline constexpr int64_t kTileRows = 16;  // Rows of x per tile: AMX's maximum.
inline constexpr int64_t kKBlock = 32;    // Inputs per k block: 64 bytes of pairs.
inline constexpr int64_t kBlockOut = 64;  // Outputs per block: 4 C tiles.
inline constexpr int64_t kPairRow = 2 * kBlockOut;  // bfloat16 values per k pair.

// The LDTILECFG operand (palette 1).
struct alignas(64) TileConfig {
  uint8_t palette = 1;
  uint8_t start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t bytes_per_row[16] = {};
  uint8_t rows[16] = {};
};

// C and A tiles of `rows` rows (the rows of x in this group), B tiles of 16 k pairs.
inline void Configure(int64_t rows) {
  TileConfig config;
  for (int t : {LS_C0, LS_C1, LS_C2, LS_C3, LS_A}) {
    config.rows[t] = static_cast<uint8_t>(rows);
    config.bytes_per_row[t] = 64;
  }
  for (int t : {LS_B0, LS_B1}) {
    config.rows[t] = kKBlock / 2;
    config.bytes_per_row[t] = 64;
  }
  asm volatile("ldtilecfg %0" ::"m"(config));
}

// Every row of C0..C3 starts from the block's `columns` biases (0 past them).
inline void LoadBias(const float* block_bias, int64_t columns) {
  alignas(64) float bias[kBlockOut] = {};
  std::memcpy(bias, block_bias, columns * sizeof(float));
  LS_TILE_LOAD(LS_C0, bias, 0);  // Stride 0: the same 64 bytes in every row.
  LS_TILE_LOAD(LS_C1, bias + 16, 0);
  LS_TILE_LOAD(LS_C2, bias + 32, 0);
  LS_TILE_LOAD(LS_C3, bias + 48, 0);
}

// Every row of C0..C3 starts from 0.
inline void ZeroSums() {
  _tile_zero(LS_C0);
  _tile_zero(LS_C1);
  _tile_zero(LS_C2);
  _tile_zero(LS_C3);
}

// C += the rows' 16 pairs at `x` (row stride `x_stride` bytes) times one k block of
// weights (`block`: 16 k pairs, kPairRow values apart).
inline void MultiplyKBlock(const uint32_t* x, int64_t x_stride, const uint16_t* block) {
  LS_TILE_LOAD(LS_A, x, x_stride);
  LS_TILE_LOAD(LS_B0, block, kPairRow * 2);
  _tile_dpbf16ps(LS_C0, LS_A, LS_B0);
  LS_TILE_LOAD(LS_B1, block + 32, kPairRow * 2);
  _tile_dpbf16ps(LS_C1, LS_A, LS_B1);
  LS_TILE_LOAD(LS_B0, block + 64, kPairRow * 2);
  _tile_dpbf16ps(LS_C2, LS_A, LS_B0);
  LS_TILE_LOAD(LS_B1, block + 96, kPairRow * 2);
  _tile_dpbf16ps(LS_C3, LS_A, LS_B1);
}

// The sums of `rows` rows into y's columns [n0, n0 + columns) (y has `out` columns).
inline void StoreSums(float* y, int64_t out, int64_t n0, int64_t columns, int64_t rows) {
  if (columns == kBlockOut) {
    const int64_t y_stride = out * 4;
    _tile_stored(LS_C0, y + n0, y_stride);
    _tile_stored(LS_C1, y + n0 + 16, y_stride);
    _tile_stored(LS_C2, y + n0 + 32, y_stride);
    _tile_stored(LS_C3, y + n0 + 48, y_stride);
    return;
  }
  alignas(64) float all[kTileRows][kBlockOut];
  constexpr int64_t kAllStride = kBlockOut * 4;
  _tile_stored(LS_C0, &all[0][0], kAllStride);
  _tile_stored(LS_C1, &all[0][16], kAllStride);
  _tile_stored(LS_C2, &all[0][32], kAllStride);
  _tile_stored(LS_C3, &all[0][48], kAllStride);
  for (int64_t m = 0; m < rows; ++m) {
    std::memcpy(y + m * out + n0, all[m], columns * sizeof(float));
  }
}

// column(nb, m, rows) for every block in [nb_begin, nb_end) and every group of up to
// 16 rows, the tiles configured for each group's rows; then the tiles released (a
// thread holding tile data costs every context switch an 8 KiB save). Block columns
// outside, row groups inside: past 16 rows a block's weights come again from L2.
template <typename Column>
void ForEachBlockAndRowGroup(int64_t rows, int64_t nb_begin, int64_t nb_end,
                             Column column) {
  int64_t configured = 0;
  for (int64_t nb = nb_begin; nb < nb_end; ++nb) {
    for (int64_t m = 0; m < rows; m += kTileRows) {
      const int64_t group = std::min(kTileRows, rows - m);
      if (group != configured) {
        Configure(group);
        configured = group;
      }
      column(nb, m, group);
    }
  }
  _tile_release();
}

}  // namespace layerserve::kernels::internal::amx

#endif  // LAYERSERVE_KERNELS_FEW_ROWS_AMX_TILES_H_
