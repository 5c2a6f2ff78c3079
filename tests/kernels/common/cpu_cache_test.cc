// The last-level cache size that decides whether decode batches gather
// (server/ops/block_forward.h): sysfs size strings, and the machine's own value.
#include "kernels/common/cpu_cache.h"

#include <algorithm>
#include <fstream>
#include <string>
#include <vector>

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

TEST(CpuCacheTest, CountsSysfsCpuLists) {
  EXPECT_EQ(CountCpuList("0"), 1);
  EXPECT_EQ(CountCpuList("0-1"), 2);
  EXPECT_EQ(CountCpuList("0-1\n"), 2);
  EXPECT_EQ(CountCpuList("0,2-5,8"), 6);
  EXPECT_EQ(CountCpuList("0-7,64-71"), 16);
  EXPECT_EQ(CountCpuList(""), 0);
  EXPECT_EQ(CountCpuList("3-1"), 0);
  EXPECT_EQ(CountCpuList("0-"), 0);
  EXPECT_EQ(CountCpuList("a"), 0);
  EXPECT_EQ(CountCpuList("0;1"), 0);
}

// The last level is the largest: no cache of a lower level is bigger, but the last
// counts at most kMaxCacheBytesPerCpu per CPU sharing it. Without sysfs (some
// sandboxes) the size is unknown: 0.
TEST(CpuCacheTest, LastLevelIsTheHighestCacheOfCpu0WithinItsShare) {
  struct Cache {
    int64_t level, bytes, sharing;
  };
  std::vector<Cache> caches;
  for (int index = 0;; ++index) {
    const std::string dir =
        "/sys/devices/system/cpu/cpu0/cache/index" + std::to_string(index) + "/";
    std::ifstream level_file(dir + "level"), size_file(dir + "size"),
        shared_file(dir + "shared_cpu_list");
    int64_t level = 0;
    std::string size, cpus;
    if (!(level_file >> level) || !(size_file >> size)) break;
    caches.push_back({level, ParseCacheSize(size.c_str()),
                      shared_file >> cpus ? CountCpuList(cpus.c_str()) : 0});
  }
  if (caches.empty()) {
    EXPECT_EQ(LastLevelCacheBytes(), 0);
    return;
  }
  Cache last = caches[0];
  for (const Cache& c : caches) {
    if (c.level > last.level) last = c;
  }
  for (const Cache& c : caches) {
    if (c.level < last.level) {
      EXPECT_GE(LastLevelCacheBytes(), c.bytes) << c.level;
    }
  }
  RecordProperty("sysfs_last_level_bytes", std::to_string(last.bytes));
  RecordProperty("last_level_bytes", std::to_string(LastLevelCacheBytes()));
  EXPECT_GT(LastLevelCacheBytes(), 0);
  EXPECT_EQ(LastLevelCacheBytes(),
            last.sharing > 0 ? std::min(last.bytes, last.sharing * kMaxCacheBytesPerCpu)
                             : last.bytes);
}

}  // namespace
}  // namespace layerserve::kernels
