// Internal to the linear kernels (linear.cc and the implementation sub-folders), not
// part of the API: how LinearFewRows finds its way through the weights oneDNN packed
// for its matmul, and the block kernels of the float32/bfloat16 few-rows and AMX
// implementations, exposed for tests and benchmarks.
//
// Every block kernel writes only y's outputs of its block columns [nb_begin, nb_end)
// for rows [0, rows); calls for disjoint column ranges may run at once on one y.
// They keep no state but scratch buffers (a std::vector argument, or thread-local),
// throw nothing but std::bad_alloc from growing those, and take unchecked sizes
// (REQUIRES). x and y must not overlap and need no alignment. Each row's result
// depends on that row only.
#ifndef LAYERSERVE_KERNELS_LINEAR_INTERNAL_H_
#define LAYERSERVE_KERNELS_LINEAR_INTERNAL_H_

#include <cstdint>
#include <type_traits>
#include <vector>

namespace layerserve::kernels {
class LinearWeights;
}  // namespace layerserve::kernels

namespace layerserve::kernels::internal {

// The blocked layouts oneDNN 2.6's brgemm matmul picks for weights [in = K, out =
// N] on AVX-512 machines, each a grid of blocks of kFewRowsBlockOut outputs:
//   float32  (BA16a64b):   blocks of 16 k x 64 n, n innermost: k * 64 + n;
//   bfloat16 (BA16a64b2a): blocks of 32 k x 64 n in k pairs: (k/2) * 128 + n * 2 +
//                          k % 2.
// Blocks of consecutive k are `k_block_stride` elements apart, columns of blocks
// `n_block_stride`. Padding (k past K, n past N) is never read into a result.
inline constexpr int64_t kFewRowsBlockOut = 64;

// The M at which oneDNN is asked for its preferred weights layout, whatever the
// rows of a call: the layout, and with it the kernel's summation order, must not
// depend on how many rows share a call (with AMX, M = 1 gets another layout).
inline constexpr int64_t kLayoutProbeRows = 128;

// For the kernels whose row tiles are template sizes (the VDPBF16PS kernels, for
// bfloat16 and int8 weights): calls tile(std::integral_constant<int64_t, rows>{})
// for rows in 1..kMax, nothing for 0.
template <int64_t kMax, typename Tile>
void WithTileRows(int64_t rows, Tile&& tile) {
  if constexpr (kMax > 0) {
    if (rows == kMax) return tile(std::integral_constant<int64_t, kMax>{});
    WithTileRows<kMax - 1>(rows, tile);
  }
}

struct FewRowsWeights {
  const void* data = nullptr;
  bool bf16 = false;
  int64_t in = 0, out = 0;
  int64_t k_block = 0;  // 16 (float32) or 32 (bfloat16).
  int64_t k_block_stride = 0, n_block_stride = 0;
  const float* bias = nullptr;  // [out], never null.
};

// Outputs of 64-column blocks [nb_begin, nb_end) of y[rows, out] = x[rows, in] · W^T
// + bias. For bfloat16 weights x must hold values already rounded to bfloat16 (the
// product's semantics, as oneDNN's: the products are then exact). Sums run over k
// in order from the bias, in float32 with FMA. Blocks are independent: calls for
// disjoint ranges may run at once on one y.
void LinearFewRowsBlocks(const FewRowsWeights& w, const float* x, int64_t rows,
                         int64_t nb_begin, int64_t nb_end, float* y);

// The layout of `w` as LinearFewRows reads it (data null: it falls back to Linear).
const FewRowsWeights& FewRowsLayoutOf(const LinearWeights& w);

// The same for bfloat16 weights with the bfloat16 dot-product instructions, on CPUs
// that have AVX512_BF16, from x as PackBfloat16Pairs left it: AMX tiles (TDPBF16PS)
// or VDPBF16PS, whichever ChooseLinearKernel (kernel_choice.h) gives LinearFewRows.
// REQUIRES: w.bf16, w.in even, FewRowsDpbf16Supported().
bool FewRowsDpbf16Supported();
void PackBfloat16Pairs(const float* x, int64_t rows, int64_t in,
                       std::vector<uint32_t>& packed);
void LinearFewRowsDpbf16Blocks(const FewRowsWeights& w, const uint32_t* x, int64_t rows,
                               int64_t nb_begin, int64_t nb_end, float* y);

// The two kernels LinearFewRowsDpbf16Blocks chooses between, for tests and
// benchmarks. VDPBF16PS (kernels/linear/avx512_bf16/few_rows.cc): REQUIRES as above. AMX
// (kernels/linear/amx/few_rows.cc): also FewRowsAmxSupported() and w.in % w.k_block == 0;
// 16 rows at a time, so up to 16 rows cost what one does.
void LinearFewRowsVdpbf16psBlocks(const FewRowsWeights& w, const uint32_t* x,
                                  int64_t rows, int64_t nb_begin, int64_t nb_end,
                                  float* y);
// Whether the CPU has AMX-BF16 (and AVX512_BF16) and the OS lets this process use
// the tiles (asked for on the first call).
bool FewRowsAmxSupported();
void LinearFewRowsAmxBlocks(const FewRowsWeights& w, const uint32_t* x, int64_t rows,
                            int64_t nb_begin, int64_t nb_end, float* y);

// Linear's product on the same tiles for many rows (kernels/linear/amx/many_rows.cc):
// each row's bits are LinearFewRowsAmxBlocks', the loops ordered for more products per
// tile load. x (float32, [rows, in]) comes as PackAmxRowTiles leaves it: for each
// group of 16 rows and each k block, the rows' 16 pairs (PackBfloat16Pairs' words)
// side by side, zeros past the last row. y's rows are `y_stride` floats apart (w.out
// for Linear's y). REQUIRES: as LinearFewRowsAmxBlocks.
void PackAmxRowTiles(const float* x, int64_t rows, int64_t in,
                     std::vector<uint32_t>& tiles);
void LinearManyRowsAmxBlocks(const FewRowsWeights& w, const uint32_t* tiles, int64_t rows,
                             int64_t nb_begin, int64_t nb_end, float* y,
                             int64_t y_stride);

// Whether Linear() runs LinearManyRowsAmxBlocks instead of oneDNN's matmul on these
// weights (ChooseLinearKernel's kAmxManyRows): where LinearFewRows would run AMX on
// them, so that a row has the same bits through both.
bool AmxRunsLinear(const FewRowsWeights& w);

}  // namespace layerserve::kernels::internal

#endif  // LAYERSERVE_KERNELS_LINEAR_INTERNAL_H_
