// Linear's many-rows product for int8 weights: bfloat16 tiles dequantized on the
// fly, multiplied by oneDNN's bfloat16 matmul (AMX where the CPU has it).
#include <algorithm>
#include <cstdint>
#include <map>
#include <tuple>
#include <vector>

#include "kernels/linear_int8.h"
#include "kernels/onednn_engine.h"

namespace layerserve::kernels::internal {
namespace {

using dnnl::memory;
using Tag = memory::format_tag;
using Dt = memory::data_type;

// One thread's matmul primitives keyed by (rows, in, columns), its dequantized tile
// and the tile's dense output. Bounded: past kMaxEntries it starts over (oneDNN's
// own primitive cache makes re-creation cheap).
struct TileMatmuls {
  static constexpr size_t kMaxEntries = 512;
  dnnl::stream stream{CpuEngine()};
  std::map<std::tuple<int64_t, int64_t, int64_t>, dnnl::matmul> entries;
  std::vector<uint16_t> tile;
  std::vector<float> product;

  dnnl::matmul& Get(int64_t rows, int64_t in, int64_t columns) {
    const auto key = std::make_tuple(rows, in, columns);
    auto it = entries.find(key);
    if (it != entries.end()) return it->second;
    if (entries.size() >= kMaxEntries) entries.clear();
    const dnnl::matmul::desc desc(memory::desc({rows, in}, Dt::bf16, Tag::ab),
                                  memory::desc({in, columns}, Dt::bf16, Tag::ab),
                                  memory::desc({rows, columns}, Dt::f32, Tag::ab));
    return entries
        .emplace(key, dnnl::matmul(dnnl::matmul::primitive_desc(desc, CpuEngine())))
        .first->second;
  }
};

}  // namespace

void LinearInt8ManyRows(const Int8Weights& w, const uint16_t* x, int64_t rows,
                        int64_t nb_begin, int64_t nb_end, float* y) {
  thread_local TileMatmuls matmuls;
  const dnnl::engine& engine = CpuEngine();
  const memory src(memory::desc({rows, w.in}, Dt::bf16, Tag::ab), engine,
                   const_cast<uint16_t*>(x));
  for (int64_t nb = nb_begin; nb < nb_end; nb += kInt8TileBlocks) {
    const int64_t nb_stop = std::min(nb_end, nb + kInt8TileBlocks);
    const int64_t columns = (nb_stop - nb) * kInt8BlockOut;
    matmuls.tile.resize(w.in * columns);
    matmuls.product.resize(rows * columns);
    DequantizeInt8ToBfloat16(w, nb, nb_stop, matmuls.tile.data());
    const memory weights(memory::desc({w.in, columns}, Dt::bf16, Tag::ab), engine,
                         matmuls.tile.data());
    const memory dst(memory::desc({rows, columns}, Dt::f32, Tag::ab), engine,
                     matmuls.product.data());
    matmuls.Get(rows, w.in, columns)
        .execute(matmuls.stream,
                 {{DNNL_ARG_SRC, src}, {DNNL_ARG_WEIGHTS, weights}, {DNNL_ARG_DST, dst}});
    matmuls.stream.wait();
    // The tile's real columns (the last block may be padding) plus the bias, as
    // oneDNN would add it: to the float32 sum.
    const int64_t n0 = nb * kInt8BlockOut;
    const int64_t real = std::min(columns, w.out - n0);
    for (int64_t r = 0; r < rows; ++r) {
      const float* from = matmuls.product.data() + r * columns;
      float* to = y + r * w.out + n0;
      for (int64_t n = 0; n < real; ++n) to[n] = from[n] + w.bias[n0 + n];
    }
  }
}

}  // namespace layerserve::kernels::internal
