// Holds the fast activation kernels (kernels/activation/activation.h) to their scalar
// references: every strategy (the dispatching Activate / GatedActivate, the Highway
// loops with plain and streaming stores -- the plain ones on every Highway target
// this CPU runs --, the oneDNN eltwise baseline of bench/baseline/) for every
// activation, on
// D in {1, 7, 64, 4096, 4097} x T in {1, 3, 512}, aligned and misaligned by one
// element, in place; then magnitudes near 1e4 and 1e20, NaN and +-Inf, a dense
// sweep over all float32 magnitudes (GELU's tail above all), PyTorch's
// values at the extremes, the oneDNN baseline's primitive cache and per-thread
// contexts.
//
// Tolerance, element-wise: |fast - ref| <= 8 eps32 max(1, |ref|), eps32 = 2^-23.
// The reference is the formula in double rounded once, so this bounds the fast
// kernel's own float32 error. Each fast formula is a short chain: exp (1-2 ulp:
// Cephes' expf in OnePlusExp, a fitted polynomial in GELU, which multiplies it by a
// rational fit) or tanh (a rational fit, 3 ulp), then
// an add, a division and a product, each rounding by half an ulp of an
// O(max(1, |y|)) value; a few ulps in all, and we
// observe at most 2.2 eps32 (oneDNN's GELU at x = -3.1). 8 ulps leaves margin and
// still catches real mistakes: the tanh-GELU constant 0.044715 off in its 4th
// digit, 1.702 written as 1.7 in QuickGELU, or sigmoid(x) for silu are all >1e-4
// off. Where the output is below 1 the bound is absolute (8 eps32): there the
// relative error of the fast kernels may grow (exp's argument carries its own
// rounding; PyTorch's formulas, which the kernels follow, flush silu(x < -88.7)
// to -0), but it stays far below anything the float32 wire or PyTorch resolves.
// Gated: y = float(act(g)) * u, so act's error is scaled by |u| and the product
// rounds once more: |fast - ref| <= 8 eps32 max(|u|, |ref|) + eps32 |ref|.
// The Highway GELU is also held to a relative bound (GeluErfTest).
#include "kernels/activation/activation.h"

#include <gtest/gtest.h>
#include <malloc.h>
#include <omp.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <map>
#include <random>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "bench/baseline/activate_onednn.h"
#include "hwy/targets.h"
#include "kernels/activation/activation_internal.h"
#include "tests/testing/highway_target_scope.h"
#include "tests/testing/output_stats.h"

namespace layerserve::kernels {
namespace {

using testing::TargetScope;

// The fast kernels keep no state; only the oneDNN baseline caches primitives.
using baseline::ActivationContext;
using baseline::kOneDnnChunk;
using baseline::kOneDnnSmallChunk;

constexpr double kEps32 = std::numeric_limits<float>::epsilon();
constexpr double kUlps = 8;
constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNan = std::numeric_limits<float>::quiet_NaN();

// The server sets one OpenMP thread per worker; do the same for the test thread.
// Freed buffers are kept by malloc instead of returned to the OS: the sweep
// allocates many 8 MiB buffers, and each fresh page costs ~4 ms per MiB to touch
// on these machines (docs/perf/2026-11-30-activation-kernels.md), which dominated the
// test's run time.
class TestSetup : public ::testing::Environment {
 public:
  void SetUp() override {
    omp_set_num_threads(1);
    mallopt(M_MMAP_THRESHOLD, 32 << 20);  // glibc's maximum.
    mallopt(M_TRIM_THRESHOLD, 1 << 30);
  }
};
const auto* const kTestSetup = ::testing::AddGlobalTestEnvironment(new TestSetup);

constexpr Activation kAllActivations[] = {
    Activation::kRelu,    Activation::kGelu, Activation::kGeluTanh, Activation::kSilu,
    Activation::kSigmoid, Activation::kTanh, Activation::kQuickGelu};

// The activations that gate the GLU family (SwiGLU, GeGLU, GeGLU-tanh, ReGLU). The
// kernels accept any; these are the ones the server sends.
constexpr Activation kGateActivations[] = {Activation::kSilu, Activation::kGelu,
                                           Activation::kGeluTanh, Activation::kRelu};

enum class Strategy { kFast, kHighway, kHighwayStream, kOneDnn };

const char* Name(Strategy s) {
  switch (s) {
    case Strategy::kFast:
      return "Fast";
    case Strategy::kHighway:
      return "Highway";
    case Strategy::kHighwayStream:
      return "HighwayStream";
    case Strategy::kOneDnn:
      return "OneDnn";
  }
  return "?";
}

// oneDNN's eltwise ReLU maps NaN to 0 (PyTorch keeps NaN), so the oneDNN baseline
// is not held to PyTorch for ReLU.
bool Applies(Strategy s, Activation act) {
  return !(s == Strategy::kOneDnn && act == Activation::kRelu);
}

// The loops also take the statistics of their output as they write it, when asked
// (Activate's output_stats). Every Highway run below is repeated that way, first,
// into a buffer of its own (y may be the input): the output must be the same and
// the statistics those of the output (tests/testing/output_stats.h).
void ExpectStatsRunMatches(const std::vector<float>& with_stats, const ValueStats& got,
                           const float* y, int64_t n) {
  testing::ExpectSameOutput(with_stats.data(), y, n);
  testing::ExpectStatsOf(got, y, n);
}

// The kernels check their inputs as they read them when they take statistics
// (inputs_finite): true exactly when every value read was finite.
bool AllFinite(const float* v, int64_t rows, int64_t dim, int64_t stride) {
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t j = 0; j < dim; ++j) {
      if (!std::isfinite(v[r * stride + j])) return false;
    }
  }
  return true;
}

