// The keys and values of one sequence's earlier tokens, per layer, for incremental
// decoding: each call appends its new tokens' K and V and reads back all of them.
//
// Storage grows in fixed blocks of kKvBlockTokens tokens, so appending never copies
// what is already cached (no quadratic copying over a long generation), and each
// block is float32 or bfloat16 (half the memory; values are rounded to bfloat16 when
// stored). Decode steps attend over the blocks in place (AttentionOverCache); long
// calls gather them into one contiguous float32 array for oneDNN (Read).
//
// Not thread-safe: one call on a sequence at a time (the server serializes them);
// the const readers may run at once from several threads while nothing appends.
// Append throws std::bad_alloc when a new block cannot be allocated; sizes and
// layers are not checked (REQUIRES). NaN and Inf are stored as given (bfloat16 keeps
// them).
#ifndef LAYERSERVE_KERNELS_KV_CACHE_H_
#define LAYERSERVE_KERNELS_KV_CACHE_H_

#include <cstdint>
#include <memory>
#include <vector>

namespace layerserve::kernels {

inline constexpr int64_t kKvBlockTokens = 64;

enum class KvCacheType { kFloat32, kBfloat16 };

class KvCache {
 public:
  // A token's keys (and values) are kv_heads * head_dim floats: width(). Allocates
  // no block until the first Append. REQUIRES: every argument >= 1.
  KvCache(int64_t layers, int64_t kv_heads, int64_t head_dim, KvCacheType type);

  int64_t layers() const { return layers_; }
  int64_t head_dim() const { return head_dim_; }
  int64_t width() const { return width_; }
  // Tokens committed (cached by finished calls).
  int64_t length() const { return length_; }
  // Bytes held by the blocks.
  int64_t bytes() const;
  // Bytes that caching `tokens` more tokens would add (new blocks only).
  int64_t BytesToGrow(int64_t tokens) const;

  KvCacheType type() const { return type_; }
  // For `layer`: stores `tokens` new rows of keys k and values v (row stride
  // `stride` floats) after the committed ones. Call once per layer per call, with
  // the same `tokens`, then Commit(tokens). REQUIRES: 0 <= layer < layers(); k and v
  // hold `tokens` rows of width() floats; stride >= width().
  void Append(int64_t layer, const float* k, const float* v, int64_t stride,
              int64_t tokens);
  // Writes `layer`'s first `rows` rows (committed and appended), float32 and
  // contiguous ([rows, width]), to k_out and v_out (bfloat16 widened exactly).
  // REQUIRES: rows <= what was stored for `layer`; k_out, v_out [rows, width()].
  void Read(int64_t layer, int64_t rows, float* k_out, float* v_out) const;
  // `layer`'s keys of block `block` (tokens block*kKvBlockTokens and on) in place,
  // transposed: [width][kKvBlockTokens] floats or bfloat16s (type()), so a decode
  // step's scores take a vector of keys per load with no horizontal sums.
  const void* KeyBlock(int64_t layer, int64_t block) const;
  // `layer`'s values of block `block` in place, head by head: [kv_heads][
  // kKvBlockTokens][head_dim] floats or bfloat16s, so a decode step reads each head's
  // values of the block as one stream.
  const void* ValueBlock(int64_t layer, int64_t block) const;
  // The call's tokens become part of the cache.
  void Commit(int64_t tokens) { length_ += tokens; }
  // Forgets the committed tokens from `length` on, and any appended uncommitted,
  // and frees the blocks only they used, so that bytes() is what caching `length`
  // tokens took: a call that ran in parts (or layers) and was stopped between them
  // leaves the cache as it found it. REQUIRES: 0 <= length <= length().
  void Truncate(int64_t length);

 private:
  int64_t BlockBytes() const;
  int64_t ElementBytes() const { return type_ == KvCacheType::kFloat32 ? 4 : 2; }

  const int64_t layers_, head_dim_, width_;
  const KvCacheType type_;
  int64_t length_ = 0;
  // blocks_[layer][i]: keys [width][kKvBlockTokens] (transposed), then values
  // [kv_heads][kKvBlockTokens][head_dim].
  std::vector<std::vector<std::unique_ptr<char[]>>> blocks_;
};

}  // namespace layerserve::kernels

#endif  // LAYERSERVE_KERNELS_KV_CACHE_H_
