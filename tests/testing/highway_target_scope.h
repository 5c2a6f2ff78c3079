// Runs the Highway kernels of a scope on one instruction set, so that a test holds
// every target this CPU supports (hwy::SupportedAndGeneratedTargets) to the
// reference, not only the best one that production dispatch picks.
#ifndef LAYERSERVE_TESTS_TESTING_HIGHWAY_TARGET_SCOPE_H_
#define LAYERSERVE_TESTS_TESTING_HIGHWAY_TARGET_SCOPE_H_

#include <cstdint>

#include "hwy/targets.h"

namespace layerserve::testing {

// Restricts Highway's dispatch to `target` while alive (0: no restriction, as
// hwy::SetSupportedTargetsForTest(0) means).
class TargetScope {
 public:
  explicit TargetScope(int64_t target) { hwy::SetSupportedTargetsForTest(target); }
  ~TargetScope() { hwy::SetSupportedTargetsForTest(0); }
  TargetScope(const TargetScope&) = delete;
  TargetScope& operator=(const TargetScope&) = delete;
};

}  // namespace layerserve::testing

#endif  // LAYERSERVE_TESTS_TESTING_HIGHWAY_TARGET_SCOPE_H_
