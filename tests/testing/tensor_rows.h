// Slices of FLOAT32 wire tensors for client tests: the proto alone, no codec.
#ifndef LAYERSERVE_TESTS_TESTING_TENSOR_ROWS_H_
#define LAYERSERVE_TESTS_TESTING_TENSOR_ROWS_H_

#include <cstdint>

#include "layerserve/v1/layerserve.pb.h"

namespace layerserve::testing {

// Row b's first `tokens` tokens of a [B, T, H] FLOAT32 tensor, as [tokens, H].
inline v1::Tensor RowTokens(const v1::Tensor& x, int64_t b, int64_t tokens) {
  const int64_t hidden = x.shape(2), bytes = hidden * 4;
  v1::Tensor row;
  row.set_dtype(x.dtype());
  row.add_shape(tokens);
  row.add_shape(hidden);
  row.set_data(x.data().substr(b * x.shape(1) * bytes, tokens * bytes));
  return row;
}

}  // namespace layerserve::testing

#endif  // LAYERSERVE_TESTS_TESTING_TENSOR_ROWS_H_
