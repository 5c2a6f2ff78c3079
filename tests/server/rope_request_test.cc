// The rope method of PositionalEncode apart from transport: every validation rule
// of ParseRope (exact code and message naming the field), defaults, and RunRope on
// the PyTorch golden cases sent as FLOAT32 and BFLOAT16 requests, output dtypes and
// saturation counts.
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "common/dtype.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/ops/positional_encode_rope.h"
#include "tests/golden/rope_golden.h"
#include "tests/testing/status_matchers.h"
#include "tests/testing/wire_tensors.h"

namespace layerserve {
namespace {

using ::layerserve::testing::MakeTensor;
using ::layerserve::testing::TensorValues;

using ::layerserve::testing::StatusIs;
using ::testing::HasSubstr;

std::vector<float> Iota(int64_t n) {
  std::vector<float> v(n);
  for (int64_t i = 0; i < n; ++i) v[i] = 0.25f * static_cast<float>(i % 13) - 1.0f;
  return v;
}

// A valid request: query [1, 2, 3, 4] and key [1, 1, 3, 4] in BHTD, defaults.
v1::Rope ValidRope() {
  v1::Rope rope;
  *rope.mutable_query() = MakeTensor({1, 2, 3, 4}, Iota(24));
  *rope.mutable_key() = MakeTensor({1, 1, 3, 4}, Iota(12));
  return rope;
}

absl::StatusOr<RopeJob> Parse(const v1::Rope& rope) {
  return ParseRope(rope, v1::DATA_TYPE_UNSPECIFIED);
}

void ExpectInvalid(const v1::Rope& rope, const std::string& message) {
  EXPECT_THAT(Parse(rope), StatusIs(absl::StatusCode::kInvalidArgument, message));
}

TEST(RopeRequestTest, ValidRequestParsesWithDefaults) {
  const v1::Rope rope = ValidRope();  // Outlives the job, which views its tensors.
  absl::StatusOr<RopeJob> job = Parse(rope);
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_TRUE(job->bhtd);
  EXPECT_EQ(job->style, kernels::RopeStyle::kHalf);
  EXPECT_EQ(job->batch, 1);
  EXPECT_EQ(job->tokens, 3);
  EXPECT_EQ(job->query_heads, 2);
  EXPECT_EQ(job->key_heads, 1);
  EXPECT_EQ(job->head_dim, 4);
  EXPECT_EQ(job->rotary_dim, 4);
  EXPECT_TRUE(job->has_key);
  EXPECT_TRUE(job->shared_positions);
  EXPECT_EQ(job->positions, (std::vector<int64_t>{0, 1, 2}));
  // theta 10000: inv_freq = [1, 10000^(-1/2)].
  EXPECT_EQ(job->frequencies.inv_freq, (std::vector<float>{1.0f, 0.01f}));
  EXPECT_EQ(job->frequencies.attention_scaling, 1.0f);
  EXPECT_EQ(job->output_type, ElementType::kFloat32);
}

TEST(RopeRequestTest, ReadsLayoutStylePositionsAndOutputType) {
  v1::Rope rope;
  rope.set_layout(v1::Rope::BTHD);
  rope.set_style(v1::Rope::INTERLEAVED);
  *rope.mutable_query() = MakeTensor({2, 3, 4, 6}, Iota(144), v1::BFLOAT16);
  *rope.mutable_key() = MakeTensor({2, 3, 2, 6}, Iota(72), v1::BFLOAT16);
  rope.set_rotary_dim(4);
  rope.set_theta(500000.0f);
  for (int64_t p : {5, 6, 7, 9, 10, 11}) rope.add_positions(p);
  absl::StatusOr<RopeJob> job = ParseRope(rope, v1::FLOAT16);
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_FALSE(job->bhtd);
  EXPECT_EQ(job->style, kernels::RopeStyle::kInterleaved);
  EXPECT_EQ(job->batch, 2);
  EXPECT_EQ(job->tokens, 3);
  EXPECT_EQ(job->query_heads, 4);
  EXPECT_EQ(job->key_heads, 2);
  EXPECT_EQ(job->rotary_dim, 4);
  EXPECT_FALSE(job->shared_positions);
  EXPECT_EQ(job->positions, (std::vector<int64_t>{5, 6, 7, 9, 10, 11}));
  EXPECT_EQ(job->frequencies.inv_freq.size(), 2u);
  EXPECT_EQ(job->output_type, ElementType::kFloat16);

  rope.mutable_positions()->Truncate(3);  // T entries: shared by both rows.
  job = Parse(rope);
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_TRUE(job->shared_positions);
  EXPECT_EQ(job->positions, (std::vector<int64_t>{5, 6, 7}));
  EXPECT_EQ(job->output_type, ElementType::kBfloat16);  // The query's dtype.
}

TEST(RopeRequestTest, RejectsMissingQuery) {
  v1::Rope rope = ValidRope();
  rope.clear_query();
  ExpectInvalid(rope, "rope.query: required");
}

TEST(RopeRequestTest, RejectsRankOtherThanFour) {
  v1::Rope rope = ValidRope();
  *rope.mutable_query() = MakeTensor({2, 3, 4}, Iota(24));
  ExpectInvalid(rope, "rope.query.shape: rank 3 (shape [2,3,4]), expected rank 4");
  rope = ValidRope();
  *rope.mutable_key() = MakeTensor({1, 1, 1, 3, 4}, Iota(12));
  ExpectInvalid(rope, "rope.key.shape: rank 5 (shape [1,1,1,3,4]), expected rank 4");
}

TEST(RopeRequestTest, RejectsBadQueryBytesAndDtype) {
  v1::Rope rope = ValidRope();
  rope.mutable_query()->mutable_data()->resize(92);
  ExpectInvalid(rope, "rope.query.data: shape [1,2,3,4] FLOAT32 needs 96 bytes, got 92");
  rope = ValidRope();
  rope.mutable_key()->set_dtype(v1::DATA_TYPE_UNSPECIFIED);
  EXPECT_THAT(Parse(rope),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("rope.key.dtype: dtype is DATA_TYPE_UNSPECIFIED")));
}

TEST(RopeRequestTest, RejectsKeyWithOtherBatchTokensOrHeadDim) {
  v1::Rope rope = ValidRope();
  *rope.mutable_key() = MakeTensor({2, 1, 3, 4}, Iota(24));
  ExpectInvalid(rope,
                "rope.key.shape: [2,1,3,4] (BHTD) must have the B, T and Dh of "
                "rope.query.shape [1,2,3,4]: B=1, T=3, Dh=4");
  *rope.mutable_key() = MakeTensor({1, 1, 2, 4}, Iota(8));
  ExpectInvalid(rope,
                "rope.key.shape: [1,1,2,4] (BHTD) must have the B, T and Dh of "
                "rope.query.shape [1,2,3,4]: B=1, T=3, Dh=4");
  *rope.mutable_key() = MakeTensor({1, 1, 3, 6}, Iota(18));
  ExpectInvalid(rope,
                "rope.key.shape: [1,1,3,6] (BHTD) must have the B, T and Dh of "
                "rope.query.shape [1,2,3,4]: B=1, T=3, Dh=4");
  // BTHD reads T from dimension 1: the same key shape is fine in BHTD terms only.
  rope = ValidRope();
  rope.set_layout(v1::Rope::BTHD);  // query [B=1, T=2, H=3, Dh=4], key T=1.
  ExpectInvalid(rope,
                "rope.key.shape: [1,1,3,4] (BTHD) must have the B, T and Dh of "
                "rope.query.shape [1,2,3,4]: B=1, T=2, Dh=4");
}

TEST(RopeRequestTest, RejectsQueryHeadsNotAMultipleOfKeyHeads) {
  v1::Rope rope = ValidRope();
  *rope.mutable_query() = MakeTensor({1, 3, 3, 4}, Iota(36));
  *rope.mutable_key() = MakeTensor({1, 2, 3, 4}, Iota(24));
  ExpectInvalid(rope, "rope.key.shape: 2 key heads must divide the 3 query heads");
}

TEST(RopeRequestTest, RejectsBadRotaryDim) {
  v1::Rope rope = ValidRope();
  rope.set_rotary_dim(3);
  ExpectInvalid(rope, "rope.rotary_dim: 3 must be even");
  rope.set_rotary_dim(-2);
  ExpectInvalid(rope, "rope.rotary_dim: -2 must be >= 0 (0 = head dim)");
  rope.set_rotary_dim(6);
  ExpectInvalid(rope, "rope.rotary_dim: 6 exceeds head dim 4");
  rope = ValidRope();
  *rope.mutable_query() = MakeTensor({1, 1, 2, 5}, Iota(10));
  rope.clear_key();
  ExpectInvalid(rope,
                "rope.rotary_dim: 0 means head dim 5, which is odd; set an even "
                "rotary_dim");
  rope.set_rotary_dim(4);  // Partial rotary makes an odd head dim fine.
  EXPECT_TRUE(Parse(rope).ok());
}

TEST(RopeRequestTest, RejectsNonPositiveOrNonFiniteTheta) {
  v1::Rope rope = ValidRope();
  rope.set_theta(0);
  ExpectInvalid(rope, "rope.theta: 0 must be finite and > 0");
  rope.set_theta(-10000);
  ExpectInvalid(rope, "rope.theta: -10000 must be finite and > 0");
  rope.set_theta(std::numeric_limits<float>::infinity());
  ExpectInvalid(rope, "rope.theta: inf must be finite and > 0");
  rope.set_theta(std::numeric_limits<float>::quiet_NaN());
  ExpectInvalid(rope, "rope.theta: nan must be finite and > 0");
}

TEST(RopeRequestTest, RejectsUnknownEnumValues) {
  v1::Rope rope = ValidRope();
  rope.set_style(static_cast<v1::Rope::Style>(7));
  ExpectInvalid(rope, "rope.style: unknown Rope.Style 7");
  rope = ValidRope();
  rope.set_layout(static_cast<v1::Rope::Layout>(9));
  ExpectInvalid(rope, "rope.layout: unknown Rope.Layout 9");
  rope = ValidRope();
  rope.mutable_scaling()->set_type(static_cast<v1::RopeScaling::Type>(11));
  ExpectInvalid(rope, "rope.scaling.type: unknown RopeScaling.Type 11");
}

TEST(RopeRequestTest, RejectsScalingFactorBelowOneOrNonFinite) {
  v1::Rope rope = ValidRope();
  v1::RopeScaling* s = rope.mutable_scaling();
  s->set_type(v1::RopeScaling::LINEAR);
  ExpectInvalid(rope, "rope.scaling.factor: 0 must be finite and >= 1 for LINEAR");
  s->set_factor(0.5f);
  ExpectInvalid(rope, "rope.scaling.factor: 0.5 must be finite and >= 1 for LINEAR");
  s->set_factor(std::numeric_limits<float>::infinity());
  ExpectInvalid(rope, "rope.scaling.factor: inf must be finite and >= 1 for LINEAR");
  s->set_factor(std::numeric_limits<float>::quiet_NaN());
  ExpectInvalid(rope, "rope.scaling.factor: nan must be finite and >= 1 for LINEAR");
  s->set_type(v1::RopeScaling::YARN);
  s->set_factor(0.25f);
  ExpectInvalid(rope, "rope.scaling.factor: 0.25 must be finite and >= 1 for YARN");
  s->set_factor(1.0f);
  s->set_type(v1::RopeScaling::LINEAR);
  EXPECT_TRUE(Parse(rope).ok());
  // NONE ignores every other field, as Hugging Face does without rope_scaling.
  s->set_type(v1::RopeScaling::NONE);
  s->set_factor(-3);
  EXPECT_TRUE(Parse(rope).ok());
}

TEST(RopeRequestTest, RejectsMissingOriginalMaxPositionEmbeddings) {
  for (auto [type, name] : {std::pair{v1::RopeScaling::DYNAMIC_NTK, "DYNAMIC_NTK"},
                            std::pair{v1::RopeScaling::YARN, "YARN"},
                            std::pair{v1::RopeScaling::LLAMA3, "LLAMA3"}}) {
    v1::Rope rope = ValidRope();
    rope.mutable_scaling()->set_type(type);
    rope.mutable_scaling()->set_factor(4);
    ExpectInvalid(rope, std::string("rope.scaling.original_max_position_embeddings: 0 "
                                    "must be >= 1 for ") +
                            name);
    rope.mutable_scaling()->set_original_max_position_embeddings(-5);
    ExpectInvalid(rope, std::string("rope.scaling.original_max_position_embeddings: -5 "
                                    "must be >= 1 for ") +
                            name);
    rope.mutable_scaling()->set_original_max_position_embeddings(2048);
    EXPECT_TRUE(Parse(rope).ok()) << name;
  }
}

TEST(RopeRequestTest, RejectsBadLlama3FreqFactors) {
  v1::Rope rope = ValidRope();
  v1::RopeScaling* s = rope.mutable_scaling();
  s->set_type(v1::RopeScaling::LLAMA3);
  s->set_factor(8);
  s->set_original_max_position_embeddings(8192);
  s->set_low_freq_factor(4);  // high_freq_factor defaults to 4.
  ExpectInvalid(rope, "rope.scaling.low_freq_factor: 4 must be < high_freq_factor 4");
  s->set_high_freq_factor(2);
  ExpectInvalid(rope, "rope.scaling.low_freq_factor: 4 must be < high_freq_factor 2");
  s->set_low_freq_factor(0);
  ExpectInvalid(rope, "rope.scaling.low_freq_factor: 0 must be finite and > 0");
  s->set_low_freq_factor(1);
  s->set_high_freq_factor(std::numeric_limits<float>::infinity());
  ExpectInvalid(rope, "rope.scaling.high_freq_factor: inf must be finite and > 0");
}

TEST(RopeRequestTest, RejectsBadYarnParameters) {
  v1::Rope rope = ValidRope();
  v1::RopeScaling* s = rope.mutable_scaling();
  s->set_type(v1::RopeScaling::YARN);
  s->set_factor(4);
  s->set_original_max_position_embeddings(4096);
  s->set_beta_fast(1);  // beta_slow defaults to 1.
  ExpectInvalid(rope, "rope.scaling.beta_fast: 1 must be > beta_slow 1");
  s->set_beta_slow(40);
  s->clear_beta_fast();  // beta_fast defaults to 32.
  ExpectInvalid(rope, "rope.scaling.beta_fast: 32 must be > beta_slow 40");
  s->set_beta_slow(-1);
  ExpectInvalid(rope, "rope.scaling.beta_slow: -1 must be finite and > 0");
  s->set_beta_slow(1);
  s->set_beta_fast(std::numeric_limits<float>::quiet_NaN());
  ExpectInvalid(rope, "rope.scaling.beta_fast: nan must be finite and > 0");
  s->clear_beta_fast();
  s->set_attention_factor(0);
  ExpectInvalid(rope, "rope.scaling.attention_factor: 0 must be finite and > 0");
  s->set_attention_factor(1.1f);
  absl::StatusOr<RopeJob> job = Parse(rope);
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ(job->frequencies.attention_scaling, 1.1f);
}

TEST(RopeRequestTest, RejectsBadPositions) {
  v1::Rope rope = ValidRope();
  rope.set_position_offset(-1);
  ExpectInvalid(rope, "rope.position_offset: -1 must be >= 0");
  rope = ValidRope();
  rope.add_positions(0);
  rope.add_positions(-3);
  rope.add_positions(2);
  ExpectInvalid(rope, "rope.positions[1]: -3 must be >= 0");
  rope.mutable_positions()->Truncate(2);
  ExpectInvalid(rope, "rope.positions: 2 entries; expected T = 3 or B*T = 3");
}

TEST(RopeRequestTest, RejectsUnknownOutputDtype) {
  const v1::Rope rope = ValidRope();
  EXPECT_THAT(ParseRope(rope, static_cast<v1::DataType>(9)),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "output_dtype: unknown dtype 9; expected FLOAT32, BFLOAT16 or "
                       "FLOAT16"));
}

