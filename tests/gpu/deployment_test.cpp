// The deployment path of docs/deployment.md, end to end: the real `normjit prewarm` fills a
// directory for this GPU's architecture (as the build machine would, without touching the
// driver), then an engine that reads it as a read-only layer with JIT off prepares and
// launches every spec of the manifest correctly with zero NVRTC calls. A kernel the directory
// lacks is a kCacheMiss that names the spec, never a silent compile: host logic alone, tested on
// the fake driver (tests/fakecuda/deployment_host_test.cpp), in CI.
#include <cstdlib>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "harness.hpp"
#include "tests/unit/tools/run_tool.hpp"

namespace normjit::testing {
namespace {

// Channel-form rmsnorm (the form every build implements): several shapes, every dtype, with
// and without weight, one batch size per spec.
const std::vector<std::string> kSpecs = {
    "op=rmsnorm shape=2,64,32,32 dtype=f32 affine=none",
    "op=rmsnorm shape=3,65,1000 dtype=bf16 affine=weight",
    "op=rmsnorm shape=1,7,65 dtype=f16 affine=none",
    "op=rmsnorm shape=4,256,1024 dtype=f32 affine=weight",
    "op=rmsnorm shape=5,31,4097 dtype=bf16 affine=none",
};

std::string manifest_json(const std::vector<std::string>& specs) {
  std::string out = "[\n";
  for (size_t i = 0; i < specs.size(); ++i) {
    const NormSpec s = NormSpec::parse(specs[i]);
    out += std::string("  {\"op\": \"") + to_string(s.op) + "\", \"shape\": [" +
           format_shape(s.shape) + "], \"dtype\": \"" + to_string(s.dtype) + "\", \"affine\": \"" +
           to_string(s.affine) + "\"}" + (i + 1 < specs.size() ? ",\n" : "\n");
  }
  return out + "]\n";
}

// Sets environment variables for one scope, restoring what was there.
class ScopedEnv {
 public:
  void set(const std::string& name, const std::string& value) {
    const char* old = std::getenv(name.c_str());
    saved_.push_back({name, old ? std::optional<std::string>(old) : std::nullopt});
    ::setenv(name.c_str(), value.c_str(), /*overwrite=*/1);
  }
  ~ScopedEnv() {
    for (auto it = saved_.rbegin(); it != saved_.rend(); ++it) {
      if (it->second) {
        ::setenv(it->first.c_str(), it->second->c_str(), 1);
      } else {
        ::unsetenv(it->first.c_str());
      }
    }
  }

 private:
  std::vector<std::pair<std::string, std::optional<std::string>>> saved_;
};

class Deployment : public ::testing::Test {
 protected:
  void SetUp() override {
    NORMJIT_REQUIRE_GPU();
    context_.emplace(0);
    arch_ = "sm_" +
            std::to_string(context_->attribute(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR) * 10 +
                           context_->attribute(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR));
  }

  // The build machine's step: `normjit prewarm MANIFEST --arch <this GPU> --cache-dir DIR`.
  void prewarm(const std::string& dir) {
    const std::string manifest = tmp_ / "manifest.json";
    write_file(manifest, manifest_json(kSpecs));
    const ToolResult r =
        run_tool({"prewarm", manifest, "--arch", arch_, "--cache-dir", dir, "-j", "4"},
                 {"NORMJIT_CACHE_READONLY", "NORMJIT_JIT"});
    ASSERT_EQ(r.exit_code, 0) << r.describe();
    const ToolResult check =
        run_tool({"prewarm", manifest, "--arch", arch_, "--cache-dir", dir, "--check"});
    ASSERT_EQ(check.exit_code, 0) << "the image's CI check passes\n" << check.describe();
  }

