// The one oneDNN CPU engine of the process. oneDNN requires memory and the
// primitives that use it to share an engine, and weights packed once are used by
// every worker's primitives. A CPU engine holds no mutable state: sharing it between
// threads is safe.
#ifndef LAYERSERVE_KERNELS_ONEDNN_ENGINE_H_
#define LAYERSERVE_KERNELS_ONEDNN_ENGINE_H_

#include <oneapi/dnnl/dnnl.hpp>

namespace layerserve::kernels {

// Created on the first call (thread-safe) and never destroyed, so objects destroyed
// at exit may still use it. Throws dnnl::error if oneDNN cannot create a CPU engine.
const dnnl::engine& CpuEngine();

}  // namespace layerserve::kernels

#endif  // LAYERSERVE_KERNELS_ONEDNN_ENGINE_H_
