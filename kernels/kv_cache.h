// The keys and values of one sequence's earlier tokens, per layer, for incremental
// decoding: each call appends its new tokens' K and V and reads back all of them.
//
// Storage grows in fixed blocks of kKvBlockTokens tokens, so appending never copies
// what is already cached (no quadratic copying over a long generation), and each
// block is float32 or bfloat16 (half the memory; values are rounded to bfloat16 when
// stored). Decode steps attend over the blocks in place (AttentionOverCache); long
// calls gather them into one contiguous float32 array for oneDNN (Read).
//
// Not thread-safe: one call on a sequence at a time (the server serializes them).
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
  // `width` = kv_heads * head_dim, the floats of one token's keys (and values).
  KvCache(int64_t layers, int64_t width, KvCacheType type);

  int64_t layers() const { return layers_; }
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
  // the same `tokens`, then Commit(tokens).
  void Append(int64_t layer, const float* k, const float* v, int64_t stride,
              int64_t tokens);
  // Writes `layer`'s first `rows` rows (committed and appended), float32 and
  // contiguous ([rows, width]), to k_out and v_out.
  void Read(int64_t layer, int64_t rows, float* k_out, float* v_out) const;
  // `layer`'s keys of block `block` (tokens block*kKvBlockTokens and on) in place,
  // transposed: [width][kKvBlockTokens] floats or bfloat16s (type()), so a decode
  // step's scores take a vector of keys per load with no horizontal sums.
  const void* KeyBlock(int64_t layer, int64_t block) const;
  // `layer`'s values of token `token` in place: width() floats or bfloat16s.
  const void* ValueRow(int64_t layer, int64_t token) const;
  // The call's tokens become part of the cache.
  void Commit(int64_t tokens) { length_ += tokens; }

 private:
  int64_t BlockBytes() const;
  int64_t ElementBytes() const { return type_ == KvCacheType::kFloat32 ? 4 : 2; }

  const int64_t layers_, width_;
  const KvCacheType type_;
  int64_t length_ = 0;
  // blocks_[layer][i]: keys [width][kKvBlockTokens] (transposed), then values
  // [kKvBlockTokens][width].
  std::vector<std::vector<std::unique_ptr<char[]>>> blocks_;
};

}  // namespace layerserve::kernels

#endif  // LAYERSERVE_KERNELS_KV_CACHE_H_
