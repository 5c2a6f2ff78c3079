// Every rule of ValidateTensor/DecodeTensor, with the exact code and the field named.
#include "server/ops/tensor_codec.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/status_matchers.h"

namespace layerserve {
namespace {

using ::layerserve::testing::StatusIs;
using ::testing::HasSubstr;

v1::Tensor MakeTensor(std::vector<int64_t> shape, v1::DataType dtype, size_t bytes) {
  v1::Tensor t;
  t.mutable_shape()->Assign(shape.begin(), shape.end());
  t.set_dtype(dtype);
  t.set_data(std::string(bytes, '\0'));
  return t;
}

TEST(TensorCodecTest, AcceptsEveryDtypeWithExactByteCount) {
  for (auto [dtype, size] :
       {std::pair{v1::FLOAT32, 4}, {v1::BFLOAT16, 2}, {v1::FLOAT16, 2}}) {
    absl::StatusOr<TensorInfo> info =
        ValidateTensor(MakeTensor({3, 5}, dtype, 15 * size), "input", {1, 8});
    ASSERT_TRUE(info.ok()) << info.status();
    EXPECT_EQ(info->elements, 15);
    EXPECT_EQ(info->rows(), 3);
    EXPECT_EQ(info->last_dim(), 5);
  }
}

TEST(TensorCodecTest, RejectsUnspecifiedDtype) {
  EXPECT_THAT(
      ValidateTensor(MakeTensor({2}, v1::DATA_TYPE_UNSPECIFIED, 8), "input", {1, 8}),
      StatusIs(absl::StatusCode::kInvalidArgument,
               HasSubstr("input.dtype: dtype is DATA_TYPE_UNSPECIFIED")));
}

TEST(TensorCodecTest, RejectsUnknownDtype) {
  EXPECT_THAT(
      ValidateTensor(MakeTensor({2}, static_cast<v1::DataType>(7), 8), "weight", {1, 1}),
      StatusIs(absl::StatusCode::kInvalidArgument,
               HasSubstr("weight.dtype: unknown dtype 7")));
}

// INT8 is a weight dtype (ModelInfo.weight_dtype), never a tensor's or an output's.
TEST(TensorCodecTest, RejectsInt8AsATensorOrOutputDtype) {
  EXPECT_THAT(ValidateTensor(MakeTensor({2}, v1::INT8, 2), "input", {1, 8}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("input.dtype: dtype INT8 describes a server's weights "
                                 "only")));
  EXPECT_THAT(ResolveOutputType(v1::INT8, ElementType::kFloat32, "output_dtype"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("output_dtype: dtype INT8")));
}

TEST(TensorCodecTest, RejectsEmptyShapeWhereRankIsRequired) {
  EXPECT_THAT(ValidateTensor(MakeTensor({}, v1::FLOAT32, 4), "input", {1, 8}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "input.shape: rank 0 (shape []), expected rank 1 to 8"));
}

TEST(TensorCodecTest, RejectsRankAboveTheMaximum) {
  EXPECT_THAT(ValidateTensor(MakeTensor({2, 2}, v1::FLOAT32, 16), "weight", {1, 1}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "weight.shape: rank 2 (shape [2,2]), expected rank 1"));
}

TEST(TensorCodecTest, RejectsZeroDimension) {
  EXPECT_THAT(ValidateTensor(MakeTensor({3, 0}, v1::FLOAT32, 0), "input", {1, 8}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "input.shape[1]: dimension 0 in shape [3,0] must be >= 1"));
}

TEST(TensorCodecTest, RejectsNegativeDimension) {
  EXPECT_THAT(ValidateTensor(MakeTensor({-2, 4}, v1::FLOAT32, 32), "input", {1, 8}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "input.shape[0]: dimension -2 in shape [-2,4] must be >= 1"));
}

TEST(TensorCodecTest, RejectsElementCountOverflow) {
  const int64_t big = int64_t{1} << 40;
  EXPECT_THAT(ValidateTensor(MakeTensor({big, big}, v1::FLOAT32, 4), "input", {1, 8}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("input.shape: element count of [1099511627776,"
                                 "1099511627776] overflows 64 bits")));
  // The byte count, not only the element count, must fit: 2^62 elements * 4 bytes.
  EXPECT_THAT(
      ValidateTensor(MakeTensor({int64_t{1} << 62}, v1::FLOAT32, 4), "input", {1, 8}),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("overflows 64 bits")));
  const int64_t max = std::numeric_limits<int64_t>::max();
  EXPECT_THAT(ValidateTensor(MakeTensor({max, 2}, v1::BFLOAT16, 4), "input", {1, 8}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("overflows")));
}

TEST(TensorCodecTest, ByteCountMismatchStatesBothNumbers) {
  EXPECT_THAT(ValidateTensor(MakeTensor({3, 5}, v1::FLOAT32, 56), "input", {1, 8}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "input.data: shape [3,5] FLOAT32 needs 60 bytes, got 56"));
  EXPECT_THAT(ValidateTensor(MakeTensor({4}, v1::BFLOAT16, 16), "residual", {1, 8}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "residual.data: shape [4] BFLOAT16 needs 8 bytes, got 16"));
}

TEST(TensorCodecTest, DecodesAndEncodesBfloat16) {
  // 1.0, -2.0, 0.5 in bfloat16.
  const uint16_t bits[] = {0x3F80, 0xC000, 0x3F00};
  v1::Tensor t = MakeTensor({3}, v1::BFLOAT16, 0);
  t.set_data(std::string(reinterpret_cast<const char*>(bits), sizeof(bits)));
  absl::StatusOr<DecodedTensor> decoded = DecodeTensor(t, "input", {1, 8});
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  EXPECT_THAT(decoded->values, ::testing::ElementsAre(1.0f, -2.0f, 0.5f));

  v1::Tensor out;
  EXPECT_EQ(EncodeTensor({3}, decoded->values.data(), 3, ElementType::kBfloat16, &out),
            0);
  EXPECT_EQ(out.dtype(), v1::BFLOAT16);
  EXPECT_EQ(out.data(), t.data());
}

// Finite values of every magnitude, NaN, +-Inf and a signed zero, repeated to `n`.
std::vector<float> MixedValues(int64_t n) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  const float pattern[] = {1.5f, -2.25f, 0.0f,   -0.0f, 3e4f,     -7e-3f,
                           nan,  inf,    0.125f, -inf,  65504.0f, -1.0f};
  constexpr int64_t kPatternSize = sizeof(pattern) / sizeof(pattern[0]);
  std::vector<float> values(n);
  for (int64_t i = 0; i < n; ++i) values[i] = pattern[i % kPatternSize];
  return values;
}

