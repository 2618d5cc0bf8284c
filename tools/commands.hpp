// One function per subcommand, each in its own file; main.cpp wires them into CLI11.
#pragma once

#include <CLI/CLI.hpp>
#include <string>

#include "normjit/spec.hpp"

namespace normjit::tools {

void add_demo_command(CLI::App& app);
void add_dump_command(CLI::App& app);
void add_cache_command(CLI::App& app);
void add_prewarm_command(CLI::App& app);
void add_bench_command(CLI::App& app);

// The spec flags shared by dump, bench and the manifest's field names:
// --op --shape --dtype --normalized-dims --groups --affine --eps.
struct SpecFlags {
  std::string op, shape, dtype, affine;
  int normalized_dims = -1;  // -1: not given
  int64_t groups = -1;       // -1: not given
  double eps = -1;           // < 0: not given
  void add_to(CLI::App& app, bool required);
  bool given() const { return !op.empty(); }
  NormSpec resolve() const;  // throws normjit::Error naming the flag
};

// Where `normjit` keeps its cache unless --cache-dir says otherwise.
std::string default_cache_dir();

}  // namespace normjit::tools
