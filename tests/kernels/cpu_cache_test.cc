// The last-level cache size that decides whether decode batches gather
// (server/ops/block_forward.h): sysfs size strings, and the machine's own value.
#include "kernels/cpu_cache.h"

#include <fstream>
#include <string>

#include "gtest/gtest.h"

namespace layerserve::kernels {
namespace {

TEST(CpuCacheTest, ParsesSysfsSizes) {
  EXPECT_EQ(ParseCacheSize("32768K"), int64_t{32} << 20);
  EXPECT_EQ(ParseCacheSize("32768K\n"), int64_t{32} << 20);
  EXPECT_EQ(ParseCacheSize("2M"), int64_t{2} << 20);
  EXPECT_EQ(ParseCacheSize("1G"), int64_t{1} << 30);
  EXPECT_EQ(ParseCacheSize("512"), 512);
  EXPECT_EQ(ParseCacheSize(""), 0);
  EXPECT_EQ(ParseCacheSize("K"), 0);
  EXPECT_EQ(ParseCacheSize("-4K"), 0);
  EXPECT_EQ(ParseCacheSize("12Q"), 0);
}

// The last level is the largest: no cache cpu0 lists is bigger. Without sysfs
// (some sandboxes) the size is unknown: 0.
TEST(CpuCacheTest, LastLevelIsAtLeastEveryCacheOfCpu0) {
  int caches = 0;
  for (int index = 0;; ++index, ++caches) {
    std::ifstream size_file("/sys/devices/system/cpu/cpu0/cache/index" +
                            std::to_string(index) + "/size");
    std::string size;
    if (!(size_file >> size)) break;
    EXPECT_GE(LastLevelCacheBytes(), ParseCacheSize(size.c_str())) << "index" << index;
  }
  if (caches == 0) {
    EXPECT_EQ(LastLevelCacheBytes(), 0);
  } else {
    EXPECT_GT(LastLevelCacheBytes(), 0);
  }
}

}  // namespace
}  // namespace layerserve::kernels
