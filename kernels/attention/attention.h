// Scaled dot-product attention of one sequence, with grouped-query heads (GQA),
// causal or bidirectional masking and right padding:
//   out[t, h] = sum_{j < limit[t]} softmax_j(scale * q[t, h] · k[j, g]) v[j, g],
//   g = h / (q_heads / kv_heads).
// Rows are token-major, the layout a projection writes: q [T, Hq*Dh], k and v
// [S, Hkv*Dh], out [T, Hq*Dh], each with its own row stride in floats (so q, k and v
// may be column slices of one fused QKV output). A query with limit 0 attends to
// nothing and gets zeros.
//
// The fast version runs q·k^T and p·v as oneDNN matmuls (one primitive per head
// geometry with run-time T and S, so new lengths create nothing) and the softmax as
// a Highway loop; AttentionContext holds those, per thread (not thread-safe). The
// reference is the plain formula in double.
//
// Non-finite values, as PyTorch's softmax gives them: a -Inf score beside a finite
// maximum gets probability 0; a NaN or +Inf score (or only -Inf ones) makes its
// row's distribution, and so its output, NaN, and adds nothing to head_entropy.
// Errors: bad sizes are not checked (REQUIRES); oneDNN's failures throw dnnl::error
// and allocations std::bad_alloc, with out then partly written.
// REQUIRES (every function): q_heads % kv_heads == 0, tokens >= 1, keys >= 1,
// head_dim >= 1, key_limits[t] in [0, keys], strides as below; out does not overlap
// q, k or v. No pointer needs alignment.
#ifndef LAYERSERVE_KERNELS_ATTENTION_H_
#define LAYERSERVE_KERNELS_ATTENTION_H_

#include <cstdint>
#include <memory>

#include "kernels/common/parallel_for.h"

namespace layerserve::kernels {

struct AttentionArgs {
  int64_t q_heads = 1;
  int64_t kv_heads = 1;  // Divides q_heads.
  int64_t head_dim = 1;
  int64_t tokens = 1;  // T, queries.
  int64_t keys = 1;    // S.
  const float* q = nullptr;
  int64_t q_stride = 0;  // Floats between consecutive tokens; >= q_heads * head_dim.
  const float* k = nullptr;
  const float* v = nullptr;
  int64_t kv_stride = 0;  // Floats between consecutive keys of k and of v.
  float* out = nullptr;
  int64_t out_stride = 0;
  float scale = 1;
  // [T]: query t attends to keys j < key_limits[t] (<= keys). Causal attention with
  // the queries at key positions offset..offset+T-1 and n valid keys:
  // min(offset + t + 1, n).
  const int64_t* key_limits = nullptr;
  // Optional [q_heads]: adds, per head, the entropy in nats of each query's
  // attention distribution (queries with limit 0 add nothing).
  double* head_entropy = nullptr;
};

class AttentionContext {
 public:
  AttentionContext();
  ~AttentionContext();
  AttentionContext(const AttentionContext&) = delete;
  AttentionContext& operator=(const AttentionContext&) = delete;

  struct Impl;
  Impl& impl() { return *impl_; }

 private:
  std::unique_ptr<Impl> impl_;
};

// out = the formula above, float32 products in oneDNN and softmax in Highway;
// head_entropy, when set, is added to. Uses `context` (one thread's).
void Attention(AttentionContext& context, const AttentionArgs& args);
// The same in double, rounded once per output: the test oracle. Thread-safe.
void AttentionReference(const AttentionArgs& args);

// Attention split by key/value head: each KV head with its query heads is one
// Attention call, on the calling thread or an idle thread of `parallel` (null:
// here, in order), each thread with its own context (a thread_local one). Always
// split so, whoever runs the parts: a result does not depend on how many threads
// helped. Safe to call from several threads at once on different outputs.
void AttentionByKvHead(const AttentionArgs& args, ParallelFor* parallel);

// Softmax of `rows` rows of scores in place, row r over its first limits[r] entries
// (scaled by `scale` first; entries at and past the limit become 0; a row with limit
// 0 becomes all zeros). `width` is the row stride. When `entropy` is set, entropy[r]
// receives the distribution's entropy in nats (0 for limit 0 and for a NaN row).
// Highway, dispatched at run time; thread-safe. REQUIRES: 0 <= limits[r] <= width.
// Exposed for tests.
void MaskedSoftmaxRows(float* scores, int64_t rows, int64_t width, const int64_t* limits,
                       float scale, double* entropy);

}  // namespace layerserve::kernels

#endif  // LAYERSERVE_KERNELS_ATTENTION_H_
