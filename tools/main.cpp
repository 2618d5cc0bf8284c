// normjit: the command. main parses flags (CLI11) and calls the library; each subcommand
// lives in its own file.
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <iostream>

#include "normjit/error.hpp"
#include "runtime/compiler.hpp"
#include "tools/commands.hpp"

namespace {

// Errors are one line of bounded length whatever the arguments held: CLI11 quotes values (a
// stray argument, a bad --jobs) as they were given.
constexpr size_t kMaxMessageBytes = 1000;

// The error and usage lines for the first word that names no subcommand where one is expected
// ("normjit frobnicate", "normjit cache frobnicate") or is an option that level does not take
// ("normjit --bogus"); empty when there is none. CLI11 would say only "A subcommand is
// required", not which word it did not know.
std::string unknown_subcommand(const CLI::App& app, int argc, char** argv) {
  const CLI::App* level = &app;
  for (int i = 1; i < argc; ++i) {
    const std::string word = argv[i];
    const std::vector<const CLI::App*> subcommands =
        level->get_subcommands([](const CLI::App*) { return true; });
    if (subcommands.empty()) return "";  // a subcommand's own options: CLI11 explains those
    std::string known;
    for (const CLI::App* sub : subcommands) known += (known.empty() ? "" : ", ") + sub->get_name();
    const std::string command = level == &app ? "normjit" : "normjit " + level->get_name();
    const std::string usage = "\nrun '" + command + " --help' for usage";
    if (!word.empty() && word[0] == '-') {
      const std::string name = word.substr(0, word.find('='));  // --flag=value
      if (level->get_option_no_throw(name) != nullptr) return "";
      return "unknown option " + normjit::quoted_excerpt(word) + " for '" + command +
             "' (expected a subcommand: " + known + ")" + usage;
    }
    const CLI::App* next = nullptr;
    for (const CLI::App* sub : subcommands) {
      if (sub->check_name(word)) next = sub;
    }
    if (!next) {
      return "unknown " + (level == &app ? std::string() : level->get_name() + " ") +
             "subcommand " + normjit::quoted_excerpt(word) + " (expected one of " + known + ")" +
             usage;
    }
    level = next;
  }
  // The words ended where a subcommand was still expected ("normjit cache").
  const std::vector<const CLI::App*> subcommands =
      level->get_subcommands([](const CLI::App*) { return true; });
  if (subcommands.empty() || !level->get_subcommands().empty()) return "";
  std::string known;
  for (const CLI::App* sub : subcommands) known += (known.empty() ? "" : ", ") + sub->get_name();
  const std::string command = level == &app ? "normjit" : "normjit " + level->get_name();
  return "'" + command + "' needs a subcommand: one of " + known + "\nrun '" + command +
         " --help' for usage";
}

// "normjit dump" for an error in dump's flags: the deepest subcommand the words selected, whose
// --help explains them.
std::string command_path(const CLI::App* app) {
  std::string path = "normjit";
  for (std::vector<CLI::App*> parsed = app->get_subcommands(); !parsed.empty();
       parsed = parsed.front()->get_subcommands()) {
    path += " " + parsed.front()->get_name();
  }
  return path;
}

// What --version prints: this build's version and the NVRTC it compiles with (loaded at run
// time, so it is asked, not recorded at build time).
std::string version_text() {
  std::string text = "normjit " NORMJIT_VERSION;
  try {
    text += "\ncompiler: " + normjit::nvrtc_version();
  } catch (const std::exception& e) {
    text += "\ncompiler: NVRTC unusable (" + std::string(e.what()) + ")";
  }
  return text;
}

// What a command printed must have reached its reader: a failed write to standard output (a
// full disk under `normjit dump ... > file`) is a failure, not a truncated success. 0, or 1
// after saying so.
int stdout_status() {
  errno = 0;
  if (!std::cout.flush() || std::fflush(stdout) != 0 || std::ferror(stdout)) {
    std::fprintf(stderr, "normjit: error: cannot write standard output (%s)\n",
                 errno != 0 ? std::strerror(errno) : "write failed");
    return 1;
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "normjit: CUDA normalization kernels (RMSNorm, LayerNorm, GroupNorm) generated for the\n"
      "exact shape and dtype, compiled with NVRTC, cached on disk and launched on the GPU.\n"
      "Example: normjit dump --op rmsnorm --shape 8,64,32,32 --emit ptx --arch sm_90",
      "normjit"};
  app.require_subcommand(1);
  app.set_version_flag("--version", version_text, "print normjit's and NVRTC's versions and exit");
  app.failure_message([](const CLI::App* command, const CLI::Error& e) {
    std::string out = "normjit: error: " + normjit::excerpt(e.what(), kMaxMessageBytes) + "\n";
    out += "run '" + command_path(command) + " --help' for usage\n";
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
    if (e.get_exit_code() != 0) {  // not --help
      if (const std::string unknown = unknown_subcommand(app, argc, argv); !unknown.empty()) {
        std::fprintf(stderr, "normjit: error: %s\n", unknown.c_str());
        return e.get_exit_code();
      }
    }
    const int code = app.exit(e);
    // --help and --version print to standard output as every command does: there too a
    // failed write is a failure.
    return code == 0 ? stdout_status() : code;
  } catch (const normjit::Error& e) {
    std::fprintf(stderr, "normjit: error: %s\n", e.what());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "normjit: error: %s\n", e.what());
    return 1;
  }
  return stdout_status();
}
