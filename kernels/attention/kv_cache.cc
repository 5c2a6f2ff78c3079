#include "kernels/attention/kv_cache.h"

#include <cstring>

#include "common/dtype.h"

namespace layerserve::kernels {

KvCache::KvCache(int64_t layers, int64_t kv_heads, int64_t head_dim, KvCacheType type)
    : layers_(layers),
      head_dim_(head_dim),
      width_(kv_heads * head_dim),
      type_(type),
      blocks_(layers) {}

int64_t KvCache::BlockBytes() const {
  return 2 * kKvBlockTokens * width_ * ElementBytes();
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

void KvCache::Truncate(int64_t length) {
  const size_t blocks =
      static_cast<size_t>((length + kKvBlockTokens - 1) / kKvBlockTokens);
  for (auto& layer : blocks_) {
    if (layer.size() > blocks) layer.resize(blocks);
  }
  length_ = length;
}

const void* KvCache::KeyBlock(int64_t layer, int64_t block) const {
  return blocks_[layer][block].get();
}

const void* KvCache::ValueBlock(int64_t layer, int64_t block) const {
  return blocks_[layer][block].get() + kKvBlockTokens * width_ * ElementBytes();
}

namespace {

// Element `index` of float32 or bfloat16 storage.
void* At(void* base, int64_t index, int64_t element_bytes) {
  return static_cast<char*>(base) + index * element_bytes;
}
const void* At(const void* base, int64_t index, int64_t element_bytes) {
  return static_cast<const char*>(base) + index * element_bytes;
}

}  // namespace

void KvCache::Append(int64_t layer, const float* k, const float* v, int64_t stride,
                     int64_t tokens) {
  std::vector<std::unique_ptr<char[]>>& blocks = blocks_[layer];
  while (static_cast<int64_t>(blocks.size()) * kKvBlockTokens < length_ + tokens) {
    // Not zeroed: entries are written before they are read.
    blocks.push_back(std::unique_ptr<char[]>(new char[BlockBytes()]));
  }
  const ElementType element =
      type_ == KvCacheType::kFloat32 ? ElementType::kFloat32 : ElementType::kBfloat16;
  const int64_t bytes = ElementBytes(), heads = width_ / head_dim_;
  // A token's keys rounded in one bulk conversion, then spread down their columns.
  std::vector<uint16_t> rounded(type_ == KvCacheType::kFloat32 ? 0 : width_);
  for (int64_t t = 0; t < tokens; ++t) {
    const int64_t token = length_ + t, column = token % kKvBlockTokens;
    const float* key = k + t * stride;
    void* keys = blocks[token / kKvBlockTokens].get();
    if (type_ == KvCacheType::kFloat32) {
      for (int64_t i = 0; i < width_; ++i) {
        static_cast<float*>(keys)[i * kKvBlockTokens + column] = key[i];
      }
    } else {
      ConvertFromFloat32(ElementType::kBfloat16, key, width_, rounded.data());
      for (int64_t i = 0; i < width_; ++i) {
        static_cast<uint16_t*>(keys)[i * kKvBlockTokens + column] = rounded[i];
      }
    }
    void* values = const_cast<void*>(ValueBlock(layer, token / kKvBlockTokens));
    for (int64_t h = 0; h < heads; ++h) {
      ConvertFromFloat32(element, v + t * stride + h * head_dim_, head_dim_,
                         At(values, (h * kKvBlockTokens + column) * head_dim_, bytes));
    }
  }
}

void KvCache::Read(int64_t layer, int64_t rows, float* k_out, float* v_out) const {
  const ElementType element =
      type_ == KvCacheType::kFloat32 ? ElementType::kFloat32 : ElementType::kBfloat16;
  const int64_t bytes = ElementBytes(), heads = width_ / head_dim_;
  for (int64_t t = 0; t < rows; ++t) {
    const int64_t column = t % kKvBlockTokens;
    const void* keys = KeyBlock(layer, t / kKvBlockTokens);
    float* key = k_out + t * width_;
    if (type_ == KvCacheType::kFloat32) {
      for (int64_t i = 0; i < width_; ++i) {
        key[i] = static_cast<const float*>(keys)[i * kKvBlockTokens + column];
      }
    } else {
      for (int64_t i = 0; i < width_; ++i) {
        key[i] = Bfloat16ToFloat32(
            static_cast<const uint16_t*>(keys)[i * kKvBlockTokens + column]);
      }
    }
    const void* values = ValueBlock(layer, t / kKvBlockTokens);
    for (int64_t h = 0; h < heads; ++h) {
      ConvertToFloat32(element,
                       At(values, (h * kKvBlockTokens + column) * head_dim_, bytes),
                       head_dim_, v_out + t * width_ + h * head_dim_);
    }
  }
}

}  // namespace layerserve::kernels
