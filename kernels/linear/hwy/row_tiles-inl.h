// The row-tile driver the Highway few-rows products share (hwy/few_rows.cc for
// float32 and bfloat16 weights, int8/few_rows.cc for int8): a 64-output block
// column's accumulators started from the bias, the rows walked in tiles that read
// the block's weights once per tile, and the accumulators stored.
//
// Per-target code: include it after hwy/highway.h in a file that Highway compiles
// once per target (hwy/foreach_target.h); the guard is Highway's toggled one.
#if defined(LAYERSERVE_KERNELS_LINEAR_HWY_ROW_TILES_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef LAYERSERVE_KERNELS_LINEAR_HWY_ROW_TILES_INL_H_
#undef LAYERSERVE_KERNELS_LINEAR_HWY_ROW_TILES_INL_H_
#else
#define LAYERSERVE_KERNELS_LINEAR_HWY_ROW_TILES_INL_H_
#endif

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace layerserve::kernels::internal {
namespace HWY_NAMESPACE {

// Outputs per block column, as both layouts hold them.
inline constexpr int64_t kRowTileBlockOut = 64;

// Calls tile(std::integral_constant<int64_t, kTile>{}, m) for rows [m, m + kTile)
// covering [0, rows): tiles of kRowTile rows, then (when kRowTile is 4) the 2 or 3
// left in one more pass, so the block's weights are read once per tile, then
// single rows.
template <int64_t kRowTile, typename Tile>
HWY_INLINE void ForEachRowTile(int64_t rows, Tile&& tile) {
  int64_t m = 0;
  for (; m + kRowTile <= rows; m += kRowTile) {
    tile(std::integral_constant<int64_t, kRowTile>{}, m);
  }
  switch (kRowTile == 4 ? rows - m : 0) {
    case 3:
      tile(std::integral_constant<int64_t, 3>{}, m);
      m += 3;
      break;
    case 2:
      tile(std::integral_constant<int64_t, 2>{}, m);
      m += 2;
      break;
    default:
      break;
  }
  for (; m < rows; ++m) tile(std::integral_constant<int64_t, 1>{}, m);
}

// Every row's accumulators of the block starting at output n0 set to the bias;
// lanes past the last output (`out`), which has no bias, to 0.
template <class D, class V, int64_t kTile, int64_t kVecs>
HWY_INLINE void StartFromBias(D d, const float* bias, int64_t n0, int64_t out,
                              V (&acc)[kTile][kVecs]) {
  constexpr int64_t kLanes = static_cast<int64_t>(hwy::HWY_NAMESPACE::MaxLanes(D()));
  for (int64_t v = 0; v < kVecs; ++v) {
    HWY_ALIGN float lanes[kLanes];
    for (int64_t l = 0; l < kLanes; ++l) {
      const int64_t n = n0 + v * kLanes + l;
      lanes[l] = n < out ? bias[n] : 0.0f;
    }
    for (int64_t m = 0; m < kTile; ++m) acc[m][v] = hwy::HWY_NAMESPACE::Load(d, lanes);
  }
}

// Stores row m's accumulators at y + m * out + n0, dropping the lanes past `out`.
template <class D, class V, int64_t kTile, int64_t kVecs>
HWY_INLINE void StoreBlock(D d, V (&acc)[kTile][kVecs], int64_t n0, int64_t out,
                           float* y) {
  namespace hn = hwy::HWY_NAMESPACE;
  constexpr int64_t kLanes = static_cast<int64_t>(hn::MaxLanes(D()));
  const int64_t columns = std::min(kRowTileBlockOut, out - n0);
  for (int64_t m = 0; m < kTile; ++m) {
    float* row = y + m * out + n0;
    if (columns == kRowTileBlockOut) {
      for (int64_t v = 0; v < kVecs; ++v) hn::StoreU(acc[m][v], d, row + v * kLanes);
    } else {
      HWY_ALIGN float all[kRowTileBlockOut];
      for (int64_t v = 0; v < kVecs; ++v) hn::Store(acc[m][v], d, all + v * kLanes);
      std::copy(all, all + columns, row);
    }
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace layerserve::kernels::internal
HWY_AFTER_NAMESPACE();

#endif  // LAYERSERVE_KERNELS_LINEAR_HWY_ROW_TILES_INL_H_
