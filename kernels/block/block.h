// The forward pass of one Transformer block on the tokens of a batch of sequences,
// composed of the kernels of this folder: norms, one fused QKV matmul, QK-norm,
// RoPE, attention per sequence, output projection, MLP (gated or not), residuals
// (sequential, or GPT-NeoX's parallel form).
//
// Linear layers run once on all tokens of the batch ([rows, D]); attention runs per
// sequence. Weights are immutable after load and shared by all threads; the
// contexts and scratch in BlockKernels belong to one worker thread.
//
// Errors: the config, weights and batch are not checked here (the model loader and
// the server's parser do; REQUIRES); oneDNN's failures throw dnnl::error and
// allocations std::bad_alloc, leaving x partly computed and any cache appended to
// but not committed. NaN and Inf propagate as each kernel documents (norm.h,
// activation.h, attention.h): nothing here tests for them.
#ifndef LAYERSERVE_KERNELS_BLOCK_H_
#define LAYERSERVE_KERNELS_BLOCK_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "kernels/activation/activation.h"
#include "kernels/attention/attention.h"
#include "kernels/attention/kv_cache.h"
#include "kernels/attention/kv_cache_attention.h"
#include "kernels/common/parallel_for.h"
#include "kernels/linear/linear.h"
#include "kernels/norm/norm.h"
#include "kernels/rope/rope.h"

namespace layerserve::kernels {

// What the block computes; the same for every block of a model.
struct BlockConfig {
  int64_t hidden_size = 0;        // D
  int64_t num_heads = 0;          // Hq
  int64_t num_kv_heads = 0;       // Hkv, divides Hq
  int64_t head_dim = 0;           // Dh
  int64_t intermediate_size = 0;  // F
  Activation activation = Activation::kSilu;
  bool gated_mlp = true;            // down(act(gate(h)) * up(h)), else down(act(fc(h)))
  bool rms_norm = true;             // else LayerNorm with bias
  bool norm_weight_offset = false;  // Gemma: (1 + weight)
  float norm_epsilon = 1e-6f;
  bool qk_norm = false;  // Qwen3: RMSNorm over each head of q and k, before RoPE
  bool parallel_residual = false;  // x + attn(norm1(x)) + mlp(norm2(x))
  bool has_rope = true;
  float rope_theta = 10000;
  int64_t rotary_dim = 0;
  RopeScaling rope_scaling;
  float attention_scale = 1;
};

struct BlockWeights {
  std::vector<float> attn_norm_weight, attn_norm_bias;  // [D]; no bias for RMSNorm
  std::vector<float> mlp_norm_weight, mlp_norm_bias;    // [D]
  std::vector<float> q_norm_weight, k_norm_weight;      // [Dh], qk_norm only
  std::unique_ptr<LinearWeights> qkv;     // out (Hq + 2 Hkv) * Dh: q | k | v
  std::unique_ptr<LinearWeights> output;  // out D, in Hq * Dh
  std::unique_ptr<LinearWeights> up;      // out 2F (gate | up) when gated, else F
  std::unique_ptr<LinearWeights> down;    // out D, in F

  int64_t bytes() const;
};

// The sequences of one call. Sequence b holds rows [starts[b], starts[b] +
// tokens[b]) of x; its first lengths[b] rows are real tokens, the rest right
// padding (never attended to; zeroed by the caller after the last block).
struct BlockBatch {
  int64_t rows = 0;
  std::vector<int64_t> starts, tokens, lengths;
  bool causal = true;
  // RoPE tables [rows, rotary_dim] for every row's position (ComputeRopeTables),
  // computed once per call and shared by its blocks. Null without RoPE.
  const float* cos = nullptr;
  const float* sin = nullptr;
  // Optional, one per sequence (null: none): the sequence's keys and values of
  // earlier calls. Its real tokens' keys and values are appended at cache_layer,
  // and attention covers the cached tokens before them (queries at cache positions
  // length()...). Such a sequence must have no padding (lengths[b] == tokens[b]).
  // The caller Commit()s after the last block.
  std::vector<KvCache*> caches;
  int64_t cache_layer = 0;
};

// Sequences of at most this many tokens (decode steps) take the kernels made for
// few rows: their linear layers run through LinearFewRows, and with a cache they
// attend over it in place (AttentionOverCache). Chosen because both beat oneDNN at
// a few rows and attention over the cache loses to it by 16 tokens, see
// docs/perf/2026-11-30-decode-step-kernels.md.
// Which kernel a row takes depends only on its own sequence, never on the batch, so
// batching never changes a result.
inline constexpr int64_t kShortSequenceTokens = 4;

// One worker's contexts and buffers.
struct BlockKernels {
  LinearContext linear;
  std::vector<float> normed, qkv, attn, projected, mlp_in, mlp_hidden;
  std::vector<float> cached_k, cached_v;  // A cached sequence's keys and values.
  std::vector<int64_t> limits;            // Per row: the keys its query attends to.
  std::vector<size_t> over_cache;  // Sequences attending over their caches in place.
  // Idle threads that may share the loops of a batch: the column ranges of its
  // linear layers (LinearFewRows' and Linear's), its attention's KV heads and the
  // sequences attending over their caches. Null: this thread alone.
  ParallelFor* parallel = nullptr;
};

// Runs the block on x [rows, D] (float32, row-major) in place. head_entropy, when
// set, [sequences, Hq]: each sequence's sum over its real query tokens of each
// head's attention entropy (nats) is added to its row. Uses `kernels` (this thread's)
// and, through kernels.parallel, idle threads. REQUIRES: the weights built for
// `config`; batch.rows rows of x; the sequences' rows inside [0, rows) and
// disjoint; cos and sin set when config.has_rope; each cache's layers, KV heads and
// head_dim those of the model and cache_layer < its layers().
//
// Every row's result depends only on its own sequence: not on the other sequences
// of the batch nor on how many there are (tested bit for bit), so requests batched
// together get exactly what they would get alone.
void BlockForward(const BlockConfig& config, const BlockWeights& weights,
                  const BlockBatch& batch, BlockKernels& kernels, float* x,
                  double* head_entropy);

}  // namespace layerserve::kernels

#endif  // LAYERSERVE_KERNELS_BLOCK_H_
