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

// The contents of the PEM file at `path`. NOT_FOUND if it cannot be read,
// INVALID_ARGUMENT if it is empty, naming `option` and `path`.
absl::StatusOr<std::string> ReadPemFile(absl::string_view option,
                                        const std::string& path);

// TLS channel credentials trusting `ca_pem` (empty: the system's root
// certificates) and, when `cert_pem` and `key_pem` are given, presenting that
// client certificate (for a server with --tls-client-ca).
std::shared_ptr<grpc::ChannelCredentials> TlsChannelCredentials(std::string ca_pem,
                                                                std::string cert_pem,
                                                                std::string key_pem);

}  // namespace layerserve::client

#endif  // LAYERSERVE_CLIENT_CPP_CREDENTIALS_H_
