// The .npy reader and writer: files numpy wrote, round trips of every rank, and each
// error with its exact message.
//
// The fixtures in tests/client/data were written by numpy 1.24 (Debian bookworm) with
//   cd tests/client/data && /usr/bin/python3 -c '
//   import numpy as np
//   np.save("f4_2x3.npy", np.array([[-1.5, 0, 0.25], [1, 2.5, 1000]], dtype="<f4"))
//   np.save("f2_scalar.npy", np.array(3.5, dtype="<f2"))
//   np.save("f2_vector.npy", np.array([1, -2, 0.5, 65504], dtype="<f2"))
//   with open("f4_v2.npy", "wb") as f: np.lib.format.write_array(
//       f, np.arange(4, dtype="<f4"), version=(2, 0))
//   np.save("f4_fortran.npy", np.asfortranarray(np.arange(6, dtype="<f4").reshape(2, 3)))
//   np.save("f4_big_endian.npy", np.arange(3, dtype=">f4"))'
#include "client/cpp/npy.h"

#include <cstdint>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/status_matchers.h"

namespace layerserve::client {
namespace {

using ::layerserve::testing::StatusIs;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

std::string DataPath(const std::string& name) {
  return absl::StrCat(LAYERSERVE_SOURCE_DIR, "/tests/client/data/", name);
}

std::string ReadBytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

std::vector<float> Floats(const std::string& data) {
  std::vector<float> values(data.size() / sizeof(float));
  std::memcpy(values.data(), data.data(), data.size());
  return values;
}

std::vector<uint16_t> Halves(const std::string& data) {
  std::vector<uint16_t> values(data.size() / sizeof(uint16_t));
  std::memcpy(values.data(), data.data(), data.size());
  return values;
}

// A .npy file with the given version, header text (used as is, no padding added)
// and data.
std::string MakeNpy(int major, const std::string& header, const std::string& data) {
  std::string out("\x93NUMPY", 6);
  out.push_back(static_cast<char>(major));
  out.push_back(0);
  const int length_size = major == 1 ? 2 : 4;
  for (int i = 0; i < length_size; ++i) {
    out.push_back(static_cast<char>(header.size() >> (8 * i)));
  }
  return out + header + data;
}

std::string FloatBytes(std::vector<float> values) {
  return std::string(reinterpret_cast<const char*>(values.data()),
                     values.size() * sizeof(float));
}

// ---------------------------------------------------------------------------
// Files numpy wrote.

TEST(NpyTest, ReadsNumpyFloat32Matrix) {
  absl::StatusOr<NpyArray> array = ReadNpyFile(DataPath("f4_2x3.npy"));
  ASSERT_TRUE(array.ok()) << array.status();
  EXPECT_THAT(array->shape, ElementsAre(2, 3));
  EXPECT_EQ(array->dtype, ElementType::kFloat32);
  EXPECT_THAT(Floats(array->data), ElementsAre(-1.5f, 0.0f, 0.25f, 1.0f, 2.5f, 1000.0f));
  EXPECT_EQ(array->NumElements(), 6);
}

TEST(NpyTest, ReadsNumpyFloat16Scalar) {
  absl::StatusOr<NpyArray> array = ReadNpyFile(DataPath("f2_scalar.npy"));
  ASSERT_TRUE(array.ok()) << array.status();
  EXPECT_THAT(array->shape, IsEmpty());
  EXPECT_EQ(array->dtype, ElementType::kFloat16);
  EXPECT_THAT(Halves(array->data), ElementsAre(0x4300));  // 3.5
  EXPECT_EQ(array->NumElements(), 1);
}

TEST(NpyTest, ReadsNumpyFloat16Vector) {
  absl::StatusOr<NpyArray> array = ReadNpyFile(DataPath("f2_vector.npy"));
  ASSERT_TRUE(array.ok()) << array.status();
  EXPECT_THAT(array->shape, ElementsAre(4));
  EXPECT_EQ(array->dtype, ElementType::kFloat16);
  // 1, -2, 0.5, 65504 (the largest finite float16).
  EXPECT_THAT(Halves(array->data), ElementsAre(0x3C00, 0xC000, 0x3800, 0x7BFF));
}

TEST(NpyTest, ReadsNumpyVersion2Header) {
  absl::StatusOr<NpyArray> array = ReadNpyFile(DataPath("f4_v2.npy"));
  ASSERT_TRUE(array.ok()) << array.status();
  EXPECT_THAT(array->shape, ElementsAre(4));
  EXPECT_THAT(Floats(array->data), ElementsAre(0.0f, 1.0f, 2.0f, 3.0f));
}

// The writer reproduces numpy.save byte for byte (header text, growth padding,
// 64-byte alignment), so numpy reads what it writes.
TEST(NpyTest, WriterMatchesNumpyBytes) {
  for (const char* name : {"f4_2x3.npy", "f2_scalar.npy", "f2_vector.npy"}) {
    SCOPED_TRACE(name);
    const std::string bytes = ReadBytes(DataPath(name));
    absl::StatusOr<NpyArray> array = ParseNpy(bytes, name);
    ASSERT_TRUE(array.ok()) << array.status();
    absl::StatusOr<std::string> written = SerializeNpy(*array);
    ASSERT_TRUE(written.ok()) << written.status();
    EXPECT_EQ(*written, bytes);
  }
}

TEST(NpyTest, RejectsFortranOrder) {
  EXPECT_THAT(ReadNpyFile(DataPath("f4_fortran.npy")),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       DataPath("f4_fortran.npy") +
                           ": fortran_order is True; only C order is supported (save "
                           "np.ascontiguousarray(a) instead)"));
}

TEST(NpyTest, RejectsBigEndian) {
  EXPECT_THAT(ReadNpyFile(DataPath("f4_big_endian.npy")),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       DataPath("f4_big_endian.npy") +
                           ": dtype '>f4' is big-endian; only little-endian is "
                           "supported (convert with a.astype('<f4'))"));
}

