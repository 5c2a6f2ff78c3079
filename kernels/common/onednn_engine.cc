#include "kernels/common/onednn_engine.h"

namespace layerserve::kernels {

const dnnl::engine& CpuEngine() {
  static const dnnl::engine* const engine = new dnnl::engine(dnnl::engine::kind::cpu, 0);
  return *engine;
}

}  // namespace layerserve::kernels
