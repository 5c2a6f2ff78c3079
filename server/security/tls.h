// Credentials of the gRPC listener: plaintext, TLS, or mutual TLS from PEM files
// (--tls-cert, --tls-key, --tls-client-ca), each optionally with the bearer-token
// check of auth.h.
//
// The files are read once, at start-up: a renewed certificate takes effect at the
// next (rolling) restart. With --tls-client-ca the handshake itself refuses a client
// without a certificate signed by that CA, before any call is read.
#ifndef LAYERSERVE_SERVER_SECURITY_TLS_H_
#define LAYERSERVE_SERVER_SECURITY_TLS_H_

#include <grpcpp/security/server_credentials.h>

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "server/security/auth.h"

namespace layerserve {

struct TlsFiles {
  std::string cert;       // PEM certificate chain the server presents; empty: plaintext.
  std::string key;        // PEM private key of `cert`.
  std::string client_ca;  // PEM CA certificates; set: clients must present a
                          // certificate one of them signed (mutual TLS).
};

// Credentials for ServerBuilder::AddListeningPort. `authenticator` may be null (no
// token check); otherwise it must outlive the server. Fails with a message naming
// the flag and file when a file is missing, unreadable, not PEM, or the key does not
// belong to the certificate.
absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> ListenerCredentials(
    const TlsFiles& files, const TokenAuthenticator* authenticator);

}  // namespace layerserve

#endif  // LAYERSERVE_SERVER_SECURITY_TLS_H_
