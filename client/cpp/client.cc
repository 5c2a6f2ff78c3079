#include "client/cpp/client.h"

#include <algorithm>
#include <cmath>
#include <optional>
#include <utility>
#include <vector>

#include "absl/random/random.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "client/cpp/credentials.h"
#include "google/rpc/status.pb.h"

namespace layerserve::client {
namespace {

bool IsIpv4HostPort(absl::string_view s) {
  const size_t colon = s.rfind(':');
  if (colon == absl::string_view::npos) return false;
  int port;
  if (!absl::SimpleAtoi(s.substr(colon + 1), &port) || port < 0 || port > 65535) {
    return false;
  }
  std::vector<absl::string_view> octets = absl::StrSplit(s.substr(0, colon), '.');
  if (octets.size() != 4) return false;
  for (absl::string_view octet : octets) {
    int value;
    if (octet.empty() || !absl::SimpleAtoi(octet, &value) || value < 0 || value > 255) {
      return false;
    }
  }
  return true;
}

bool IsIpv6HostPort(absl::string_view s) {
  const size_t close = s.rfind("]:");
  int port;
  return absl::StartsWith(s, "[") && close != absl::string_view::npos &&
         s.find(']') == close && absl::SimpleAtoi(s.substr(close + 2), &port) &&
         port >= 0 && port <= 65535;
}

absl::Status ValidateRetry(const RetryPolicy& p) {
  if (p.max_attempts < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("retry.max_attempts must be >= 1, got ", p.max_attempts));
  }
  if (p.initial_backoff <= absl::ZeroDuration() || p.max_backoff < p.initial_backoff) {
    return absl::InvalidArgumentError(
        absl::StrCat("retry backoff needs 0 < initial_backoff <= max_backoff, got ",
                     absl::FormatDuration(p.initial_backoff), " and ",
                     absl::FormatDuration(p.max_backoff)));
  }
  if (!(p.multiplier >= 1) || !(p.jitter >= 0 && p.jitter <= 1)) {
    return absl::InvalidArgumentError(
        absl::StrCat("retry needs multiplier >= 1 and jitter in [0, 1], got ",
                     p.multiplier, " and ", p.jitter));
  }
  return absl::OkStatus();
}

// gRPC sends only printable ASCII in a text header; a session id of the server's
// is one ("<replica>.<hex>").
absl::Status CheckSessionId(absl::string_view id,
                            absl::string_view field = "session_id") {
  for (char c : id) {
    if (c < 0x20 || c > 0x7e) {
      return absl::InvalidArgumentError(absl::StrCat(
          field, ": a session id is printable ASCII (as OpenSession returns it)"));
    }
  }
  return absl::OkStatus();
}

// What the security options of `options` ask for, files read.
struct Security {
  std::shared_ptr<grpc::ChannelCredentials> credentials;  // Never null.
  std::string authorization;                              // "" = no token.
};

absl::StatusOr<Security> ResolveSecurity(const ClientOptions& options) {
  Security security;
  std::string token = options.token;
  if (!options.token.empty() && !options.token_file.empty()) {
    return absl::InvalidArgumentError(
        "token and token_file exclude each other: give the token one way");
  }
  if (!options.token.empty()) {
    if (absl::Status s = CheckToken("token", options.token); !s.ok()) return s;
  } else if (!options.token_file.empty()) {
    absl::StatusOr<std::string> read = ReadTokenFile("token_file", options.token_file);
    if (!read.ok()) return read.status();
    token = *std::move(read);
  }
  if (!token.empty()) security.authorization = absl::StrCat(kBearerPrefix, token);

  const PemFile ca{"tls_ca_file", options.tls_ca_file};
  const PemFile cert{"tls_cert_file", options.tls_cert_file};
  const PemFile key{"tls_key_file", options.tls_key_file};
  if (absl::Status s = CheckClientCertificatePair(cert, key); !s.ok()) return s;
  const bool tls_files = !options.tls_ca_file.empty() || !options.tls_cert_file.empty();
  if (!tls_files) {
    security.credentials = options.credentials != nullptr
                               ? options.credentials
                               : grpc::InsecureChannelCredentials();
    return security;
  }
  if (options.credentials != nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(
        "credentials and ",
        options.tls_ca_file.empty() ? "tls_cert_file/tls_key_file" : "tls_ca_file",
        " exclude each other: give TLS either as channel credentials or as files"));
  }
  absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> tls =
      TlsCredentialsFromFiles(ca, cert, key);
  if (!tls.ok()) return tls.status();
  security.credentials = *std::move(tls);
  return security;
}

}  // namespace

