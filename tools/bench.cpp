// normjit bench: time kernels on the GPU.
#include "tools/commands.hpp"
#include "normjit/error.hpp"

namespace normjit::tools {

void add_bench_command(CLI::App& app) {
  CLI::App* bench = app.add_subcommand("bench", "Time kernels on the GPU (not yet implemented)");
  bench->callback([] { throw Error(ErrorCode::kUnsupported, "bench is not implemented yet"); });
}

}  // namespace normjit::tools