TEST(RopeRequestTest, DynamicNtkUsesTheLongestPositionOfTheRequest) {
  v1::Rope rope = ValidRope();
  v1::RopeScaling* s = rope.mutable_scaling();
  s->set_type(v1::RopeScaling::DYNAMIC_NTK);
  s->set_factor(2);
  s->set_original_max_position_embeddings(10);
  rope.set_position_offset(7);  // L = 10 = M: not scaled.
  absl::StatusOr<RopeJob> job = Parse(rope);
  ASSERT_TRUE(job.ok());
  EXPECT_EQ(job->frequencies.inv_freq[1], 0.01f);
  rope.set_position_offset(8);  // L = 11 > M: the base grows.
  job = Parse(rope);
  ASSERT_TRUE(job.ok());
  EXPECT_LT(job->frequencies.inv_freq[1], 0.01f);
}

// ---------------------------------------------------------------------------------
// RunRope.
// ---------------------------------------------------------------------------------

TEST(RopeRunTest, QueryOnlyAtPositionZeroIsIdentityAndHasNoKey) {
  v1::Rope rope = ValidRope();
  rope.clear_key();
  rope.add_positions(0);
  rope.add_positions(0);
  rope.add_positions(0);
  absl::StatusOr<RopeJob> job = Parse(rope);
  ASSERT_TRUE(job.ok()) << job.status();
  v1::PositionalEncodeResponse response;
  EXPECT_EQ(RunRope(*job, &response).saturated, 0);
  EXPECT_FALSE(response.has_key());
  EXPECT_EQ(response.output().dtype(), v1::FLOAT32);
  EXPECT_THAT(response.output().shape(), ::testing::ElementsAre(1, 2, 3, 4));
  EXPECT_EQ(TensorValues(response.output()), Iota(24));
}

