// Holds the fast normalization kernels to their scalar references (kernels/norm/norm.h):
// every LayerNorm strategy (the dispatching LayerNorm, the Highway hand loop, and
// the oneDNN baseline, bench/baseline/) and RmsNorm, the hand loops on every Highway
// target this CPU runs (AVX-512, AVX2, SSE4, SSSE3, scalar), on dims 1, 7, 64, 768, 4096,
// 4097 and 1, 3 and 512 rows, with every combination of weight, Gemma offset, bias, fused
// residual (and its aliasing), in-place output and pointers misaligned by one
// float; then edge cases: zero-variance rows, magnitudes from 1e-30 to 1e20 (rows
// near 1e4 and 1e20 included), a first value far from the rest (the LayerNorm
// loop's exact second pass), NaN/Inf rows (propagated as PyTorch does; Inf rows
// also through every option on dims 1, 7 and 4097), the oneDNN baseline's primitive
// cache and per-thread contexts. Every fast run of a hand loop is repeated with
// NormParams::output_stats and checked against the statistics of its output
// (ExpectOutputStatsOf).
//
// Tolerance: |fast - ref| <= 1e-5 * max(1, |ref|) (+ a conditioning term for
// LayerNorm, below). The reference computes in double, so this bounds the fast
// kernel's own float32 error. That error comes from the row statistics (float32
// sums over dim elements in independent partial sums are a few ulps off) and the
// output's own rounding; the largest we observe is 2.1e-6 (the hand loop on the
// 1-lane scalar target; 0.9e-6 on AVX-512, 1.5e-6 through oneDNN), so 1e-5
// leaves ~5x margin while still catching real mistakes: the unbiased
// instead of biased variance is 1/(2 dim) = 1.2e-4 off at dim 4097, a missing +1
// of the Gemma offset or a wrong epsilon far more.
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
#include "kernels/norm/norm.h"

#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <ostream>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "bench/baseline/layer_norm_onednn.h"
#include "hwy/targets.h"
#include "kernels/norm/norm_internal.h"
#include "tests/testing/highway_target_scope.h"
#include "tests/testing/output_stats.h"

