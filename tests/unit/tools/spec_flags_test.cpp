// The spec flags of tools/spec_flags.cpp, in process: the variant flags (--param-dtype,
// --out-dtype, --residual [DTYPE], --weight-offset, --save-stats) reach the spec exactly as its
// canonical text says, without planning or compiling a kernel. The binary's side (help text,
// errors, dump and the manifest) is variant_flags_test.cpp.
#include <gtest/gtest.h>

#include <CLI/CLI.hpp>
#include <string>
#include <vector>

#include "normjit/error.hpp"
#include "normjit/spec.hpp"
#include "tools/commands.hpp"

namespace normjit::testing {
namespace {

constexpr size_t npos = std::string::npos;

// The spec that `normjit dump <args>` would resolve.
NormSpec resolve(std::vector<std::string> args) {
  CLI::App app;
  tools::SpecFlags flags;
  flags.add_to(app, /*required=*/true);
  args.insert(args.begin(), "normjit");
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  app.parse(int(argv.size()), argv.data());
  return flags.resolve();
}

// The message of the normjit::Error that resolving these flags throws.
std::string error_of(const std::vector<std::string>& args) {
  try {
    resolve(args);
  } catch (const Error& e) {
    EXPECT_EQ(int(e.code()), int(ErrorCode::kInvalidArgument)) << e.what();
    return e.what();
  }
  ADD_FAILURE() << "no error thrown";
  return "";
}

const std::vector<std::string> kRms = {"--op",   "rmsnorm",           "--shape",
                                       "4,4096", "--normalized-dims", "1"};

std::vector<std::string> rms(std::vector<std::string> more) {
  std::vector<std::string> args = kRms;
  args.insert(args.end(), more.begin(), more.end());
  return args;
}

TEST(SpecFlags, VariantFlagsGiveTheCanonicalSpec) {
  struct Case {
    std::vector<std::string> args;
    std::string spec;
  };
  const std::string base = "op=rmsnorm shape=4,4096 normalized_dims=1 ";
  const std::vector<Case> cases = {
      {rms({}), base},
      {rms({"--affine", "weight", "--dtype", "bf16", "--param-dtype", "f32"}),
       base + "affine=weight dtype=bf16 param_dtype=f32"},
      {rms({"--out-dtype", "e4m3"}), base + "out_dtype=e4m3"},
      {rms({"--dtype", "f16", "--out-dtype", "e5m2"}), base + "dtype=f16 out_dtype=e5m2"},
      {rms({"--dtype", "bf16", "--out-dtype", "f32"}), base + "dtype=bf16 out_dtype=f32"},
      // A bare --residual is x's dtype, wherever --dtype stands.
      {rms({"--residual", "--dtype", "bf16"}), base + "dtype=bf16 residual=bf16"},
      {rms({"--dtype", "f16", "--residual"}), base + "dtype=f16 residual=f16"},
      {rms({"--residual"}), base + "residual=f32"},
      {rms({"--residual="}), base + "residual=f32"},
      {rms({"--dtype", "bf16", "--residual", "f32"}), base + "dtype=bf16 residual=f32"},
      {rms({"--residual", "--save-stats"}), base + "residual=f32 save_stats=true"},
      {rms({"--affine", "weight", "--weight-offset", "1"}), base + "affine=weight weight_offset=1"},
      {rms({"--affine", "weight", "--weight-offset", "-0.5"}),
       base + "affine=weight weight_offset=-0.5"},
      {rms({"--save-stats"}), base + "save_stats=true"},
      {{"--op", "groupnorm", "--shape", "2,64,8", "--groups", "8", "--save-stats"},
       "op=groupnorm shape=2,64,8 groups=8 save_stats=true"},
      {rms({"--dtype", "bf16", "--affine", "weight", "--param-dtype", "f32", "--out-dtype", "e4m3",
            "--residual", "--weight-offset", "1", "--save-stats"}),
       base + "dtype=bf16 affine=weight param_dtype=f32 out_dtype=e4m3 residual=bf16 "
              "weight_offset=1 save_stats=true"},
      // Values equal to the defaults are the plain spec.
      {rms({"--dtype", "bf16", "--affine", "weight", "--param-dtype", "bf16", "--out-dtype", "bf16",
            "--weight-offset", "0"}),
       base + "dtype=bf16 affine=weight"},
  };
  for (const Case& c : cases) {
    std::string args;
    for (const std::string& a : c.args) args += a + " ";
    const NormSpec got = resolve(c.args);
    const NormSpec want = NormSpec::parse(c.spec);
    EXPECT_EQ(got, want) << args << "\n  got  " << got.to_string() << "\n  want "
                         << want.to_string();
    EXPECT_EQ(got.to_string(), want.to_string()) << args;
  }
}

TEST(SpecFlags, BadVariantValuesNameTheFlagAndValue) {
  struct Case {
    std::vector<std::string> args;
    std::vector<std::string> mentions;
  };
  const std::vector<Case> cases = {
      {rms({"--dtype", "e4m3"}), {"--dtype 'e4m3'", "output dtypes only"}},
      {rms({"--affine", "weight", "--param-dtype", "e5m2"}),
       {"--param-dtype 'e5m2'", "output dtypes only"}},
      {rms({"--affine", "weight", "--param-dtype", ""}), {"--param-dtype ''"}},
      {rms({"--out-dtype", "f64"}), {"--out-dtype 'f64'", "e4m3, e5m2"}},
      {rms({"--out-dtype", ""}), {"--out-dtype ''"}},
      {rms({"--residual", "f64"}), {"--residual 'f64'", "f32, f16, bf16"}},
      {rms({"--residual", "e4m3"}), {"--residual 'e4m3'", "output dtypes only"}},
      {rms({"--residual", ""}), {"--residual ''"}},  // empty is an error, not "bare"
      {rms({"--affine", "weight", "--weight-offset", "one"}), {"--weight-offset 'one'"}},
      {rms({"--affine", "weight", "--weight-offset", "nan"}), {"--weight-offset 'nan'"}},
      {rms({"--affine", "weight", "--weight-offset", ""}), {"--weight-offset ''"}},
      {rms({"--affine", "weight", "--weight-offset", "1e300"}),
       {"--weight-offset '1e300'", "float"}},
      {rms({"--affine", "weight", "--weight-offset", "1e-40"}),
       {"--weight-offset '1e-40'", "float"}},
      // Combinations: checked by the spec, named by its keys.
      {rms({"--param-dtype", "f32"}), {"param_dtype 'f32'", "affine is none"}},
      {rms({"--weight-offset", "1"}), {"weight_offset 1", "affine is none"}},
      {rms({"--dtype", "bf16", "--residual", "f16"}), {"residual 'f16'", "x's dtype (bf16)"}},
      // The trailing-form check of a --residual names the flag; a bare one quotes no dtype.
      {{"--op", "rmsnorm", "--shape", "2,64,8", "--residual"},
       {"invalid --residual: only the trailing forms", "channel form"}},
      {{"--op", "groupnorm", "--shape", "2,64,8", "--groups", "8", "--residual", "f32"},
       {"invalid --residual 'f32': only the trailing forms", "groupnorm does not"}},
      {{"--op", "groupnorm", "--shape", "2,64,8", "--groups", "8", "--residual"},
       {"invalid --residual: only the trailing forms", "groupnorm does not"}},
  };
  for (const Case& c : cases) {
    std::string args;
    for (const std::string& a : c.args) args += a + " ";
    const std::string e = error_of(c.args);
    for (const std::string& m : c.mentions) {
      EXPECT_NE(e.find(m), npos) << args << "\n  names " << m << ": " << e;
    }
  }
}

TEST(SpecFlags, ResidualTakesAtMostOneValue) {
  EXPECT_THROW(resolve(rms({"--residual", "f32", "bf16"})), CLI::ParseError);
  EXPECT_THROW(resolve(rms({"--residual", "f32", "--residual", "f32"})), CLI::ParseError);
}

}  // namespace
}  // namespace normjit::testing
