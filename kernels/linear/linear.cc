#include "kernels/linear/linear.h"

#include <algorithm>
#include <map>
#include <tuple>
#include <utility>
#include <vector>

#include "common/dtype.h"
#include "kernels/common/onednn_engine.h"
#include "kernels/linear/int8/int8_weights.h"
#include "kernels/linear/kernel_choice.h"
#include "kernels/linear/linear_internal.h"

namespace layerserve::kernels {
namespace {

using dnnl::memory;
using Tag = memory::format_tag;
using Dt = memory::data_type;

// Linear runs a large layer as up to kMaxChunks matmuls over column ranges of at
// least kMinChunkValues weights each, which idle threads may take: one request
// computes on every core. The chunks are fixed at load, whoever runs them, so a
// result never depends on how many threads helped. Chunks start at multiples of
// kChunkAlign columns (the packed layouts' column block).
constexpr int64_t kMaxChunks = 8;
constexpr int64_t kMinChunkValues = int64_t{1} << 20;
constexpr int64_t kChunkAlign = internal::kFewRowsBlockOut;

Dt DataType(WeightType type) { return type == WeightType::kFloat32 ? Dt::f32 : Dt::bf16; }

// y[rows, out] = x[rows, in] · W + bias, W [in, out] in the layout `weights`.
dnnl::matmul::primitive_desc MatmulDesc(int64_t rows, int64_t in, int64_t out, Dt dt,
                                        const memory::desc& weights) {
  return dnnl::matmul::primitive_desc(
      dnnl::matmul::desc(memory::desc({rows, in}, dt, Tag::ab), weights,
                         memory::desc({1, out}, Dt::f32, Tag::ab),
                         memory::desc({rows, out}, Dt::f32, Tag::ab)),
      CpuEngine());
}

// The layout oneDNN's matmul prefers for weights [in, out] of type dt.
memory::desc PreferredWeights(int64_t in, int64_t out, Dt dt) {
  return MatmulDesc(internal::kLayoutProbeRows, in, out, dt,
                    memory::desc({in, out}, dt, Tag::any))
      .weights_desc();
}

// The product of the inner blocks of dimension `dim` of a blocked layout.
int64_t InnerBlock(const dnnl_memory_desc_t& md, int dim) {
  const dnnl_blocking_desc_t& b = md.format_desc.blocking;
  int64_t block = 1;
  for (int i = 0; i < b.inner_nblks; ++i) {
    if (b.inner_idxs[i] == dim) block *= b.inner_blks[i];
  }
  return block;
}

// Whether `part`, oneDNN's layout for a range of columns of `whole`, lays them out
// as `whole` does: the same blocks and strides, so that from the range's first
// column block on, `whole`'s bytes are `part` (true when the column blocks are
// outermost, each a contiguous panel, as in BA16a64b and BA16a64b2a).
bool SameBlocking(const dnnl_memory_desc_t& whole, const dnnl_memory_desc_t& part) {
  if (whole.format_kind != dnnl_blocked || part.format_kind != dnnl_blocked ||
      whole.ndims != 2 || part.ndims != 2 ||
      whole.padded_dims[0] != part.padded_dims[0]) {
    return false;
  }
  const dnnl_blocking_desc_t& a = whole.format_desc.blocking;
  const dnnl_blocking_desc_t& b = part.format_desc.blocking;
  if (a.inner_nblks != b.inner_nblks || a.strides[0] != b.strides[0] ||
      a.strides[1] != b.strides[1]) {
    return false;
  }
  for (int i = 0; i < a.inner_nblks; ++i) {
    if (a.inner_blks[i] != b.inner_blks[i] || a.inner_idxs[i] != b.inner_idxs[i]) {
      return false;
    }
  }
  return kChunkAlign % InnerBlock(whole, 1) == 0;
}

// The layout LinearFewRows reads, if oneDNN packed `weights` ({in, out}) in one of
// the two it knows (linear_internal.h); else `data` stays null.
internal::FewRowsWeights FewRowsLayout(const memory& weights, Dt dt, const float* bias) {
  internal::FewRowsWeights w;
  const dnnl_memory_desc_t& md = weights.get_desc().data;
  if (md.format_kind != dnnl_blocked || md.ndims != 2) return w;
  const dnnl_blocking_desc_t& b = md.format_desc.blocking;
  const bool bf16 = dt == Dt::bf16;
  const int want_blocks = bf16 ? 3 : 2;
  if (b.inner_nblks != want_blocks || b.inner_blks[0] != 16 || b.inner_idxs[0] != 0 ||
      b.inner_blks[1] != internal::kFewRowsBlockOut || b.inner_idxs[1] != 1 ||
      (bf16 && (b.inner_blks[2] != 2 || b.inner_idxs[2] != 0))) {
    return w;
  }
  w.data = weights.get_data_handle();
  w.bf16 = bf16;
  w.in = md.dims[0];
  w.out = md.dims[1];
  w.k_block = bf16 ? 32 : 16;
  w.k_block_stride = b.strides[0];
  w.n_block_stride = b.strides[1];
  w.bias = bias;
  return w;
}

}  // namespace

struct LinearWeights::Packed {
  memory weights;
  memory bias;                        // [1, out] float32, zeros when the layer has none.
  internal::FewRowsWeights few_rows;  // data null: LinearFewRows falls back.
  // Columns [begin, end) of `weights`, each viewed in place (the same bytes): Linear
  // runs one matmul per chunk. One chunk, the whole matrix, when the layer is small
  // or its layout cannot be viewed by columns.
  struct Chunk {
    int64_t begin = 0, end = 0;
    memory weights;
  };
  std::vector<Chunk> chunks;
  // kInt8 weights instead of all the above (`weights` and `bias` stay empty; chunks
  // hold ranges of 64-output blocks).
  internal::Int8Weights int8;
  // ChooseLinearKernel's answers for these weights on this CPU.
  LinearKernel many_rows_kernel = LinearKernel::kOneDnnMatmul;
  LinearKernel few_rows_kernel = LinearKernel::kOneDnnMatmul;
};

namespace {

// Packed::chunks of weights [in, out] packed in `weights`.
std::vector<LinearWeights::Packed::Chunk> ColumnChunks(const memory& weights, int64_t in,
                                                       int64_t out, Dt dt) {
  const int64_t count = std::min(
      {kMaxChunks, std::max<int64_t>(1, in * out / kMinChunkValues), out / kChunkAlign});
  std::vector<LinearWeights::Packed::Chunk> chunks;
  if (count > 1) {
    const memory::desc whole = weights.get_desc();
    const int64_t per_chunk = (out + count - 1) / count;
    const int64_t width = (per_chunk + kChunkAlign - 1) / kChunkAlign * kChunkAlign;
    const int64_t column_block = InnerBlock(whole.data, 1);
    const int64_t panel_bytes = whole.data.format_desc.blocking.strides[1] *
                                static_cast<int64_t>(memory::data_type_size(
                                    static_cast<Dt>(whole.data.data_type)));
    char* base = static_cast<char*>(weights.get_data_handle());
    for (int64_t begin = 0; begin < out; begin += width) {
      const int64_t end = std::min(out, begin + width);
      const memory::desc part = PreferredWeights(in, end - begin, dt);
      const int64_t offset = begin / column_block * panel_bytes;
      if (!SameBlocking(whole.data, part.data) ||
          offset + static_cast<int64_t>(part.get_size()) >
              static_cast<int64_t>(whole.get_size())) {
        chunks.clear();
        break;
      }
      chunks.push_back({begin, end, memory(part, CpuEngine(), base + offset)});
    }
  }
  if (chunks.empty()) chunks.push_back({0, out, weights});
  return chunks;
}

// One thread's matmul primitives for chunks, keyed by shape (every layer of a model
// shares them): M, in, chunk columns, type. Bounded: past kMaxEntries it starts
// over (oneDNN's own primitive cache makes re-creation cheap).
struct ChunkMatmuls {
  static constexpr size_t kMaxEntries = 512;
  dnnl::stream stream{CpuEngine()};
  std::map<std::tuple<int64_t, int64_t, int64_t, Dt>, dnnl::matmul> entries;
  // A chunk's columns of y, when they are not all of y's.
  std::vector<float> columns;