namespace layerserve::kernels {
namespace {

using testing::TargetScope;

// The fast kernels keep no state; only the oneDNN baseline caches primitives.
using baseline::NormContext;

constexpr double kRelTol = 1e-5;
constexpr double kMeanUlps = 16;
constexpr double kEps32 = std::numeric_limits<float>::epsilon();

// The dims of the edge-case tests: one element, less than a vector, whole
// vectors, a whole row of 4096 (no tail), and a tail of one.
constexpr int64_t kEdgeDims[] = {1, 7, 64, 4096, 4097};

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

// The Highway hand loops, which tests run on every target.
bool IsHandLoop(Kernel k) { return k == Kernel::kLayerNormLoop || k == Kernel::kRmsNorm; }

// A kernel, and the Highway target its hand loops run on (0: the best the CPU
// has, as in production).
struct KernelOnTarget {
  Kernel kernel;
  int64_t target = 0;
};

std::string TestName(const KernelOnTarget& k) {
  std::string name = Name(k.kernel);
  if (k.target != 0) name += std::string("_") + hwy::TargetName(k.target);
  return name;
}

// Every kernel; the hand loops once per target the CPU supports and this binary
// was compiled for.
std::vector<KernelOnTarget> AllKernels() {
  std::vector<KernelOnTarget> all;
  for (Kernel k : {Kernel::kLayerNorm, Kernel::kLayerNormOneDnn, Kernel::kLayerNormLoop,
                   Kernel::kRmsNorm}) {
    if (!IsHandLoop(k)) {
      all.push_back({k, 0});
      continue;
    }
    for (int64_t target : hwy::SupportedAndGeneratedTargets()) all.push_back({k, target});
  }
  return all;
}

void RunFast(Kernel k, NormContext& ctx, const float* x, int64_t rows, int64_t dim,
             const NormParams& p, float* y) {
  switch (k) {
    case Kernel::kLayerNorm:
      return LayerNorm(x, rows, dim, p, y);
    case Kernel::kLayerNormOneDnn:
      return baseline::LayerNormOneDnn(ctx, x, rows, dim, p, y);
    case Kernel::kLayerNormLoop:
      return internal::LayerNormLoop(x, rows, dim, p, y);
    case Kernel::kRmsNorm:
      return RmsNorm(x, rows, dim, p, y);
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
  // Every array (x, y, weight, bias, residual, residual_out) one float past a
  // 64-byte boundary instead of on it.
  bool misaligned = false;
  // Only y one float past the boundary (so y and residual_out differ).
  bool y_misaligned = false;
};

std::string Describe(const Options& o) {
  return "weight=" + std::to_string(static_cast<int>(o.weight)) +
         " bias=" + std::to_string(o.bias) +
         " residual=" + std::to_string(static_cast<int>(o.residual)) +
         " in_place=" + std::to_string(o.in_place) +
         " misaligned=" + std::to_string(o.misaligned) +
         " y_misaligned=" + std::to_string(o.y_misaligned);
}

// Every combination for small row counts; for many rows (slow in the double
// reference) a few that still cover each variant of the row loops.
std::vector<Options> OptionSets(bool layer_norm, int64_t rows) {
  const float epsilon = layer_norm ? 1e-5f : 1e-6f;
  std::vector<Options> sets;
  if (rows > 3) {
    sets.push_back({WeightMode::kPlain, layer_norm, ResidualMode::kSeparateOut, false,
                    epsilon, true});
    sets.push_back({WeightMode::kOffset, layer_norm, ResidualMode::kOutIsResidual, true,
                    epsilon, false});
    sets.push_back({WeightMode::kNone, false, ResidualMode::kNone, false, epsilon, true});
    return sets;
  }
  for (WeightMode weight : {WeightMode::kNone, WeightMode::kPlain, WeightMode::kOffset}) {
    for (bool bias : {false, true}) {
      if (bias && !layer_norm) continue;  // RMSNorm has no shift.
      for (ResidualMode residual :
           {ResidualMode::kNone, ResidualMode::kSeparateOut, ResidualMode::kOutIsX,
            ResidualMode::kOutIsResidual}) {
        for (bool in_place : {false, true}) {
          // REQUIRES of norm.h: residual_out may not be y.
          if (in_place && residual == ResidualMode::kOutIsX) continue;
          for (bool misaligned : {false, true}) {
            sets.push_back({weight, bias, residual, in_place, epsilon, misaligned});
          }
        }
      }
    }
  }
  return sets;
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

// A copy of an array at a chosen alignment: on a 64-byte boundary, or one float
// past it.
class Placed {
 public:
  Placed(const std::vector<float>& v, bool misaligned) : storage_(v.size() + 32) {
    const uintptr_t base = reinterpret_cast<uintptr_t>(storage_.data());
    data_ = reinterpret_cast<float*>((base + 63) / 64 * 64) + (misaligned ? 1 : 0);
    std::copy(v.begin(), v.end(), data_);
  }
  float* data() { return data_; }

 private:
  std::vector<float> storage_;
  float* data_;
};

Outputs RunKernel(Kernel k, bool fast, NormContext& ctx, const Inputs& in,
                  const Options& o, ValueStats* output_stats = nullptr);

// NormParams::output_stats, for the hand loops behind every fast run: the same
// output to the bit with statistics as without, and the statistics of that output
// (tests/testing/output_stats.h).
void ExpectOutputStatsOf(Kernel k, NormContext& ctx, const Inputs& in, const Options& o,
                         const Outputs& plain) {
  ValueStats got;
  const Outputs with_stats = RunKernel(k, /*fast=*/true, ctx, in, o, &got);
  ASSERT_EQ(
      std::memcmp(with_stats.y.data(), plain.y.data(), plain.y.size() * sizeof(float)), 0)
      << Name(k) << ": the output changed when its statistics were asked for";
  testing::ExpectStatsOf(got, plain.y.data(), static_cast<int64_t>(plain.y.size()),
                         Name(k));
}

// Runs one kernel on private copies of the inputs, with the aliasing and alignment
// `o` asks for; fast hand loops also run with output statistics (checked above).
Outputs RunKernel(Kernel k, bool fast, NormContext& ctx, const Inputs& in,
                  const Options& o, ValueStats* output_stats) {
  const int64_t n = in.rows * in.dim;
  Placed x(in.x, o.misaligned), residual(in.residual, o.misaligned);
  Placed y(std::vector<float>(n), o.misaligned || o.y_misaligned);
  Placed out(std::vector<float>(n), o.misaligned);
  Placed weight(in.weight, o.misaligned), bias(in.bias, o.misaligned);
  NormParams p;
  p.epsilon = o.epsilon;
  if (o.weight != WeightMode::kNone) p.weight = weight.data();
  p.weight_offset = o.weight == WeightMode::kOffset;
  if (o.bias) p.bias = bias.data();
  if (o.residual != ResidualMode::kNone) {
    p.residual = residual.data();
    p.residual_out = o.residual == ResidualMode::kOutIsX          ? x.data()
                     : o.residual == ResidualMode::kOutIsResidual ? residual.data()
                                                                  : out.data();
  }
  p.output_stats = output_stats;
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
  if (fast && output_stats == nullptr && k != Kernel::kLayerNormOneDnn) {
    ExpectOutputStatsOf(k, ctx, in, o, result);
  }
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
// scale below which errors are judged absolutely. A reference row of NaN (no
// finite float32 statistics) must be all NaN in the fast kernel too.
void ExpectClose(Kernel k, const Inputs& in, const Options& o,
                 const std::vector<float>& normalized, const std::vector<float>& fast,
                 const std::vector<float>& ref, double floor = 1.0) {
  int reported = 0;
  for (int64_t r = 0; r < in.rows; ++r) {
    const float* s = normalized.data() + r * in.dim;
    const RowStats st = Stats(s, in.dim, o.epsilon);
    for (int64_t i = 0; i < in.dim; ++i) {
      const int64_t at = r * in.dim + i;
      double err, tol;
      if (std::isnan(ref[at])) {
        err = std::isnan(fast[at]) ? 0 : 1;
        tol = 0;
      } else {
        tol = kRelTol * std::max(floor, std::fabs(static_cast<double>(ref[at])));
        if (IsLayerNorm(k)) {
          double scale = 1.0;
          if (o.weight == WeightMode::kPlain) scale = in.weight[i];
          if (o.weight == WeightMode::kOffset) scale = 1.0 + in.weight[i];
          tol += kMeanUlps * kEps32 * std::fabs(st.mean) * st.rstd * std::fabs(scale);
        }
        err = std::fabs(static_cast<double>(fast[at]) - ref[at]);
      }
      if (!(err <= tol) && reported++ < 5) {
        ADD_FAILURE() << Name(k) << " on " << internal::HandLoopTarget() << " " << in.rows
                      << "x" << in.dim << " " << Describe(o) << " at row " << r << " col "
                      << i << ": fast " << fast[at] << " ref " << ref[at] << " err "
                      << err << " tol " << tol;
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
  KernelOnTarget kernel;
  int64_t rows, dim;
};

std::ostream& operator<<(std::ostream& os, const Shape& s) {
  return os << TestName(s.kernel) << "_" << s.rows << "x" << s.dim;
}

class NormShapeTest : public ::testing::TestWithParam<Shape> {};

// Every option combination on this kernel and shape (a representative few for
// 512 rows).
TEST_P(NormShapeTest, MatchesReferenceWithEveryOption) {
  const Shape& shape = GetParam();
  const TargetScope target(shape.kernel.target);
  const Kernel k = shape.kernel.kernel;
  NormContext ctx;
  uint32_t seed = 1;
  for (const Options& o : OptionSets(IsLayerNorm(k), shape.rows)) {
    const Inputs in = RandomInputs(shape.rows, shape.dim, seed++);
    CheckAgainstReference(k, ctx, in, o);
  }
}

std::vector<Shape> AllShapes() {
  std::vector<Shape> shapes;
  for (const KernelOnTarget& k : AllKernels()) {
    for (int64_t rows : {1, 3, 512}) {
      for (int64_t dim : {1, 7, 64, 768, 4096, 4097}) shapes.push_back({k, rows, dim});
    }
  }
  return shapes;
}

INSTANTIATE_TEST_SUITE_P(Sweep, NormShapeTest, ::testing::ValuesIn(AllShapes()),
                         [](const ::testing::TestParamInfo<Shape>& info) {
                           return TestName(info.param.kernel) + "_" +
                                  std::to_string(info.param.rows) + "x" +
                                  std::to_string(info.param.dim);
                         });

class NormKernelTest : public ::testing::TestWithParam<KernelOnTarget> {
 protected:
  NormKernelTest() : target_(GetParam().target) {}
  const Kernel k_ = GetParam().kernel;

 private:
  const TargetScope target_;
};

// The hand loops run on the target under test; unrestricted (as in production),
// on the best one the CPU supports (Highway lists better targets first).
TEST_P(NormKernelTest, DispatchesToTheTargetUnderTest) {
  const int64_t target = GetParam().target != 0
                             ? GetParam().target
                             : hwy::SupportedAndGeneratedTargets().front();
  EXPECT_STREQ(internal::HandLoopTarget(), hwy::TargetName(target));
}

// A constant row has zero variance: x - mean = 0, so the output is the bias.
TEST_P(NormKernelTest, ZeroVarianceRows) {
  NormContext ctx;
  for (int64_t dim : kEdgeDims) {
    Inputs in = RandomInputs(5, dim, 7);
    const float values[5] = {0.0f, 1.25f, 3.7f, -0.1f, 1e4f};
    for (int64_t r = 0; r < 5; ++r) {
      for (int64_t i = 0; i < dim; ++i) in.x[r * dim + i] = values[r];
    }
    const Options o{WeightMode::kPlain, IsLayerNorm(k_), ResidualMode::kNone, false,
                    IsLayerNorm(k_) ? 1e-5f : 1e-6f};
    const Outputs fast = RunKernel(k_, true, ctx, in, o);
    const Outputs ref = RunKernel(k_, false, ctx, in, o);
    ExpectClose(k_, in, o, in.x, fast.y, ref.y);
    if (!IsLayerNorm(k_)) continue;
    for (int64_t r = 0; r < 5; ++r) {
      for (int64_t i = 0; i < dim; ++i) {
        const int64_t at = r * dim + i;
        EXPECT_EQ(ref.y[at], in.bias[i]) << "reference is exact";
        // Rows whose float32 sum is exact (0, 1.25) are exact in every strategy;
        // the hand loop (shifted data; LayerNorm() too) is exact on every
        // constant row.
        if (r < 2 || k_ != Kernel::kLayerNormOneDnn) {
          ASSERT_EQ(fast.y[at], in.bias[i]) << Name(k_) << " dim " << dim << " row " << r;
        }
      }
    }
  }
}

// Magnitudes from 1e-30 to 1e15 (a sum of squares up to ~4e33, inside float32):
// outputs match relative to the row's own output scale.
TEST_P(NormKernelTest, ExtremeButRepresentableMagnitudes) {
  NormContext ctx;
  for (int64_t dim : kEdgeDims) {
    for (float magnitude : {1e-30f, 1e-10f, 1e10f, 1e15f}) {
      Inputs in = RandomInputs(3, dim, 11);
      for (float& v : in.x) v *= magnitude;
      const Options o{WeightMode::kOffset, IsLayerNorm(k_), ResidualMode::kNone, false,
                      1e-5f};
      const Outputs fast = RunKernel(k_, true, ctx, in, o);
      const Outputs ref = RunKernel(k_, false, ctx, in, o);
      double row_scale = 0;  // 1e-30 inputs give ~1e-28 outputs (epsilon dominates).
      for (float v : ref.y)
        row_scale = std::max(row_scale, std::fabs(static_cast<double>(v)));
      ASSERT_GT(row_scale, 0.0);
      SCOPED_TRACE(::testing::Message() << "magnitude " << magnitude << " dim " << dim);
      ExpectClose(k_, in, o, in.x, fast.y, ref.y, std::min(1.0, row_scale));
    }
  }
}

// Rows near 1e4 and 1e20, in two kinds: spread (m * N(0.3, 1)) and offset
// (m * (1 + 1e-4 N(0, 1)): a mean of m and a std of m / 1e4, the hard case for a
// float32 mean). At 1e20 a spread row's float32 statistics overflow (1e40), so it
// is NaN in every kernel; an offset row has LayerNorm deviations of ~1e16 (squares
// ~1e32, fine) but an RMS sum of squares of 1e40: NaN for RmsNorm only. Also with
// the fused residual add, whose sum is what gets normalized.
TEST_P(NormKernelTest, RowsNearLargeMagnitudes) {
  NormContext ctx;
  for (int64_t dim : kEdgeDims) {
    for (float magnitude : {1e4f, 1e20f}) {
      Inputs in = RandomInputs(4, dim, 17);
      std::mt19937 rng(19);
      std::normal_distribution<float> normal(0.0f, 1.0f);
      for (int64_t r = 0; r < 4; ++r) {
        for (int64_t i = 0; i < dim; ++i) {
          const float sign = r % 2 ? -1.0f : 1.0f;
          in.x[r * dim + i] = r < 2 ? sign * magnitude * (0.3f + normal(rng))
                                    : sign * magnitude * (1.0f + 1e-4f * normal(rng));
        }
      }
      for (ResidualMode residual : {ResidualMode::kNone, ResidualMode::kSeparateOut}) {
        const Options o{WeightMode::kPlain,
                        IsLayerNorm(k_),
                        residual,
                        false,
                        IsLayerNorm(k_) ? 1e-5f : 1e-6f,
                        /*misaligned=*/true};
        SCOPED_TRACE(::testing::Message() << "magnitude " << magnitude << " dim " << dim
                                          << " " << Describe(o));
        const Outputs fast = RunKernel(k_, true, ctx, in, o);
        const Outputs ref = RunKernel(k_, false, ctx, in, o);
        ExpectClose(k_, in, o, Normalized(in, o), fast.y, ref.y);
        if (magnitude < 1e5f) {
          for (float v : fast.y) ASSERT_TRUE(std::isfinite(v));
        } else if (dim > 1) {
          for (int64_t r = 0; r < 4; ++r) {
            const bool nan = r < 2 || !IsLayerNorm(k_);
            ASSERT_EQ(std::isnan(fast.y[r * dim]), nan) << "row " << r;
          }
        }
      }
    }
  }
}

// A first value far from the rest: the LayerNorm loop pivots on it, so its
// one-pass sums cancel (the second row's sum of squared deviations from the pivot,
// ~4e41, even overflows although the variance, ~2e34, does not). It must take its
// exact second pass and still match.
TEST_P(NormKernelTest, FirstValueFarFromTheRest) {
  NormContext ctx;
  for (int64_t dim : kEdgeDims) {
    Inputs in = RandomInputs(2, dim, 23);
    in.x[0] = 1e4f;
    in.x[dim] = 1e19f;
    for (int64_t i = 1; i < dim; ++i) in.x[dim + i] = 0.0f;
    const Options o{WeightMode::kPlain, IsLayerNorm(k_), ResidualMode::kNone, false,
                    IsLayerNorm(k_) ? 1e-5f : 1e-6f};
    const Outputs fast = RunKernel(k_, true, ctx, in, o);
    const Outputs ref = RunKernel(k_, false, ctx, in, o);
    SCOPED_TRACE(::testing::Message() << "dim " << dim);
    for (float v : ref.y) ASSERT_TRUE(std::isfinite(v));
    ExpectClose(k_, in, o, in.x, fast.y, ref.y);
  }
}

// What PyTorch's float32 formulas give a row holding NaN or Inf (checked against
// torch 1.13: F.layer_norm, and x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True)
// + eps) * w): a NaN makes the whole row NaN in both norms, and so does +-Inf in
// LayerNorm (mean and variance NaN). In RMSNorm +-Inf makes mean(x^2) = +Inf and
// rsqrt(+Inf) = 0, so y = x * 0 * w: NaN at each Inf, and zero elsewhere with the
// sign of x * w. `scale` is the row's weight (or 1 + weight).
bool RmsInfRow(Kernel k, const float* s, int64_t dim) {
  if (IsLayerNorm(k)) return false;
  bool inf = false;
  for (int64_t i = 0; i < dim; ++i) {
    if (std::isnan(s[i])) return false;
    inf |= std::isinf(s[i]);
  }
  return inf;
}

void ExpectRmsInfRow(const float* s, const float* y, int64_t dim,
                     const std::vector<float>& scale, const std::string& what) {
  for (int64_t i = 0; i < dim; ++i) {
    if (std::isinf(s[i])) {
      ASSERT_TRUE(std::isnan(y[i])) << what << " at " << i;
    } else {
      ASSERT_EQ(y[i], 0.0f) << what << " at " << i;
      ASSERT_EQ(std::signbit(y[i]), std::signbit(s[i]) != std::signbit(scale[i]))
          << what << " at " << i << ": x " << s[i] << " scale " << scale[i];
    }
  }
}

// NaN, +Inf, -Inf, both infinities, Inf beside NaN, Inf beside finite values
// whose squares overflow, and finite values so large that float32 statistics
// overflow (no float32 answer: all NaN, where PyTorch's RMSNorm would silently
// give zeros). The rows propagate them as PyTorch does (above); the other rows are
// untouched by them.
TEST_P(NormKernelTest, NonFiniteRowsPropagateAsInPyTorch) {
  NormContext ctx;
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  for (int64_t dim : kEdgeDims) {
    for (bool in_place : {false, true}) {
      Inputs in = RandomInputs(9, dim, 13);
      in.x[1 * dim + dim / 2] = nan;
      in.x[2 * dim + dim - 1] = inf;
      in.x[3 * dim] = -inf;
      for (int64_t i = 0; i < dim; ++i) in.x[4 * dim + i] = (i % 2 ? 1e30f : -3e30f);
      in.x[6 * dim] = inf;  // Row 6: +Inf and -Inf (dim 1: +Inf alone).
      in.x[6 * dim + dim - 1] = dim > 1 ? -inf : inf;
      in.x[7 * dim] = inf;  // Row 7: Inf and NaN (dim 1: NaN alone).
      in.x[7 * dim + dim - 1] = nan;
      for (int64_t i = 0; i < dim; ++i) in.x[8 * dim + i] = (i % 2 ? 1e30f : -3e30f);
      in.x[8 * dim + dim / 2] = -inf;      // Row 8: -Inf among overflowing squares.
      if (dim > 2) in.x[2 * dim] = -0.0f;  // Signed zeros beside an Inf.
      if (dim > 2) in.x[2 * dim + 1] = 0.0f;
      const Options o{WeightMode::kPlain, IsLayerNorm(k_), ResidualMode::kNone, in_place,
                      1e-5f};
      const Outputs fast = RunKernel(k_, true, ctx, in, o);
      const Outputs ref = RunKernel(k_, false, ctx, in, o);
      for (int64_t r = 0; r < 9; ++r) {
        SCOPED_TRACE(::testing::Message() << Name(k_) << " row " << r << " dim " << dim);
        const float* s = in.x.data() + r * dim;
        if (RmsInfRow(k_, s, dim)) {
          ASSERT_TRUE(r == 2 || r == 3 || r == 6 || r == 8);
          ExpectRmsInfRow(s, ref.y.data() + r * dim, dim, in.weight, "ref");
          ExpectRmsInfRow(s, fast.y.data() + r * dim, dim, in.weight, "fast");
          continue;
        }
        const bool bad = r != 0 && r != 5 && !(r == 4 && dim == 1 && IsLayerNorm(k_));
        for (int64_t i = 0; i < dim; ++i) {
          const int64_t at = r * dim + i;
          if (bad) {
            ASSERT_TRUE(std::isnan(ref.y[at])) << "ref at " << i;
            ASSERT_TRUE(std::isnan(fast.y[at])) << "fast at " << i;
          } else {
            ASSERT_TRUE(std::isfinite(fast.y[at])) << "fast at " << i;
          }
        }
      }
      // Finite rows still match, and so does a lone -3e30 (LayerNorm of dim 1:
      // zero variance, so the bias).
      Inputs good = in;
      good.rows = 1;
      for (int64_t r : {0, 4, 5}) {
        if (r == 4 && !(dim == 1 && IsLayerNorm(k_))) continue;
        good.x.assign(in.x.begin() + r * dim, in.x.begin() + (r + 1) * dim);
        const std::vector<float> f(fast.y.begin() + r * dim,
                                   fast.y.begin() + (r + 1) * dim);
        const std::vector<float> e(ref.y.begin() + r * dim,
                                   ref.y.begin() + (r + 1) * dim);
        ExpectClose(k_, good, o, good.x, f, e);
      }
    }
  }
}

// NaN or Inf in the residual reaches the sum s = x + residual, which is what is
// normalized: the row propagates them as above. So does an Inf that the float32
// add makes of finite x and residual (3e38 + 3e38). The sum itself is still
// written (it is the next layer's residual stream).
TEST_P(NormKernelTest, NonFiniteResidualRowsPropagateAsInPyTorch) {
  NormContext ctx;
  for (int64_t dim : kEdgeDims) {
    Inputs in = RandomInputs(4, dim, 29);
    in.residual[dim + dim - 1] = std::numeric_limits<float>::infinity();
    in.residual[2 * dim] = std::numeric_limits<float>::quiet_NaN();
    in.x[3 * dim + dim / 2] = 3e38f;
    in.residual[3 * dim + dim / 2] = 3e38f;
    const Options o{
        WeightMode::kOffset, IsLayerNorm(k_), ResidualMode::kSeparateOut, false, 1e-5f,
        /*misaligned=*/true};
    const Outputs fast = RunKernel(k_, true, ctx, in, o);
    const Outputs ref = RunKernel(k_, false, ctx, in, o);
    const std::vector<float> s = Normalized(in, o);
    ASSERT_EQ(s[3 * dim + dim / 2], std::numeric_limits<float>::infinity());
    std::vector<float> scale(dim);
    for (int64_t i = 0; i < dim; ++i) scale[i] = 1.0f + in.weight[i];
    for (int64_t i = 0; i < dim; ++i) {
      ASSERT_TRUE(std::isfinite(fast.y[i]));
      ASSERT_TRUE(std::isnan(fast.y[2 * dim + i])) << "dim " << dim << " at " << i;
      if (IsLayerNorm(k_)) {
        ASSERT_TRUE(std::isnan(fast.y[dim + i])) << "dim " << dim << " at " << i;
        ASSERT_TRUE(std::isnan(fast.y[3 * dim + i])) << "dim " << dim << " at " << i;
      }
    }
    if (!IsLayerNorm(k_)) {
      for (int64_t r : {1, 3}) {
        SCOPED_TRACE(::testing::Message() << "dim " << dim << " row " << r);
        ExpectRmsInfRow(s.data() + r * dim, fast.y.data() + r * dim, dim, scale, "fast");
        ExpectRmsInfRow(s.data() + r * dim, ref.y.data() + r * dim, dim, scale, "ref");
      }
    }
    EXPECT_EQ(fast.residual_out[2 * dim - 1], std::numeric_limits<float>::infinity());
    ExpectClose(k_, in, o, s, fast.y, ref.y);
  }
}

// The twin-vs-fast sweep (MatchesReferenceWithEveryOption) on rows holding +-Inf,
// on odd sizes: one element, less than a vector, and a whole number of vectors
// plus a tail of one. Every option combination: weight, Gemma offset, bias,
// fused residual and its aliasing, in place, misaligned. Row 0 holds +Inf (and
// signed zeros), row 1 -Inf and +Inf, row 2 is finite, and row 3 holds 3e38,
// which the residual add (3e38 more) makes +Inf and which without a residual
// overflows the sum of squares (NaN, no float32 answer). Same NaN positions, same
// values elsewhere, and for RMSNorm's zeros the same signs, those of x * scale.
TEST_P(NormKernelTest, InfRowsMatchReferenceWithEveryOption) {
  NormContext ctx;
  const float inf = std::numeric_limits<float>::infinity();
  uint32_t seed = 41;
  for (int64_t dim : {1, 7, 4097}) {
    for (const Options& o : OptionSets(IsLayerNorm(k_), /*rows=*/3)) {
      Inputs in = RandomInputs(4, dim, seed++);
      in.x[dim - 1] = inf;
      if (dim > 2) {
        in.x[0] = 0.0f;
        in.x[1] = -0.0f;
      }
      in.x[dim] = -inf;
      if (dim > 1) in.x[dim + dim / 2] = inf;
      in.x[3 * dim + dim / 2] = 3e38f;
      in.residual[3 * dim + dim / 2] = 3e38f;
      SCOPED_TRACE(::testing::Message() << "dim " << dim << " " << Describe(o));
      CheckAgainstReference(k_, ctx, in, o);
      if (IsLayerNorm(k_)) continue;
      const Outputs fast = RunKernel(k_, true, ctx, in, o);
      const Outputs ref = RunKernel(k_, false, ctx, in, o);
      const std::vector<float> s = Normalized(in, o);
      for (int64_t at = 0; at < 4 * dim; ++at) {
        if (fast.y[at] == 0.0f || ref.y[at] == 0.0f) {
          ASSERT_EQ(std::signbit(fast.y[at]), std::signbit(ref.y[at]))
              << "at " << at << ": fast " << fast.y[at] << " ref " << ref.y[at];
        }
      }
      for (int64_t r : {0, 1}) ASSERT_TRUE(RmsInfRow(k_, s.data() + r * dim, dim));
      ASSERT_EQ(RmsInfRow(k_, s.data() + 3 * dim, dim),
                o.residual != ResidualMode::kNone);
      std::vector<float> scale(dim, 1.0f);
      for (int64_t i = 0; i < dim; ++i) {
        if (o.weight == WeightMode::kPlain) scale[i] = in.weight[i];
        if (o.weight == WeightMode::kOffset) scale[i] = 1.0f + in.weight[i];
      }
      for (int64_t r = 0; r < 4; ++r) {
        if (!RmsInfRow(k_, s.data() + r * dim, dim)) continue;
        SCOPED_TRACE(::testing::Message() << "row " << r);
        ExpectRmsInfRow(s.data() + r * dim, fast.y.data() + r * dim, dim, scale, "fast");
      }
    }
  }
}

// Outputs of kNormStreamMinBytes and more take the hand loops' streaming stores,
// which first plain-store the elements before y's first aligned vector, and
// stream the residual sum only if it is aligned there too: 512 rows of 4096
// (exactly the threshold; no row tail) and of 4097 (a tail, and every row
// starting at a different alignment), with y and the residual sum aligned,
// misaligned alike, and misaligned differently. (The sweeps cover both paths
// too: 512 x 4096 and 512 x 4097 stream, everything smaller does not.) oneDNN's
// LayerNorm has no streaming path of ours; it runs the same large cases as a plain
// check against the reference.
TEST_P(NormKernelTest, LargeOutputsTakeStreamingStores) {
  NormContext ctx;
  for (int64_t dim : {4096, 4097}) {
    const int64_t rows = 512;
    ASSERT_GE(rows * dim * static_cast<int64_t>(sizeof(float)),
              internal::kNormStreamMinBytes);
    const Inputs in = RandomInputs(rows, dim, 31);
    const float epsilon = IsLayerNorm(k_) ? 1e-5f : 1e-6f;
    for (const Options& o :
         {Options{WeightMode::kPlain, IsLayerNorm(k_), ResidualMode::kSeparateOut, false,
                  epsilon, /*misaligned=*/false},
          Options{WeightMode::kOffset, IsLayerNorm(k_), ResidualMode::kSeparateOut, false,
                  epsilon, /*misaligned=*/true},
          Options{WeightMode::kPlain, false, ResidualMode::kOutIsResidual, false, epsilon,
                  /*misaligned=*/false, /*y_misaligned=*/true},
          Options{WeightMode::kNone, false, ResidualMode::kNone, /*in_place=*/true,
                  epsilon}}) {
      SCOPED_TRACE(Describe(o));
      CheckAgainstReference(k_, ctx, in, o);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Kernels, NormKernelTest, ::testing::ValuesIn(AllKernels()),
                         [](const ::testing::TestParamInfo<KernelOnTarget>& info) {
                           return TestName(info.param);
                         });

// LayerNorm() is the hand loop on every shape (measured: norm.cc): the same bits,
// from one row to a batch far past the old oneDNN crossover.
TEST(NormDispatchTest, LayerNormIsTheHandLoopOnEveryShape) {
  for (auto [rows, dim] : {std::pair<int64_t, int64_t>{1, 768},
                           {1, 4096},
                           {16, 768},
                           {128, 768},
                           {64, 4096}}) {
    const Inputs in = RandomInputs(rows, dim, 37);
    NormParams p;
    p.weight = in.weight.data();
    p.bias = in.bias.data();
    std::vector<float> dispatched(in.x.size()), loop(in.x.size());
    LayerNorm(in.x.data(), rows, dim, p, dispatched.data());
    internal::LayerNormLoop(in.x.data(), rows, dim, p, loop.data());
    ASSERT_EQ(0, std::memcmp(dispatched.data(), loop.data(), loop.size() * sizeof(float)))
        << rows << "x" << dim;
  }
}

TEST(NormContextTest, PrimitivesAreCreatedOnceAndBounded) {
  NormContext ctx;
  const Inputs in = RandomInputs(80, 64, 3);
  std::vector<float> y(in.x.size());
  NormParams p;
  p.weight = in.weight.data();
  EXPECT_EQ(ctx.CachedPrimitiveCount(), 0);
  for (int i = 0; i < 3; ++i)
    baseline::LayerNormOneDnn(ctx, in.x.data(), 16, 64, p, y.data());
  EXPECT_EQ(ctx.CachedPrimitiveCount(), 1) << "reused, not rebuilt per call";
  p.bias = in.bias.data();  // Different flags: a second primitive.
  baseline::LayerNormOneDnn(ctx, in.x.data(), 16, 64, p, y.data());
  EXPECT_EQ(ctx.CachedPrimitiveCount(), 2);
  p.epsilon = 1e-6f;  // Different epsilon: a third.
  baseline::LayerNormOneDnn(ctx, in.x.data(), 16, 64, p, y.data());
  EXPECT_EQ(ctx.CachedPrimitiveCount(), 3);
  // Many row counts: the cache stays bounded, and results stay right after clearing.
  for (int64_t rows = 1; rows <= 80; ++rows) {
    baseline::LayerNormOneDnn(ctx, in.x.data(), rows, 64, p, y.data());
    EXPECT_LE(ctx.CachedPrimitiveCount(), 64);
  }
  std::vector<float> ref(y.size());
  LayerNormReference(in.x.data(), 80, 64, p, ref.data());
  for (size_t i = 0; i < y.size(); ++i)
    ASSERT_NEAR(y[i], ref[i], kRelTol * std::max(1.0f, std::fabs(ref[i])));
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
        baseline::LayerNormOneDnn(ctx, in.x.data(), 128, 768, p, results[t].data());
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