v1::Tensor Float32Tensor(const std::vector<float>& values) {
  v1::Tensor t;
  t.add_shape(static_cast<int64_t>(values.size()));
  t.set_dtype(v1::FLOAT32);
  t.set_data(std::string(reinterpret_cast<const char*>(values.data()),
                         values.size() * sizeof(float)));
  return t;
}

// Bit-exact: NaNs compare by their bits, -0 apart from +0.
void ExpectSameBits(const Float32Values& got, const std::vector<float>& want) {
  ASSERT_EQ(got.size(), static_cast<int64_t>(want.size()));
  EXPECT_EQ(std::memcmp(got.data(), want.data(), want.size() * sizeof(float)), 0);
}

// Exactly the statistics the copying pass took before decoding read in place (the
// same loop in kernels/value_stats/value_stats.cc), and the scalar reference's counts.
void ExpectStatsOf(const kernels::ValueStats& got, const std::vector<float>& values) {
  const int64_t n = static_cast<int64_t>(values.size());
  std::vector<float> scratch(n);
  const kernels::ValueStats copied =
      kernels::CopyWithValueStats(values.data(), n, scratch.data());
  EXPECT_EQ(got.count, copied.count);
  EXPECT_EQ(got.nan, copied.nan);
  EXPECT_EQ(got.inf, copied.inf);
  EXPECT_EQ(got.abs_max, copied.abs_max);
  EXPECT_EQ(got.sum_squares, copied.sum_squares);

  const kernels::ValueStats reference = kernels::ValueStatsReference(values.data(), n);
  EXPECT_EQ(got.count, n);
  EXPECT_EQ(got.nan, reference.nan);
  EXPECT_EQ(got.inf, reference.inf);
  EXPECT_EQ(got.abs_max, reference.abs_max);
  // Float lanes per chunk against double throughout: ~1e-6 relative (value_stats.cc).
  EXPECT_NEAR(got.rms(), reference.rms(), 1e-6 * reference.rms());
}

