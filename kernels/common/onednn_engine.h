// The one oneDNN CPU engine of the process. oneDNN requires memory and the
// primitives that use it to share an engine, and weights packed once are used by
// every worker's primitives. A CPU engine holds no mutable state: sharing it is safe.
#ifndef LAYERSERVE_KERNELS_ONEDNN_ENGINE_H_
#define LAYERSERVE_KERNELS_ONEDNN_ENGINE_H_

#include <oneapi/dnnl/dnnl.hpp>

namespace layerserve::kernels {

const dnnl::engine& CpuEngine();

}  // namespace layerserve::kernels

#endif  // LAYERSERVE_KERNELS_ONEDNN_ENGINE_H_