TEST(RopeRunTest, CountsValuesSaturatedOnSixteenBitOutput) {
  v1::Rope rope;
  // Position 0 (identity): every 1e6 stays 1e6, beyond float16's 65504.
  *rope.mutable_query() = MakeTensor({1, 1, 2, 4}, std::vector<float>(8, 1e6f));
  *rope.mutable_key() = MakeTensor({1, 1, 2, 4}, std::vector<float>(8, 1.0f));
  rope.add_positions(0);
  rope.add_positions(0);
  absl::StatusOr<RopeJob> job = ParseRope(rope, v1::FLOAT16);
  ASSERT_TRUE(job.ok()) << job.status();
  v1::PositionalEncodeResponse response;
  EXPECT_EQ(RunRope(*job, &response).saturated, 8);
  EXPECT_EQ(response.output().dtype(), v1::FLOAT16);
  EXPECT_EQ(response.key().dtype(), v1::FLOAT16);
  EXPECT_EQ(TensorValues(response.output())[0], std::numeric_limits<float>::infinity());
  EXPECT_EQ(TensorValues(response.key()), std::vector<float>(8, 1.0f));

  job = ParseRope(rope, v1::BFLOAT16);  // 1e6 is well inside bfloat16's range.
  ASSERT_TRUE(job.ok());
  EXPECT_EQ(RunRope(*job, &response).saturated, 0);
}