TEST(NpyTest, MissingFileIsNotFound) {
  EXPECT_THAT(ReadNpyFile(DataPath("no_such_file.npy")),
              StatusIs(absl::StatusCode::kNotFound,
                       HasSubstr("cannot open " + DataPath("no_such_file.npy"))));
}

// ---------------------------------------------------------------------------
// Round trips.

struct RoundTripCase {
  std::vector<int64_t> shape;
  ElementType dtype;
};

class NpyRoundTripTest : public ::testing::TestWithParam<RoundTripCase> {};

TEST_P(NpyRoundTripTest, SerializeThenParseGivesTheSameArray) {
  NpyArray array;
  array.shape = GetParam().shape;
  array.dtype = GetParam().dtype;
  const int64_t bytes = array.NumElements() * ElementSize(array.dtype);
  for (int64_t i = 0; i < bytes; ++i) array.data.push_back(static_cast<char>(i * 7 + 1));

  absl::StatusOr<std::string> file = SerializeNpy(array);
  ASSERT_TRUE(file.ok()) << file.status();
  // numpy's layout: version 1.0, header padded with spaces to a multiple of 64 bytes
  // and ended by '\n'.
  EXPECT_EQ(file->substr(0, 8), std::string("\x93NUMPY\x01\x00", 8));
  const size_t header_end =
      10 + static_cast<uint8_t>((*file)[8]) + 256 * static_cast<uint8_t>((*file)[9]);
  EXPECT_EQ(header_end % 64, 0u);
  EXPECT_EQ((*file)[header_end - 1], '\n');
  EXPECT_EQ(file->size(), header_end + bytes);

  absl::StatusOr<NpyArray> parsed = ParseNpy(*file, "round_trip");
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(parsed->shape, array.shape);
  EXPECT_EQ(parsed->dtype, array.dtype);
  EXPECT_EQ(parsed->data, array.data);
}