  // The production step: every spec served from the shipped layer, correct, no NVRTC.
  void expect_served_without_nvrtc(Engine& engine) {
    uint64_t seed = 1;
    for (const std::string& text : kSpecs) {
      const NormSpec spec = NormSpec::parse(text);
      const Kernel kernel = engine.prepare(spec);
      EXPECT_EQ(kernel.source(), Source::kDisk) << spec.to_string();
      const RunResult r = run_and_compare(engine, spec, Values::kNormal, seed++);
      EXPECT_TRUE(r.all_finite) << spec.to_string();
      EXPECT_LT(r.rel_error, tolerance(spec.dtype)) << spec.to_string();
    }
    const EngineCounters c = engine.counters();
    EXPECT_EQ(c.nvrtc_compiles, 0u);
    EXPECT_EQ(c.disk_hits, kSpecs.size());
    EXPECT_EQ(c.bad_entries, 0u);
  }

  std::optional<device::PrimaryContext> context_;
  std::string arch_;
  TempDir tmp_;
};

TEST_F(Deployment, PrewarmedDirectoryServesEverySpecWithoutNvrtc) {
  const std::string shipped = tmp_ / "shipped";
  ASSERT_NO_FATAL_FAILURE(prewarm(shipped));
  TempDir writable;
  EngineOptions options;
  options.readonly_cache_dirs = {shipped};
  options.jit_disabled = true;
  options.cache_dir = writable.path();
  Engine engine(options);
  expect_served_without_nvrtc(engine);
}

// Exactly the documented configuration: environment variables only, default EngineOptions.
TEST_F(Deployment, EnvironmentVariablesOfTheDocs) {
  const std::string shipped = tmp_ / "shipped";
  ASSERT_NO_FATAL_FAILURE(prewarm(shipped));
  TempDir writable;
  ScopedEnv env;
  env.set("NORMJIT_CACHE_READONLY", shipped);
  env.set("NORMJIT_JIT", "off");
  env.set("NORMJIT_CACHE_DIR", writable.path());
  Engine engine;
  expect_served_without_nvrtc(engine);
}

// JIT off, a row spec's other batch class in no layer: the spec's own kernel serves every
// batch, with one warning for the engine, not one a call (each call probed every layer for
// the other class again and warned again). A layer with the other class alone is a miss that
// names the spec.
TEST_F(Deployment, AMissingBatchClassIsWarnedAboutOnce) {
  const NormSpec spec =
      NormSpec::parse("op=rmsnorm shape=4,4096 dtype=bf16 normalized_dims=1 affine=weight");
  const std::string full = tmp_ / "full";
  {
    EngineOptions o;
    o.prewarm = true;
    o.cache_dir = full;
    Engine prewarm(o);
    prewarm.precompile(spec, arch_);
  }
  std::vector<std::filesystem::path> entries;
  for (const auto& e : std::filesystem::directory_iterator(full)) {
    if (e.path().extension() == ".entry") entries.push_back(e.path());
  }
  ASSERT_EQ(entries.size(), 2u) << "one entry a batch class";
  int served = 0;
  for (const std::filesystem::path& kept : entries) {
    TempDir layer, writable;
    std::filesystem::copy_file(kept, std::filesystem::path(layer.path()) / kept.filename());
    EngineOptions o;
    o.readonly_cache_dirs = {layer.path()};
    o.jit_disabled = true;
    o.cache_dir = writable.path();
    Engine engine(o);
    std::vector<std::string> warnings;
    cache::set_warning_sink([&](const std::string& message) { warnings.push_back(message); });
    try {
      for (int call = 0; call < 3; ++call) {
        const RunResult r = run_and_compare(engine, spec, Values::kNormal, 11 + call);
        EXPECT_TRUE(r.all_finite);
        EXPECT_LT(r.rel_error, tolerance(spec.dtype));
      }
      ++served;
      EXPECT_EQ(warnings.size(), 1u);
      for (const std::string& w : warnings) {
        EXPECT_NE(w.find("is in no cache layer and JIT is off"), std::string::npos) << w;
      }
      EXPECT_EQ(engine.counters().nvrtc_compiles, 0u);
    } catch (const Error& e) {  // the layer holds the other class alone
      EXPECT_EQ(e.code(), ErrorCode::kCacheMiss) << e.what();
      EXPECT_NE(std::string(e.what()).find(spec.to_string()), std::string::npos) << e.what();
    }
    cache::set_warning_sink(nullptr);
  }
  EXPECT_EQ(served, 1) << "one of the two layers holds the spec's own class";
}

}  // namespace
}  // namespace normjit::testing
