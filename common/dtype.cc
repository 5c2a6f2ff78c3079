// Bit-exact float32 <-> bfloat16 / float16 conversions, written with integer
// arithmetic so the result never depends on the FPU rounding mode or on compiler
// flags, and so NaN payloads and subnormals are handled explicitly.
#include "common/dtype.h"

#include <algorithm>
#include <cmath>
#include <cstring>

// The wire format is little-endian; these loops copy host-order integers.
#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "layerserve kernels assume a little-endian host"
#endif

namespace layerserve {
namespace {

uint32_t FloatBits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}

float BitsToFloat(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

// True when a 16-bit result is +-Inf (exponent all ones, mantissa zero).
bool IsInf16(uint16_t h, uint16_t exp_mask) { return (h & 0x7FFF) == exp_mask; }

template <uint16_t (*kConvert)(float), uint16_t kExpMask>
int64_t ConvertTo16(const float* src, int64_t count, unsigned char* dst) {
  int64_t overflows = 0;
  for (int64_t i = 0; i < count; ++i) {
    const uint16_t h = kConvert(src[i]);
    // Only finite inputs count: +-Inf in, +-Inf out is not a saturation.
    overflows += IsInf16(h, kExpMask) && std::isfinite(src[i]);
    std::memcpy(dst + 2 * i, &h, sizeof h);  // dst may be unaligned.
  }
  return overflows;
}

template <float (*kConvert)(uint16_t)>
void ConvertFrom16(const unsigned char* src, int64_t count, float* dst) {
  for (int64_t i = 0; i < count; ++i) {
    uint16_t h;
    std::memcpy(&h, src + 2 * i, sizeof h);  // src may be unaligned.
    dst[i] = kConvert(h);
  }
}

// The bfloat16 loops a value at a time were a call per value (about 0.35 ms each way
// for a 64-session step of 4096 values per row; bench/common/dtype_bench.cc). These
// run the same arithmetic as Float32ToBfloat16 and Bfloat16ToFloat32, without
// branches, over blocks of plain arrays the compiler vectorizes: the same bits
// (tests/common/dtype_test.cc holds them to the scalar functions).
constexpr int64_t kBulkBlock = 256;

int64_t Float32ToBfloat16Bulk(const float* src, int64_t count, unsigned char* dst) {
  int64_t overflows = 0;
  uint16_t words[kBulkBlock];
  for (int64_t b = 0; b < count; b += kBulkBlock) {
    const int64_t n = std::min(kBulkBlock, count - b);
    uint32_t block_overflows = 0;
    for (int64_t i = 0; i < n; ++i) {
      const uint32_t u = FloatBits(src[b + i]);
      const uint32_t magnitude = u & 0x7FFFFFFF;
      const uint32_t rounded = (u + 0x7FFF + ((u >> 16) & 1)) >> 16;
      const uint32_t word = magnitude > 0x7F800000 ? (u >> 16) | 0x0040 : rounded;
      words[i] = static_cast<uint16_t>(word);
      // Only finite inputs count: +-Inf in, +-Inf out is not a saturation.
      block_overflows += static_cast<uint32_t>((word & 0x7FFF) == 0x7F80) &
                         static_cast<uint32_t>(magnitude < 0x7F800000);
    }
    std::memcpy(dst + 2 * b, words, static_cast<size_t>(n) * 2);  // dst may be unaligned.
    overflows += block_overflows;
  }
  return overflows;
}

void Bfloat16ToFloat32Bulk(const unsigned char* src, int64_t count, float* dst) {
  uint16_t words[kBulkBlock];
  uint32_t bits[kBulkBlock];
  for (int64_t b = 0; b < count; b += kBulkBlock) {
    const int64_t n = std::min(kBulkBlock, count - b);
    std::memcpy(words, src + 2 * b, static_cast<size_t>(n) * 2);  // src may be unaligned.
    for (int64_t i = 0; i < n; ++i) {
      const uint32_t u = static_cast<uint32_t>(words[i]) << 16;
      bits[i] = u | ((u & 0x7FFFFFFF) > 0x7F800000 ? 0x00400000 : 0);  // Quiet a NaN.
    }
    std::memcpy(dst + b, bits, static_cast<size_t>(n) * 4);
  }
}

}  // namespace

int ElementSize(ElementType type) {
  switch (type) {
    case ElementType::kFloat32:
      return 4;
    case ElementType::kBfloat16:
    case ElementType::kFloat16:
      return 2;
  }
  return 0;
}

uint16_t Float32ToBfloat16(float value) {
  const uint32_t u = FloatBits(value);
  if ((u & 0x7FFFFFFF) > 0x7F800000) {
    // NaN: truncating could clear every mantissa bit left and make it Inf, so
    // keep the top payload bits and force the quiet bit.
    return static_cast<uint16_t>((u >> 16) | 0x0040);
  }
  // Round to nearest even: add just under half an ulp, plus one more if the kept
  // part is odd. A carry into the exponent is correct, including overflow to Inf.
  const uint32_t rounding = 0x7FFF + ((u >> 16) & 1);
  return static_cast<uint16_t>((u + rounding) >> 16);
}

float Bfloat16ToFloat32(uint16_t bits) {
  uint32_t u = static_cast<uint32_t>(bits) << 16;
  if ((u & 0x7FFFFFFF) > 0x7F800000) u |= 0x00400000;  // Quiet a signaling NaN.
  return BitsToFloat(u);
}

uint16_t Float32ToFloat16(float value) {
  const uint32_t u = FloatBits(value);
  const uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000);
  const uint32_t abs = u & 0x7FFFFFFF;