// ---------------------------------------------------------------------------------
// The PyTorch golden cases through ParseRope + RunRope.
// ---------------------------------------------------------------------------------

const std::vector<golden::RopeGoldenCase>& Cases() {
  static const auto* cases = new std::vector<golden::RopeGoldenCase>(
      golden::LoadRopeGolden(LAYERSERVE_SOURCE_DIR "/tests/golden/rope_golden.json"));
  return *cases;
}

v1::Rope RopeOf(const golden::RopeGoldenCase& c, v1::DataType dtype) {
  v1::Rope rope;
  *rope.mutable_query() = MakeTensor(c.query_shape, c.query, dtype);
  if (!c.key.empty()) *rope.mutable_key() = MakeTensor(c.key_shape, c.key, dtype);
  rope.set_layout(c.bhtd() ? v1::Rope::BHTD : v1::Rope::BTHD);
  rope.set_style(c.style == "HALF" ? v1::Rope::HALF : v1::Rope::INTERLEAVED);
  rope.set_theta(c.theta);
  rope.set_rotary_dim(c.rotary_dim);
  rope.set_position_offset(c.position_offset);
  for (int64_t p : c.positions) rope.add_positions(p);
  v1::RopeScaling* s = rope.mutable_scaling();
  v1::RopeScaling::Type type = v1::RopeScaling::NONE;
  EXPECT_TRUE(v1::RopeScaling::Type_Parse(c.scaling.type, &type)) << c.scaling.type;
  s->set_type(type);
  s->set_factor(c.scaling.factor);
  s->set_original_max_position_embeddings(c.scaling.original_max_position_embeddings);
  if (c.scaling.beta_fast) s->set_beta_fast(*c.scaling.beta_fast);
  if (c.scaling.beta_slow) s->set_beta_slow(*c.scaling.beta_slow);
  if (c.scaling.attention_factor) s->set_attention_factor(*c.scaling.attention_factor);
  if (c.scaling.low_freq_factor) s->set_low_freq_factor(*c.scaling.low_freq_factor);
  if (c.scaling.high_freq_factor) s->set_high_freq_factor(*c.scaling.high_freq_factor);
  return rope;
}

