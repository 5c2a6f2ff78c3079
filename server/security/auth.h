// Bearer-token authentication of gRPC calls (--auth-token-file).
//
// A call must carry `authorization: Bearer <token>` metadata naming one of the
// accepted tokens, or it is answered UNAUTHENTICATED before any handler runs (its
// message is never parsed, nothing is queued or counted by the service). Only the
// standard health service (grpc.health.v1.Health) is exempt, so load balancers and
// Kubernetes probes need no secret; everything else, server reflection included,
// needs the token. The check runs in gRPC's auth filter (see AuthProcessor()), on
// plaintext and TLS listeners alike; tls.h attaches it.
//
// Tokens are kept only as SHA-256 digests and compared in constant time, so neither
// the time a check takes nor a memory dump tells a caller how close a guess was.
// Immutable after construction: safe to call from any number of threads.
#ifndef LAYERSERVE_SERVER_SECURITY_AUTH_H_
#define LAYERSERVE_SERVER_SECURITY_AUTH_H_

#include <grpc/grpc_security.h>

#include <array>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace layerserve {

class TokenAuthenticator {
 public:
  // The `:path` prefix of calls that need no token.
  static constexpr absl::string_view kExemptPrefix = "/grpc.health.v1.Health/";

  // Reads the accepted tokens from `path`: one per line, surrounding whitespace
  // ignored, blank lines and lines starting with '#' skipped (several tokens let
  // clients move to a new one before the old one is removed). Fails naming the file
  // if it cannot be read or holds no token.
  static absl::StatusOr<std::unique_ptr<TokenAuthenticator>> FromFile(
      const std::string& path);
  // The contents of a token file, as FromFile reads it.
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
  explicit TokenAuthenticator(std::vector<Digest> digests)
      : digests_(std::move(digests)) {}

  bool Accepts(absl::string_view token) const;

  const std::vector<Digest> digests_;
};

}  // namespace layerserve

#endif  // LAYERSERVE_SERVER_SECURITY_AUTH_H_
