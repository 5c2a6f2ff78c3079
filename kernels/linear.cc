#include "kernels/linear.h"

#include <algorithm>
#include <map>
#include <utility>
#include <vector>

#include "common/dtype.h"
#include "kernels/linear_internal.h"
#include "kernels/onednn_engine.h"

namespace layerserve::kernels {
namespace {

using dnnl::memory;
using Tag = memory::format_tag;
using Dt = memory::data_type;

// The M used to ask oneDNN for its preferred weights layout; any M gives the same.
constexpr int64_t kLayoutProbeRows = 128;

Dt DataType(WeightType type) { return type == WeightType::kFloat32 ? Dt::f32 : Dt::bf16; }

dnnl::matmul::primitive_desc MatmulDesc(int64_t rows, int64_t in, int64_t out, Dt dt,
                                        const memory::desc& weights) {
  return dnnl::matmul::primitive_desc(
      dnnl::matmul::desc(memory::desc({rows, in}, dt, Tag::ab), weights,
                         memory::desc({1, out}, Dt::f32, Tag::ab),
                         memory::desc({rows, out}, Dt::f32, Tag::ab)),
      CpuEngine());
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
};

LinearWeights::LinearWeights(const float* weight, int64_t out, int64_t in, bool in_by_out,
                             const float* bias, WeightType type)
    : in_(in), out_(out), type_(type), packed_(std::make_unique<Packed>()) {
  const dnnl::engine& engine = CpuEngine();
  const Dt dt = DataType(type);
  const memory::desc preferred =
      MatmulDesc(kLayoutProbeRows, in, out, dt, memory::desc({in, out}, dt, Tag::any))
          .weights_desc();
  // The matmul's weights are [in, out]; torch's [out, in] storage is their `ba`.
  memory user(memory::desc({in, out}, Dt::f32, in_by_out ? Tag::ab : Tag::ba), engine,
              const_cast<float*>(weight));
  packed_->weights = memory(preferred, engine);
  dnnl::stream stream(engine);
  dnnl::reorder(user, packed_->weights).execute(stream, user, packed_->weights);
  packed_->bias = memory(memory::desc({1, out}, Dt::f32, Tag::ab), engine);
  float* b = static_cast<float*>(packed_->bias.get_data_handle());
  for (int64_t i = 0; i < out; ++i) b[i] = bias == nullptr ? 0.0f : bias[i];
  stream.wait();
  packed_->few_rows = FewRowsLayout(packed_->weights, dt, b);
  bytes_ = static_cast<int64_t>(packed_->weights.get_desc().get_size() +
                                packed_->bias.get_desc().get_size());
}

LinearWeights::~LinearWeights() = default;

struct LinearContext::Impl {
  dnnl::stream stream{CpuEngine()};
  struct Entry {
    dnnl::matmul matmul;
    dnnl::reorder to_bf16;  // Only for bfloat16 weights.
  };
  // Keyed by the weights and M. Bounded: past kMaxEntries it starts over (oneDNN's
  // own primitive cache makes re-creation cheap).
  static constexpr size_t kMaxEntries = 512;
  std::map<std::pair<const LinearWeights*, int64_t>, Entry> entries;
  std::vector<uint16_t> bf16_src;  // x rounded to bfloat16.
  // LinearFewRows' x for bfloat16 weights: pairs for VDPBF16PS, or rounded floats.
  std::vector<uint32_t> few_rows_pairs;
  std::vector<float> few_rows_rounded;

