// layerserve::Client: the C++ client library of a layerserve server. One typed,
// synchronous method per served RPC; each returns absl::StatusOr<response> whose
// error carries the gRPC status code (gRPC and absl share the canonical numbering)
// and the server's message unchanged.
//
// Every call has a deadline (ClientOptions::timeout, or CallOptions::timeout for one
// call) that covers all of its attempts. A call that fails with UNAVAILABLE (server
// draining, nothing listening, connection lost) is retried with exponential backoff
// and jitter, up to RetryPolicy::max_attempts attempts and never past the deadline;
// every other code returns at once, since repeating the same request cannot change
// INVALID_ARGUMENT, NOT_FOUND, OUT_OF_RANGE..., and RESOURCE_EXHAUSTED or
// DEADLINE_EXCEEDED under load would only add load (the retry guide in
// absl/status/status.h).
//
// Thread safety: a Client is safe for concurrent use by any number of threads
// without external synchronization. Each Client owns its own connections (one per
// server address), so large messages from many threads scale better with one Client
// per thread than with one shared Client (one channel carried ~0.5 GB/s of 4 MB
// messages, one per thread ~0.85 GB/s: docs/perf/2026-11-30-grpc-end-to-end.md).
#ifndef LAYERSERVE_CLIENT_CPP_CLIENT_H_
#define LAYERSERVE_CLIENT_CPP_CLIENT_H_

#include <grpcpp/grpcpp.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "layerserve/v1/layerserve.grpc.pb.h"

namespace layerserve::client {

// The metadata header in which session calls carry their session id, so that a
// load balancer can send every call of a session to the replica that opened it
// (deploy/nginx/nginx.conf; docs/operations/sessions.md). This
// Client balances a multi-address target round robin with no affinity: session
// calls need one address (a replica, or a balancer that hashes this header).
inline constexpr char kSessionHeader[] = "x-layerserve-session";

// When and how often a call that failed with UNAVAILABLE is tried again.
struct RetryPolicy {
  // Attempts in total, the first included: 1 disables retries.
  int max_attempts = 4;
  // Wait before retry r (1-based): min(initial_backoff * multiplier^(r-1),
  // max_backoff), then multiplied by a uniform factor in [1 - jitter, 1 + jitter]
  // so that many clients refused at once do not come back at once.
  absl::Duration initial_backoff = absl::Milliseconds(50);
  absl::Duration max_backoff = absl::Seconds(2);
  double multiplier = 2.0;
  double jitter = 0.2;
};

// The wait before retry `retry` (1-based) under `policy`, given `unit` drawn
// uniformly from [0, 1). Pure; the Client draws `unit` from absl::BitGen.
absl::Duration RetryBackoff(const RetryPolicy& policy, int retry, double unit);

// One failed attempt that will be retried, for logging.
struct RetryEvent {
  const char* method;      // RPC name, e.g. "Normalize".
  int attempt;             // The attempt that failed, 1-based.
  absl::Status status;     // Its error (UNAVAILABLE).
  absl::Duration backoff;  // The wait before the next attempt.
};

struct ClientOptions {
  // Where the server is:
  //   "host:port"                    one server (DNS name or IP literal);
  //   "10.0.0.1:50051,10.0.0.2:50051" several IP literals (IPv6 in brackets),
  //                                   balanced round robin;
  //   any gRPC URI ("ipv4:a:p,b:p", "dns:///name:port", "unix:/path") as is.
  // Every target is load balanced round robin over the addresses it resolves to
  // (so "dns:///" of a headless Kubernetes Service spreads over its pods).
  std::string target = "127.0.0.1:50051";
  // Default deadline of each call, all attempts included.
  absl::Duration timeout = absl::Seconds(30);
  RetryPolicy retry;
  // Largest message sent or received. The server's default --max-message-bytes.
  int max_message_bytes = 256 << 20;

  // Security. A server started with --auth-token-file wants a bearer token; one
  // with --tls-cert wants TLS; one with --tls-client-ca also a client certificate.
  //
  // The bearer token: `token`, or the path of a file holding it (`token_file`, read
  // once by Create, surrounding whitespace stripped). At most one of the two. Every
  // LayerService call (session calls included) carries it as "authorization: Bearer
  // <token>" metadata; Health does not (the server's health check needs none, and
  // a secret goes only where it is needed). Over a plaintext channel it travels in
  // clear: use TLS beyond a trusted network. The client never puts it in a
  // message; it is in options() as given. Calls through channel() carry no token.
  std::string token;
  std::string token_file;
  // TLS from PEM files: any of these set means TLS. `tls_ca_file` is the CA to
  // trust (empty: the system's root certificates); `tls_cert_file` and
  // `tls_key_file`, both or neither, the client certificate and its private key
  // for mutual TLS. Read once by Create.
  std::string tls_ca_file;
  std::string tls_cert_file;
  std::string tls_key_file;
  // Or any channel credentials (e.g. grpc::SslCredentials(...)), for what the
  // files cannot say. No precedence between the two ways: setting `credentials`
  // and a tls_*_file is INVALID_ARGUMENT. Neither = plaintext.
  std::shared_ptr<grpc::ChannelCredentials> credentials;
  // Called before each retry's wait, from the calling thread. Optional.
  std::function<void(const RetryEvent&)> on_retry;
};

// Per-call overrides of ClientOptions.
struct CallOptions {
  std::optional<absl::Duration> timeout;
  std::optional<RetryPolicy> retry;
};

// What Client::StepSessions answers: the hidden states of every row (the shape
// sent) and each session's number of tokens after the call, in the order of the
// session ids.
struct SessionsStepResult {
  v1::Tensor hidden_states;
  std::vector<int64_t> lengths;
};

// `target` as a gRPC channel target: a comma list of IP literals becomes an ipv4:
// or ipv6: URI; anything else is returned unchanged. INVALID_ARGUMENT for a comma
// list that is not all IPv4 or all IPv6 literals with ports (a host name resolves
// through DNS instead: "dns:///name:port").
absl::StatusOr<std::string> ChannelTarget(absl::string_view target);

// grpc::Status as absl::Status: same code, same message.
absl::Status FromGrpcStatus(const grpc::Status& status);

class Client {
 public:
  // INVALID_ARGUMENT for a bad target or options, contradictory security options
  // included (naming them); NOT_FOUND or INVALID_ARGUMENT for a token or TLS file
  // that cannot be read or is empty (naming the option and the path). Does not
  // connect: the first call does (and an unreachable server shows up as that
  // call's UNAVAILABLE; a missing or wrong token as UNAUTHENTICATED with the
  // server's message).
  static absl::StatusOr<std::unique_ptr<Client>> Create(ClientOptions options);

