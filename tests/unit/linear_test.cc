// Linear (oneDNN matmul, prepacked weights) against the double-precision reference,
// for both weight storages, with and without bias, float32 and bfloat16 weights.
#include "kernels/linear.h"

#include <omp.h>

#include <cmath>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/dtype.h"

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
void CheckAgainstReference(const Shape& s, WeightType type, bool in_by_out, bool bias) {
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
  Linear(context, weights, x.data(), s.rows, y.data());
  LinearReference(w.data(), bias ? b.data() : nullptr, s.out, s.in, x.data(), s.rows,
                  want.data());
  const double eps = type == WeightType::kFloat32 ? 0x1p-24 : 0x1p-8;
  for (int64_t r = 0; r < s.rows; ++r) {
    for (int64_t o = 0; o < s.out; ++o) {
      double magnitude = bias ? std::fabs(b[o]) : 0;
      for (int64_t i = 0; i < s.in; ++i) magnitude += std::fabs(x[r * s.in + i] * w[o * s.in + i]);
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
    for (bool bias : {false, true}) CheckAgainstReference(GetParam(), WeightType::kFloat32, in_by_out, bias);
}

TEST_P(LinearTest, Bfloat16MatchesReference) {
  for (bool in_by_out : {false, true})
    for (bool bias : {false, true}) CheckAgainstReference(GetParam(), WeightType::kBfloat16, in_by_out, bias);
}

INSTANTIATE_TEST_SUITE_P(Shapes, LinearTest,
                         ::testing::Values(Shape{1, 1, 1}, Shape{1, 7, 5}, Shape{3, 64, 130},
                                           Shape{17, 65, 33}, Shape{128, 256, 96}));

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
    std::vector<float> x = Random(rows * 16, rng), y(rows * 8), z(rows * 4), ref(rows * 8);
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
        ASSERT_EQ(y[r * out + o], alone[o]) << "rows " << rows << " row " << r << " out " << o;
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Types, LinearRowIndependenceTest,
                         ::testing::Values(WeightType::kFloat32, WeightType::kBfloat16));

}  // namespace
}  // namespace layerserve::kernels