absl::Duration RetryBackoff(const RetryPolicy& policy, int retry, double unit) {
  // Grow in floating point and clamp before converting, so a large retry count
  // cannot overflow.
  const double base = std::min(absl::ToDoubleSeconds(policy.initial_backoff) *
                                   std::pow(policy.multiplier, std::max(retry - 1, 0)),
                               absl::ToDoubleSeconds(policy.max_backoff));
  return absl::Seconds(base * (1 + policy.jitter * (2 * unit - 1)));
}

absl::StatusOr<std::string> ChannelTarget(absl::string_view target) {
  target = absl::StripAsciiWhitespace(target);
  if (target.empty()) return absl::InvalidArgumentError("the target is empty");
  // A URI (scheme:...) or a single address: gRPC's resolvers take it as it is.
  if (target.find(',') == absl::string_view::npos || absl::StartsWith(target, "ipv4:") ||
      absl::StartsWith(target, "ipv6:")) {
    return std::string(target);
  }
  std::vector<std::string> addresses =
      absl::StrSplit(target, ',', absl::SkipWhitespace());
  for (std::string& address : addresses) {
    address = std::string(absl::StripAsciiWhitespace(address));
  }
  if (std::all_of(addresses.begin(), addresses.end(), IsIpv4HostPort)) {
    return absl::StrCat("ipv4:", absl::StrJoin(addresses, ","));
  }
  if (std::all_of(addresses.begin(), addresses.end(), IsIpv6HostPort)) {
    return absl::StrCat("ipv6:", absl::StrJoin(addresses, ","));
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "target '", target,
      "': a comma list takes IP literals with ports, all IPv4 (10.0.0.1:50051) or all "
      "IPv6 ([::1]:50051); for a name with several addresses use dns:///NAME:PORT"));
}

absl::Status FromGrpcStatus(const grpc::Status& status) {
  // gRPC and absl share the canonical code numbering.
  absl::Status converted(static_cast<absl::StatusCode>(status.error_code()),
                         status.error_message());
  // Each google.rpc.Status detail as a payload under its type URL, for
  // error_details.h to decode.
  google::rpc::Status details;
  if (!converted.ok() && !status.error_details().empty() &&
      details.ParseFromString(status.error_details())) {
    for (const google::protobuf::Any& detail : details.details()) {
      converted.SetPayload(detail.type_url(), absl::Cord(detail.value()));
    }
  }
  return converted;
}

absl::StatusOr<std::unique_ptr<Client>> Client::Create(ClientOptions options) {
  absl::StatusOr<std::string> target = ChannelTarget(options.target);
  if (!target.ok()) return target.status();
  if (absl::Status s = ValidateRetry(options.retry); !s.ok()) return s;
  if (options.timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError("timeout must be > 0");
  }
  if (options.max_message_bytes <= 0) {
    return absl::InvalidArgumentError("max_message_bytes must be > 0");
  }
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(options.max_message_bytes);
  args.SetMaxSendMessageSize(options.max_message_bytes);
  args.SetLoadBalancingPolicyName("round_robin");
  // gRPC shares connections between channels with equal arguments; a local pool
  // gives each Client its own, which is what a pool of Clients is for.
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  absl::StatusOr<Security> security = ResolveSecurity(options);
  if (!security.ok()) return security.status();
  std::shared_ptr<grpc::Channel> channel =
      grpc::CreateCustomChannel(*target, security->credentials, args);
  return std::unique_ptr<Client>(new Client(std::move(options), std::move(channel),
                                            std::move(security->authorization)));
}

Client::Client(ClientOptions options, std::shared_ptr<grpc::Channel> channel,
               std::string authorization)
    : options_(std::move(options)),
      channel_(std::move(channel)),
      stub_(v1::LayerService::NewStub(channel_)),
      health_stub_(grpc::health::v1::Health::NewStub(channel_)),
      authorization_(std::move(authorization)) {}

absl::Status Client::Call(const char* method, const CallOptions& call,
                          const Attempt& attempt) {
  return Attempts(method, call, authorization_, attempt);
}

absl::Status Client::CallWithoutToken(const char* method, const CallOptions& call,
                                      const Attempt& attempt) {
  return Attempts(method, call, "", attempt);
}

