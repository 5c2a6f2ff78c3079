// libFuzzer's entry point for one target: each fuzzer binary compiles this file
// with LAYERSERVE_FUZZ_FUNCTION naming its function from fuzz_targets.h.
#include <cstddef>
#include <cstdint>

#include "fuzz/fuzz_targets.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  layerserve::fuzz::LAYERSERVE_FUZZ_FUNCTION(data, size);
  return 0;  // Every input is worth keeping if it adds coverage.
}
