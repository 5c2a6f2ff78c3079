// Attention of one sequence's new queries over its KvCache, reading the cached keys
// and values in place from the cache's blocks (float32 or bfloat16).
//
// Why not gather and call Attention(): for a decode step (a few queries over
// hundreds of cached keys) gathering the cache into a contiguous float32 copy cost
// more than the attention itself (the profile:
// docs/perf/2026-11-30-decode-step-kernels.md). Here keys are read from the cache's
// transposed key blocks a vector of tokens at a time and values row by row,
// converted in registers if bfloat16. Long calls (prefill) still gather and use
// oneDNN, whose matmuls win when there are many queries.
//
// Threads: any number of calls at once, each with its own scratch, on a cache that
// nothing appends to meanwhile. NaN and Inf: as Attention() (attention.h). Throws
// only std::bad_alloc (growing the scratch).
#ifndef LAYERSERVE_KERNELS_KV_CACHE_ATTENTION_H_
#define LAYERSERVE_KERNELS_KV_CACHE_ATTENTION_H_

#include <cstdint>
#include <vector>

#include "kernels/attention/attention.h"
#include "kernels/attention/kv_cache.h"

namespace layerserve::kernels {

// Buffers of AttentionOverCache, kept by the caller between calls (one per thread).
struct CacheAttentionScratch {
  std::vector<float> scores;    // [q_heads * tokens, keys]
  std::vector<int64_t> limits;  // Per row of scores.
  std::vector<double> entropy;  // Per row of scores.
};

// `args` as for Attention(), except that k, v and kv_stride are not used: key j
// (j < args.keys) is row j of `layer` in `cache`, so Append the call's own rows
// first. Same formula as AttentionReference over the rows cache.Read() returns;
// float32 arithmetic. Highway, dispatched at run time. head_entropy, when set, is
// added to. REQUIRES: as Attention(), keys <= the rows stored for `layer`,
// args.kv_heads and head_dim the cache's.
void AttentionOverCache(const AttentionArgs& args, const KvCache& cache, int64_t layer,
                        CacheAttentionScratch& scratch);

}  // namespace layerserve::kernels

#endif  // LAYERSERVE_KERNELS_KV_CACHE_ATTENTION_H_