void RunUnaryOnce(Strategy s, ActivationContext& ctx, Activation act, const float* x,
                  int64_t n, float* y, ValueStats* stats, bool* inputs_finite) {
  switch (s) {
    case Strategy::kFast:
      return Activate(act, x, n, y, stats, inputs_finite);
    case Strategy::kHighway:
      return internal::ActivateHighway(act, x, n, y, /*stream=*/false, stats,
                                       inputs_finite);
    case Strategy::kHighwayStream:
      return internal::ActivateHighway(act, x, n, y, /*stream=*/true, stats,
                                       inputs_finite);
    case Strategy::kOneDnn:
      return baseline::ActivateOneDnn(ctx, act, x, n, y);
  }
}

void RunUnary(Strategy s, ActivationContext& ctx, Activation act, const float* x,
              int64_t n, float* y) {
  if (s == Strategy::kOneDnn) return RunUnaryOnce(s, ctx, act, x, n, y, nullptr, nullptr);
  std::vector<float> with_stats(n);
  ValueStats stats;
  bool inputs_finite = false;
  const bool want_finite = AllFinite(x, 1, n, n);
  RunUnaryOnce(s, ctx, act, x, n, with_stats.data(), &stats, &inputs_finite);
  RunUnaryOnce(s, ctx, act, x, n, y, nullptr, nullptr);
  ExpectStatsRunMatches(with_stats, stats, y, n);
  EXPECT_EQ(inputs_finite, want_finite) << "n " << n;
}

// Gated kernels have no oneDNN strategy: kOneDnn is not used with them.
void RunGated(Strategy s, Activation act, const float* gate, const float* up,
              int64_t rows, int64_t dim, int64_t stride, float* y) {
  const auto run = [&](float* out, ValueStats* stats, bool* inputs_finite) {
    switch (s) {
      case Strategy::kFast:
      case Strategy::kOneDnn:
        return GatedActivate(act, gate, up, rows, dim, stride, out, stats, inputs_finite);
      case Strategy::kHighway:
        return internal::GatedActivateHighway(act, gate, up, rows, dim, stride, out,
                                              false, stats, inputs_finite);
      case Strategy::kHighwayStream:
        return internal::GatedActivateHighway(act, gate, up, rows, dim, stride, out, true,
                                              stats, inputs_finite);
    }
  };
  std::vector<float> with_stats(rows * dim);
  ValueStats stats;
  bool inputs_finite = false;
  const bool want_finite =
      AllFinite(gate, rows, dim, stride) && AllFinite(up, rows, dim, stride);
  run(with_stats.data(), &stats, &inputs_finite);
  run(y, nullptr, nullptr);
  ExpectStatsRunMatches(with_stats, stats, y, rows * dim);
  EXPECT_EQ(inputs_finite, want_finite) << rows << " x " << dim;
}

