// `normjit bench --compile`: NVRTC compile times on this machine's CPU, no GPU needed (the
// numbers of docs/compile-latency.md come from it). Checked here: it runs without a GPU, and
// its JSON has each kernel's times and cubin size beside an empty kernel's for scale.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "tests/unit/tools/run_tool.hpp"

namespace normjit::testing {
namespace {

TEST(BenchCompile, TimesEachKernelBesideAnEmptyOne) {
  TempDir cache;
  const ToolResult r = run_tool({"bench", "--compile", "--op", "groupnorm", "--shape", "2,64,7,7",
                                 "--groups", "8", "--arch", "sm_90", "--repeat", "2", "--json"},
                                {"NORMJIT_CACHE_DIR=" + cache.path()});
  ASSERT_EQ(r.exit_code, 0) << r.describe();
  const nlohmann::json doc = nlohmann::json::parse(r.out);
  EXPECT_EQ(doc.at("arch"), "sm_90");
  ASSERT_EQ(doc.at("kernels").size(), 1u) << r.out;
  const nlohmann::json& k = doc["kernels"][0];
  EXPECT_EQ(k.at("strategy"), "row-registers");
  EXPECT_EQ(k.at("repeat"), 2);
  EXPECT_GT(k.at("median_ms").get<double>(), 0.0);
  EXPECT_LE(k.at("min_ms").get<double>(), k.at("max_ms").get<double>());
  const nlohmann::json& e = doc.at("empty_kernel");
  EXPECT_GT(e.at("median_ms").get<double>(), 0.0);
  EXPECT_GT(e.at("cubin_bytes").get<size_t>(), 0u);
  // The normalization kernel has code; the empty one has none.
  EXPECT_GT(k.at("cubin_bytes").get<size_t>(), e.at("cubin_bytes").get<size_t>());
}

// --specs: every spec of the file, in its order, comment and blank lines skipped.
TEST(BenchCompile, TimesEverySpecOfASpecsFile) {
  TempDir dir, cache;
  const std::string path = dir / "specs.txt";
  write_file(path,
             "# two kernels\n"
             "op=rmsnorm shape=1,4096 dtype=bf16 normalized_dims=1 affine=weight\n"
             "\n"
             "  op=layernorm shape=3,1000 dtype=f32 normalized_dims=1 affine=both\n");
  const ToolResult r = run_tool(
      {"bench", "--compile", "--specs", path, "--arch", "sm_90", "--repeat", "1", "--json"},
      {"NORMJIT_CACHE_DIR=" + cache.path()});
  ASSERT_EQ(r.exit_code, 0) << r.describe();
  const nlohmann::json doc = nlohmann::json::parse(r.out);
  ASSERT_EQ(doc.at("kernels").size(), 2u) << r.out;
  EXPECT_NE(doc["kernels"][0].at("spec").get<std::string>().find("op=rmsnorm shape=1,4096"),
            std::string::npos)
      << r.out;
  EXPECT_NE(doc["kernels"][1].at("spec").get<std::string>().find("op=layernorm shape=3,1000"),
            std::string::npos)
      << r.out;
}

// A spec the generator does not cover in a --specs file: reported beside the others, which are
// all compiled, as bench on the GPU does (it stopped the run at that line, naming neither).
TEST(BenchCompile, ASpecNotYetSupportedIsReportedAndTheRestCompiled) {
  TempDir dir, cache;
  const std::string path = dir / "specs.txt";
  write_file(path,
             "op=groupnorm shape=2,8192,8,8 dtype=bf16 groups=32 layout=nhwc backward=true\n"
             "op=rmsnorm shape=1,4096 dtype=bf16 normalized_dims=1 affine=weight\n");
  const ToolResult r = run_tool(
      {"bench", "--compile", "--specs", path, "--arch", "sm_90", "--repeat", "1", "--json"},
      {"NORMJIT_CACHE_DIR=" + cache.path()});
  ASSERT_EQ(r.exit_code, 0) << r.describe();
  const nlohmann::json doc = nlohmann::json::parse(r.out);
  ASSERT_EQ(doc.at("kernels").size(), 2u) << r.out;
  EXPECT_EQ(doc["kernels"][0].at("error_code"), "unsupported") << r.out;
  EXPECT_NE(doc["kernels"][0].at("error").get<std::string>().find("8192"), std::string::npos);
  EXPECT_GT(doc["kernels"][1].at("median_ms").get<double>(), 0.0) << r.out;
  const ToolResult text =
      run_tool({"bench", "--compile", "--specs", path, "--arch", "sm_90", "--repeat", "1"},
               {"NORMJIT_CACHE_DIR=" + cache.path()});
  EXPECT_EQ(text.exit_code, 0) << text.describe();
  EXPECT_NE(text.out.find("not yet supported"), std::string::npos) << text.describe();
}

// A spec flag beside --seeds, --specs or --jit-latency, which bring their own specs: refused,
// naming it (it was dropped without a word); a --specs path that is a directory or never ends:
// refused, naming it, before it fills memory.
TEST(BenchCompile, FlagsAndFilesItCannotUseAreNamed) {
  TempDir dir;
  const std::string path = dir / "specs.txt";
  write_file(path, "op=rmsnorm shape=1,4096 dtype=bf16 normalized_dims=1\n");
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"bench", "--compile", "--seeds", "--dtype", "bf16", "--arch", "sm_90"},
       "--dtype describes the spec of --op and --shape; it does not apply to --seeds"},
      {{"bench", "--compile", "--seeds", "--groups", "3", "--arch", "sm_90"}, "--groups"},
      {{"bench", "--compile", "--specs", path, "--backward", "--arch", "sm_90"},
       "--backward describes the spec of --op and --shape; it does not apply to --specs"},
      {{"bench", "--jit-latency", "--dtype", "bf16"}, "it does not apply to --jit-latency"},
      {{"bench", "--compile", "--specs", dir.path(), "--arch", "sm_90"},
       "invalid --specs '" + dir.path() + "': cannot be read (Is a directory)"},
      {{"bench", "--compile", "--specs", "/dev/zero", "--arch", "sm_90"},
       "invalid --specs '/dev/zero': is larger than 16 MiB"}};
  for (const auto& [args, message] : cases) {
    const ToolResult r = run_tool(args);
    EXPECT_EQ(r.exit_code, 1) << r.describe();
    EXPECT_NE(r.err.find(message), std::string::npos) << r.describe();
  }
}

}  // namespace
}  // namespace normjit::testing
