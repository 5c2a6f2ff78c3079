#include "kernels/block/block.h"

#include <algorithm>

#include "kernels/activation/activation_internal.h"

namespace layerserve::kernels {
namespace {

// y = x W^T + b for every row of the batch: consecutive short sequences share one
// LinearFewRows call, consecutive longer ones one Linear call. Where the two give
// a row the same bits, all consecutive sequences share one call: a batch of decode
// steps and a prefill part reads the weights once instead of twice.
void BatchLinear(const BlockBatch& batch, BlockKernels& k, const LinearWeights& w,
                 const float* x, float* y) {
  const size_t n = batch.starts.size();
  const bool one_call = w.calls_share_bits();
  auto is_short = [&](size_t i) { return batch.tokens[i] <= kShortSequenceTokens; };
  for (size_t b = 0; b < n;) {
    bool short_run = is_short(b);
    size_t e = b + 1;
    while (e < n && (one_call || is_short(e) == short_run) &&
           batch.starts[e] == batch.starts[e - 1] + batch.tokens[e - 1]) {
      short_run = short_run && is_short(e);
      ++e;
    }
    const int64_t start = batch.starts[b];
    const int64_t rows = batch.starts[e - 1] + batch.tokens[e - 1] - start;
    if (short_run) {
      LinearFewRows(k.linear, w, x + start * w.in(), rows, y + start * w.out(),
                    k.parallel);
    } else {
      Linear(k.linear, w, x + start * w.in(), rows, y + start * w.out(), k.parallel);
    }
    b = e;
  }
}

// norm(x) of the block's attention or MLP input into y; both [rows, D].
void BlockNorm(const BlockConfig& c, const std::vector<float>& weight,
               const std::vector<float>& bias, const float* x, int64_t rows, float* y) {
  NormParams p;
  p.epsilon = c.norm_epsilon;
  p.weight = weight.data();
  p.bias = bias.empty() ? nullptr : bias.data();
  p.weight_offset = c.norm_weight_offset;
  if (c.rms_norm) {
    RmsNorm(x, rows, c.hidden_size, p, y);
  } else {
    LayerNorm(x, rows, c.hidden_size, p, y);
  }
}

// Self-attention of norm1(x): returns o_proj(attention) in kernels.projected.
void AttentionPart(const BlockConfig& c, const BlockWeights& w, const BlockBatch& batch,
                   BlockKernels& k, double* head_entropy) {
  const int64_t rows = batch.rows, dh = c.head_dim;
  const int64_t q_width = c.num_heads * dh, kv_width = c.num_kv_heads * dh;
  const int64_t qkv_width = q_width + 2 * kv_width;
  k.qkv.resize(rows * qkv_width);
  BatchLinear(batch, k, *w.qkv, k.normed.data(), k.qkv.data());
  float* q = k.qkv.data();
  float* key = q + q_width;
  if (c.qk_norm) {
    // Each head of each token is one row of Dh: q heads and k heads are contiguous
    // within a token's fused row.
    NormParams p;
    p.epsilon = c.norm_epsilon;
    for (int64_t t = 0; t < rows; ++t) {
      p.weight = w.q_norm_weight.data();
      RmsNorm(q + t * qkv_width, c.num_heads, dh, p, q + t * qkv_width);
      p.weight = w.k_norm_weight.data();
      RmsNorm(key + t * qkv_width, c.num_kv_heads, dh, p, key + t * qkv_width);
    }
  }
  if (c.has_rope) {
    // All rows as one "sequence" of `rows` tokens: the tables hold each row's
    // own position.
    RopeGeometry g;
    g.batch = 1;
    g.tokens = rows;
    g.head_dim = dh;
    g.rotary_dim = c.rotary_dim;
    g.head_stride = dh;
    g.token_stride = qkv_width;
    g.heads = c.num_heads;
    ApplyRope(q, q, g, RopeStyle::kHalf, batch.cos, batch.sin);
    g.heads = c.num_kv_heads;
    ApplyRope(key, key, g, RopeStyle::kHalf, batch.cos, batch.sin);
  }
  k.attn.resize(rows * q_width);
  // Each real query attends to the real keys before it (causal) or to all real keys,
  // cached ones first; a padded query to nothing (zeros).
  k.limits.resize(rows);
  auto sequence_args = [&](size_t b) {
    const int64_t start = batch.starts[b], tokens = batch.tokens[b];
    const int64_t length = batch.lengths[b];
    const KvCache* cache = batch.caches.empty() ? nullptr : batch.caches[b];
    const int64_t past = cache == nullptr ? 0 : cache->length();
    for (int64_t t = 0; t < tokens; ++t) {
      k.limits[start + t] =
          t >= length ? 0 : (batch.causal ? past + t + 1 : past + length);
    }
    AttentionArgs a;
    a.q_heads = c.num_heads;
    a.kv_heads = c.num_kv_heads;
    a.head_dim = dh;
    a.tokens = tokens;
    a.keys = cache == nullptr ? tokens : past + length;
    a.q = q + start * qkv_width;
    a.q_stride = qkv_width;
    a.k = key + start * qkv_width;
    a.v = key + kv_width + start * qkv_width;
    a.kv_stride = qkv_width;
    a.out = k.attn.data() + start * q_width;
    a.out_stride = q_width;
    a.scale = c.attention_scale;
    a.key_limits = k.limits.data() + start;
    a.head_entropy = head_entropy == nullptr ? nullptr : head_entropy + b * c.num_heads;
    return a;
  };
  // Decode steps attend over their caches in place after this loop, each sequence on
  // whichever thread takes it (each reads its own cache and writes its own rows).
  k.over_cache.clear();
  for (size_t b = 0; b < batch.starts.size(); ++b) {
    KvCache* cache = batch.caches.empty() ? nullptr : batch.caches[b];
    if (cache == nullptr) {
      AttentionArgs a = sequence_args(b);
      AttentionByKvHead(a, k.parallel);
      continue;
    }
    const int64_t start = batch.starts[b], length = batch.lengths[b];
    cache->Append(batch.cache_layer, key + start * qkv_width,
                  key + kv_width + start * qkv_width, qkv_width, length);
    if (batch.tokens[b] <= kShortSequenceTokens) {
      k.over_cache.push_back(b);
      continue;
    }
    // The cache now holds this call's rows too: past + length keys, gathered.
    AttentionArgs a = sequence_args(b);
    k.cached_k.resize(a.keys * kv_width);
    k.cached_v.resize(a.keys * kv_width);
    cache->Read(batch.cache_layer, a.keys, k.cached_k.data(), k.cached_v.data());
    a.k = k.cached_k.data();
    a.v = k.cached_v.data();
    a.kv_stride = kv_width;
    AttentionByKvHead(a, k.parallel);
  }
  RunParallel(k.parallel, static_cast<int64_t>(k.over_cache.size()), [&](int64_t i) {
    const size_t b = k.over_cache[i];
    const KvCache& cache = *batch.caches[b];
    const AttentionArgs a = sequence_args(b);
    thread_local CacheAttentionScratch scratch;  // Helpers run this too: one each.
    AttentionOverCache(a, cache, batch.cache_layer, scratch);
  });
  k.projected.resize(rows * c.hidden_size);
  BatchLinear(batch, k, *w.output, k.attn.data(), k.projected.data());
}

// Activations of at least this many values are split by rows across idle threads.
constexpr int64_t kSplitActivationValues = int64_t{1} << 20;

// The MLP of `input` [batch.rows, D], result into out [batch.rows, D].
void MlpPart(const BlockConfig& c, const BlockWeights& w, const BlockBatch& batch,
             BlockKernels& k, const float* input, float* out) {
  const int64_t rows = batch.rows;
  const int64_t f = c.intermediate_size;
  k.mlp_in.resize(rows * w.up->out());
  BatchLinear(batch, k, *w.up, input, k.mlp_in.data());
  k.mlp_hidden.resize(rows * f);
  // In ranges of rows an idle thread may take when the activation is large (a
  // prefill's: 7M values at T = 512 on Llama-3-8B): the same per-value code
  // wherever a row falls, so the split changes no result.
  const int64_t parts =
      rows * f >= kSplitActivationValues ? std::min<int64_t>(8, rows) : 1;
  RunParallel(k.parallel, parts, [&](int64_t p) {
    const int64_t begin = rows * p / parts, end = rows * (p + 1) / parts;
    const float* in = k.mlp_in.data() + begin * w.up->out();
    float* hidden = k.mlp_hidden.data() + begin * f;
    if (c.gated_mlp) {
      GatedActivate(c.activation, in, in + f, end - begin, f, 2 * f, hidden);
    } else {
      // The Highway loop that Activate() runs (at every size, so a row's result
      // does not depend on how many rows share the call, as the batcher promises),
      // called directly for plain stores: Activate() would write an output of 8 MiB
      // or more with streaming stores, past the caches the down projection reads it
      // from next. (The gated call above does stream at that size; neither was
      // measured.)
      internal::ActivateHighway(c.activation, in, (end - begin) * f, hidden,
                                /*stream=*/false);
    }
  });
  BatchLinear(batch, k, *w.down, k.mlp_hidden.data(), out);
}

}  // namespace

int64_t BlockWeights::bytes() const {
  const int64_t vectors = attn_norm_weight.size() + attn_norm_bias.size() +
                          mlp_norm_weight.size() + mlp_norm_bias.size() +
                          q_norm_weight.size() + k_norm_weight.size();
  return vectors * 4 + qkv->bytes() + output->bytes() + up->bytes() + down->bytes();
}

void BlockForward(const BlockConfig& c, const BlockWeights& w, const BlockBatch& batch,
                  BlockKernels& k, float* x, double* head_entropy) {
  const int64_t rows = batch.rows, d = c.hidden_size;
  k.normed.resize(rows * d);
  BlockNorm(c, w.attn_norm_weight, w.attn_norm_bias, x, rows, k.normed.data());
  AttentionPart(c, w, batch, k, head_entropy);
  if (c.parallel_residual) {
    // x + attn(ln1(x)) + mlp(ln2(x)): both branches read the block's input.
    BlockNorm(c, w.mlp_norm_weight, w.mlp_norm_bias, x, rows, k.normed.data());
    for (int64_t i = 0; i < rows * d; ++i) x[i] += k.projected[i];
    MlpPart(c, w, batch, k, k.normed.data(), k.projected.data());
    for (int64_t i = 0; i < rows * d; ++i) x[i] += k.projected[i];
    return;
  }
  for (int64_t i = 0; i < rows * d; ++i) x[i] += k.projected[i];
  BlockNorm(c, w.mlp_norm_weight, w.mlp_norm_bias, x, rows, k.normed.data());
  MlpPart(c, w, batch, k, k.normed.data(), k.projected.data());
  for (int64_t i = 0; i < rows * d; ++i) x[i] += k.projected[i];
}

}  // namespace layerserve::kernels