// Compares with the tolerance stated at the top. `up` is null for element-wise
// outputs. NaN must match NaN, +-Inf must match exactly.
void ExpectClose(const float* fast, const float* ref, const float* up, int64_t n,
                 const std::string& what) {
  int reported = 0;
  for (int64_t i = 0; i < n; ++i) {
    const double r = ref[i], f = fast[i];
    bool ok;
    double tol = 0;
    if (std::isnan(r)) {
      ok = std::isnan(f);
    } else if (std::isinf(r)) {
      ok = f == r;
    } else {
      tol = up == nullptr
                ? kUlps * kEps32 * std::max(1.0, std::fabs(r))
                : kUlps * kEps32 * std::max<double>(std::fabs(up[i]), std::fabs(r)) +
                      kEps32 * std::fabs(r);
      ok = std::fabs(f - r) <= tol;
    }
    if (!ok && reported++ < 5) {
      ADD_FAILURE() << what << " at " << i << ": fast " << fast[i] << " ref " << ref[i]
                    << " err " << std::fabs(f - r) << " tol " << tol
                    << (up != nullptr ? " up " + std::to_string(up[i]) : "");
    }
  }
}

// Rows of mixed scale (std 0.5, 2, 8): the body and both tails of every
// activation, including exp's overflow region (|x| > 88) in a few rows' tails.
// Memoized: drawing them was a third of the test's time.
const std::vector<float>& RandomValues(int64_t rows, int64_t dim, uint32_t seed) {
  static auto* cache =
      new std::map<std::tuple<int64_t, int64_t, uint32_t>, std::vector<float>>();
  std::vector<float>& v = (*cache)[{rows, dim, seed}];
  if (!v.empty()) return v;
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  v.resize(rows * dim);
  const float scales[] = {0.5f, 2.0f, 8.0f};
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t i = 0; i < dim; ++i) v[r * dim + i] = scales[r % 3] * normal(rng);
  }
  return v;
}

struct Shape {
  int64_t rows, dim;
};

std::vector<Shape> SweepShapes() {
  std::vector<Shape> shapes;
  for (int64_t rows : {1, 3, 512}) {
    for (int64_t dim : {1, 7, 64, 4096, 4097}) shapes.push_back({rows, dim});
  }
  return shapes;
}

// A strategy, an activation, and the Highway target the loops run on (0: the
// best the CPU has, as in production).
struct Case {
  Strategy strategy;
  Activation act;
  int64_t target = 0;
};

std::string CaseName(const ::testing::TestParamInfo<Case>& info) {
  std::string name =
      std::string(Name(info.param.strategy)) + "_" + ActivationName(info.param.act);
  if (info.param.target != 0)
    name += std::string("_") + hwy::TargetName(info.param.target);
  return name;
}

// The plain Highway loops on every target the CPU supports and this binary was
// compiled for; the other strategies (whose Highway part is the same code) on
// the best one.
std::vector<Case> Cases(std::initializer_list<Strategy> strategies) {
  std::vector<Case> cases;
  for (Strategy s : strategies) {
    for (Activation act : kAllActivations) {
      if (!Applies(s, act)) continue;
      if (s != Strategy::kHighway) {
        cases.push_back({s, act, 0});
        continue;
      }
      for (int64_t target : hwy::SupportedAndGeneratedTargets()) {
        cases.push_back({s, act, target});
      }
    }
  }
  return cases;
}

std::vector<Case> UnaryCases() {
  return Cases(
      {Strategy::kFast, Strategy::kHighway, Strategy::kHighwayStream, Strategy::kOneDnn});
}

std::vector<Case> GatedCases() {
  return Cases({Strategy::kFast, Strategy::kHighway, Strategy::kHighwayStream});
}

class UnaryTest : public ::testing::TestWithParam<Case> {
 protected:
  UnaryTest() : target_(GetParam().target) {}

