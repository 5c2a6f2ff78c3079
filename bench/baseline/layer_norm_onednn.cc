// LayerNormOneDnn: oneDNN's layer_normalization primitive, cached per shape in the
// caller's NormContext.
#include "bench/baseline/layer_norm_onednn.h"

#include <cmath>
#include <cstring>
#include <limits>
#include <unordered_map>
#include <vector>

#include "oneapi/dnnl/dnnl.hpp"

namespace layerserve::kernels::baseline {
namespace {

// Primitives are specialized on all of these; a batch with a new row count needs
// a new one (oneDNN 2.6 has no run-time dims for layer_normalization).
struct LayerNormKey {
  int64_t rows;
  int64_t dim;
  unsigned flags;         // dnnl::normalization_flags.
  uint32_t epsilon_bits;  // Bits, not value: keys must compare exactly.
  bool operator==(const LayerNormKey& o) const {
    return rows == o.rows && dim == o.dim && flags == o.flags &&
           epsilon_bits == o.epsilon_bits;
  }
};

struct LayerNormKeyHash {
  size_t operator()(const LayerNormKey& k) const {
    size_t h = std::hash<int64_t>()(k.rows);
    h = h * 31 + std::hash<int64_t>()(k.dim);
    h = h * 31 + k.flags;
    return h * 31 + k.epsilon_bits;
  }
};

// A primitive and its execute arguments, built once. A call only re-points the
// memory objects' data handles (args holds the same objects: dnnl::memory is a
// shared handle), so it creates no oneDNN objects and allocates nothing.
struct LayerNormEntry {
  dnnl::layer_normalization_forward primitive;
  dnnl::memory src, dst, scale, shift, mean, variance, scratchpad;
  size_t scratchpad_bytes = 0;
  std::unordered_map<int, dnnl::memory> args;
};

// Past this many shapes the cache is cleared rather than grown: the live set of
// shapes is small (batches of a few row counts), and a stream of distinct shapes
// must not hold memory forever. Re-creating is cheap: oneDNN has its own
// process-wide primitive cache, so the JIT code is usually reused.
constexpr size_t kMaxCachedPrimitives = 64;

uint32_t FloatBits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}

}  // namespace

struct NormContext::Impl {
  dnnl::engine engine{dnnl::engine::kind::cpu, 0};
  dnnl::stream stream{engine};
  std::unordered_map<LayerNormKey, LayerNormEntry, LayerNormKeyHash> layer_norms;
  // Buffers shared by all primitives (they run one at a time on this context),
  // grown to the largest need and then reused.
  std::vector<unsigned char> scratchpad;
  std::vector<float> offset_scale;    // 1 + weight, for weight_offset.
  std::vector<float> mean, variance;  // Per-row statistics out of oneDNN.

  LayerNormEntry& GetLayerNorm(const LayerNormKey& key);
};

LayerNormEntry& NormContext::Impl::GetLayerNorm(const LayerNormKey& key) {
  auto it = layer_norms.find(key);
  if (it != layer_norms.end()) return it->second;
  if (layer_norms.size() >= kMaxCachedPrimitives) layer_norms.clear();

  using dnnl::memory;
  const memory::desc data_md({key.rows, key.dim}, memory::data_type::f32,
                             memory::format_tag::ab);
  const memory::desc stat_md({key.rows}, memory::data_type::f32, memory::format_tag::a);
  const memory::desc channel_md({key.dim}, memory::data_type::f32, memory::format_tag::a);
  float epsilon;
  std::memcpy(&epsilon, &key.epsilon_bits, sizeof epsilon);
  // forward_training, not forward_inference: it also outputs each row's variance,
  // the only way oneDNN 2.6 reveals a row whose float32 variance overflowed
  // (|x| >~ 1e17). Such a row would otherwise come out silently as the bias; with
  // the variance we turn it into NaN, as PyTorch does. forward_inference is no
  // faster: oneDNN 2.6 runs the same kernel (measured on the target machine, one
  // thread, best of 15-51, training vs inference: 1x768 0.54 vs 0.54 us, 16x4096
  // 18.0 vs 18.0 us, 512x4096 1.03 vs 1.06 ms, 4096x4096 10.8 vs 10.8 ms), and
  // keeping the NaN rows without the variance would cost another pass over the
  // input (which in-place calls have already overwritten).
  const dnnl::layer_normalization_forward::desc desc(
      dnnl::prop_kind::forward_training, data_md, stat_md, epsilon,
      static_cast<dnnl::normalization_flags>(key.flags));
  // User-managed scratchpad: the primitive then holds no hidden per-thread state,
  // so a context may move between threads (never be used by two at once).
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  const dnnl::layer_normalization_forward::primitive_desc pd(desc, attr, engine);

  LayerNormEntry e;
  e.primitive = dnnl::layer_normalization_forward(pd);
  e.src = memory(data_md, engine, DNNL_MEMORY_NONE);
  e.dst = memory(data_md, engine, DNNL_MEMORY_NONE);
  e.scale = memory(channel_md, engine, DNNL_MEMORY_NONE);
  e.shift = memory(channel_md, engine, DNNL_MEMORY_NONE);
  e.mean = memory(stat_md, engine, DNNL_MEMORY_NONE);
  e.variance = memory(stat_md, engine, DNNL_MEMORY_NONE);
  e.scratchpad = memory(pd.scratchpad_desc(), engine, DNNL_MEMORY_NONE);
  e.scratchpad_bytes = pd.scratchpad_desc().get_size();
  e.args = {{DNNL_ARG_SRC, e.src},
            {DNNL_ARG_DST, e.dst},
            {DNNL_ARG_MEAN, e.mean},
            {DNNL_ARG_VARIANCE, e.variance}};
  using Flags = dnnl::normalization_flags;
  if (key.flags & static_cast<unsigned>(Flags::use_scale)) {
    e.args.emplace(DNNL_ARG_SCALE, e.scale);
  }
  if (key.flags & static_cast<unsigned>(Flags::use_shift)) {
    e.args.emplace(DNNL_ARG_SHIFT, e.shift);
  }
  if (e.scratchpad_bytes > 0) e.args.emplace(DNNL_ARG_SCRATCHPAD, e.scratchpad);
  return layer_norms.emplace(key, std::move(e)).first->second;
}