absl::Status Client::Attempts(const char* method, const CallOptions& call,
                              absl::string_view authorization, const Attempt& attempt) {
  const RetryPolicy& policy = call.retry ? *call.retry : options_.retry;
  if (call.retry) {
    if (absl::Status s = ValidateRetry(policy); !s.ok()) return s;
  }
  const absl::Time deadline = absl::Now() + call.timeout.value_or(options_.timeout);
  std::optional<absl::BitGen> random;  // Seeded on the first retry only.
  for (int n = 1;; ++n) {
    grpc::ClientContext context;
    context.set_deadline(absl::ToChronoTime(deadline));
    // Per-call metadata rather than grpc::AccessTokenCredentials: gRPC sends call
    // credentials only over TLS, and the server also takes a token over plaintext.
    if (!authorization.empty()) {
      context.AddMetadata(kAuthorizationHeader, std::string(authorization));
    }
    const grpc::Status status = attempt(&context);
    if (status.ok()) return absl::OkStatus();
    absl::Status error = FromGrpcStatus(status);
    if (status.error_code() != grpc::StatusCode::UNAVAILABLE ||
        n >= policy.max_attempts) {
      return error;
    }
    if (!random) random.emplace();
    const absl::Duration backoff =
        RetryBackoff(policy, n, absl::Uniform(*random, 0.0, 1.0));
    // A retry that could not start before the deadline is not made: the caller
    // gets the real cause (UNAVAILABLE) instead of a DEADLINE_EXCEEDED.
    if (absl::Now() + backoff >= deadline) return error;
    if (options_.on_retry) options_.on_retry({method, n, error, backoff});
    WaitBeforeRetry(backoff);
  }
}

void Client::WaitBeforeRetry(absl::Duration backoff) {
  const absl::Time wake = absl::Now() + backoff;
  grpc_connectivity_state state = channel_->GetState(/*try_to_connect=*/false);
  if (state == GRPC_CHANNEL_READY) {
    // Connected, yet refused (a draining server): just wait.
    absl::SleepFor(backoff);
    return;
  }
  // Not connected. After a failed connect gRPC fails calls at once until its own
  // reconnect backoff has passed (1 s, growing to 120 s), so a retry after our
  // backoff would be refused without trying a server that has come up meanwhile.
  // Reset that backoff, so a connection attempt starts now, and wait for it
  // during our backoff: retry as soon as it succeeds, or when the backoff ends.
  grpc::experimental::ChannelResetConnectionBackoff(channel_.get());
  state = channel_->GetState(/*try_to_connect=*/true);
  while (state != GRPC_CHANNEL_READY && absl::Now() < wake) {
    channel_->WaitForStateChange(state, absl::ToChronoTime(wake));
    state = channel_->GetState(/*try_to_connect=*/true);
  }
}

absl::StatusOr<v1::NormalizeResponse> Client::Normalize(
    const v1::NormalizeRequest& request, const CallOptions& call) {
  v1::NormalizeResponse response;
  absl::Status status = Call("Normalize", call, [&](grpc::ClientContext* context) {
    response.Clear();
    return stub_->Normalize(context, request, &response);
  });
  if (!status.ok()) return status;
  return response;
}

absl::StatusOr<v1::ActivateResponse> Client::Activate(const v1::ActivateRequest& request,
                                                      const CallOptions& call) {
  v1::ActivateResponse response;
  absl::Status status = Call("Activate", call, [&](grpc::ClientContext* context) {
    response.Clear();
    return stub_->Activate(context, request, &response);
  });
  if (!status.ok()) return status;
  return response;
}

absl::StatusOr<v1::PositionalEncodeResponse> Client::PositionalEncode(
    const v1::PositionalEncodeRequest& request, const CallOptions& call) {
  v1::PositionalEncodeResponse response;
  absl::Status status = Call("PositionalEncode", call, [&](grpc::ClientContext* context) {
    response.Clear();
    return stub_->PositionalEncode(context, request, &response);
  });
  if (!status.ok()) return status;
  return response;
}

