// `normjit bench --compile`: NVRTC compile times on this machine's CPU, no GPU needed (the
// numbers of docs/compile-latency.md come from it). Checked here: it runs without a GPU, and
// its JSON has each kernel's times and cubin size beside an empty kernel's for scale.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>

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

}  // namespace
}  // namespace normjit::testing
