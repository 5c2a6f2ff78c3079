// Compiled as C++23 (common/CMakeLists.txt) for std::string::resize_and_overwrite,
// which libstdc++ 12 has only in that mode; the rest of the project is C++17.
// std::string's layout does not depend on the mode.
#include "common/uninitialized_string.h"

#include <algorithm>
#include <cstring>

#if defined(__SANITIZE_ADDRESS__)
#define LAYERSERVE_POISON_UNINITIALIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define LAYERSERVE_POISON_UNINITIALIZED 1
#endif
#endif

namespace layerserve {

void ResizeUninitialized(std::string* s, size_t size) {
#if defined(__cpp_lib_string_resize_and_overwrite)
  // The callback returns `size`, not its second argument: libstdc++ 12 passes the
  // capacity it grew to (up to twice the old one) there, not the size asked for.
  const size_t kept = std::min(s->size(), size);
  s->resize_and_overwrite(size, [size, kept](char* bytes, size_t) {
#if defined(LAYERSERVE_POISON_UNINITIALIZED)
    // Sanitizer builds (the ASan test run, the fuzzers) fill the new bytes with
    // 0xff, a float32 NaN and 16-bit NaN: a caller that leaves an output value
    // unwritten fails its comparison there instead of sending stale heap bytes.
    std::memset(bytes + kept, 0xff, size - kept);
#else
    (void)bytes;
    (void)kept;
#endif
    return size;
  });
#else
  s->resize(size);  // A standard library without it: zeros, then the caller's bytes.
#endif
}

}  // namespace layerserve