// Sizes inside the string object (<= 15 bytes in libstdc++), on the heap, and past
// the statistics' 4096-value chunk with a tail.
constexpr int64_t kSizes[] = {1, 3, 7, 64, 4099};

TEST(TensorCodecTest, Float32DecodeViewsTheWireBytes) {
  for (int64_t n : kSizes) {
    SCOPED_TRACE(n);
    const std::vector<float> values = MixedValues(n);
    const v1::Tensor t = Float32Tensor(values);
    absl::StatusOr<DecodedTensor> decoded = DecodeTensor(t, "input", {1, 8});
    ASSERT_TRUE(decoded.ok()) << decoded.status();
    EXPECT_TRUE(decoded->values.is_view());
    EXPECT_EQ(static_cast<const void*>(decoded->values.data()),
              static_cast<const void*>(t.data().data()));
    ExpectSameBits(decoded->values, values);
    ExpectStatsOf(ValueStatsOf(*decoded), values);
  }
}

TEST(TensorCodecTest, SixteenBitDecodeOwnsConvertedValues) {
  for (ElementType type : {ElementType::kBfloat16, ElementType::kFloat16}) {
    for (int64_t n : kSizes) {
      SCOPED_TRACE(::testing::Message() << static_cast<int>(type) << " n=" << n);
      const std::vector<float> values = MixedValues(n);
      v1::Tensor t;
      EncodeTensor({n}, values.data(), n, type, &t);
      std::vector<float> converted(n);
      ConvertToFloat32(type, t.data().data(), n, converted.data());

      absl::StatusOr<DecodedTensor> decoded = DecodeTensor(t, "input", {1, 8});
      ASSERT_TRUE(decoded.ok()) << decoded.status();
      EXPECT_FALSE(decoded->values.is_view());
      const char* wire = t.data().data();
      const char* owned = reinterpret_cast<const char*>(decoded->values.data());
      EXPECT_TRUE(owned + n * sizeof(float) <= wire || owned >= wire + t.data().size());
      ExpectSameBits(decoded->values, converted);
      ExpectStatsOf(ValueStatsOf(*decoded), converted);
    }
  }
}

TEST(TensorCodecTest, MovedDecodedTensorReadsTheSameValues) {
  // FLOAT32 in the string object and on the heap (views), BFLOAT16 (owned).
  for (auto [type, n] : {std::pair{ElementType::kFloat32, int64_t{3}},
                         {ElementType::kFloat32, int64_t{64}},
                         {ElementType::kBfloat16, int64_t{3}},
                         {ElementType::kBfloat16, int64_t{64}}}) {
    SCOPED_TRACE(::testing::Message() << static_cast<int>(type) << " n=" << n);
    const std::vector<float> values = MixedValues(n);
    v1::Tensor t;
    EncodeTensor({n}, values.data(), n, type, &t);
    absl::StatusOr<DecodedTensor> decoded = DecodeTensor(t, "input", {1, 8});
    ASSERT_TRUE(decoded.ok()) << decoded.status();
    const std::vector<float> before(decoded->values.begin(), decoded->values.end());
    const bool was_view = decoded->values.is_view();

    DecodedTensor constructed(*std::move(decoded));
    ExpectSameBits(constructed.values, before);
    DecodedTensor assigned;
    assigned = std::move(constructed);
    ExpectSameBits(assigned.values, before);
    EXPECT_EQ(assigned.values.is_view(), was_view);
    if (was_view) {
      EXPECT_EQ(static_cast<const void*>(assigned.values.data()),
                static_cast<const void*>(t.data().data()));
    }
  }
}

