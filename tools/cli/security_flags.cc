#include "tools/cli/security_flags.h"

#include <string>
#include <utility>

#include "absl/strings/ascii.h"
#include "client/cpp/credentials.h"

namespace layerserve::client {

FlagValues SecurityFlagsOf(const FlagValues& flags) {
  FlagValues security;
  for (const FlagSpec& spec : kSecurityFlags) {
    auto it = flags.find(spec.name);
    if (it != flags.end()) security.insert(*it);
  }
  return security;
}

namespace {

// The file flag `name` as a PemFile (path empty when the flag is absent).
PemFile PemFlag(const FlagValues& flags, const char* name, const char* option) {
  auto it = flags.find(name);
  return PemFile{option, it == flags.end() ? std::string() : it->second};
}

}  // namespace

absl::Status CheckSecurityFlags(const FlagValues& flags) {
  return CheckClientCertificatePair(PemFlag(flags, "tls-cert", "--tls-cert"),
                                    PemFlag(flags, "tls-key", "--tls-key"));
}

absl::Status ApplySecurityFlags(const FlagValues& flags, const char* env_token,
                                ClientOptions* options) {
  if (absl::Status s = CheckSecurityFlags(flags); !s.ok()) return s;
  if (flags.count("token-file") != 0) {
    absl::StatusOr<std::string> token =
        ReadTokenFile("--token-file", flags.at("token-file"));
    if (!token.ok()) return token.status();
    options->token = *std::move(token);
  } else if (env_token != nullptr) {
    // Set but empty (LAYERSERVE_TOKEN= layerserve-cli ...) means no token.
    const std::string token(absl::StripAsciiWhitespace(env_token));
    if (!token.empty()) {
      if (absl::Status s = CheckToken(kTokenEnvironmentVariable, token); !s.ok()) {
        return s;
      }
      options->token = token;
    }
  }

  // Any TLS flag means TLS (--tls alone: trusting the system's roots).
  if (flags.count("tls") == 0 && flags.count("tls-ca") == 0 &&
      flags.count("tls-cert") == 0) {
    return absl::OkStatus();
  }
  absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> tls = TlsCredentialsFromFiles(
      PemFlag(flags, "tls-ca", "--tls-ca"), PemFlag(flags, "tls-cert", "--tls-cert"),
      PemFlag(flags, "tls-key", "--tls-key"));
  if (!tls.ok()) return tls.status();
  options->credentials = *std::move(tls);
  return absl::OkStatus();
}

}  // namespace layerserve::client