  Entry& Get(const LinearWeights& w, int64_t rows) {
    auto key = std::make_pair(&w, rows);
    auto it = entries.find(key);
    if (it != entries.end()) return it->second;
    if (entries.size() >= kMaxEntries) entries.clear();
    const Dt dt = DataType(w.type());
    Entry entry;
    entry.matmul = dnnl::matmul(
        MatmulDesc(rows, w.in(), w.out(), dt, w.packed().weights.get_desc()));
    if (dt == Dt::bf16) {
      entry.to_bf16 = dnnl::reorder(dnnl::reorder::primitive_desc(
          CpuEngine(), memory::desc({rows, w.in()}, Dt::f32, Tag::ab), CpuEngine(),
          memory::desc({rows, w.in()}, Dt::bf16, Tag::ab)));
    }
    return entries.emplace(key, std::move(entry)).first->second;
  }
};

LinearContext::LinearContext() : impl_(std::make_unique<Impl>()) {}
LinearContext::~LinearContext() = default;

void Linear(LinearContext& context, const LinearWeights& w, const float* x, int64_t rows,
            float* y) {
  LinearContext::Impl& impl = context.impl();
  LinearContext::Impl::Entry& entry = impl.Get(w, rows);
  const dnnl::engine& engine = CpuEngine();
  const Dt dt = DataType(w.type());
  memory src(memory::desc({rows, w.in()}, Dt::f32, Tag::ab), engine,
             const_cast<float*>(x));
  if (dt == Dt::bf16) {
    impl.bf16_src.resize(rows * w.in());
    memory converted(memory::desc({rows, w.in()}, Dt::bf16, Tag::ab), engine,
                     impl.bf16_src.data());
    entry.to_bf16.execute(impl.stream, src, converted);
    src = converted;
  }
  memory dst(memory::desc({rows, w.out()}, Dt::f32, Tag::ab), engine, y);
  entry.matmul.execute(impl.stream, {{DNNL_ARG_SRC, src},
                                     {DNNL_ARG_WEIGHTS, w.packed().weights},
                                     {DNNL_ARG_BIAS, w.packed().bias},
                                     {DNNL_ARG_DST, dst}});
  impl.stream.wait();
}

void LinearFewRows(LinearContext& context, const LinearWeights& w, const float* x,
                   int64_t rows, float* y, ParallelFor* parallel) {
  const internal::FewRowsWeights& few = w.packed().few_rows;
  if (few.data == nullptr) return Linear(context, w, x, rows, y);
  // Threads split the 64-output blocks (each reads its own share of the weights) in
  // up to kChunks pieces taken in turn, so a thread that joins late takes fewer.
  constexpr int64_t kChunks = 8;
  const int64_t blocks =
      (few.out + internal::kFewRowsBlockOut - 1) / internal::kFewRowsBlockOut;
  const int64_t per_chunk = (blocks + kChunks - 1) / kChunks;
  const int64_t chunks = (blocks + per_chunk - 1) / per_chunk;
  auto end_of = [&](int64_t c) { return std::min(blocks, (c + 1) * per_chunk); };
  LinearContext::Impl& impl = context.impl();
  if (few.bf16 && few.in % 2 == 0 && internal::FewRowsDpbf16Supported()) {
    internal::PackBfloat16Pairs(x, rows, few.in, impl.few_rows_pairs);
    const uint32_t* pairs = impl.few_rows_pairs.data();
    return RunParallel(parallel, chunks, [&](int64_t c) {
      internal::LinearFewRowsDpbf16Blocks(few, pairs, rows, c * per_chunk, end_of(c), y);
    });
  }
  if (few.bf16) {
    // The product's bfloat16 semantics (as oneDNN's): x rounded to bfloat16 first.
    impl.few_rows_rounded.resize(rows * few.in);
    for (int64_t i = 0; i < rows * few.in; ++i) {
      impl.few_rows_rounded[i] = Bfloat16ToFloat32(Float32ToBfloat16(x[i]));
    }
    x = impl.few_rows_rounded.data();
  }
  RunParallel(parallel, chunks, [&](int64_t c) {
    internal::LinearFewRowsBlocks(few, x, rows, c * per_chunk, end_of(c), y);
  });
}

bool LinearWeights::few_rows_native() const { return packed_->few_rows.data != nullptr; }

namespace internal {
bool FewRowsDpbf16Supported() {
  static const bool supported = __builtin_cpu_supports("avx512bf16");
  return supported;
}

const FewRowsWeights& FewRowsLayoutOf(const LinearWeights& w) {
  return w.packed().few_rows;
}
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
