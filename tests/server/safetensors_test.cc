// SafetensorsFile on files written here byte by byte: valid views, and a clear
// INVALID_ARGUMENT naming the file and the tensor for every kind of corruption.
#include "server/models/safetensors.h"

#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <fstream>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/status_matchers.h"

namespace layerserve {
namespace {

using ::layerserve::testing::StatusIs;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

class SafetensorsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char pattern[] = "/tmp/safetensors_test_XXXXXX";
    ASSERT_NE(mkdtemp(pattern), nullptr);
    dir_ = pattern;
  }
  void TearDown() override { std::system(("rm -rf " + dir_).c_str()); }

  // Writes header length, `header` and `data`; returns the path.
  std::string Write(const std::string& header, const std::string& data,
                    int64_t header_length = -1) {
    const std::string path = dir_ + "/model.safetensors";
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    uint64_t length = header_length < 0 ? header.size() : header_length;
    char bytes[8];
    for (int i = 0; i < 8; ++i) bytes[i] = static_cast<char>((length >> (8 * i)) & 0xFF);
    out.write(bytes, 8);
    out << header << data;
    return path;
  }

  std::string dir_;
};

std::string Floats(std::initializer_list<float> values) {
  std::string s(values.size() * 4, '\0');
  std::memcpy(s.data(), values.begin(), s.size());
  return s;
}

TEST_F(SafetensorsTest, OpensValidFileWithEveryDtype) {
  const std::string data = Floats({1, 2, 3, 4, 5, 6}) +
                           std::string("\x80\x3f\x00\x3c", 4) + std::string(8, '\x07');
  const std::string path =
      Write(R"({"__metadata__":{"format":"pt"},)"
            R"("w":{"dtype":"F32","shape":[2,3],"data_offsets":[0,24]},)"
            R"("b":{"dtype":"BF16","shape":[1],"data_offsets":[24,26]},)"
            R"("h":{"dtype":"F16","shape":[1],"data_offsets":[26,28]},)"
            R"("ids":{"dtype":"I64","shape":[1],"data_offsets":[28,36]}})",
            data);
  absl::StatusOr<std::unique_ptr<SafetensorsFile>> file = SafetensorsFile::Open(path);
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_EQ((*file)->tensors().size(), 4u);
  const SafetensorsTensor* w = (*file)->Find("w");
  ASSERT_NE(w, nullptr);
  EXPECT_EQ(w->dtype, ElementType::kFloat32);
  EXPECT_THAT(w->shape, ElementsAre(2, 3));
  EXPECT_EQ(w->elements(), 6);
  float values[6];
  std::memcpy(values, w->data, sizeof(values));
  EXPECT_THAT(values, ElementsAre(1, 2, 3, 4, 5, 6));
  EXPECT_EQ((*file)->Find("b")->dtype, ElementType::kBfloat16);
  EXPECT_EQ((*file)->Find("h")->dtype, ElementType::kFloat16);
  EXPECT_FALSE((*file)->Find("ids")->dtype.has_value());
  EXPECT_EQ((*file)->Find("ids")->dtype_name, "I64");
  EXPECT_EQ((*file)->Find("missing"), nullptr);
}

TEST_F(SafetensorsTest, MissingFileIsNotFound) {
  EXPECT_THAT(SafetensorsFile::Open(dir_ + "/nope.safetensors"),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("nope.safetensors")));
}

TEST_F(SafetensorsTest, RejectsFileShorterThanTheLengthField) {
  const std::string path = dir_ + "/model.safetensors";
  std::ofstream(path) << "abc";
  EXPECT_THAT(SafetensorsFile::Open(path),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("model.safetensors: truncated: 3 bytes")));
}

TEST_F(SafetensorsTest, RejectsHeaderLengthPastTheFile) {
  EXPECT_THAT(SafetensorsFile::Open(Write("{}", "", 1000)),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("header length 1000 does not fit the 10-byte file")));
}

TEST_F(SafetensorsTest, RejectsHeaderThatIsNotJson) {
  EXPECT_THAT(SafetensorsFile::Open(Write("{\"w\": [", "")),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("header is not a JSON object")));
}

TEST_F(SafetensorsTest, RejectsTruncatedData) {
  EXPECT_THAT(
      SafetensorsFile::Open(Write(
          R"({"w":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})", Floats({1, 2}))),
      StatusIs(absl::StatusCode::kInvalidArgument,
               HasSubstr("tensor \"w\": data_offsets [0, 16] outside the 8-byte data "
                         "section")));
}

TEST_F(SafetensorsTest, RejectsOffsetsThatDisagreeWithTheShape) {
  EXPECT_THAT(
      SafetensorsFile::Open(
          Write(R"({"w":{"dtype":"F32","shape":[3],"data_offsets":[0,16]}})",
                Floats({1, 2, 3, 4}))),
      StatusIs(
          absl::StatusCode::kInvalidArgument,
          HasSubstr("tensor \"w\": shape [3] F32 needs 12 bytes, data_offsets span 16")));
}

TEST_F(SafetensorsTest, RejectsOverlappingTensors) {
  EXPECT_THAT(SafetensorsFile::Open(
                  Write(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                        R"("b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
                        Floats({1, 2, 3}))),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("tensors \"a\" and \"b\" overlap")));
}

TEST_F(SafetensorsTest, RejectsUnknownDtypeAndMalformedEntries) {
  EXPECT_THAT(SafetensorsFile::Open(
                  Write(R"({"w":{"dtype":"Q4","shape":[1],"data_offsets":[0,1]}})", "x")),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("tensor \"w\": unknown dtype \"Q4\"")));
  EXPECT_THAT(
      SafetensorsFile::Open(Write(R"({"w":{"dtype":"F32","shape":[1]}})", "xxxx")),
      StatusIs(absl::StatusCode::kInvalidArgument,
               HasSubstr("tensor \"w\": needs \"dtype\", \"shape\"")));
  EXPECT_THAT(SafetensorsFile::Open(Write(
                  R"({"w":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}})", "xxxx")),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("shape entries must be >= 0")));
  EXPECT_THAT(SafetensorsFile::Open(Write(
                  R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[4,0]}})", "xxxx")),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("data_offsets [4, 0] outside")));
}

TEST_F(SafetensorsTest, RejectsShapeOverflow) {
  EXPECT_THAT(
      SafetensorsFile::Open(Write(
          R"({"w":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,4]}})",
          "xxxx")),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("shape overflows")));
}

}  // namespace
}  // namespace layerserve
