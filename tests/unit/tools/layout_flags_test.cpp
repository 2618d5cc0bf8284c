// The layout axis through the normjit command: --layout on every subcommand with spec flags, a
// bad value or a trailing form named with the flag and value, the manifest field `layout`, and
// dump --cache-entry refusing it. Nothing here runs a kernel: dump stops at the plan or the
// source, and `prewarm --check` names each entry's spec.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "tests/unit/tools/tool_flags.hpp"

namespace normjit::testing {
namespace {

constexpr size_t npos = std::string::npos;

class LayoutFlags : public ToolFlags {};

TEST_F(LayoutFlags, EverySubcommandWithSpecFlagsOffersIt) {
  for (const char* command : {"dump", "bench"}) {
    const ToolResult r = run({command, "--help"});
    ASSERT_EQ(r.exit_code, 0) << r.describe();
    const size_t at = r.out.find("--layout");
    ASSERT_NE(at, npos) << command << "\n" << r.out;
    const std::string line = r.out.substr(at, r.out.find('\n', at) - at);
    EXPECT_NE(line.find("nchw | nhwc"), npos) << command << ": " << line;
  }
}

TEST_F(LayoutFlags, DumpShowsTheSpecThePlanAndTheKernel) {
  ToolResult r = run({"dump", "--op", "groupnorm", "--shape", "2,320,64,64", "--groups", "32",
                      "--dtype", "f16", "--layout", "nhwc", "--emit", "plan", "--arch", "sm_90"});
  ASSERT_EQ(r.exit_code, 0) << r.describe();
  EXPECT_NE(r.out.find("spec: op=groupnorm shape=2,320,64,64 dtype=f16 groups=32 affine=both "
                       "eps=1e-05 layout=nhwc\n"),
            npos)
      << r.out;
  EXPECT_NE(r.out.find("strategy: group-nhwc"), npos) << r.out;
  EXPECT_NE(r.out.find("layout: nhwc"), npos) << r.out;
  // --layout nchw is the default: the plain spec, text and plan.
  r = run({"dump", "--op", "groupnorm", "--shape", "2,320,64,64", "--groups", "32", "--layout",
           "nchw", "--emit", "plan", "--arch", "sm_90"});
  ASSERT_EQ(r.exit_code, 0) << r.describe();
  EXPECT_NE(r.out.find("eps=1e-05\n"), npos) << r.out;
  EXPECT_EQ(r.out.find("layout=nhwc"), npos) << r.out;
  EXPECT_NE(r.out.find("layout: nchw"), npos) << r.out;
}

TEST_F(LayoutFlags, BadValuesAndTrailingFormsNameTheFlag) {
  for (const char* command : {"dump", "bench"}) {
    std::string e = single_error({command, "--op", "groupnorm", "--shape", "2,64,8", "--groups",
                                  "8", "--layout", "channels_last", "--arch", "sm_90"});
    EXPECT_NE(e.find("--layout 'channels_last'"), npos) << e;
    EXPECT_NE(e.find("nchw, nhwc"), npos) << e;
    e = single_error(
        {command, "--op", "layernorm", "--shape", "2,64,8", "--layout", "nhwc", "--arch", "sm_90"});
    EXPECT_NE(e.find("invalid layout 'nhwc'"), npos) << e;
    EXPECT_NE(e.find("trailing form"), npos) << e;
  }
}

TEST_F(LayoutFlags, ManifestTakesTheLayoutField) {
  const std::string path = manifest(R"([
  {"op": "groupnorm", "shape": [2, 320, 64, 64], "groups": 32, "dtype": "bf16",
   "layout": "nhwc"},
  {"op": "layernorm", "shape": [8, 96, 56, 56], "normalized_dims": 0, "layout": "nhwc"},
  {"op": "rmsnorm", "shape": [2, 64, 8], "layout": "nchw"}
])");
  const ToolResult r =
      run({"prewarm", path, "--arch", "sm_90", "--check", "--cache-dir", dir_ / "empty"});
  EXPECT_NE(r.exit_code, 0) << "an empty directory lacks them\n" << r.describe();
  for (const std::string spec :
       {"entry 0 (line 2): op=groupnorm shape=2,320,64,64 dtype=bf16 groups=32 affine=both "
        "eps=1e-05 layout=nhwc arch=sm_90",
        "entry 1 (line 4): op=layernorm shape=8,96,56,56 dtype=f32 normalized_dims=0 "
        "affine=both eps=1e-05 layout=nhwc arch=sm_90",
        "entry 2 (line 5): op=rmsnorm shape=2,64,8 dtype=f32 affine=none eps=1e-05 arch=sm_90"}) {
    EXPECT_NE(r.out.find(spec), npos) << spec << "\n" << r.describe();
  }
  for (const auto& [fields, mention] : std::vector<std::pair<std::string, std::string>>{
           {R"("layout": 1)", "layout 1"},
           {R"("layout": "NHWC")", "layout 'NHWC'"},
           {R"("layout": "nhwc", "layout": "nchw")", "layout"},
           {R"("normalized_dims": 2, "layout": "nhwc")", "invalid layout 'nhwc'"}}) {
    const std::string bad =
        manifest(R"([{"op": "layernorm", "shape": [2, 64, 8, 8], )" + fields + "}]");
    const std::string e = single_error({"prewarm", bad, "--arch", "sm_90", "--check"});
    EXPECT_NE(e.find("entry 0"), npos) << fields << ": " << e;
    EXPECT_NE(e.find(mention), npos) << fields << ": " << e;
  }
  // The unknown-field message lists it.
  const std::string e = single_error(
      {"prewarm", manifest(R"([{"op": "rmsnorm", "shape": [2, 4], "layuot": "nhwc"}])"), "--arch",
       "sm_90"});
  EXPECT_NE(e.find("layout"), npos) << e;
}

TEST_F(LayoutFlags, CacheEntryRefusesIt) {
  const std::string e =
      single_error({"dump", "--cache-entry", std::string(64, 'a'), "--layout", "nhwc"});
  EXPECT_NE(e.find("leave out the spec flags"), npos) << e;
}

}  // namespace
}  // namespace normjit::testing
