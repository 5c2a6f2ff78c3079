// Holds the fast positional kernels (kernels/positional/positional.h) to their scalar
// references on every instruction set this CPU has (Highway's dispatch forced to
// each target in turn), over row widths D in {1, 7, 64, 4096, 4097} and row counts
// T in {1, 3, 512}, with misaligned pointers (offset by one float), in-place
// outputs, magnitudes near 1e4 and 1e20, NaN and Inf. Sinusoidal needs an even
// width, so it sweeps the even neighbours {2, 8, 64, 4096, 4098} instead.
//
// Tolerances:
// - Learned, ALiBi and T5 are bit-exact: the fast kernels perform the same float32
//   operations as the references (one add; one multiply then one add; a copy).
// - Sinusoidal: the reference rounds sin/cos computed in double (error <= 1/2 ulp),
//   the fast kernel uses float32 polynomials after an exact reduction. Values lie
//   in [-1, 1], where an ulp is at most 2^-24 below 1/2 and 2^-23 at 1; the largest
//   difference observed on every target is 2^-24. We allow kTrigTol = 2^-22 (4x that
//   margin): any mistake in the reduction or a quadrant shows up as >= 1e-3. With an
//   input, both then round x + pe once: the sums differ by at most the pe difference
//   plus one ulp of the result, so |fast - ref| <= kTrigTol + eps32 * |ref|. A table
//   (no input) is judged by kTrigTol alone. An add that reads the context's cached
//   table must equal x + that table output bit for bit, as computing does.
// Every fast run of the sweeps is repeated with output statistics (output_stats),
// out of place into a buffer of its own: the same output to the bit, and the
// statistics of that output (tests/testing/output_stats.h).
#include "kernels/positional/positional.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <ostream>
#include <random>
#include <string>
#include <vector>

#include "hwy/targets.h"
#include "kernels/positional/positional_internal.h"
#include "tests/testing/highway_target_scope.h"
#include "tests/testing/output_stats.h"

namespace layerserve::kernels {
namespace {

using testing::TargetScope;

constexpr double kEps32 = std::numeric_limits<float>::epsilon();  // 2^-23.
constexpr double kTrigTol = 1.0 / (1 << 22);
constexpr float kNan = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

std::vector<int64_t> Targets() { return hwy::SupportedAndGeneratedTargets(); }

std::string TargetParamName(const ::testing::TestParamInfo<int64_t>& info) {
  return hwy::TargetName(info.param);
}

// A buffer whose data starts one float past a 64-byte boundary when `misaligned`:
// no vector load or store from it is aligned.
class Buffer {
 public:
  Buffer(size_t n, bool misaligned) : storage_(n + 32), offset_(0) {
    const auto address = reinterpret_cast<uintptr_t>(storage_.data());
    offset_ = ((64 - address % 64) % 64) / sizeof(float) + (misaligned ? 1 : 0);
  }
  float* data() { return storage_.data() + offset_; }
  const float* data() const { return storage_.data() + offset_; }

