#include "kernels/kv_cache.h"

#include <cstring>

#include "kernels/dtype.h"

namespace layerserve::kernels {

KvCache::KvCache(int64_t layers, int64_t width, KvCacheType type)
    : layers_(layers), width_(width), type_(type), blocks_(layers) {}

int64_t KvCache::BlockBytes() const {
  const int64_t element = type_ == KvCacheType::kFloat32 ? 4 : 2;
  return 2 * kKvBlockTokens * width_ * element;
}

int64_t KvCache::bytes() const {
  int64_t blocks = 0;
  for (const auto& layer : blocks_) blocks += static_cast<int64_t>(layer.size());
  return blocks * BlockBytes();
}

int64_t KvCache::BytesToGrow(int64_t tokens) const {
  const int64_t have = static_cast<int64_t>(blocks_.empty() ? 0 : blocks_[0].size());
  const int64_t need = (length_ + tokens + kKvBlockTokens - 1) / kKvBlockTokens;
  return need > have ? (need - have) * layers_ * BlockBytes() : 0;
}

void* KvCache::Row(int64_t layer, int64_t token, bool values) {
  const int64_t element = type_ == KvCacheType::kFloat32 ? 4 : 2;
  char* block = blocks_[layer][token / kKvBlockTokens].get();
  const int64_t row = token % kKvBlockTokens + (values ? kKvBlockTokens : 0);
  return block + row * width_ * element;
}

void KvCache::AppendAndRead(int64_t layer, const float* k, const float* v, int64_t stride,
                            int64_t tokens, float* k_out, float* v_out) {
  std::vector<std::unique_ptr<char[]>>& blocks = blocks_[layer];
  const int64_t total = length_ + tokens;
  while (static_cast<int64_t>(blocks.size()) * kKvBlockTokens < total) {
    blocks.push_back(std::make_unique<char[]>(BlockBytes()));
  }
  const size_t row_bytes = width_ * sizeof(float);
  for (int64_t t = 0; t < tokens; ++t) {
    for (bool values : {false, true}) {
      const float* src = (values ? v : k) + t * stride;
      void* dst = Row(layer, length_ + t, values);
      if (type_ == KvCacheType::kFloat32) {
        std::memcpy(dst, src, row_bytes);
      } else {
        ConvertFromFloat32(ElementType::kBfloat16, src, width_, dst);
      }
    }
  }
  for (int64_t t = 0; t < total; ++t) {
    for (bool values : {false, true}) {
      float* dst = (values ? v_out : k_out) + t * width_;
      const void* src = Row(layer, t, values);
      if (type_ == KvCacheType::kFloat32) {
        std::memcpy(dst, src, row_bytes);
      } else {
        ConvertToFloat32(ElementType::kBfloat16, src, width_, dst);
      }
    }
  }
}

}  // namespace layerserve::kernels
