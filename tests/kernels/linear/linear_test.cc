// Linear (oneDNN matmul, prepacked weights) and LinearFewRows (its decode-step twin
// reading the packed weights itself) against the double-precision reference, for
// both weight storages, with and without bias, float32 and bfloat16 weights.
#include "kernels/linear/linear.h"

#include <omp.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <utility>
#include <vector>

#include "common/dtype.h"
#include "gtest/gtest.h"
#include "hwy/targets.h"
#include "kernels/linear/kernel_choice.h"
#include "kernels/linear/linear_internal.h"
#include "tests/testing/highway_target_scope.h"
#include "tests/testing/threads_parallel_for.h"

namespace layerserve::kernels {
namespace {

struct Shape {
  int64_t rows, in, out;
};

std::vector<float> Random(int64_t n, std::mt19937& rng) {
  std::normal_distribution<float> dist;
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

float RoundBf16(float x) { return Bfloat16ToFloat32(Float32ToBfloat16(x)); }

// Error bound of a float32 dot product of length n computed in any order:
// n * eps * sum |x_i w_i| (Higham), plus the rounding of the result. bfloat16 weights
// and inputs each carry a relative error up to 2^-9 before that.
using Product = void (*)(LinearContext&, const LinearWeights&, const float*, int64_t,
                         float*);

void LinearAlone(LinearContext& c, const LinearWeights& w, const float* x, int64_t rows,
                 float* y) {
  Linear(c, w, x, rows, y);
}

void CheckAgainstReference(const Shape& s, WeightType type, bool in_by_out, bool bias,
                           Product product = LinearAlone) {
  std::mt19937 rng(s.rows * 131 + s.in * 7 + s.out);
  const std::vector<float> w = Random(s.out * s.in, rng);  // [out, in]
  const std::vector<float> b = Random(s.out, rng);
  const std::vector<float> x = Random(s.rows * s.in, rng);
  std::vector<float> storage = w;
  if (in_by_out) {  // Conv1D stores [in, out].
    for (int64_t o = 0; o < s.out; ++o)
      for (int64_t i = 0; i < s.in; ++i) storage[i * s.out + o] = w[o * s.in + i];
  }
  LinearWeights weights(storage.data(), s.out, s.in, in_by_out, bias ? b.data() : nullptr,
                        type);
  LinearContext context;
  std::vector<float> y(s.rows * s.out), want(s.rows * s.out);
  product(context, weights, x.data(), s.rows, y.data());
  LinearReference(w.data(), bias ? b.data() : nullptr, s.out, s.in, x.data(), s.rows,
                  want.data());
  const double eps = type == WeightType::kFloat32 ? 0x1p-24 : 0x1p-8;
  for (int64_t r = 0; r < s.rows; ++r) {
    for (int64_t o = 0; o < s.out; ++o) {
      double magnitude = bias ? std::fabs(b[o]) : 0;
      for (int64_t i = 0; i < s.in; ++i)
        magnitude += std::fabs(x[r * s.in + i] * w[o * s.in + i]);
      const double bound = (s.in + 2) * 0x1p-24 * magnitude + 2 * eps * magnitude + 1e-30;
      ASSERT_LE(std::fabs(y[r * s.out + o] - want[r * s.out + o]), bound)
          << "rows " << s.rows << " in " << s.in << " out " << s.out << " at " << r << ","
          << o;
    }
  }
}

class LinearTest : public ::testing::TestWithParam<Shape> {
 protected:
  void SetUp() override { omp_set_num_threads(1); }
};

TEST_P(LinearTest, Float32MatchesReference) {
  for (bool in_by_out : {false, true})
    for (bool bias : {false, true})
      CheckAgainstReference(GetParam(), WeightType::kFloat32, in_by_out, bias);
}

TEST_P(LinearTest, Bfloat16MatchesReference) {
  for (bool in_by_out : {false, true})
    for (bool bias : {false, true})
      CheckAgainstReference(GetParam(), WeightType::kBfloat16, in_by_out, bias);
}

TEST_P(LinearTest, FewRowsMatchReference) {
  for (WeightType type : {WeightType::kFloat32, WeightType::kBfloat16})
    for (bool in_by_out : {false, true})
      for (bool bias : {false, true})
        CheckAgainstReference(
            GetParam(), type, in_by_out, bias,
            [](LinearContext& c, const LinearWeights& w, const float* x, int64_t rows,
               float* y) { LinearFewRows(c, w, x, rows, y); });
}

INSTANTIATE_TEST_SUITE_P(Shapes, LinearTest,
                         ::testing::Values(Shape{1, 1, 1}, Shape{1, 7, 5},
                                           Shape{3, 64, 130}, Shape{17, 65, 33},
                                           Shape{128, 256, 96}, Shape{1, 4097, 7},
                                           Shape{5, 33, 4097}, Shape{4, 768, 64},
                                           // Large enough to run as column chunks.
                                           Shape{9, 700, 4097}, Shape{1, 2048, 1000}));

// Single-threaded oneDNN, as on the server's workers.
class LinearChunksTest : public ::testing::Test {
 protected:
  void SetUp() override { omp_set_num_threads(1); }
};

// A layer large enough to run as several matmuls over column ranges.
TEST_F(LinearChunksTest, LargeLayersSplitIntoColumnRanges) {
  std::mt19937 rng(1);
  const int64_t in = 700, out = 4097;
  const std::vector<float> w = Random(out * in, rng);
  for (WeightType type : {WeightType::kFloat32, WeightType::kBfloat16}) {
    LinearWeights large(w.data(), out, in, false, nullptr, type);
    // On AVX-512 machines (the target) oneDNN's layouts can be viewed by columns;
    // elsewhere a layer may stay whole, which the other tests hold to the same
    // promises.
    RecordProperty(type == WeightType::kFloat32 ? "float32_chunks" : "bfloat16_chunks",
                   static_cast<int>(large.chunks()));
    EXPECT_LE(large.chunks(), 8);
    LinearWeights small(w.data(), 64, 64, false, nullptr, type);
    EXPECT_EQ(small.chunks(), 1);
  }
}

// Threads sharing a call's column ranges compute each exactly as one thread does,
// and each row still depends on that row only.
TEST_F(LinearChunksTest, SplitAcrossThreadsIsBitIdenticalAndRowsIndependent) {
  std::mt19937 rng(12);
  testing::ThreadsParallelFor threads(3);
  for (WeightType type : {WeightType::kFloat32, WeightType::kBfloat16}) {
    // in = 1024: AMX tiles for bfloat16 where the CPU has them (AmxRunsLinear).
    for (auto [in, out] :
         {std::pair<int64_t, int64_t>{1100, 1000}, {1100, 4097}, {1024, 4097}}) {
      const std::vector<float> w = Random(out * in, rng), b = Random(out, rng);
      LinearWeights weights(w.data(), out, in, false, b.data(), type);
      LinearContext context;
      const std::vector<float> x = Random(130 * in, rng);
      std::vector<float> alone(out);
      for (int64_t rows : {1, 7, 130}) {
        std::vector<float> serial(rows * out), split(rows * out, -1.0f);
        Linear(context, weights, x.data(), rows, serial.data());
        Linear(context, weights, x.data(), rows, split.data(), &threads);
        for (int64_t i = 0; i < rows * out; ++i) {
          ASSERT_EQ(split[i], serial[i])
              << "in " << in << " out " << out << " rows " << rows << " at " << i;
        }
        for (int64_t r : {int64_t{0}, rows - 1}) {
          Linear(context, weights, x.data() + r * in, 1, alone.data(), &threads);
          for (int64_t o = 0; o < out; ++o) {
            ASSERT_EQ(split[r * out + o], alone[o]) << "rows " << rows << " row " << r;
          }
        }
      }
    }
  }
}

// NaN and Inf in one row of a chunked layer reach that row's outputs only, in every
// column range.
TEST_F(LinearChunksTest, NanAndInfStayInTheirRow) {
  std::mt19937 rng(13);
  const int64_t in = 1024, out = 2112;
  const std::vector<float> w = Random(out * in, rng);
  LinearWeights weights(w.data(), out, in, false, nullptr, WeightType::kBfloat16);
  LinearContext context;
  testing::ThreadsParallelFor threads(2);
  std::vector<float> x = Random(3 * in, rng);
  x[1 * in + 3] = std::numeric_limits<float>::quiet_NaN();
  x[2 * in + 1000] = std::numeric_limits<float>::infinity();
  std::vector<float> y(3 * out);
  Linear(context, weights, x.data(), 3, y.data(), &threads);
  for (int64_t o = 0; o < out; ++o) {
    ASSERT_TRUE(std::isfinite(y[o])) << o;
    ASSERT_TRUE(std::isnan(y[out + o])) << o;
    ASSERT_FALSE(std::isfinite(y[2 * out + o])) << o;
  }
}

// bfloat16 weights hold exactly the bfloat16-rounded values: with bfloat16-exact
// inputs the only error left is the float32 accumulation.
TEST(LinearBfloat16Test, ExactInputsLeaveOnlyAccumulationError) {
  std::mt19937 rng(5);
  const int64_t rows = 4, in = 48, out = 24;
  std::vector<float> w = Random(out * in, rng), x = Random(rows * in, rng);
  for (float& v : w) v = RoundBf16(v);
  for (float& v : x) v = RoundBf16(v);
  LinearWeights weights(w.data(), out, in, false, nullptr, WeightType::kBfloat16);
  LinearContext context;
  std::vector<float> y(rows * out), want(rows * out);
  Linear(context, weights, x.data(), rows, y.data());
  LinearReference(w.data(), nullptr, out, in, x.data(), rows, want.data());
  for (int64_t i = 0; i < rows * out; ++i) EXPECT_NEAR(y[i], want[i], 1e-4f) << i;
}

// One context serves many weights and row counts; results do not depend on which
// primitives were created before.
TEST(LinearContextTest, ReusesPrimitivesAcrossShapes) {
  std::mt19937 rng(9);
  std::vector<float> w1 = Random(8 * 16, rng), w2 = Random(4 * 16, rng);
  LinearWeights a(w1.data(), 8, 16, false, nullptr, WeightType::kFloat32);
  LinearWeights b(w2.data(), 4, 16, false, nullptr, WeightType::kFloat32);
  LinearContext context;
  for (int64_t rows : {1, 5, 1, 9, 5}) {
    std::vector<float> x = Random(rows * 16, rng), y(rows * 8), z(rows * 4),
                       ref(rows * 8);
    Linear(context, a, x.data(), rows, y.data());
    Linear(context, b, x.data(), rows, z.data());
    LinearReference(w1.data(), nullptr, 8, 16, x.data(), rows, ref.data());
    for (int64_t i = 0; i < rows * 8; ++i) EXPECT_NEAR(y[i], ref[i], 1e-4f);
  }
}

// The batcher runs the linear layers of several requests as one product and
// promises each request the bits it would get alone, so a row of y must not depend
// on the other rows of x or on how many there are.
class LinearRowIndependenceTest : public ::testing::TestWithParam<WeightType> {};

TEST_P(LinearRowIndependenceTest, EachRowIsBitIdenticalAtEveryBatchSize) {
  std::mt19937 rng(20261130);
  const int64_t in = 512, out = 1408;
  const std::vector<float> w = Random(out * in, rng), b = Random(out, rng);
  LinearWeights weights(w.data(), out, in, false, b.data(), GetParam());
  LinearContext context;
  const std::vector<float> x = Random(300 * in, rng);
  std::vector<float> alone(out);
  for (int64_t rows : {1, 2, 3, 7, 16, 33, 64, 129, 300}) {
    std::vector<float> y(rows * out);
    Linear(context, weights, x.data(), rows, y.data());
    for (int64_t r : {int64_t{0}, rows / 2, rows - 1}) {
      Linear(context, weights, x.data() + r * in, 1, alone.data());
      for (int64_t o = 0; o < out; ++o) {
        ASSERT_EQ(y[r * out + o], alone[o])
            << "rows " << rows << " row " << r << " out " << o;
      }
    }
  }
}

TEST_P(LinearRowIndependenceTest, FewRowsEachRowIsBitIdenticalAtEveryRowCount) {
  std::mt19937 rng(20261201);
  const int64_t in = 512, out = 1408;
  const std::vector<float> w = Random(out * in, rng), b = Random(out, rng);
  LinearWeights weights(w.data(), out, in, false, b.data(), GetParam());
  // On AVX-512 machines (the target) oneDNN packs in a layout LinearFewRows reads;
  // elsewhere it falls back to Linear, which this test holds to the same promise.
  RecordProperty("few_rows_native", weights.few_rows_native() ? "yes" : "no");
  LinearContext context;
  const std::vector<float> x = Random(40 * in, rng);
  std::vector<float> alone(out);
  for (int64_t rows : {1, 2, 3, 4, 5, 8, 13, 16, 17, 33, 40}) {
    std::vector<float> y(rows * out);
    LinearFewRows(context, weights, x.data(), rows, y.data());
    for (int64_t r = 0; r < rows; ++r) {
      LinearFewRows(context, weights, x.data() + r * in, 1, alone.data());
      for (int64_t o = 0; o < out; ++o) {
        ASSERT_EQ(y[r * out + o], alone[o])
            << "rows " << rows << " row " << r << " out " << o;
      }
    }
  }
}

// Threads sharing a call's outputs compute each exactly as one thread does, at sizes
// with a partial last block and with fewer blocks than chunks.
TEST_P(LinearRowIndependenceTest, FewRowsSplitAcrossThreadsIsBitIdentical) {
  std::mt19937 rng(11);
  testing::ThreadsParallelFor threads(3);
  for (int64_t out : {1, 7, 130, 1408, 4097}) {
    const int64_t in = 96;
    const std::vector<float> w = Random(out * in, rng), b = Random(out, rng);
    LinearWeights weights(w.data(), out, in, false, b.data(), GetParam());
    LinearContext context;
    for (int64_t rows : {1, 4, 7, 16, 17}) {
      const std::vector<float> x = Random(rows * in, rng);
      std::vector<float> serial(rows * out), split(rows * out, -1.0f);
      LinearFewRows(context, weights, x.data(), rows, serial.data());
      LinearFewRows(context, weights, x.data(), rows, split.data(), &threads);
      for (int64_t i = 0; i < rows * out; ++i) {
        ASSERT_EQ(split[i], serial[i])
            << "out " << out << " rows " << rows << " at " << i;
      }
    }
  }
}

// NaN and Inf in an input row spread over that row's outputs only, as in the
// reference (0 * Inf is NaN there too). 96 inputs: with bfloat16 weights, the AMX
// kernel where the CPU has it (70: VDPBF16PS).
TEST_P(LinearRowIndependenceTest, FewRowsNanAndInfStayInTheirRow) {
  for (int64_t in : {70, 96}) {
    std::mt19937 rng(3);
    const int64_t out = 130;
    const std::vector<float> w = Random(out * in, rng);
    LinearWeights weights(w.data(), out, in, false, nullptr, GetParam());
    LinearContext context;
    std::vector<float> x = Random(3 * in, rng);
    x[0 * in + 5] = std::numeric_limits<float>::quiet_NaN();
    x[2 * in + 69] = std::numeric_limits<float>::infinity();
    std::vector<float> y(3 * out), want(3 * out);
    LinearFewRows(context, weights, x.data(), 3, y.data());
    std::vector<float> rounded = x;
    std::vector<float> rounded_w = w;
    if (GetParam() == WeightType::kBfloat16) {
      for (float& v : rounded) v = RoundBf16(v);
      for (float& v : rounded_w) v = RoundBf16(v);
    }
    LinearReference(rounded_w.data(), nullptr, out, in, rounded.data(), 3, want.data());
    for (int64_t o = 0; o < out; ++o) {
      ASSERT_TRUE(std::isnan(y[o])) << in << " " << o;
      ASSERT_TRUE(std::isfinite(y[out + o])) << in << " " << o;
      ASSERT_NEAR(y[out + o], want[out + o],
                  1e-3f * std::max(1.0f, std::fabs(want[out + o])));
      ASSERT_EQ(std::isnan(y[2 * out + o]), std::isnan(want[2 * out + o]))
          << in << " " << o;
      if (!std::isnan(want[2 * out + o])) {
        ASSERT_EQ(y[2 * out + o], want[2 * out + o]) << in << " " << o;
      }
    }
  }
}

// With bfloat16 weights LinearFewRows runs one of three kernels: AMX tiles where
// the CPU and OS allow them and the input size is a multiple of 32, VDPBF16PS where
// the CPU has AVX512_BF16 (even input sizes), the Highway loop elsewhere. Each is
// held to the reference here directly (whichever LinearFewRows picks on this CPU),
// in its own tests so a CPU without one reports its tests as skipped.
// kAmxManyRows is Linear's AMX kernel (AmxRunsLinear), held to the same promises
// and, bit for bit, to kAmx.
enum class FewRowsKernel { kHighway, kVdpbf16ps, kAmx, kAmxManyRows };

// Why this CPU cannot run `kernel` on `few` (the test skips), or null.
const char* CannotRun(FewRowsKernel kernel, const internal::FewRowsWeights& few) {
  if (few.data == nullptr) {
    return "oneDNN did not pack these bfloat16 weights in the few-rows layout on this "
           "CPU (it does with AVX-512): LinearFewRows falls back to Linear, tested "
           "above";
  }
  if (kernel == FewRowsKernel::kHighway) return nullptr;
  if (!internal::FewRowsDpbf16Supported()) {
    return "this CPU has no AVX512_BF16: LinearFewRows never runs VDPBF16PS or AMX";
  }
  if ((kernel == FewRowsKernel::kAmx || kernel == FewRowsKernel::kAmxManyRows) &&
      !internal::FewRowsAmxSupported()) {
    return "this CPU (or OS) has no AMX-BF16: LinearFewRows never runs AMX";
  }
  return nullptr;
}

// y = x W^T + b by one kernel over all blocks of `few`; x float32 [rows, in].
void RunKernel(FewRowsKernel kernel, const internal::FewRowsWeights& few, const float* x,
               int64_t rows, float* y) {
  const int64_t blocks =
      (few.out + internal::kFewRowsBlockOut - 1) / internal::kFewRowsBlockOut;
  if (kernel == FewRowsKernel::kHighway) {
    std::vector<float> rounded(x, x + rows * few.in);
    for (float& v : rounded) v = RoundBf16(v);
    return internal::LinearFewRowsBlocks(few, rounded.data(), rows, 0, blocks, y);
  }
  std::vector<uint32_t> pairs;
  internal::PackBfloat16Pairs(x, rows, few.in, pairs);
  if (kernel == FewRowsKernel::kAmx) {
    return internal::LinearFewRowsAmxBlocks(few, pairs.data(), rows, 0, blocks, y);
  }
  if (kernel == FewRowsKernel::kAmxManyRows) {
    std::vector<uint32_t> tiles;
    internal::PackAmxRowTiles(x, rows, few.in, tiles);
    return internal::LinearManyRowsAmxBlocks(few, tiles.data(), rows, 0, blocks, y,
                                             few.out);
  }
  internal::LinearFewRowsVdpbf16psBlocks(few, pairs.data(), rows, 0, blocks, y);
}

// Odd sizes: rows across the 4-row (Highway), 6-row (VDPBF16PS) and 16-row (AMX)
// tiles, outputs not a multiple of the 64-output block nor of a 16-output vector,
// one output, inputs a multiple of 32 (the AMX kernel needs it) but not of 64, and,
// for the others, not a multiple of 32 and the fewest they take (2: VDPBF16PS
// multiplies k pairs). From 5 rows on, rows 2, 3 and 4 hold a NaN, an Inf and a
// -Inf: their outputs are the reference's non-finite values. The Highway kernel runs
// on every instruction set this CPU has, not only the one dispatch picks.
void CheckBfloat16FewRowsKernel(FewRowsKernel kernel) {
  std::mt19937 rng(77);
  struct Size {
    int64_t in, out;
  };
  std::vector<Size> sizes = {{768, 200}, {96, 7}, {4096, 130}};
  if (kernel == FewRowsKernel::kHighway || kernel == FewRowsKernel::kVdpbf16ps) {
    // 2118 = 2 x 1024 + 70: the VDPBF16PS kernel's k chunks for more than 6 rows
    // (1024 inputs), the last one short, ending inside a k block.
    sizes.insert(sizes.end(), {{70, 65}, {2, 1}, {2, 4097}, {2118, 65}});
  }
  std::vector<int64_t> targets = {0};  // 0: as dispatched.
  if (kernel == FewRowsKernel::kHighway) targets = hwy::SupportedAndGeneratedTargets();
  for (const Size& size : sizes) {
    const int64_t in = size.in, out = size.out;
    const std::vector<float> w = Random(out * in, rng), b = Random(out, rng);
    LinearWeights weights(w.data(), out, in, false, b.data(), WeightType::kBfloat16);
    const internal::FewRowsWeights& few = internal::FewRowsLayoutOf(weights);
    ASSERT_EQ(few.data != nullptr, weights.few_rows_native());
    if (const char* why = CannotRun(kernel, few)) GTEST_SKIP() << why;
    std::vector<float> rounded_w = w;
    for (float& v : rounded_w) v = RoundBf16(v);
    for (int64_t rows : {1, 2, 4, 5, 7, 8, 13, 16, 17, 32, 33, 64}) {
      std::vector<float> x = Random(rows * in, rng);
      if (rows >= 5) {
        x[2 * in + in / 2] = std::numeric_limits<float>::quiet_NaN();
        x[3 * in + in - 1] = std::numeric_limits<float>::infinity();
        x[4 * in] = -std::numeric_limits<float>::infinity();
      }
      std::vector<float> rounded = x;
      for (float& v : rounded) v = RoundBf16(v);
      std::vector<float> want(rows * out), got(rows * out);
      LinearReference(rounded_w.data(), b.data(), out, in, rounded.data(), rows,
                      want.data());
      for (int64_t target : targets) {
        testing::TargetScope scope(target);
        const char* isa = target == 0 ? "dispatched" : hwy::TargetName(target);
        RunKernel(kernel, few, x.data(), rows, got.data());
        for (int64_t i = 0; i < rows * out; ++i) {
          if (!std::isfinite(want[i])) {  // Inf, or NaN (NaN, or Inf times 0).
            ASSERT_EQ(std::isnan(got[i]), std::isnan(want[i])) << isa << " at " << i;
            if (!std::isnan(want[i])) {
              ASSERT_EQ(got[i], want[i]) << isa << " at " << i;
            }
            continue;
          }
          // Products of bfloat16 values are exact in float32: only the sums round.
          double magnitude = std::fabs(b[i % out]);
          for (int64_t k = 0; k < in; ++k) {
            magnitude +=
                std::fabs(rounded[(i / out) * in + k] * rounded_w[(i % out) * in + k]);
          }
          const double bound = (in + 2) * 0x1p-24 * magnitude;
          ASSERT_LE(std::fabs(got[i] - want[i]), bound)
              << isa << " in " << in << " out " << out << " rows " << rows << " at " << i;
        }
      }
    }
  }
}

// Each kernel on its own keeps the batcher's promise (LinearFewRows' tests above
// see only the kernel this CPU picks): a row's bits do not depend on the rows
// beside it, in its AMX tile or in another one, nor on how many there are (with more
// than 6 rows the VDPBF16PS kernel sizes its row tiles by the count, and 2112 inputs
// are three of its k chunks); NaN and Inf stay in their row.
void CheckBfloat16FewRowsKernelRows(FewRowsKernel kernel, int64_t in) {
  std::mt19937 rng(20261201);
  const int64_t out = 200;
  const std::vector<float> w = Random(out * in, rng), b = Random(out, rng);
  LinearWeights weights(w.data(), out, in, false, b.data(), WeightType::kBfloat16);
  const internal::FewRowsWeights& few = internal::FewRowsLayoutOf(weights);
  if (const char* why = CannotRun(kernel, few)) GTEST_SKIP() << why;
  std::vector<float> x = Random(40 * in, rng);
  x[3 * in + 5] = std::numeric_limits<float>::quiet_NaN();
  x[15 * in + 95] = std::numeric_limits<float>::infinity();
  x[16 * in + 0] = -std::numeric_limits<float>::infinity();
  x[33 * in + 40] = std::numeric_limits<float>::quiet_NaN();
  std::vector<float> alone(40 * out);
  for (int64_t r = 0; r < 40; ++r) {
    RunKernel(kernel, few, x.data() + r * in, 1, alone.data() + r * out);
  }
  for (int64_t r : {0, 1, 2, 4, 14, 17, 32, 39}) {  // Finite rows stay finite.
    for (int64_t o = 0; o < out; ++o) {
      ASSERT_TRUE(std::isfinite(alone[r * out + o])) << "row " << r << " out " << o;
    }
  }
  for (int64_t o = 0; o < out; ++o) {
    ASSERT_TRUE(std::isnan(alone[3 * out + o])) << o;
    ASSERT_TRUE(std::isnan(alone[33 * out + o])) << o;
  }
  for (int64_t rows : {1, 2, 7, 15, 16, 17, 31, 32, 33, 40}) {
    std::vector<float> y(rows * out);
    RunKernel(kernel, few, x.data(), rows, y.data());
    for (int64_t i = 0; i < rows * out; ++i) {
      // Same bits, NaN included (std::memcmp: NaN != NaN).
      ASSERT_EQ(std::memcmp(&y[i], &alone[i], sizeof(float)), 0)
          << "rows " << rows << " row " << i / out << " out " << i % out << ": " << y[i]
          << " alone " << alone[i];
    }
  }
}

void CheckBfloat16FewRowsKernelRows(FewRowsKernel kernel) {
  for (int64_t in : {96, 2112}) {
    CheckBfloat16FewRowsKernelRows(kernel, in);
    if (::testing::Test::HasFatalFailure() || ::testing::Test::IsSkipped()) return;
  }
}

TEST(LinearFewRowsTest, Bfloat16HighwayKernelMatchesReference) {
  CheckBfloat16FewRowsKernel(FewRowsKernel::kHighway);
}

TEST(LinearFewRowsTest, Bfloat16Vdpbf16psKernelMatchesReference) {
  CheckBfloat16FewRowsKernel(FewRowsKernel::kVdpbf16ps);
}

TEST(LinearFewRowsTest, Bfloat16AmxKernelMatchesReference) {
  CheckBfloat16FewRowsKernel(FewRowsKernel::kAmx);
}

TEST(LinearFewRowsTest, Bfloat16AmxManyRowsKernelMatchesReference) {
  CheckBfloat16FewRowsKernel(FewRowsKernel::kAmxManyRows);
}

TEST(LinearFewRowsTest, Bfloat16HighwayKernelRowsAreIndependent) {
  CheckBfloat16FewRowsKernelRows(FewRowsKernel::kHighway);
}

TEST(LinearFewRowsTest, Bfloat16Vdpbf16psKernelRowsAreIndependent) {
  CheckBfloat16FewRowsKernelRows(FewRowsKernel::kVdpbf16ps);
}

TEST(LinearFewRowsTest, Bfloat16AmxKernelRowsAreIndependent) {
  CheckBfloat16FewRowsKernelRows(FewRowsKernel::kAmx);
}

TEST(LinearFewRowsTest, Bfloat16AmxManyRowsKernelRowsAreIndependent) {
  CheckBfloat16FewRowsKernelRows(FewRowsKernel::kAmxManyRows);
}

// Linear's AMX kernel gives every row the few-rows AMX kernel's bits, NaN and Inf
// included, at odd sizes: outputs past a 64-output block, a last group of rows
// alone, rows in two groups and more, inputs in one k chunk and in three, the last
// one short (8288 = 2 x 4096 + 96).
TEST(LinearFewRowsTest, Bfloat16AmxManyRowsKernelHasTheFewRowsKernelsBits) {
  std::mt19937 rng(21);
  for (auto [in, out] : {std::pair<int64_t, int64_t>{32, 1},
                         {96, 7},
                         {768, 200},
                         {4096, 130},
                         {8288, 70}}) {
    const std::vector<float> w = Random(out * in, rng), b = Random(out, rng);
    LinearWeights weights(w.data(), out, in, false, b.data(), WeightType::kBfloat16);
    const internal::FewRowsWeights& few = internal::FewRowsLayoutOf(weights);
    if (const char* why = CannotRun(FewRowsKernel::kAmxManyRows, few)) {
      GTEST_SKIP() << why;
    }
    for (int64_t rows : {1, 7, 16, 17, 32, 33, 48, 65}) {
      std::vector<float> x = Random(rows * in, rng);
      x[(rows - 1) * in] = std::numeric_limits<float>::quiet_NaN();
      if (rows > 2) x[in + in / 2] = -std::numeric_limits<float>::infinity();
      std::vector<float> few_rows(rows * out), many_rows(rows * out);
      RunKernel(FewRowsKernel::kAmx, few, x.data(), rows, few_rows.data());
      RunKernel(FewRowsKernel::kAmxManyRows, few, x.data(), rows, many_rows.data());
      ASSERT_EQ(std::memcmp(few_rows.data(), many_rows.data(), rows * out * 4), 0)
          << "in " << in << " out " << out << " rows " << rows;
    }
  }
}

// LinearFewRows picks AMX exactly where linear_internal.h says: the choice depends
// on the CPU and the weights' input size, never on the rows.
TEST(LinearFewRowsTest, Bfloat16PicksAmxWhereSupportedAndInputsFillKBlocks) {
  std::mt19937 rng(5);
  for (int64_t in : {64, 96, 70}) {
    const int64_t out = 100;
    const std::vector<float> w = Random(out * in, rng), b = Random(out, rng);
    LinearWeights weights(w.data(), out, in, false, b.data(), WeightType::kBfloat16);
    const internal::FewRowsWeights& few = internal::FewRowsLayoutOf(weights);
    if (const char* why = CannotRun(FewRowsKernel::kVdpbf16ps, few)) GTEST_SKIP() << why;
    const FewRowsKernel expected = in % 32 == 0 && internal::FewRowsAmxSupported()
                                       ? FewRowsKernel::kAmx
                                       : FewRowsKernel::kVdpbf16ps;
    LinearContext context;
    for (int64_t rows : {1, 16, 17}) {
      const std::vector<float> x = Random(rows * in, rng);
      std::vector<float> got(rows * out), want(rows * out);
      LinearFewRows(context, weights, x.data(), rows, got.data());
      RunKernel(expected, few, x.data(), rows, want.data());
      ASSERT_EQ(got, want) << "in " << in << " rows " << rows;
    }
  }
}

// Where Linear runs a kernel of ours on bfloat16 weights (AMX tiles; VDPBF16PS
// without AMX, not on Zen 4), a row has the bits LinearFewRows gives it, through
// either call, alone or among many, split across threads or not, and across
// Linear's passes of 256 rows (VDPBF16PS): calls_share_bits says so.
TEST(LinearTest, Bfloat16RunsTheFewRowsKernelWhereCallsShareBits) {
  std::mt19937 rng(6);
  testing::ThreadsParallelFor threads(2);
  bool ran = false;
  for (auto [in, out] :
       {std::pair<int64_t, int64_t>{96, 200}, {4096, 130}, {1024, 4097}, {70, 100}}) {
    const std::vector<float> w = Random(out * in, rng), b = Random(out, rng);
    LinearWeights weights(w.data(), out, in, false, b.data(), WeightType::kBfloat16);
    const internal::FewRowsWeights& few = internal::FewRowsLayoutOf(weights);
    const bool amx = in % 32 == 0 && CannotRun(FewRowsKernel::kAmx, few) == nullptr;
    ASSERT_EQ(internal::AmxRunsLinear(few), amx) << "in " << in;
    const LinearKernel many = weights.kernel(LinearCall::kManyRows);
    const bool vdpbf16ps = many == LinearKernel::kVdpbf16psManyRows;
    ASSERT_EQ(weights.calls_share_bits(), amx || vdpbf16ps) << "in " << in;
    if (vdpbf16ps) {
      ASSERT_EQ(CannotRun(FewRowsKernel::kVdpbf16ps, few), nullptr);
      ASSERT_FALSE(internal::FewRowsAmxSupported());
    }
    if (!weights.calls_share_bits()) continue;
    ran = true;
    const FewRowsKernel kernel = amx ? FewRowsKernel::kAmx : FewRowsKernel::kVdpbf16ps;
    LinearContext context;
    std::vector<int64_t> row_counts = {1, 5, 17, 40};
    if (in * out < 100000) row_counts.push_back(600);  // Three passes, the last short.
    for (int64_t rows : row_counts) {
      const std::vector<float> x = Random(rows * in, rng);
      std::vector<float> got(rows * out), split(rows * out), want(rows * out);
      Linear(context, weights, x.data(), rows, got.data());
      Linear(context, weights, x.data(), rows, split.data(), &threads);
      RunKernel(kernel, few, x.data(), rows, want.data());
      ASSERT_EQ(got, want) << "in " << in << " out " << out << " rows " << rows;
      ASSERT_EQ(split, want) << "in " << in << " out " << out << " rows " << rows;
      LinearFewRows(context, weights, x.data(), rows, got.data());
      ASSERT_EQ(got, want) << "in " << in << " out " << out << " rows " << rows;
    }
  }
  if (!ran) {
    GTEST_SKIP() << "Linear runs oneDNN's matmul on this CPU (no AVX512_BF16, or Zen 4)";
  }
}

// The dot-product path's packing converts sixteen values at a time: each word must
// be the scalar Float32ToBfloat16's, including ties, subnormals, NaN payloads, Inf,
// overflow to Inf and the scalar tail of a row.
float FromBits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

TEST(LinearFewRowsTest, PackedPairsAreTheScalarConversion) {
  // Only CPUs with AVX512_BF16 run the packing (LinearFewRows checks first).
  if (!internal::FewRowsDpbf16Supported()) {
    GTEST_SKIP() << "this CPU has no AVX512_BF16: LinearFewRows never packs bfloat16 "
                    "pairs";
  }
  const float specials[] = {0.0f,
                            -0.0f,
                            1.0f,
                            1.00390625f /* tie, even */,
                            1.01171875f /* tie, odd */,
                            0x1p-149f,
                            -0x1p-130f,
                            0x1.fffffep-127f /* rounds up to the smallest normal */,
                            3.3895313e38f /* overflows to Inf */,
                            std::numeric_limits<float>::infinity(),
                            -std::numeric_limits<float>::infinity(),
                            std::numeric_limits<float>::quiet_NaN(),
                            FromBits(0x7F800001u) /* signalling NaN */,
                            FromBits(0xFFC12345u)};
  std::mt19937 rng(3);
  std::uniform_int_distribution<uint32_t> bits;
  for (int64_t in : {2, 16, 18, 46, 4098}) {
    const int64_t rows = 3;
    std::vector<float> x(rows * in);
    for (size_t i = 0; i < x.size(); ++i) {
      x[i] = i % 3 == 0 ? specials[(i / 3) % std::size(specials)] : FromBits(bits(rng));
    }
    std::vector<uint32_t> pairs;
    internal::PackBfloat16Pairs(x.data(), rows, in, pairs);
    ASSERT_EQ(pairs.size(), static_cast<size_t>(rows * in / 2));
    for (int64_t i = 0; i < rows * in; ++i) {
      const uint32_t word = pairs[i / 2];
      const uint16_t got = static_cast<uint16_t>(i % 2 == 0 ? word : word >> 16);
      ASSERT_EQ(got, Float32ToBfloat16(x[i])) << "in " << in << " at " << i;
    }
  }
}

// The many-rows AMX kernel's packing rounds straight from float32 into tiles: each
// 16-row group's k block holds the rows' words of PackBfloat16Pairs side by side, and
// rows past the last are zeros even where the buffer held other values before.
TEST(LinearFewRowsTest, AmxRowTilesHoldThePackedPairs) {
  if (!internal::FewRowsDpbf16Supported()) {
    GTEST_SKIP() << "this CPU has no AVX512_BF16: Linear never packs AMX tiles";
  }
  std::mt19937 rng(5);
  std::uniform_int_distribution<uint32_t> bits;
  constexpr int64_t kGroupRows = 16, kBlock = 32, kPairs = kBlock / 2;
  std::vector<uint32_t> tiles(1 << 20, 0xDEADBEEFu);  // A stale, larger buffer.
  for (int64_t in : {32, 96, 4096}) {
    for (int64_t rows : {1, 15, 16, 17, 33}) {
      std::vector<float> x(rows * in);
      for (float& v : x) v = FromBits(bits(rng));  // NaN, Inf, subnormals among them.
      std::vector<uint32_t> pairs;
      internal::PackBfloat16Pairs(x.data(), rows, in, pairs);
      internal::PackAmxRowTiles(x.data(), rows, in, tiles);
      const int64_t groups = (rows + kGroupRows - 1) / kGroupRows, blocks = in / kBlock;
      ASSERT_EQ(tiles.size(), static_cast<size_t>(groups * blocks * kGroupRows * kPairs));
      for (int64_t m = 0; m < groups * kGroupRows; ++m) {
        for (int64_t kb = 0; kb < blocks; ++kb) {
          for (int64_t p = 0; p < kPairs; ++p) {
            const uint32_t want = m < rows ? pairs[m * in / 2 + kb * kPairs + p] : 0;
            const int64_t at = ((m / kGroupRows) * blocks + kb) * kGroupRows * kPairs +
                               (m % kGroupRows) * kPairs + p;
            ASSERT_EQ(tiles[at], want) << "in " << in << " rows " << rows << " row " << m
                                       << " k block " << kb << " pair " << p;
          }
        }
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Types, LinearRowIndependenceTest,
                         ::testing::Values(WeightType::kFloat32, WeightType::kBfloat16));

}  // namespace
}  // namespace layerserve::kernels
