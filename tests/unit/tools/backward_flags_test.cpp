// The backward axis (issue 20) through the normjit command: --backward on the spec flags and
// `backward` in a prewarm manifest reach the spec's canonical text, a form without a backward
// kernel is one error naming it, and dump shows a backward kernel's plan and configuration.
// Nothing here launches a kernel.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "tests/unit/tools/tool_flags.hpp"

namespace normjit::testing {
namespace {

constexpr size_t npos = std::string::npos;

class BackwardFlags : public ToolFlags {};

TEST_F(BackwardFlags, DumpAndBenchListTheFlag) {
  for (const char* command : {"dump", "bench"}) {
    const ToolResult r = run({command, "--help"});
    ASSERT_EQ(r.exit_code, 0) << r.describe();
    EXPECT_NE(r.out.find("--backward"), npos) << command << "\n" << r.out;
  }
}

TEST_F(BackwardFlags, DumpShowsTheBackwardPlanAndConfiguration) {
  const std::vector<std::string> base = {"dump",    "--op", "layernorm",  "--shape", "8,1000",
                                         "--dtype", "bf16", "--backward", "--arch",  "sm_90"};
  std::vector<std::string> args = base;
  args.insert(args.end(), {"--emit", "plan"});
  ToolResult r = run(args);
  ASSERT_EQ(r.exit_code, 0) << r.describe();
  EXPECT_NE(r.out.find("spec: op=layernorm shape=8,1000 dtype=bf16 normalized_dims=1 "
                       "affine=both eps=1e-05 backward=true"),
            npos)
      << r.out;
  EXPECT_NE(r.out.find("strategy: row-backward"), npos) << r.out;
  args = base;
  args.insert(args.end(), {"--emit", "source"});
  r = run(args);
  ASSERT_EQ(r.exit_code, 0) << r.describe();
  EXPECT_NE(r.out.find("normjit::row_backward<normjit::layernorm_bf16_h1000_backward>"), npos)
      << r.out;
}

TEST_F(BackwardFlags, FormsWithoutABackwardKernelAreOneErrorNamingThem) {
  // Rows whose CTAs' partials of dweight and dbias outgrow the backward workspace.
  std::string e = single_error({"dump", "--op", "layernorm", "--shape", "2,40000000", "--backward",
                                "--arch", "sm_90", "--emit", "plan"});
  EXPECT_NE(e.find("unsupported shape '2,40000000'"), npos) << e;
  e = single_error({"dump", "--op", "layernorm", "--shape", "2,1024", "--backward", "--save-stats",
                    "--arch", "sm_90", "--emit", "plan"});
  EXPECT_NE(e.find("save_stats"), npos) << e;
  // bench checks the spec before it looks for a GPU.
  e = single_error({"bench", "--op", "groupnorm", "--shape", "2,64,8,8", "--groups", "8",
                    "--backward", "--save-stats"});
  EXPECT_NE(e.find("invalid save_stats true: backward=true"), npos) << e;
}

TEST_F(BackwardFlags, GroupNormAndChannelFormsHaveBackwardKernels) {
  ToolResult r = run({"dump", "--op", "groupnorm", "--shape", "2,64,8,8", "--groups", "8",
                      "--backward", "--arch", "sm_90", "--emit", "plan"});
  ASSERT_EQ(r.exit_code, 0) << r.describe();
  EXPECT_NE(r.out.find("strategy: group-backward"), npos) << r.out;
  r = run({"dump", "--op", "rmsnorm", "--shape", "2,64,8,8", "--backward", "--arch", "sm_90",
           "--emit", "source"});
  ASSERT_EQ(r.exit_code, 0) << r.describe();
  EXPECT_NE(r.out.find("normjit::channels_backward<normjit::rmsnorm_f32_c64_s64_backward>"), npos)
      << r.out;
}

TEST_F(BackwardFlags, BenchCompileCompilesABackwardKernel) {
  const ToolResult r =
      run({"bench", "--compile", "--op", "rmsnorm", "--shape", "4,4096", "--normalized-dims", "1",
           "--dtype", "bf16", "--affine", "weight", "--backward", "--repeat", "1"});
  EXPECT_EQ(r.exit_code, 0) << r.describe();
  EXPECT_NE(r.out.find("backward=true"), npos) << r.describe();
}

TEST_F(BackwardFlags, ManifestTakesTheBackwardField) {
  const std::string manifest = dir_ / "manifest.json";
  write_file(manifest,
             R"([{"op": "rmsnorm", "shape": [4, 4096], "normalized_dims": 1, "dtype": "bf16",
                  "affine": "weight", "backward": true}])");
  const ToolResult r =
      run({"prewarm", manifest, "--arch", "sm_90", "--check", "--cache-dir", (dir_ / "out")});
  // --check compiles nothing: the missing kernel is named by its canonical spec.
  EXPECT_NE((r.out + r.err).find("backward=true"), npos) << r.describe();
  const std::string bad = dir_ / "bad.json";
  write_file(bad, R"([{"op": "rmsnorm", "shape": [4, 4096], "backward": "yes"}])");
  const std::string e =
      single_error({"prewarm", bad, "--arch", "sm_90", "--check", "--cache-dir", (dir_ / "out")});
  EXPECT_NE(e.find("backward"), npos) << e;
  EXPECT_NE(e.find("true or false"), npos) << e;
}

}  // namespace
}  // namespace normjit::testing
