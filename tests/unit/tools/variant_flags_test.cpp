// The variant axes (issue 18) through the normjit command: every subcommand with spec flags
// offers --param-dtype, --out-dtype, --residual [DTYPE], --weight-offset and --save-stats, a bad
// value is one error naming the flag or key and the value, and a prewarm manifest takes the
// fields param_dtype, out_dtype, residual, weight_offset and save_stats. Nothing here compiles
// a kernel: errors come before planning, dump stops at the plan, and `prewarm --check` names
// each entry's spec whether or not it can be planned.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "tests/unit/tools/tool_flags.hpp"

namespace normjit::testing {
namespace {

constexpr size_t npos = std::string::npos;

class VariantFlags : public ToolFlags {};

TEST_F(VariantFlags, EverySubcommandWithSpecFlagsOffersThem) {
  for (const char* command : {"dump", "bench"}) {
    const ToolResult r = run({command, "--help"});
    ASSERT_EQ(r.exit_code, 0) << r.describe();
    for (const char* flag : {"--param-dtype", "--out-dtype", "--residual [DTYPE]",
                             "--weight-offset", "--save-stats"}) {
      const size_t at = r.out.find(flag);
      ASSERT_NE(at, npos) << command << " lists " << flag << "\n" << r.out;
      // The help follows on the same line.
      const std::string line = r.out.substr(at, r.out.find('\n', at) - at);
      EXPECT_GT(line.size(), std::string(flag).size() + 20) << command << ": " << line;
    }
    EXPECT_NE(r.out.find("e4m3 | e5m2"), npos) << command << "\n" << r.out;
  }
}

// Each value is checked as given and named with its flag, before anything is planned (and on
// bench, before it looks for a GPU).
TEST_F(VariantFlags, BadValuesNameTheFlagAndValue) {
  struct Case {
    std::vector<std::string> flags;
    std::vector<std::string> mentions;
    std::string normalized_dims = "1";  // the trailing form unless the case says otherwise
  };
  const std::vector<Case> cases = {
      {{"--dtype", "e4m3"}, {"--dtype 'e4m3'", "output dtypes only"}},
      {{"--affine", "weight", "--param-dtype", "e4m3"}, {"--param-dtype 'e4m3'", "output"}},
      {{"--out-dtype", "f64"}, {"--out-dtype 'f64'", "e4m3, e5m2"}},
      {{"--residual", "f64"}, {"--residual 'f64'"}},
      {{"--residual", ""}, {"--residual ''"}},
      {{"--affine", "weight", "--weight-offset", "abc"}, {"--weight-offset 'abc'"}},
      {{"--affine", "weight", "--weight-offset", "1e300"}, {"--weight-offset '1e300'", "float"}},
      {{"--param-dtype", "f32"}, {"param_dtype 'f32'", "affine is none"}},
      {{"--weight-offset", "1"}, {"weight_offset 1", "affine is none"}},
      {{"--dtype", "bf16", "--residual", "f16"}, {"residual 'f16'", "x's dtype (bf16) or f32"}},
      {{"--residual"}, {"invalid --residual: only the trailing forms", "channel form"}, "0"},
      {{"--residual", "f32"}, {"invalid --residual 'f32': only the trailing forms"}, "0"},
  };
  for (const Case& c : cases) {
    for (const char* command : {"dump", "bench"}) {
      std::vector<std::string> args = {
          command, "--op", "rmsnorm", "--shape", "4,4096", "--normalized-dims", c.normalized_dims};
      args.insert(args.end(), c.flags.begin(), c.flags.end());
      if (args[0] == std::string("dump")) {
        args.push_back("--arch");
        args.push_back("sm_90");
      }
      const std::string e = single_error(args);
      for (const std::string& m : c.mentions) {
        EXPECT_NE(e.find(m), npos) << command << " " << c.flags[0] << ": names " << m << ": " << e;
      }
    }
  }
}

// A bare --residual stands for x's dtype; an error about the form used to quote that dtype
// ("invalid residual 'f32'"), a value the user never typed. It names the flag instead.
TEST_F(VariantFlags, BareResidualIsNamedAsTheFlagNotAsADtype) {
  struct Case {
    std::vector<std::string> spec;
    std::string why;
  };
  const std::vector<Case> cases = {
      {{"--op", "groupnorm", "--shape", "8,64,32,32", "--groups", "8"}, "groupnorm does not"},
      {{"--op", "rmsnorm", "--shape", "8,64,32,32"}, "channel form"},
  };
  for (const Case& c : cases) {
    for (const char* command : {"dump", "bench"}) {
      std::vector<std::string> args = {command};
      args.insert(args.end(), c.spec.begin(), c.spec.end());
      args.push_back("--residual");
      if (args[0] == std::string("dump")) args.insert(args.end(), {"--arch", "sm_90"});
      const std::string e = single_error(args);
      EXPECT_NE(e.find("invalid --residual: "), npos) << command << ": " << e;
      EXPECT_NE(e.find(c.why), npos) << command << ": " << e;
      EXPECT_EQ(e.find("'f32'"), npos) << command << ": quotes no dtype: " << e;
    }
  }
}

// dump --emit plan (no compile) starts with the canonical spec: every flag reached it.
TEST_F(VariantFlags, DumpShowsTheCanonicalSpec) {
  struct Case {
    std::string flags;  // split at spaces
    std::string spec;
  };
  const std::vector<Case> cases = {
      {"--affine weight --dtype bf16 --param-dtype f32 --out-dtype e4m3 --residual "
       "--weight-offset 1 --save-stats",
       "dtype=bf16 normalized_dims=1 affine=weight eps=1e-05 param_dtype=f32 out_dtype=e4m3 "
       "residual=bf16 weight_offset=1 save_stats=true"},
      {"--residual f32 --dtype f16 --out-dtype e5m2",
       "dtype=f16 normalized_dims=1 affine=none eps=1e-05 out_dtype=e5m2 residual=f32"},
      {"--dtype bf16 --affine weight --param-dtype bf16 --out-dtype bf16 --weight-offset 0",
       "dtype=bf16 normalized_dims=1 affine=weight eps=1e-05"},
  };
  for (const Case& c : cases) {
    std::vector<std::string> args = {"dump",   "--op", "rmsnorm", "--shape", "4,4096",
                                     "--emit", "plan", "--arch",  "sm_90",   "--normalized-dims",
                                     "1"};
    for (size_t begin = 0; begin < c.flags.size();) {
      const size_t end = std::min(c.flags.find(' ', begin), c.flags.size());
      args.push_back(c.flags.substr(begin, end - begin));
      begin = end + 1;
    }
    const ToolResult r = run(args);
    ASSERT_EQ(r.exit_code, 0) << c.flags << "\n" << r.describe();
    const std::string want = "spec: op=rmsnorm shape=4,4096 " + c.spec + "\n";
    EXPECT_EQ(r.out.substr(0, want.size()), want) << c.flags << "\n" << r.describe();
  }
}

// A manifest with every new field: prewarm --check names each entry's canonical spec (as
// missing, or as not plannable yet), so the fields reached the spec as given.
TEST_F(VariantFlags, ManifestTakesTheVariantFields) {
  const std::string path = manifest(R"([
  {"op": "rmsnorm", "shape": [4, 4096], "normalized_dims": 1, "dtype": "bf16",
   "affine": "weight", "param_dtype": "f32", "out_dtype": "e4m3", "residual": "bf16",
   "weight_offset": 1, "save_stats": true},
  {"op": "layernorm", "shape": [8, 2048], "dtype": "f16", "out_dtype": "e5m2",
   "residual": "f32", "weight_offset": -0.5, "save_stats": false},
  {"op": "groupnorm", "shape": [2, 64, 8], "groups": 8, "save_stats": true,
   "param_dtype": "bf16"},
  {"op": "rmsnorm", "shape": [2, 64, 8], "dtype": "f16", "out_dtype": "f16", "save_stats": false}
])");
  const std::vector<std::string> specs = {
      "entry 0 (line 2): op=rmsnorm shape=4,4096 dtype=bf16 normalized_dims=1 affine=weight "
      "eps=1e-05 param_dtype=f32 out_dtype=e4m3 residual=bf16 weight_offset=1 save_stats=true "
      "arch=sm_90",
      "entry 1 (line 5): op=layernorm shape=8,2048 dtype=f16 normalized_dims=1 affine=both "
      "eps=1e-05 out_dtype=e5m2 residual=f32 weight_offset=-0.5 arch=sm_90",
      "entry 2 (line 7): op=groupnorm shape=2,64,8 dtype=f32 groups=8 affine=both eps=1e-05 "
      "param_dtype=bf16 save_stats=true arch=sm_90",
      "entry 3 (line 9): op=rmsnorm shape=2,64,8 dtype=f16 affine=none eps=1e-05 arch=sm_90",
  };
  const ToolResult r =
      run({"prewarm", path, "--arch", "sm_90", "--check", "--cache-dir", dir_ / "empty"});
  EXPECT_NE(r.exit_code, 0) << "an empty directory lacks them\n" << r.describe();
  for (const std::string& spec : specs) {
    EXPECT_NE(r.out.find(spec), npos) << spec << "\n" << r.describe();
  }
}

TEST_F(VariantFlags, ManifestFieldsOfTheWrongTypeOrValueNameTheField) {
  const std::string entry = R"({"op": "rmsnorm", "shape": [4, 4096], "normalized_dims": 1, )";
  struct Case {
    std::string fields;
    std::vector<std::string> mentions;
  };
  const std::vector<Case> cases = {
      {R"("affine": "weight", "param_dtype": 32)", {"param_dtype 32", "JSON number"}},
      {R"("affine": "weight", "param_dtype": "e4m3")", {"param_dtype 'e4m3'", "output"}},
      {R"("param_dtype": "f32")", {"param_dtype 'f32'", "affine is none"}},
      {R"("out_dtype": ["e4m3"])", {"out_dtype [\"e4m3\"]", "JSON array"}},
      {R"("out_dtype": "fp8")", {"out_dtype 'fp8'", "e4m3, e5m2"}},
      {R"("residual": true)", {"residual true", "JSON boolean", "string"}},
      {R"("residual": "f64")", {"residual 'f64'"}},
      {R"("dtype": "bf16", "residual": "f16")", {"residual 'f16'", "x's dtype (bf16)"}},
      {R"("affine": "weight", "weight_offset": "1")", {"weight_offset \"1\"", "JSON string"}},
      {R"("affine": "weight", "weight_offset": 1e300)", {"weight_offset", "float"}},
      {R"("weight_offset": 1)", {"weight_offset 1", "affine is none"}},
      {R"("save_stats": "true")", {"save_stats \"true\"", "JSON string", "true or false"}},
      {R"("save_stats": 1)", {"save_stats 1", "JSON number", "true or false"}},
      {R"("save_stats": true, "save_stats": false)", {"save_stats"}},
  };
  for (const Case& c : cases) {
    const std::string path = manifest("[" + entry + c.fields + "}]");
    for (const char* check : {"", "--check"}) {
      std::vector<std::string> args = {"prewarm", path,          "--arch",
                                       "sm_90",   "--cache-dir", dir_ / "out"};
      if (*check) args.push_back(check);
      const std::string e = single_error(args);
      EXPECT_NE(e.find("entry 0"), npos) << c.fields << ": " << e;
      for (const std::string& m : c.mentions) {
        EXPECT_NE(e.find(m), npos) << c.fields << ": names " << m << ": " << e;
      }
    }
  }
  // The unknown-field message lists every field.
  const std::string e = single_error(
      {"prewarm", manifest("[" + entry + R"("savestats": true}])"), "--arch", "sm_90"});
  for (const char* field :
       {"param_dtype", "out_dtype", "residual", "weight_offset", "save_stats"}) {
    EXPECT_NE(e.find(field), npos) << field << ": " << e;
  }
}

// dump --cache-entry names a compiled kernel: a spec flag beside it (a variant's included) is
// refused rather than silently ignored.
TEST_F(VariantFlags, CacheEntryRefusesEverySpecFlag) {
  const std::string key(64, 'a');
  for (const std::vector<std::string>& flags :
       std::vector<std::vector<std::string>>{{"--save-stats"},
                                             {"--residual"},
                                             {"--out-dtype", "e4m3"},
                                             {"--param-dtype", "f32"},
                                             {"--weight-offset", "1"},
                                             {"--dtype", "bf16"}}) {
    std::vector<std::string> args = {"dump", "--cache-entry", key};
    args.insert(args.end(), flags.begin(), flags.end());
    const std::string error = single_error(args);
    EXPECT_NE(error.find("leave out the spec flags"), npos) << flags[0] << ": " << error;
  }
}

}  // namespace
}  // namespace normjit::testing
