// ActivateOneDnn: oneDNN's eltwise primitive over fixed chunks, cached per
// activation and chunk size in the caller's ActivationContext; the tail goes to the
// Highway loop that Activate() runs.
#include "bench/baseline/activate_onednn.h"

#include <array>
#include <optional>
#include <unordered_map>

#include "kernels/activation/activation_internal.h"
#include "oneapi/dnnl/dnnl.hpp"

namespace layerserve::kernels::baseline {
namespace {

// An eltwise primitive over one chunk of values and its execute arguments, built
// once per activation and chunk size. A call only re-points the memory objects'
// data handles, so it creates no oneDNN objects. Fixed chunks (rather than one
// primitive per size) keep the cache at two entries per activation however many
// sizes the batches have; oneDNN's ~0.5 us per execute is <1% of a large chunk and
// ~8% of a small one.
struct EltwiseEntry {
  dnnl::eltwise_forward primitive;
  dnnl::memory src, dst;
  std::unordered_map<int, dnnl::memory> args;  // Holds src and dst (shared handles).
};

struct EltwiseAlgorithm {
  dnnl::algorithm algorithm;
  float alpha;
};

// oneDNN's eltwise algorithm for each activation. swish is x * sigmoid(alpha x).
EltwiseAlgorithm OneDnnAlgorithm(Activation act) {
  using dnnl::algorithm;
  switch (act) {
    case Activation::kRelu:
      return {algorithm::eltwise_relu, 0.0f};  // alpha = negative slope.
    case Activation::kGelu:
      return {algorithm::eltwise_gelu_erf, 0.0f};
    case Activation::kGeluTanh:
      return {algorithm::eltwise_gelu_tanh, 0.0f};
    case Activation::kSilu:
      return {algorithm::eltwise_swish, 1.0f};
    case Activation::kSigmoid:
      return {algorithm::eltwise_logistic, 0.0f};
    case Activation::kTanh:
      return {algorithm::eltwise_tanh, 0.0f};
    case Activation::kQuickGelu:
      return {algorithm::eltwise_swish, 1.702f};
  }
  return {algorithm::eltwise_relu, 0.0f};
}

}  // namespace

struct ActivationContext::Impl {
  dnnl::engine engine{dnnl::engine::kind::cpu, 0};
  dnnl::stream stream{engine};
  // [activation][0: kOneDnnChunk, 1: kOneDnnSmallChunk].
  std::array<std::array<std::optional<EltwiseEntry>, 2>, kNumActivations> eltwise;

  EltwiseEntry& GetEltwise(Activation act, bool small);
};

EltwiseEntry& ActivationContext::Impl::GetEltwise(Activation act, bool small) {
  std::optional<EltwiseEntry>& slot = eltwise[static_cast<int>(act)][small];
  if (slot.has_value()) return *slot;
  using dnnl::memory;
  const memory::desc md({small ? kOneDnnSmallChunk : kOneDnnChunk},
                        memory::data_type::f32, memory::format_tag::a);
  const EltwiseAlgorithm a = OneDnnAlgorithm(act);
  const dnnl::eltwise_forward::desc desc(dnnl::prop_kind::forward_inference, a.algorithm,
                                         md, a.alpha, 0.0f);
  const dnnl::eltwise_forward::primitive_desc pd(desc, engine);
  EltwiseEntry e;
  e.primitive = dnnl::eltwise_forward(pd);
  e.src = memory(md, engine, DNNL_MEMORY_NONE);
  e.dst = memory(md, engine, DNNL_MEMORY_NONE);
  e.args = {{DNNL_ARG_SRC, e.src}, {DNNL_ARG_DST, e.dst}};
  slot = std::move(e);
  return *slot;
}

ActivationContext::ActivationContext() : impl_(std::make_unique<Impl>()) {}
ActivationContext::~ActivationContext() = default;

int64_t ActivationContext::CachedPrimitiveCount() const {
  int64_t count = 0;
  for (const auto& slots : impl_->eltwise) {
    for (const auto& slot : slots) count += slot.has_value();
  }
  return count;
}

void ActivateOneDnn(ActivationContext& ctx, Activation act, const float* x, int64_t n,
                    float* y) {
  ActivationContext::Impl& impl = ctx.impl();
  int64_t done = 0;
  for (bool small : {false, true}) {
    const int64_t chunk = small ? kOneDnnSmallChunk : kOneDnnChunk;
    if (n - done < chunk) continue;
    EltwiseEntry* e;
    try {
      e = &impl.GetEltwise(act, small);
    } catch (const dnnl::error&) {
      break;  // oneDNN cannot make it (out of memory...): Highway does the rest.
    }
    for (; n - done >= chunk; done += chunk) {
      // oneDNN only reads src; its API takes non-const handles.
      e->src.set_data_handle(const_cast<float*>(x + done));
      e->dst.set_data_handle(y + done);
      e->primitive.execute(impl.stream, e->args);
    }
  }
  if (done > 0) impl.stream.wait();
  if (done < n) {
    internal::ActivateHighway(act, x + done, n - done, y + done,
                              internal::UsesStreamingStores(n));
  }
}

}  // namespace layerserve::kernels::baseline