  // Runs fast and reference on x (copied `offset` elements into fresh buffers, so
  // offset 1 misaligns both x and y), also in place, and compares.
  void Check(const std::vector<float>& x, int64_t offset, const std::string& what) {
    const Case c = GetParam();
    const int64_t n = static_cast<int64_t>(x.size());
    std::vector<float> in(n + offset), out(n + offset), ref(n);
    std::copy(x.begin(), x.end(), in.begin() + offset);
    RunUnary(c.strategy, ctx_, c.act, in.data() + offset, n, out.data() + offset);
    ActivateReference(c.act, x.data(), n, ref.data());
    ExpectClose(out.data() + offset, ref.data(), nullptr, n, what);
    // In place: y == x.
    RunUnary(c.strategy, ctx_, c.act, in.data() + offset, n, in.data() + offset);
    ExpectClose(in.data() + offset, ref.data(), nullptr, n, what + " in place");
  }

  const TargetScope target_;
  ActivationContext ctx_;
};

TEST(ActivationTargetTest, TargetScopeSelectsTheHighwayTarget) {
  for (int64_t target : hwy::SupportedAndGeneratedTargets()) {
    const TargetScope scope(target);
    EXPECT_STREQ(internal::ActivationHighwayTarget(), hwy::TargetName(target));
  }
}

TEST_P(UnaryTest, MatchesReferenceOnEveryShapeAlignedAndMisaligned) {
  uint32_t seed = 1;
  for (const Shape& s : SweepShapes()) {
    const std::vector<float>& x = RandomValues(s.rows, s.dim, seed++);
    for (int64_t offset : {0, 1}) {
      Check(x, offset,
            std::to_string(s.rows) + "x" + std::to_string(s.dim) + " offset " +
                std::to_string(offset));
    }
  }
}

// |x| near 1e4 and 1e20, both signs: far past every activation's transition, so
// outputs are x, 0, +-1 or -0 (and x^3 overflows float32 in GELU-tanh at 1e20).
TEST_P(UnaryTest, MagnitudesNear1e4And1e20) {
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> unit(0.5f, 2.0f);
  for (float magnitude : {1e4f, 1e20f}) {
    std::vector<float> x(4097);
    for (size_t i = 0; i < x.size(); ++i) {
      x[i] = (i % 2 ? -1.0f : 1.0f) * magnitude * unit(rng);
    }
    Check(x, 1, "magnitude " + std::to_string(magnitude));
  }
}

// NaN, +Inf, -Inf among finite values, at the first and last element (vector head
// and tail) and inside; also the float32 extremes.
TEST_P(UnaryTest, NanAndInfinity) {
  // The last two sizes run oneDNN's large and small chunks and a Highway tail.
  for (int64_t n : {int64_t{1}, int64_t{7}, int64_t{64}, int64_t{4097},
                    3 * kOneDnnChunk + 5, kOneDnnChunk + 2 * kOneDnnSmallChunk + 3}) {
    std::vector<float> x = RandomValues(1, n, 5);
    const float specials[] = {kNan, kInf, -kInf, std::numeric_limits<float>::max(),
                              -std::numeric_limits<float>::max()};
    for (int64_t k = 0; k < 5; ++k) {
      x[(k * 7919) % n] = specials[k];
      x[n - 1 - (k * 104729) % n] = specials[(k + 1) % 5];
    }
    Check(x, 1, "n " + std::to_string(n));
  }
}

INSTANTIATE_TEST_SUITE_P(Strategies, UnaryTest, ::testing::ValuesIn(UnaryCases()),
                         CaseName);

class GatedTest : public ::testing::TestWithParam<Case> {
 protected:
  GatedTest() : target_(GetParam().target) {}