  absl::StatusOr<v1::NormalizeResponse> Normalize(const v1::NormalizeRequest& request,
                                                  const CallOptions& call = {});
  absl::StatusOr<v1::ActivateResponse> Activate(const v1::ActivateRequest& request,
                                                const CallOptions& call = {});
  absl::StatusOr<v1::PositionalEncodeResponse> PositionalEncode(
      const v1::PositionalEncodeRequest& request, const CallOptions& call = {});
  // With request.session_id set, the call also carries the session id in the
  // kSessionHeader metadata (for load-balancer affinity) and is made once, never
  // retried: it appends to the session's KV cache, so an attempt whose answer was
  // lost may have appended already, and a retry would append twice. The same with
  // request.session_ids (many sessions, which live on one replica): the header
  // carries the first one's id.
  absl::StatusOr<v1::BlockForwardResponse> BlockForward(
      const v1::BlockForwardRequest& request, const CallOptions& call = {});
  // Many sessions in one BlockForward call (session_ids): row b of hidden_states
  // [B, T, D] ([T, D]: one session) continues session_ids[b] exactly as that
  // session's own call with that row would (bit for bit), its positions continuing
  // from the session's length. sequence_lengths (B entries in [1, T], or empty)
  // makes the rows ragged: row b adds its first sequence_lengths[b] tokens and its
  // padded rows of the output are zeros. The sessions must share model and layers.
  // All or nothing: when one session is unknown, busy, full or mismatched the call
  // fails with the status that session alone would get, its message naming the row
  // ("session_ids[2]: ..."), and no session advances. Sent once, as a session_id
  // call. For output_dtype or want_attention_stats, set session_ids in a request
  // and call BlockForward.
  absl::StatusOr<SessionsStepResult> StepSessions(
      absl::Span<const std::string> session_ids, const v1::Tensor& hidden_states,
      absl::Span<const int64_t> sequence_lengths = {}, const CallOptions& call = {});
  // Opens a KV-cache session on the replica the call reaches. Retried on
  // UNAVAILABLE like the other calls (an attempt whose answer was lost leaves a
  // session nobody uses, which expires after its ttl_ms).
  absl::StatusOr<v1::OpenSessionResponse> OpenSession(
      const v1::OpenSessionRequest& request, const CallOptions& call = {});
  // Closes a session and frees its cache; carries kSessionHeader. NOT_FOUND if the
  // session is unknown, closed, expired or evicted. Retried on UNAVAILABLE (a retry
  // after a lost answer then reports NOT_FOUND).
  absl::Status CloseSession(absl::string_view session_id, const CallOptions& call = {});
  absl::StatusOr<v1::ListModelsResponse> ListModels(const CallOptions& call = {});
  // `name` empty = the server's default model. NOT_FOUND for an unknown model.
  absl::StatusOr<v1::ModelInfo> GetModel(absl::string_view name,
                                         const CallOptions& call = {});
  // grpc.health.v1 Check of `service` ("" = the whole server). An unknown service
  // is SERVICE_UNKNOWN, not an error (the health protocol answers NOT_FOUND).
  absl::StatusOr<grpc::health::v1::HealthCheckResponse::ServingStatus> Health(
      absl::string_view service = "", const CallOptions& call = {});

  const ClientOptions& options() const { return options_; }
  // The underlying channel, for stubs of other services.
  const std::shared_ptr<grpc::Channel>& channel() const { return channel_; }

 private:
  Client(ClientOptions options, std::shared_ptr<grpc::Channel> channel,
         std::string authorization);

  using Attempt = std::function<grpc::Status(grpc::ClientContext*)>;

  // Runs `attempt(context)` under the retry policy and deadline of `call`, each
  // attempt carrying the bearer token, if any.
  absl::Status Call(const char* method, const CallOptions& call, const Attempt& attempt);
  // The same without the token (Health).
  absl::Status CallWithoutToken(const char* method, const CallOptions& call,
                                const Attempt& attempt);
  absl::Status Attempts(const char* method, const CallOptions& call,
                        absl::string_view authorization, const Attempt& attempt);

  // Waits `backoff` before a retry, or less once a connection is made.
  void WaitBeforeRetry(absl::Duration backoff);

  const ClientOptions options_;
  const std::shared_ptr<grpc::Channel> channel_;
  const std::unique_ptr<v1::LayerService::Stub> stub_;
  const std::unique_ptr<grpc::health::v1::Health::Stub> health_stub_;
  // "Bearer <token>", or empty without a token.
  const std::string authorization_;
};

}  // namespace layerserve::client

#endif  // LAYERSERVE_CLIENT_CPP_CLIENT_H_
