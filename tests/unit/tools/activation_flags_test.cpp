// The activation axis (issue 19) through the normjit command: --activation on the spec flags
// of dump and bench and `activation` in a prewarm manifest reach the spec's canonical text, a
// bad value is one error naming the flag or field and the value, and an activation with
// --backward is refused as unsupported. Nothing here launches a kernel.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "tests/unit/tools/tool_flags.hpp"

namespace normjit::testing {
namespace {

constexpr size_t npos = std::string::npos;

class ActivationFlags : public ToolFlags {};

TEST_F(ActivationFlags, DumpAndBenchListTheFlag) {
  for (const char* command : {"dump", "bench"}) {
    const ToolResult r = run({command, "--help"});
    ASSERT_EQ(r.exit_code, 0) << r.describe();
    const size_t at = r.out.find("--activation");
    ASSERT_NE(at, npos) << command << "\n" << r.out;
    EXPECT_NE(r.out.find("none | silu | gelu", at), npos) << command << "\n" << r.out;
  }
  const ToolResult prewarm = run({"prewarm", "--help"});
  EXPECT_NE(prewarm.out.find("activation (none, silu or gelu)"), npos) << prewarm.out;
}

// dump --emit plan starts with the canonical spec; the activation is written after the weight
// offset, and none is left out.
TEST_F(ActivationFlags, DumpShowsTheCanonicalSpec) {
  struct Case {
    std::vector<std::string> flags;
    std::string spec;
  };
  const std::vector<Case> cases = {
      {{"--op", "groupnorm", "--shape", "2,320,64,64", "--groups", "32", "--dtype", "f16",
        "--activation", "silu"},
       "op=groupnorm shape=2,320,64,64 dtype=f16 groups=32 affine=both eps=1e-05 "
       "activation=silu"},
      {{"--op", "layernorm", "--shape", "2,96,14,14", "--normalized-dims", "0", "--activation",
        "gelu", "--out-dtype", "e4m3", "--save-stats"},
       "op=layernorm shape=2,96,14,14 dtype=f32 normalized_dims=0 affine=both eps=1e-05 "
       "out_dtype=e4m3 activation=gelu save_stats=true"},
      {{"--op", "rmsnorm", "--shape", "4,4096", "--normalized-dims", "1", "--affine", "weight",
        "--weight-offset", "1", "--activation", "gelu"},
       "op=rmsnorm shape=4,4096 dtype=f32 normalized_dims=1 affine=weight eps=1e-05 "
       "weight_offset=1 activation=gelu"},
      {{"--op", "rmsnorm", "--shape", "2,64,8,8", "--activation", "none"},
       "op=rmsnorm shape=2,64,8,8 dtype=f32 affine=none eps=1e-05"},
  };
  for (const Case& c : cases) {
    std::vector<std::string> args = {"dump", "--emit", "plan", "--arch", "sm_90"};
    args.insert(args.end(), c.flags.begin(), c.flags.end());
    const ToolResult r = run(args);
    ASSERT_EQ(r.exit_code, 0) << c.spec << "\n" << r.describe();
    const std::string want = "spec: " + c.spec + "\n";
    EXPECT_EQ(r.out.substr(0, want.size()), want) << r.describe();
  }
}

TEST_F(ActivationFlags, BadValuesNameTheFlag) {
  for (const char* command : {"dump", "bench"}) {
    std::vector<std::string> args = {command,    "--op",     "groupnorm", "--shape",
                                     "2,64,8,8", "--groups", "8"};
    for (const char* value : {"relu", "", "Silu"}) {
      std::vector<std::string> bad = args;
      bad.insert(bad.end(), {"--activation", value});
      const std::string e = single_error(bad);
      EXPECT_NE(e.find("--activation '" + std::string(value) + "'"), npos) << command << ": " << e;
      EXPECT_NE(e.find("none, silu, gelu"), npos) << command << ": " << e;
    }
  }
}

// --backward with --activation: the backward kernel of the norm and its activation.
TEST_F(ActivationFlags, BackwardTakesTheActivation) {
  const ToolResult r = run({"dump", "--emit", "plan", "--arch", "sm_90", "--op", "layernorm",
                            "--shape", "8,1000", "--activation", "silu", "--backward"});
  ASSERT_EQ(r.exit_code, 0) << r.describe();
  EXPECT_NE(r.out.find("activation=silu backward=true\n"), npos) << r.describe();
  EXPECT_NE(r.out.find("dy taken through silu's derivative"), npos) << r.describe();
}

// A manifest's activation field reaches the spec (prewarm --check names each entry's canonical
// spec as missing), and a field of the wrong type or value names the field.
TEST_F(ActivationFlags, ManifestTakesTheField) {
  const std::string path = manifest(R"([
  {"op": "groupnorm", "shape": [2, 320, 64, 64], "groups": 32, "dtype": "f16",
   "activation": "silu"},
  {"op": "layernorm", "shape": [2, 96, 14, 14], "normalized_dims": 0, "activation": "gelu"},
  {"op": "rmsnorm", "shape": [2, 64, 8], "activation": "none"}
])");
  const ToolResult r =
      run({"prewarm", path, "--arch", "sm_90", "--check", "--cache-dir", dir_ / "empty"});
  EXPECT_NE(r.exit_code, 0) << "an empty directory lacks them\n" << r.describe();
  for (const std::string& spec : {
           std::string("entry 0 (line 2): op=groupnorm shape=2,320,64,64 dtype=f16 groups=32 "
                       "affine=both eps=1e-05 activation=silu arch=sm_90"),
           std::string("entry 1 (line 4): op=layernorm shape=2,96,14,14 dtype=f32 "
                       "normalized_dims=0 affine=both eps=1e-05 activation=gelu arch=sm_90"),
           std::string("entry 2 (line 5): op=rmsnorm shape=2,64,8 dtype=f32 affine=none "
                       "eps=1e-05 arch=sm_90"),
       }) {
    EXPECT_NE(r.out.find(spec), npos) << spec << "\n" << r.describe();
  }
  const std::string entry = R"({"op": "rmsnorm", "shape": [2, 64, 8], )";
  struct Case {
    std::string fields;
    std::vector<std::string> mentions;
  };
  for (const Case& c : std::vector<Case>{
           {R"("activation": 1)", {"activation 1", "JSON number"}},
           {R"("activation": true)", {"activation true", "JSON boolean"}},
           {R"("activation": "relu")", {"activation 'relu'", "none, silu, gelu"}},
           {R"("activation": "silu", "activation": "gelu")", {"activation"}},
       }) {
    const std::string e = single_error({"prewarm", manifest("[" + entry + c.fields + "}]"),
                                        "--arch", "sm_90", "--cache-dir", dir_ / "out"});
    EXPECT_NE(e.find("entry 0"), npos) << c.fields << ": " << e;
    for (const std::string& m : c.mentions) {
      EXPECT_NE(e.find(m), npos) << c.fields << ": names " << m << ": " << e;
    }
  }
  const std::string unknown =
      single_error({"prewarm", manifest("[" + entry + R"("act": "silu"}])"), "--arch", "sm_90"});
  EXPECT_NE(unknown.find("activation"), npos) << "the field list names it: " << unknown;
}

// dump --cache-entry names a compiled kernel: --activation beside it is refused.
TEST_F(ActivationFlags, CacheEntryRefusesTheFlag) {
  const std::string e =
      single_error({"dump", "--cache-entry", std::string(64, 'a'), "--activation", "silu"});
  EXPECT_NE(e.find("leave out the spec flags"), npos) << e;
}

}  // namespace
}  // namespace normjit::testing
