#include "client/cpp/credentials.h"

#include <fstream>
#include <sstream>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"

namespace layerserve::client {
namespace {

// The whole file, or NOT_FOUND naming `option` and `path`.
absl::StatusOr<std::string> ReadWholeFile(absl::string_view option,
                                          const std::string& path) {
  std::ifstream file(path, std::ios::binary);
  std::stringstream content;
  content << file.rdbuf();
  if (!file) {
    return absl::NotFoundError(absl::StrCat(option, ": cannot read ", path));
  }
  return content.str();
}

}  // namespace

absl::Status CheckToken(absl::string_view option, absl::string_view token) {
  if (token.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(option, ": the token is empty"));
  }
  for (char c : token) {
    if (c < 0x21 || c > 0x7e) {
      return absl::InvalidArgumentError(
          absl::StrCat(option,
                       ": a bearer token is one word of visible ASCII characters; "
                       "this one has a space, a control or a non-ASCII character"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> ReadTokenFile(absl::string_view option,
                                          const std::string& path) {
  absl::StatusOr<std::string> content = ReadWholeFile(option, path);
  if (!content.ok()) return content.status();
  std::string token(absl::StripAsciiWhitespace(*content));
  if (token.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(option, ": ", path, " holds no token (it is empty)"));
  }
  if (!CheckToken(option, token).ok()) {
    return absl::InvalidArgumentError(absl::StrCat(
        option, ": ", path,
        " must hold one token of visible ASCII characters (one line, no spaces)"));
  }
  return token;
}

absl::Status CheckClientCertificatePair(const PemFile& cert, const PemFile& key) {
  if (cert.path.empty() == key.path.empty()) return absl::OkStatus();
  return absl::InvalidArgumentError(
      key.path.empty()
          ? absl::StrCat(cert.option, " needs ", key.option,
                         ": a client certificate goes with its private key")
          : absl::StrCat(key.option, " needs ", cert.option,
                         ": a private key goes with its client certificate"));
}

absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> TlsCredentialsFromFiles(
    const PemFile& ca, const PemFile& cert, const PemFile& key) {
  if (absl::Status s = CheckClientCertificatePair(cert, key); !s.ok()) return s;
  grpc::SslCredentialsOptions ssl;
  // Each given file into its field of `ssl`; an empty field keeps gRPC's default.
  for (auto [file, pem] :
       {std::pair{&ca, &ssl.pem_root_certs}, std::pair{&cert, &ssl.pem_cert_chain},
        std::pair{&key, &ssl.pem_private_key}}) {
    if (file->path.empty()) continue;
    absl::StatusOr<std::string> content = ReadWholeFile(file->option, file->path);
    if (!content.ok()) return content.status();
    if (content->empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat(file->option, ": ", file->path, " is empty"));
    }
    *pem = *std::move(content);
  }
  return grpc::SslCredentials(ssl);
}

}  // namespace layerserve::client
