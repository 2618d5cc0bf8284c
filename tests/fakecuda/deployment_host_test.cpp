// The deployment path of docs/deployment.md on the fake driver, in CI: the real `normjit prewarm
// --arch sm_90` (a build machine: no driver touched) fills a directory, and an engine on the fake
// H100 (9.0, 132 multiprocessors, 3352 GB/s: the arch's full-size part, which prewarm plans for
// by default) reads it as a read-only layer with JIT off: every kernel from the disk, none
// compiled. A kernel no layer holds is a kCacheMiss that names the spec; a batch class no layer
// holds is warned about once. tests/gpu/deployment_test.cpp runs the same path on a GPU, with the
// results checked.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <vector>

#include "cache/cache.hpp"
#include "normjit/normjit.hpp"
#include "runtime/device.hpp"
#include "tests/fakecuda/fake_test.hpp"
#include "tests/unit/cache/test_util.hpp"
#include "tests/unit/tools/manifest.hpp"
#include "tests/unit/tools/run_tool.hpp"

namespace normjit::fake_testing {
namespace {

using cache::testing::WarningCapture;

const std::vector<std::string> kSpecs = {
    "op=rmsnorm shape=2,64,32,32 dtype=f32 affine=none",
    "op=rmsnorm shape=3,65,1000 dtype=bf16 affine=weight",
    "op=rmsnorm shape=1,7,65 dtype=f16 affine=none",
};

class FakeDeployment : public FakeDriver {
 protected:
  // The build machine's step, as docs/deployment.md gives it.
  void prewarm(const std::string& dir) {
    const std::string manifest = tmp_ / "manifest.json";
    testing::write_file(manifest, testing::manifest_of(kSpecs));
    const testing::ToolResult r =
        testing::run_tool({"prewarm", manifest, "--arch", "sm_90", "--cache-dir", dir, "-j", "2"},
                          {"NORMJIT_CACHE_READONLY", "NORMJIT_JIT"});
    ASSERT_EQ(r.exit_code, 0) << r.describe();
  }
  EngineOptions served_from(const std::string& layer) const {
    EngineOptions o;
    o.readonly_cache_dirs = {layer};
    o.jit_disabled = true;
    o.cache_dir = writable_.path();
    return o;
  }

  device::PrimaryContext context_;
  TempDir tmp_, writable_;
};

TEST_F(FakeDeployment, APrewarmedDirectoryServesEverySpecWithoutNvrtc) {
  const std::string shipped = tmp_ / "shipped";
  ASSERT_NO_FATAL_FAILURE(prewarm(shipped));
  Engine engine(served_from(shipped));
  for (const std::string& text : kSpecs) {
    const NormSpec spec = spec_of(text);
    const Problem p(spec);
    const Kernel kernel = engine.prepare(spec);
    EXPECT_EQ(kernel.source(), Source::kDisk) << text;
    kernel.launch(p.args(), nullptr);
  }
  EXPECT_EQ(fakecuda::launches().size(), kSpecs.size());
  const EngineCounters c = engine.counters();
  EXPECT_EQ(c.nvrtc_compiles, 0u);
  EXPECT_EQ(c.disk_hits, kSpecs.size());
  EXPECT_EQ(c.bad_entries, 0u);
}

TEST_F(FakeDeployment, AMissWithJitOffNamesTheSpec) {
  const std::string shipped = tmp_ / "shipped";
  ASSERT_NO_FATAL_FAILURE(prewarm(shipped));
  Engine engine(served_from(shipped));
  const NormSpec absent = spec_of("op=rmsnorm shape=2,48,17 dtype=f32 affine=weight");
  try {
    engine.prepare(absent);
    ADD_FAILURE() << "prepare of a spec missing from every layer succeeded with JIT off";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kCacheMiss) << e.what();
    EXPECT_NE(std::string(e.what()).find(absent.to_string()), std::string::npos) << e.what();
  }
  EXPECT_EQ(engine.counters().nvrtc_compiles, 0u);
}

// JIT off, a row spec's other batch class in no layer: the spec's own kernel serves every batch,
// with one warning for the engine, not one a call. A layer with the other class alone is a miss
// that names the spec.
TEST_F(FakeDeployment, AMissingBatchClassIsWarnedAboutOnce) {
  const NormSpec spec = spec_of(kRows);
  const std::string full = tmp_ / "full";
  {
    EngineOptions o;
    o.prewarm = true;
    o.cache_dir = full;
    Engine prewarm(o);
    prewarm.precompile(spec, "sm_90");
  }
  std::vector<std::filesystem::path> entries;
  for (const auto& e : std::filesystem::directory_iterator(full)) {
    if (e.path().extension() == ".entry") entries.push_back(e.path());
  }
  ASSERT_EQ(entries.size(), 2u) << "one entry a batch class";
  int served = 0;
  for (const std::filesystem::path& kept : entries) {
    TempDir layer;
    std::filesystem::copy_file(kept, std::filesystem::path(layer.path()) / kept.filename());
    Engine engine(served_from(layer.path()));
    WarningCapture warnings;
    try {
      const Problem p(spec);
      for (int call = 0; call < 3; ++call) engine.prepare(spec).launch(p.args(), nullptr);
      ++served;
      ASSERT_EQ(warnings.count(), 1u) << warnings.all();
      EXPECT_NE(warnings.messages()[0].find("is in no cache layer and JIT is off"),
                std::string::npos)
          << warnings.all();
      EXPECT_EQ(engine.counters().nvrtc_compiles, 0u);
    } catch (const Error& e) {  // the layer holds the other class alone
      EXPECT_EQ(e.code(), ErrorCode::kCacheMiss) << e.what();
      EXPECT_NE(std::string(e.what()).find(spec.to_string()), std::string::npos) << e.what();
    }
  }
  EXPECT_EQ(served, 1) << "one of the two layers holds the spec's own class";
  EXPECT_EQ(fakecuda::launches().size(), 3u);
}

}  // namespace
}  // namespace normjit::fake_testing