// |got - expected| <= tol * max(1, |expected|), plus, for a dimension whose
// frequency differs from PyTorch's float32 one (PyTorch's pow is within 1 ulp, ours
// correctly rounded; see make_rope_golden.py), the effect of that difference: the
// float32 angle moves by at most |p * d_inv| + ulp(angle) <= |p * d_inv| +
// 2^-23 |angle|, and the rotation of (x_a, x_b) by an angle error e moves each output
// by at most (|x_a| + |x_b|) |e| times the attention factor.
void ExpectMatchesGolden(const golden::RopeGoldenCase& c, const RopeJob& job,
                         const std::vector<float>& x, const std::vector<float>& got,
                         const std::vector<float>& expected,
                         const std::vector<int64_t>& shape, double tol,
                         const std::string& what) {
  ASSERT_EQ(got.size(), expected.size()) << what;
  bool shared = false;
  const std::vector<int64_t> positions = c.ResolvedPositions(&shared);
  const int64_t rotary_dim = c.resolved_rotary_dim();
  const kernels::RopeGeometry g = kernels::ContiguousRopeGeometry(
      c.bhtd(), c.batch(), c.heads(shape), c.tokens(), c.head_dim(), rotary_dim, shared);
  int reported = 0;
  for (int64_t b = 0; b < g.batch; ++b) {
    for (int64_t h = 0; h < g.heads; ++h) {
      for (int64_t t = 0; t < g.tokens; ++t) {
        const int64_t row = b * g.batch_stride + h * g.head_stride + t * g.token_stride;
        const double p = static_cast<float>(positions[shared ? t : b * g.tokens + t]);
        for (int64_t i = 0; i < g.head_dim; ++i) {
          const int64_t at = row + i;
          double limit =
              tol * std::max(1.0, std::fabs(static_cast<double>(expected[at])));
          if (i < rotary_dim) {
            const bool half = c.style == "HALF";
            const int64_t f = half ? i % (rotary_dim / 2) : i / 2;
            const int64_t partner =
                half ? (i < rotary_dim / 2 ? i + rotary_dim / 2 : i - rotary_dim / 2)
                     : (i ^ 1);
            const double ours = job.frequencies.inv_freq[f], theirs = c.inv_freq[f];
            if (ours != theirs) {
              const double angle_error =
                  std::fabs(p * (ours - theirs)) + std::ldexp(std::fabs(p * ours), -23);
              limit += (std::fabs(x[at]) + std::fabs(x[row + partner])) * angle_error *
                       job.frequencies.attention_scaling;
            }
          }
          const double err = std::fabs(static_cast<double>(got[at]) - expected[at]);
          if (!(err <= limit) && reported++ < 5) {
            ADD_FAILURE() << what << " at " << at << ": got " << got[at] << " expected "
                          << expected[at] << " err " << err << " limit " << limit;
          }
        }
      }
    }
  }
}

