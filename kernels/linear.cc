#include "kernels/linear.h"

#include <map>
#include <utility>
#include <vector>

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

}  // namespace

struct LinearWeights::Packed {
  memory weights;
  memory bias;  // [1, out] float32, zeros when the layer has none.
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
}

LinearWeights::~LinearWeights() = default;

int64_t LinearWeights::bytes() const {
  return static_cast<int64_t>(packed_->weights.get_desc().get_size() +
                              packed_->bias.get_desc().get_size());
}

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
      entry.to_bf16 = dnnl::reorder(
          dnnl::reorder::primitive_desc(CpuEngine(),
                                        memory::desc({rows, w.in()}, Dt::f32, Tag::ab),
                                        CpuEngine(),
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
  memory src(memory::desc({rows, w.in()}, Dt::f32, Tag::ab), engine, const_cast<float*>(x));
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
