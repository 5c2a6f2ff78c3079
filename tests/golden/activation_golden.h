// Loader for tests/golden/activation_golden.json, the Activate cases computed by
// PyTorch (tests/golden/make_activation_golden.py documents the schema and the
// tolerances). Shared by the kernel golden test and anything that sends the same
// cases through the server. Plain functions; safe from any thread.
#ifndef LAYERSERVE_TESTS_GOLDEN_ACTIVATION_GOLDEN_H_
#define LAYERSERVE_TESTS_GOLDEN_ACTIVATION_GOLDEN_H_

#include <cstdint>
#include <string>
#include <vector>

namespace layerserve::golden {

// Tolerances from make_activation_golden.py: |got - expected| <= tol *
// max(1, |expected|); NaN must be NaN and +-inf the same infinity.
inline constexpr double kActivationFloat32Tolerance = 1e-5;
inline constexpr double kActivationBfloat16Tolerance = 2e-2;

struct ActivationGoldenCase {
  std::string name;
  std::string activation;               // The proto enum name: "SILU", "SWIGLU"...
  std::string form;                     // "elementwise", "gated" (gate + up) or "packed".
  std::vector<int64_t> shape;           // Of input (and gate).
  std::vector<int64_t> expected_shape;  // [..., F] for packed, else shape.
  // Flat, row-major float32 values, NaN and +-inf included. gate is empty unless
  // form is "gated"; input is then the up tensor.
  std::vector<float> input, gate, expected;

  int64_t elements() const;  // Product of shape.
};

// Reads and checks every case (array sizes against the shapes, known forms).
// Throws std::runtime_error naming the file and the problem.
std::vector<ActivationGoldenCase> LoadActivationGolden(const std::string& path);

}  // namespace layerserve::golden

#endif  // LAYERSERVE_TESTS_GOLDEN_ACTIVATION_GOLDEN_H_
