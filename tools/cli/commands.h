// The commands of layerserve-cli, one file each (cli_<command>.cc). Each takes the
// connected Client and its parsed flags, prints its result and returns the exit code
// (cli_common.h). Call from one thread.
#ifndef LAYERSERVE_TOOLS_CLI_COMMANDS_H_
#define LAYERSERVE_TOOLS_CLI_COMMANDS_H_

#include "client/cpp/client.h"
#include "tools/cli/flags.h"

namespace layerserve::client {

// cli_models.cc
int RunHealth(Client& client, const FlagValues& flags);
int RunListModels(Client& client, const FlagValues& flags);
int RunGetModel(Client& client, const FlagValues& flags);
// cli_normalize.cc
int RunNormalize(Client& client, const FlagValues& flags);
// cli_activate.cc
int RunActivate(Client& client, const FlagValues& flags);
// cli_positional.cc
int RunPositionalEncode(Client& client, const FlagValues& flags);
// cli_block_forward.cc
int RunBlockForward(Client& client, const FlagValues& flags);
// cli_session.cc
int RunOpenSession(Client& client, const FlagValues& flags);
int RunCloseSession(Client& client, const FlagValues& flags);

}  // namespace layerserve::client

#endif  // LAYERSERVE_TOOLS_CLI_COMMANDS_H_
