// Holds the positional kernels -- each reference and each fast kernel -- to the
// PyTorch cases of tests/golden/positional_golden.json (make_positional_golden.py
// documents the formulas and the tolerances): FLOAT32 within 1e-5 * max(1, |want|);
// the ALiBi slopes and every T5 bucket exactly; and the premise of the BFLOAT16
// wire: inputs survive bfloat16 unchanged and outputs rounded to bfloat16 stay
// within 2e-2 * max(1, |want|).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "common/dtype.h"
#include "kernels/positional/positional.h"
#include "tests/golden/golden_expect.h"

namespace layerserve::kernels {
namespace {

using golden::ExpectWithin;
using golden::Floats;
using golden::ThroughBfloat16;

constexpr double kFloat32Tolerance = 1e-5;
constexpr double kBfloat16Tolerance = 2e-2;
const char kGoldenPath[] = LAYERSERVE_SOURCE_DIR "/tests/golden/positional_golden.json";

const nlohmann::json& Golden() {
  static const auto* doc = [] {
    std::ifstream file(kGoldenPath);
    if (!file) throw std::runtime_error(std::string("cannot open ") + kGoldenPath);
    return new nlohmann::json(nlohmann::json::parse(file));
  }();
  return *doc;
}

// Checks a kernel output at the FLOAT32 tolerance, and once rounded to bfloat16 at
// the BFLOAT16 one.
void ExpectGolden(const std::vector<float>& got, const std::vector<float>& want,
                  const std::string& what) {
  ExpectWithin(got, want, kFloat32Tolerance, what);
  ExpectWithin(ThroughBfloat16(got), want, kBfloat16Tolerance, what + " as bfloat16");
}

void ExpectBfloat16Exact(const std::vector<float>& values, const std::string& what) {
  EXPECT_EQ(ThroughBfloat16(values), values) << what << " is not bfloat16-exact";
}

TEST(PositionalGoldenTest, Sinusoidal) {
  PositionalContext ctx;
  ASSERT_GE(Golden().at("sinusoidal").size(), 8u);
  for (const auto& c : Golden().at("sinusoidal")) {
    const std::string name = c.at("name");
    const std::vector<float> input = Floats(c.at("input"));
    const std::vector<float> expected = Floats(c.at("expected"));
    const std::vector<int64_t> positions = c.at("resolved_positions");
    const int64_t dim = c.at("input").is_null()
                            ? c.at("dim").get<int64_t>()
                            : c.at("input_shape").back().get<int64_t>();
    const int64_t rows = static_cast<int64_t>(positions.size());
    ASSERT_EQ(static_cast<int64_t>(expected.size()), rows * dim) << name;
    const SinusoidalLayout layout = c.at("layout") == "interleaved"
                                        ? SinusoidalLayout::kInterleaved
                                        : SinusoidalLayout::kConcatenated;
    const float base = static_cast<float>(c.at("base").get<double>());
    const float* x = input.empty() ? nullptr : input.data();
    std::vector<float> fast(expected.size()), ref(expected.size());
    Sinusoidal(ctx, x, positions.data(), rows, dim, base, layout, fast.data());
    SinusoidalReference(x, positions.data(), rows, dim, base, layout, ref.data());
    ExpectGolden(fast, expected, name + " fast");
    ExpectGolden(ref, expected, name + " reference");
    ExpectBfloat16Exact(input, name + " input");
  }
}

TEST(PositionalGoldenTest, Learned) {
  for (const auto& c : Golden().at("learned")) {
    const std::string name = c.at("name");
    const std::vector<float> input = Floats(c.at("input"));
    const std::vector<float> table = Floats(c.at("table"));
    const std::vector<float> expected = Floats(c.at("expected"));
    const std::vector<int64_t> positions = c.at("resolved_positions");
    const int64_t dim = c.at("input_shape").back().get<int64_t>();
    const int64_t rows = static_cast<int64_t>(positions.size());
    std::vector<float> fast(expected.size()), ref(expected.size());
    Learned(input.data(), positions.data(), rows, dim, table.data(), fast.data());
    LearnedReference(input.data(), positions.data(), rows, dim, table.data(), ref.data());
    ExpectGolden(fast, expected, name + " fast");
    ExpectGolden(ref, expected, name + " reference");
    ExpectBfloat16Exact(input, name + " input");
    ExpectBfloat16Exact(table, name + " table");
  }
}

TEST(PositionalGoldenTest, Alibi) {
  for (const auto& c : Golden().at("alibi")) {
    const std::string name = c.at("name");
    AlibiShape shape;
    shape.heads = c.at("num_heads");
    shape.query_length = c.at("query_length");
    shape.key_length = c.at("key_length");
    shape.query_offset = c.at("query_offset");
    shape.symmetric = c.at("symmetric");
    std::vector<float> slopes(shape.heads);
    AlibiSlopes(shape.heads, slopes.data());
    EXPECT_EQ(slopes, Floats(c.at("slopes"))) << name << ": slopes are pinned exactly";
    const std::vector<float> scores = Floats(c.at("scores"));
    const std::vector<float> expected = Floats(c.at("expected"));
    const int64_t batch = c.at("scores").is_null() || c.at("scores_shape").size() == 3
                              ? 1
                              : c.at("scores_shape")[0].get<int64_t>();
    const float* s = scores.empty() ? nullptr : scores.data();
    std::vector<float> fast(expected.size()), ref(expected.size());
    Alibi(slopes.data(), shape, s, batch, fast.data());
    AlibiReference(slopes.data(), shape, s, batch, ref.data());
    ExpectGolden(fast, expected, name + " fast");
    ExpectGolden(ref, expected, name + " reference");
    ExpectBfloat16Exact(scores, name + " scores");
  }
}

TEST(PositionalGoldenTest, T5Bias) {
  PositionalContext ctx;
  for (const auto& c : Golden().at("t5_bias")) {
    const std::string name = c.at("name");
    T5BiasShape shape;
    shape.num_buckets = c.at("table_shape")[0];
    shape.heads = c.at("table_shape")[1];
    shape.bidirectional = c.at("bidirectional");
    shape.max_distance = c.at("max_distance").get<int64_t>() == 0
                             ? 128
                             : c.at("max_distance").get<int64_t>();
    shape.query_length = c.at("query_length");
    shape.key_length = c.at("key_length");
    shape.query_offset = c.at("query_offset");
    const std::vector<float> table = Floats(c.at("table"));
    const std::vector<float> expected = Floats(c.at("expected"));
    std::vector<float> fast(expected.size()), ref(expected.size());
    T5Bias(ctx, table.data(), shape, fast.data());
    T5BiasReference(table.data(), shape, ref.data());
    // A copy of table entries: exact (any wrong bucket picks another entry).
    EXPECT_EQ(fast, expected) << name << " fast";
    EXPECT_EQ(ref, expected) << name << " reference";
    ExpectBfloat16Exact(table, name + " table");
  }
}

// Hugging Face's float32 formula at every relative position out to twice
// max_distance, including the log buckets' boundaries (e.g. d = 16, 32, 64 for 32
// bidirectional buckets, where the exact value is an integer and float32 rounding
// decides).
TEST(PositionalGoldenTest, T5BucketsMatchHuggingFaceExactly) {
  ASSERT_GE(Golden().at("t5_buckets").size(), 10u);
  for (const auto& c : Golden().at("t5_buckets")) {
    const int64_t num_buckets = c.at("num_buckets");
    const int64_t max_distance = c.at("max_distance");
    const bool bidirectional = c.at("bidirectional");
    const int64_t first = c.at("min_relative_position");
    const std::vector<int64_t> buckets = c.at("buckets");
    int mismatches = 0;
    for (size_t k = 0; k < buckets.size(); ++k) {
      const int64_t rel = first + static_cast<int64_t>(k);
      const int64_t got =
          T5RelativePositionBucket(rel, bidirectional, num_buckets, max_distance);
      if (got != buckets[k] && mismatches++ < 5) {
        ADD_FAILURE() << "num_buckets " << num_buckets << " max_distance " << max_distance
                      << (bidirectional ? " bidirectional" : " causal")
                      << " relative position " << rel << ": got " << got << " want "
                      << buckets[k];
      }
    }
  }
}

}  // namespace
}  // namespace layerserve::kernels