std::string RoundTripName(const ::testing::TestParamInfo<RoundTripCase>& info) {
  std::string name = info.param.dtype == ElementType::kFloat32 ? "f4" : "f2";
  if (info.param.shape.empty()) return name + "_scalar";
  for (int64_t dim : info.param.shape) absl::StrAppend(&name, "_", dim);
  return name;
}

INSTANTIATE_TEST_SUITE_P(RanksAndDtypes, NpyRoundTripTest,
                         ::testing::ValuesIn(std::vector<RoundTripCase>{
                             {{}, ElementType::kFloat32},
                             {{}, ElementType::kFloat16},
                             {{1}, ElementType::kFloat32},
                             {{1}, ElementType::kFloat16},
                             {{7}, ElementType::kFloat32},
                             {{2, 3}, ElementType::kFloat16},
                             {{1, 1, 1}, ElementType::kFloat32},
                             {{2, 1, 3}, ElementType::kFloat16},
                             {{2, 3, 4, 5}, ElementType::kFloat32},
                             {{1000, 3}, ElementType::kFloat32},
                             {{0, 3}, ElementType::kFloat32},
                         }),
                         RoundTripName);

// numpy's rule: version 2.0 only when the header does not fit 1.0's 2-byte length.
TEST(NpyTest, WritesVersion2WhenTheHeaderNeedsIt) {
  NpyArray array;
  array.shape.assign(22000, 1);  // "1, " 22000 times: a header over 65535 bytes.
  array.data = FloatBytes({5.0f});
  absl::StatusOr<std::string> file = SerializeNpy(array);
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_EQ(file->substr(0, 8), std::string("\x93NUMPY\x02\x00", 8));
  EXPECT_EQ((file->size() - 4) % 64, 0u);
  absl::StatusOr<NpyArray> parsed = ParseNpy(*file, "v2");
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(parsed->shape, array.shape);
  EXPECT_EQ(parsed->data, array.data);
}

TEST(NpyTest, WriteThenReadFile) {
  NpyArray array;
  array.shape = {2, 2};
  array.data = FloatBytes({1.0f, -0.0f, 3.25f, 1e-30f});
  const std::string path = ::testing::TempDir() + "/npy_test_write.npy";
  ASSERT_TRUE(WriteNpyFile(path, array).ok());
  absl::StatusOr<NpyArray> read = ReadNpyFile(path);
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_THAT(read->shape, ElementsAre(2, 2));
  EXPECT_EQ(read->data, array.data);
}

// ---------------------------------------------------------------------------
// Header spellings other writers use.

TEST(NpyTest, AcceptsHeaderVariants) {
  const std::string data = FloatBytes({1.0f, 2.0f});
  for (const std::string& header : {
           // Minimal: no trailing comma, no padding, no newline.
           std::string("{'descr':'<f4','fortran_order':False,'shape':(2,)}"),
           // Double quotes, other key order, spaces everywhere, 16-byte padding.
           std::string("{ \"shape\" : ( 2 , ) , \"fortran_order\" : False , "
                       "\"descr\" : \"<f4\" , }     \n"),
           // '|' and '=' mean native order, little-endian on this host.
           std::string("{'descr': '|f4', 'fortran_order': False, 'shape': (2,), }\n"),
           std::string("{'descr': '=f4', 'fortran_order': False, 'shape': (2,), }\n"),
           // A one-element tuple written without its comma.
           std::string("{'descr': '<f4', 'fortran_order': False, 'shape': (2), }\n"),
       }) {
    SCOPED_TRACE(header);
    absl::StatusOr<NpyArray> array = ParseNpy(MakeNpy(1, header, data), "x.npy");
    ASSERT_TRUE(array.ok()) << array.status();
    EXPECT_THAT(array->shape, ElementsAre(2));
    EXPECT_EQ(array->dtype, ElementType::kFloat32);
    EXPECT_EQ(array->data, data);
  }
}

