// The fixture of the CLI flag tests (activation, backward, layout, variant axes): the normjit
// command run with a private, read-only cache; an error expected as exactly one line; prewarm
// manifests written into a temporary folder. Nothing here launches a kernel.
#pragma once

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "tests/unit/tools/run_tool.hpp"

namespace normjit::testing {

inline constexpr const char* kErrorPrefix = "normjit: error: ";

class ToolFlags : public ::testing::Test {
 protected:
  ToolResult run(const std::vector<std::string>& args) {
    return run_tool(args, {"NORMJIT_CACHE_DIR=" + cache_.path(), "NORMJIT_CACHE_READONLY"});
  }
  // Expects an error exit with exactly one error line; returns that line.
  std::string single_error(const std::vector<std::string>& args) {
    const ToolResult r = run(args);
    EXPECT_NE(r.exit_code, 0) << r.describe();
    const std::vector<std::string> lines = r.err_lines(kErrorPrefix);
    EXPECT_EQ(lines.size(), 1u) << r.describe();
    return lines.empty() ? "" : lines[0];
  }
  // A prewarm manifest of this text, in a file of its own.
  std::string manifest(const std::string& text) {
    const std::string path = dir_ / ("manifest" + std::to_string(count_++) + ".json");
    write_file(path, text);
    return path;
  }

  TempDir dir_, cache_;
  int count_ = 0;
};

}  // namespace normjit::testing