class RopeGoldenRequestTest : public ::testing::TestWithParam<v1::DataType> {};

TEST_P(RopeGoldenRequestTest, MatchesPyTorch) {
  const v1::DataType dtype = GetParam();
  const double tol = dtype == v1::FLOAT32 ? golden::kRopeFloat32Tolerance
                                          : golden::kRopeBfloat16Tolerance;
  ASSERT_GE(Cases().size(), 20u);
  for (const golden::RopeGoldenCase& c : Cases()) {
    SCOPED_TRACE(c.name);
    const v1::Rope rope = RopeOf(c, dtype);  // Outlives the job, which views its tensors.
    absl::StatusOr<RopeJob> job = ParseRope(rope, v1::DATA_TYPE_UNSPECIFIED);
    ASSERT_TRUE(job.ok()) << job.status();
    v1::PositionalEncodeResponse response;
    EXPECT_EQ(RunRope(*job, &response).saturated, 0);
    EXPECT_EQ(response.output().dtype(), dtype);
    EXPECT_THAT(response.output().shape(), ::testing::ElementsAreArray(c.query_shape));
    ExpectMatchesGolden(c, *job, c.query, TensorValues(response.output()),
                        c.expected_query, c.query_shape, tol, "query");
    EXPECT_EQ(response.has_key(), !c.key.empty());
    if (!c.key.empty()) {
      EXPECT_THAT(response.key().shape(), ::testing::ElementsAreArray(c.key_shape));
      ExpectMatchesGolden(c, *job, c.key, TensorValues(response.key()), c.expected_key,
                          c.key_shape, tol, "key");
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Dtypes, RopeGoldenRequestTest,
                         ::testing::Values(v1::FLOAT32, v1::BFLOAT16),
                         [](const ::testing::TestParamInfo<v1::DataType>& info) {
                           return v1::DataType_Name(info.param);
                         });

}  // namespace
}  // namespace layerserve
