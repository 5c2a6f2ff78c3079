#include "server/ops/positions.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/status_matchers.h"

namespace layerserve {
namespace {

using ::layerserve::testing::StatusIs;
using ::testing::ElementsAre;

google::protobuf::RepeatedField<int64_t> Field(std::vector<int64_t> values) {
  return {values.begin(), values.end()};
}

TEST(PositionsTest, OffsetCountsFromItForEveryRow) {
  EXPECT_THAT(*ResolvePositions(5, Field({}), 2, 3, ""), ElementsAre(5, 6, 7, 5, 6, 7));
}

TEST(PositionsTest, TEntriesAreSharedByEveryRow) {
  EXPECT_THAT(*ResolvePositions(0, Field({9, 1}), 2, 2, ""), ElementsAre(9, 1, 9, 1));
}

TEST(PositionsTest, BTEntriesArePerRow) {
  EXPECT_THAT(*ResolvePositions(0, Field({1, 2, 3, 4}), 2, 2, ""),
              ElementsAre(1, 2, 3, 4));
}

TEST(PositionsTest, RejectsOtherCounts) {
  EXPECT_THAT(ResolvePositions(0, Field({1, 2, 3}), 2, 2, "rope."),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "rope.positions: 3 entries; expected T = 2 or B*T = 4"));
}

TEST(PositionsTest, RejectsNegativePositionsAndOffsets) {
  EXPECT_THAT(
      ResolvePositions(0, Field({0, -1}), 1, 2, "rope."),
      StatusIs(absl::StatusCode::kInvalidArgument, "rope.positions[1]: -1 must be >= 0"));
  EXPECT_THAT(
      ResolvePositions(-3, Field({}), 1, 2, ""),
      StatusIs(absl::StatusCode::kInvalidArgument, "position_offset: -3 must be >= 0"));
}

TEST(PositionsTest, RejectsOffsetOverflow) {
  EXPECT_THAT(
      ResolvePositions(std::numeric_limits<int64_t>::max() - 1, Field({}), 1, 4, ""),
      StatusIs(absl::StatusCode::kInvalidArgument, ::testing::HasSubstr("overflows")));
}

}  // namespace
}  // namespace layerserve
