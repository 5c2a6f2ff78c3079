// Linear layers: y[M, out] = x[M, in] · W^T + bias, x and y float32 row-major, the
// weights float32, bfloat16 or int8 (WeightFormat). Two entry points: Linear() for
// many rows (prefill) and LinearFewRows() for the few rows of decode steps. Which
// implementation computes each is chosen once per weights, at packing, by
// ChooseLinearKernel (kernel_choice.h, the one place that chooses): oneDNN's matmul,
// or kernels of ours in kernels/linear/{hwy,avx512_bf16,amx,int8}/.
//
// LinearWeights are prepacked once, at load, into the blocked layout oneDNN's
// matmul picks for them (that layout does not depend on M), or into our int8
// layout, and are then immutable: share them between threads freely. A
// LinearContext holds one thread's scratch; it is not thread-safe: one per worker
// thread. The matmul primitives (one per shape, created on first use) are kept per
// thread by the kernels themselves, as a helping thread runs them too. Workers are
// single-threaded (omp_set_num_threads(1)), so a matmul runs on the calling thread.
//
// Numerics: sums in float32. With bfloat16 or int8 weights the products use
// bfloat16 operands where the kernel says so, and VDPBF16PS, AMX and oneDNN's
// bfloat16 matmul treat subnormal inputs as zero. NaN and Inf propagate through the
// sums as float32 arithmetic propagates them; nothing tests for them.
// Errors: sizes are not checked (REQUIRES). Packing and the oneDNN paths throw
// dnnl::error when oneDNN fails, and allocations std::bad_alloc; y is then partly
// written. No pointer needs alignment.
#ifndef LAYERSERVE_KERNELS_LINEAR_H_
#define LAYERSERVE_KERNELS_LINEAR_H_

#include <cstdint>
#include <memory>

#include "kernels/common/parallel_for.h"

namespace layerserve::kernels {

// How weights are held. Activations are float32 outside; with kBfloat16 they are
// rounded to bfloat16 for the product, which accumulates in float32. kInt8 is
// weight-only quantization (kernels/linear/int8/int8_weights.h): symmetric int8 with one
// float32 scale per output and group of inputs; activations stay float32 in LinearFewRows
// and are rounded to bfloat16 in Linear, as with kBfloat16.
enum class WeightType { kFloat32, kBfloat16, kInt8 };

// Inputs per int8 scale when none is asked for: the smallest group the measurements
// of docs/perf/2026-12-02-int8-weights.md found as fast as larger ones.
inline constexpr int64_t kDefaultInt8GroupSize = 64;

// A WeightType and, for kInt8, the inputs sharing one scale (0: all of a row's, one
// scale per output). Converts from a WeightType (the default group size).
struct WeightFormat {
  WeightFormat(WeightType type, int64_t group_size = kDefaultInt8GroupSize)  // NOLINT
      : type(type), group_size(group_size) {}
  WeightType type;
  int64_t group_size;
};

// Which implementation computes a product, and for which call (kernel_choice.h).
enum class LinearKernel;
enum class LinearCall;

class LinearWeights {
 public:
  // `weight` is [out, in] row-major (torch.nn.Linear), or [in, out] when
  // `in_by_out` (GPT-2's Conv1D). `bias` is [out] or null. Copies what it needs;
  // float32 weights are rounded to the format's type here (int8: QuantizeInt8,
  // int8_weights.h, which gives a group holding NaN or Inf a NaN scale). Chooses
  // the kernels (ChooseLinearKernel) for this CPU. Throws dnnl::error or
  // std::bad_alloc. REQUIRES: in >= 1, out >= 1, format.group_size >= 0.
  LinearWeights(const float* weight, int64_t out, int64_t in, bool in_by_out,
                const float* bias, WeightFormat format);
  ~LinearWeights();
  LinearWeights(const LinearWeights&) = delete;
  LinearWeights& operator=(const LinearWeights&) = delete;

