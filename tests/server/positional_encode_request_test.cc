// Validation rules of PositionalEncode requests -- one test per error, asserting the
// exact status code and the message naming the field and the numbers -- and the
// request -> kernel -> response path of every method (rope only as far as the
// dispatch: server/ops/positional_encode_rope.h's tests own it).
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "common/dtype.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/ops/positional_encode.h"
#include "tests/testing/status_matchers.h"
#include "tests/testing/wire_tensors.h"

namespace layerserve {
namespace {

using ::layerserve::testing::MakeTensor;
using ::layerserve::testing::TensorValues;

using ::layerserve::testing::StatusIs;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

constexpr absl::StatusCode kInvalid = absl::StatusCode::kInvalidArgument;

v1::Tensor Zeros(std::vector<int64_t> shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return MakeTensor(std::move(shape), std::vector<float>(n, 0.0f));
}

absl::StatusOr<PositionalEncodeJob> Parse(const v1::PositionalEncodeRequest& r) {
  return ParsePositionalEncodeRequest(r);
}

// Parses (which must succeed) and runs; returns the response.
v1::PositionalEncodeResponse ParseAndRun(const v1::PositionalEncodeRequest& request,
                                         int64_t* saturated = nullptr) {
  absl::StatusOr<PositionalEncodeJob> job = Parse(request);
  EXPECT_TRUE(job.ok()) << job.status();
  v1::PositionalEncodeResponse response;
  if (!job.ok()) return response;
  kernels::PositionalContext context;
  const int64_t s = RunPositionalEncode(context, *job, &response).saturated;
  if (saturated != nullptr) *saturated = s;
  return response;
}

TEST(PositionalEncodeRequestTest, RejectsUnsetMethod) {
  EXPECT_THAT(Parse(v1::PositionalEncodeRequest()),
              StatusIs(kInvalid,
                       "method: set one of sinusoidal, learned, rope, alibi, "
                       "t5_bias"));
}

TEST(PositionalEncodeRequestTest, RejectsUnknownOutputDtype) {
  v1::PositionalEncodeRequest r;
  r.mutable_sinusoidal()->set_num_positions(2);
  r.mutable_sinusoidal()->set_dim(4);
  r.set_output_dtype(static_cast<v1::DataType>(5));
  EXPECT_THAT(Parse(r), StatusIs(kInvalid, HasSubstr("output_dtype: unknown dtype 5")));
}

// ---------------------------------------------------------------------------
// Sinusoidal
// ---------------------------------------------------------------------------

v1::PositionalEncodeRequest SinusoidalTable(int64_t num_positions, int64_t dim) {
  v1::PositionalEncodeRequest r;
  r.mutable_sinusoidal()->set_num_positions(num_positions);
  r.mutable_sinusoidal()->set_dim(dim);
  return r;
}

TEST(SinusoidalRequestTest, TableDefaults) {
  absl::StatusOr<PositionalEncodeJob> job = Parse(SinusoidalTable(3, 4));
  ASSERT_TRUE(job.ok()) << job.status();
  const auto& s = std::get<SinusoidalJob>(*job);
  EXPECT_FALSE(s.has_input);
  EXPECT_EQ(s.base, 10000.0f);
  EXPECT_EQ(s.layout, kernels::SinusoidalLayout::kInterleaved);
  EXPECT_EQ(s.output_type, ElementType::kFloat32);
  EXPECT_THAT(s.shape, ElementsAre(3, 4));
  EXPECT_THAT(s.positions, ElementsAre(0, 1, 2));
}

TEST(SinusoidalRequestTest, RejectsUnknownLayout) {
  v1::PositionalEncodeRequest r = SinusoidalTable(3, 4);
  r.mutable_sinusoidal()->set_layout(static_cast<v1::Sinusoidal::Layout>(7));
  EXPECT_THAT(Parse(r), StatusIs(kInvalid,
                                 "sinusoidal.layout: unknown Layout 7; expected "
                                 "INTERLEAVED or CONCATENATED"));
}

TEST(SinusoidalRequestTest, RejectsNonPositiveOrNonFiniteBase) {
  v1::PositionalEncodeRequest r = SinusoidalTable(3, 4);
  r.mutable_sinusoidal()->set_base(-1);
  EXPECT_THAT(Parse(r), StatusIs(kInvalid, "sinusoidal.base: -1 must be finite and > 0"));
  r.mutable_sinusoidal()->set_base(0);
  EXPECT_THAT(Parse(r), StatusIs(kInvalid, "sinusoidal.base: 0 must be finite and > 0"));
  for (float bad : {std::nanf(""), INFINITY}) {
    r.mutable_sinusoidal()->set_base(bad);
    EXPECT_THAT(Parse(r), StatusIs(kInvalid, HasSubstr("must be finite and > 0"))) << bad;
  }
}

TEST(SinusoidalRequestTest, RejectsInputOfRankOne) {
  v1::PositionalEncodeRequest r;
  *r.mutable_sinusoidal()->mutable_input() = Zeros({4});
  EXPECT_THAT(Parse(r), StatusIs(kInvalid,
                                 "sinusoidal.input.shape: rank 1 (shape [4]), expected "
                                 "rank 2 to 3"));
}

TEST(SinusoidalRequestTest, RejectsInputByteCountMismatch) {
  v1::PositionalEncodeRequest r;
  *r.mutable_sinusoidal()->mutable_input() = Zeros({2, 4});
  r.mutable_sinusoidal()->mutable_input()->mutable_data()->resize(28);
  EXPECT_THAT(Parse(r), StatusIs(kInvalid,
                                 "sinusoidal.input.data: shape [2,4] FLOAT32 "
                                 "needs 32 bytes, got 28"));
}

TEST(SinusoidalRequestTest, RejectsOddInputWidth) {
  v1::PositionalEncodeRequest r;
  *r.mutable_sinusoidal()->mutable_input() = Zeros({2, 3, 7});
  EXPECT_THAT(Parse(r), StatusIs(kInvalid,
                                 "sinusoidal.input.shape: last dimension 7 must "
                                 "be even (sin and cos pairs)"));
}

TEST(SinusoidalRequestTest, RejectsTableWithoutLength) {
  EXPECT_THAT(Parse(SinusoidalTable(0, 4)),
              StatusIs(kInvalid,
                       "sinusoidal.num_positions: 0 must be >= 1 without input "
                       "(the table length)"));
  EXPECT_THAT(Parse(SinusoidalTable(-2, 4)),
              StatusIs(kInvalid, HasSubstr("sinusoidal.num_positions: -2 must be >= 1")));
}

TEST(SinusoidalRequestTest, RejectsTableOfOddOrNoWidth) {
  EXPECT_THAT(Parse(SinusoidalTable(3, 7)),
              StatusIs(kInvalid,
                       "sinusoidal.dim: 7 must be even and >= 2 without input "
                       "(the table width: sin and cos pairs)"));
  EXPECT_THAT(Parse(SinusoidalTable(3, 0)),
              StatusIs(kInvalid, HasSubstr("sinusoidal.dim: 0 must be even and >= 2")));
}

TEST(SinusoidalRequestTest, RejectsTableOverTheElementLimit) {
  EXPECT_THAT(
      Parse(SinusoidalTable(100000, 4096)),
      StatusIs(absl::StatusCode::kResourceExhausted,
               "sinusoidal: table [num_positions,dim] = [100000,4096] is over the "
               "server's limit of 33554432 elements per generated tensor; request "
               "fewer rows at a time"));
  // A product past int64 is caught before it overflows.
  EXPECT_THAT(
      Parse(SinusoidalTable(std::numeric_limits<int64_t>::max(), 4)),
      StatusIs(absl::StatusCode::kResourceExhausted, HasSubstr("limit of 33554432")));
  // Exactly the limit is fine.
  EXPECT_TRUE(Parse(SinusoidalTable(int64_t{1} << 20, 32)).ok());
}

TEST(SinusoidalRequestTest, RejectsBadPositions) {
  v1::PositionalEncodeRequest r;
  *r.mutable_sinusoidal()->mutable_input() = Zeros({2, 3, 4});
  r.mutable_sinusoidal()->add_positions(1);
  r.mutable_sinusoidal()->add_positions(2);
  EXPECT_THAT(Parse(r), StatusIs(kInvalid,
                                 "sinusoidal.positions: 2 entries; expected "
                                 "T = 3 or B*T = 6"));
  r.mutable_sinusoidal()->add_positions(-4);
  EXPECT_THAT(Parse(r), StatusIs(kInvalid, "sinusoidal.positions[2]: -4 must be >= 0"));
  r.mutable_sinusoidal()->clear_positions();
  r.mutable_sinusoidal()->set_position_offset(-1);
  EXPECT_THAT(Parse(r),
              StatusIs(kInvalid, "sinusoidal.position_offset: -1 must be >= 0"));
}

TEST(SinusoidalRequestTest, RunsTableAndAddWithOutputDtypes) {
  // Table, CONCATENATED, positions 0 and 2 at D = 2: [sin p, cos p].
  v1::PositionalEncodeRequest r = SinusoidalTable(2, 2);
  r.mutable_sinusoidal()->set_layout(v1::Sinusoidal::CONCATENATED);
  r.mutable_sinusoidal()->add_positions(0);
  r.mutable_sinusoidal()->add_positions(2);
  v1::PositionalEncodeResponse response = ParseAndRun(r);
  EXPECT_EQ(response.output().dtype(), v1::FLOAT32);
  EXPECT_THAT(response.output().shape(), ElementsAre(2, 2));
  EXPECT_THAT(TensorValues(response.output()),
              ElementsAre(0.0f, 1.0f, ::testing::FloatNear(std::sin(2.0f), 1e-7f),
                          ::testing::FloatNear(std::cos(2.0f), 1e-7f)));
  EXPECT_FALSE(response.has_key());

  // Added to a [1, 2, 4] BFLOAT16-requested input, INTERLEAVED, offset 1.
  v1::PositionalEncodeRequest add;
  *add.mutable_sinusoidal()->mutable_input() =
      MakeTensor({1, 2, 4}, {1, 1, 1, 1, 2, 2, 2, 2});
  add.mutable_sinusoidal()->set_position_offset(1);
  add.mutable_sinusoidal()->set_base(100.0f);
  add.set_output_dtype(v1::BFLOAT16);
  response = ParseAndRun(add);
  EXPECT_EQ(response.output().dtype(), v1::BFLOAT16);
  EXPECT_THAT(response.output().shape(), ElementsAre(1, 2, 4));
  const std::vector<float> y = TensorValues(response.output());
  const float inv1 = 0.1f;  // 100^(-2/4).
  const std::vector<float> want = {1 + std::sin(1.0f),     1 + std::cos(1.0f),
                                   1 + std::sin(inv1),     1 + std::cos(inv1),
                                   2 + std::sin(2.0f),     2 + std::cos(2.0f),
                                   2 + std::sin(2 * inv1), 2 + std::cos(2 * inv1)};
  ASSERT_EQ(y.size(), want.size());
  for (size_t i = 0; i < y.size(); ++i) EXPECT_NEAR(y[i], want[i], 2e-2 * want[i]) << i;
}

// ---------------------------------------------------------------------------
// Learned
// ---------------------------------------------------------------------------

v1::PositionalEncodeRequest LearnedRequest(std::vector<int64_t> input_shape,
                                           int64_t table_rows) {
  v1::PositionalEncodeRequest r;
  const int64_t dim = input_shape.back();
  *r.mutable_learned()->mutable_input() = Zeros(std::move(input_shape));
  *r.mutable_learned()->mutable_table() = Zeros({table_rows, dim});
  return r;
}

TEST(LearnedRequestTest, RejectsMissingInputOrTable) {
  v1::PositionalEncodeRequest r = LearnedRequest({2, 8}, 10);
  r.mutable_learned()->clear_input();
  EXPECT_THAT(Parse(r), StatusIs(kInvalid, "learned.input: required"));
  r = LearnedRequest({2, 8}, 10);
  r.mutable_learned()->clear_table();
  EXPECT_THAT(Parse(r), StatusIs(kInvalid, "learned.table: required"));
}

TEST(LearnedRequestTest, RejectsBadRanks) {
  v1::PositionalEncodeRequest r = LearnedRequest({2, 8}, 10);
  *r.mutable_learned()->mutable_table() = Zeros({8});
  EXPECT_THAT(Parse(r), StatusIs(kInvalid,
                                 "learned.table.shape: rank 1 (shape [8]), "
                                 "expected rank 2"));
  r = LearnedRequest({2, 8}, 10);
  *r.mutable_learned()->mutable_input() = Zeros({1, 2, 2, 8});
  EXPECT_THAT(Parse(r), StatusIs(kInvalid, HasSubstr("learned.input.shape: rank 4")));
}

TEST(LearnedRequestTest, RejectsTableWidthMismatch) {
  v1::PositionalEncodeRequest r = LearnedRequest({2, 8}, 10);
  *r.mutable_learned()->mutable_table() = Zeros({10, 16});
  EXPECT_THAT(Parse(r), StatusIs(kInvalid,
                                 "learned.table.shape: last dimension 16 does "
                                 "not match input's last dimension 8"));
}

TEST(LearnedRequestTest, PositionPastTheTableIsOutOfRange) {
  v1::PositionalEncodeRequest r = LearnedRequest({4, 8}, 512);
  for (int64_t p : {0, 1, 2, 600}) r.mutable_learned()->add_positions(p);
  EXPECT_THAT(Parse(r), StatusIs(absl::StatusCode::kOutOfRange,
                                 "learned.positions[3]: position 600 is past the table's "
                                 "512 rows"));
  r = LearnedRequest({200, 8}, 512);
  r.mutable_learned()->set_position_offset(500);
  EXPECT_THAT(Parse(r), StatusIs(absl::StatusCode::kOutOfRange,
                                 "learned.position_offset: 500 + 200 tokens reaches "
                                 "position 699, past the table's 512 rows"));
  r.mutable_learned()->set_position_offset(312);  // Last position 511: fine.
  EXPECT_TRUE(Parse(r).ok());
}

TEST(LearnedRequestTest, RejectsNegativePositions) {
  v1::PositionalEncodeRequest r = LearnedRequest({2, 8}, 10);
  r.mutable_learned()->add_positions(-1);
  r.mutable_learned()->add_positions(0);
  EXPECT_THAT(Parse(r), StatusIs(kInvalid, "learned.positions[0]: -1 must be >= 0"));
}

TEST(LearnedRequestTest, RunsWithPerBatchPositions) {
  v1::PositionalEncodeRequest r;
  *r.mutable_learned()->mutable_input() = MakeTensor({2, 1, 2}, {1, 2, 3, 4});
  *r.mutable_learned()->mutable_table() = MakeTensor({3, 2}, {10, 20, 30, 40, 50, 60});
  r.mutable_learned()->add_positions(2);
  r.mutable_learned()->add_positions(0);
  const v1::PositionalEncodeResponse response = ParseAndRun(r);
  EXPECT_THAT(response.output().shape(), ElementsAre(2, 1, 2));
  EXPECT_THAT(TensorValues(response.output()), ElementsAre(51, 62, 13, 24));
}

// ---------------------------------------------------------------------------
// ALiBi
// ---------------------------------------------------------------------------

v1::PositionalEncodeRequest AlibiRequest(int64_t heads, int64_t tq, int64_t tk) {
  v1::PositionalEncodeRequest r;
  r.mutable_alibi()->set_num_heads(heads);
  r.mutable_alibi()->set_query_length(tq);
  r.mutable_alibi()->set_key_length(tk);
  return r;
}

TEST(AlibiRequestTest, RejectsMissingDimensionsWithoutScores) {
  EXPECT_THAT(Parse(AlibiRequest(0, 2, 2)),
              StatusIs(kInvalid,
                       "alibi.num_heads: 0 must be >= 1 (required without "
                       "scores)"));
  EXPECT_THAT(Parse(AlibiRequest(4, 0, 2)),
              StatusIs(kInvalid,
                       "alibi.query_length: 0 must be >= 1 (required without "
                       "scores)"));
  EXPECT_THAT(Parse(AlibiRequest(4, 2, -3)),
              StatusIs(kInvalid,
                       "alibi.key_length: -3 must be >= 1 (required without "
                       "scores)"));
}

TEST(AlibiRequestTest, RejectsFieldsThatContradictTheScores) {
  v1::PositionalEncodeRequest r;
  *r.mutable_alibi()->mutable_scores() = Zeros({2, 12, 4, 6});
  r.mutable_alibi()->set_num_heads(8);
  EXPECT_THAT(Parse(r), StatusIs(kInvalid,
                                 "alibi.num_heads: 8 does not match the scores' "
                                 "H = 12 (leave it 0 to take the scores')"));
  r.mutable_alibi()->set_num_heads(12);  // Equal: fine.
  r.mutable_alibi()->set_query_length(5);
  EXPECT_THAT(Parse(r), StatusIs(kInvalid,
                                 "alibi.query_length: 5 does not match the "
                                 "scores' Tq = 4 (leave it 0 to take the "
                                 "scores')"));
  r.mutable_alibi()->set_query_length(0);
  r.mutable_alibi()->set_key_length(7);
  EXPECT_THAT(Parse(r), StatusIs(kInvalid,
                                 "alibi.key_length: 7 does not match the "
                                 "scores' Tk = 6 (leave it 0 to take the "
                                 "scores')"));
}

TEST(AlibiRequestTest, RejectsScoresOfRankTwo) {
  v1::PositionalEncodeRequest r;
  *r.mutable_alibi()->mutable_scores() = Zeros({4, 6});
  EXPECT_THAT(Parse(r), StatusIs(kInvalid,
                                 "alibi.scores.shape: rank 2 (shape [4,6]), "
                                 "expected rank 3 to 4"));
}

TEST(AlibiRequestTest, RejectsNegativeOrOverflowingQueryOffset) {
  v1::PositionalEncodeRequest r = AlibiRequest(2, 4, 4);
  r.mutable_alibi()->set_query_offset(-1);
  EXPECT_THAT(Parse(r), StatusIs(kInvalid, "alibi.query_offset: -1 must be >= 0"));
  r.mutable_alibi()->set_query_offset(std::numeric_limits<int64_t>::max());
  EXPECT_THAT(Parse(r), StatusIs(kInvalid,
                                 "alibi.query_offset: 9223372036854775807 + 4 "
                                 "queries overflows"));
}

TEST(AlibiRequestTest, RejectsBiasOverTheElementLimit) {
  EXPECT_THAT(
      Parse(AlibiRequest(64, 8192, 8192)),
      StatusIs(absl::StatusCode::kResourceExhausted,
               "alibi: bias [num_heads,query_length,key_length] = [64,8192,8192] is "
               "over the server's limit of 33554432 elements per generated tensor; "
               "request fewer rows at a time"));
}

TEST(AlibiRequestTest, RunsBiasAndScoresAdd) {
  // 2 heads: slopes 1/16 and 1/256; one query at position 1 over 3 keys.
  v1::PositionalEncodeRequest r = AlibiRequest(2, 1, 3);
  r.mutable_alibi()->set_query_offset(1);
  v1::PositionalEncodeResponse response = ParseAndRun(r);
  EXPECT_EQ(response.output().dtype(), v1::FLOAT32);
  EXPECT_THAT(response.output().shape(), ElementsAre(2, 1, 3));
  EXPECT_THAT(TensorValues(response.output()),
              ElementsAre(-1.0f / 16, 0, 1.0f / 16, -1.0f / 256, 0, 1.0f / 256));

  v1::PositionalEncodeRequest add;
  *add.mutable_alibi()->mutable_scores() = MakeTensor({1, 2, 1, 3}, {1, 1, 1, 2, 2, 2});
  add.mutable_alibi()->set_symmetric(true);
  add.mutable_alibi()->set_query_offset(1);
  add.set_output_dtype(v1::FLOAT16);
  response = ParseAndRun(add);
  EXPECT_EQ(response.output().dtype(), v1::FLOAT16);
  EXPECT_THAT(response.output().shape(), ElementsAre(1, 2, 1, 3));
  EXPECT_THAT(
      TensorValues(response.output()),
      ElementsAre(1 - 1.0f / 16, 1, 1 - 1.0f / 16, 2 - 1.0f / 256, 2, 2 - 1.0f / 256));
}

TEST(AlibiRequestTest, CountsSaturatedHalfPrecisionOutputs) {
  v1::PositionalEncodeRequest r;
  *r.mutable_alibi()->mutable_scores() = MakeTensor({1, 1, 2}, {1e6f, 1});
  r.set_output_dtype(v1::FLOAT16);
  int64_t saturated = -1;
  const v1::PositionalEncodeResponse response = ParseAndRun(r, &saturated);
  EXPECT_EQ(saturated, 1);
  EXPECT_EQ(TensorValues(response.output())[0], INFINITY);
}

// ---------------------------------------------------------------------------
// T5
// ---------------------------------------------------------------------------

v1::PositionalEncodeRequest T5Request(int64_t buckets, int64_t heads,
                                      bool bidirectional) {
  v1::PositionalEncodeRequest r;
  *r.mutable_t5_bias()->mutable_table() = Zeros({buckets, heads});
  r.mutable_t5_bias()->set_bidirectional(bidirectional);
  r.mutable_t5_bias()->set_query_length(3);
  r.mutable_t5_bias()->set_key_length(5);
  return r;
}

TEST(T5BiasRequestTest, Defaults) {
  const v1::PositionalEncodeRequest request = T5Request(32, 4, true);  // Outlives job.
  absl::StatusOr<PositionalEncodeJob> job = Parse(request);
  ASSERT_TRUE(job.ok()) << job.status();
  const auto& t = std::get<T5BiasJob>(*job);
  EXPECT_EQ(t.shape.num_buckets, 32);
  EXPECT_EQ(t.shape.heads, 4);
  EXPECT_EQ(t.shape.max_distance, 128);
  EXPECT_EQ(t.output_type, ElementType::kFloat32);
}

TEST(T5BiasRequestTest, RejectsMissingOrMisshapenTable) {
  v1::PositionalEncodeRequest r = T5Request(32, 4, true);
  r.mutable_t5_bias()->clear_table();
  EXPECT_THAT(Parse(r), StatusIs(kInvalid, "t5_bias.table: required"));
  *r.mutable_t5_bias()->mutable_table() = Zeros({32, 4, 1});
  EXPECT_THAT(Parse(r), StatusIs(kInvalid,
                                 "t5_bias.table.shape: rank 3 (shape [32,4,1]), "
                                 "expected rank 2"));
}

TEST(T5BiasRequestTest, RejectsNumBucketsOtherThanTheTables) {
  v1::PositionalEncodeRequest r = T5Request(32, 4, true);
  r.mutable_t5_bias()->set_num_buckets(16);
  EXPECT_THAT(Parse(r), StatusIs(kInvalid,
                                 "t5_bias.num_buckets: 16 does not match "
                                 "table.shape[0] = 32 (leave it 0 to take the "
                                 "table's)"));
  r.mutable_t5_bias()->set_num_buckets(32);
  EXPECT_TRUE(Parse(r).ok());
}

TEST(T5BiasRequestTest, RejectsTooFewBuckets) {
  EXPECT_THAT(Parse(T5Request(3, 4, true)),
              StatusIs(kInvalid,
                       "t5_bias.table.shape[0]: 3 buckets; bidirectional T5 bias "
                       "needs >= 4 (at least one exact bucket per direction)"));
  EXPECT_THAT(Parse(T5Request(1, 4, false)),
              StatusIs(kInvalid,
                       "t5_bias.table.shape[0]: 1 buckets; causal T5 bias needs "
                       ">= 2 (at least one exact bucket)"));
  EXPECT_TRUE(Parse(T5Request(4, 1, true)).ok());
  EXPECT_TRUE(Parse(T5Request(2, 1, false)).ok());
}

TEST(T5BiasRequestTest, RejectsBadMaxDistance) {
  v1::PositionalEncodeRequest r = T5Request(32, 4, true);
  r.mutable_t5_bias()->set_max_distance(-5);
  EXPECT_THAT(Parse(r), StatusIs(kInvalid, "t5_bias.max_distance: -5 must be >= 1"));
  r.mutable_t5_bias()->set_max_distance(8);
  EXPECT_THAT(Parse(r), StatusIs(kInvalid,
                                 "t5_bias.max_distance: 8 must be > 8, the exact "
                                 "buckets of 32 bidirectional buckets (the log "
                                 "buckets divide by log(max_distance / 8))"));
  r.mutable_t5_bias()->set_max_distance(9);
  EXPECT_TRUE(Parse(r).ok());
}

TEST(T5BiasRequestTest, RejectsBadLengthsAndOffsets) {
  v1::PositionalEncodeRequest r = T5Request(32, 4, true);
  r.mutable_t5_bias()->set_query_length(0);
  EXPECT_THAT(Parse(r), StatusIs(kInvalid, "t5_bias.query_length: 0 must be >= 1"));
  r = T5Request(32, 4, true);
  r.mutable_t5_bias()->set_key_length(-1);
  EXPECT_THAT(Parse(r), StatusIs(kInvalid, "t5_bias.key_length: -1 must be >= 1"));
  r = T5Request(32, 4, true);
  r.mutable_t5_bias()->set_query_offset(-2);
  EXPECT_THAT(Parse(r), StatusIs(kInvalid, "t5_bias.query_offset: -2 must be >= 0"));
  r.mutable_t5_bias()->set_query_offset(std::numeric_limits<int64_t>::max() - 1);
  EXPECT_THAT(Parse(r), StatusIs(kInvalid,
                                 "t5_bias.query_offset: 9223372036854775806 + 3 "
                                 "queries overflows"));
}

TEST(T5BiasRequestTest, RejectsBiasOverTheElementLimit) {
  v1::PositionalEncodeRequest r = T5Request(32, 16, true);
  r.mutable_t5_bias()->set_query_length(4096);
  r.mutable_t5_bias()->set_key_length(4096);
  EXPECT_THAT(Parse(r),
              StatusIs(absl::StatusCode::kResourceExhausted,
                       "t5_bias: bias [H,query_length,key_length] = [16,4096,4096] "
                       "is over the server's limit of 33554432 elements per "
                       "generated tensor; request fewer rows at a time"));
}

TEST(T5BiasRequestTest, RunsWithTheTablesDtype) {
  // Causal, 2 buckets x 1 head: bucket 0 (same or later key) = 10, 1 (earlier) = 30.
  v1::PositionalEncodeRequest r;
  *r.mutable_t5_bias()->mutable_table() = MakeTensor({2, 1}, {10, 30});
  r.mutable_t5_bias()->mutable_table()->set_dtype(v1::BFLOAT16);
  r.mutable_t5_bias()->mutable_table()->mutable_data()->resize(4);
  const uint16_t bits[2] = {Float32ToBfloat16(10), Float32ToBfloat16(30)};
  std::memcpy(r.mutable_t5_bias()->mutable_table()->mutable_data()->data(), bits, 4);
  r.mutable_t5_bias()->set_max_distance(2);
  r.mutable_t5_bias()->set_query_length(2);
  r.mutable_t5_bias()->set_key_length(3);
  const v1::PositionalEncodeResponse response = ParseAndRun(r);
  EXPECT_EQ(response.output().dtype(), v1::BFLOAT16);
  EXPECT_THAT(response.output().shape(), ElementsAre(1, 2, 3));
  EXPECT_THAT(TensorValues(response.output()), ElementsAre(10, 10, 10, 30, 10, 10));
}

// ---------------------------------------------------------------------------
// Rope: only the dispatch (server/ops/positional_encode_rope.h owns the rest).
// ---------------------------------------------------------------------------

TEST(RopeDispatchTest, ParsesIntoARopeJobAndPassesItsErrorsThrough) {
  v1::PositionalEncodeRequest r;
  r.mutable_rope();
  EXPECT_THAT(Parse(r), StatusIs(kInvalid, HasSubstr("rope.query")));
  *r.mutable_rope()->mutable_query() = Zeros({1, 2, 3, 4});
  absl::StatusOr<PositionalEncodeJob> job = Parse(r);
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_TRUE(std::holds_alternative<RopeJob>(*job));
  v1::PositionalEncodeResponse response;
  kernels::PositionalContext context;
  RunPositionalEncode(context, *job, &response);
  EXPECT_THAT(response.output().shape(), ElementsAre(1, 2, 3, 4));
}

}  // namespace
}  // namespace layerserve
