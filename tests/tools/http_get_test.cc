// HttpGet against a real prometheus-cpp exposer (the server's /metrics stack) on a
// loopback port the OS picks, and URL parsing.
#include "tools/loadgen/http_get.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <prometheus/counter.h>
#include <prometheus/exposer.h>
#include <prometheus/registry.h>
#include <sys/socket.h>
#include <unistd.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/status_matchers.h"
#include "tools/loadgen/prometheus_text.h"

namespace layerserve::client {
namespace {

using ::layerserve::testing::StatusIs;
using ::testing::HasSubstr;

TEST(ParseHttpUrlTest, HostPortPath) {
  absl::StatusOr<HttpUrl> u = ParseHttpUrl("http://127.0.0.1:9464/metrics");
  ASSERT_TRUE(u.ok()) << u.status();
  EXPECT_EQ(u->host, "127.0.0.1");
  EXPECT_EQ(u->port, "9464");
  EXPECT_EQ(u->path, "/metrics");
  u = ParseHttpUrl("http://[::1]:80");
  ASSERT_TRUE(u.ok()) << u.status();
  EXPECT_EQ(u->host, "::1");
  EXPECT_EQ(u->path, "/");
  u = ParseHttpUrl("http://layerserve/metrics");
  ASSERT_TRUE(u.ok());
  EXPECT_EQ(u->port, "80");
  EXPECT_THAT(ParseHttpUrl("https://x/metrics"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("http://")));
  EXPECT_THAT(ParseHttpUrl("http://x:99999/"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("bad port")));
  EXPECT_THAT(ParseHttpUrl("http://:80/"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("no host")));
}

TEST(HttpGetTest, ScrapesAPrometheusCppExposer) {
  auto registry = std::make_shared<prometheus::Registry>();
  auto& family = prometheus::BuildCounter()
                     .Name("layerserve_requests_total")
                     .Help("test")
                     .Register(*registry);
  family.Add({{"method", "Normalize"}, {"code", "OK"}}).Increment(41);
  family.Add({{"method", "Normalize"}, {"code", "UNAVAILABLE"}}).Increment(2);
  prometheus::Exposer exposer("127.0.0.1:0", 1);
  exposer.RegisterCollectable(registry);
  const std::string url =
      absl::StrCat("http://127.0.0.1:", exposer.GetListeningPorts().at(0), "/metrics");

  absl::StatusOr<std::string> body = HttpGet(url);
  ASSERT_TRUE(body.ok()) << body.status();
  absl::StatusOr<std::vector<MetricSample>> samples = ParsePrometheusText(*body);
  ASSERT_TRUE(samples.ok()) << samples.status();
  EXPECT_EQ(SumSamples(*samples, "layerserve_requests_total", {{"code", "OK"}}), 41);
  EXPECT_EQ(SumSamples(*samples, "layerserve_requests_total"), 43);

  EXPECT_THAT(HttpGet(absl::StrCat("http://127.0.0.1:", exposer.GetListeningPorts().at(0),
                                   "/nothing")),
              StatusIs(absl::StatusCode::kUnavailable, HasSubstr("404 Not Found")));
}

TEST(HttpGetTest, RefusedConnectionIsUnavailable) {
  // A port that was just free: nothing listens on it once the socket is closed.
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(fd, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t length = sizeof address;
  ASSERT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&address), length), 0);
  ASSERT_EQ(getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length), 0);
  close(fd);
  EXPECT_THAT(
      HttpGet(absl::StrCat("http://127.0.0.1:", ntohs(address.sin_port), "/metrics")),
      StatusIs(absl::StatusCode::kUnavailable, HasSubstr("cannot connect")));
}

}  // namespace
}  // namespace layerserve::client
