// One function per subcommand, each in its own file; main.cpp wires them into CLI11.
#pragma once

#include <CLI/CLI.hpp>
#include <optional>
#include <string>

#include "normjit/spec.hpp"

namespace normjit::tools {

void add_demo_command(CLI::App& app);
void add_dump_command(CLI::App& app);
void add_cache_command(CLI::App& app);
void add_prewarm_command(CLI::App& app);
void add_bench_command(CLI::App& app);

// The spec flags shared by dump, bench and the manifest's field names:
// --op --shape --dtype --normalized-dims --groups --affine --eps, and the variant axes
// --param-dtype --out-dtype --residual [DTYPE] --weight-offset --activation --save-stats
// --layout
// --backward, or --spec TEXT (or that text as the positional SPEC): the whole spec as its
// canonical text instead of the flags.
// Each holds the text as given, or nothing when the flag is left out: every value given is
// parsed and validated by resolve(), none ("", -1, nan) stands for "not given".
struct SpecFlags {
  std::optional<std::string> op, shape, dtype, normalized_dims, groups, affine, eps;
  std::optional<std::string> param_dtype, out_dtype, weight_offset, activation, layout;
  std::optional<std::string> residual;  // kResidualOfX when given without a value
  std::optional<std::string> text;      // --spec
  bool save_stats = false;
  bool backward = false;
  bool any() const;  // a spec is given: --spec or any of the flags
  // The first flag given ("--dtype", ...; "--spec" for the text), or "" where none is.
  std::string first_given() const;
  // What --residual holds when given bare: a text no argument can hold (argv strings end at
  // their first NUL), so that an explicit --residual "" is still refused as empty.
  static inline const std::string kResidualOfX = std::string(1, '\0');
  void add_to(CLI::App& app, bool required);
  NormSpec resolve() const;  // throws normjit::Error naming the flag and its value
  // --spec as dump --emit plan, cache ls and prewarm --check print it: a leading "spec:" and
  // key= words are read past (resolve() does), and its arch= word is returned here for the
  // command to use or refuse.
  std::optional<std::string> printed_arch() const;
};

// Where `normjit` keeps its cache unless --cache-dir says otherwise.
std::string default_cache_dir();
// What names the cache directory, for errors ("invalid <this> '<dir>': ..."): "--cache-dir"
// where the flag's value (flag) is given, else NORMJIT_CACHE_DIR where it is set, else the
// default's (which variable it comes from).
std::string cache_dir_source(const std::string& flag);
// Why kernels cannot be written into cache directory `dir` (it cannot be created, opened,
// trusted or written), or nullopt where they can; creates it where it is missing.
std::optional<std::string> cache_dir_problem(const std::string& dir);

}  // namespace normjit::tools
