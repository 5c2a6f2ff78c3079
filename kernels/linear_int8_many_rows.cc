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

// Whether oneDNN's layout for bfloat16 weights {in, columns} is BA16a64b2a
// (linear_internal.h): blocks of 32 k x 64 n in k pairs, which the tile is then
// dequantized into directly (with a plain layout oneDNN copied every tile into it
// again: T = 128 prefill took 1.4-1.7x bfloat16's time).
bool Blocked(const memory::desc& weights) {
  const dnnl_memory_desc_t& md = weights.data;
  if (md.format_kind != dnnl_blocked || md.ndims != 2) return false;
  const dnnl_blocking_desc_t& b = md.format_desc.blocking;
  return b.inner_nblks == 3 && b.inner_blks[0] == 16 && b.inner_idxs[0] == 0 &&
         b.inner_blks[1] == kInt8BlockOut && b.inner_idxs[1] == 1 &&
         b.inner_blks[2] == 2 && b.inner_idxs[2] == 0;
}

// Block columns [nb_begin, nb_end) as bfloat16 in the BA16a64b2a layout `weights`
// (k past `in` stays as the caller zeroed it).
void DequantizeBlocked(const Int8Weights& w, int64_t nb_begin, int64_t nb_end,
                       const memory::desc& weights, uint16_t* dst) {
  const dnnl_blocking_desc_t& b = weights.data.format_desc.blocking;
  const int64_t k_block_stride = b.strides[0], n_block_stride = b.strides[1];
  for (int64_t nb = nb_begin; nb < nb_end; ++nb) {
    const int8_t* q = w.q.data() + nb * w.in * kInt8BlockOut;
    const float* scales = w.scales.data() + nb * w.groups * kInt8BlockOut;
    uint16_t* column = dst + (nb - nb_begin) * n_block_stride;
    for (int64_t k = 0; k < w.in; ++k) {
      const float* scale = scales + (k / w.group) * kInt8BlockOut;
      const int8_t* row = q + k * kInt8BlockOut;
      uint16_t* to = column + (k / 32) * k_block_stride + ((k % 32) / 2) * 128 + k % 2;
      for (int64_t n = 0; n < kInt8BlockOut; ++n) {
        to[n * 2] = FiniteToBfloat16(static_cast<float>(row[n]) * scale[n]);
      }
    }
  }
}

// One thread's matmul primitives keyed by (rows, in, columns), its dequantized tile
// and the tile's dense output. Bounded: past kMaxEntries it starts over (oneDNN's
// own primitive cache makes re-creation cheap).
struct TileMatmuls {
  static constexpr size_t kMaxEntries = 512;
  dnnl::stream stream{CpuEngine()};
  struct Entry {
    dnnl::matmul matmul;
    memory::desc weights;  // BA16a64b2a where oneDNN picks it, else plain `ab`.
  };
  std::map<std::tuple<int64_t, int64_t, int64_t>, Entry> entries;
  std::vector<uint16_t> tile;
  std::vector<float> product;

  Entry& Get(int64_t rows, int64_t in, int64_t columns) {
    const auto key = std::make_tuple(rows, in, columns);
    auto it = entries.find(key);
    if (it != entries.end()) return it->second;
    if (entries.size() >= kMaxEntries) entries.clear();
    auto make = [&](Tag weights) {
      return dnnl::matmul::primitive_desc(
          dnnl::matmul::desc(memory::desc({rows, in}, Dt::bf16, Tag::ab),
                             memory::desc({in, columns}, Dt::bf16, weights),
                             memory::desc({rows, columns}, Dt::f32, Tag::ab)),
          CpuEngine());
    };
    dnnl::matmul::primitive_desc pd = make(Tag::any);
    if (!Blocked(pd.weights_desc())) pd = make(Tag::ab);
    return entries.emplace(key, Entry{dnnl::matmul(pd), pd.weights_desc()}).first->second;
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
    TileMatmuls::Entry& entry = matmuls.Get(rows, w.in, columns);
    const size_t elements = entry.weights.get_size() / sizeof(uint16_t);
    matmuls.product.resize(rows * columns);
    if (Blocked(entry.weights)) {
      // The k padding of the last 32-k block must read as zeros.
      if (w.in % 32 != 0) matmuls.tile.assign(elements, 0);
      matmuls.tile.resize(elements);
      DequantizeBlocked(w, nb, nb_stop, entry.weights, matmuls.tile.data());
    } else {
      matmuls.tile.resize(elements);
      DequantizeInt8ToBfloat16(w, nb, nb_stop, matmuls.tile.data());
    }
    const memory weights(entry.weights, engine, matmuls.tile.data());
    const memory dst(memory::desc({rows, columns}, Dt::f32, Tag::ab), engine,
                     matmuls.product.data());
    entry.matmul.execute(
        matmuls.stream,
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
