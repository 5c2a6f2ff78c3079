#include "server/security/auth.h"

#include <openssl/crypto.h>
#include <openssl/sha.h>

#include <cstdio>
#include <fstream>
#include <sstream>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace layerserve {
namespace {

constexpr absl::string_view kScheme = "Bearer ";

// A token travels as an HTTP/2 header value: visible ASCII, and no spaces (a space
// in a token file line is more likely two tokens run together than one token).
bool IsTokenText(absl::string_view token) {
  for (const char c : token) {
    if (c <= ' ' || c > '~') return false;
  }
  return true;
}

absl::string_view SliceView(const grpc_slice& slice) {
  return absl::string_view(reinterpret_cast<const char*>(GRPC_SLICE_START_PTR(slice)),
                           GRPC_SLICE_LENGTH(slice));
}

}  // namespace

absl::StatusOr<TokenAuthenticator::Digests> TokenAuthenticator::ReadFile(
    const std::string& path) {
  std::ifstream file(path, std::ios::binary);
  std::stringstream text;
  if (!file || !(text << file.rdbuf())) {
    return absl::InvalidArgumentError(
        absl::StrCat("--auth-token-file: cannot read ", path));
  }
  return Parse(text.str(), path);
}

absl::StatusOr<std::unique_ptr<TokenAuthenticator>> TokenAuthenticator::FromFile(
    const std::string& path, absl::Duration recheck) {
  // Stamped before reading: a change made while it is read is seen at the next look.
  const FileStamp stamp = StampOf(path);
  absl::StatusOr<Digests> digests = ReadFile(path);
  if (!digests.ok()) return digests.status();
  return std::unique_ptr<TokenAuthenticator>(
      new TokenAuthenticator(*std::move(digests), path, stamp, recheck));
}

absl::StatusOr<std::unique_ptr<TokenAuthenticator>> TokenAuthenticator::FromText(
    absl::string_view text, absl::string_view source) {
  absl::StatusOr<Digests> digests = Parse(text, source);
  if (!digests.ok()) return digests.status();
  return std::unique_ptr<TokenAuthenticator>(
      new TokenAuthenticator(*std::move(digests), "", FileStamp(), absl::ZeroDuration()));
}

std::shared_ptr<const TokenAuthenticator::Digests> TokenAuthenticator::Current() const {
  absl::MutexLock lock(&mu_);
  if (path_.empty()) return digests_;
  const absl::Time now = absl::Now();
  if (now < next_check_) return digests_;
  next_check_ = now + recheck_;
  const FileStamp stamp = StampOf(path_);
  if (stamp == stamp_) return digests_;
  // Noted before reading, so a file that cannot be used is reported once per change,
  // not at every look.
  stamp_ = stamp;
  absl::StatusOr<Digests> digests = ReadFile(path_);
  if (!digests.ok()) {
    std::fprintf(stderr,
                 "layerserve: %s; the %zu token(s) read before are still accepted\n",
                 std::string(digests.status().message()).c_str(), digests_->size());
    return digests_;
  }
  std::fprintf(stderr, "layerserve: --auth-token-file: read %zu token(s) again from %s\n",
               digests->size(), path_.c_str());
  digests_ = std::make_shared<const Digests>(*std::move(digests));
  return digests_;
}

absl::StatusOr<TokenAuthenticator::Digests> TokenAuthenticator::Parse(
    absl::string_view text, absl::string_view source) {
  Digests digests;
  int line_number = 0;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    ++line_number;
    line = absl::StripAsciiWhitespace(line);  // Also the '\r' of CRLF files.
    if (line.empty() || line[0] == '#') continue;
    if (!IsTokenText(line)) {
      return absl::InvalidArgumentError(
          absl::StrCat("--auth-token-file: ", source, ":", line_number,
                       ": a token must be printable ASCII without spaces"));
    }
    Digest digest;
    SHA256(reinterpret_cast<const unsigned char*>(line.data()), line.size(),
           digest.data());
    digests.push_back(digest);
  }
  if (digests.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--auth-token-file: ", source, " holds no token"));
  }
  return digests;
}

bool TokenAuthenticator::Accepts(absl::string_view token) const {
  Digest digest;
  SHA256(reinterpret_cast<const unsigned char*>(token.data()), token.size(),
         digest.data());
  // Digests have one length whatever the token's, CRYPTO_memcmp's time does not
  // depend on where they differ, and every accepted token is compared: the time
  // says nothing about a guess.
  const std::shared_ptr<const Digests> accepted_digests = Current();
  int matches = 0;
  for (const Digest& accepted : *accepted_digests) {
    matches |= CRYPTO_memcmp(digest.data(), accepted.data(), digest.size()) == 0;
  }
  return matches != 0;
}

absl::Status TokenAuthenticator::Check(
    absl::string_view path, const std::vector<absl::string_view>& authorization) const {
  if (absl::StartsWith(path, kExemptPrefix)) return absl::OkStatus();
  for (absl::string_view exempt : kExemptPaths) {
    if (path == exempt) return absl::OkStatus();
  }
  if (authorization.empty()) {
    return absl::UnauthenticatedError(
        "missing credentials: this server requires \"authorization: Bearer <token>\" "
        "metadata");
  }
  if (authorization.size() > 1) {
    return absl::UnauthenticatedError(
        absl::StrCat("more than one authorization metadata entry (", authorization.size(),
                     "); send exactly one"));
  }
  const absl::string_view value = authorization[0];
  // The scheme name is case-insensitive (RFC 7235).
  if (value.size() <= kScheme.size() ||
      !absl::EqualsIgnoreCase(value.substr(0, kScheme.size()), kScheme)) {
    return absl::UnauthenticatedError(
        "authorization metadata must be \"Bearer <token>\"");
  }
  if (!Accepts(value.substr(kScheme.size()))) {
    return absl::UnauthenticatedError("invalid bearer token");
  }
  return absl::OkStatus();
}

grpc_auth_metadata_processor TokenAuthenticator::AuthProcessor() const {
  grpc_auth_metadata_processor processor;
  processor.state = const_cast<TokenAuthenticator*>(this);
  processor.destroy = [](void*) {};  // The server does not own the authenticator.
  // Runs inline in gRPC's auth filter: Check() blocks only to read the token file
  // again once it changed (a small local file, looked at once per recheck at most).
  processor.process = [](void* state, grpc_auth_context*, const grpc_metadata* md,
                         size_t num_md, grpc_process_auth_metadata_done_cb done,
                         void* user_data) {
    absl::string_view path;
    std::vector<absl::string_view> authorization;
    const grpc_metadata* consumed = nullptr;
    for (size_t i = 0; i < num_md; ++i) {
      const absl::string_view key = SliceView(md[i].key);
      if (key == ":path") path = SliceView(md[i].value);
      if (key == "authorization") {
        authorization.push_back(SliceView(md[i].value));
        consumed = &md[i];
      }
    }
    const absl::Status status =
        static_cast<const TokenAuthenticator*>(state)->Check(path, authorization);
    if (status.ok()) {
      done(user_data, consumed, consumed == nullptr ? 0 : 1, nullptr, 0, GRPC_STATUS_OK,
           nullptr);
    } else {
      const std::string message(status.message());
      done(user_data, nullptr, 0, nullptr, 0,
           static_cast<grpc_status_code>(status.code()), message.c_str());
    }
  };
  return processor;
}

}  // namespace layerserve