  // Both layouts (two tensors; packed [rows, 2 dim]), aligned or misaligned by one
  // element, and in place (y == gate).
  void Check(const std::vector<float>& gate, const std::vector<float>& up, int64_t rows,
             int64_t dim, int64_t offset, const std::string& what) {
    const Case c = GetParam();
    const int64_t n = rows * dim;
    std::vector<float> ref(n);
    GatedActivateReference(c.act, gate.data(), up.data(), rows, dim, dim, ref.data());

    // Two tensors.
    std::vector<float> g(n + offset), u(n + offset), y(n + offset);
    std::copy(gate.begin(), gate.end(), g.begin() + offset);
    std::copy(up.begin(), up.end(), u.begin() + offset);
    RunGated(c.strategy, c.act, g.data() + offset, u.data() + offset, rows, dim, dim,
             y.data() + offset);
    ExpectClose(y.data() + offset, ref.data(), up.data(), n, what + " two tensors");
    RunGated(c.strategy, c.act, g.data() + offset, u.data() + offset, rows, dim, dim,
             g.data() + offset);
    ExpectClose(g.data() + offset, ref.data(), up.data(), n,
                what + " two tensors in place");

    // Packed: each row is [gate | up].
    std::vector<float> packed(2 * n + offset);
    for (int64_t r = 0; r < rows; ++r) {
      std::copy(gate.begin() + r * dim, gate.begin() + (r + 1) * dim,
                packed.begin() + offset + 2 * r * dim);
      std::copy(up.begin() + r * dim, up.begin() + (r + 1) * dim,
                packed.begin() + offset + 2 * r * dim + dim);
    }
    const float* p = packed.data() + offset;
    RunGated(c.strategy, c.act, p, p + dim, rows, dim, 2 * dim, y.data() + offset);
    ExpectClose(y.data() + offset, ref.data(), up.data(), n, what + " packed");
    // In place over the packed buffer: y == gate of row 0; row r's output lands
    // before row r's inputs, so nothing unread is overwritten.
    float* q = packed.data() + offset;
    RunGated(c.strategy, c.act, q, q + dim, rows, dim, 2 * dim, q);
    ExpectClose(q, ref.data(), up.data(), n, what + " packed in place");
  }

  const TargetScope target_;
};

TEST_P(GatedTest, MatchesReferenceOnEveryShapeAlignedAndMisaligned) {
  uint32_t seed = 100;
  for (const Shape& s : SweepShapes()) {
    const std::vector<float>& gate = RandomValues(s.rows, s.dim, seed++);
    const std::vector<float>& up = RandomValues(s.rows, s.dim, seed++);
    for (int64_t offset : {0, 1}) {
      Check(gate, up, s.rows, s.dim, offset,
            std::to_string(s.rows) + "x" + std::to_string(s.dim) + " offset " +
                std::to_string(offset));
    }
  }
}

// Gate or up near 1e4 and 1e20 (up 1e20 times act(gate) 1e20 overflows to +-inf in
// both kernels alike).
TEST_P(GatedTest, MagnitudesNear1e4And1e20) {
  std::mt19937 rng(9);
  std::uniform_real_distribution<float> unit(0.5f, 2.0f);
  const int64_t rows = 3, dim = 4097;
  for (float magnitude : {1e4f, 1e20f}) {
    std::vector<float> big(rows * dim), normal = RandomValues(rows, dim, 11);
    for (size_t i = 0; i < big.size(); ++i) {
      big[i] = (i % 3 ? -1.0f : 1.0f) * magnitude * unit(rng);
    }
    const std::string m = "magnitude " + std::to_string(magnitude);
    Check(big, normal, rows, dim, 1, m + " gate");
    Check(normal, big, rows, dim, 1, m + " up");
    Check(big, big, rows, dim, 1, m + " both");
  }
}

// NaN and +-Inf in gate, in up, and in both (e.g. act(gate) = 0 times up = inf is
// NaN, as in PyTorch).
TEST_P(GatedTest, NanAndInfinity) {
  const int64_t rows = 3, dim = 67;
  const float specials[] = {kNan, kInf, -kInf, 0.0f, -30.0f, 30.0f};
  std::vector<float> gate = RandomValues(rows, dim, 21), up = RandomValues(rows, dim, 22);
  int64_t at = 0;
  for (float g : specials) {
    for (float u : specials) {
      gate[at] = g;
      up[at] = u;
      at += 3;
    }
  }
  gate.back() = kNan;  // The vector tail too.
  up[dim - 1] = -kInf;
  Check(gate, up, rows, dim, 0, "specials");
  Check(gate, up, rows, dim, 1, "specials misaligned");
}

