// A minimal HTTP/1.0 GET, enough to scrape a Prometheus /metrics page
// (plain http://HOST:PORT/PATH; no TLS, no redirects). Blocking; safe to call from
// any thread.
#ifndef LAYERSERVE_TOOLS_LOADGEN_HTTP_GET_H_
#define LAYERSERVE_TOOLS_LOADGEN_HTTP_GET_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace layerserve::client {

struct HttpUrl {
  std::string host;  // IPv6 literals without brackets.
  std::string port;  // "80" when the URL has none.
  std::string path;  // "/" when the URL has none.
};

// INVALID_ARGUMENT for anything but http://HOST[:PORT][/PATH].
absl::StatusOr<HttpUrl> ParseHttpUrl(absl::string_view url);

// The body of a 200 response to GET `url`. UNAVAILABLE if the server cannot be
// reached or answers another status; DEADLINE_EXCEEDED after `timeout` of silence.
absl::StatusOr<std::string> HttpGet(absl::string_view url,
                                    absl::Duration timeout = absl::Seconds(10));

}  // namespace layerserve::client

#endif  // LAYERSERVE_TOOLS_LOADGEN_HTTP_GET_H_
