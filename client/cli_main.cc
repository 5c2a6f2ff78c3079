// layerserve-cli: a command-line client of a layerserve server. Tensors go in and out
// as .npy files. Subcommands parse their own flags (absl flags are process-global and
// would let every command accept every other command's flags).
#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <iostream>
#include <iterator>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "client/npy.h"
#include "client/tensor_util.h"
#include "google/protobuf/util/json_util.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "layerserve/v1/layerserve.grpc.pb.h"
#include "nlohmann/json.hpp"

namespace layerserve::client {
namespace {

constexpr char kUsage[] =
    R"(Usage: layerserve-cli [--target HOST:PORT] [--timeout-ms N] <command> [flags]

Calls a layerserve server at --target (default 127.0.0.1:50051); each call has a
deadline of --timeout-ms milliseconds (default 30000).

Commands:
  health [--service NAME] [--json]
      Standard gRPC health check (grpc.health.v1.Health/Check) of service NAME
      (default "": the whole server). Prints SERVING, NOT_SERVING or
      SERVICE_UNKNOWN.
  list-models [--json]
      The models the server serves, with their dimensions.
  normalize --kind layer|rms --input X.npy --out Y.npy [--weight W.npy]
            [--bias B.npy] [--eps E] [--weight-offset]
            [--residual R.npy --residual-out S.npy]
            [--wire-dtype float32|bfloat16|float16] [--out-dtype float32|float16]
            [--json]
      LayerNorm or RMSNorm over the last dimension of X. With --residual, X + R
      is normalized and the sum is written to S. Every tensor travels as
      --wire-dtype (default: the dtype of X); the outputs are written as
      --out-dtype (default float32).
  help
      This text.

Flags take their value as "--flag VALUE" or "--flag=VALUE"; --target and
--timeout-ms may also follow the command. --json prints one JSON object on
stdout instead of text. .npy files must be float32 or float16, little-endian,
C order.

Exit status: 0 success; 1 usage or file error; 2 RPC error, printed as
"error: CODE: message"; 3 health check answered but not SERVING.
)";

// Exit codes, distinct so scripts can tell a bad invocation from a server problem.
constexpr int kExitOk = 0;
constexpr int kExitUsageOrFile = 1;
constexpr int kExitRpc = 2;
constexpr int kExitNotServing = 3;

constexpr char kDefaultTarget[] = "127.0.0.1:50051";
constexpr char kDefaultTimeoutMs[] = "30000";
// The server's default --max-message-bytes, so any tensor it accepts fits.
constexpr int kMaxMessageBytes = 256 << 20;

// ---------------------------------------------------------------------------
// Flag parsing.

struct FlagSpec {
  absl::string_view name;  // Without the leading "--".
  bool takes_value;
};

// Parsed flags: name -> value ("true" for a flag without a value).
using FlagValues = std::map<std::string, std::string, std::less<>>;

// Consumes flags from args[*pos], stopping at the first argument that is not a flag.
absl::StatusOr<FlagValues> ParseFlags(const std::vector<std::string>& args, size_t* pos,
                                      absl::Span<const FlagSpec> specs) {
  FlagValues values;
  for (; *pos < args.size() && absl::StartsWith(args[*pos], "--"); ++*pos) {
    absl::string_view arg = absl::string_view(args[*pos]).substr(2);
    absl::string_view name = arg.substr(0, arg.find('='));
    auto spec = std::find_if(specs.begin(), specs.end(),
                             [&](const FlagSpec& s) { return s.name == name; });
    if (spec == specs.end()) {
      return absl::InvalidArgumentError(absl::StrCat("unknown flag --", name));
    }
    if (values.count(name) != 0) {
      return absl::InvalidArgumentError(absl::StrCat("--", name, " is given twice"));
    }
    std::string value = "true";
    if (name.size() < arg.size()) {
      if (!spec->takes_value) {
        return absl::InvalidArgumentError(absl::StrCat("--", name, " takes no value"));
      }
      value = std::string(arg.substr(name.size() + 1));
    } else if (spec->takes_value) {
      if (++*pos == args.size()) {
        return absl::InvalidArgumentError(absl::StrCat("--", name, " needs a value"));
      }
      value = args[*pos];
    }
    values.emplace(std::string(name), std::move(value));
  }
  return values;
}

std::string FlagOr(const FlagValues& flags, absl::string_view name,
                   absl::string_view fallback) {
  auto it = flags.find(name);
  return it == flags.end() ? std::string(fallback) : it->second;
}

// ---------------------------------------------------------------------------
// Output helpers.

int UsageError(absl::string_view message) {
  std::cerr << "error: " << message << "\n\n" << kUsage;
  return kExitUsageOrFile;
}

int FileError(const absl::Status& status) {
  std::cerr << "error: " << status.message() << "\n";
  return kExitUsageOrFile;
}

int RpcError(const grpc::Status& status) {
  // gRPC and absl share the canonical code numbering.
  std::cerr << "error: "
            << absl::StatusCodeToString(
                   static_cast<absl::StatusCode>(status.error_code()))
            << ": " << status.error_message() << "\n";
  return kExitRpc;
}

// Compact JSON of a response, enums by name, zero values included so that scripts
// need not know proto3's defaults.
std::string ToJson(const google::protobuf::Message& message) {
  google::protobuf::util::JsonPrintOptions options;
  options.always_print_primitive_fields = true;
  std::string json;
  if (!google::protobuf::util::MessageToJsonString(message, &json, options).ok()) {
    return "{}";  // Cannot happen for the messages printed here.
  }
  return json;
}

const char* NpyDtypeName(kernels::ElementType type) {
  return type == kernels::ElementType::kFloat16 ? "float16" : "float32";
}

// ---------------------------------------------------------------------------
// Commands.

struct Connection {
  std::shared_ptr<grpc::Channel> channel;
  std::chrono::milliseconds timeout;

