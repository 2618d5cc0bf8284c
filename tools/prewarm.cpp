// normjit prewarm: compile every spec of a manifest into a cache directory, without a GPU.
#include "tools/commands.hpp"
#include "normjit/error.hpp"

namespace normjit::tools {

void add_prewarm_command(CLI::App& app) {
  CLI::App* prewarm = app.add_subcommand("prewarm", "Compile every spec of a manifest into a cache (not yet implemented)");
  prewarm->callback([] { throw Error(ErrorCode::kUnsupported, "prewarm is not implemented yet"); });
}

}  // namespace normjit::tools
