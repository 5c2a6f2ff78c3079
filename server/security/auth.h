// Bearer-token authentication of gRPC calls (--auth-token-file).
//
// A call must carry `authorization: Bearer <token>` metadata naming one of the
// accepted tokens, or it is answered UNAUTHENTICATED before any handler runs (its
// message is never parsed, nothing is queued or counted by the service). Only the
// health checks are exempt, so load balancers and Kubernetes probes need no secret:
// the standard health service (grpc.health.v1.Health) and the Open Inference
// Protocol's liveness and readiness RPCs (ServerLive, ServerReady, ModelReady,
// which KServe's probes call). Everything else, server reflection and the other
// inference RPCs included, needs the token. The check runs in gRPC's auth filter (see
// AuthProcessor()), on plaintext and TLS listeners alike; tls.h attaches it.
//
// Tokens are kept only as SHA-256 digests and compared in constant time, so neither
// the time a check takes nor a memory dump tells a caller how close a guess was.
//
// The token file is read again when it changes (FileStamp; looked at, at most, once
// per `recheck` on the calls' path, so rotation needs no restart and no thread): add
// the new token, move the clients to it, remove the old one, and no call fails. A
// changed file that cannot be used (unreadable, no token, a bad line) is reported
// on stderr and the tokens read before stay accepted, so a half-written file never
// locks every client out. Safe to call from any number of threads.
#ifndef LAYERSERVE_SERVER_SECURITY_AUTH_H_
#define LAYERSERVE_SERVER_SECURITY_AUTH_H_

#include <grpc/grpc_security.h>

#include <array>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/file_stamp.h"

namespace layerserve {

class TokenAuthenticator {
 public:
  // The `:path` prefix of calls that need no token, and the paths of the others.
  static constexpr absl::string_view kExemptPrefix = "/grpc.health.v1.Health/";
  static constexpr absl::string_view kExemptPaths[] = {
      "/inference.GRPCInferenceService/ServerLive",
      "/inference.GRPCInferenceService/ServerReady",
      "/inference.GRPCInferenceService/ModelReady"};

  // How often, at most, a call looks whether the token file changed.
  static constexpr absl::Duration kRecheck = absl::Seconds(1);

  // Reads the accepted tokens from `path`: one per line, surrounding whitespace
  // ignored, blank lines and lines starting with '#' skipped (several tokens let
  // clients move to a new one before the old one is removed). Fails naming the file
  // if it cannot be read or holds no token. Read again when it changes (above).
  static absl::StatusOr<std::unique_ptr<TokenAuthenticator>> FromFile(
      const std::string& path, absl::Duration recheck = kRecheck);
  // The contents of a token file, as FromFile reads it; never read again.
  static absl::StatusOr<std::unique_ptr<TokenAuthenticator>> FromText(
      absl::string_view text, absl::string_view source);

  // OK if the call to `path` may go on: it is exempt, or exactly one of its
  // `authorization` values is "Bearer <an accepted token>". Otherwise
  // UNAUTHENTICATED with a message saying what was wrong (never which token).
  absl::Status Check(absl::string_view path,
                     const std::vector<absl::string_view>& authorization) const;

  // A gRPC core processor that runs Check() on each call's initial metadata and
  // strips the `authorization` entry, so handlers and logs never see the token.
  // REQUIRES: `this` outlives every server that uses the processor.
  grpc_auth_metadata_processor AuthProcessor() const;

 private:
  using Digest = std::array<unsigned char, 32>;
  using Digests = std::vector<Digest>;
  TokenAuthenticator(Digests digests, std::string path, FileStamp stamp,
                     absl::Duration recheck)
      : path_(std::move(path)),
        recheck_(recheck),
        digests_(std::make_shared<const Digests>(std::move(digests))),
        stamp_(stamp),
        next_check_(absl::Now() + recheck) {}

  static absl::StatusOr<Digests> Parse(absl::string_view text, absl::string_view source);
  static absl::StatusOr<Digests> ReadFile(const std::string& path);
  // The accepted digests, after reading the file again if it is time to look and it
  // changed.
  std::shared_ptr<const Digests> Current() const;
  bool Accepts(absl::string_view token) const;

  const std::string path_;  // Empty: FromText, never read again.
  const absl::Duration recheck_;
  // What the file gave last (a cache of the file, hence mutable under const calls).
  mutable absl::Mutex mu_;
  mutable std::shared_ptr<const Digests> digests_ ABSL_GUARDED_BY(mu_);
  mutable FileStamp stamp_ ABSL_GUARDED_BY(mu_);
  mutable absl::Time next_check_ ABSL_GUARDED_BY(mu_);
};

}  // namespace layerserve

#endif  // LAYERSERVE_SERVER_SECURITY_AUTH_H_
