// A gRPC server inside the test process, for tests that call a service (real or
// fake) through a real channel: it listens on 127.0.0.1 at a port the OS picks
// (port 0, read back once bound), so tests running at the same time never collide.
#ifndef LAYERSERVE_TESTS_TESTING_LOOPBACK_SERVER_H_
#define LAYERSERVE_TESTS_TESTING_LOOPBACK_SERVER_H_

#include <grpcpp/grpcpp.h>

#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace layerserve::testing {

class LoopbackServer {
 public:
  // Serves `services`, which must outlive the server's shutdown, with
  // `credentials`, on `port`: 0 for one the OS picks, or a fixed one (a test that
  // starts a server where a client already tries to connect). started() is false
  // if it could not start (the port was taken).
  explicit LoopbackServer(std::vector<grpc::Service*> services,
                          std::shared_ptr<grpc::ServerCredentials> credentials =
                              grpc::InsecureServerCredentials(),
                          int port = 0) {
    grpc::ServerBuilder builder;
    builder.AddListeningPort("127.0.0.1:" + std::to_string(port), std::move(credentials),
                             &port_);
    for (grpc::Service* service : services) builder.RegisterService(service);
    server_ = builder.BuildAndStart();
  }
  explicit LoopbackServer(grpc::Service* service,
                          std::shared_ptr<grpc::ServerCredentials> credentials =
                              grpc::InsecureServerCredentials(),
                          int port = 0)
      : LoopbackServer(std::vector<grpc::Service*>{service}, std::move(credentials),
                       port) {}
  ~LoopbackServer() { Shutdown(); }

  LoopbackServer(const LoopbackServer&) = delete;
  LoopbackServer& operator=(const LoopbackServer&) = delete;

  bool started() const { return server_ != nullptr; }
  // The port it listens on, once started.
  int port() const { return port_; }
  // "127.0.0.1:PORT", for a client's options or a channel of the test's own.
  std::string target() const { return "127.0.0.1:" + std::to_string(port_); }
  // A plaintext channel to the server, for a stub.
  std::shared_ptr<grpc::Channel> NewInsecureChannel() const {
    return grpc::CreateChannel(target(), grpc::InsecureChannelCredentials());
  }

  // Stops accepting calls and waits for those running to finish. Tests call it
  // where the order matters (before stopping the service's workers); a second
  // call does nothing.
  void Shutdown() {
    if (server_ != nullptr) server_->Shutdown();
  }

 private:
  int port_ = 0;
  std::unique_ptr<grpc::Server> server_;
};

}  // namespace layerserve::testing

#endif  // LAYERSERVE_TESTS_TESTING_LOOPBACK_SERVER_H_