NormContext::NormContext() : impl_(std::make_unique<Impl>()) {}
NormContext::~NormContext() = default;

int64_t NormContext::CachedPrimitiveCount() const {
  return static_cast<int64_t>(impl_->layer_norms.size());
}

void LayerNormOneDnn(NormContext& ctx, const float* x, int64_t rows, int64_t dim,
                     const NormParams& p, float* y) {
  NormContext::Impl& impl = ctx.impl();
  const float* src = x;
  if (p.residual != nullptr) {
    // s = x + residual first (residual_out may alias x or residual: same-index read
    // before write), then normalize s.
    for (int64_t i = 0; i < rows * dim; ++i) p.residual_out[i] = x[i] + p.residual[i];
    src = p.residual_out;
  }
  const float* scale = p.weight;
  if (p.weight != nullptr && p.weight_offset) {
    impl.offset_scale.resize(dim);
    for (int64_t i = 0; i < dim; ++i) impl.offset_scale[i] = 1.0f + p.weight[i];
    scale = impl.offset_scale.data();
  }

  using Flags = dnnl::normalization_flags;
  unsigned flags = static_cast<unsigned>(Flags::none);
  if (scale != nullptr) flags |= static_cast<unsigned>(Flags::use_scale);
  if (p.bias != nullptr) flags |= static_cast<unsigned>(Flags::use_shift);
  LayerNormEntry* entry;
  try {
    entry = &impl.GetLayerNorm({rows, dim, flags, FloatBits(p.epsilon)});
  } catch (const dnnl::error&) {
    // oneDNN cannot make this primitive (out of memory, unsupported shape):
    // the reference twin is the fallback, on s, already summed.
    NormParams summed = p;
    summed.residual = nullptr;
    summed.residual_out = nullptr;
    LayerNormReference(src, rows, dim, summed, y);
    return;
  }
  LayerNormEntry& e = *entry;

  impl.mean.resize(rows);
  impl.variance.resize(rows);
  if (impl.scratchpad.size() < e.scratchpad_bytes) {
    impl.scratchpad.resize(e.scratchpad_bytes);
  }
  // oneDNN only reads src, scale and shift; its API takes non-const handles.
  e.src.set_data_handle(const_cast<float*>(src));
  e.dst.set_data_handle(y);
  e.mean.set_data_handle(impl.mean.data());
  e.variance.set_data_handle(impl.variance.data());
  if (scale != nullptr) e.scale.set_data_handle(const_cast<float*>(scale));
  if (p.bias != nullptr) e.shift.set_data_handle(const_cast<float*>(p.bias));
  if (e.scratchpad_bytes > 0) e.scratchpad.set_data_handle(impl.scratchpad.data());
  e.primitive.execute(impl.stream, e.args);
  impl.stream.wait();

  // Same rule as the reference: a row without finite float32 statistics is NaN.
  for (int64_t r = 0; r < rows; ++r) {
    if (std::isfinite(impl.variance[r]) && std::isfinite(impl.mean[r])) continue;
    float* y_row = y + r * dim;
    for (int64_t i = 0; i < dim; ++i) y_row[i] = std::numeric_limits<float>::quiet_NaN();
  }
}

}  // namespace layerserve::kernels::baseline
