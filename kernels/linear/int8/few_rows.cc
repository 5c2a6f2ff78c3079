// LinearInt8FewRowsBlocks in Google Highway, one copy per x86 target, dispatched at
// run time (AVX-512, AVX2, ...): the decode steps' matrix-vector product over int8
// weights (kernels/linear/int8/int8_weights.h). Each 64-output block's int8 weights are
// read once per tile of rows, widened and converted to float32 in registers, multiplied
// by their group's scales and accumulated with FMA, the partial sums held in registers.
//
// Not VNNI (VPDPBUSD): it multiplies int8 by int8, so the activations would have to
// be quantized too, which this weight-only format promises not to do.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/linear/int8/few_rows.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
// Highway must come after foreach_target.h.
#include <algorithm>
#include <cstdint>

#include "hwy/highway.h"
#include "kernels/linear/hwy/row_tiles-inl.h"
#include "kernels/linear/int8/int8_weights.h"

HWY_BEFORE_NAMESPACE();
namespace layerserve::kernels::internal {
namespace HWY_NAMESPACE {
namespace {

namespace hn = hwy::HWY_NAMESPACE;
using D = hn::ScalableTag<float>;
using V = hn::Vec<D>;

constexpr int64_t kLanes = static_cast<int64_t>(hn::MaxLanes(D()));
constexpr int64_t kVecs = kInt8BlockOut / kLanes;  // Vectors per 64 outputs.
static_assert(kInt8BlockOut == kRowTileBlockOut);
// Rows sharing one pass over a block: 4 x 4 accumulators + 4 scale and 4 weight
// vectors fit AVX-512's 32 registers; narrower targets need more vectors per row.
constexpr int64_t kRowTile = kVecs <= 4 ? 4 : 1;

template <int64_t kTile>
void Tile(const Int8Weights& w, const float* x, int64_t nb, float* y) {
  const D d;
  const hn::RebindToSigned<D> di;
  const hn::Rebind<int8_t, D> d8;
  const int64_t n0 = nb * kInt8BlockOut;
  V acc[kTile][kVecs];
  StartFromBias(d, w.bias.data(), n0, w.out, acc);
  const int8_t* q = w.q.data() + nb * w.in * kInt8BlockOut;
  const float* scales = w.scales.data() + nb * w.groups * kInt8BlockOut;
  for (int64_t g = 0; g < w.groups; ++g) {
    V scale[kVecs];
    for (int64_t v = 0; v < kVecs; ++v) {
      scale[v] = hn::LoadU(d, scales + g * kInt8BlockOut + v * kLanes);
    }
    const int64_t k_end = std::min(w.in, (g + 1) * w.group);
    for (int64_t k = g * w.group; k < k_end; ++k) {
      for (int64_t v = 0; v < kVecs; ++v) {
        const auto q8 = hn::LoadU(d8, q + k * kInt8BlockOut + v * kLanes);
        const V wv = hn::Mul(hn::ConvertTo(d, hn::PromoteTo(di, q8)), scale[v]);
        for (int64_t m = 0; m < kTile; ++m) {
          acc[m][v] = hn::MulAdd(hn::Set(d, x[m * w.in + k]), wv, acc[m][v]);
        }
      }
    }
  }
  StoreBlock(d, acc, n0, w.out, y);
}

}  // namespace

void LinearInt8FewRowsBlocksImpl(const Int8Weights& w, const float* x, int64_t rows,
                                 int64_t nb_begin, int64_t nb_end, float* y) {
  for (int64_t nb = nb_begin; nb < nb_end; ++nb) {
    ForEachRowTile<kRowTile>(rows, [&](auto tile, int64_t m) {
      Tile<decltype(tile)::value>(w, x + m * w.in, nb, y + m * w.out);
    });
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace layerserve::kernels::internal
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace layerserve::kernels::internal {

HWY_EXPORT(LinearInt8FewRowsBlocksImpl);

void LinearInt8FewRowsBlocks(const Int8Weights& w, const float* x, int64_t rows,
                             int64_t nb_begin, int64_t nb_end, float* y) {
  HWY_DYNAMIC_DISPATCH(LinearInt8FewRowsBlocksImpl)(w, x, rows, nb_begin, nb_end, y);
}

}  // namespace layerserve::kernels::internal
#endif  // HWY_ONCE
