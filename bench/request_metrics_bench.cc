// What recording one request's metrics costs the server (server/metrics/metrics.h): the
// calls a computed Normalize makes from its handler to its answer, in order, on
// one thread. The series exist already (as after the first request), so this is
// the steady state: label lookups, histogram observations, counter increments.
#include <benchmark/benchmark.h>

#include "absl/time/time.h"
#include "server/metrics/metrics.h"

namespace layerserve {
namespace {

void BM_NormalizeRequestMetrics(benchmark::State& state) {
  Metrics metrics;
  kernels::ValueStats input;
  input.count = 256;
  kernels::ValueStats output = input;
  output.abs_max = 2.5f;
  output.sum_squares = 256;
  for (auto _ : state) {
    metrics.RequestStarted("Normalize", 1060);
    metrics.Queued("Normalize", absl::Microseconds(3));
    metrics.BatchTaken("Normalize", 1, 1);
    metrics.Computed("Normalize", absl::Microseconds(1));
    metrics.InputValues("Normalize", input);
    metrics.OutputValues("Normalize", output);
    metrics.Saturated(ElementType::kFloat32, 0);
    metrics.ZeroVarianceRows(0);
    metrics.RequestFinished("Normalize", "", grpc::StatusCode::OK, absl::Microseconds(9),
                            1060);
  }
}
BENCHMARK(BM_NormalizeRequestMetrics);

}  // namespace
}  // namespace layerserve

BENCHMARK_MAIN();
