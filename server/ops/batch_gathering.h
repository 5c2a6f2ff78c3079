#ifndef LAYERSERVE_SERVER_OPS_BATCH_GATHERING_H_
#define LAYERSERVE_SERVER_OPS_BATCH_GATHERING_H_

#include <cstdint>

namespace layerserve {

// Whether the batch after a held batch of a BlockForward key gathers
// (BatchTask::gathers(): it waits for as many tasks as the held batch had). Only
// for session steps, whose next step follows their answer, and only when each
// batch streams the layer range's weights from memory: `weight_bytes` above the
// last-level cache, or the cache size unknown (0). Weights that stay in the cache
// cost a batch little, and a wait for more steps cost the demo model (23 MB of
// bfloat16 in a 32 MB L3) 7-25% at 8 and 32 sessions. Stateless requests gained
// nothing either: 64 clients of the float32 demo model (45 MB) sent 10-22% fewer
// requests with gathering (docs/BENCHMARKS.md).
inline bool BlockForwardGathers(bool session_step, int64_t weight_bytes,
                                int64_t last_level_cache_bytes) {
  if (!session_step) return false;
  return last_level_cache_bytes == 0 || weight_bytes > last_level_cache_bytes;
}

}  // namespace layerserve

#endif  // LAYERSERVE_SERVER_OPS_BATCH_GATHERING_H_