INSTANTIATE_TEST_SUITE_P(Strategies, GatedTest, ::testing::ValuesIn(GatedCases()),
                         CaseName);

// Floats across the whole range, both signs: every 1021st bit pattern from the
// smallest subnormal to FLT_MAX (about 2 million values, ~8000 per binade).
std::vector<float> SweepValues() {
  std::vector<float> x;
  for (uint32_t bits = 1; bits < 0x7f800000u; bits += 1021) {
    float v;
    std::memcpy(&v, &bits, sizeof v);
    x.push_back(v);
    x.push_back(-v);
  }
  return x;
}

class DenseSweepTest : public ::testing::TestWithParam<Case> {};

TEST_P(DenseSweepTest, EveryMagnitudeFromSubnormalToMax) {
  const Case c = GetParam();
  const TargetScope target(c.target);
  const std::vector<float> x = SweepValues();
  const int64_t n = static_cast<int64_t>(x.size());
  std::vector<float> fast(n), ref(n);
  ActivationContext ctx;
  RunUnary(c.strategy, ctx, c.act, x.data(), n, fast.data());
  ActivateReference(c.act, x.data(), n, ref.data());
  ExpectClose(fast.data(), ref.data(), nullptr, n, "sweep");
}

// The Highway GELU, relative to its output wherever that is a normal float (down
// to GELU(-13.2) ~ 1e-38): |fast - ref| <= (10 + x^2) 2^-24 |ref|. The x^2 term is
// the rounding of the exponent -t^2/2, t = |x| (kernels/activation/activation_fast.cc,
// struct Gelu): t*t rounds by up to t^2 2^-24 relative, an absolute error of t^2/2 2^-24
// in the exponent, which is a relative one in exp. 10 covers the rest: the fit of Mills'
// ratio (1.7 2^-24 below |x| = 1, tests/kernels/activation/gelu_erfc_fit.py), exp's
// polynomial (1.9), its evaluation and the final products. Observed worst: 0.75-0.85 of
// the bound, near x = -12.9 (0.82 predicted by the script); the erfc form GELU had before
// needed (16 + 2 x^2).
void ExpectGeluRelativelyClose(const std::vector<float>& x,
                               const std::vector<float>& fast,
                               const std::vector<float>& ref) {
  int reported = 0, checked = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    if (!(std::fabs(ref[i]) >= std::numeric_limits<float>::min())) continue;
    const double xi = x[i];
    const double tol = (10 + xi * xi) * std::ldexp(1.0, -24) * std::fabs(ref[i]);
    ++checked;
    if (!(std::fabs(static_cast<double>(fast[i]) - ref[i]) <= tol) && reported++ < 5) {
      ADD_FAILURE() << "x " << x[i] << ": fast " << fast[i] << " ref " << ref[i]
                    << " tol " << tol;
    }
  }
  EXPECT_GT(checked, 1000000);
}

TEST(GeluErfTest, HighwayGeluIsRelativelyAccurateDownToTheSubnormals) {
  const std::vector<float> x = SweepValues();
  const int64_t n = static_cast<int64_t>(x.size());
  std::vector<float> ref(n);
  ActivateReference(Activation::kGelu, x.data(), n, ref.data());
  for (int64_t target : hwy::SupportedAndGeneratedTargets()) {
    const TargetScope scope(target);
    SCOPED_TRACE(hwy::TargetName(target));
    std::vector<float> fast(n);
    internal::ActivateHighway(Activation::kGelu, x.data(), n, fast.data(), false);
    ExpectGeluRelativelyClose(x, fast, ref);
  }
}

INSTANTIATE_TEST_SUITE_P(
    Strategies, DenseSweepTest,
    ::testing::ValuesIn(Cases({Strategy::kHighway, Strategy::kOneDnn})), CaseName);

// What PyTorch 1.13 returns at the extremes (printed by torch on float32 tensors);
// every strategy must give the same. Zeros compare equal whatever their sign.
struct TorchValue {
  Activation act;
  float x, y;
};

