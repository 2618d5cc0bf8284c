// PLACEHOLDER until the cache subcommand lands (helper-1 replaces this file).
#include "tools/commands.hpp"
namespace normjit::tools {
void add_cache_command(CLI::App& app) { app.add_subcommand("cache", "Inspect the kernel cache"); }
}  // namespace normjit::tools
