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

}  // namespace
}  // namespace normjit::testing
