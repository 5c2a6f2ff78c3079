// Element-wise activations: Activate() runs the Highway loops (activation_hwy.cc);
// oneDNN's eltwise primitive, cached in the per-thread ActivationContext, is the
// measured alternative (internal::ActivateOneDnn).
//
// Threading: nothing here starts threads or OpenMP regions itself, but oneDNN (built
// with the OpenMP runtime) parallelizes a primitive over omp_get_max_threads() of the
// calling thread. The server calls kernels from its own worker threads and calls
// omp_set_num_threads(1) on each, so a primitive runs on its caller's thread only.
#include "kernels/activation.h"

#include <array>
#include <optional>
#include <unordered_map>

#include "kernels/activation_internal.h"
#include "oneapi/dnnl/dnnl.hpp"

namespace layerserve::kernels {
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

// Outputs of at least this many bytes are written with streaming stores: far past
// the 1 MiB L2, where y would be evicted before anyone reads it anyway and skipping
// the read-for-ownership of y pays. Measured (BM_PathHighway*, ReLU, one thread,
// plain vs streaming stores): 1M values (4 MiB out, in + out fit the 32 MiB L3)
// 80 vs 45 GB/s; 4M values (16 MiB) 20-25 vs 35-43 GB/s; 16M 19-24 vs 29-31.
// Compute-bound activations are indifferent (SiLU at 4M: 14.3 vs 14.6).
constexpr int64_t kStreamMinBytes = int64_t{8} << 20;

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
  const memory::desc md({small ? internal::kOneDnnSmallChunk : internal::kOneDnnChunk},
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

namespace internal {

bool UsesStreamingStores(int64_t n) {
  return n * static_cast<int64_t>(sizeof(float)) >= kStreamMinBytes;
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
    ActivateHighway(act, x + done, n - done, y + done, UsesStreamingStores(n));
  }
}

}  // namespace internal

// Highway at every size: measured against oneDNN's eltwise (bench/activation_bench.cc
// BM_Path*, AVX-512, one thread, GB/s of CPU time, Highway vs oneDNN, chunked as
// above) it is faster for every activation:
//   GELU      8K: 17.2 vs 11.2, 256K: 16.9 vs 11.5, 16M: 14.1 vs 9.6 since it is
//             exp times a rational (activation_hwy.cc); it was 8.9 vs 10.9 at
//             256K with the erfc form, and went to oneDNN from 8K;
//   sigmoid   8K: 25.3 vs 18.0, 256K: 25.6 vs 17.6, 16M: 20.3 vs 13.4 since its
//             exp is OnePlusExp; it was 16.2 vs 18.0 at 256K with hwy's Exp;
//   tanh      8K: 31.6 vs 14.9, 256K: 31.5 vs 15.1, 16M: 22.3 vs 11.2 since it is
//             a rational function; it was 13.2 vs 15.5 at 256K with hwy's Tanh.
// SiLU, GELU-tanh and QuickGELU were faster in Highway already. oneDNN's ReLU is as
// fast as Highway's but maps NaN to 0 (PyTorch keeps NaN). ActivateOneDnn stays as
// the peer those measurements take and a second implementation the tests hold the
// loops to; `ctx` keeps its primitives.
void Activate(ActivationContext& /*ctx*/, Activation act, const float* x, int64_t n,
              float* y, ValueStats* output_stats, bool* inputs_finite) {
  internal::ActivateHighway(act, x, n, y, internal::UsesStreamingStores(n), output_stats,
                            inputs_finite);
}

void GatedActivate(ActivationContext& /*ctx*/, Activation act, const float* gate,
                   const float* up, int64_t rows, int64_t dim, int64_t stride, float* y,
                   ValueStats* output_stats, bool* inputs_finite) {
  // oneDNN 2.6 has no GLU primitive. The nearest, eltwise with a binary-multiply
  // post-op, was not tried: the Highway loop already makes one pass, and for SiLU
  // (SwiGLU's gate, the common case) Highway beats oneDNN's eltwise alone.
  internal::GatedActivateHighway(act, gate, up, rows, dim, stride, y,
                                 internal::UsesStreamingStores(rows * dim), output_stats,
                                 inputs_finite);
}

}  // namespace layerserve::kernels
