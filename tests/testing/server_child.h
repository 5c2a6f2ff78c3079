// The real layerserve binary (build/bin/layerserve) as a child process on an
// ephemeral loopback port, for the C++ tests that need a whole server
// (tests/client). Its output goes to a file (a pipe nobody drains could fill and
// stall it); the target is read back from its "gRPC listening on" line.
#ifndef LAYERSERVE_TESTS_TESTING_SERVER_CHILD_H_
#define LAYERSERVE_TESTS_TESTING_SERVER_CHILD_H_

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"

namespace layerserve::testing {

inline std::string ReadFile(const std::string& path) {
  std::ifstream file(path);
  std::stringstream content;
  content << file.rdbuf();
  return content.str();
}

class ServerChild {
 public:
  // layerserve with `flags`, its output in DIR/NAME.log. target() is empty if it
  // did not start within 30 s.
  ServerChild(const std::string& dir, const std::string& name,
              std::vector<std::string> flags) {
    log_ = absl::StrCat(dir, "/", name, ".log");
    std::vector<std::string> args = {
        absl::StrCat(LAYERSERVE_BINARY_DIR, "/bin/layerserve"), "--host=127.0.0.1",
        "--port=0", "--metrics-port=0"};
    args.insert(args.end(), flags.begin(), flags.end());
    pid_ = fork();
    if (pid_ == 0) {
      FILE* out = std::fopen(log_.c_str(), "w");
      dup2(fileno(out), 1);
      dup2(fileno(out), 2);
      std::vector<char*> argv;
      for (std::string& a : args) argv.push_back(a.data());
      argv.push_back(nullptr);
      execv(argv[0], argv.data());
      _exit(127);
    }
    const absl::Time give_up = absl::Now() + absl::Seconds(30);
    while (target_.empty() && absl::Now() < give_up) {
      const std::string output = ReadFile(log_);
      const size_t at = output.find("gRPC listening on ");
      if (at != std::string::npos) {
        const size_t begin = at + sizeof("gRPC listening on ") - 1;
        const size_t end = output.find_first_of(" \n", begin);
        if (end != std::string::npos) target_ = output.substr(begin, end - begin);
      }
      if (target_.empty()) absl::SleepFor(absl::Milliseconds(50));
    }
  }
  ~ServerChild() { Stop(SIGTERM); }

  // Sends `signal` and waits for the process to end (SIGKILL: a lost replica).
  void Stop(int signal) {
    if (pid_ > 0) {
      kill(pid_, signal);
      waitpid(pid_, nullptr, 0);
      pid_ = -1;
    }
  }
  const std::string& target() const { return target_; }
  std::string output() const { return ReadFile(log_); }

 private:
  pid_t pid_ = -1;
  std::string log_;
  std::string target_;
};

}  // namespace layerserve::testing

#endif  // LAYERSERVE_TESTS_TESTING_SERVER_CHILD_H_