  dnnl::matmul& Get(int64_t rows, int64_t in, const memory::desc& weights,
                    int64_t columns, Dt dt) {
    const auto key = std::make_tuple(rows, in, columns, dt);
    auto it = entries.find(key);
    if (it != entries.end()) return it->second;
    if (entries.size() >= kMaxEntries) entries.clear();
    return entries.emplace(key, dnnl::matmul(MatmulDesc(rows, in, columns, dt, weights)))
        .first->second;
  }
};

// Packed::chunks of int8 weights: as ColumnChunks splits a layer, in 64-output
// blocks (begin and end count blocks).
std::vector<LinearWeights::Packed::Chunk> Int8Chunks(int64_t in, int64_t out) {
  const int64_t blocks = (out + internal::kInt8BlockOut - 1) / internal::kInt8BlockOut;
  const int64_t count =
      std::min({kMaxChunks, std::max<int64_t>(1, in * out / kMinChunkValues), blocks});
  const int64_t per_chunk = (blocks + count - 1) / count;
  std::vector<LinearWeights::Packed::Chunk> chunks;
  for (int64_t begin = 0; begin < blocks; begin += per_chunk) {
    chunks.push_back({begin, std::min(blocks, begin + per_chunk), memory()});
  }
  return chunks;
}

// y's columns of `chunk` for x [rows, in] (already bfloat16 for bfloat16 weights).
// On whichever thread takes the chunk: its primitives are that thread's.
void RunChunk(const LinearWeights& w, const LinearWeights::Packed::Chunk& chunk,
              const void* x, int64_t rows, float* y) {
  thread_local ChunkMatmuls matmuls;
  const dnnl::engine& engine = CpuEngine();
  const Dt dt = DataType(w.type());
  const int64_t columns = chunk.end - chunk.begin;
  const bool whole = columns == w.out();
  dnnl::matmul& matmul = matmuls.Get(rows, w.in(), chunk.weights.get_desc(), columns, dt);
  const memory src(memory::desc({rows, w.in()}, dt, Tag::ab), engine,
                   const_cast<void*>(x));
  float* bias = static_cast<float*>(w.packed().bias.get_data_handle()) + chunk.begin;
  const memory b(memory::desc({1, columns}, Dt::f32, Tag::ab), engine, bias);
  // oneDNN 2.6's fast (brgemm) matmul wants a dense destination: with y's row
  // stride it fell back to its reference kernel, 100x slower. A chunk's columns go
  // through a dense buffer instead (copying them costs 1/in of the product).
  if (!whole) matmuls.columns.resize(rows * columns);
  float* out = whole ? y : matmuls.columns.data();
  const memory dst(memory::desc({rows, columns}, Dt::f32, Tag::ab), engine, out);
  matmul.execute(matmuls.stream, {{DNNL_ARG_SRC, src},
                                  {DNNL_ARG_WEIGHTS, chunk.weights},
                                  {DNNL_ARG_BIAS, b},
                                  {DNNL_ARG_DST, dst}});
  matmuls.stream.wait();
  if (whole) return;
  for (int64_t r = 0; r < rows; ++r) {
    std::copy(out + r * columns, out + (r + 1) * columns, y + r * w.out() + chunk.begin);
  }
}

}  // namespace

LinearWeights::LinearWeights(const float* weight, int64_t out, int64_t in, bool in_by_out,
                             const float* bias, WeightFormat format)
    : in_(in), out_(out), type_(format.type), packed_(std::make_unique<Packed>()) {
  if (type_ == WeightType::kInt8) {
    packed_->int8 =
        internal::QuantizeInt8(weight, out, in, in_by_out, bias, format.group_size);
    packed_->chunks = Int8Chunks(in, out);
    bytes_ = packed_->int8.bytes();
    ChooseKernels();
    return;
  }
  const dnnl::engine& engine = CpuEngine();
  const Dt dt = DataType(type_);
  // The matmul's weights are [in, out]; torch's [out, in] storage is their `ba`.
  memory user(memory::desc({in, out}, Dt::f32, in_by_out ? Tag::ab : Tag::ba), engine,
              const_cast<float*>(weight));
  packed_->weights = memory(PreferredWeights(in, out, dt), engine);
  dnnl::stream stream(engine);
  dnnl::reorder(user, packed_->weights).execute(stream, user, packed_->weights);
  packed_->bias = memory(memory::desc({1, out}, Dt::f32, Tag::ab), engine);
  float* b = static_cast<float*>(packed_->bias.get_data_handle());
  for (int64_t i = 0; i < out; ++i) b[i] = bias == nullptr ? 0.0f : bias[i];
  stream.wait();
  packed_->few_rows = FewRowsLayout(packed_->weights, dt, b);
  packed_->chunks = ColumnChunks(packed_->weights, in, out, dt);
  bytes_ = static_cast<int64_t>(packed_->weights.get_desc().get_size() +
                                packed_->bias.get_desc().get_size());
  ChooseKernels();
}

void LinearWeights::ChooseKernels() {
  const bool packed_for_few_rows = packed_->few_rows.data != nullptr;
  packed_->many_rows_kernel = ChooseLinearKernel(type_, in_, packed_for_few_rows,
                                                 LinearCall::kManyRows, ThisCpu());
  packed_->few_rows_kernel = ChooseLinearKernel(type_, in_, packed_for_few_rows,
                                                LinearCall::kFewRows, ThisCpu());
}

LinearKernel LinearWeights::kernel(LinearCall call) const {
  return call == LinearCall::kManyRows ? packed_->many_rows_kernel
                                       : packed_->few_rows_kernel;
}

bool LinearWeights::calls_share_bits() const {
  return packed_->many_rows_kernel == LinearKernel::kAmxManyRows ||
         packed_->many_rows_kernel == LinearKernel::kVdpbf16psManyRows;
}

LinearWeights::~LinearWeights() = default;

int64_t LinearWeights::group_size() const {
  return type_ == WeightType::kInt8 ? packed_->int8.group : 0;
}

int64_t LinearWeights::chunks() const {
  return static_cast<int64_t>(packed_->chunks.size());
}

struct LinearContext::Impl {
  dnnl::stream stream{CpuEngine()};
  // x rounded to bfloat16 for bfloat16 weights, keyed by [rows, in]. Bounded as
  // ChunkMatmuls is.
  static constexpr size_t kMaxEntries = 512;
  std::map<std::pair<int64_t, int64_t>, dnnl::reorder> to_bf16;
  std::vector<uint16_t> bf16_src;
  // LinearFewRows' x for bfloat16 weights: pairs for VDPBF16PS, or rounded floats.
  std::vector<uint32_t> few_rows_pairs;
  std::vector<float> few_rows_rounded;
  // Linear's x for the AMX kernel: the pairs regrouped into tiles.
  std::vector<uint32_t> amx_row_tiles;

