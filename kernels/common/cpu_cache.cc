#include "kernels/common/cpu_cache.h"

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <string>

namespace layerserve::kernels {

int64_t ParseCacheSize(const char* text) {
  char* end = nullptr;
  const long long value = std::strtoll(text, &end, 10);
  if (end == text || value <= 0) return 0;
  switch (*end) {
    case 'K':
      return value << 10;
    case 'M':
      return value << 20;
    case 'G':
      return value << 30;
    case '\0':
    case '\n':
      return value;
    default:
      return 0;
  }
}

int64_t CountCpuList(const char* text) {
  int64_t count = 0;
  const char* p = text;
  while (*p != '\0' && *p != '\n') {
    char* end = nullptr;
    const long long first = std::strtoll(p, &end, 10);
    if (end == p || first < 0) return 0;
    long long last = first;
    p = end;
    if (*p == '-') {
      last = std::strtoll(p + 1, &end, 10);
      if (end == p + 1 || last < first) return 0;
      p = end;
    }
    count += last - first + 1;
    if (*p == ',') {
      ++p;
    } else if (*p != '\0' && *p != '\n') {
      return 0;
    }
  }
  return count;
}

int64_t LastLevelCacheBytes() {
  static const int64_t bytes = [] {
    int64_t largest_level = 0, size = 0, sharing = 0;
    for (int index = 0; index < 8; ++index) {
      const std::string dir =
          "/sys/devices/system/cpu/cpu0/cache/index" + std::to_string(index) + "/";
      std::ifstream level_file(dir + "level"), size_file(dir + "size"),
          shared_file(dir + "shared_cpu_list");
      int64_t level = 0;
      std::string text, cpus;
      if (!(level_file >> level) || !(size_file >> text)) break;
      if (level > largest_level) {
        largest_level = level;
        size = ParseCacheSize(text.c_str());
        sharing = shared_file >> cpus ? CountCpuList(cpus.c_str()) : 0;
      }
    }
    // No list (or a malformed one): the size as sysfs says.
    return sharing > 0 ? std::min(size, sharing * kMaxCacheBytesPerCpu) : size;
  }();
  return bytes;
}

}  // namespace layerserve::kernels
