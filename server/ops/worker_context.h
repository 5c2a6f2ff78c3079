// State one compute thread owns and hands to every batch it runs: kernel contexts
// whose oneDNN primitives and scratch must not be used by two threads at once. Built
// on the worker's own thread (the Batcher does so).
#ifndef LAYERSERVE_SERVER_OPS_WORKER_CONTEXT_H_
#define LAYERSERVE_SERVER_OPS_WORKER_CONTEXT_H_

#include <omp.h>

#include "kernels/block/block.h"
#include "kernels/positional/positional.h"

namespace layerserve {

// oneDNN runs on OpenMP. The workers already keep every core busy, and an OpenMP
// team per worker would oversubscribe them (a 2-thread team's wake-up alone costs
// more than a small kernel), so each worker computes on its own thread only.
struct SingleOpenMpThread {
  SingleOpenMpThread() { omp_set_num_threads(1); }
};

struct WorkerContext {
  SingleOpenMpThread single_thread;  // First: before any kernel context exists.
  kernels::BlockKernels block;
  kernels::PositionalContext positional;
};

}  // namespace layerserve

#endif  // LAYERSERVE_SERVER_OPS_WORKER_CONTEXT_H_
