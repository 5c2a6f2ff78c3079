// Holds the fast normalization kernels to their scalar references (kernels/norm.h):
// every LayerNorm strategy (the dispatching LayerNorm, oneDNN, the hand loop) and
// RmsNorm, on odd sizes, with every combination of weight, Gemma offset, bias,
// fused residual (and its aliasing) and in-place output; then edge cases:
// zero-variance rows, extreme magnitudes, NaN/Inf rows, the primitive cache, and
// per-thread contexts.
//
// Tolerance: |fast - ref| <= 1e-5 * max(1, |ref|) (+ a conditioning term for
// LayerNorm, below). The reference computes in double, so this bounds the fast
// kernel's own float32 error. That error comes from the row statistics (float32
// sums over dim elements in 16 lanes are a few ulps off) and the output's own
// rounding; the largest we observe is 8e-7 (dim 4097), so 1e-5 leaves >10x margin
// while still catching real mistakes: the unbiased instead of biased variance is
// 1/(2 dim) = 1.2e-4 off at dim 4097, a missing +1 of the Gemma offset or a wrong
// epsilon far more.
// The floor of 1 is the natural output scale (normalized values are O(1)); tests
// whose outputs are tiny by construction pass their own floor.
//
// LayerNorm's conditioning term: an error of k ulps in the float32 mean shifts
// every output by k * eps32 * |mean| * rstd * |scale|. It is negligible for rows
// with |mean| <~ std (the sweeps) and dominates for rows far from zero or of zero
// variance, where rstd = 1/sqrt(epsilon) is large. Any float32 LayerNorm has it
// (PyTorch's too): the mean itself rounds. We allow kMeanUlps = 16 ulps: oneDNN
// sums each row in float32 vector lanes, chains of up to 4097 / 16 = 256 additions
// whose rounding errors add like a random walk, sqrt(256) = 16 ulps; the most
// observed is 5 (a constant 3.7 row of dim 4097). The hand loop pivots on the
// row's first value and is near exact here.
#include "kernels/norm.h"

#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <ostream>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "kernels/norm_internal.h"

