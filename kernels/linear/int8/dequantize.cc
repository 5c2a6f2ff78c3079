// DequantizeInt8Blocked in Google Highway, one copy per x86 target, dispatched at
// run time: the int8 prefill's tiles for oneDNN's bfloat16 matmul. A k pair of one
// 64-output block is widened, converted, scaled and rounded in registers, and the
// two rounded halves are stored side by side, as the blocked layout holds them.
//
// Why a vector kernel: the scalar loop (DequantizeInt8BlockedReference) wrote every
// other 16-bit value, which the compiler did not vectorize; with T = 128 the
// dequantization took about a fifth of the int8 prefill's time.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/linear/int8/dequantize.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
// Highway must come after foreach_target.h.
#include <cstdint>

#include "hwy/highway.h"
#include "kernels/linear/int8/int8_weights.h"

HWY_BEFORE_NAMESPACE();
namespace layerserve::kernels::internal {
namespace HWY_NAMESPACE {
namespace {

namespace hn = hwy::HWY_NAMESPACE;
using D = hn::ScalableTag<float>;
using DU = hn::RebindToUnsigned<D>;
using VU = hn::Vec<DU>;

constexpr int64_t kLanes = static_cast<int64_t>(hn::MaxLanes(D()));

// float(q) * scale for `kLanes` outputs, as bits rounded to bfloat16 in the upper
// half (FiniteToBfloat16's integer rounding, so the result is the scalar twin's).
HWY_INLINE VU RoundedBits(const int8_t* q, const float* scale) {
  const D d;
  const DU du;
  const hn::RebindToSigned<D> di;
  const hn::Rebind<int8_t, D> d8;
  const VU bits =
      hn::BitCast(du, hn::Mul(hn::ConvertTo(d, hn::PromoteTo(di, hn::LoadU(d8, q))),
                              hn::LoadU(d, scale)));
  const VU odd = hn::And(hn::ShiftRight<16>(bits), hn::Set(du, 1u));
  return hn::Add(bits, hn::Add(hn::Set(du, 0x7FFFu), odd));
}

}  // namespace

void DequantizeInt8BlockedImpl(const Int8Weights& w, int64_t nb_begin, int64_t nb_end,
                               int64_t k_block_stride, int64_t n_block_stride,
                               uint16_t* dst) {
  const DU du;
  const VU high = hn::Set(du, 0xFFFF0000u);
  for (int64_t nb = nb_begin; nb < nb_end; ++nb) {
    const int8_t* q = w.q.data() + nb * w.in * kInt8BlockOut;
    const float* scales = w.scales.data() + nb * w.groups * kInt8BlockOut;
    uint16_t* column = dst + (nb - nb_begin) * n_block_stride;
    for (int64_t k = 0; k < w.in; k += 2) {
      const int8_t* row = q + k * kInt8BlockOut;
      const float* scale = scales + (k / w.group) * kInt8BlockOut;
      uint16_t* to = column + (k / 32) * k_block_stride + ((k % 32) / 2) * 128;
      const bool pair = k + 1 < w.in;  // Past `in`, k + 1 is the layout's zero padding.
      const float* next_scale =
          pair ? scales + ((k + 1) / w.group) * kInt8BlockOut : scale;
      for (int64_t n = 0; n < kInt8BlockOut; n += kLanes) {
        const VU even = hn::ShiftRight<16>(RoundedBits(row + n, scale + n));
        const VU odd =
            pair ? hn::And(RoundedBits(row + kInt8BlockOut + n, next_scale + n), high)
                 : hn::Zero(du);
        // Little-endian: output n's k in the low 16 bits, its k + 1 in the high ones.
        // (Stored as 32-bit lanes: Highway's scalar target cannot repartition.)
        hn::StoreU(hn::Or(even, odd), du, reinterpret_cast<uint32_t*>(to + 2 * n));
      }
    }
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace layerserve::kernels::internal
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace layerserve::kernels::internal {

HWY_EXPORT(DequantizeInt8BlockedImpl);

void DequantizeInt8Blocked(const Int8Weights& w, int64_t nb_begin, int64_t nb_end,
                           int64_t k_block_stride, int64_t n_block_stride,
                           uint16_t* dst) {
  HWY_DYNAMIC_DISPATCH(DequantizeInt8BlockedImpl)
  (w, nb_begin, nb_end, k_block_stride, n_block_stride, dst);
}

}  // namespace layerserve::kernels::internal
#endif  // HWY_ONCE
