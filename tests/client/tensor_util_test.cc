// .npy arrays to wire tensors and back, with exact bits for every dtype pair.
#include "client/cpp/tensor_util.h"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/status_matchers.h"

namespace layerserve::client {
namespace {

using ::layerserve::testing::StatusIs;
using ::testing::ElementsAre;
using ::testing::IsEmpty;

template <typename T>
std::string Bytes(const std::vector<T>& values) {
  return std::string(reinterpret_cast<const char*>(values.data()),
                     values.size() * sizeof(T));
}

template <typename T>
std::vector<T> Values(const std::string& data) {
  std::vector<T> values(data.size() / sizeof(T));
  std::memcpy(values.data(), data.data(), data.size());
  return values;
}

float FromBits(uint32_t bits) {
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

NpyArray Float32Array(std::vector<int64_t> shape, std::vector<float> values) {
  return NpyArray{std::move(shape), ElementType::kFloat32, Bytes(values)};
}

v1::Tensor MakeTensor(std::vector<int64_t> shape, v1::DataType dtype, std::string data) {
  v1::Tensor tensor;
  tensor.mutable_shape()->Add(shape.begin(), shape.end());
  tensor.set_dtype(dtype);
  tensor.set_data(std::move(data));
  return tensor;
}

TEST(TensorUtilTest, Float32ToBfloat16RoundsToNearestEven) {
  const NpyArray array = Float32Array(
      {2, 2}, {1.0f, -2.5f,
               FromBits(0x3F808000),    // 1 + 2^-8: a tie, rounds down to even 0x3F80.
               FromBits(0x3F818000)});  // 1 + 3 * 2^-8: a tie, rounds up to even 0x3F82.
  int64_t saturated = -1;
  absl::StatusOr<v1::Tensor> tensor = TensorFromNpy(array, v1::BFLOAT16, &saturated);
  ASSERT_TRUE(tensor.ok()) << tensor.status();
  EXPECT_THAT(tensor->shape(), ElementsAre(2, 2));
  EXPECT_EQ(tensor->dtype(), v1::BFLOAT16);
  EXPECT_THAT(Values<uint16_t>(tensor->data()),
              ElementsAre(0x3F80, 0xC020, 0x3F80, 0x3F82));
  EXPECT_EQ(saturated, 0);
}

TEST(TensorUtilTest, Float32ToFloat16CountsSaturatedValues) {
  const NpyArray array = Float32Array(
      {5}, {1.0f, 65504.0f, 70000.0f, -std::numeric_limits<float>::infinity(), 0.5f});
  int64_t saturated = -1;
  absl::StatusOr<v1::Tensor> tensor = TensorFromNpy(array, v1::FLOAT16, &saturated);
  ASSERT_TRUE(tensor.ok()) << tensor.status();
  EXPECT_EQ(tensor->dtype(), v1::FLOAT16);
  // 70000 is beyond float16's 65504 and becomes +Inf; -Inf stays -Inf and is not
  // counted.
  EXPECT_THAT(Values<uint16_t>(tensor->data()),
              ElementsAre(0x3C00, 0x7BFF, 0x7C00, 0xFC00, 0x3800));
  EXPECT_EQ(saturated, 1);
}

TEST(TensorUtilTest, SameDtypeIsCopiedBitForBit) {
  // A signaling NaN payload survives only if nothing converts it.
  const NpyArray array = Float32Array({2}, {FromBits(0x7F800001), -0.0f});
  absl::StatusOr<v1::Tensor> tensor = TensorFromNpy(array, v1::FLOAT32);
  ASSERT_TRUE(tensor.ok()) << tensor.status();
  EXPECT_EQ(tensor->data(), array.data);

  const NpyArray halves{{3}, ElementType::kFloat16, Bytes<uint16_t>({0x7C01, 0x8000, 1})};
  tensor = TensorFromNpy(halves, v1::FLOAT16);
  ASSERT_TRUE(tensor.ok()) << tensor.status();
  EXPECT_EQ(tensor->data(), halves.data);
}

TEST(TensorUtilTest, Float16FileToFloat32AndBfloat16Wire) {
  // 1, -2, 0.5, 65504, and the smallest float16 subnormal 2^-24.
  const NpyArray array{{5},
                       ElementType::kFloat16,
                       Bytes<uint16_t>({0x3C00, 0xC000, 0x3800, 0x7BFF, 0x0001})};
  absl::StatusOr<v1::Tensor> tensor = TensorFromNpy(array, v1::FLOAT32);
  ASSERT_TRUE(tensor.ok()) << tensor.status();
  EXPECT_THAT(Values<float>(tensor->data()),
              ElementsAre(1.0f, -2.0f, 0.5f, 65504.0f, 0x1p-24f));

  tensor = TensorFromNpy(array, v1::BFLOAT16);
  ASSERT_TRUE(tensor.ok()) << tensor.status();
  // 65504 = 0x477FE000 rounds up to 65536 (0x4780) in bfloat16's 8-bit mantissa.
  EXPECT_THAT(Values<uint16_t>(tensor->data()),
              ElementsAre(0x3F80, 0xC000, 0x3F00, 0x4780, 0x3380));
}

TEST(TensorUtilTest, ScalarKeepsItsEmptyShape) {
  absl::StatusOr<v1::Tensor> tensor =
      TensorFromNpy(Float32Array({}, {2.0f}), v1::FLOAT16);
  ASSERT_TRUE(tensor.ok()) << tensor.status();
  EXPECT_THAT(tensor->shape(), IsEmpty());
  EXPECT_THAT(Values<uint16_t>(tensor->data()), ElementsAre(0x4000));

  absl::StatusOr<NpyArray> back = NpyFromTensor(*tensor);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_THAT(back->shape, IsEmpty());
  EXPECT_THAT(Values<float>(back->data), ElementsAre(2.0f));
}

TEST(TensorUtilTest, RejectsUnspecifiedWireDtype) {
  EXPECT_THAT(TensorFromNpy(Float32Array({1}, {1.0f}), v1::DATA_TYPE_UNSPECIFIED),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "unsupported dtype DATA_TYPE_UNSPECIFIED"));
}

TEST(TensorUtilTest, ResponseBfloat16ToFloat32File) {
  absl::StatusOr<NpyArray> array = NpyFromTensor(
      MakeTensor({1, 3}, v1::BFLOAT16, Bytes<uint16_t>({0x3F80, 0xC020, 0x7F80})));
  ASSERT_TRUE(array.ok()) << array.status();
  EXPECT_THAT(array->shape, ElementsAre(1, 3));
  EXPECT_EQ(array->dtype, ElementType::kFloat32);
  EXPECT_THAT(Values<float>(array->data),
              ElementsAre(1.0f, -2.5f, std::numeric_limits<float>::infinity()));
}

TEST(TensorUtilTest, ResponseToFloat16File) {
  int64_t saturated = -1;
  absl::StatusOr<NpyArray> array =
      NpyFromTensor(MakeTensor({3}, v1::FLOAT32, Bytes<float>({0.25f, 1e5f, -3.0f})),
                    ElementType::kFloat16, &saturated);
  ASSERT_TRUE(array.ok()) << array.status();
  EXPECT_EQ(array->dtype, ElementType::kFloat16);
  EXPECT_THAT(Values<uint16_t>(array->data), ElementsAre(0x3400, 0x7C00, 0xC200));
  EXPECT_EQ(saturated, 1);

  // float16 on the wire and in the file: copied unchanged.
  const std::string halves = Bytes<uint16_t>({0x3555, 0x7E01});
  array = NpyFromTensor(MakeTensor({2}, v1::FLOAT16, halves), ElementType::kFloat16);
  ASSERT_TRUE(array.ok()) << array.status();
  EXPECT_EQ(array->data, halves);
}

TEST(TensorUtilTest, RejectsMalformedResponseTensors) {
  EXPECT_THAT(NpyFromTensor(MakeTensor({2, 3}, v1::FLOAT32, std::string(20, '\0'))),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "shape [2,3] FLOAT32 needs 24 bytes, got 20"));
  EXPECT_THAT(NpyFromTensor(MakeTensor({3}, v1::BFLOAT16, std::string(8, '\0'))),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "shape [3] BFLOAT16 needs 6 bytes, got 8"));
  EXPECT_THAT(
      NpyFromTensor(MakeTensor({2, -1}, v1::FLOAT32, "")),
      StatusIs(absl::StatusCode::kInvalidArgument, "negative dimension in shape [2,-1]"));
  EXPECT_THAT(
      NpyFromTensor(MakeTensor({int64_t{1} << 40, int64_t{1} << 40}, v1::FLOAT32, "")),
      StatusIs(absl::StatusCode::kInvalidArgument,
               "shape [1099511627776,1099511627776] is too large"));
  EXPECT_THAT(NpyFromTensor(MakeTensor({1}, v1::DATA_TYPE_UNSPECIFIED, "")),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "unsupported dtype DATA_TYPE_UNSPECIFIED"));
  EXPECT_THAT(NpyFromTensor(MakeTensor({1}, static_cast<v1::DataType>(7), "")),
              StatusIs(absl::StatusCode::kInvalidArgument, "unsupported dtype 7"));
  EXPECT_THAT(NpyFromTensor(MakeTensor({1}, v1::FLOAT32, std::string(4, '\0')),
                            ElementType::kBfloat16),
              StatusIs(absl::StatusCode::kInvalidArgument, "bfloat16 has no .npy dtype"));
}