namespace layerserve::kernels {
namespace {

constexpr double kRelTol = 1e-5;
constexpr double kMeanUlps = 16;
constexpr double kEps32 = std::numeric_limits<float>::epsilon();

// The server sets one OpenMP thread per worker; do the same for the test thread.
class OneOmpThread : public ::testing::Environment {
 public:
  void SetUp() override { omp_set_num_threads(1); }
};
const auto* const kOneOmpThread = ::testing::AddGlobalTestEnvironment(new OneOmpThread);

enum class Kernel { kLayerNorm, kLayerNormOneDnn, kLayerNormLoop, kRmsNorm };

const char* Name(Kernel k) {
  switch (k) {
    case Kernel::kLayerNorm:
      return "LayerNorm";
    case Kernel::kLayerNormOneDnn:
      return "LayerNormOneDnn";
    case Kernel::kLayerNormLoop:
      return "LayerNormLoop";
    case Kernel::kRmsNorm:
      return "RmsNorm";
  }
  return "?";
}

bool IsLayerNorm(Kernel k) { return k != Kernel::kRmsNorm; }

void RunFast(Kernel k, NormContext& ctx, const float* x, int64_t rows, int64_t dim,
             const NormParams& p, float* y) {
  switch (k) {
    case Kernel::kLayerNorm:
      return LayerNorm(ctx, x, rows, dim, p, y);
    case Kernel::kLayerNormOneDnn:
      return internal::LayerNormOneDnn(ctx, x, rows, dim, p, y);
    case Kernel::kLayerNormLoop:
      return internal::LayerNormLoop(x, rows, dim, p, y);
    case Kernel::kRmsNorm:
      return RmsNorm(ctx, x, rows, dim, p, y);
  }
}

void RunReference(Kernel k, const float* x, int64_t rows, int64_t dim,
                  const NormParams& p, float* y) {
  if (IsLayerNorm(k)) {
    LayerNormReference(x, rows, dim, p, y);
  } else {
    RmsNormReference(x, rows, dim, p, y);
  }
}

enum class WeightMode { kNone, kPlain, kOffset };
enum class ResidualMode { kNone, kSeparateOut, kOutIsX, kOutIsResidual };

struct Options {
  WeightMode weight = WeightMode::kNone;
  bool bias = false;
  ResidualMode residual = ResidualMode::kNone;
  bool in_place = false;  // y == x.
  float epsilon = 1e-5f;
};

std::string Describe(const Options& o) {
  return "weight=" + std::to_string(static_cast<int>(o.weight)) +
         " bias=" + std::to_string(o.bias) +
         " residual=" + std::to_string(static_cast<int>(o.residual)) +
         " in_place=" + std::to_string(o.in_place);
}

struct Inputs {
  int64_t rows = 0, dim = 0;
  std::vector<float> x, residual, weight, bias;
};

// Rows of mixed scale (0.01 to 100) and a mean of 0.3 std: realistic hidden states,
// well conditioned.
Inputs RandomInputs(int64_t rows, int64_t dim, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  Inputs in;
  in.rows = rows;
  in.dim = dim;
  for (int64_t r = 0; r < rows; ++r) {
    const float scale = std::pow(10.0f, static_cast<float>(r % 5) - 2.0f);
    for (int64_t i = 0; i < dim; ++i) in.x.push_back(scale * (0.3f + normal(rng)));
  }
  for (int64_t i = 0; i < rows * dim; ++i) in.residual.push_back(normal(rng));
  for (int64_t i = 0; i < dim; ++i) in.weight.push_back(0.5f + 0.5f * normal(rng));
  for (int64_t i = 0; i < dim; ++i) in.bias.push_back(normal(rng));
  return in;
}

struct Outputs {
  std::vector<float> y, residual_out;
};

// Runs one kernel on private copies of the inputs, with the aliasing `o` asks for.
Outputs RunKernel(Kernel k, bool fast, NormContext& ctx, const Inputs& in,
                  const Options& o) {
  const int64_t n = in.rows * in.dim;
  std::vector<float> x = in.x, residual = in.residual, y(n), out(n);
  NormParams p;
  p.epsilon = o.epsilon;
  if (o.weight != WeightMode::kNone) p.weight = in.weight.data();
  p.weight_offset = o.weight == WeightMode::kOffset;
  if (o.bias) p.bias = in.bias.data();
  if (o.residual != ResidualMode::kNone) {
    p.residual = residual.data();
    p.residual_out = o.residual == ResidualMode::kOutIsX          ? x.data()
                     : o.residual == ResidualMode::kOutIsResidual ? residual.data()
                                                                  : out.data();
  }
  float* y_ptr = o.in_place ? x.data() : y.data();
  if (fast) {
    RunFast(k, ctx, x.data(), in.rows, in.dim, p, y_ptr);
  } else {
    RunReference(k, x.data(), in.rows, in.dim, p, y_ptr);
  }
  Outputs result;
  result.y.assign(y_ptr, y_ptr + n);
  if (p.residual_out != nullptr)
    result.residual_out.assign(p.residual_out, p.residual_out + n);
  return result;
}

// The row statistics of what was normalized, in double, for the conditioning term.
struct RowStats {
  double mean, rstd;
};

RowStats Stats(const float* s, int64_t dim, float epsilon) {
  double sum = 0, sq = 0;
  for (int64_t i = 0; i < dim; ++i) sum += s[i];
  const double mean = sum / dim;
  for (int64_t i = 0; i < dim; ++i) sq += (s[i] - mean) * (s[i] - mean);
  return {mean, 1.0 / std::sqrt(sq / dim + epsilon)};
}

// Compares fast to reference with the tolerance stated at the top. `normalized`
// is the input the kernel normalized (x, or x + residual); `floor` the output
// scale below which errors are judged absolutely.
void ExpectClose(Kernel k, const Inputs& in, const Options& o,
                 const std::vector<float>& normalized, const std::vector<float>& fast,
                 const std::vector<float>& ref, double floor = 1.0) {
  int reported = 0;
  for (int64_t r = 0; r < in.rows; ++r) {
    const float* s = normalized.data() + r * in.dim;
    const RowStats st = Stats(s, in.dim, o.epsilon);
    for (int64_t i = 0; i < in.dim; ++i) {
      const int64_t at = r * in.dim + i;
      double tol = kRelTol * std::max(floor, std::fabs(static_cast<double>(ref[at])));
      if (IsLayerNorm(k)) {
        double scale = 1.0;
        if (o.weight == WeightMode::kPlain) scale = in.weight[i];
        if (o.weight == WeightMode::kOffset) scale = 1.0 + in.weight[i];
        tol += kMeanUlps * kEps32 * std::fabs(st.mean) * st.rstd * std::fabs(scale);
      }
      const double err = std::fabs(static_cast<double>(fast[at]) - ref[at]);
      if (!(err <= tol) && reported++ < 5) {
        ADD_FAILURE() << Name(k) << " " << in.rows << "x" << in.dim << " " << Describe(o)
                      << " at row " << r << " col " << i << ": fast " << fast[at]
                      << " ref " << ref[at] << " err " << err << " tol " << tol;
      }
    }
  }
}

// x + residual as the kernels compute it (float32 add).
std::vector<float> Normalized(const Inputs& in, const Options& o) {
  std::vector<float> s = in.x;
  if (o.residual != ResidualMode::kNone) {
    for (size_t i = 0; i < s.size(); ++i) s[i] = in.x[i] + in.residual[i];
  }
  return s;
}

void CheckAgainstReference(Kernel k, NormContext& ctx, const Inputs& in,
                           const Options& o) {
  const Outputs fast = RunKernel(k, /*fast=*/true, ctx, in, o);
  const Outputs ref = RunKernel(k, /*fast=*/false, ctx, in, o);
  ExpectClose(k, in, o, Normalized(in, o), fast.y, ref.y);
  // The residual sum is one float32 add in both: bit-exact.
  ASSERT_EQ(fast.residual_out.size(), ref.residual_out.size());
  for (size_t i = 0; i < ref.residual_out.size(); ++i) {
    ASSERT_EQ(fast.residual_out[i], ref.residual_out[i]) << Describe(o) << " at " << i;
  }
}

struct Shape {
  Kernel kernel;
  int64_t rows, dim;
};

std::ostream& operator<<(std::ostream& os, const Shape& s) {
  return os << Name(s.kernel) << "_" << s.rows << "x" << s.dim;
}

class NormShapeTest : public ::testing::TestWithParam<Shape> {};

// Every option combination on this kernel and shape.
TEST_P(NormShapeTest, MatchesReferenceWithEveryOption) {
  const Shape& shape = GetParam();
  const bool ln = IsLayerNorm(shape.kernel);
  NormContext ctx;
  uint32_t seed = 1;
  for (WeightMode weight : {WeightMode::kNone, WeightMode::kPlain, WeightMode::kOffset}) {
    for (bool bias : {false, true}) {
      if (bias && !ln) continue;  // RMSNorm has no shift.
      for (ResidualMode residual :
           {ResidualMode::kNone, ResidualMode::kSeparateOut, ResidualMode::kOutIsX,
            ResidualMode::kOutIsResidual}) {
        for (bool in_place : {false, true}) {
          // REQUIRES of norm.h: residual_out may not be y.
          if (in_place && residual == ResidualMode::kOutIsX) continue;
          const Options o{weight, bias, residual, in_place, ln ? 1e-5f : 1e-6f};
          const Inputs in = RandomInputs(shape.rows, shape.dim, seed++);
          CheckAgainstReference(shape.kernel, ctx, in, o);
        }
      }
    }
  }
}

std::vector<Shape> AllShapes() {
  std::vector<Shape> shapes;
  for (Kernel k : {Kernel::kLayerNorm, Kernel::kLayerNormOneDnn, Kernel::kLayerNormLoop,
                   Kernel::kRmsNorm}) {
    for (int64_t rows : {1, 3, 33}) {
      for (int64_t dim : {1, 7, 64, 768, 4097}) shapes.push_back({k, rows, dim});
    }
  }
  return shapes;
}

INSTANTIATE_TEST_SUITE_P(Sweep, NormShapeTest, ::testing::ValuesIn(AllShapes()),
                         [](const ::testing::TestParamInfo<Shape>& info) {
                           return std::string(Name(info.param.kernel)) + "_" +
                                  std::to_string(info.param.rows) + "x" +
                                  std::to_string(info.param.dim);
                         });

class NormKernelTest : public ::testing::TestWithParam<Kernel> {};

// A constant row has zero variance: x - mean = 0, so the output is the bias.
TEST_P(NormKernelTest, ZeroVarianceRows) {
  const Kernel k = GetParam();
  NormContext ctx;
  for (int64_t dim : {1, 7, 768, 4097}) {
    Inputs in = RandomInputs(5, dim, 7);
    const float values[5] = {0.0f, 1.25f, 3.7f, -0.1f, 1e4f};
    for (int64_t r = 0; r < 5; ++r) {
      for (int64_t i = 0; i < dim; ++i) in.x[r * dim + i] = values[r];
    }
    const Options o{WeightMode::kPlain, IsLayerNorm(k), ResidualMode::kNone, false,
                    IsLayerNorm(k) ? 1e-5f : 1e-6f};
    const Outputs fast = RunKernel(k, true, ctx, in, o);
    const Outputs ref = RunKernel(k, false, ctx, in, o);
    ExpectClose(k, in, o, in.x, fast.y, ref.y);
    if (!IsLayerNorm(k)) continue;
    for (int64_t r = 0; r < 5; ++r) {
      for (int64_t i = 0; i < dim; ++i) {
        const int64_t at = r * dim + i;
        EXPECT_EQ(ref.y[at], in.bias[i]) << "reference is exact";
        // Rows whose float32 sum is exact (0, 1.25) are exact in every strategy;
        // the hand loop (shifted data) is exact on every constant row.
        if (r < 2 || k == Kernel::kLayerNormLoop) {
          ASSERT_EQ(fast.y[at], in.bias[i]) << Name(k) << " dim " << dim << " row " << r;
        }
      }
    }
  }
}

// Magnitudes from 1e-30 to 1e15 (a sum of squares up to ~4e33, inside float32):
// outputs match relative to the row's own output scale.
TEST_P(NormKernelTest, ExtremeButRepresentableMagnitudes) {
  const Kernel k = GetParam();
  NormContext ctx;
  for (int64_t dim : {7, 768, 4097}) {
    for (float magnitude : {1e-30f, 1e-10f, 1e10f, 1e15f}) {
      Inputs in = RandomInputs(3, dim, 11);
      for (float& v : in.x) v *= magnitude;
      const Options o{WeightMode::kOffset, IsLayerNorm(k), ResidualMode::kNone, false,
                      1e-5f};
      const Outputs fast = RunKernel(k, true, ctx, in, o);
      const Outputs ref = RunKernel(k, false, ctx, in, o);
      double row_scale = 0;  // 1e-30 inputs give ~1e-28 outputs (epsilon dominates).
      for (float v : ref.y)
        row_scale = std::max(row_scale, std::fabs(static_cast<double>(v)));
      ASSERT_GT(row_scale, 0.0);
      SCOPED_TRACE(::testing::Message() << "magnitude " << magnitude << " dim " << dim);
      ExpectClose(k, in, o, in.x, fast.y, ref.y, std::min(1.0, row_scale));
    }
  }
}

// NaN, +Inf, -Inf, and finite values so large that float32 statistics overflow:
// those rows become all NaN; the other rows are untouched by them.
TEST_P(NormKernelTest, NonFiniteRowsBecomeNan) {
  const Kernel k = GetParam();
  NormContext ctx;
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  for (int64_t dim : {1, 7, 768, 4097}) {
    for (bool in_place : {false, true}) {
      Inputs in = RandomInputs(6, dim, 13);
      in.x[1 * dim + dim / 2] = nan;
      in.x[2 * dim + dim - 1] = inf;
      in.x[3 * dim] = -inf;
      for (int64_t i = 0; i < dim; ++i) in.x[4 * dim + i] = (i % 2 ? 1e30f : -3e30f);
      const Options o{WeightMode::kPlain, IsLayerNorm(k), ResidualMode::kNone, in_place,
                      1e-5f};
      const Outputs fast = RunKernel(k, true, ctx, in, o);
      const Outputs ref = RunKernel(k, false, ctx, in, o);
      for (int64_t r = 0; r < 6; ++r) {
        const bool bad = r >= 1 && r <= 4 && !(r == 4 && dim == 1 && IsLayerNorm(k));
        for (int64_t i = 0; i < dim; ++i) {
          const int64_t at = r * dim + i;
          if (bad) {
            ASSERT_TRUE(std::isnan(ref.y[at])) << "ref row " << r << " dim " << dim;
            ASSERT_TRUE(std::isnan(fast.y[at]))
                << Name(k) << " row " << r << " dim " << dim;
          } else {
            ASSERT_TRUE(std::isfinite(fast.y[at]))
                << Name(k) << " row " << r << " dim " << dim;
          }
        }
      }
      // Finite rows still match, and so does a lone -3e30 (LayerNorm of dim 1:
      // zero variance, so the bias).
      Inputs good = in;
      good.rows = 1;
      for (int64_t r : {0, 4, 5}) {
        if (r == 4 && !(dim == 1 && IsLayerNorm(k))) continue;
        good.x.assign(in.x.begin() + r * dim, in.x.begin() + (r + 1) * dim);
        const std::vector<float> f(fast.y.begin() + r * dim,
                                   fast.y.begin() + (r + 1) * dim);
        const std::vector<float> e(ref.y.begin() + r * dim,
                                   ref.y.begin() + (r + 1) * dim);
        ExpectClose(k, good, o, good.x, f, e);
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Kernels, NormKernelTest,
                         ::testing::Values(Kernel::kLayerNorm, Kernel::kLayerNormOneDnn,
                                           Kernel::kLayerNormLoop, Kernel::kRmsNorm),
                         [](const ::testing::TestParamInfo<Kernel>& info) {
                           return std::string(Name(info.param));
                         });

TEST(NormDispatchTest, SmallShapesTakeTheLoopCommonBatchesOneDnn) {
  EXPECT_TRUE(internal::LayerNormUsesLoop(1, 768));
  EXPECT_TRUE(internal::LayerNormUsesLoop(1, 4096));
  EXPECT_FALSE(internal::LayerNormUsesLoop(2, 4096));
  EXPECT_FALSE(internal::LayerNormUsesLoop(16, 768));
  EXPECT_FALSE(internal::LayerNormUsesLoop(128, 768));
  EXPECT_FALSE(internal::LayerNormUsesLoop(512, 4096));
}

TEST(NormContextTest, PrimitivesAreCreatedOnceAndBounded) {
  NormContext ctx;
  const Inputs in = RandomInputs(80, 64, 3);
  std::vector<float> y(in.x.size());
  NormParams p;
  p.weight = in.weight.data();
  EXPECT_EQ(ctx.CachedPrimitiveCount(), 0);
  for (int i = 0; i < 3; ++i)
    internal::LayerNormOneDnn(ctx, in.x.data(), 16, 64, p, y.data());
  EXPECT_EQ(ctx.CachedPrimitiveCount(), 1) << "reused, not rebuilt per call";
  p.bias = in.bias.data();  // Different flags: a second primitive.
  internal::LayerNormOneDnn(ctx, in.x.data(), 16, 64, p, y.data());
  EXPECT_EQ(ctx.CachedPrimitiveCount(), 2);
  p.epsilon = 1e-6f;  // Different epsilon: a third.
  internal::LayerNormOneDnn(ctx, in.x.data(), 16, 64, p, y.data());
  EXPECT_EQ(ctx.CachedPrimitiveCount(), 3);
  // Many row counts: the cache stays bounded, and results stay right after clearing.
  for (int64_t rows = 1; rows <= 80; ++rows) {
    internal::LayerNormOneDnn(ctx, in.x.data(), rows, 64, p, y.data());
    EXPECT_LE(ctx.CachedPrimitiveCount(), 64);
  }
  std::vector<float> ref(y.size());
  LayerNormReference(in.x.data(), 80, 64, p, ref.data());
  for (size_t i = 0; i < y.size(); ++i)
    ASSERT_NEAR(y[i], ref[i], kRelTol * std::max(1.0f, std::fabs(ref[i])));
  // RmsNorm and the small-shape loop create no primitives.
  NormContext other;
  RmsNorm(other, in.x.data(), 80, 64, p, y.data());
  LayerNorm(other, in.x.data(), 1, 64, p, y.data());
  EXPECT_EQ(other.CachedPrimitiveCount(), 0);
}

// The server's setup: worker threads, each with omp_set_num_threads(1) and its own
// context, running concurrently. Also one worker with 2 OpenMP threads: the result
// must not depend on the thread count.
TEST(NormContextTest, OneContextPerWorkerThread) {
  const Inputs in = RandomInputs(128, 768, 5);
  std::vector<float> ref(in.x.size());
  NormParams p;
  p.weight = in.weight.data();
  p.bias = in.bias.data();
  LayerNormReference(in.x.data(), 128, 768, p, ref.data());
  std::vector<std::vector<float>> results(3, std::vector<float>(in.x.size()));
  std::vector<std::thread> workers;
  for (int t = 0; t < 3; ++t) {
    workers.emplace_back([&, t] {
      omp_set_num_threads(t == 2 ? 2 : 1);
      NormContext ctx;
      for (int i = 0; i < 20; ++i) {
        internal::LayerNormOneDnn(ctx, in.x.data(), 128, 768, p, results[t].data());
      }
    });
  }
  for (std::thread& w : workers) w.join();
  for (int t = 0; t < 3; ++t) {
    for (size_t i = 0; i < ref.size(); ++i) {
      ASSERT_NEAR(results[t][i], ref[i], kRelTol * std::max(1.0f, std::fabs(ref[i])))
          << "thread " << t << " at " << i;
    }
  }
}

}  // namespace
}  // namespace layerserve::kernels
