#include "tools/loadgen/http_get.h"

#include <netdb.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <vector>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace layerserve::client {
namespace {

// The body of a chunked transfer encoding, decoded.
absl::StatusOr<std::string> Dechunk(absl::string_view body) {
  std::string out;
  while (true) {
    const size_t eol = body.find("\r\n");
    if (eol == absl::string_view::npos) break;
    absl::string_view size_text = body.substr(0, eol);
    size_text = size_text.substr(0, size_text.find(';'));
    uint64_t size;
    if (!absl::SimpleHexAtoi(absl::StripAsciiWhitespace(size_text), &size) ||
        size > body.size() - eol - 2) {
      return absl::UnavailableError("malformed chunked HTTP body");
    }
    if (size == 0) return out;
    absl::StrAppend(&out, body.substr(eol + 2, size));
    body.remove_prefix(std::min(body.size(), eol + 2 + size + 2));
  }
  return absl::UnavailableError("truncated chunked HTTP body");
}

}  // namespace

absl::StatusOr<HttpUrl> ParseHttpUrl(absl::string_view url) {
  constexpr absl::string_view kScheme = "http://";
  if (!absl::StartsWith(url, kScheme)) {
    return absl::InvalidArgumentError(
        absl::StrCat("'", url, "' is not an http://HOST:PORT/PATH URL"));
  }
  absl::string_view rest = url.substr(kScheme.size());
  HttpUrl parsed;
  const size_t slash = rest.find('/');
  parsed.path = slash == absl::string_view::npos ? "/" : std::string(rest.substr(slash));
  absl::string_view authority = rest.substr(0, slash);
  absl::string_view port;
  if (absl::StartsWith(authority, "[")) {  // [IPv6]:port
    const size_t close = authority.find(']');
    if (close == absl::string_view::npos) {
      return absl::InvalidArgumentError(absl::StrCat("'", url, "': unclosed '['"));
    }
    parsed.host = std::string(authority.substr(1, close - 1));
    absl::string_view after = authority.substr(close + 1);
    if (absl::StartsWith(after, ":")) port = after.substr(1);
  } else {
    const size_t colon = authority.rfind(':');
    parsed.host = std::string(authority.substr(0, colon));
    if (colon != absl::string_view::npos) port = authority.substr(colon + 1);
  }
  int port_number = 80;
  if (!port.empty() &&
      (!absl::SimpleAtoi(port, &port_number) || port_number < 1 || port_number > 65535)) {
    return absl::InvalidArgumentError(absl::StrCat("'", url, "': bad port '", port, "'"));
  }
  if (parsed.host.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("'", url, "' has no host"));
  }
  parsed.port = absl::StrCat(port_number);
  return parsed;
}

absl::StatusOr<std::string> HttpGet(absl::string_view url, absl::Duration timeout) {
  absl::StatusOr<HttpUrl> parsed = ParseHttpUrl(url);
  if (!parsed.ok()) return parsed.status();
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* addresses = nullptr;
  if (int rc =
          getaddrinfo(parsed->host.c_str(), parsed->port.c_str(), &hints, &addresses);
      rc != 0) {
    return absl::UnavailableError(
        absl::StrCat(url, ": cannot resolve ", parsed->host, ": ", gai_strerror(rc)));
  }
  absl::Cleanup free_addresses = [addresses] { freeaddrinfo(addresses); };
  int fd = -1;
  std::string connect_error = "no address";
  // On Linux SO_SNDTIMEO also bounds connect(), SO_RCVTIMEO each recv().
  const timeval tv = absl::ToTimeval(timeout);
  for (addrinfo* a = addresses; a != nullptr && fd < 0; a = a->ai_next) {
    fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) continue;
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    if (connect(fd, a->ai_addr, a->ai_addrlen) != 0) {
      connect_error = std::strerror(errno);
      close(fd);
      fd = -1;
    }
  }
  if (fd < 0) {
    return absl::UnavailableError(absl::StrCat(url, ": cannot connect: ", connect_error));
  }
  absl::Cleanup close_fd = [fd] { close(fd); };

  const std::string host_header = absl::StrContains(parsed->host, ':')
                                      ? absl::StrCat("[", parsed->host, "]")
                                      : parsed->host;
  const std::string request = absl::StrCat(
      "GET ", parsed->path, " HTTP/1.0\r\nHost: ", host_header, ":", parsed->port,
      "\r\nAccept: text/plain\r\n"
      "Connection: close\r\n\r\n");
  for (size_t sent = 0; sent < request.size();) {
    const ssize_t n =
        send(fd, request.data() + sent, request.size() - sent, MSG_NOSIGNAL);
    if (n < 0) {
      return absl::UnavailableError(absl::StrCat(url, ": send: ", std::strerror(errno)));
    }
    sent += n;
  }
  std::string response;
  char buffer[16384];
  while (true) {
    const ssize_t n = recv(fd, buffer, sizeof buffer, 0);
    if (n == 0) break;
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) {
        return absl::DeadlineExceededError(
            absl::StrCat(url, ": no answer within ", absl::FormatDuration(timeout)));
      }
      return absl::UnavailableError(absl::StrCat(url, ": recv: ", std::strerror(errno)));
    }
    response.append(buffer, n);
  }

  const size_t header_end = response.find("\r\n\r\n");
  if (header_end == std::string::npos) {
    return absl::UnavailableError(absl::StrCat(url, ": truncated HTTP response"));
  }
  absl::string_view head = absl::string_view(response).substr(0, header_end);
  std::vector<absl::string_view> lines = absl::StrSplit(head, "\r\n");
  std::vector<absl::string_view> status =
      absl::StrSplit(lines[0], absl::MaxSplits(' ', 2));
  if (status.size() < 2 || !absl::StartsWith(status[0], "HTTP/")) {
    return absl::UnavailableError(absl::StrCat(url, ": not an HTTP response"));
  }
  if (status[1] != "200") {
    return absl::UnavailableError(absl::StrCat(url, ": answered '", lines[0], "'"));
  }
  std::string body = response.substr(header_end + 4);
  for (size_t i = 1; i < lines.size(); ++i) {
    if (absl::StartsWithIgnoreCase(lines[i], "transfer-encoding:") &&
        absl::StrContains(absl::AsciiStrToLower(lines[i]), "chunked")) {
      return Dechunk(body);
    }
  }
  return body;
}

}  // namespace layerserve::client