TEST(ActivationTest, PyTorchValuesAtTheExtremes) {
  const float kMax = std::numeric_limits<float>::max();
  const TorchValue table[] = {
      {Activation::kRelu, -kInf, 0},         {Activation::kRelu, kNan, kNan},
      {Activation::kRelu, kInf, kInf},       {Activation::kGelu, -kInf, kNan},
      {Activation::kGelu, kInf, kInf},       {Activation::kGelu, -1e20f, 0},
      {Activation::kGelu, 1e20f, 1e20f},     {Activation::kGelu, -1e4f, 0},
      {Activation::kGelu, kMax, kMax},       {Activation::kGeluTanh, -kInf, kNan},
      {Activation::kGeluTanh, kInf, kInf},   {Activation::kGeluTanh, -1e20f, 0},
      {Activation::kGeluTanh, 1e20f, 1e20f}, {Activation::kGeluTanh, -kMax, 0},
      {Activation::kSilu, -kInf, kNan},      {Activation::kSilu, kInf, kInf},
      {Activation::kSilu, -1e20f, 0},        {Activation::kSilu, 1e20f, 1e20f},
      {Activation::kSilu, kNan, kNan},       {Activation::kSigmoid, -kInf, 0},
      {Activation::kSigmoid, kInf, 1},       {Activation::kSigmoid, -1e20f, 0},
      {Activation::kSigmoid, kNan, kNan},    {Activation::kTanh, -kInf, -1},
      {Activation::kTanh, kInf, 1},          {Activation::kTanh, kNan, kNan},
      {Activation::kQuickGelu, -kInf, kNan}, {Activation::kQuickGelu, kInf, kInf},
      {Activation::kQuickGelu, -kMax, 0},    {Activation::kQuickGelu, kMax, kMax},
  };
  ActivationContext ctx;
  for (Strategy s : {Strategy::kFast, Strategy::kHighway, Strategy::kHighwayStream,
                     Strategy::kOneDnn}) {
    for (const TorchValue& t : table) {
      if (!Applies(s, t.act)) continue;
      // A full oneDNN chunk of x, so that the oneDNN strategy computes it itself.
      // y holds the one-element call at 0 and the full call from 1 on.
      std::vector<float> x(kOneDnnChunk, t.x), y(x.size() + 1), ref(x.size());
      RunUnary(s, ctx, t.act, x.data(), 1, y.data());
      RunUnary(s, ctx, t.act, x.data(), static_cast<int64_t>(x.size()), y.data() + 1);
      ActivateReference(t.act, x.data(), 1, ref.data());
      for (float got : {y[0], y[1], y.back(), ref[0]}) {
        if (std::isnan(t.y)) {
          EXPECT_TRUE(std::isnan(got))
              << Name(s) << " " << ActivationName(t.act) << "(" << t.x << ") = " << got;
        } else {
          EXPECT_EQ(got, t.y) << Name(s) << " " << ActivationName(t.act) << "(" << t.x
                              << ")";
        }
      }
    }
  }
}

// Subnormal inputs: tanh(x) = x, relu keeps them, gelu halves them, sigmoid is 1/2
// (no flush to zero anywhere).
TEST(ActivationTest, SubnormalInputsAreNotFlushed) {
  const float tiny = std::numeric_limits<float>::denorm_min() * 64;
  ActivationContext ctx;
  for (Strategy s : {Strategy::kFast, Strategy::kHighway, Strategy::kOneDnn}) {
    std::vector<float> x(kOneDnnChunk, tiny), y(x.size());
    RunUnary(s, ctx, Activation::kTanh, x.data(), x.size(), y.data());
    EXPECT_EQ(y[0], tiny) << Name(s);
    RunUnary(s, ctx, Activation::kGelu, x.data(), x.size(), y.data());
    EXPECT_EQ(y[0], tiny / 2) << Name(s);
    RunUnary(s, ctx, Activation::kSigmoid, x.data(), x.size(), y.data());
    EXPECT_EQ(y[0], 0.5f) << Name(s);
    if (s == Strategy::kOneDnn) continue;
    RunUnary(s, ctx, Activation::kRelu, x.data(), x.size(), y.data());
    EXPECT_EQ(y[0], tiny) << Name(s);
  }
}

