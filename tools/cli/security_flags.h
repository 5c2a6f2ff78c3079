// The connection-security flags that layerserve-cli and layerserve-bench share:
//   --tls                 TLS, trusting the system's root certificates
//   --tls-ca FILE         TLS, trusting the PEM certificates in FILE
//   --tls-cert FILE --tls-key FILE
//                         (both or neither) present this client certificate, for
//                         a server with --tls-client-ca; implies TLS
//   --token-file FILE     send the bearer token in FILE on every call but the
//                         health check; without it, the environment variable
//                         LAYERSERVE_TOKEN, when set and not empty
// Errors name the flag (or the variable) and the path, never the token.
#ifndef LAYERSERVE_TOOLS_CLI_SECURITY_FLAGS_H_
#define LAYERSERVE_TOOLS_CLI_SECURITY_FLAGS_H_

#include "absl/status/status.h"
#include "client/cpp/client.h"
#include "tools/cli/flags.h"

namespace layerserve::client {

inline constexpr char kTokenEnvironmentVariable[] = "LAYERSERVE_TOKEN";

// The flags above, to list among a tool's own FlagSpecs.
inline constexpr FlagSpec kSecurityFlags[] = {{"tls", false},
                                              {"tls-ca", true},
                                              {"tls-cert", true},
                                              {"tls-key", true},
                                              {"token-file", true}};

// The security flags among `flags`.
FlagValues SecurityFlagsOf(const FlagValues& flags);

// Checks what can be checked without reading a file: --tls-cert and --tls-key
// together. INVALID_ARGUMENT naming the flag.
absl::Status CheckSecurityFlags(const FlagValues& flags);

// Reads the files the flags name and sets options->credentials (null without a
// TLS flag) and options->token (from --token-file, else from `env_token`, the
// value of LAYERSERVE_TOKEN or null when unset: a parameter, so that tests need
// not change the environment).
absl::Status ApplySecurityFlags(const FlagValues& flags, const char* env_token,
                                ClientOptions* options);

}  // namespace layerserve::client

#endif  // LAYERSERVE_TOOLS_CLI_SECURITY_FLAGS_H_
