// layerserve-echo: the serving-overhead peer of docs/perf/2026-11-30-serving-overhead.md.
// A bare gRPC server on the same proto whose Normalize returns the request's input bytes
// as the output, answered on the handler thread: no validation, no queue, no kernel. The
// same load generator (layerserve-bench) drives it and the real server, so the
// difference is layerserve's own cost: decode, queue hand-off, kernel, encode.
//
// Usage: layerserve-echo [--port=0] (prints "echo: gRPC listening on HOST:PORT";
// runs until SIGTERM or SIGINT).
#include <grpcpp/grpcpp.h>
#include <signal.h>

#include <cstdio>
#include <cstring>
#include <memory>
#include <string>

#include "layerserve/v1/layerserve.grpc.pb.h"
#include "server/rpc/allocator.h"

namespace {

class EchoService final : public layerserve::v1::LayerService::CallbackService {
 public:
  grpc::ServerUnaryReactor* Normalize(
      grpc::CallbackServerContext* context,
      const layerserve::v1::NormalizeRequest* request,
      layerserve::v1::NormalizeResponse* response) override {
    *response->mutable_output() = request->input();
    grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
    reactor->Finish(grpc::Status::OK);
    return reactor;
  }
};

}  // namespace

int main(int argc, char** argv) {
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGTERM);
  sigaddset(&stop_signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);
  // The same allocator and settings as layerserve (server/rpc/allocator.h), so the
  // comparison is about the serving path only.
  layerserve::TuneAllocator();

  std::string port = "0";
  for (int i = 1; i < argc; ++i) {
    if (std::strncmp(argv[i], "--port=", 7) == 0) port = argv[i] + 7;
  }
  EchoService service;
  grpc::ServerBuilder builder;
  int bound = 0;
  builder.AddListeningPort("127.0.0.1:" + port, grpc::InsecureServerCredentials(),
                           &bound);
  builder.SetMaxReceiveMessageSize(256 << 20);
  builder.SetMaxSendMessageSize(256 << 20);
  builder.RegisterService(&service);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (server == nullptr || bound == 0) {
    std::fprintf(stderr, "echo: cannot listen on port %s\n", port.c_str());
    return 1;
  }
  std::printf("echo: gRPC listening on 127.0.0.1:%d\n", bound);
  std::fflush(stdout);
  int signal_number = 0;
  sigwait(&stop_signals, &signal_number);
  server->Shutdown();
  return 0;
}