TEST(NpyTest, ReadsVersion3Header) {
  absl::StatusOr<NpyArray> array =
      ParseNpy(MakeNpy(3, "{'descr': '<f2', 'fortran_order': False, 'shape': (1,), }\n",
                       std::string("\x00\x3c", 2)),
               "x.npy");
  ASSERT_TRUE(array.ok()) << array.status();
  EXPECT_THAT(Halves(array->data), ElementsAre(0x3C00));
}

// ---------------------------------------------------------------------------
// Errors, each with the file's name and what is wrong.

constexpr char kHeader2x3[] =
    "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }\n";

TEST(NpyTest, RejectsBadMagic) {
  EXPECT_THAT(ParseNpy(std::string("\x93NUMPZ\x01\x00\x00\x00", 10), "x.npy"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "x.npy: not a .npy file (bad magic: the file must start with "
                       "\\x93NUMPY)"));
  EXPECT_THAT(ParseNpy("", "empty.npy"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("empty.npy: not a .npy file (bad magic")));
}

TEST(NpyTest, RejectsTruncatedPreamble) {
  EXPECT_THAT(ParseNpy(std::string("\x93NUMPY\x01\x00\x10", 9), "x.npy"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "x.npy: truncated: the file has 9 bytes, less than a .npy "
                       "preamble"));
  EXPECT_THAT(ParseNpy(std::string("\x93NUMPY\x02\x00\x10\x00", 10), "x.npy"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "x.npy: truncated: the file has 10 bytes, less than a .npy "
                       "preamble"));
}

TEST(NpyTest, RejectsTruncatedHeader) {
  std::string file = MakeNpy(1, kHeader2x3, "");
  file.resize(file.size() - 5);
  EXPECT_THAT(ParseNpy(file, "x.npy"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "x.npy: truncated: the header length field says 60 bytes, only "
                       "55 follow"));
}

TEST(NpyTest, RejectsTruncatedData) {
  EXPECT_THAT(ParseNpy(MakeNpy(1, kHeader2x3, std::string(20, '\0')), "x.npy"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "x.npy: truncated data: shape (2, 3) '<f4' needs 24 bytes of "
                       "data, the file has 20"));
  // A numpy file cut short.
  std::string numpy_file = ReadBytes(DataPath("f4_2x3.npy"));
  numpy_file.pop_back();
  EXPECT_THAT(ParseNpy(numpy_file, "cut.npy"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "cut.npy: truncated data: shape (2, 3) '<f4' needs 24 bytes of "
                       "data, the file has 23"));
}

TEST(NpyTest, RejectsTrailingData) {
  EXPECT_THAT(ParseNpy(MakeNpy(1, kHeader2x3, std::string(28, '\0')), "x.npy"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "x.npy: data size mismatch: shape (2, 3) '<f4' needs 24 bytes "
                       "of data, the file has 28"));
}

TEST(NpyTest, RejectsShapeWhoseSizeOverflows) {
  // 2^62 * 4 float32 elements is more bytes than int64 counts.
  EXPECT_THAT(ParseNpy(MakeNpy(1,
                               "{'descr': '<f4', 'fortran_order': False, 'shape': "
                               "(4611686018427387904, 4), }\n",
                               std::string(8, '\0')),
                       "x.npy"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "x.npy: shape (4611686018427387904, 4) is too large"));
}

TEST(NpyTest, RejectsUnsupportedVersion) {
  EXPECT_THAT(ParseNpy(MakeNpy(4, kHeader2x3, ""), "x.npy"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "x.npy: unsupported .npy format version 4.0 (supported: 1.0, 2.0, "
                       "3.0)"));
}

TEST(NpyTest, RejectsUnsupportedDtypes) {
  for (const char* descr : {"<f8", "<i4", "|u1", "<V2", "<c8"}) {
    SCOPED_TRACE(descr);
    EXPECT_THAT(
        ParseNpy(MakeNpy(1,
                         absl::StrCat("{'descr': '", descr,
                                      "', 'fortran_order': False, 'shape': (1,), }\n"),
                         std::string(8, '\0')),
                 "x.npy"),
        StatusIs(absl::StatusCode::kInvalidArgument,
                 absl::StrCat("x.npy: unsupported dtype '", descr,
                              "'; supported are '<f4' (float32) and '<f2' (float16) "
                              "(convert with a.astype(np.float32))")));
  }
}