  void Prepare(grpc::ClientContext* context) const {
    context->set_deadline(std::chrono::system_clock::now() + timeout);
  }
};

int RunHealth(const Connection& connection, const FlagValues& flags) {
  grpc::health::v1::HealthCheckRequest request;
  request.set_service(FlagOr(flags, "service", ""));
  grpc::health::v1::HealthCheckResponse response;
  grpc::ClientContext context;
  connection.Prepare(&context);
  grpc::Status status = grpc::health::v1::Health::NewStub(connection.channel)
                            ->Check(&context, request, &response);
  // Check answers NOT_FOUND for a service the server does not know (health.proto).
  if (status.error_code() == grpc::StatusCode::NOT_FOUND) {
    response.set_status(grpc::health::v1::HealthCheckResponse::SERVICE_UNKNOWN);
  } else if (!status.ok()) {
    return RpcError(status);
  }
  if (flags.count("json") != 0) {
    std::cout << ToJson(response) << "\n";
  } else {
    std::cout << grpc::health::v1::HealthCheckResponse::ServingStatus_Name(
                     response.status())
              << "\n";
  }
  return response.status() == grpc::health::v1::HealthCheckResponse::SERVING
             ? kExitOk
             : kExitNotServing;
}

int RunListModels(const Connection& connection, const FlagValues& flags) {
  v1::ListModelsResponse response;
  grpc::ClientContext context;
  connection.Prepare(&context);
  grpc::Status status = v1::LayerService::NewStub(connection.channel)
                            ->ListModels(&context, v1::ListModelsRequest(), &response);
  if (!status.ok()) return RpcError(status);
  if (flags.count("json") != 0) {
    std::cout << ToJson(response) << "\n";
    return kExitOk;
  }
  if (response.models().empty()) {
    std::cout << "no models\n";
    return kExitOk;
  }
  std::vector<std::vector<std::string>> rows = {
      {"NAME", "ARCHITECTURE", "STATE", "LAYERS", "HIDDEN", "HEADS", "KV_HEADS",
       "HEAD_DIM", "FFN", "ACTIVATION", "NORM", "WEIGHTS", "DEFAULT"}};
  for (const v1::ModelInfo& m : response.models()) {
    rows.push_back({m.name(), m.architecture(), v1::ModelInfo::State_Name(m.state()),
                    absl::StrCat(m.num_layers()), absl::StrCat(m.hidden_size()),
                    absl::StrCat(m.num_attention_heads()),
                    absl::StrCat(m.num_key_value_heads()), absl::StrCat(m.head_dim()),
                    absl::StrCat(m.intermediate_size()),
                    v1::Activation_Name(m.activation()), v1::NormKind_Name(m.norm()),
                    v1::DataType_Name(m.weight_dtype()), m.is_default() ? "yes" : ""});
  }
  std::vector<size_t> widths(rows[0].size(), 0);
  for (const auto& row : rows) {
    for (size_t i = 0; i < row.size(); ++i) {
      widths[i] = std::max(widths[i], row[i].size());
    }
  }
  for (const auto& row : rows) {
    std::string line;
    for (size_t i = 0; i < row.size(); ++i) {
      absl::StrAppend(&line, row[i], std::string(widths[i] - row[i].size() + 2, ' '));
    }
    std::cout << absl::StripTrailingAsciiWhitespace(line) << "\n";
  }
  for (const v1::ModelInfo& m : response.models()) {
    if (!m.error().empty()) std::cout << m.name() << ": " << m.error() << "\n";
  }
  return kExitOk;
}

// Converts `array`, read from `path`, into `*tensor` as `wire_dtype`, warning about
// values that do not fit. Returns false after printing an error.
bool ToWire(const NpyArray& array, const std::string& path, v1::DataType wire_dtype,
            v1::Tensor* tensor) {
  int64_t saturated = 0;
  absl::StatusOr<v1::Tensor> converted = TensorFromNpy(array, wire_dtype, &saturated);
  if (!converted.ok()) {
    FileError(converted.status());
    return false;
  }
  if (saturated > 0) {
    std::cerr << "warning: " << path << ": " << saturated << " values exceed the "
              << v1::DataType_Name(wire_dtype) << " range and are sent as +-Inf\n";
  }
  *tensor = *std::move(converted);
  return true;
}

// ToWire of the .npy file at `path`.
bool LoadTensor(const std::string& path, v1::DataType wire_dtype, v1::Tensor* tensor) {
  absl::StatusOr<NpyArray> array = ReadNpyFile(path);
  if (!array.ok()) {
    FileError(array.status());
    return false;
  }
  return ToWire(*array, path, wire_dtype, tensor);
}

// A response tensor written to a file.
struct WrittenTensor {
  std::string field;
  std::string path;
  std::vector<int64_t> shape;
  kernels::ElementType dtype;
};

// Writes a response tensor to `path` as `npy_dtype` and appends it to `*written`.
// Returns the exit code.
int SaveTensor(const v1::Tensor& tensor, const std::string& field,
               const std::string& path, kernels::ElementType npy_dtype,
               std::vector<WrittenTensor>* written) {
  int64_t saturated = 0;
  absl::StatusOr<NpyArray> array = NpyFromTensor(tensor, npy_dtype, &saturated);
  if (!array.ok()) {
    std::cerr << "error: malformed response: " << field << ": "
              << array.status().message() << "\n";
    return kExitRpc;
  }
  if (saturated > 0) {
    std::cerr << "warning: " << path << ": " << saturated << " values exceed the "
              << NpyDtypeName(npy_dtype) << " range and are written as +-Inf\n";
  }
  if (absl::Status s = WriteNpyFile(path, *array); !s.ok()) return FileError(s);
  written->push_back({field, path, array->shape, npy_dtype});
  return kExitOk;
}

// Prints what SaveTensor wrote, as text or as one JSON object keyed by field.
void PrintWritten(const std::vector<WrittenTensor>& written, bool json) {
  if (!json) {
    for (const WrittenTensor& w : written) {
      std::cout << w.field << ": shape [" << absl::StrJoin(w.shape, ", ") << "] "
                << NpyDtypeName(w.dtype) << " -> " << w.path << "\n";
    }
    return;
  }
  nlohmann::json report = nlohmann::json::object();
  for (const WrittenTensor& w : written) {
    report[w.field] = {
        {"path", w.path}, {"shape", w.shape}, {"dtype", NpyDtypeName(w.dtype)}};
  }
  std::cout << report.dump() << "\n";
}

int RunNormalize(const Connection& connection, const FlagValues& flags) {
  for (const char* required : {"kind", "input", "out"}) {
    if (flags.count(required) == 0) {
      return UsageError(absl::StrCat("normalize needs --", required));
    }
  }
  if (flags.count("residual") != flags.count("residual-out")) {
    return UsageError("--residual and --residual-out go together");
  }
  v1::NormalizeRequest request;
  const std::string& kind = flags.at("kind");
  if (kind == "layer") {
    request.set_kind(v1::LAYER_NORM);
  } else if (kind == "rms") {
    request.set_kind(v1::RMS_NORM);
  } else {
    return UsageError(absl::StrCat("--kind must be layer or rms, not '", kind, "'"));
  }
  if (flags.count("eps") != 0) {
    float eps;
    if (!absl::SimpleAtof(flags.at("eps"), &eps)) {
      return UsageError(
          absl::StrCat("--eps must be a number, not '", flags.at("eps"), "'"));
    }
    request.set_epsilon(eps);
  }
  request.set_weight_offset(flags.count("weight-offset") != 0);

  v1::DataType wire_dtype = v1::DATA_TYPE_UNSPECIFIED;
  if (flags.count("wire-dtype") != 0) {
    const std::string& name = flags.at("wire-dtype");
    if (name == "float32") {
      wire_dtype = v1::FLOAT32;
    } else if (name == "bfloat16") {
      wire_dtype = v1::BFLOAT16;
    } else if (name == "float16") {
      wire_dtype = v1::FLOAT16;
    } else {
      return UsageError(absl::StrCat(
          "--wire-dtype must be float32, bfloat16 or float16, not '", name, "'"));
    }
  }
  const std::string out_dtype_name = FlagOr(flags, "out-dtype", "float32");
  if (out_dtype_name != "float32" && out_dtype_name != "float16") {
    return UsageError(absl::StrCat("--out-dtype must be float32 or float16, not '",
                                   out_dtype_name, "'"));
  }
  const kernels::ElementType out_dtype = out_dtype_name == "float16"
                                             ? kernels::ElementType::kFloat16
                                             : kernels::ElementType::kFloat32;

  const std::string& input_path = flags.at("input");
  absl::StatusOr<NpyArray> input = ReadNpyFile(input_path);
  if (!input.ok()) return FileError(input.status());
  // By default nothing is rounded on the way: the input travels in its own dtype.
  if (wire_dtype == v1::DATA_TYPE_UNSPECIFIED) {
    wire_dtype = ProtoFromElementType(input->dtype);
  }
  if (!ToWire(*input, input_path, wire_dtype, request.mutable_input())) {
    return kExitUsageOrFile;
  }
  // Optional tensors: only touch the fields whose flag is given, so absent ones
  // stay unset.
  if (flags.count("weight") != 0 &&
      !LoadTensor(flags.at("weight"), wire_dtype, request.mutable_weight())) {
    return kExitUsageOrFile;
  }
  if (flags.count("bias") != 0 &&
      !LoadTensor(flags.at("bias"), wire_dtype, request.mutable_bias())) {
    return kExitUsageOrFile;
  }
  if (flags.count("residual") != 0 &&
      !LoadTensor(flags.at("residual"), wire_dtype, request.mutable_residual())) {
    return kExitUsageOrFile;
  }

  v1::NormalizeResponse response;
  grpc::ClientContext context;
  connection.Prepare(&context);
  grpc::Status status = v1::LayerService::NewStub(connection.channel)
                            ->Normalize(&context, request, &response);
  if (!status.ok()) return RpcError(status);

  std::vector<WrittenTensor> written;
  if (int code =
          SaveTensor(response.output(), "output", flags.at("out"), out_dtype, &written);
      code != kExitOk) {
    return code;
  }
  if (flags.count("residual-out") != 0) {
    if (!response.has_residual_out()) {
      std::cerr << "error: malformed response: residual_out is missing\n";
      return kExitRpc;
    }
    if (int code = SaveTensor(response.residual_out(), "residual_out",
                              flags.at("residual-out"), out_dtype, &written);
        code != kExitOk) {
      return code;
    }
  }
  PrintWritten(written, flags.count("json") != 0);
  return kExitOk;
}

// ---------------------------------------------------------------------------

struct Command {
  absl::string_view name;
  std::vector<FlagSpec> flags;
  int (*run)(const Connection&, const FlagValues&);
};

int Main(const std::vector<std::string>& args) {
  if (std::find(args.begin(), args.end(), "--help") != args.end() ||
      std::find(args.begin(), args.end(), "-h") != args.end() ||
      (!args.empty() && args[0] == "help")) {
    std::cout << kUsage;
    return kExitOk;
  }
  size_t pos = 0;
  static constexpr FlagSpec kGlobalFlags[] = {{"target", true}, {"timeout-ms", true}};
  absl::StatusOr<FlagValues> global = ParseFlags(args, &pos, kGlobalFlags);
  if (!global.ok()) return UsageError(global.status().message());
  if (pos == args.size()) return UsageError("no command given");

  const Command kCommands[] = {
      {"health", {{"service", true}, {"json", false}}, &RunHealth},
      {"list-models", {{"json", false}}, &RunListModels},
      {"normalize",
       {{"kind", true},
        {"input", true},
        {"out", true},
        {"weight", true},
        {"bias", true},
        {"eps", true},
        {"weight-offset", false},
        {"residual", true},
        {"residual-out", true},
        {"wire-dtype", true},
        {"out-dtype", true},
        {"json", false}},
       &RunNormalize},
  };
  const std::string& name = args[pos++];
  const Command* command = nullptr;
  for (const Command& c : kCommands) {
    if (c.name == name) command = &c;
  }
  if (command == nullptr) return UsageError(absl::StrCat("unknown command '", name, "'"));
  // Global flags may also follow the command.
  std::vector<FlagSpec> specs = command->flags;
  specs.insert(specs.end(), std::begin(kGlobalFlags), std::end(kGlobalFlags));
  absl::StatusOr<FlagValues> flags = ParseFlags(args, &pos, specs);
  if (!flags.ok()) {
    return UsageError(absl::StrCat(name, ": ", flags.status().message()));
  }
  if (pos != args.size()) {
    return UsageError(absl::StrCat(name, ": unexpected argument '", args[pos], "'"));
  }
  for (const FlagSpec& spec : kGlobalFlags) {
    auto it = flags->find(spec.name);
    if (it == flags->end()) continue;
    if (!global->emplace(it->first, it->second).second) {
      return UsageError(absl::StrCat("--", spec.name, " is given twice"));
    }
    flags->erase(it);
  }

  int64_t timeout_ms;
  const std::string timeout_flag = FlagOr(*global, "timeout-ms", kDefaultTimeoutMs);
  if (!absl::SimpleAtoi(timeout_flag, &timeout_ms) || timeout_ms <= 0) {
    return UsageError(absl::StrCat("--timeout-ms must be a positive integer, not '",
                                   timeout_flag, "'"));
  }
  grpc::ChannelArguments channel_args;
  channel_args.SetMaxReceiveMessageSize(kMaxMessageBytes);
  channel_args.SetMaxSendMessageSize(kMaxMessageBytes);
  Connection connection{
      grpc::CreateCustomChannel(FlagOr(*global, "target", kDefaultTarget),
                                grpc::InsecureChannelCredentials(), channel_args),
      std::chrono::milliseconds(timeout_ms)};
  return command->run(connection, *flags);
}

}  // namespace
}  // namespace layerserve::client

int main(int argc, char** argv) {
  return layerserve::client::Main(std::vector<std::string>(argv + 1, argv + argc));
}
