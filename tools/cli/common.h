// What the commands of layerserve-cli share: exit codes, error reporting, and the
// .npy <-> wire tensor steps of the tensor commands. Output goes to stdout and
// stderr; call from one thread.
#ifndef LAYERSERVE_TOOLS_CLI_COMMON_H_
#define LAYERSERVE_TOOLS_CLI_COMMON_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "client/cpp/client.h"
#include "common/dtype.h"
#include "google/protobuf/message.h"
#include "layerserve/v1/layerserve.pb.h"
#include "nlohmann/json.hpp"
#include "tools/cli/flags.h"

namespace layerserve::client {

// Exit codes, distinct so scripts can tell a bad invocation from a server problem.
constexpr int kExitOk = 0;
constexpr int kExitUsageOrFile = 1;
constexpr int kExitRpc = 2;
constexpr int kExitNotServing = 3;

// The help text (cli_usage.cc).
extern const char kCliUsage[];

// Each prints "error: ..." to stderr and returns its exit code: UsageError also
// prints the help text (1), FileError the message (1), RpcError "error: CODE:
// message" (2).
int UsageError(absl::string_view message);
int FileError(const absl::Status& status);
int RpcError(const absl::Status& status);

// The Client options of the global flags --target, --timeout-ms, --retries and the
// security flags (security_flags.h: --tls, --tls-ca, --tls-cert, --tls-key,
// --token-file, else `env_token`, LAYERSERVE_TOKEN's value or null). Their files
// are read here: NOT_FOUND etc. naming the flag if one cannot be. Retries print a
// line to stderr.
absl::StatusOr<ClientOptions> ClientOptionsFromFlags(const FlagValues& global,
                                                     const char* env_token = nullptr);

// Compact JSON of a message, enums by name, zero values included so that scripts
// need not know proto3's defaults.
std::string ToJson(const google::protobuf::Message& message);

// --wire-dtype (how tensors travel; UNSPECIFIED when absent: the main input's
// dtype) and --out-dtype (the dtype of the written .npy files, default float32).
struct TensorFormats {
  v1::DataType wire = v1::DATA_TYPE_UNSPECIFIED;
  ElementType out = ElementType::kFloat32;
};
absl::StatusOr<TensorFormats> ParseTensorFormats(const FlagValues& flags);

// --position-offset and --positions (comma list), which several requests take.
struct Positions {
  int64_t offset = 0;
  std::vector<int64_t> positions;
};
absl::StatusOr<Positions> ParsePositions(const FlagValues& flags);

// Reads the .npy file at `path` into `*tensor` as `*wire`; an UNSPECIFIED `*wire`
// becomes the file's dtype (so the main input, loaded first, sets it for the rest).
// Warns on stderr about values beyond the wire dtype's range. Returns false after
// printing an error.
bool LoadTensor(const std::string& path, v1::DataType* wire, v1::Tensor* tensor);

// A response tensor written to a file.
struct WrittenTensor {
  std::string field;
  std::string path;
  std::vector<int64_t> shape;
  ElementType dtype;
};

// Writes a response tensor to `path` as `npy_dtype` and appends it to `*written`.
// Returns the exit code (kExitRpc for a malformed response).
int SaveTensor(const v1::Tensor& tensor, const std::string& field,
               const std::string& path, ElementType npy_dtype,
               std::vector<WrittenTensor>* written);

// Prints what SaveTensor wrote: a line per file, or with `json` one object keyed by
// field, with the members of `extra` (an object) added.
void PrintWritten(const std::vector<WrittenTensor>& written, bool json,
                  const nlohmann::json& extra = nlohmann::json::object());

// A response tensor to write to the file that the flag `flag` names.
struct ResponseOutput {
  const char* field;         // Its name in messages and in the report.
  const v1::Tensor* tensor;  // Null when the response lacks it.
  const char* flag;
};

// The tail of the tensor commands: writes every output whose flag was given
// (SaveTensor, as --out-dtype says) and prints what was written (PrintWritten,
// --json). An output asked for that the response lacks makes it malformed
// (kExitRpc). Returns the exit code.
int SaveOutputs(const FlagValues& flags, ElementType npy_dtype,
                const std::vector<ResponseOutput>& outputs);

}  // namespace layerserve::client

#endif  // LAYERSERVE_TOOLS_CLI_COMMON_H_