  dnnl::reorder& ToBfloat16(int64_t rows, int64_t in) {
    const auto key = std::make_pair(rows, in);
    auto it = to_bf16.find(key);
    if (it != to_bf16.end()) return it->second;
    if (to_bf16.size() >= kMaxEntries) to_bf16.clear();
    return to_bf16
        .emplace(key, dnnl::reorder(dnnl::reorder::primitive_desc(
                          CpuEngine(), memory::desc({rows, in}, Dt::f32, Tag::ab),
                          CpuEngine(), memory::desc({rows, in}, Dt::bf16, Tag::ab))))
        .first->second;
  }
};

LinearContext::LinearContext() : impl_(std::make_unique<Impl>()) {}
LinearContext::~LinearContext() = default;

void Linear(LinearContext& context, const LinearWeights& w, const float* x, int64_t rows,
            float* y, ParallelFor* parallel) {
  LinearContext::Impl& impl = context.impl();
  const std::vector<LinearWeights::Packed::Chunk>& chunks = w.packed().chunks;
  const internal::FewRowsWeights& few = w.packed().few_rows;
  // x's bfloat16 pairs in tiles, for the AMX kernels.
  auto amx_tiles = [&] {
    internal::PackAmxRowTiles(x, rows, w.in(), impl.amx_row_tiles);
    return impl.amx_row_tiles.data();
  };
  const LinearKernel kernel = w.packed().many_rows_kernel;
  if (kernel == LinearKernel::kVdpbf16psManyRows) {
    // The few-rows kernel, in passes of kRowsPerPass: a pass's inputs for one k chunk
    // of the kernel (256 rows x 1024 bfloat16) stay in a 1 MiB L2 beside the
    // chunk's weights, where 2048 rows in one pass streamed them from memory for
    // every 64 outputs. A row's bits do not depend on its pass.
    constexpr int64_t kRowsPerPass = 256;
    for (int64_t r = 0; r < rows; r += kRowsPerPass) {
      LinearFewRows(context, w, x + r * w.in(), std::min(kRowsPerPass, rows - r),
                    y + r * w.out(), parallel);
    }
    return;
  }
  if (kernel == LinearKernel::kAmxManyRows) {
    // The same chunks of columns as oneDNN's matmuls, in 64-output blocks.
    const uint32_t* tiles = amx_tiles();
    constexpr int64_t kBlock = internal::kFewRowsBlockOut;
    return RunParallel(parallel, static_cast<int64_t>(chunks.size()), [&](int64_t c) {
      internal::LinearManyRowsAmxBlocks(few, tiles, rows, chunks[c].begin / kBlock,
                                        (chunks[c].end + kBlock - 1) / kBlock, y,
                                        few.out);
    });
  }
  if (kernel == LinearKernel::kInt8AmxManyRows) {
    const uint32_t* tiles = amx_tiles();
    return RunParallel(parallel, static_cast<int64_t>(chunks.size()), [&](int64_t c) {
      internal::LinearInt8ManyRowsAmx(w.packed().int8, tiles, rows, chunks[c].begin,
                                      chunks[c].end, y);
    });
  }
  const void* src = x;
  if (w.type() != WeightType::kFloat32) {
    // Once, here: every chunk reads the same rounded x.
    impl.bf16_src.resize(rows * w.in());
    const dnnl::engine& engine = CpuEngine();
    memory from(memory::desc({rows, w.in()}, Dt::f32, Tag::ab), engine,
                const_cast<float*>(x));
    memory to(memory::desc({rows, w.in()}, Dt::bf16, Tag::ab), engine,
              impl.bf16_src.data());
    impl.ToBfloat16(rows, w.in()).execute(impl.stream, from, to);
    impl.stream.wait();
    src = impl.bf16_src.data();
  }
  if (kernel == LinearKernel::kInt8OneDnnTiles) {
    const auto* bf16 = static_cast<const uint16_t*>(src);
    return RunParallel(parallel, static_cast<int64_t>(chunks.size()), [&](int64_t c) {
      internal::LinearInt8ManyRows(w.packed().int8, bf16, rows, chunks[c].begin,
                                   chunks[c].end, y);
    });
  }
  RunParallel(parallel, static_cast<int64_t>(chunks.size()),
              [&](int64_t c) { RunChunk(w, chunks[c], src, rows, y); });
}

void LinearFewRows(LinearContext& context, const LinearWeights& w, const float* x,
                   int64_t rows, float* y, ParallelFor* parallel) {
  // Threads split the 64-output blocks (each reads its own share of the weights) in
  // up to kChunks pieces taken in turn, so a thread that joins late takes fewer.
  constexpr int64_t kChunks = 8;
  const LinearKernel kernel = w.packed().few_rows_kernel;
  if (kernel == LinearKernel::kOneDnnMatmul)
    return Linear(context, w, x, rows, y, parallel);
  LinearContext::Impl& impl = context.impl();
  const internal::Int8Weights& int8 = w.packed().int8;
  const internal::FewRowsWeights& few = w.packed().few_rows;
  const int64_t blocks =
      w.type() == WeightType::kInt8
          ? int8.out_blocks
          : (few.out + internal::kFewRowsBlockOut - 1) / internal::kFewRowsBlockOut;
  const int64_t per_chunk = (blocks + kChunks - 1) / kChunks;
  const int64_t chunks = (blocks + per_chunk - 1) / per_chunk;
  // Runs blocks(nb_begin, nb_end) for each chunk of 64-output blocks.
  auto run = [&](auto&& blocks_of) {
    RunParallel(parallel, chunks, [&](int64_t c) {
      blocks_of(c * per_chunk, std::min(blocks, (c + 1) * per_chunk));
    });
  };
  // x's bfloat16 pairs, for the bfloat16 dot-product instructions.
  auto pairs = [&] {
    internal::PackBfloat16Pairs(x, rows, w.in(), impl.few_rows_pairs);
    return impl.few_rows_pairs.data();
  };
  switch (kernel) {
    case LinearKernel::kInt8AmxFewRows:
      return run([&, p = pairs()](int64_t b, int64_t e) {
        internal::LinearInt8FewRowsAmxBlocks(int8, p, rows, b, e, y);
      });
    case LinearKernel::kInt8Vdpbf16psFewRows:
      return run([&, p = pairs()](int64_t b, int64_t e) {
        internal::LinearInt8FewRowsVdpbf16psBlocks(int8, p, rows, b, e, y);
      });
    case LinearKernel::kInt8HwyFewRows:
      return run([&](int64_t b, int64_t e) {
        internal::LinearInt8FewRowsBlocks(int8, x, rows, b, e, y);
      });
    case LinearKernel::kAmxFewRows:
      return run([&, p = pairs()](int64_t b, int64_t e) {
        internal::LinearFewRowsAmxBlocks(few, p, rows, b, e, y);
      });
    case LinearKernel::kVdpbf16psFewRows:
      return run([&, p = pairs()](int64_t b, int64_t e) {
        internal::LinearFewRowsVdpbf16psBlocks(few, p, rows, b, e, y);
      });
    default:  // kHwyFewRows
      break;
  }
  if (few.bf16) {
    // The product's bfloat16 semantics (as oneDNN's): x rounded to bfloat16 first.
    impl.few_rows_rounded.resize(rows * few.in);
    for (int64_t i = 0; i < rows * few.in; ++i) {
      impl.few_rows_rounded[i] = Bfloat16ToFloat32(Float32ToBfloat16(x[i]));
    }
    x = impl.few_rows_rounded.data();
  }
  run([&](int64_t b, int64_t e) {
    internal::LinearFewRowsBlocks(few, x, rows, b, e, y);
  });
}

bool LinearWeights::few_rows_native() const {
  return type_ == WeightType::kInt8 || packed_->few_rows.data != nullptr;
}

namespace internal {
bool FewRowsDpbf16Supported() {
  static const bool supported = __builtin_cpu_supports("avx512bf16");
  return supported;
}

bool AmxRunsLinear(const FewRowsWeights& w) {
  return ChooseLinearKernel(w.bf16 ? WeightType::kBfloat16 : WeightType::kFloat32, w.in,
                            w.data != nullptr, LinearCall::kManyRows,
                            ThisCpu()) == LinearKernel::kAmxManyRows;
}

bool Int8AmxRunsLinear(const Int8Weights& w) {
  return ChooseLinearKernel(WeightType::kInt8, w.in, true, LinearCall::kManyRows,
                            ThisCpu()) == LinearKernel::kInt8AmxManyRows;
}

void LinearFewRowsDpbf16Blocks(const FewRowsWeights& w, const uint32_t* x, int64_t rows,
                               int64_t nb_begin, int64_t nb_end, float* y) {
  if (ChooseLinearKernel(WeightType::kBfloat16, w.in, true, LinearCall::kFewRows,
                         ThisCpu()) == LinearKernel::kAmxFewRows) {
    return LinearFewRowsAmxBlocks(w, x, rows, nb_begin, nb_end, y);
  }
  LinearFewRowsVdpbf16psBlocks(w, x, rows, nb_begin, nb_end, y);
}

void LinearInt8FewRowsDpbf16Blocks(const Int8Weights& w, const uint32_t* x, int64_t rows,
                                   int64_t nb_begin, int64_t nb_end, float* y) {
  if (ChooseLinearKernel(WeightType::kInt8, w.in, true, LinearCall::kFewRows,
                         ThisCpu()) == LinearKernel::kInt8AmxFewRows) {
    return LinearInt8FewRowsAmxBlocks(w, x, rows, nb_begin, nb_end, y);
  }
  LinearInt8FewRowsVdpbf16psBlocks(w, x, rows, nb_begin, nb_end, y);
}

const FewRowsWeights& FewRowsLayoutOf(const LinearWeights& w) {
  return w.packed().few_rows;
}

const Int8Weights& Int8LayoutOf(const LinearWeights& w) { return w.packed().int8; }
}  // namespace internal

void LinearReference(const float* weight, const float* bias, int64_t out, int64_t in,
                     const float* x, int64_t rows, float* y) {
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t o = 0; o < out; ++o) {
      double sum = bias == nullptr ? 0.0 : bias[o];
      for (int64_t i = 0; i < in; ++i) sum += double(x[r * in + i]) * weight[o * in + i];
      y[r * out + o] = static_cast<float>(sum);
    }
  }
}

}  // namespace layerserve::kernels
