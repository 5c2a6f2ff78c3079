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

absl::Status CheckSecurityFlags(const FlagValues& flags) {
  const bool cert = flags.count("tls-cert") != 0;
  const bool key = flags.count("tls-key") != 0;
  if (cert && !key) {
    return absl::InvalidArgumentError(
        "--tls-cert needs --tls-key: a client certificate goes with its private key");
  }
  if (key && !cert) {
    return absl::InvalidArgumentError(
        "--tls-key needs --tls-cert: a private key goes with its client certificate");
  }
  return absl::OkStatus();
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

  const bool client_cert = flags.count("tls-cert") != 0;
  if (flags.count("tls-ca") == 0 && !client_cert) {
    if (flags.count("tls") != 0) options->credentials = TlsChannelCredentials("", "", "");
    return absl::OkStatus();
  }
  std::string ca, cert, key;
  if (flags.count("tls-ca") != 0) {
    absl::StatusOr<std::string> pem = ReadPemFile("--tls-ca", flags.at("tls-ca"));
    if (!pem.ok()) return pem.status();
    ca = *std::move(pem);
  }
  if (client_cert) {
    absl::StatusOr<std::string> pem = ReadPemFile("--tls-cert", flags.at("tls-cert"));
    if (!pem.ok()) return pem.status();
    cert = *std::move(pem);
    pem = ReadPemFile("--tls-key", flags.at("tls-key"));
    if (!pem.ok()) return pem.status();
    key = *std::move(pem);
  }
  options->credentials =
      TlsChannelCredentials(std::move(ca), std::move(cert), std::move(key));
  return absl::OkStatus();
}

}  // namespace layerserve::client