  if (abs > 0x7F800000) {  // NaN: keep the top payload bits, force quiet.
    return static_cast<uint16_t>(sign | 0x7E00 | ((abs >> 13) & 0x03FF));
  }
  if (abs >= 0x477FF000) {  // >= 65520 (max finite 65504 + half an ulp) or Inf.
    return static_cast<uint16_t>(sign | 0x7C00);
  }
  if (abs >= 0x38800000) {  // Normal in f16 (>= 2^-14).
    // Rebias the exponent (127 -> 15) and round the 23-bit mantissa to 10 bits,
    // to nearest even; a mantissa carry bumps the exponent, which is right.
    const uint32_t rebased = abs - ((127 - 15) << 23);
    const uint32_t rounding = 0x0FFF + ((rebased >> 13) & 1);
    return static_cast<uint16_t>(sign | ((rebased + rounding) >> 13));
  }
  // Subnormal or zero in f16: the result is round(|value| / 2^-24). With the
  // 24-bit significand m and biased exponent e, |value| = m * 2^(e - 150), so the
  // result is m >> (126 - e), rounded to nearest even.
  const int e = static_cast<int>(abs >> 23);
  if (e < 102) return sign;  // Below 2^-25: rounds to zero (2^-25 itself ties to 0).
  const uint32_t m = (abs & 0x007FFFFF) | 0x00800000;
  const int shift = 126 - e;  // 14..24
  uint32_t q = m >> shift;
  const uint32_t rem = m & ((1u << shift) - 1);
  const uint32_t half = 1u << (shift - 1);
  if (rem > half || (rem == half && (q & 1))) ++q;  // May become 0x400: min normal.
  return static_cast<uint16_t>(sign | q);
}

float Float16ToFloat32(uint16_t bits) {
  const uint32_t sign = static_cast<uint32_t>(bits & 0x8000) << 16;
  const uint32_t exp = (bits >> 10) & 0x1F;
  const uint32_t mant = bits & 0x03FF;
  if (exp == 0) {
    // Zero or subnormal: mant * 2^-24 is exact in float32.
    const float magnitude = static_cast<float>(mant) * 0x1p-24f;
    return BitsToFloat(sign | FloatBits(magnitude));
  }
  if (exp == 0x1F) {
    if (mant == 0) return BitsToFloat(sign | 0x7F800000);
    return BitsToFloat(sign | 0x7FC00000 | (mant << 13));  // Quiet NaN.
  }
  return BitsToFloat(sign | ((exp + (127 - 15)) << 23) | (mant << 13));
}

void ConvertToFloat32(ElementType type, const void* src, int64_t count, float* dst) {
  if (count == 0) return;  // memcpy of null pointers is undefined, even for 0 bytes.
  const auto* bytes = static_cast<const unsigned char*>(src);
  switch (type) {
    case ElementType::kFloat32:
      std::memcpy(dst, bytes, static_cast<size_t>(count) * sizeof(float));
      return;
    case ElementType::kBfloat16:
      Bfloat16ToFloat32Bulk(bytes, count, dst);
      return;
    case ElementType::kFloat16:
      ConvertFrom16<Float16ToFloat32>(bytes, count, dst);
      return;
  }
}

int64_t ConvertFromFloat32(ElementType type, const float* src, int64_t count, void* dst) {
  if (count == 0) return 0;  // memcpy of null pointers is undefined, even for 0 bytes.
  auto* bytes = static_cast<unsigned char*>(dst);
  switch (type) {
    case ElementType::kFloat32:
      std::memcpy(bytes, src, static_cast<size_t>(count) * sizeof(float));
      return 0;
    case ElementType::kBfloat16:
      return Float32ToBfloat16Bulk(src, count, bytes);
    case ElementType::kFloat16:
      return ConvertTo16<Float32ToFloat16, 0x7C00>(src, count, bytes);
  }
  return 0;
}

}  // namespace layerserve