TEST(ActivationTest, EmptyInputsWriteNothing) {
  float y = 42;
  const float x = 1;
  Activate(Activation::kSilu, &x, 0, &y);
  GatedActivate(Activation::kSilu, &x, &x, 0, 5, 5, &y);
  GatedActivate(Activation::kSilu, &x, &x, 5, 0, 0, &y);
  EXPECT_EQ(y, 42);
}

TEST(ActivationDispatchTest, StreamingStoresOnlyFarPastTheCaches) {
  EXPECT_FALSE(internal::UsesStreamingStores(4096));
  EXPECT_TRUE(internal::UsesStreamingStores(int64_t{1} << 24));
}

// oneDNN's ReLU does not propagate NaN: why Activate() could not use it even where
// it is as fast (activation.cc). If a future oneDNN fixes it, this fails and the
// exclusion in Applies() can be revisited.
TEST(ActivationDispatchTest, OneDnnReluMapsNanToZero) {
  ActivationContext ctx;
  std::vector<float> x(kOneDnnChunk, kNan), y(x.size());
  baseline::ActivateOneDnn(ctx, Activation::kRelu, x.data(), x.size(), y.data());
  EXPECT_EQ(y[0], 0.0f);
}

TEST(ActivationContextTest, AtMostTwoPrimitivesPerActivationWhateverTheSize) {
  ActivationContext ctx;
  EXPECT_EQ(ctx.CachedPrimitiveCount(), 0);
  const std::vector<float>& x = RandomValues(1, 3 * kOneDnnChunk + 17, 1);
  std::vector<float> y(x.size());
  baseline::ActivateOneDnn(ctx, Activation::kSilu, x.data(), kOneDnnChunk, y.data());
  EXPECT_EQ(ctx.CachedPrimitiveCount(), 1) << "one large chunk";
  for (int64_t n : {2 * kOneDnnChunk + 5, static_cast<int64_t>(x.size()),
                    kOneDnnChunk + 3 * kOneDnnSmallChunk + 1}) {
    baseline::ActivateOneDnn(ctx, Activation::kSilu, x.data(), n, y.data());
  }
  EXPECT_EQ(ctx.CachedPrimitiveCount(), 2) << "and one small chunk, whatever n";
  baseline::ActivateOneDnn(ctx, Activation::kGelu, x.data(), kOneDnnSmallChunk, y.data());
  EXPECT_EQ(ctx.CachedPrimitiveCount(), 3);
  // Below one small chunk oneDNN is not called at all.
  ActivationContext small;
  baseline::ActivateOneDnn(small, Activation::kTanh, x.data(), kOneDnnSmallChunk - 1,
                           y.data());
  EXPECT_EQ(small.CachedPrimitiveCount(), 0);
}

// The server's setup: worker threads, each with omp_set_num_threads(1) and its own
// context, running concurrently; one worker with 2 OpenMP threads. Results must not
// depend on either.
TEST(ActivationContextTest, OneContextPerWorkerThread) {
  const std::vector<float>& x = RandomValues(1, 4 * kOneDnnChunk + 3, 7);
  const int64_t n = static_cast<int64_t>(x.size());
  std::vector<float> ref(n);
  ActivateReference(Activation::kGelu, x.data(), n, ref.data());
  std::vector<std::vector<float>> results(3, std::vector<float>(n));
  std::vector<std::thread> workers;
  for (int t = 0; t < 3; ++t) {
    workers.emplace_back([&, t] {
      omp_set_num_threads(t == 2 ? 2 : 1);
      ActivationContext ctx;
      for (int i = 0; i < 5; ++i) {
        baseline::ActivateOneDnn(ctx, Activation::kGelu, x.data(), n, results[t].data());
      }
    });
  }
  for (std::thread& w : workers) w.join();
  for (int t = 0; t < 3; ++t) {
    ExpectClose(results[t].data(), ref.data(), nullptr, n, "thread " + std::to_string(t));
  }
}

}  // namespace
}  // namespace layerserve::kernels
