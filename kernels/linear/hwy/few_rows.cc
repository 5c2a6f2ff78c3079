// LinearFewRows in Google Highway, one copy per x86 target, dispatched at run time:
// a matrix-vector product over the weights as oneDNN packed them (see
// linear_internal.h), streaming them once per call for up to kRowTile rows at a time
// with the partial sums of one 64-output block held in registers.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/linear/hwy/few_rows.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
// Highway must come after foreach_target.h.
#include <algorithm>
#include <cstdint>

#include "hwy/highway.h"
#include "kernels/linear/hwy/row_tiles-inl.h"
#include "kernels/linear/linear_internal.h"

HWY_BEFORE_NAMESPACE();
namespace layerserve::kernels::internal {
namespace HWY_NAMESPACE {
namespace {

namespace hn = hwy::HWY_NAMESPACE;
using D = hn::ScalableTag<float>;
using V = hn::Vec<D>;

constexpr int64_t kLanes = static_cast<int64_t>(hn::MaxLanes(D()));
constexpr int64_t kVecs = kFewRowsBlockOut / kLanes;  // Vectors per 64 outputs.
static_assert(kFewRowsBlockOut == kRowTileBlockOut);
// Rows sharing one pass over a block column: 4 x 4 accumulators + 4 weight vectors
// fit AVX-512's 32 registers; narrower targets need more vectors per row.
constexpr int64_t kRowTile = kVecs <= 4 ? 4 : 1;

// One tile of `tile` rows (x: row stride w.in) against block column nb.
template <bool kBf16, int64_t kTile>
void Tile(const FewRowsWeights& w, const float* x, int64_t nb, float* y) {
  const D d;
  const int64_t n0 = nb * kFewRowsBlockOut;
  V acc[kTile][kVecs];
  StartFromBias(d, w.bias, n0, w.out, acc);
  const auto* column =
      static_cast<const char*>(w.data) + nb * w.n_block_stride * (kBf16 ? 2 : 4);
  for (int64_t k0 = 0; k0 < w.in; k0 += w.k_block) {
    const auto* block = column + (k0 / w.k_block) * w.k_block_stride * (kBf16 ? 2 : 4);
    const int64_t kn = std::min(w.k_block, w.in - k0);
    if constexpr (kBf16) {
      const hn::RebindToUnsigned<D> du;
      const auto* pairs = reinterpret_cast<const uint32_t*>(block);
      const auto high = hn::Set(du, 0xFFFF0000u);
      for (int64_t k = 0; k < kn; k += 2) {
        // Each 32-bit word holds the weights of k (low half) and k + 1 (high half).
        const uint32_t* row = pairs + (k / 2) * kFewRowsBlockOut;
        for (int64_t v = 0; v < kVecs; ++v) {
          const auto u = hn::LoadU(du, row + v * kLanes);
          const V even = hn::BitCast(d, hn::ShiftLeft<16>(u));
          for (int64_t m = 0; m < kTile; ++m) {
            acc[m][v] = hn::MulAdd(hn::Set(d, x[m * w.in + k0 + k]), even, acc[m][v]);
          }
          if (k + 1 < kn) {
            const V odd = hn::BitCast(d, hn::And(u, high));
            for (int64_t m = 0; m < kTile; ++m) {
              acc[m][v] =
                  hn::MulAdd(hn::Set(d, x[m * w.in + k0 + k + 1]), odd, acc[m][v]);
            }
          }
        }
      }
    } else {
      const auto* weights = reinterpret_cast<const float*>(block);
      for (int64_t k = 0; k < kn; ++k) {
        for (int64_t v = 0; v < kVecs; ++v) {
          const V wv = hn::LoadU(d, weights + k * kFewRowsBlockOut + v * kLanes);
          for (int64_t m = 0; m < kTile; ++m) {
            acc[m][v] = hn::MulAdd(hn::Set(d, x[m * w.in + k0 + k]), wv, acc[m][v]);
          }
        }
      }
    }
  }
  StoreBlock(d, acc, n0, w.out, y);
}

template <bool kBf16>
void Run(const FewRowsWeights& w, const float* x, int64_t rows, int64_t nb_begin,
         int64_t nb_end, float* y) {
  for (int64_t nb = nb_begin; nb < nb_end; ++nb) {
    ForEachRowTile<kRowTile>(rows, [&](auto tile, int64_t m) {
      Tile<kBf16, decltype(tile)::value>(w, x + m * w.in, nb, y + m * w.out);
    });
  }
}

}  // namespace

void LinearFewRowsBlocksImpl(const FewRowsWeights& w, const float* x, int64_t rows,
                             int64_t nb_begin, int64_t nb_end, float* y) {
  (w.bf16 ? Run<true> : Run<false>)(w, x, rows, nb_begin, nb_end, y);
}

}  // namespace HWY_NAMESPACE
}  // namespace layerserve::kernels::internal
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace layerserve::kernels::internal {

HWY_EXPORT(LinearFewRowsBlocksImpl);

void LinearFewRowsBlocks(const FewRowsWeights& w, const float* x, int64_t rows,
                         int64_t nb_begin, int64_t nb_end, float* y) {
  HWY_DYNAMIC_DISPATCH(LinearFewRowsBlocksImpl)(w, x, rows, nb_begin, nb_end, y);
}

}  // namespace layerserve::kernels::internal
#endif  // HWY_ONCE
