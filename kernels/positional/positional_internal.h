// Internal to the positional kernels, not part of the API: scalar row routines
// shared by the references and by the fast kernels' fallbacks, and the range limit
// of the fast sine/cosine. Exposed so tests can aim at the boundaries.
#ifndef LAYERSERVE_KERNELS_POSITIONAL_INTERNAL_H_
#define LAYERSERVE_KERNELS_POSITIONAL_INTERNAL_H_

#include <cstdint>

#include "kernels/positional/positional.h"

namespace layerserve::kernels::internal {

// The SIMD sine/cosine reduces angles modulo pi/2 with a four-part pi/2 whose first
// three parts have 7 significant bits, so q * part is exact in float32 for every
// quadrant q < 2^17 (no FMA needed; every x86 target gets the same reduction).
// Rows whose largest angle is beyond this limit (positions past ~1.3e5 at base >= 1)
// take SinusoidalRowScalar instead.
inline constexpr float kFastAngleLimit = 131072.0f;  // 2^17: q <= 83443 < 2^17.

// One row of the sinusoidal encoding in scalar code: angle = float32(position *
// inv_freq[i]) in float32, then sin and cos in double, rounded to float32.
// x_row may be null (the table row alone). y_row may equal x_row.
void SinusoidalRowScalar(const float* x_row, float position, const float* inv_freq,
                         int64_t dim, SinusoidalLayout layout, float* y_row);

// One row of ALiBi: y[j] = (scores[j] +) slope * float32(j - query_position), or
// (-slope) * |float32(...)| when symmetric. scores_row may be null.
void AlibiRowScalar(const float* scores_row, float slope, int64_t query_position,
                    int64_t key_length, bool symmetric, float* y_row);

}  // namespace layerserve::kernels::internal

#endif  // LAYERSERVE_KERNELS_POSITIONAL_INTERNAL_H_
