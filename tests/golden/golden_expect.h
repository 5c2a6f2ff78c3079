// What the golden tests check kernel outputs with: the golden files' closeness
// (golden::WithinTolerance, the first few misses reported) and the BFLOAT16 wire's
// rounding, which the files' premise (inputs exact in bfloat16, outputs within the
// BFLOAT16 tolerance once rounded) is checked through.
#ifndef LAYERSERVE_TESTS_GOLDEN_GOLDEN_EXPECT_H_
#define LAYERSERVE_TESTS_GOLDEN_GOLDEN_EXPECT_H_

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "common/dtype.h"
#include "tests/golden/golden_json.h"

namespace layerserve::golden {

// Every got[i] within `tolerance` of expected[i] (WithinTolerance: NaN where NaN is
// expected, the same infinities); reports the first five that are not.
inline void ExpectWithin(const std::vector<float>& got,
                         const std::vector<float>& expected, double tolerance,
                         const std::string& what) {
  ASSERT_EQ(got.size(), expected.size()) << what;
  int reported = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    if (WithinTolerance(got[i], expected[i], tolerance) || reported++ >= 5) continue;
    const double limit = tolerance * std::max(1.0, std::fabs(double{expected[i]}));
    ADD_FAILURE() << what << " at " << i << ": got " << got[i] << " expected "
                  << expected[i] << " limit " << limit;
  }
}

// The values after a trip over the BFLOAT16 wire (rounded to nearest even).
inline std::vector<float> ThroughBfloat16(const std::vector<float>& v) {
  std::vector<uint16_t> wire(v.size());
  ConvertFromFloat32(ElementType::kBfloat16, v.data(), v.size(), wire.data());
  std::vector<float> back(v.size());
  ConvertToFloat32(ElementType::kBfloat16, wire.data(), v.size(), back.data());
  return back;
}

}  // namespace layerserve::golden

#endif  // LAYERSERVE_TESTS_GOLDEN_GOLDEN_EXPECT_H_
