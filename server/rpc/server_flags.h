// The layerserve binary's flags: their definitions (names, help, defaults from
// ServerConfig), and the command line parsed into a ServerConfig. Flags are
// documented with dashes (--metrics-port) and absl names them with underscores (a
// C++ identifier): both spellings are accepted.
#ifndef LAYERSERVE_SERVER_RPC_SERVER_FLAGS_H_
#define LAYERSERVE_SERVER_RPC_SERVER_FLAGS_H_

#include "absl/strings/string_view.h"
#include "server/rpc/server_config.h"

namespace layerserve {

// Parses the command line into the flags (absl::ParseCommandLine: an unknown flag
// or a malformed value exits 1 with absl's message) and returns their values.
ServerConfig ParseServerFlags(int argc, char** argv);

// Whether flags defined in `file` are the server's own (those of server_flags.cc),
// not Abseil's or a library's. `file` is as absl reports it (__FILE__ as it was,
// less leading slashes; how much of the path that holds depends on the build).
bool IsServerFlagFile(absl::string_view file);

}  // namespace layerserve

#endif  // LAYERSERVE_SERVER_RPC_SERVER_FLAGS_H_
