// Every rule of ValidateTensor/DecodeTensor, with the exact code and the field named.
#include "server/tensor_codec.h"

#include <cstring>
#include <limits>

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
  for (auto [dtype, size] : {std::pair{v1::FLOAT32, 4}, {v1::BFLOAT16, 2},
                             {v1::FLOAT16, 2}}) {
    absl::StatusOr<TensorInfo> info =
        ValidateTensor(MakeTensor({3, 5}, dtype, 15 * size), "input", {1, 8});
    ASSERT_TRUE(info.ok()) << info.status();
    EXPECT_EQ(info->elements, 15);
    EXPECT_EQ(info->rows(), 3);
    EXPECT_EQ(info->last_dim(), 5);
  }
}

TEST(TensorCodecTest, RejectsUnspecifiedDtype) {
  EXPECT_THAT(ValidateTensor(MakeTensor({2}, v1::DATA_TYPE_UNSPECIFIED, 8), "input",
                             {1, 8}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("input.dtype: dtype is DATA_TYPE_UNSPECIFIED")));
}

TEST(TensorCodecTest, RejectsUnknownDtype) {
  EXPECT_THAT(ValidateTensor(MakeTensor({2}, static_cast<v1::DataType>(7), 8),
                             "weight", {1, 1}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("weight.dtype: unknown dtype 7")));
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
  EXPECT_EQ(EncodeTensor({3}, decoded->values.data(), 3, kernels::ElementType::kBfloat16,
                         &out),
            0);
  EXPECT_EQ(out.dtype(), v1::BFLOAT16);
  EXPECT_EQ(out.data(), t.data());
}

TEST(TensorCodecTest, EncodingCountsSaturatedValues) {
  const float values[] = {1.0f, 1e6f, -1e6f, std::numeric_limits<float>::infinity()};
  v1::Tensor out;
  // 1e6 is beyond float16's 65504; an input that is already Inf is not saturation.
  EXPECT_EQ(EncodeTensor({4}, values, 4, kernels::ElementType::kFloat16, &out), 2);
  EXPECT_EQ(out.data().size(), 8u);
}

TEST(TensorCodecTest, OutputTypeDefaultsToInput) {
  EXPECT_EQ(*ResolveOutputType(v1::DATA_TYPE_UNSPECIFIED,
                               kernels::ElementType::kBfloat16, "output_dtype"),
            kernels::ElementType::kBfloat16);
  EXPECT_EQ(*ResolveOutputType(v1::FLOAT32, kernels::ElementType::kBfloat16,
                               "output_dtype"),
            kernels::ElementType::kFloat32);
  EXPECT_THAT(ResolveOutputType(static_cast<v1::DataType>(9),
                                kernels::ElementType::kFloat32, "output_dtype"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("output_dtype: unknown dtype 9")));
}

}  // namespace
}  // namespace layerserve