 private:
  std::vector<float> storage_;
  size_t offset_;
};

std::vector<float> RandomValues(size_t n, float scale, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> v(n);
  for (float& f : v) f = scale * normal(rng);
  return v;
}

// Bitwise-equal floats (NaN equal to NaN): the bit-exact kernels.
void ExpectSameFloats(const float* fast, const float* ref, size_t n,
                      const std::string& what) {
  int reported = 0;
  for (size_t i = 0; i < n; ++i) {
    const bool same = (std::isnan(fast[i]) && std::isnan(ref[i])) || fast[i] == ref[i];
    if (!same && reported++ < 5) {
      ADD_FAILURE() << what << " at " << i << ": fast " << fast[i] << " ref " << ref[i];
    }
  }
}

// Runs run(out, stats), a fast kernel writing n values into `out` with its output
// statistics, and holds it to `y`, what the same call wrote without them.
template <class Run>
void ExpectStatsRunMatches(const float* y, size_t n, bool misaligned, const Run& run,
                           const std::string& what) {
  Buffer with_stats(n, misaligned);
  ValueStats stats;
  run(with_stats.data(), &stats);
  const int64_t count = static_cast<int64_t>(n);
  testing::ExpectSameOutput(with_stats.data(), y, count, what);
  testing::ExpectStatsOf(stats, y, count, what);
}

// The sinusoidal tolerance stated at the top. NaN must match NaN, Inf match Inf.
void ExpectSinusoidalClose(const float* fast, const float* ref, size_t n, bool with_input,
                           const std::string& what) {
  int reported = 0;
  double worst = 0;
  for (size_t i = 0; i < n; ++i) {
    bool ok;
    if (!std::isfinite(ref[i])) {
      ok = std::isnan(ref[i]) ? std::isnan(fast[i]) : fast[i] == ref[i];
    } else {
      const double err = std::fabs(static_cast<double>(fast[i]) - ref[i]);
      const double tol = kTrigTol + (with_input ? kEps32 * std::fabs(ref[i]) : 0.0);
      ok = err <= tol;
      worst = std::max(worst, err / tol);
    }
    if (!ok && reported++ < 5) {
      ADD_FAILURE() << what << " at " << i << ": fast " << fast[i] << " ref " << ref[i];
    }
  }
  ::testing::Test::RecordProperty("worst_error_over_tolerance", std::to_string(worst));
}

// ---------------------------------------------------------------------------
// Sinusoidal
// ---------------------------------------------------------------------------

struct SinusoidalCase {
  int64_t rows, dim;
  SinusoidalLayout layout;
  bool with_input, in_place, misaligned;
};

std::string Describe(const SinusoidalCase& c) {
  return std::to_string(c.rows) + "x" + std::to_string(c.dim) +
         (c.layout == SinusoidalLayout::kInterleaved ? " interleaved" : " concatenated") +
         (c.with_input ? " +input" : " table") + (c.in_place ? " in-place" : "") +
         (c.misaligned ? " misaligned" : "");
}

// Runs both twins on `positions` and compares them. `x` (rows * dim) is the input
// when c.with_input.
void CheckSinusoidal(PositionalContext& ctx, const SinusoidalCase& c, float base,
                     const std::vector<int64_t>& positions, const std::vector<float>& x) {
  const size_t n = static_cast<size_t>(c.rows * c.dim);
  Buffer fast_in(n, c.misaligned), fast_out(n, c.misaligned);
  std::vector<float> ref(n);
  if (c.with_input) std::memcpy(fast_in.data(), x.data(), n * sizeof(float));
  float* y = c.in_place ? fast_in.data() : fast_out.data();
  Sinusoidal(ctx, c.with_input ? fast_in.data() : nullptr, positions.data(), c.rows,
             c.dim, base, c.layout, y);
  SinusoidalReference(c.with_input ? x.data() : nullptr, positions.data(), c.rows, c.dim,
                      base, c.layout, ref.data());
  ExpectSinusoidalClose(y, ref.data(), n, c.with_input,
                        Describe(c) + " base " + std::to_string(base));
  ExpectStatsRunMatches(
      y, n, c.misaligned,
      [&](float* out, ValueStats* stats) {
        Sinusoidal(ctx, c.with_input ? x.data() : nullptr, positions.data(), c.rows,
                   c.dim, base, c.layout, out, stats);
      },
      Describe(c));
}

class SinusoidalTest : public ::testing::TestWithParam<int64_t> {
 protected:
  TargetScope target_{GetParam()};
};

TEST_P(SinusoidalTest, MatchesReferenceOnEveryShapeAndOption) {
  PositionalContext ctx;
  uint32_t seed = 1;
  for (int64_t rows : {1, 3, 512}) {
    for (int64_t dim : {2, 8, 64, 4096, 4098}) {
      if (rows * dim > 512 * 64 && rows > 3) continue;  // Keep 512 rows to small D.
      std::vector<int64_t> positions(rows);
      for (int64_t r = 0; r < rows; ++r) positions[r] = 7 + r;
      const std::vector<float> x = RandomValues(rows * dim, 1.0f, seed++);
      for (SinusoidalLayout layout :
           {SinusoidalLayout::kInterleaved, SinusoidalLayout::kConcatenated}) {
        for (bool with_input : {false, true}) {
          for (bool in_place : {false, true}) {
            if (in_place && !with_input) continue;
            for (bool misaligned : {false, true}) {
              CheckSinusoidal(ctx, {rows, dim, layout, with_input, in_place, misaligned},
                              10000.0f, positions, x);
            }
          }
        }
      }
    }
  }
}

// 512 rows of width 4096 at once (the row count and width the brief names).
TEST_P(SinusoidalTest, LargeBlock512x4096) {
  PositionalContext ctx;
  std::vector<int64_t> positions(512);
  for (int64_t r = 0; r < 512; ++r) positions[r] = 1000 + 3 * r;
  const std::vector<float> x = RandomValues(512 * 4096, 1.0f, 5);
  CheckSinusoidal(ctx, {512, 4096, SinusoidalLayout::kConcatenated, true, false, true},
                  10000.0f, positions, x);
}

// Positions up to and past the SIMD range (kFastAngleLimit = 2^17 at base >= 1),
// where rows switch to the scalar path, then far beyond (1e6, 1e9, 2^40); bases
// below 1 (angles grow with i), 1 (all angles equal) and large (Llama 3's 5e5).
TEST_P(SinusoidalTest, LargePositionsAndUnusualBases) {
  PositionalContext ctx;
  std::mt19937_64 rng(3);
  std::vector<int64_t> positions = {
      0,      1,      2,      65535,   65536,      100000,          131071,
      131072, 131073, 200000, 1000000, 1000000000, int64_t{1} << 40};
  for (int k = 0; k < 64; ++k) positions.push_back(static_cast<int64_t>(rng() % 140000));
  const int64_t rows = static_cast<int64_t>(positions.size());
  for (float base : {10000.0f, 500000.0f, 1.0f, 0.5f, 2.0f}) {
    for (int64_t dim : {2, 64, 4098}) {
      const std::vector<float> x = RandomValues(rows * dim, 1.0f, 9);
      for (SinusoidalLayout layout :
           {SinusoidalLayout::kInterleaved, SinusoidalLayout::kConcatenated}) {
        CheckSinusoidal(ctx, {rows, dim, layout, false, false, true}, base, positions, x);
        CheckSinusoidal(ctx, {rows, dim, layout, true, false, false}, base, positions, x);
      }
    }
  }
}

// Inputs near 1e4 (pe changes the last bits) and 1e20 (pe vanishes), NaN and Inf
// (propagate, as x + pe in PyTorch).
TEST_P(SinusoidalTest, ExtremeInputsNanAndInf) {
  PositionalContext ctx;
  const int64_t rows = 3;
  for (int64_t dim : {2, 8, 64, 4098}) {
    std::vector<int64_t> positions = {0, 5, 40000};
    for (float scale : {1e4f, 1e20f}) {
      const std::vector<float> x = RandomValues(rows * dim, scale, 11);
      CheckSinusoidal(ctx, {rows, dim, SinusoidalLayout::kInterleaved, true, false, true},
                      10000.0f, positions, x);
    }
    std::vector<float> x = RandomValues(rows * dim, 1.0f, 12);
    x[0] = kNan;
    x[dim - 1] = kInf;
    x[dim + dim / 2] = -kInf;
    x[2 * dim + 1] = kNan;
    for (SinusoidalLayout layout :
         {SinusoidalLayout::kInterleaved, SinusoidalLayout::kConcatenated}) {
      CheckSinusoidal(ctx, {rows, dim, layout, true, false, false}, 10000.0f, positions,
                      x);
      std::vector<float> y(rows * dim);
      Sinusoidal(ctx, x.data(), positions.data(), rows, dim, 10000.0f, layout, y.data());
      EXPECT_TRUE(std::isnan(y[0]));
      EXPECT_EQ(y[dim - 1], kInf);
      EXPECT_EQ(y[dim + dim / 2], -kInf);
      EXPECT_TRUE(std::isnan(y[2 * dim + 1]));
    }
  }
}

// A base so small that base^(-2i/D) overflows float32: the angle is Inf (or
// 0 * Inf = NaN at position 0) and sin/cos are NaN, in both twins, as in PyTorch.
TEST_P(SinusoidalTest, OverflowingFrequenciesGiveNan) {
  PositionalContext ctx;
  const float base = 1e-45f;  // Subnormal: base^(-62/64) is ~1e43, past float32.
  const std::vector<int64_t> positions = {0, 3};
  std::vector<float> fast(2 * 64), ref(2 * 64);
  Sinusoidal(ctx, nullptr, positions.data(), 2, 64, base, SinusoidalLayout::kConcatenated,
             fast.data());
  SinusoidalReference(nullptr, positions.data(), 2, 64, base,
                      SinusoidalLayout::kConcatenated, ref.data());
  EXPECT_TRUE(std::isnan(ref[31])) << ref[31];
  ExpectSinusoidalClose(fast.data(), ref.data(), fast.size(), false, "tiny base");
}

// Adds whose rows fit the context's budget read a cached table of encodings; the
// sum must be the on-the-fly one to the bit: x + pe, with pe as the table output
// (no input) computes it. Positions out of order and repeated; the table cold,
// warm, and grown one row per call as decode steps grow it; in place.
TEST_P(SinusoidalTest, CachedTableAddIsTheOnTheFlySumBitForBit) {
  std::mt19937_64 rng(21);
  for (int64_t dim : {2, 8, 64, 4098}) {
    for (SinusoidalLayout layout :
         {SinusoidalLayout::kInterleaved, SinusoidalLayout::kConcatenated}) {
      SCOPED_TRACE(::testing::Message()
                   << "dim " << dim << " layout " << static_cast<int>(layout));
      PositionalContext ctx;
      std::vector<int64_t> positions(40);
      for (int64_t& p : positions) p = static_cast<int64_t>(rng() % 100);
      positions[3] = positions[7];
      const int64_t rows = static_cast<int64_t>(positions.size());
      const std::vector<float> x = RandomValues(rows * dim, 1.0f, 31);
      std::vector<float> pe(rows * dim), want(rows * dim), y(rows * dim);
      PositionalContext fresh;
      Sinusoidal(fresh, nullptr, positions.data(), rows, dim, 10000.0f, layout,
                 pe.data());
      for (size_t i = 0; i < want.size(); ++i) want[i] = x[i] + pe[i];

      for (const char* when : {"cold", "warm"}) {
        Sinusoidal(ctx, x.data(), positions.data(), rows, dim, 10000.0f, layout,
                   y.data());
        EXPECT_EQ(std::memcmp(y.data(), want.data(), y.size() * sizeof(float)), 0)
            << when;
      }
      EXPECT_GT(ctx.CachedTableBytes(), 0);
      y = x;
      Sinusoidal(ctx, y.data(), positions.data(), rows, dim, 10000.0f, layout, y.data());
      EXPECT_EQ(std::memcmp(y.data(), want.data(), y.size() * sizeof(float)), 0)
          << "in place";

      PositionalContext stepping;
      for (int64_t r = 0; r < rows; ++r) {
        const int64_t position = 100 + r;  // Past the table so far: one new row.
        std::vector<float> row_pe(dim), row_y(dim);
        Sinusoidal(fresh, nullptr, &position, 1, dim, 10000.0f, layout, row_pe.data());
        Sinusoidal(stepping, x.data() + r * dim, &position, 1, dim, 10000.0f, layout,
                   row_y.data());
        for (int64_t i = 0; i < dim; ++i) {
          ASSERT_EQ(row_y[i], x[r * dim + i] + row_pe[i]) << "step " << r << " i " << i;
        }
      }
    }
  }
}

// Tables are bounded: an add needing more than 2 MiB of rows computes on the fly
// and caches nothing; many widths together stay within 8 MiB.
TEST_P(SinusoidalTest, CachedTablesStayWithinTheirBudget) {
  PositionalContext ctx;
  const int64_t dim = 1024;  // 4 KiB per row: 512 rows fill 2 MiB.
  const int64_t over = 512;
  std::vector<float> x(dim), y(dim);
  Sinusoidal(ctx, x.data(), &over, 1, dim, 10000.0f, SinusoidalLayout::kConcatenated,
             y.data());
  EXPECT_EQ(ctx.CachedTableBytes(), 0);
  for (int64_t k = 1; k <= 12; ++k) {
    const int64_t width = 1024 * k;
    const int64_t last = (int64_t{2} << 20) / (width * 4) - 1;  // The last row that fits.
    std::vector<float> xs(width), ys(width);
    Sinusoidal(ctx, xs.data(), &last, 1, width, 10000.0f, SinusoidalLayout::kInterleaved,
               ys.data());
    EXPECT_GT(ctx.CachedTableBytes(), 0) << width;
    EXPECT_LE(ctx.CachedTableBytes(), int64_t{8} << 20) << width;
  }
}

INSTANTIATE_TEST_SUITE_P(Targets, SinusoidalTest, ::testing::ValuesIn(Targets()),
                         TargetParamName);

TEST(SinusoidalDefinitionTest, KnownValues) {
  float inv[3];
  SinusoidalInverseFrequencies(6, 10000.0f, inv);
  EXPECT_EQ(inv[0], 1.0f);
  EXPECT_EQ(inv[1], static_cast<float>(std::pow(10000.0, -2.0 / 6)));
  EXPECT_EQ(inv[2], static_cast<float>(std::pow(10000.0, -4.0 / 6)));

  // Position 0: sin 0 = 0, cos 0 = 1 in both layouts; position 1 at D = 2: sin 1,
  // cos 1.
  const int64_t positions[] = {0, 1};
  float y[8];
  SinusoidalReference(nullptr, positions, 1, 4, 10000.0f, SinusoidalLayout::kInterleaved,
                      y);
  EXPECT_EQ(std::vector<float>(y, y + 4), (std::vector<float>{0, 1, 0, 1}));
  SinusoidalReference(nullptr, positions, 1, 4, 10000.0f, SinusoidalLayout::kConcatenated,
                      y);
  EXPECT_EQ(std::vector<float>(y, y + 4), (std::vector<float>{0, 0, 1, 1}));
  SinusoidalReference(nullptr, positions + 1, 1, 2, 10000.0f,
                      SinusoidalLayout::kInterleaved, y);
  EXPECT_FLOAT_EQ(y[0], std::sin(1.0f));
  EXPECT_FLOAT_EQ(y[1], std::cos(1.0f));
}

TEST(PositionalContextTest, FrequencyCacheIsReusedAndBounded) {
  PositionalContext ctx;
  const int64_t positions[] = {3};
  float y[128];  // Widest row below: 2 + 2 * 39 = 80.
  Sinusoidal(ctx, nullptr, positions, 1, 64, 10000.0f, SinusoidalLayout::kInterleaved, y);
  Sinusoidal(ctx, nullptr, positions, 1, 64, 10000.0f, SinusoidalLayout::kConcatenated,
             y);
  EXPECT_EQ(ctx.CachedFrequencyCount(), 1) << "one entry per (dim, base)";
  for (int k = 0; k < 40; ++k) {
    Sinusoidal(ctx, nullptr, positions, 1, 2 + 2 * k, 10000.0f,
               SinusoidalLayout::kInterleaved, y);
    EXPECT_LE(ctx.CachedFrequencyCount(), 16);
  }
  std::vector<float> ref(64);
  SinusoidalReference(nullptr, positions, 1, 64, 10000.0f, SinusoidalLayout::kInterleaved,
                      ref.data());
  Sinusoidal(ctx, nullptr, positions, 1, 64, 10000.0f, SinusoidalLayout::kInterleaved, y);
  ExpectSinusoidalClose(y, ref.data(), 64, false, "after eviction");
}

// ---------------------------------------------------------------------------
// Learned
// ---------------------------------------------------------------------------

class LearnedTest : public ::testing::TestWithParam<int64_t> {
 protected:
  TargetScope target_{GetParam()};
};

TEST_P(LearnedTest, BitExactOnEveryShape) {
  uint32_t seed = 1;
  for (int64_t rows : {1, 3, 512}) {
    for (int64_t dim : {1, 7, 64, 4096, 4097}) {
      const int64_t table_rows = 600;
      const std::vector<float> table = RandomValues(table_rows * dim, 0.1f, seed++);
      std::vector<float> x = RandomValues(rows * dim, 1.0f, seed++);
      x[0] = kNan;  // Non-finite and extreme inputs pass through the add.
      if (rows * dim > 3) {
        x[1] = kInf;
        x[2] = 1e20f;
        x[3] = -1e4f;
      }
      std::vector<int64_t> positions(rows);
      for (int64_t r = 0; r < rows; ++r) positions[r] = (r * 37 + 5) % table_rows;
      for (bool misaligned : {false, true}) {
        for (bool in_place : {false, true}) {
          const size_t n = static_cast<size_t>(rows * dim);
          Buffer in(n, misaligned), out(n, misaligned);
          std::memcpy(in.data(), x.data(), n * sizeof(float));
          float* y = in_place ? in.data() : out.data();
          Learned(in.data(), positions.data(), rows, dim, table.data(), y);
          std::vector<float> ref(n);
          LearnedReference(x.data(), positions.data(), rows, dim, table.data(),
                           ref.data());
          const std::string what = std::to_string(rows) + "x" + std::to_string(dim) +
                                   (misaligned ? " misaligned" : "") +
                                   (in_place ? " in-place" : "");
          ExpectSameFloats(y, ref.data(), n, what);
          ExpectStatsRunMatches(
              y, n, misaligned,
              [&](float* out, ValueStats* stats) {
                Learned(x.data(), positions.data(), rows, dim, table.data(), out, stats);
              },
              what);
        }
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Targets, LearnedTest, ::testing::ValuesIn(Targets()),
                         TargetParamName);

TEST(LearnedReferenceTest, AddsTheRowOfEachPosition) {
  const float table[] = {10, 20, 30, 40, 50, 60};  // 3 rows of 2.
  const float x[] = {1, 2, 3, 4};
  const int64_t positions[] = {2, 0};
  float y[4];
  LearnedReference(x, positions, 2, 2, table, y);
  EXPECT_EQ(std::vector<float>(y, y + 4), (std::vector<float>{51, 62, 13, 24}));
}

// ---------------------------------------------------------------------------
// ALiBi
// ---------------------------------------------------------------------------

TEST(AlibiSlopesTest, PowersOfTwoAndBloomsInterleavedExtraHeads) {
  float s[16];
  AlibiSlopes(8, s);
  for (int h = 0; h < 8; ++h) EXPECT_EQ(s[h], std::ldexp(1.0f, -(h + 1))) << h;
  AlibiSlopes(1, s);
  EXPECT_EQ(s[0], 1.0f / 256);
  AlibiSlopes(2, s);
  EXPECT_EQ(s[0], 1.0f / 16);
  EXPECT_EQ(s[1], 1.0f / 256);
  // 12 heads: the 8 slopes of 8 heads, then slopes 1, 3, 5, 7 (0-based 0, 2, 4, 6)
  // of 16 heads, 2^(-0.5 k) for k = 1, 3, 5, 7.
  AlibiSlopes(12, s);
  for (int h = 0; h < 8; ++h) EXPECT_EQ(s[h], std::ldexp(1.0f, -(h + 1))) << h;
  for (int k = 0; k < 4; ++k) {
    EXPECT_EQ(s[8 + k], static_cast<float>(std::pow(2.0, -0.5 * (2 * k + 1)))) << k;
  }
  // 16 heads: 2^(-0.5 (h + 1)).
  AlibiSlopes(16, s);
  for (int h = 0; h < 16; ++h) {
    EXPECT_EQ(s[h], static_cast<float>(std::pow(2.0, -0.5 * (h + 1)))) << h;
  }
}

TEST(AlibiReferenceTest, CausalAndSymmetricByHand) {
  const float slopes[] = {0.5f};
  AlibiShape shape;
  shape.query_length = 2;
  shape.key_length = 3;
  shape.query_offset = 1;  // Queries at positions 1 and 2.
  float y[6];
  AlibiReference(slopes, shape, nullptr, 1, y);
  EXPECT_EQ(std::vector<float>(y, y + 6),
            (std::vector<float>{-0.5f, 0, 0.5f, -1, -0.5f, 0}));
  shape.symmetric = true;
  AlibiReference(slopes, shape, nullptr, 1, y);
  EXPECT_EQ(std::vector<float>(y, y + 6),
            (std::vector<float>{-0.5f, 0, -0.5f, -1, -0.5f, 0}));
  const float scores[] = {1, 1, 1, 2, 2, 2};
  AlibiReference(slopes, shape, scores, 1, y);
  EXPECT_EQ(std::vector<float>(y, y + 6),
            (std::vector<float>{0.5f, 1, 0.5f, 1, 1.5f, 2}));
}

struct AlibiCase {
  int64_t batch, heads, tq, tk, offset;
  bool symmetric, with_scores, in_place, misaligned;
};

void CheckAlibi(const AlibiCase& c, uint32_t seed) {
  AlibiShape shape;
  shape.heads = c.heads;
  shape.query_length = c.tq;
  shape.key_length = c.tk;
  shape.query_offset = c.offset;
  shape.symmetric = c.symmetric;
  std::vector<float> slopes(c.heads);
  AlibiSlopes(c.heads, slopes.data());
  const size_t n = static_cast<size_t>(c.batch * c.heads * c.tq * c.tk);
  std::vector<float> scores = RandomValues(n, 3.0f, seed);
  scores[0] = kNan;
  if (n > 2) {
    scores[1] = kInf;
    scores[n - 1] = 1e20f;
    scores[n / 2] = -1e4f;
  }
  Buffer in(n, c.misaligned), out(n, c.misaligned);
  std::memcpy(in.data(), scores.data(), n * sizeof(float));
  float* y = c.in_place ? in.data() : out.data();
  Alibi(slopes.data(), shape, c.with_scores ? in.data() : nullptr, c.batch, y);
  std::vector<float> ref(n);
  AlibiReference(slopes.data(), shape, c.with_scores ? scores.data() : nullptr, c.batch,
                 ref.data());
  const std::string what =
      "alibi B" + std::to_string(c.batch) + " H" + std::to_string(c.heads) + " " +
      std::to_string(c.tq) + "x" + std::to_string(c.tk) + " offset " +
      std::to_string(c.offset) + (c.symmetric ? " symmetric" : "") +
      (c.with_scores ? " +scores" : "") + (c.in_place ? " in-place" : "") +
      (c.misaligned ? " misaligned" : "");
  ExpectSameFloats(y, ref.data(), n, what);
  ExpectStatsRunMatches(
      y, n, c.misaligned,
      [&](float* out, ValueStats* stats) {
        Alibi(slopes.data(), shape, c.with_scores ? scores.data() : nullptr, c.batch, out,
              stats);
      },
      what);
}

class AlibiTest : public ::testing::TestWithParam<int64_t> {
 protected:
  TargetScope target_{GetParam()};
};

TEST_P(AlibiTest, BitExactOnEveryShape) {
  uint32_t seed = 1;
  for (int64_t tq : {1, 3, 512}) {
    for (int64_t tk : {1, 7, 64, 4096, 4097}) {
      const bool big = tq * tk > 100000;  // One head, one batch row: time.
      const int64_t heads = big ? 1 : 3;
      for (bool symmetric : {false, true}) {
        for (bool with_scores : {false, true}) {
          for (bool misaligned : {false, true}) {
            if (big && !misaligned) continue;
            const int64_t batch = with_scores && !big ? 2 : 1;
            CheckAlibi({batch, heads, tq, tk, tk > tq ? tk - tq : 0, symmetric,
                        with_scores, false, misaligned},
                       seed++);
          }
        }
        CheckAlibi({1, heads, tq, tk, 0, symmetric, true, true, true}, seed++);
      }
    }
  }
}

// Query positions around 2^24, where float32 stops holding every integer: the fast
// path computes distances in float32 only below it and must agree on both sides.
TEST_P(AlibiTest, HugeQueryOffsets) {
  const int64_t kTwo24 = int64_t{1} << 24;
  for (int64_t offset : {kTwo24 - 2, kTwo24 + 1, int64_t{1} << 40}) {
    for (bool symmetric : {false, true}) {
      CheckAlibi({1, 5, 4, 37, offset, symmetric, true, false, true}, 7);
      CheckAlibi({1, 5, 4, 37, offset, symmetric, false, false, false}, 8);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Targets, AlibiTest, ::testing::ValuesIn(Targets()),
                         TargetParamName);

// ---------------------------------------------------------------------------
// T5
// ---------------------------------------------------------------------------

// Small cases worked by hand from Hugging Face's formula.
TEST(T5BucketTest, ExactAndLogBucketsBothDirections) {
  // Bidirectional, 32 buckets: 16 per side; exact below 8, log up to 128.
  EXPECT_EQ(T5RelativePositionBucket(0, true, 32, 128), 0);
  EXPECT_EQ(T5RelativePositionBucket(-1, true, 32, 128), 1);
  EXPECT_EQ(T5RelativePositionBucket(-7, true, 32, 128), 7);
  EXPECT_EQ(T5RelativePositionBucket(1, true, 32, 128), 17);
  EXPECT_EQ(T5RelativePositionBucket(7, true, 32, 128), 23);
  // 8 + trunc(log(d/8) / log(16) * 8): d = 16 -> 10, d = 32 -> 12, d = 64 -> 14.
  EXPECT_EQ(T5RelativePositionBucket(-16, true, 32, 128), 10);
  EXPECT_EQ(T5RelativePositionBucket(-32, true, 32, 128), 12);
  EXPECT_EQ(T5RelativePositionBucket(-64, true, 32, 128), 14);
  EXPECT_EQ(T5RelativePositionBucket(64, true, 32, 128), 30);
  // Saturation at max_distance and far beyond.
  EXPECT_EQ(T5RelativePositionBucket(-128, true, 32, 128), 15);
  EXPECT_EQ(T5RelativePositionBucket(-1000000, true, 32, 128), 15);
  EXPECT_EQ(T5RelativePositionBucket(int64_t{1} << 61, true, 32, 128), 31);
  // Causal: future keys all share bucket 0; 16 exact past buckets, then log.
  EXPECT_EQ(T5RelativePositionBucket(5, false, 32, 128), 0);
  EXPECT_EQ(T5RelativePositionBucket(-15, false, 32, 128), 15);
  EXPECT_EQ(T5RelativePositionBucket(-16, false, 32, 128), 16);
  // 16 + trunc(log(32/16) / log(128/16) * 16) = 16 + trunc(5.33).
  EXPECT_EQ(T5RelativePositionBucket(-32, false, 32, 128), 21);
  EXPECT_EQ(T5RelativePositionBucket(-5000, false, 32, 128), 31);
  // The smallest tables allowed: 2 causal buckets, 4 bidirectional.
  EXPECT_EQ(T5RelativePositionBucket(0, false, 2, 2), 0);
  EXPECT_EQ(T5RelativePositionBucket(-1, false, 2, 2), 1);
  EXPECT_EQ(T5RelativePositionBucket(-9, false, 2, 2), 1);
  EXPECT_EQ(T5RelativePositionBucket(3, true, 4, 2), 3);
  EXPECT_EQ(T5RelativePositionBucket(-3, true, 4, 2), 1);
}

TEST(T5BucketTest, MonotoneAndInRange) {
  for (bool bidirectional : {false, true}) {
    for (int64_t buckets : {4, 5, 8, 32, 64}) {
      for (int64_t max_distance : {buckets, int64_t{128}, int64_t{1000}}) {
        int64_t previous = -1;
        for (int64_t d = 0; d < 3000; ++d) {  // Distance into the past.
          const int64_t b =
              T5RelativePositionBucket(-d, bidirectional, buckets, max_distance);
          ASSERT_GE(b, 0);
          ASSERT_LT(b, bidirectional ? buckets / 2 : buckets);
          ASSERT_GE(b, previous) << "d " << d;
          previous = b;
        }
      }
    }
  }
}

class T5BiasTargetTest : public ::testing::TestWithParam<int64_t> {
 protected:
  TargetScope target_{GetParam()};
};

TEST_P(T5BiasTargetTest, FastMatchesReferenceBitExact) {
  PositionalContext ctx;
  uint32_t seed = 1;
  for (bool bidirectional : {true, false}) {
    for (int64_t tq : {1, 3, 512}) {
      for (int64_t tk : {1, 7, 64, 4096, 4097}) {
        T5BiasShape shape;
        shape.bidirectional = bidirectional;
        shape.num_buckets = 32;
        shape.heads = tq * tk > 100000 ? 2 : 5;
        shape.max_distance = 128;
        shape.query_length = tq;
        shape.key_length = tk;
        shape.query_offset = tk > tq ? tk - tq : 0;
        const std::vector<float> table =
            RandomValues(shape.num_buckets * shape.heads, 1.0f, seed++);
        const size_t n = static_cast<size_t>(shape.heads * tq * tk);
        Buffer fast(n, /*misaligned=*/true);
        std::vector<float> ref(n);
        T5Bias(ctx, table.data(), shape, fast.data());
        T5BiasReference(table.data(), shape, ref.data());
        const std::string what = "t5 " + std::to_string(tq) + "x" + std::to_string(tk);
        ExpectSameFloats(fast.data(), ref.data(), n, what);
        ExpectStatsRunMatches(
            fast.data(), n, /*misaligned=*/true,
            [&](float* out, ValueStats* stats) {
              T5Bias(ctx, table.data(), shape, out, stats);
            },
            what);
      }
    }
  }
  // Unusual parameters: odd bucket counts, short max_distance, huge offsets.
  for (int64_t offset : {int64_t{0}, int64_t{100}, int64_t{1} << 40}) {
    T5BiasShape shape;
    shape.num_buckets = 5;
    shape.heads = 3;
    shape.max_distance = 3;
    shape.query_length = 9;
    shape.key_length = 20;
    shape.query_offset = offset;
    const std::vector<float> table = RandomValues(15, 1.0f, 77);
    std::vector<float> fast(3 * 9 * 20), ref(3 * 9 * 20);
    T5Bias(ctx, table.data(), shape, fast.data());
    T5BiasReference(table.data(), shape, ref.data());
    ExpectSameFloats(fast.data(), ref.data(), fast.size(), "t5 odd");
  }
}

INSTANTIATE_TEST_SUITE_P(Targets, T5BiasTargetTest, ::testing::ValuesIn(Targets()),
                         TargetParamName);

TEST(T5BiasTest, LooksUpTheBucketRowPerHead) {
  // Causal, 2 buckets (bucket 0: the same or a later key, 1: an earlier key),
  // 2 heads: table rows {bucket 0: [10, 20], bucket 1: [30, 40]}.
  const float table[] = {10, 20, 30, 40};
  T5BiasShape shape;
  shape.num_buckets = 2;
  shape.heads = 2;
  shape.bidirectional = false;
  shape.max_distance = 2;
  shape.query_length = 2;
  shape.key_length = 2;
  float y[8];
  T5BiasReference(table, shape, y);
  EXPECT_EQ(std::vector<float>(y, y + 8),
            (std::vector<float>{10, 10, 30, 10, 20, 20, 40, 20}));
}

}  // namespace
}  // namespace layerserve::kernels
