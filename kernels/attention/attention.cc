#include "kernels/attention/attention.h"

#include <algorithm>
#include <map>
#include <tuple>
#include <vector>

#include "kernels/common/onednn_engine.h"

namespace layerserve::kernels {
namespace {

using dnnl::memory;
using Dt = memory::data_type;
constexpr auto kRuntime = DNNL_RUNTIME_DIM_VAL;

// Queries are processed in blocks of this many tokens, which bounds the scores
// buffer to q_heads * kQueryBlock * S floats, and lets each block of a causal prefill
// stop at its own last key. Chosen because 128 beat 256 and 64 (too small a product
// for oneDNN), see docs/perf/2026-12-03-amx-states-and-attention-blocks.md.
constexpr int64_t kQueryBlock = 128;

}  // namespace

struct AttentionContext::Impl {
  dnnl::stream stream{CpuEngine()};
  struct Primitives {
    dnnl::matmul scores;  // [Hkv, G, T, Dh] x [Hkv, 1, Dh, S] -> [Hkv, G, T, S]
    dnnl::matmul mix;     // [Hkv, G, T, S] x [Hkv, 1, S, Dh] -> [Hkv, G, T, Dh]
  };
  std::map<std::tuple<int64_t, int64_t, int64_t>, Primitives> primitives;
  std::vector<float> scores;
  std::vector<int64_t> row_limits;
  std::vector<double> row_entropy;

  // One pair per head geometry; T, S and the strides are run-time arguments.
  Primitives& Get(int64_t kv_heads, int64_t group, int64_t head_dim) {
    auto key = std::make_tuple(kv_heads, group, head_dim);
    auto it = primitives.find(key);
    if (it != primitives.end()) return it->second;
    const memory::dims any4 = {kRuntime, kRuntime, kRuntime, 1};
    auto md = [&](memory::dims dims, memory::dims strides) {
      return memory::desc(dims, Dt::f32, strides);
    };
    Primitives p;
    p.scores = dnnl::matmul(dnnl::matmul::primitive_desc(
        dnnl::matmul::desc(
            md({kv_heads, group, kRuntime, head_dim}, any4),
            md({kv_heads, 1, head_dim, kRuntime}, {kRuntime, kRuntime, 1, kRuntime}),
            md({kv_heads, group, kRuntime, kRuntime}, any4)),
        CpuEngine()));
    p.mix = dnnl::matmul(dnnl::matmul::primitive_desc(
        dnnl::matmul::desc(md({kv_heads, group, kRuntime, kRuntime}, any4),
                           md({kv_heads, 1, kRuntime, head_dim}, any4),
                           md({kv_heads, group, kRuntime, head_dim}, any4)),
        CpuEngine()));
    return primitives.emplace(key, std::move(p)).first->second;
  }
};

AttentionContext::AttentionContext() : impl_(std::make_unique<Impl>()) {}
AttentionContext::~AttentionContext() = default;

void Attention(AttentionContext& context, const AttentionArgs& a) {
  AttentionContext::Impl& impl = context.impl();
  const int64_t group = a.q_heads / a.kv_heads;
  const int64_t hkv = a.kv_heads, dh = a.head_dim, keys = a.keys;
  AttentionContext::Impl::Primitives& p = impl.Get(hkv, group, dh);
  const dnnl::engine& engine = CpuEngine();
  auto mem = [&](memory::dims dims, memory::dims strides, const float* data) {
    return memory(memory::desc(dims, Dt::f32, strides), engine, const_cast<float*>(data));
  };
  for (int64_t t0 = 0; t0 < a.tokens; t0 += kQueryBlock) {
    const int64_t tb = std::min(kQueryBlock, a.tokens - t0);
    // Keys at and past every query's limit get probability 0, so a block's scores
    // and mix stop at its largest limit: in a causal prefill of 512 tokens the first
    // of two blocks multiplies half the keys. (At least one key: a block whose
    // queries all see none still runs, and gets zeros.)
    const int64_t s = std::max<int64_t>(
        1, std::min(keys, *std::max_element(a.key_limits + t0, a.key_limits + t0 + tb)));
    // k and v as [Hkv, 1, ., .] views of the token-major rows: head g starts at g*Dh.
    const memory k = mem({hkv, 1, dh, s}, {dh, dh, 1, a.kv_stride}, a.k);
    const memory v = mem({hkv, 1, s, dh}, {dh, dh, a.kv_stride, 1}, a.v);
    impl.scores.resize(a.q_heads * tb * s);
    const memory q =
        mem({hkv, group, tb, dh}, {group * dh, dh, a.q_stride, 1}, a.q + t0 * a.q_stride);
    const memory scores =
        mem({hkv, group, tb, s}, {group * tb * s, tb * s, s, 1}, impl.scores.data());
    p.scores.execute(impl.stream,
                     {{DNNL_ARG_SRC, q}, {DNNL_ARG_WEIGHTS, k}, {DNNL_ARG_DST, scores}});
    impl.stream.wait();
    // Row (h, t) of the scores has the limit of query t0 + t.
    impl.row_limits.resize(a.q_heads * tb);
    for (int64_t h = 0; h < a.q_heads; ++h) {
      std::copy(a.key_limits + t0, a.key_limits + t0 + tb,
                impl.row_limits.data() + h * tb);
    }
    double* entropy = nullptr;
    if (a.head_entropy != nullptr) {
      impl.row_entropy.assign(a.q_heads * tb, 0.0);
      entropy = impl.row_entropy.data();
    }
    MaskedSoftmaxRows(impl.scores.data(), a.q_heads * tb, s, impl.row_limits.data(),
                      a.scale, entropy);
    if (entropy != nullptr) {
      for (int64_t h = 0; h < a.q_heads; ++h) {
        for (int64_t t = 0; t < tb; ++t) a.head_entropy[h] += entropy[h * tb + t];
      }
    }
    const memory out = mem({hkv, group, tb, dh}, {group * dh, dh, a.out_stride, 1},
                           a.out + t0 * a.out_stride);
    p.mix.execute(impl.stream,
                  {{DNNL_ARG_SRC, scores}, {DNNL_ARG_WEIGHTS, v}, {DNNL_ARG_DST, out}});
    impl.stream.wait();
  }
}

void AttentionByKvHead(const AttentionArgs& args, ParallelFor* parallel) {
  const int64_t group = args.q_heads / args.kv_heads, dh = args.head_dim;
  RunParallel(parallel, args.kv_heads, [&](int64_t g) {
    thread_local AttentionContext context;
    AttentionArgs a = args;
    a.q_heads = group;
    a.kv_heads = 1;
    a.q = args.q + g * group * dh;
    a.k = args.k + g * dh;
    a.v = args.v + g * dh;
    a.out = args.out + g * group * dh;
    if (args.head_entropy != nullptr) a.head_entropy = args.head_entropy + g * group;
    Attention(context, a);
  });
}

}  // namespace layerserve::kernels
