// layerserve-cpp-example: a program built against the installed C++ client
// (docs/clients/cpp.md). It lists the server's models, runs one Normalize, then
// decodes through a KV-cache session on the default model's served blocks: a short
// prefill and --steps single-token steps, each reply's session length checked. It
// prints one summary line and exits 0; on any error a message on stderr and exit 1
// (2 for bad flags).
//
//   layerserve-cpp-example [--address HOST:PORT] [--steps N]
//
// Session calls carry the x-layerserve-session header (Client adds it), so a load
// balancer that routes on it (deploy/nginx/nginx.conf) keeps the session's calls on
// the replica that opened it.
#include <layerserve/client/client.h>
#include <layerserve/client/tensor_util.h>
#include <layerserve/client/version.h>

#include <chrono>
#include <cmath>
#include <cstdint>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace {

namespace v1 = layerserve::v1;
using layerserve::client::Client;

constexpr int64_t kPrefillTokens = 4;

struct Flags {
  std::string address = "127.0.0.1:50051";
  int steps = 20;
};

constexpr char kUsage[] =
    "usage: layerserve-cpp-example [--address HOST:PORT] [--steps N]\n"
    "  --address  the server (default 127.0.0.1:50051)\n"
    "  --steps    single-token decode steps after the prefill (default 20)\n";

// --name VALUE or --name=VALUE; an empty error means success.
std::string ParseFlags(int argc, char** argv, Flags* flags) {
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i], value;
    std::string::size_type eq = arg.find('=');
    if (eq != std::string::npos) {
      value = arg.substr(eq + 1);
      arg.resize(eq);
    } else if (arg == "--address" || arg == "--steps") {
      if (i + 1 == argc) return arg + " needs a value";
      value = argv[++i];
    }
    if (arg == "--help" || arg == "-h") {
      return "help";
    } else if (arg == "--address") {
      flags->address = value;
    } else if (arg == "--steps") {
      if (!absl::SimpleAtoi(value, &flags->steps) || flags->steps < 0) {
        return "--steps: want a count >= 0, got \"" + value + "\"";
      }
    } else {
      return "unknown flag " + arg;
    }
  }
  return "";
}

// `tokens` rows of `width` values in [-1, 1], different for every token position so
// that each step sends new data.
std::vector<float> HiddenStates(int64_t first_token, int64_t tokens, int64_t width) {
  std::vector<float> values(tokens * width);
  for (int64_t t = 0; t < tokens; ++t) {
    for (int64_t i = 0; i < width; ++i) {
      values[t * width + i] = std::sin(0.1f * (first_token + t) + 0.01f * i);
    }
  }
  return values;
}

// One session step: `tokens` new tokens after `length` cached ones; checks that the
// reply holds a finite [tokens, width] output and that the session now caches
// length + tokens tokens.
absl::Status Step(Client& client, const std::string& session_id, int64_t length,
                  int64_t tokens, int64_t width) {
  absl::StatusOr<v1::Tensor> input = layerserve::client::TensorFromFloats(
      HiddenStates(length, tokens, width), {tokens, width}, v1::FLOAT32);
  if (!input.ok()) return input.status();
  v1::BlockForwardRequest request;
  request.set_session_id(session_id);  // Model and layers: the session's.
  *request.mutable_hidden_states() = *std::move(input);
  absl::StatusOr<v1::BlockForwardResponse> reply = client.BlockForward(request);
  if (!reply.ok()) return reply.status();
  if (reply->session_length() != length + tokens) {
    return absl::InternalError(absl::StrCat("session length ", reply->session_length(),
                                            " after a step of ", tokens, " tokens on ",
                                            length, ", want ", length + tokens));
  }
  absl::StatusOr<std::vector<float>> output =
      layerserve::client::FloatsFromTensor(reply->hidden_states());
  if (!output.ok()) return output.status();
  if (static_cast<int64_t>(output->size()) != tokens * width) {
    return absl::InternalError(absl::StrCat("step output of ", output->size(),
                                            " values, want ", tokens * width));
  }
  for (float v : *output) {
    if (!std::isfinite(v)) return absl::InternalError("step output is not finite");
  }
  return absl::OkStatus();
}

