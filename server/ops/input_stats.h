// Shared pieces of the operations' InputStats (server/ops/operation.h): input
// statistics are taken after the kernel, and only their NaN and Inf counts are
// exported. Where every input value reaches the output through operations that
// keep a NaN or Inf non-finite, an output without them proves the input had none:
// the common case skips a read of the whole input, which cost 25-40 µs per MiB
// outside the kernel (docs/perf/2026-11-30-serving-overhead.md). Stateless; safe from any
// thread.
#ifndef LAYERSERVE_SERVER_OPS_INPUT_STATS_H_
#define LAYERSERVE_SERVER_OPS_INPUT_STATS_H_

#include <cstdint>

#include "kernels/value_stats/value_stats.h"
#include "server/ops/tensor_codec.h"

namespace layerserve {

// Whether any output tensor holds a NaN or an Inf.
inline bool OutputHasNonFinite(const OutputHealth& output) {
  return output.stats.nan + output.stats.inf + output.other_outputs_nonfinite > 0;
}

// The statistics of `count` values known to be finite (only the counts are
// exported).
inline kernels::ValueStats AllFinite(int64_t count) {
  kernels::ValueStats stats;
  stats.count = count;
  return stats;
}

// `input`'s statistics, read only when the output has a NaN or Inf. For inputs
// whose every value reaches the output through operations that keep it non-finite.
inline kernels::ValueStats StatsUnlessOutputFinite(const DecodedTensor& input,
                                                   const OutputHealth& output) {
  return OutputHasNonFinite(output) ? ValueStatsOf(input)
                                    : AllFinite(input.info.elements);
}

}  // namespace layerserve

#endif  // LAYERSERVE_SERVER_OPS_INPUT_STATS_H_
