// Loader for tests/golden/norm_golden.json, the LayerNorm / RMSNorm cases computed
// by PyTorch (tests/golden/make_norm_golden.py documents the schema and the
// tolerances). Shared by the kernel golden test and the server-level test that
// sends the same cases through gRPC. Plain functions; safe from any thread.
#ifndef LAYERSERVE_TESTS_GOLDEN_NORM_GOLDEN_H_
#define LAYERSERVE_TESTS_GOLDEN_NORM_GOLDEN_H_

#include <cstdint>
#include <string>
#include <vector>

namespace layerserve::golden {

// Tolerances from make_norm_golden.py: |got - expected| <= tol * max(1, |expected|),
// NaN where expected is NaN (golden::WithinTolerance in golden_json.h).
inline constexpr double kFloat32Tolerance = 1e-5;
inline constexpr double kBfloat16Tolerance = 2e-2;

struct NormGoldenCase {
  std::string name;
  std::string kind;            // "layer_norm" or "rms_norm".
  std::vector<int64_t> shape;  // Normalized over the last entry.
  float epsilon = 0;
  bool weight_offset = false;  // Scale is 1 + weight (Gemma).
  // Flat, row-major float32 values, NaN and +-Inf included. weight, bias, residual
  // and expected_residual_out are empty when the file has null.
  std::vector<float> input, weight, bias, residual;
  std::vector<float> expected, expected_residual_out;

  int64_t dim() const { return shape.back(); }
  int64_t rows() const;  // Product of all but the last shape entry.
};

// Reads and checks every case (array sizes against the shape). Throws
// std::runtime_error naming the file and the problem.
std::vector<NormGoldenCase> LoadNormGolden(const std::string& path);

}  // namespace layerserve::golden

#endif  // LAYERSERVE_TESTS_GOLDEN_NORM_GOLDEN_H_
