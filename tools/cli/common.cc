#include "tools/cli/common.h"

#include <iostream>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "client/cpp/npy.h"
#include "client/cpp/tensor_util.h"
#include "google/protobuf/util/json_util.h"
#include "tools/cli/security_flags.h"

namespace layerserve::client {
namespace {

const char* NpyDtypeName(ElementType type) {
  return type == ElementType::kFloat16 ? "float16" : "float32";
}

}  // namespace

int UsageError(absl::string_view message) {
  std::cerr << "error: " << message << "\n\n" << kCliUsage;
  return kExitUsageOrFile;
}

int FileError(const absl::Status& status) {
  std::cerr << "error: " << status.message() << "\n";
  return kExitUsageOrFile;
}

int RpcError(const absl::Status& status) {
  std::cerr << "error: " << absl::StatusCodeToString(status.code()) << ": "
            << status.message() << "\n";
  return kExitRpc;
}

absl::StatusOr<ClientOptions> ClientOptionsFromFlags(const FlagValues& global,
                                                     const char* env_token) {
  ClientOptions options;
  options.target = FlagOr(global, "target", options.target);
  absl::StatusOr<int64_t> timeout_ms = Int64Flag(global, "timeout-ms", 30000);
  if (!timeout_ms.ok() || *timeout_ms <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--timeout-ms must be a positive integer, not '",
                     FlagOr(global, "timeout-ms", ""), "'"));
  }
  options.timeout = absl::Milliseconds(*timeout_ms);
  absl::StatusOr<int64_t> retries = Int64Flag(global, "retries", 3);
  if (!retries.ok() || *retries < 0 || *retries > 100) {
    return absl::InvalidArgumentError(
        absl::StrCat("--retries must be an integer in [0, 100], not '",
                     FlagOr(global, "retries", ""), "'"));
  }
  options.retry.max_attempts = static_cast<int>(*retries) + 1;
  if (absl::Status s = ApplySecurityFlags(global, env_token, &options); !s.ok()) {
    return s;
  }
  options.on_retry = [](const RetryEvent& e) {
    std::cerr << "retry: " << e.method << " attempt " << e.attempt << " failed with "
              << absl::StatusCodeToString(e.status.code()) << ": " << e.status.message()
              << "; trying again in "
              << absl::FormatDuration(absl::Trunc(e.backoff, absl::Milliseconds(1)))
              << "\n";
  };
  return options;
}

std::string ToJson(const google::protobuf::Message& message) {
  google::protobuf::util::JsonPrintOptions options;
  options.always_print_primitive_fields = true;
  std::string json;
  if (!google::protobuf::util::MessageToJsonString(message, &json, options).ok()) {
    return "{}";  // Cannot happen for the messages printed here.
  }
  return json;
}

absl::StatusOr<TensorFormats> ParseTensorFormats(const FlagValues& flags) {
  TensorFormats formats;
  if (flags.count("wire-dtype") != 0) {
    const std::string& name = flags.at("wire-dtype");
    if (name == "float32") {
      formats.wire = v1::FLOAT32;
    } else if (name == "bfloat16") {
      formats.wire = v1::BFLOAT16;
    } else if (name == "float16") {
      formats.wire = v1::FLOAT16;
    } else {
      return absl::InvalidArgumentError(absl::StrCat(
          "--wire-dtype must be float32, bfloat16 or float16, not '", name, "'"));
    }
  }
  const std::string out = FlagOr(flags, "out-dtype", "float32");
  if (out == "float16") {
    formats.out = ElementType::kFloat16;
  } else if (out != "float32") {
    return absl::InvalidArgumentError(
        absl::StrCat("--out-dtype must be float32 or float16, not '", out, "'"));
  }
  return formats;
}

absl::StatusOr<Positions> ParsePositions(const FlagValues& flags) {
  Positions result;
  absl::StatusOr<int64_t> offset = Int64Flag(flags, "position-offset", 0);
  if (!offset.ok()) return offset.status();
  result.offset = *offset;
  if (flags.count("positions") != 0) {
    if (flags.count("position-offset") != 0) {
      return absl::InvalidArgumentError(
          "--positions and --position-offset exclude each other");
    }
    absl::StatusOr<std::vector<int64_t>> list =
        ParseInt64List("positions", flags.at("positions"));
    if (!list.ok()) return list.status();
    result.positions = *std::move(list);
  }
  return result;
}

bool LoadTensor(const std::string& path, v1::DataType* wire, v1::Tensor* tensor) {
  absl::StatusOr<NpyArray> array = ReadNpyFile(path);
  if (!array.ok()) {
    FileError(array.status());
    return false;
  }
  // By default nothing is rounded on the way: the input travels in its own dtype.
  if (*wire == v1::DATA_TYPE_UNSPECIFIED) *wire = ProtoFromElementType(array->dtype);
  int64_t saturated = 0;
  absl::StatusOr<v1::Tensor> converted = TensorFromNpy(*array, *wire, &saturated);
  if (!converted.ok()) {
    FileError(converted.status());
    return false;
  }
  if (saturated > 0) {
    std::cerr << "warning: " << path << ": " << saturated << " values exceed the "
              << v1::DataType_Name(*wire) << " range and are sent as +-Inf\n";
  }
  *tensor = *std::move(converted);
  return true;
}

int SaveTensor(const v1::Tensor& tensor, const std::string& field,
               const std::string& path, ElementType npy_dtype,
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

int SaveOutputs(const FlagValues& flags, ElementType npy_dtype,
                const std::vector<ResponseOutput>& outputs) {
  std::vector<WrittenTensor> written;
  for (const ResponseOutput& o : outputs) {
    if (flags.count(o.flag) == 0) continue;
    if (o.tensor == nullptr) {
      std::cerr << "error: malformed response: " << o.field << " is missing\n";
      return kExitRpc;
    }
    if (int code = SaveTensor(*o.tensor, o.field, flags.at(o.flag), npy_dtype, &written);
        code != kExitOk) {
      return code;
    }
  }
  PrintWritten(written, flags.count("json") != 0);
  return kExitOk;
}

void PrintWritten(const std::vector<WrittenTensor>& written, bool json,
                  const nlohmann::json& extra) {
  if (!json) {
    for (const WrittenTensor& w : written) {
      std::cout << w.field << ": shape [" << absl::StrJoin(w.shape, ", ") << "] "
                << NpyDtypeName(w.dtype) << " -> " << w.path << "\n";
    }
    return;
  }
  nlohmann::json report = extra;
  for (const WrittenTensor& w : written) {
    report[w.field] = {
        {"path", w.path}, {"shape", w.shape}, {"dtype", NpyDtypeName(w.dtype)}};
  }
  std::cout << report.dump() << "\n";
}

}  // namespace layerserve::client
