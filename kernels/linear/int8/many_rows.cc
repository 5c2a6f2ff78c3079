// Linear's many-rows product for int8 weights: bfloat16 tiles dequantized on the
// fly, multiplied by oneDNN's bfloat16 matmul (AMX where the CPU has it).
#include <algorithm>
#include <cstdint>
#include <map>
#include <tuple>
#include <vector>

#include "kernels/common/onednn_engine.h"
#include "kernels/linear/int8/int8_weights.h"
#include "kernels/linear/linear_internal.h"

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
  std::vector<uint16_t> two_rows;  // A lone row and a zero row (see below).

  Entry& Get(int64_t rows, int64_t in, int64_t columns) {
    const auto key = std::make_tuple(rows, in, columns);
    auto it = entries.find(key);
    if (it != entries.end()) return it->second;
    if (entries.size() >= kMaxEntries) entries.clear();
    auto make = [&](int64_t m, const memory::desc& weights) {
      return dnnl::matmul::primitive_desc(
          dnnl::matmul::desc(memory::desc({m, in}, Dt::bf16, Tag::ab), weights,
                             memory::desc({m, columns}, Dt::f32, Tag::ab)),
          CpuEngine());
    };
    // The tile's layout is asked for at one M for every row count, as Linear's
    // bfloat16 weights are packed: with AMX, oneDNN prefers other layouts at M = 1,
    // whose kernels sum in another order, and a row's bits would depend on how many
    // rows share the call.
    memory::desc weights =
        make(kLayoutProbeRows, memory::desc({in, columns}, Dt::bf16, Tag::any))
            .weights_desc();
    if (!Blocked(weights)) weights = memory::desc({in, columns}, Dt::bf16, Tag::ab);
    const dnnl::matmul::primitive_desc pd = make(rows, weights);
    return entries.emplace(key, Entry{dnnl::matmul(pd), pd.weights_desc()}).first->second;
  }
};

}  // namespace

void LinearInt8ManyRows(const Int8Weights& w, const uint16_t* x, int64_t rows,
                        int64_t nb_begin, int64_t nb_end, float* y) {
  thread_local TileMatmuls matmuls;
  const dnnl::engine& engine = CpuEngine();
  // oneDNN multiplies one row with another kernel than two or more (with AMX, its
  // AVX-512 kernel at M = 1 and AMX from M = 2), which sums in another order. A row
  // alone runs as two, the second zero, so it gets the bits it gets among others.
  const int64_t m = std::max<int64_t>(rows, 2);
  if (rows == 1) {
    matmuls.two_rows.assign(2 * w.in, 0);
    std::copy(x, x + w.in, matmuls.two_rows.begin());
    x = matmuls.two_rows.data();
  }
  const memory src(memory::desc({m, w.in}, Dt::bf16, Tag::ab), engine,
                   const_cast<uint16_t*>(x));
  for (int64_t nb = nb_begin; nb < nb_end; nb += kInt8TileBlocks) {
    const int64_t nb_stop = std::min(nb_end, nb + kInt8TileBlocks);
    // Blocked tiles are always kInt8TileBlocks wide, the last padded with zero
    // weights: oneDNN picks its kernel by M and N too (with AMX, 2 x 128 got the
    // AVX-512 kernel, 2 x 256 AMX), and one N keeps a row's kernel the same whatever
    // rows share the call.
    int64_t columns = kInt8TileBlocks * kInt8BlockOut;
    TileMatmuls::Entry* entry = &matmuls.Get(m, w.in, columns);
    if (!Blocked(entry->weights)) {
      columns = (nb_stop - nb) * kInt8BlockOut;
      entry = &matmuls.Get(m, w.in, columns);
    }
    const size_t elements = entry->weights.get_size() / sizeof(uint16_t);
    matmuls.product.resize(m * columns);
    if (Blocked(entry->weights)) {
      // The k padding of the last 32-k block and the padding blocks read as zeros.
      if (w.in % 32 != 0 || nb_stop - nb < kInt8TileBlocks) {
        matmuls.tile.assign(elements, 0);
      }
      matmuls.tile.resize(elements);
      const dnnl_blocking_desc_t& b = entry->weights.data.format_desc.blocking;
      DequantizeInt8Blocked(w, nb, nb_stop, b.strides[0], b.strides[1],
                            matmuls.tile.data());
    } else {
      matmuls.tile.resize(elements);
      DequantizeInt8ToBfloat16(w, nb, nb_stop, matmuls.tile.data());
    }
    const memory weights(entry->weights, engine, matmuls.tile.data());
    const memory dst(memory::desc({m, columns}, Dt::f32, Tag::ab), engine,
                     matmuls.product.data());
    entry->matmul.execute(
        matmuls.stream,
        {{DNNL_ARG_SRC, src}, {DNNL_ARG_WEIGHTS, weights}, {DNNL_ARG_DST, dst}});
    matmuls.stream.wait();
    // The tile's real columns (the last block may be padding) plus the bias, as
    // oneDNN would add it: to the float32 sum.
    const int64_t n0 = nb * kInt8BlockOut;
    const int64_t real = std::min((nb_stop - nb) * kInt8BlockOut, w.out - n0);
    for (int64_t r = 0; r < rows; ++r) {
      const float* from = matmuls.product.data() + r * columns;
      float* to = y + r * w.out + n0;
      for (int64_t n = 0; n < real; ++n) to[n] = from[n] + w.bias[n0 + n];
    }
  }
}

void LinearInt8ManyRowsAmx(const Int8Weights& w, const uint32_t* x_tiles, int64_t rows,
                           int64_t nb_begin, int64_t nb_end, float* y) {
  static_assert(kInt8BlockOut == kFewRowsBlockOut);
  // The tile in the layout the kernel reads (linear_internal.h): 32 k x 64 n blocks
  // in k pairs, a block column after another.
  FewRowsWeights tile;
  tile.bf16 = true;
  tile.in = w.in;
  tile.k_block = 32;
  tile.k_block_stride = 32 * kInt8BlockOut;
  tile.n_block_stride = w.in * kInt8BlockOut;
  thread_local std::vector<uint16_t> values;
  values.resize(kInt8TileBlocks * tile.n_block_stride);
  tile.data = values.data();
  for (int64_t nb = nb_begin; nb < nb_end; nb += kInt8TileBlocks) {
    const int64_t nb_stop = std::min(nb_end, nb + kInt8TileBlocks);
    DequantizeInt8Blocked(w, nb, nb_stop, tile.k_block_stride, tile.n_block_stride,
                          values.data());
    const int64_t n0 = nb * kInt8BlockOut;
    tile.out = std::min((nb_stop - nb) * kInt8BlockOut, w.out - n0);
    tile.bias = w.bias.data() + n0;
    LinearManyRowsAmxBlocks(tile, x_tiles, rows, 0, nb_stop - nb, y + n0, w.out);
  }
}

}  // namespace layerserve::kernels::internal
