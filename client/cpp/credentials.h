// The secrets a client of a secured server reads: a bearer token (or a file holding
// one) and the PEM files of TLS (the CA to trust, a client certificate and its key),
// and the TLS channel credentials made from them. layerserve::Client reads them for
// ClientOptions::token_file and tls_*_file; layerserve-cli and layerserve-bench for
// --token-file and --tls-*; each passes the name of its own option, which the
// errors name (with the path), so a user sees what to fix.
//
// A token is never put in an error message: the errors say what is wrong with it,
// not what it is. Pure functions apart from reading files; safe from any thread.
#ifndef LAYERSERVE_CLIENT_CPP_CREDENTIALS_H_
#define LAYERSERVE_CLIENT_CPP_CREDENTIALS_H_

#include <grpcpp/grpcpp.h>

#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace layerserve::client {

// The metadata key and value prefix in which a call carries its token, as the
// server's --auth-token-file expects (server/security/auth.h).
inline constexpr char kAuthorizationHeader[] = "authorization";
inline constexpr char kBearerPrefix[] = "Bearer ";

// OK if `token` can travel as a bearer token: non-empty, visible ASCII (gRPC sends
// nothing else in a text header, and no server token has spaces). INVALID_ARGUMENT
// naming `option` otherwise, without the token.
absl::Status CheckToken(absl::string_view option, absl::string_view token);

// The token in the file at `path`, surrounding whitespace (the trailing newline
// an editor adds) stripped. NOT_FOUND if the file cannot be read, INVALID_ARGUMENT
// if it holds no token or a malformed one (CheckToken); both name `option` and
// `path`, never the content.
absl::StatusOr<std::string> ReadTokenFile(absl::string_view option,
                                          const std::string& path);

// A PEM file to read, and the option that named it (ClientOptions' tls_ca_file,
// the CLI's --tls-ca...), which its errors name with the path.
struct PemFile {
  absl::string_view option;
  std::string path;  // Empty: not given.
};

// OK unless exactly one of a client certificate and its key is given:
// INVALID_ARGUMENT "<cert option> needs <key option>: ..." (or the other way).
absl::Status CheckClientCertificatePair(const PemFile& cert, const PemFile& key);

// TLS channel credentials trusting the certificates in `ca` (not given: the
// system's root certificates) and, when `cert` and `key` are given, presenting that
// client certificate (for a server with --tls-client-ca). NOT_FOUND for a file that
// cannot be read, INVALID_ARGUMENT for an empty one or an unpaired certificate or
// key; each names the option and the path.
absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> TlsCredentialsFromFiles(
    const PemFile& ca, const PemFile& cert, const PemFile& key);

}  // namespace layerserve::client

#endif  // LAYERSERVE_CLIENT_CPP_CREDENTIALS_H_
