// Tests of common/dtype.h: exact round trips over every 16-bit pattern, rounding to
// nearest even checked against a definition (the nearest representable value,
// ties to the even pattern) over a sweep of float32 patterns, and the edge values
// by name: ties, NaN, +-Inf, overflow counting, f16 subnormals, max finite values.
#include "common/dtype.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

namespace layerserve::kernels {
namespace {

uint32_t Bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}

float FromBits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

struct Format {
  const char* name;
  uint16_t (*encode)(float);
  float (*decode)(uint16_t);
  uint16_t inf;        // Bits of +Inf.
  uint16_t quiet_bit;  // Top mantissa bit.
  double past_max;     // Value of the pattern after max finite, were it finite.
};

const Format kBf16{"bf16", Float32ToBfloat16, Bfloat16ToFloat32, 0x7F80, 0x0040, 0x1p128};
const Format kF16{"f16", Float32ToFloat16, Float16ToFloat32, 0x7C00, 0x0200, 65536.0};

bool IsNan16(const Format& f, uint16_t h) { return (h & 0x7FFF) > f.inf; }

// Magnitude pattern m as a double; the pattern after max finite counts as
// past_max so that rounding up to Inf is judged like any other rounding.
double Magnitude(const Format& f, uint16_t m) {
  return m == f.inf ? f.past_max : static_cast<double>(f.decode(m));
}

// The definition of round-to-nearest-even: the result is no farther from v than
// either neighbouring pattern, and on a tie its pattern is even.
void ExpectNearestEven(const Format& f, float v) {
  const uint16_t h = f.encode(v);
  const uint16_t m = h & 0x7FFF;
  ASSERT_EQ(h >> 15, Bits(v) >> 31) << f.name << " sign of " << v;
  ASSERT_LE(m, f.inf) << f.name << " " << v << " became NaN";
  const double a = std::fabs(static_cast<double>(v));
  const double err = std::fabs(a - Magnitude(f, m));
  if (m > 0) {
    const double below = std::fabs(a - Magnitude(f, m - 1));
    ASSERT_LE(err, below) << f.name << " " << v << " -> " << std::hex << h;
    if (err == below) {
      ASSERT_EQ(m & 1, 0) << f.name << " tie " << v;
    }
  }
  if (m < f.inf) {
    const double above = std::fabs(a - Magnitude(f, m + 1));
    ASSERT_LE(err, above) << f.name << " " << v << " -> " << std::hex << h;
    if (err == above) {
      ASSERT_EQ(m & 1, 0) << f.name << " tie " << v;
    }
  }
}

// Every finite float32 whose low `low_bits` bits take one of the given values:
// the values either side of a rounding boundary and on it (ties).
void SweepBoundaries(const Format& f, int low_bits, std::vector<uint32_t> lows) {
  for (uint32_t high = 0; high < (1u << (32 - low_bits)); ++high) {
    for (uint32_t low : lows) {
      const float v = FromBits((high << low_bits) | low);
      if (!std::isfinite(v)) continue;
      ExpectNearestEven(f, v);
      if (::testing::Test::HasFatalFailure()) return;
    }
  }
}

TEST(ElementSizeTest, Bytes) {
  EXPECT_EQ(ElementSize(ElementType::kFloat32), 4);
  EXPECT_EQ(ElementSize(ElementType::kBfloat16), 2);
  EXPECT_EQ(ElementSize(ElementType::kFloat16), 2);
}

TEST(DtypeTest, EveryBf16PatternRoundTripsExactly) {
  for (uint32_t h = 0; h <= 0xFFFF; ++h) {
    const float f = Bfloat16ToFloat32(static_cast<uint16_t>(h));
    EXPECT_EQ(Bits(f), h << 16 | (IsNan16(kBf16, h) ? 0x00400000u : 0u)) << std::hex << h;
    const uint16_t back = Float32ToBfloat16(f);
    if (IsNan16(kBf16, h)) {
      EXPECT_EQ(back, h | kBf16.quiet_bit) << std::hex << h;  // Payload kept, quiet.
    } else {
      EXPECT_EQ(back, h) << std::hex << h;
    }
  }
}

TEST(DtypeTest, EveryF16PatternRoundTripsExactly) {
  for (uint32_t h = 0; h <= 0xFFFF; ++h) {
    const float f = Float16ToFloat32(static_cast<uint16_t>(h));
    const uint16_t back = Float32ToFloat16(f);
    if (IsNan16(kF16, h)) {
      EXPECT_TRUE(std::isnan(f)) << std::hex << h;
      EXPECT_EQ(back, h | kF16.quiet_bit) << std::hex << h;
    } else {
      EXPECT_EQ(back, h) << std::hex << h;
    }
  }
}

TEST(DtypeTest, Bf16RoundsToNearestEvenAtEveryBoundary) {
  // bf16 keeps the top 16 bits; the boundary between two results is at low 0x8000.
  SweepBoundaries(kBf16, 16, {0x0000, 0x0001, 0x7FFF, 0x8000, 0x8001, 0xFFFF});
}

TEST(DtypeTest, F16RoundsToNearestEvenAtEveryBoundary) {
  // Normal f16 keeps 10 of 23 mantissa bits; the boundary is at low 13 bits 0x1000.
  // Subnormal results have boundaries at other bits; the sweep crosses them too,
  // and F16SubnormalTies checks them by name.
  SweepBoundaries(kF16, 13, {0x0000, 0x0001, 0x0FFF, 0x1000, 0x1001, 0x1FFF, 0x0800});
}

TEST(DtypeTest, RoundingSweepOverAllFloats) {
  // A prime stride visits patterns of every exponent and mantissa shape.
  for (uint64_t u = 0; u <= 0xFFFFFFFFu; u += 4099) {
    const float v = FromBits(static_cast<uint32_t>(u));
    if (!std::isfinite(v)) continue;
    ExpectNearestEven(kBf16, v);
    ExpectNearestEven(kF16, v);
    if (HasFatalFailure()) return;
  }
}

#if defined(__FLT16_MAX__)
// The compiler's own _Float16 conversion (correctly rounded in libgcc) as an
// independent oracle for float16.
TEST(DtypeTest, F16MatchesCompilerConversion) {
  for (uint64_t u = 0; u <= 0xFFFFFFFFu; u += 257) {
    const float v = FromBits(static_cast<uint32_t>(u));
    if (std::isnan(v)) continue;
    const _Float16 h = static_cast<_Float16>(v);
    uint16_t expected;
    std::memcpy(&expected, &h, sizeof expected);
    ASSERT_EQ(Float32ToFloat16(v), expected) << v;
  }
}
#endif

TEST(DtypeTest, TiesGoToEven) {
  // bf16 around 1.0 has ulp 2^-7.
  EXPECT_EQ(Float32ToBfloat16(1.0f + 0x1p-8f), 0x3F80);             // Tie, 0x3F80 even.
  EXPECT_EQ(Float32ToBfloat16(1.0f + 3 * 0x1p-8f), 0x3F82);         // Tie, up to even.
  EXPECT_EQ(Float32ToBfloat16(1.0f + 0x1p-8f + 0x1p-23f), 0x3F81);  // Past the tie.
  EXPECT_EQ(Float32ToBfloat16(-(1.0f + 0x1p-8f)), 0xBF80);
  // f16 around 1.0 has ulp 2^-10.
  EXPECT_EQ(Float32ToFloat16(1.0f + 0x1p-11f), 0x3C00);
  EXPECT_EQ(Float32ToFloat16(1.0f + 3 * 0x1p-11f), 0x3C02);
  EXPECT_EQ(Float32ToFloat16(1.0f + 0x1p-11f + 0x1p-23f), 0x3C01);
  EXPECT_EQ(Float32ToFloat16(-(1.0f + 3 * 0x1p-11f)), 0xBC02);
}

TEST(DtypeTest, F16Subnormals) {
  EXPECT_EQ(Float16ToFloat32(0x0001), 0x1p-24f);         // Smallest subnormal.
  EXPECT_EQ(Float16ToFloat32(0x03FF), 1023 * 0x1p-24f);  // Largest subnormal.
  EXPECT_EQ(Float16ToFloat32(0x0400), 0x1p-14f);         // Smallest normal.
  EXPECT_EQ(Float16ToFloat32(0x8001), -0x1p-24f);
  EXPECT_EQ(Float32ToFloat16(0x1p-24f), 0x0001);
  EXPECT_EQ(Float32ToFloat16(1023 * 0x1p-24f), 0x03FF);
  EXPECT_EQ(Float32ToFloat16(5 * 0x1p-24f), 0x0005);
  EXPECT_EQ(Float32ToFloat16(-5 * 0x1p-24f), 0x8005);
}

TEST(DtypeTest, F16SubnormalTies) {
  EXPECT_EQ(Float32ToFloat16(0x1p-25f), 0x0000);         // Half the smallest: to 0.
  EXPECT_EQ(Float32ToFloat16(-0x1p-25f), 0x8000);        // Keeps its sign.
  EXPECT_EQ(Float32ToFloat16(0x1.000002p-25f), 0x0001);  // Just past the tie.
  EXPECT_EQ(Float32ToFloat16(3 * 0x1p-25f), 0x0002);     // 1.5 units: to even 2.
  EXPECT_EQ(Float32ToFloat16(5 * 0x1p-25f), 0x0002);     // 2.5 units: to even 2.
  EXPECT_EQ(Float32ToFloat16(0x1p-30f), 0x0000);         // Far below: zero.
  EXPECT_EQ(Float32ToFloat16(0x1p-149f), 0x0000);        // f32 subnormal: zero.
  // 1023.5 units ties between the largest subnormal (odd) and the smallest normal.
  EXPECT_EQ(Float32ToFloat16(1023.5f * 0x1p-24f), 0x0400);
  EXPECT_EQ(Float32ToFloat16(1022.5f * 0x1p-24f), 0x03FE);
}

TEST(DtypeTest, MaxFiniteValues) {
  EXPECT_EQ(Float16ToFloat32(0x7BFF), 65504.0f);
  EXPECT_EQ(Float32ToFloat16(65504.0f), 0x7BFF);
  EXPECT_EQ(Float32ToFloat16(65519.996f), 0x7BFF);  // Below the tie: stays finite.
  EXPECT_EQ(Float32ToFloat16(65520.0f), 0x7C00);    // The tie rounds to even: Inf.
  EXPECT_EQ(Float32ToFloat16(-65520.0f), 0xFC00);
  const float bf16_max = FromBits(0x7F7F0000);  // 3.3895314e38
  EXPECT_EQ(Bfloat16ToFloat32(0x7F7F), bf16_max);
  EXPECT_EQ(Float32ToBfloat16(bf16_max), 0x7F7F);
  EXPECT_EQ(Float32ToBfloat16(FromBits(0x7F7F7FFF)), 0x7F7F);  // Below the tie.
  EXPECT_EQ(Float32ToBfloat16(FromBits(0x7F7F8000)), 0x7F80);  // Tie: even is Inf.
  EXPECT_EQ(Float32ToBfloat16(std::numeric_limits<float>::max()), 0x7F80);
  EXPECT_EQ(Float32ToBfloat16(std::numeric_limits<float>::lowest()), 0xFF80);
}

TEST(DtypeTest, Infinities) {
  const float inf = std::numeric_limits<float>::infinity();
  EXPECT_EQ(Float32ToBfloat16(inf), 0x7F80);
  EXPECT_EQ(Float32ToBfloat16(-inf), 0xFF80);
  EXPECT_EQ(Float32ToFloat16(inf), 0x7C00);
  EXPECT_EQ(Float32ToFloat16(-inf), 0xFC00);
  EXPECT_EQ(Bfloat16ToFloat32(0x7F80), inf);
  EXPECT_EQ(Bfloat16ToFloat32(0xFF80), -inf);
  EXPECT_EQ(Float16ToFloat32(0x7C00), inf);
  EXPECT_EQ(Float16ToFloat32(0xFC00), -inf);
}

TEST(DtypeTest, NanStaysQuietNan) {
  // Payloads only in the low bits would truncate to the Inf pattern if converted
  // naively; the result must still be NaN, and quiet.
  for (uint32_t bits :
       {0x7FC00000u, 0x7F800001u, 0x7FA00000u, 0xFF800001u, 0xFFFFFFFFu}) {
    const float nan = FromBits(bits);
    const uint16_t b = Float32ToBfloat16(nan);
    EXPECT_TRUE(IsNan16(kBf16, b)) << std::hex << bits;
    EXPECT_TRUE(b & kBf16.quiet_bit) << std::hex << bits;
    EXPECT_EQ(b >> 15, bits >> 31) << "sign kept";
    const uint16_t h = Float32ToFloat16(nan);
    EXPECT_TRUE(IsNan16(kF16, h)) << std::hex << bits;
    EXPECT_TRUE(h & kF16.quiet_bit) << std::hex << bits;
    EXPECT_EQ(h >> 15, bits >> 31) << "sign kept";
  }
  // 16-bit signaling NaNs come back as quiet float32 NaNs.
  EXPECT_EQ(Bits(Bfloat16ToFloat32(0x7F81)), 0x7FC10000u);
  EXPECT_TRUE(std::isnan(Float16ToFloat32(0x7C01)));
  EXPECT_TRUE(Bits(Float16ToFloat32(0x7C01)) & 0x00400000u);
}

TEST(DtypeTest, BulkConversionIsLittleEndianAndUnaligned) {
  const std::vector<float> values = {1.0f, -2.5f, 65504.0f, 0x1p-24f,
                                     0.0f, -0.0f, 3.0e-3f};
  for (ElementType type :
       {ElementType::kFloat32, ElementType::kBfloat16, ElementType::kFloat16}) {
    const size_t size = ElementSize(type);
    // Offset 1 makes every element misaligned.
    std::vector<unsigned char> wire(1 + values.size() * size);
    EXPECT_EQ(ConvertFromFloat32(type, values.data(), values.size(), wire.data() + 1), 0);
    std::vector<float> back(values.size());
    ConvertToFloat32(type, wire.data() + 1, values.size(), back.data());
    for (size_t i = 0; i < values.size(); ++i) {
      float expected = values[i];
      if (type == ElementType::kBfloat16) {
        expected = Bfloat16ToFloat32(Float32ToBfloat16(values[i]));
      } else if (type == ElementType::kFloat16) {
        expected = Float16ToFloat32(Float32ToFloat16(values[i]));
      }
      EXPECT_EQ(Bits(back[i]), Bits(expected)) << static_cast<int>(type) << " " << i;
    }
  }
  // 1.0 is 0x3F80 in bf16 and 0x3C00 in f16: low byte first on the wire.
  const float one = 1.0f;
  unsigned char b[2];
  ConvertFromFloat32(ElementType::kBfloat16, &one, 1, b);
  EXPECT_EQ(b[0], 0x80);
  EXPECT_EQ(b[1], 0x3F);
  ConvertFromFloat32(ElementType::kFloat16, &one, 1, b);
  EXPECT_EQ(b[0], 0x00);
  EXPECT_EQ(b[1], 0x3C);
}

// The bulk bfloat16 loops (vectorized, without branches) against their scalar twins,
// value by value: every bfloat16 pattern in, and a sweep of float32 patterns out
// (every exponent and sign with low mantissas around each rounding boundary, NaN
// payloads, Inf, subnormals, zeros), at odd counts and misaligned wire bytes.
TEST(DtypeTest, BulkBfloat16EqualsTheScalarConversions) {
  std::vector<unsigned char> every(2 * 0x10000 + 1);
  for (uint32_t h = 0; h <= 0xFFFF; ++h) {
    every[1 + 2 * h] = h & 0xFF;
    every[2 + 2 * h] = h >> 8;
  }
  std::vector<float> decoded(0x10000);
  ConvertToFloat32(ElementType::kBfloat16, every.data() + 1, 0x10000, decoded.data());
  for (uint32_t h = 0; h <= 0xFFFF; ++h) {
    ASSERT_EQ(Bits(decoded[h]), Bits(Bfloat16ToFloat32(static_cast<uint16_t>(h))))
        << std::hex << h;
  }
  std::vector<float> values;
  for (uint32_t high = 0; high < (1u << 9); ++high) {  // Sign and exponent.
    for (uint32_t mantissa : {0x0u, 0x1u, 0x7FFFu, 0x8000u, 0x8001u, 0x18000u, 0x17FFFu,
                              0x400000u, 0x7F7FFFu, 0x7FFFFFu, 0x7F8000u, 0x7FFF80u}) {
      values.push_back(FromBits((high << 23) | mantissa));
    }
  }
  int64_t expected_overflows = 0;
  for (float v : values) {
    const uint16_t h = Float32ToBfloat16(v);
    expected_overflows += (h & 0x7FFF) == 0x7F80 && std::isfinite(v);
  }
  ASSERT_GT(expected_overflows, 0);  // The sweep reaches past bfloat16's max.
  for (size_t count :
       {size_t{1}, size_t{7}, size_t{255}, size_t{257}, size_t{4097}, values.size()}) {
    std::vector<unsigned char> wire(1 + 2 * count);
    const int64_t overflows =
        ConvertFromFloat32(ElementType::kBfloat16, values.data(), count, wire.data() + 1);
    int64_t counted = 0;
    for (size_t i = 0; i < count; ++i) {
      const uint16_t h = Float32ToBfloat16(values[i]);
      counted += (h & 0x7FFF) == 0x7F80 && std::isfinite(values[i]);
      ASSERT_EQ(wire[1 + 2 * i] | (wire[2 + 2 * i] << 8), h)
          << count << " values, " << i << ": " << std::hex << Bits(values[i]);
    }
    EXPECT_EQ(overflows, counted) << count << " values";
  }
}

TEST(DtypeTest, OverflowCountsOnlyFiniteInputs) {
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float max = std::numeric_limits<float>::max();
  std::vector<unsigned char> wire(64);

  // bf16: FLT_MAX and -FLT_MAX round to +-Inf (2); Inf and NaN in are not counted.
  const std::vector<float> big = {max, -max, 3.0e38f, inf, -inf, nan, 1.0f};
  EXPECT_EQ(
      ConvertFromFloat32(ElementType::kBfloat16, big.data(), big.size(), wire.data()), 2);
  // 3e38 is below bf16's max + half ulp, so it stayed finite.
  std::vector<float> back(big.size());
  ConvertToFloat32(ElementType::kBfloat16, wire.data(), big.size(), back.data());
  EXPECT_TRUE(std::isfinite(back[2]));

  // f16: 65520 (the tie), 1e5, -1e5 and FLT_MAX overflow (4); 65504 and 65519 don't.
  const std::vector<float> f16 = {65504.0f, 65519.0f, 65520.0f, 1e5f, -1e5f,
                                  max,      inf,      nan,      -0.0f};
  EXPECT_EQ(
      ConvertFromFloat32(ElementType::kFloat16, f16.data(), f16.size(), wire.data()), 4);
  EXPECT_EQ(
      ConvertFromFloat32(ElementType::kFloat32, big.data(), big.size(), wire.data()), 0);
}

}  // namespace
}  // namespace layerserve::kernels
