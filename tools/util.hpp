// Helpers shared by several subcommands: the seed problems, device buffers filled with random
// data, and --arch validation against what this NVRTC can build.
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "generator/plan.hpp"
#include "normjit/spec.hpp"
#include "runtime/device.hpp"

namespace normjit::tools {

// The seed problems of docs/design.md, each in f32 and bf16 (tools/manifests/seeds.json lists
// the same specs for `normjit prewarm`).
std::vector<NormSpec> seed_specs();

// Fills a device buffer with normally distributed values (mean 0.5, std 2) of dtype: a pattern
// of 16 Mi elements repeated, so that multi-GB tensors fill in a second.
void fill_random(device::Buffer& buffer, Dtype dtype, uint64_t seed);

// The target an --arch value names, exactly (sm_100f is built as sm_100f), refused unless this
// NVRTC builds for it; the message names `flag` and lists every target it builds.
Target parse_arch(const std::string& flag, const std::string& arch);

// An integer flag read by parse_integer: the whole text a decimal integer in [min, max], the
// flag and its value named in the error (CLI11's own conversion takes 0x10, " 3" and 010).
CLI::Option* add_integer_option(CLI::App& app, const std::string& name, int& value, int min,
                                int max, const std::string& help);

// A text flag (a path, a key) kept as given, except that an empty value is refused naming the
// flag: --cache-dir "" is a mistake, never "not given" and so the default. `value` is left as it
// was (empty, or nullopt) when the flag is not given.
CLI::Option* add_text_option(CLI::App& app, const std::string& name, std::string& value,
                             const std::string& help);
CLI::Option* add_text_option(CLI::App& app, const std::string& name,
                             std::optional<std::string>& value, const std::string& help);

// Indents every line after the first, so that a multi-line message (an NVRTC log) reads as
// part of the item it belongs to.
// A spec text as the tool prints it, made fit to be read back: without the "spec:" that dump
// --emit plan puts first, and with the words that cache ls and prewarm --check put after the
// spec ("arch=sm_90", "key=<64 hex digits>") taken out into `arch` and `key` (none where the
// text has none). The rest is the spec text, for NormSpec::parse.
struct PrintedSpec {
  std::string spec;
  std::optional<std::string> arch;
  std::optional<std::string> key;
};
PrintedSpec printed_spec(const std::string& text);

std::string indent(const std::string& text);

// A path quoted in an error: whole unless absurdly long.
constexpr size_t kPathExcerpt = 256;
// The whole of the file at `path`, given as `flag` (a directory, an unreadable file: an error
// naming the flag, the path and why). A file of more than max_bytes, or one that never ends
// (/dev/zero, a pipe), is refused before it fills memory, the error ending in `hint`.
std::string read_bounded_file(const std::string& flag, const std::string& path, size_t max_bytes,
                              const std::string& hint);

}  // namespace normjit::tools