// RMS_NORM without a weight: every row of the output has a root mean square of 1.
absl::Status NormalizeOnce(Client& client, int64_t width) {
  const int64_t rows = 2;
  absl::StatusOr<v1::Tensor> input = layerserve::client::TensorFromFloats(
      HiddenStates(0, rows, width), {rows, width}, v1::FLOAT32);
  if (!input.ok()) return input.status();
  v1::NormalizeRequest request;
  request.set_kind(v1::RMS_NORM);
  *request.mutable_input() = *std::move(input);
  absl::StatusOr<v1::NormalizeResponse> reply = client.Normalize(request);
  if (!reply.ok()) return reply.status();
  absl::StatusOr<std::vector<float>> y =
      layerserve::client::FloatsFromTensor(reply->output());
  if (!y.ok()) return y.status();
  if (static_cast<int64_t>(y->size()) != rows * width) {
    return absl::InternalError(
        absl::StrCat("Normalize output of ", y->size(), " values, want ", rows * width));
  }
  for (int64_t r = 0; r < rows; ++r) {
    double squares = 0;
    for (int64_t i = 0; i < width; ++i)
      squares += (*y)[r * width + i] * (*y)[r * width + i];
    double rms = std::sqrt(squares / width);
    if (std::abs(rms - 1.0) > 1e-3) {
      return absl::InternalError(absl::StrCat("Normalize row ", r, " has RMS ", rms));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> Run(const Flags& flags) {
  auto start = std::chrono::steady_clock::now();
  layerserve::client::ClientOptions options;
  options.target = flags.address;
  absl::StatusOr<std::unique_ptr<Client>> created = Client::Create(options);
  if (!created.ok()) return created.status();
  Client& client = **created;

  absl::StatusOr<v1::ListModelsResponse> models = client.ListModels();
  if (!models.ok()) return models.status();
  const v1::ModelInfo* model = nullptr;
  for (const v1::ModelInfo& m : models->models()) {
    if (m.is_default() && m.state() == v1::ModelInfo::READY) model = &m;
  }
  if (model == nullptr) {
    return absl::FailedPreconditionError(absl::StrCat(
        "no ready default model among the server's ", models->models_size(), " models"));
  }

  if (absl::Status s = NormalizeOnce(client, model->hidden_size()); !s.ok()) return s;

  v1::OpenSessionRequest open;
  open.set_model(model->name());
  open.set_layer_start(model->span_layer_start());
  open.set_num_layers(model->span_num_layers());
  absl::StatusOr<v1::OpenSessionResponse> session = client.OpenSession(open);
  if (!session.ok()) return session.status();
  absl::Status stepped =
      Step(client, session->session_id(), 0, kPrefillTokens, model->hidden_size());
  for (int i = 0; i < flags.steps && stepped.ok(); ++i) {
    stepped =
        Step(client, session->session_id(), kPrefillTokens + i, 1, model->hidden_size());
  }
  // Closed even after a failed step, so its cache is freed at once.
  absl::Status closed = client.CloseSession(session->session_id());
  if (!stepped.ok()) return stepped;
  if (!closed.ok()) return closed;

  auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                std::chrono::steady_clock::now() - start)
                .count();
  return absl::StrCat("layerserve-cpp-example ", LAYERSERVE_CLIENT_VERSION, ": model ",
                      model->name(), " layers ", model->span_layer_start(), "..",
                      model->span_layer_start() + model->span_num_layers() - 1,
                      ", normalize ok, session of ", kPrefillTokens + flags.steps,
                      " tokens (prefill ", kPrefillTokens, " + ", flags.steps,
                      " decode steps) closed, ", ms, " ms");
}

}  // namespace

int main(int argc, char** argv) {
  Flags flags;
  if (std::string error = ParseFlags(argc, argv, &flags); error == "help") {
    std::cout << kUsage;
    return 0;
  } else if (!error.empty()) {
    std::cerr << "layerserve-cpp-example: " << error << "\n" << kUsage;
    return 2;
  }
  absl::StatusOr<std::string> summary = Run(flags);
  if (!summary.ok()) {
    std::cerr << "layerserve-cpp-example: " << summary.status() << "\n";
    return 1;
  }
  std::cout << *summary << "\n";
  return 0;
}