TEST(NpyTest, RejectsBadHeaderSyntax) {
  struct Case {
    std::string header;
    std::string error;
  };
  for (const Case& c : std::vector<Case>{
           {"['descr']\n",
            "cannot parse header: expected '{' at offset 0 in \"['descr']\""},
           {"{'descr' '<f4'}", "cannot parse header: expected ':' at offset 9"},
           {"{'descr': '<f4}", "cannot parse header: unterminated string at offset 10"},
           {"{'descr': <f4}",
            "cannot parse header: expected a value (a string, True, False or a tuple) "
            "at offset 10"},
           {"{'descr': '<f4' 'shape': ()}",
            "cannot parse header: expected ',' or '}' at offset 16"},
           {"{'shape': (2, -3)}",
            "cannot parse header: expected a non-negative integer at offset 14"},
           {std::string("{\x01}\n", 3),
            "cannot parse header: expected a quoted string at offset 1 in \"{\\x01}\""},
           {"{'shape': (2 3)}", "cannot parse header: expected ',' or ')' at offset 13"},
           {"{'shape': (2,)} x",
            "cannot parse header: unexpected text after '}' at offset 16"},
           {"{'shape': (2,), 'shape': (2,)}",
            "cannot parse header: duplicate key 'shape' at offset 29"},
           {"{'descr': '<f4', 'fortran_order': False, 'shape': (2,), 'x': 'y'}",
            "header has unknown key 'x' (a .npy header has exactly 'descr', "
            "'fortran_order' and 'shape')"},
           {"{'descr': '<f4', 'fortran_order': False}", "header has no 'shape' key"},
           {"{'descr': '<f4', 'shape': (2,)}", "header has no 'fortran_order' key"},
           {"{'descr': True, 'fortran_order': False, 'shape': (2,)}",
            "header 'descr' must be a string"},
           {"{'descr': '<f4', 'fortran_order': 'no', 'shape': (2,)}",
            "header 'fortran_order' must be True or False"},
           {"{'descr': '<f4', 'fortran_order': False, 'shape': 2}",
            "cannot parse header: expected a value (a string, True, False or a tuple) "
            "at offset 50"},
           {"{'descr': '<f4', 'fortran_order': False, 'shape': '2'}",
            "header 'shape' must be a tuple"},
       }) {
    SCOPED_TRACE(c.header);
    EXPECT_THAT(ParseNpy(MakeNpy(1, c.header, std::string(8, '\0')), "x.npy"),
                StatusIs(absl::StatusCode::kInvalidArgument,
                         HasSubstr(absl::StrCat("x.npy: ", c.error))));
  }
}

TEST(NpyTest, SerializeRejectsBfloat16AndWrongDataSize) {
  NpyArray array;
  array.shape = {2};
  array.dtype = ElementType::kBfloat16;
  array.data = std::string(4, '\0');
  EXPECT_THAT(
      SerializeNpy(array),
      StatusIs(absl::StatusCode::kInvalidArgument,
               "bfloat16 has no .npy dtype; convert to float32 or float16 first"));
  array.dtype = ElementType::kFloat32;
  EXPECT_THAT(SerializeNpy(array),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "shape (2,) '<f4' needs 8 bytes of data, got 4"));
  EXPECT_THAT(WriteNpyFile(::testing::TempDir() + "/npy_test_bad.npy", array),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("npy_test_bad.npy: shape (2,) '<f4' needs 8 bytes")));
}

TEST(NpyTest, WriteToMissingDirectoryFails) {
  NpyArray array;
  array.data = FloatBytes({1.0f});
  EXPECT_THAT(WriteNpyFile("/nonexistent_dir/x.npy", array),
              StatusIs(absl::StatusCode::kNotFound,
                       HasSubstr("cannot create /nonexistent_dir/x.npy")));
}

}  // namespace
}  // namespace layerserve::client
