#include "kernels/cpu_cache.h"

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

int64_t LastLevelCacheBytes() {
  static const int64_t bytes = [] {
    int64_t largest_level = 0, size = 0;
    for (int index = 0; index < 8; ++index) {
      const std::string dir =
          "/sys/devices/system/cpu/cpu0/cache/index" + std::to_string(index) + "/";
      std::ifstream level_file(dir + "level"), size_file(dir + "size");
      int64_t level = 0;
      std::string text;
      if (!(level_file >> level) || !(size_file >> text)) break;
      if (level > largest_level) {
        largest_level = level;
        size = ParseCacheSize(text.c_str());
      }
    }
    return size;
  }();
  return bytes;
}

}  // namespace layerserve::kernels
