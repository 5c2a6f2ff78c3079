// Element types on the wire and their conversion to and from float32, the type every
// kernel computes in. Pure functions on plain memory; safe to call from any thread.
#ifndef LAYERSERVE_COMMON_DTYPE_H_
#define LAYERSERVE_COMMON_DTYPE_H_

#include <cstdint>

namespace layerserve {

enum class ElementType { kFloat32, kBfloat16, kFloat16 };

// Bytes per element of `type`.
int ElementSize(ElementType type);

// Scalar conversions. Float32 -> 16-bit rounds to nearest even; NaN stays NaN
// (quiet), values beyond the 16-bit range become +-Inf.
uint16_t Float32ToBfloat16(float value);
float Bfloat16ToFloat32(uint16_t bits);
uint16_t Float32ToFloat16(float value);
float Float16ToFloat32(uint16_t bits);

// src holds `count` little-endian elements of `type`; dst receives them as float32.
// src need not be aligned.
void ConvertToFloat32(ElementType type, const void* src, int64_t count, float* dst);

// Writes `count` float32 values as `type` into dst (need not be aligned). Returns how
// many finite inputs overflowed the target's range and became +-Inf (always 0 for
// kFloat32).
int64_t ConvertFromFloat32(ElementType type, const float* src, int64_t count, void* dst);

}  // namespace layerserve

#endif  // LAYERSERVE_COMMON_DTYPE_H_
