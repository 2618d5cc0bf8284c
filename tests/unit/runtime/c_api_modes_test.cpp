// The C API honours its modes and names bad arguments before anything needs a device: on a
// machine without a GPU, a NULL x is "invalid argument: x", not "no device"; with the JIT
// off, precompile refuses to compile; the prepared-kernel calls check their arguments.
#include <gtest/gtest.h>

#include <cstring>
#include <initializer_list>
#include <string>

#include "normjit/normjit.h"
#include "normjit/normjit.hpp"
#include "tests/unit/temp_dir.hpp"

namespace normjit {
namespace {

bool mentions(const char* needle) {
  return std::string(normjit_last_error()).find(needle) != std::string::npos;
}

class CApiModes : public ::testing::Test {
 protected:
  void SetUp() override {
    normjit_engine_options o;
    normjit_engine_options_init(&o);
    o.cache_dir = dir_.path().c_str();
    o.jit_disabled = jit_disabled_;
    ASSERT_EQ(normjit_engine_create(&o, &engine_), NORMJIT_OK) << normjit_last_error();
  }
  void TearDown() override { normjit_engine_destroy(engine_); }

  testing::TempDir dir_;
  bool jit_disabled_ = false;
  normjit_engine* engine_ = nullptr;
};

class CApiJitOff : public CApiModes {
 protected:
  CApiJitOff() { jit_disabled_ = true; }
};

TEST_F(CApiModes, NullPointersAreNamedBeforeADeviceIsNeeded) {
  const int64_t shape[] = {8, 64, 32, 32};
  char fake[64];
  normjit_status s =
      normjit_rmsnorm(engine_, nullptr, fake, nullptr, shape, 4, 0, NORMJIT_F32, 1e-5, nullptr);
  EXPECT_EQ(s, NORMJIT_ERROR_INVALID_ARGUMENT) << normjit_last_error();
  EXPECT_TRUE(mentions("invalid x ")) << normjit_last_error();
  s = normjit_layernorm(engine_, fake, nullptr, fake, fake, shape, 4, 3, NORMJIT_BF16, 1e-5,
                        nullptr);
  EXPECT_EQ(s, NORMJIT_ERROR_INVALID_ARGUMENT) << normjit_last_error();
  EXPECT_TRUE(mentions("invalid y")) << normjit_last_error();
  // A bias without a weight, and an eps that is no float, are named too.
  s = normjit_groupnorm(engine_, fake, fake, nullptr, fake, shape, 4, 8, NORMJIT_F16, 1e-5,
                        nullptr);
  EXPECT_EQ(s, NORMJIT_ERROR_INVALID_ARGUMENT) << normjit_last_error();
  EXPECT_TRUE(mentions("invalid weight ")) << normjit_last_error();
}

TEST_F(CApiModes, PreparedKernelCallsCheckTheirArguments) {
  normjit_kernel* kernel = nullptr;
  EXPECT_EQ(normjit_prepare(engine_, nullptr, &kernel), NORMJIT_ERROR_INVALID_ARGUMENT);
  EXPECT_TRUE(mentions("spec")) << normjit_last_error();
  EXPECT_EQ(normjit_prepare(engine_, "op=rmsnorm shape=8,64", nullptr),
            NORMJIT_ERROR_INVALID_ARGUMENT);
  EXPECT_TRUE(mentions("out")) << normjit_last_error();
  EXPECT_EQ(normjit_prepare(nullptr, "op=rmsnorm shape=8,64", &kernel),
            NORMJIT_ERROR_INVALID_ARGUMENT);
  EXPECT_TRUE(mentions("engine")) << normjit_last_error();
  EXPECT_EQ(normjit_prepare(engine_, "op=rmsnorm shape=8,64 dtype=f64", &kernel),
            NORMJIT_ERROR_INVALID_ARGUMENT);
  EXPECT_TRUE(mentions("f64")) << normjit_last_error();
  EXPECT_EQ(kernel, nullptr);
  char fake[64];
  EXPECT_EQ(normjit_launch(nullptr, fake, fake, nullptr, nullptr, 1, 1e-5, nullptr),
            NORMJIT_ERROR_INVALID_ARGUMENT);
  EXPECT_TRUE(mentions("invalid kernel ")) << normjit_last_error();
  if (!gpu_available()) {
    EXPECT_EQ(normjit_prepare(engine_, "op=rmsnorm shape=8,64 normalized_dims=1", &kernel),
              NORMJIT_ERROR_NO_DEVICE);
    return;
  }
  ASSERT_EQ(normjit_prepare(engine_, "op=rmsnorm shape=8,64 normalized_dims=1", &kernel),
            NORMJIT_OK)
      << normjit_last_error();
  normjit_kernel* again = nullptr;
  ASSERT_EQ(normjit_prepare(engine_, "op=rmsnorm shape=3,64 normalized_dims=1", &again),
            NORMJIT_OK);
  EXPECT_EQ(again, kernel) << "one handle per loaded kernel, whatever the batch";
  EXPECT_EQ(normjit_launch(kernel, fake, fake, nullptr, nullptr, 1, 1e-300, nullptr),
            NORMJIT_ERROR_INVALID_ARGUMENT);
  EXPECT_TRUE(mentions("invalid eps ")) << normjit_last_error();
  EXPECT_EQ(normjit_launch(kernel, nullptr, fake, nullptr, nullptr, 1, 1e-5, nullptr),
            NORMJIT_ERROR_INVALID_ARGUMENT);
  EXPECT_TRUE(mentions("invalid x ")) << normjit_last_error();
}

TEST_F(CApiJitOff, PrecompileRefusesToCompileAndNamesTheSpec) {
  int compiled = -1;
  const normjit_status s =
      normjit_precompile(engine_, "op=rmsnorm shape=8,64,32,32 dtype=f32", "sm_90", &compiled);
  EXPECT_EQ(s, NORMJIT_ERROR_CACHE_MISS) << normjit_last_error();
  EXPECT_TRUE(mentions("op=rmsnorm shape=8,64,32,32")) << normjit_last_error();
  EXPECT_TRUE(mentions("NORMJIT_JIT=off")) << normjit_last_error();
  EXPECT_TRUE(mentions("prewarm it with --arch sm_90)")) << normjit_last_error();
  // The target as planned, its count and bandwidth included where they are not the full-size
  // part's: what prewarm's --arch must name for the same kernel.
  EXPECT_EQ(normjit_precompile(engine_, "op=groupnorm shape=2,8,65536 groups=2 backward=true",
                               "sm_90:132:4814", &compiled),
            NORMJIT_ERROR_CACHE_MISS);
  EXPECT_TRUE(mentions("for sm_90:132:4814, key ")) << normjit_last_error();
  EXPECT_TRUE(mentions("--arch sm_90:132:4814)")) << normjit_last_error();
  EXPECT_EQ(compiled, -1) << "nothing reported as compiled";
  uint64_t compiles = 99;
  ASSERT_EQ(normjit_engine_counters(engine_, &compiles, nullptr, nullptr), NORMJIT_OK);
  EXPECT_EQ(compiles, 0u);
}

TEST(CApiJitOffAfterPrewarm, PrecompileOfACachedKernelSucceedsWithoutCompiling) {
  // The same engine settings find what an earlier (JIT on) run compiled: JIT off forbids
  // compiling only, not cache hits.
  testing::TempDir dir;
  normjit_engine_options o;
  normjit_engine_options_init(&o);
  o.cache_dir = dir.path().c_str();
  normjit_engine* on = nullptr;
  ASSERT_EQ(normjit_engine_create(&o, &on), NORMJIT_OK);
  int compiled = 0;
  ASSERT_EQ(normjit_precompile(on, "op=rmsnorm shape=8,64 normalized_dims=1", "sm_90", &compiled),
            NORMJIT_OK)
      << normjit_last_error();
  EXPECT_EQ(compiled, 1);
  normjit_engine_destroy(on);
  o.jit_disabled = 1;
  normjit_engine* off = nullptr;
  ASSERT_EQ(normjit_engine_create(&o, &off), NORMJIT_OK);
  EXPECT_EQ(normjit_precompile(off, "op=rmsnorm shape=8,64 normalized_dims=1", "sm_90", &compiled),
            NORMJIT_OK)
      << normjit_last_error();
  EXPECT_EQ(compiled, 0);
  normjit_engine_destroy(off);
}

// Precompiles `prewarmed` into a fresh cache folder with JIT on (expecting `kernels` compiles:
// one per batch class), then asks a JIT-off engine on that folder for each spec of `served`,
// which must all be found there.
void expect_prewarm_serves(const char* prewarmed, uint64_t kernels,
                           std::initializer_list<const char*> served) {
  testing::TempDir dir;
  normjit_engine_options o;
  normjit_engine_options_init(&o);
  o.cache_dir = dir.path().c_str();
  normjit_engine* on = nullptr;
  ASSERT_EQ(normjit_engine_create(&o, &on), NORMJIT_OK);
  int compiled = 0;
  ASSERT_EQ(normjit_precompile(on, prewarmed, "sm_90", &compiled), NORMJIT_OK)
      << normjit_last_error();
  EXPECT_EQ(compiled, 1);
  uint64_t compiles = 0;
  ASSERT_EQ(normjit_engine_counters(on, &compiles, nullptr, nullptr), NORMJIT_OK);
  EXPECT_EQ(compiles, kernels) << prewarmed << ": one kernel per batch class";
  normjit_engine_destroy(on);
  o.jit_disabled = 1;
  normjit_engine* off = nullptr;
  ASSERT_EQ(normjit_engine_create(&o, &off), NORMJIT_OK);
  for (const char* spec : served) {
    compiled = -1;
    EXPECT_EQ(normjit_precompile(off, spec, "sm_90", &compiled), NORMJIT_OK)
        << spec << ": " << normjit_last_error();
    EXPECT_EQ(compiled, 0) << spec;
  }
  normjit_engine_destroy(off);
}

TEST(CApiJitOffAfterPrewarm, APrewarmedSpecServesEveryBatchClass) {
  // A bf16 LayerNorm row kernel is planned apart for launches of at most 512 rows: precompiling
  // a spec of 8 rows compiles both kernels, so a JIT-off engine finds the one of 1000 rows.
  expect_prewarm_serves(
      "op=layernorm shape=8,4096 dtype=bf16", 2,
      {"op=layernorm shape=1000,4096 dtype=bf16", "op=layernorm shape=1,4096 dtype=bf16"});
}

TEST(CApiJitOffAfterPrewarm, APrewarmedBackwardIsOneKernelForEveryBatch) {
  // The backward of bf16 rows of 4096 (teams of 256 threads, two a CTA whatever the rows) has
  // one plan for every batch: precompiling a spec of 1024 rows compiles one kernel, and a JIT-off
  // engine finds it for 4096 rows and for one row.
  expect_prewarm_serves("op=layernorm shape=1024,4096 dtype=bf16 backward=true", 1,
                        {"op=layernorm shape=4096,4096 dtype=bf16 backward=true",
                         "op=layernorm shape=1,4096 dtype=bf16 backward=true"});
}

// normjit_engine_config: _init sets its size and the defaults; create_ex takes it, refuses a
// NULL or uninitialised one and a newer caller's unknown fields, and names a bandwidth out of
// range. (That the bandwidth reaches the plan needs a GPU: tests/gpu/backward_channels_test.cpp.)
TEST(CApiEngineConfig, InitCreatesAndRefusesNamingTheField) {
  testing::TempDir dir;
  normjit_engine_config config;
  std::memset(&config, 0x5a, sizeof config);
  normjit_engine_config_init(&config);
  EXPECT_EQ(config.size, sizeof(normjit_engine_config));
  EXPECT_EQ(config.dram_gbps, 0);
  EXPECT_EQ(config.options.device, 0);
  EXPECT_EQ(config.options.cache_dir, nullptr);
  normjit_engine_config_init(nullptr);  // ignored
  config.options.cache_dir = dir.path().c_str();
  config.dram_gbps = 4814;
  normjit_engine* engine = nullptr;
  ASSERT_EQ(normjit_engine_create_ex(&config, &engine), NORMJIT_OK) << normjit_last_error();
  ASSERT_NE(engine, nullptr);
  normjit_engine_destroy(engine);

  for (int bad : {-1, 1000001}) {
    config.dram_gbps = bad;
    engine = nullptr;
    EXPECT_EQ(normjit_engine_create_ex(&config, &engine), NORMJIT_ERROR_INVALID_ARGUMENT);
    EXPECT_EQ(engine, nullptr);
    EXPECT_TRUE(mentions("dram_gbps")) << normjit_last_error();
    EXPECT_TRUE(mentions(std::to_string(bad).c_str())) << normjit_last_error();
  }
  config.dram_gbps = 0;
  config.options.device = -2;  // the options' own checks apply as in normjit_engine_create
  EXPECT_EQ(normjit_engine_create_ex(&config, &engine), NORMJIT_ERROR_INVALID_ARGUMENT);
  EXPECT_TRUE(mentions("device")) << normjit_last_error();
  config.options.device = 0;

  EXPECT_EQ(normjit_engine_create_ex(nullptr, &engine), NORMJIT_ERROR_INVALID_ARGUMENT);
  EXPECT_TRUE(mentions("normjit_engine_config_init")) << normjit_last_error();
  EXPECT_EQ(normjit_engine_create_ex(&config, nullptr), NORMJIT_ERROR_INVALID_ARGUMENT);
  EXPECT_TRUE(mentions("out")) << normjit_last_error();
  config.size = 8;  // not initialised with _init
  EXPECT_EQ(normjit_engine_create_ex(&config, &engine), NORMJIT_ERROR_INVALID_ARGUMENT);
  EXPECT_TRUE(mentions("config.size")) << normjit_last_error();

  // A newer header's struct: longer, with a field this library does not know set.
  struct {
    normjit_engine_config known;
    int later;
  } newer;
  std::memset(&newer, 0, sizeof newer);
  normjit_engine_config_init(&newer.known);
  newer.known.size = sizeof newer;
  newer.known.options.memory_only = 1;
  EXPECT_EQ(normjit_engine_create_ex(&newer.known, &engine), NORMJIT_OK) << normjit_last_error();
  normjit_engine_destroy(engine);
  newer.later = 1;
  EXPECT_EQ(normjit_engine_create_ex(&newer.known, &engine), NORMJIT_ERROR_UNSUPPORTED);
  EXPECT_TRUE(mentions("normjit_engine_config")) << normjit_last_error();
}

}  // namespace
}  // namespace normjit
