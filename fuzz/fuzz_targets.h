// The fuzz targets: each takes arbitrary bytes and must never crash, hang, leak or
// break an invariant (a broken invariant aborts with a message, which libFuzzer and
// the replay test both report). One function per target, so the same code runs
// under libFuzzer (fuzzer_entry.cc, LAYERSERVE_FUZZ builds) and in the normal build's
// replay test (replay_test.cc: the seed corpus and every saved regression).
// Not thread-safe: targets keep per-process state (the demo model, a WorkerContext).
#ifndef LAYERSERVE_FUZZ_FUZZ_TARGETS_H_
#define LAYERSERVE_FUZZ_FUZZ_TARGETS_H_

#include <cstddef>
#include <cstdint>

namespace layerserve::fuzz {

// What a target did with its input; the replay test checks that the seed corpus
// reaches the interesting outcomes, so the targets cannot silently stop testing.
enum class Outcome {
  kUnparsable,  // The bytes are not a serialized request (RPC targets only).
  kRejected,    // Validation refused the input with an error status.
  kSkipped,     // Valid, but too large to run in a fuzzing budget.
  kAccepted,    // Valid and fully processed (for RPCs: the Run* function ran).
};

// The four compute RPCs: bytes -> request proto -> Parse*Request -> Run* on a
// WorkerContext, with the response checked against the request.
Outcome FuzzNormalize(const uint8_t* data, size_t size);
Outcome FuzzActivate(const uint8_t* data, size_t size);
Outcome FuzzPositionalEncode(const uint8_t* data, size_t size);
Outcome FuzzBlockForward(const uint8_t* data, size_t size);  // The built-in demo model.
// SafetensorsFile::Open on the bytes as a file; every tensor it hands out must lie
// inside the file.
Outcome FuzzSafetensors(const uint8_t* data, size_t size);
// ParseModelConfig on the bytes as config.json text.
Outcome FuzzModelConfig(const uint8_t* data, size_t size);
// ValidateTensor / DecodeTensor on the bytes as a v1::Tensor, then EncodeTensor back.
Outcome FuzzTensorCodec(const uint8_t* data, size_t size);
// BatchQueues driven by byte-coded schedule / take / flush / advance-clock
// operations, checked against a model of the queues (nothing lost or duplicated,
// order kept within a key, sizes and closing rules as documented).
Outcome FuzzBatchQueues(const uint8_t* data, size_t size);
// A serialized inference.ModelInferRequest through each v1 operation's
// OperationMapping (CheckRequestedOutputs, FillRequest) and ParseSequenceControl,
// then the operation's v1 Parse (BlockForward: the demo model): every input lands
// in the v1 request as it came, every INVALID_ARGUMENT starts with the name it is
// about. Accepted: some operation's Parse succeeded.
Outcome FuzzModelInfer(const uint8_t* data, size_t size);

}  // namespace layerserve::fuzz

#endif  // LAYERSERVE_FUZZ_FUZZ_TARGETS_H_