TEST(TensorUtilTest, DtypeMappingRoundTrips) {
  for (ElementType type :
       {ElementType::kFloat32, ElementType::kBfloat16, ElementType::kFloat16}) {
    absl::StatusOr<ElementType> back = ElementTypeFromProto(ProtoFromElementType(type));
    ASSERT_TRUE(back.ok()) << back.status();
    EXPECT_EQ(*back, type);
  }
}

// The float-vector helpers of the Client API pack and unpack with the same
// rounding: exact bits for ties, NaN, overflow and subnormals.
TEST(TensorUtilTest, TensorFromFloatsPacksBfloat16AndFloat16) {
  const std::vector<float> values = {1.0f,
                                     FromBits(0x3F808000),  // tie: even 0x3F80
                                     FromBits(0x3F818000),  // tie: even 0x3F82
                                     FromBits(0x3F808001),  // above the tie: 0x3F81
                                     -2.5f,
                                     std::numeric_limits<float>::quiet_NaN(),
                                     3.4e38f};  // rounds past bf16 max: +Inf
  int64_t saturated = -1;
  absl::StatusOr<v1::Tensor> bf16 =
      TensorFromFloats(values, {7}, v1::BFLOAT16, &saturated);
  ASSERT_TRUE(bf16.ok()) << bf16.status();
  EXPECT_THAT(bf16->shape(), ElementsAre(7));
  EXPECT_EQ(bf16->dtype(), v1::BFLOAT16);
  const std::vector<uint16_t> bits = Values<uint16_t>(bf16->data());
  ASSERT_EQ(bits.size(), 7u);
  EXPECT_EQ(bits[0], 0x3F80);
  EXPECT_EQ(bits[1], 0x3F80);
  EXPECT_EQ(bits[2], 0x3F82);
  EXPECT_EQ(bits[3], 0x3F81);
  EXPECT_EQ(bits[4], 0xC020);
  EXPECT_EQ(bits[5] & 0x7F80, 0x7F80);  // NaN stays NaN...
  EXPECT_NE(bits[5] & 0x007F, 0);
  EXPECT_EQ(bits[6], 0x7F80);  // ...and overflow is +Inf, counted.
  EXPECT_EQ(saturated, 1);

  absl::StatusOr<std::vector<float>> back = FloatsFromTensor(*bf16);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ((*back)[1], 1.0f);
  EXPECT_EQ((*back)[2], FromBits(0x3F820000));
  EXPECT_EQ((*back)[4], -2.5f);
  EXPECT_TRUE(std::isnan((*back)[5]));
  EXPECT_EQ((*back)[6], std::numeric_limits<float>::infinity());

  const std::vector<float> half = {65504.0f, 65520.0f, FromBits(0x33800000) /* 2^-24 */,
                                   1.0f / 3};
  absl::StatusOr<v1::Tensor> f16 =
      TensorFromFloats(half, {2, 2}, v1::FLOAT16, &saturated);
  ASSERT_TRUE(f16.ok()) << f16.status();
  EXPECT_THAT(Values<uint16_t>(f16->data()), ElementsAre(0x7BFF, 0x7C00, 0x0001, 0x3555));
  EXPECT_EQ(saturated, 1);
  absl::StatusOr<std::vector<float>> half_back = FloatsFromTensor(*f16);
  ASSERT_TRUE(half_back.ok());
  EXPECT_THAT(*half_back, ElementsAre(65504.0f, std::numeric_limits<float>::infinity(),
                                      FromBits(0x33800000), 0.333251953125f));
}

TEST(TensorUtilTest, TensorFromFloatsFloat32IsExactAndChecksTheShape) {
  const std::vector<float> values = {1.5f, -0.0f, 1e-45f};
  absl::StatusOr<v1::Tensor> t = TensorFromFloats(values, {1, 3}, v1::FLOAT32);
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(t->data(), Bytes(values));
  EXPECT_THAT(
      TensorFromFloats(values, {2, 2}, v1::FLOAT32),
      StatusIs(absl::StatusCode::kInvalidArgument, "shape [2,2] does not hold 3 values"));
  EXPECT_THAT(TensorFromFloats(values, {-1, -3}, v1::FLOAT32),
              StatusIs(absl::StatusCode::kInvalidArgument, ::testing::_));
  EXPECT_THAT(TensorFromFloats(values, {3}, v1::DATA_TYPE_UNSPECIFIED),
              StatusIs(absl::StatusCode::kInvalidArgument, ::testing::_));
  v1::Tensor bad = *t;
  bad.set_data("abc");
  EXPECT_THAT(FloatsFromTensor(bad),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "shape [1,3] FLOAT32 needs 12 bytes, got 3"));
}

}  // namespace
}  // namespace layerserve::client