TEST(TensorCodecTest, MisalignedFloat32BytesAreCopied) {
  // A v1::Tensor cannot hold misaligned bytes (a std::string's storage comes from
  // operator new or is inside the string object), so the bytes are laid out by hand
  // one byte into a buffer.
  for (int64_t n : kSizes) {
    SCOPED_TRACE(n);
    const std::vector<float> values = MixedValues(n);
    const size_t bytes = values.size() * sizeof(float);
    std::vector<char> buffer(bytes + 1);
    std::memcpy(buffer.data() + 1, values.data(), bytes);
    const absl::string_view data(buffer.data() + 1, bytes);
    ASSERT_NE(reinterpret_cast<std::uintptr_t>(data.data()) % alignof(float), 0u);
    TensorInfo info;
    info.shape = {n};
    info.dtype = ElementType::kFloat32;
    info.elements = n;

    const DecodedTensor decoded = DecodeTensorData(info, data);
    EXPECT_FALSE(decoded.values.is_view());
    EXPECT_EQ(decoded.info.shape, info.shape);
    ExpectSameBits(decoded.values, values);
    ExpectStatsOf(ValueStatsOf(decoded), values);
  }
}

TEST(TensorCodecTest, EncodingCountsSaturatedValues) {
  const float values[] = {1.0f, 1e6f, -1e6f, std::numeric_limits<float>::infinity()};
  v1::Tensor out;
  // 1e6 is beyond float16's 65504; an input that is already Inf is not saturation.
  EXPECT_EQ(EncodeTensor({4}, values, 4, ElementType::kFloat16, &out), 2);
  EXPECT_EQ(out.data().size(), 8u);
}

TEST(TensorCodecTest, ResizeUninitializedKeepsThePrefixAndSetsTheSize) {
  // Growing past the inline buffer (15 bytes) allocates twice that: the size must
  // still be the one asked for.
  for (size_t size : {1, 15, 16, 17, 29, 30, 31, 1000}) {
    std::string grown;
    ResizeUninitialized(&grown, size);
    EXPECT_EQ(grown.size(), size);
  }
  std::string s = "abc";
  ResizeUninitialized(&s, 1 << 20);
  ASSERT_EQ(s.size(), 1u << 20);
  EXPECT_EQ(s.compare(0, 3, "abc"), 0);
  EXPECT_EQ(s.c_str()[s.size()], '\0');  // Still a terminated std::string.
  ResizeUninitialized(&s, 2);
  EXPECT_EQ(s, "ab");
}

// Outputs are written into the reply's bytes without zeroing them first: a tensor
// whose bytes held something else comes out as exactly the new values, at every
// dtype and through both the kernel-writes-in-place and the converting path.
TEST(TensorCodecTest, OutputsOverwriteWhateverTheTensorHeld) {
  const std::vector<float> values = {1.5f, -2.0f, 0.25f, 3.0f, -0.5f, 7.0f, 8.0f};
  const int64_t n = static_cast<int64_t>(values.size());
  for (auto type :
       {ElementType::kFloat32, ElementType::kBfloat16, ElementType::kFloat16}) {
    SCOPED_TRACE(static_cast<int>(type));
    v1::Tensor filled;
    filled.set_data(std::string(4096, 'A'));
    FillTensor({n}, n, type, &filled,
               [&](float* out) { std::copy(values.begin(), values.end(), out); });
    v1::Tensor encoded;
    encoded.set_data(std::string(4096, 'A'));
    EncodeTensor({n}, values.data(), n, type, &encoded);
    for (const v1::Tensor* t : {&filled, &encoded}) {
      ASSERT_EQ(t->data().size(), n * ElementSize(type));
      auto decoded = DecodeTensor(*t, "t", RankRange{1, 1});
      ASSERT_TRUE(decoded.ok()) << decoded.status();
      EXPECT_EQ(std::vector<float>(decoded->values.data(), decoded->values.data() + n),
                values);
    }
  }
}

TEST(TensorCodecTest, OutputTypeDefaultsToInput) {
  EXPECT_EQ(*ResolveOutputType(v1::DATA_TYPE_UNSPECIFIED, ElementType::kBfloat16,
                               "output_dtype"),
            ElementType::kBfloat16);
  EXPECT_EQ(*ResolveOutputType(v1::FLOAT32, ElementType::kBfloat16, "output_dtype"),
            ElementType::kFloat32);
  EXPECT_THAT(ResolveOutputType(static_cast<v1::DataType>(9), ElementType::kFloat32,
                                "output_dtype"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("output_dtype: unknown dtype 9")));
}

}  // namespace
}  // namespace layerserve
