// normjit: the command. main parses flags (CLI11) and calls the library; each subcommand
// lives in its own file.
#include <cstdio>

#include "normjit/error.hpp"
#include "tools/commands.hpp"

int main(int argc, char** argv) {
  CLI::App app{
      "normjit: CUDA normalization kernels (RMSNorm, LayerNorm, GroupNorm) generated for the\n"
      "exact shape and dtype, compiled with NVRTC, cached on disk and launched on the GPU.\n"
      "Example: normjit dump --op rmsnorm --shape 8,64,32,32 --emit ptx --arch sm_90",
      "normjit"};
  app.require_subcommand(1);
  app.failure_message([](const CLI::App* command, const CLI::Error& e) {
    std::string out = "normjit: error: " + std::string(e.what()) + "\n";
    out += "run '" + command->get_name() + " --help' for usage\n";
    return out;
  });
  normjit::tools::add_demo_command(app);
  normjit::tools::add_dump_command(app);
  normjit::tools::add_prewarm_command(app);
  normjit::tools::add_cache_command(app);
  normjit::tools::add_bench_command(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (const normjit::Error& e) {
    std::fprintf(stderr, "normjit: error: %s\n", e.what());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "normjit: error: %s\n", e.what());
    return 1;
  }
  return 0;
}
