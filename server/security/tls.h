// Credentials of the gRPC listener: plaintext, TLS, or mutual TLS from PEM files
// (--tls-cert, --tls-key, --tls-client-ca), each optionally with the bearer-token
// check of auth.h.
//
// The files are checked at start-up (a bad one stops the server with a message
// naming the flag and file) and read again when they change: gRPC asks for the
// certificates at each new connection's handshake, and CertificateFiles answers
// with new ones once the files' stamps moved and they pass the same checks. So a
// renewed certificate (cert-manager, a Kubernetes Secret update) takes effect for
// new connections without a restart; open connections keep the one they shook hands
// with. A change that fails the checks (a half-written pair, a key that is not the
// certificate's) is reported on stderr and the certificates read before stay in use.
// With --tls-client-ca the handshake itself refuses a client without a certificate
// signed by that CA, before any call is read.
//
// Why not gRPC's FileWatcherCertificateProvider: it polls on a timer of its own
// and takes whatever the files hold, while this checks a changed pair the way
// start-up does before using it; and it serves the core credentials that carry the
// token check (tls.cc), through gRPC's own reloading interface for SSL servers.
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

class CertificateFiles;

struct ListenerSecurity {
  // For ServerBuilder::AddListeningPort.
  std::shared_ptr<grpc::ServerCredentials> credentials;
  // With TLS: the files gRPC asks for certificates at each handshake. Must outlive
  // the server.
  std::unique_ptr<CertificateFiles> certificates;
  ListenerSecurity();
  ListenerSecurity(ListenerSecurity&&);
  ListenerSecurity& operator=(ListenerSecurity&&);
  ~ListenerSecurity();
};

// The listener's credentials. `authenticator` may be null (no token check);
// otherwise it must outlive the server. Fails with a message naming the flag and
// file when a file is missing, unreadable, not PEM, or the key does not belong to
// the certificate.
absl::StatusOr<ListenerSecurity> ListenerCredentials(
    const TlsFiles& files, const TokenAuthenticator* authenticator);

}  // namespace layerserve

#endif  // LAYERSERVE_SERVER_SECURITY_TLS_H_