absl::StatusOr<v1::BlockForwardResponse> Client::BlockForward(
    const v1::BlockForwardRequest& request, const CallOptions& call) {
  if (absl::Status s = CheckSessionId(request.session_id()); !s.ok()) return s;
  for (int b = 0; b < request.session_ids_size(); ++b) {
    if (absl::Status s =
            CheckSessionId(request.session_ids(b), absl::StrCat("session_ids[", b, "]"));
        !s.ok()) {
      return s;
    }
  }
  // One session's id, or the first of many (they live on one replica): the header
  // a load balancer routes on.
  const std::string& session =
      request.session_ids_size() > 0 ? request.session_ids(0) : request.session_id();
  CallOptions once = call;
  if (!request.session_id().empty() || request.session_ids_size() > 0) {
    once.retry = RetryPolicy{/*max_attempts=*/1};
  }
  v1::BlockForwardResponse response;
  absl::Status status = Call("BlockForward", once, [&](grpc::ClientContext* context) {
    if (!session.empty()) context->AddMetadata(kSessionHeader, session);
    response.Clear();
    return stub_->BlockForward(context, request, &response);
  });
  if (!status.ok()) return status;
  return response;
}

absl::StatusOr<SessionsStepResult> Client::StepSessions(
    absl::Span<const std::string> session_ids, const v1::Tensor& hidden_states,
    absl::Span<const int64_t> sequence_lengths, const CallOptions& call) {
  if (session_ids.empty()) {
    return absl::InvalidArgumentError(
        "session_ids: empty; give one session per row of hidden_states");
  }
  v1::BlockForwardRequest request;
  request.mutable_session_ids()->Add(session_ids.begin(), session_ids.end());
  *request.mutable_hidden_states() = hidden_states;
  request.mutable_sequence_lengths()->Add(sequence_lengths.begin(),
                                          sequence_lengths.end());
  absl::StatusOr<v1::BlockForwardResponse> response = BlockForward(request, call);
  if (!response.ok()) return response.status();
  if (response->session_lengths_size() != request.session_ids_size()) {
    return absl::InternalError(
        absl::StrCat("response session_lengths: ", response->session_lengths_size(),
                     " entries for ", request.session_ids_size(), " sessions"));
  }
  SessionsStepResult result;
  result.hidden_states = std::move(*response->mutable_hidden_states());
  result.lengths.assign(response->session_lengths().begin(),
                        response->session_lengths().end());
  return result;
}

absl::StatusOr<v1::OpenSessionResponse> Client::OpenSession(
    const v1::OpenSessionRequest& request, const CallOptions& call) {
  v1::OpenSessionResponse response;
  absl::Status status = Call("OpenSession", call, [&](grpc::ClientContext* context) {
    response.Clear();
    return stub_->OpenSession(context, request, &response);
  });
  if (!status.ok()) return status;
  return response;
}

absl::Status Client::CloseSession(absl::string_view session_id, const CallOptions& call) {
  if (absl::Status s = CheckSessionId(session_id); !s.ok()) return s;
  v1::CloseSessionRequest request;
  request.set_session_id(std::string(session_id));
  v1::CloseSessionResponse response;
  return Call("CloseSession", call, [&](grpc::ClientContext* context) {
    context->AddMetadata(kSessionHeader, request.session_id());
    return stub_->CloseSession(context, request, &response);
  });
}

absl::StatusOr<v1::ListModelsResponse> Client::ListModels(const CallOptions& call) {
  v1::ListModelsResponse response;
  absl::Status status = Call("ListModels", call, [&](grpc::ClientContext* context) {
    response.Clear();
    return stub_->ListModels(context, v1::ListModelsRequest(), &response);
  });
  if (!status.ok()) return status;
  return response;
}

absl::StatusOr<v1::ModelInfo> Client::GetModel(absl::string_view name,
                                               const CallOptions& call) {
  v1::GetModelRequest request;
  request.set_name(std::string(name));
  v1::ModelInfo response;
  absl::Status status = Call("GetModel", call, [&](grpc::ClientContext* context) {
    response.Clear();
    return stub_->GetModel(context, request, &response);
  });
  if (!status.ok()) return status;
  return response;
}

absl::StatusOr<grpc::health::v1::HealthCheckResponse::ServingStatus> Client::Health(
    absl::string_view service, const CallOptions& call) {
  using grpc::health::v1::HealthCheckResponse;
  grpc::health::v1::HealthCheckRequest request;
  request.set_service(std::string(service));
  HealthCheckResponse response;
  absl::Status status =
      CallWithoutToken("Health.Check", call, [&](grpc::ClientContext* context) {
        response.Clear();
        return health_stub_->Check(context, request, &response);
      });
  // Check answers NOT_FOUND for a service the server does not know (health.proto).
  if (status.code() == absl::StatusCode::kNotFound) {
    return HealthCheckResponse::SERVICE_UNKNOWN;
  }
  if (!status.ok()) return status;
  return response.status();
}

}  // namespace layerserve::client
