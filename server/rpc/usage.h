// The layerserve binary's --help text and the usage settings absl's own flags
// (--helpfull, --version...) report with.
#ifndef LAYERSERVE_SERVER_RPC_USAGE_H_
#define LAYERSERVE_SERVER_RPC_USAGE_H_

#include <string>

namespace layerserve {

// Sets absl's program usage message and usage config: its --helpshort,
// --helppackage and --helpfull report the server's flags too, and its --version
// prints "layerserve VERSION". Before the flags are parsed.
void SetUpUsage();

// Whether the command line asks for --help (or -help, -h) before any "--".
bool AsksForHelp(int argc, char** argv);

// The text of --help: the server's flags, named as the docs name them (with
// dashes; absl would print --metrics_port), each with its default and help.
std::string Usage();

}  // namespace layerserve

#endif  // LAYERSERVE_SERVER_RPC_USAGE_H_