  int64_t in() const { return in_; }
  int64_t out() const { return out_; }
  WeightType type() const { return type_; }
  // Inputs per scale for kInt8 weights (a row's `in` when asked for 0); 0 otherwise.
  int64_t group_size() const;
  // Bytes of the packed weights and bias (counted once, at packing: the server
  // asks for every decode batch whether a model's layers outgrow the cache).
  int64_t bytes() const { return bytes_; }
  // Whether LinearFewRows reads these weights itself (else it calls Linear).
  bool few_rows_native() const;
  // How many matmuls Linear runs these weights as (column ranges fixed at packing;
  // 1 for small layers).
  int64_t chunks() const;
  // The implementation Linear() (kManyRows) or LinearFewRows() (kFewRows) runs on
  // these weights on this CPU, chosen at packing (ChooseLinearKernel).
  LinearKernel kernel(LinearCall call) const;
  // Whether Linear() gives every row the bits LinearFewRows() gives it on this CPU
  // (both run AMX tiles, or both VDPBF16PS): then decode steps and prefill rows
  // may share one call, one read of the weights, without changing a result.
  bool calls_share_bits() const;

  struct Packed;
  const Packed& packed() const { return *packed_; }

 private:
  void ChooseKernels();

  const int64_t in_, out_;
  const WeightType type_;
  std::unique_ptr<Packed> packed_;
  int64_t bytes_ = 0;
};

class LinearContext {
 public:
  LinearContext();
  ~LinearContext();
  LinearContext(const LinearContext&) = delete;
  LinearContext& operator=(const LinearContext&) = delete;

  struct Impl;
  Impl& impl() { return *impl_; }

 private:
  std::unique_ptr<Impl> impl_;
};

// y[rows, w.out()] = x[rows, w.in()] · W^T + bias. x and y are row-major float32
// and must not overlap. REQUIRES: rows >= 1.
//
// A large layer runs as several matmuls over fixed ranges of its outputs
// (chunks()); with `parallel`, idle threads may each take some. Which thread runs
// a range never changes a result, nor does how many rows share the call: each
// row's result depends on that row only. bfloat16 weights on CPUs with AMX tiles
// run an AMX kernel of ours instead of oneDNN's matmul (over the same ranges), and
// on CPUs with AVX512_BF16 but no AMX (not Zen 4) the VDPBF16PS few-rows kernel;
// each row then has the bits LinearFewRows gives it (calls_share_bits). Chosen
// because each beat oneDNN 2.6's matmul, see docs/perf/2026-12-03-linear-on-amx.md
// and docs/perf/2026-12-07-one-kernel-for-every-row.md.
void Linear(LinearContext& context, const LinearWeights& w, const float* x, int64_t rows,
            float* y, ParallelFor* parallel = nullptr);

// The same product for the few rows of decode steps, read straight from the packed
// weights: a matrix-vector product that streams them once per call (chosen because
// oneDNN's matmul reads them well below the memory's rate at one row, see
// docs/perf/2026-11-30-decode-step-kernels.md). Each row's result depends on
// that row only, as Linear()'s do, but may be rounded differently (sums run over the
// input in order): choose between the two by something of the row's own sequence,
// never by how many rows share a call, to keep batching bit-exact. Calls Linear()
// when oneDNN packed the weights in a layout this does not read. With `parallel`,
// idle threads may each take a share of the outputs (the same results: an output
// is computed by the same code wherever it runs). x and y must not overlap.
// REQUIRES: rows >= 1.
void LinearFewRows(LinearContext& context, const LinearWeights& w, const float* x,
                   int64_t rows, float* y, ParallelFor* parallel = nullptr);

// The same product computed naively in double from the original float32 weights
// ([out, in] row-major; bias [out] or null), rounded once: the test oracle.
// Thread-safe.
void LinearReference(const float* weight, const float* bias, int64_t out, int64_t in,
                     const float* x, int64_t rows, float* y);

}  // namespace layerserve::kernels

#endif  // LAYERSERVE_KERNELS_LINEAR_H_
