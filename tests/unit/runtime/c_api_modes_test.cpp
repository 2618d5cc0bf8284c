// The C API honours its modes and names bad arguments before anything needs a device: on a
// machine without a GPU, a NULL x is "invalid argument: x", not "no device"; with the JIT
// off, precompile refuses to compile; the prepared-kernel calls check their arguments.
#include <gtest/gtest.h>

#include <cstddef>
#include <cstring>
#include <filesystem>
#include <fstream>
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
  // *out is NULL after any failure, a NULL engine's included (it was left as it was).
  kernel = reinterpret_cast<normjit_kernel*>(uintptr_t{0x1234});
  EXPECT_EQ(normjit_prepare(nullptr, "op=rmsnorm shape=8,64", &kernel),
            NORMJIT_ERROR_INVALID_ARGUMENT);
  EXPECT_TRUE(mentions("engine")) << normjit_last_error();
  EXPECT_EQ(kernel, nullptr);
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
  EXPECT_EQ(config.no_readonly_dirs, 0);
  EXPECT_EQ(config.options.device, 0);
  EXPECT_EQ(config.options.cache_dir, nullptr);
  (normjit_engine_config_init)(nullptr);  // ignored, as by the sized form
  normjit_engine_config_init_sized(nullptr, sizeof(normjit_engine_config));
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

  // A prewarm engine's read-only layers are refused by the C field's name (and the others by
  // their own, the same in C and C++).
  config.size = sizeof config;
  config.prewarm = 1;
  config.options.readonly_dirs = "/nonexistent/ro";
  EXPECT_EQ(normjit_engine_create_ex(&config, &engine), NORMJIT_ERROR_INVALID_ARGUMENT);
  EXPECT_TRUE(mentions("options.readonly_dirs '/nonexistent/ro'")) << normjit_last_error();
  EXPECT_FALSE(mentions("readonly_cache_dirs")) << normjit_last_error();
  config.options.readonly_dirs = nullptr;
  config.options.jit_disabled = 1;
  EXPECT_EQ(normjit_engine_create_ex(&config, &engine), NORMJIT_ERROR_INVALID_ARGUMENT);
  EXPECT_TRUE(mentions("jit_disabled")) << normjit_last_error();
  config.options.jit_disabled = 0;
  config.prewarm = 0;

  // no_readonly_dirs with read-only layers named: a contradiction, named by the C fields.
  config.no_readonly_dirs = 1;
  config.options.readonly_dirs = "/nonexistent/ro";
  EXPECT_EQ(normjit_engine_create_ex(&config, &engine), NORMJIT_ERROR_INVALID_ARGUMENT);
  EXPECT_TRUE(mentions("options.readonly_dirs '/nonexistent/ro'")) << normjit_last_error();
  EXPECT_TRUE(mentions("no_readonly_dirs")) << normjit_last_error();
  config.options.readonly_dirs = "";  // "" is the variable's: no contradiction
  ASSERT_EQ(normjit_engine_create_ex(&config, &engine), NORMJIT_OK) << normjit_last_error();
  normjit_engine_destroy(engine);
  config.options.readonly_dirs = nullptr;
  config.no_readonly_dirs = 0;

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

// normjit_version is the header's version (CMakeLists.txt holds the project's to it), and
// leaves the latest error for the caller to read.
// Whether every byte of `s` from `from` on is still `fill`.
template <class T>
bool untouched_from(const T& s, size_t from, unsigned char fill) {
  const unsigned char* bytes = reinterpret_cast<const unsigned char*>(&s);
  for (size_t i = from; i < sizeof s; ++i) {
    if (bytes[i] != fill) return false;
  }
  return true;
}

// The plain _init functions (in parentheses: not the macros) are what programs built before the
// macros call, with a struct of their header's size, which may be the first published one: they
// write that version alone (a program built then had fewer bytes than this library's sizeof: the
// write past them overran its stack), and what they write is taken by the struct's consumer.
TEST(CApiSizedStructs, ThePlainInitFunctionsWriteTheFirstPublishedVersionAlone) {
  constexpr unsigned char kFill = 0x5a;
  normjit_engine_config config;
  std::memset(&config, kFill, sizeof config);
  (normjit_engine_config_init)(&config);
  const size_t first_config =
      offsetof(normjit_engine_config, dram_gbps) + sizeof(normjit_engine_config::dram_gbps);
  EXPECT_LT(first_config, sizeof config);  // the struct has grown since: the case that overran
  EXPECT_EQ(config.size, first_config);
  EXPECT_EQ(config.dram_gbps, 0);
  EXPECT_EQ(config.options.cache_dir, nullptr);
  EXPECT_TRUE(untouched_from(config, first_config, kFill));
  testing::TempDir dir;
  config.options.cache_dir = dir.path().c_str();
  normjit_engine* engine = nullptr;
  EXPECT_EQ(normjit_engine_create_ex(&config, &engine), NORMJIT_OK) << normjit_last_error();
  normjit_engine_destroy(engine);

  normjit_launch_args launch;
  std::memset(&launch, kFill, sizeof launch);
  (normjit_launch_args_init)(&launch);
  const size_t first_launch = offsetof(normjit_launch_args, residual_out_strides) +
                              sizeof(normjit_launch_args::residual_out_strides);
  EXPECT_EQ(launch.size, first_launch);
  EXPECT_EQ(launch.eps, 1e-5);
  EXPECT_EQ(launch.inner_rows, 1);
  EXPECT_TRUE(untouched_from(launch, first_launch, kFill));

  normjit_backward_args backward;
  std::memset(&backward, kFill, sizeof backward);
  (normjit_backward_args_init)(&backward);
  const size_t first_backward =
      offsetof(normjit_backward_args, batch) + sizeof(normjit_backward_args::batch);
  EXPECT_LT(first_backward, sizeof backward);  // dresidual_out came later
  EXPECT_EQ(backward.size, first_backward);
  EXPECT_EQ(backward.x, nullptr);
  EXPECT_EQ(backward.batch, 0);
  EXPECT_TRUE(untouched_from(backward, first_backward, kFill));

  normjit_engine_stats stats;
  std::memset(&stats, kFill, sizeof stats);
  (normjit_engine_stats_init)(&stats);
  const size_t first_stats =
      offsetof(normjit_engine_stats, bad_entries) + sizeof(normjit_engine_stats::bad_entries);
  EXPECT_EQ(stats.size, first_stats);
  EXPECT_EQ(stats.bad_entries, 0u);
  EXPECT_TRUE(untouched_from(stats, first_stats, kFill));
}

TEST(CApiVersion, TheLibraryReportsTheHeadersVersion) {
  const std::string header = std::to_string(NORMJIT_VERSION_MAJOR) + "." +
                             std::to_string(NORMJIT_VERSION_MINOR) + "." +
                             std::to_string(NORMJIT_VERSION_PATCH);
  EXPECT_EQ(std::string(normjit_version()), header);
  ASSERT_EQ(normjit_engine_create(nullptr, nullptr), NORMJIT_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(normjit_version(), nullptr);
  EXPECT_TRUE(mentions("out")) << normjit_last_error();
}

normjit_engine* engine_over(const std::string& cache_dir) {
  normjit_engine_options o;
  normjit_engine_options_init(&o);
  o.cache_dir = cache_dir.c_str();
  normjit_engine* engine = nullptr;
  EXPECT_EQ(normjit_engine_create(&o, &engine), NORMJIT_OK) << normjit_last_error();
  return engine;
}

// normjit_engine_stats: _init sets its size and zeros; normjit_engine_counters_ex fills it with
// what normjit_engine_counters gives and bad_entries, names a NULL engine and a NULL or
// uninitialised struct, and writes nothing past the fields it knows.
TEST(CApiEngineStats, CountersExFillsTheStructAndRefusesNamingTheArgument) {
  normjit_engine_stats stats;
  std::memset(&stats, 0x5a, sizeof stats);
  normjit_engine_stats_init(&stats);
  EXPECT_EQ(stats.size, sizeof(normjit_engine_stats));
  EXPECT_EQ(stats.nvrtc_compiles, 0u);
  EXPECT_EQ(stats.memory_hits, 0u);
  EXPECT_EQ(stats.disk_hits, 0u);
  EXPECT_EQ(stats.bad_entries, 0u);
  (normjit_engine_stats_init)(nullptr);  // ignored, as by the sized form
  normjit_engine_stats_init_sized(nullptr, sizeof(normjit_engine_stats));

  testing::TempDir dir;
  normjit_engine* engine = engine_over(dir.path());
  ASSERT_NE(engine, nullptr);
  std::memset(&stats, 0x5a, sizeof stats);  // every counter is written
  stats.size = sizeof stats;
  ASSERT_EQ(normjit_engine_counters_ex(engine, &stats), NORMJIT_OK) << normjit_last_error();
  EXPECT_EQ(stats.size, sizeof(normjit_engine_stats));
  EXPECT_EQ(stats.nvrtc_compiles, 0u);
  EXPECT_EQ(stats.memory_hits, 0u);
  EXPECT_EQ(stats.disk_hits, 0u);
  EXPECT_EQ(stats.bad_entries, 0u);

  int compiled = 0;
  ASSERT_EQ(
      normjit_precompile(engine, "op=rmsnorm shape=8,64 normalized_dims=1", "sm_90", &compiled),
      NORMJIT_OK)
      << normjit_last_error();
  uint64_t compiles = 0, memory_hits = 99, disk_hits = 99;
  ASSERT_EQ(normjit_engine_counters(engine, &compiles, &memory_hits, &disk_hits), NORMJIT_OK);
  ASSERT_EQ(normjit_engine_counters_ex(engine, &stats), NORMJIT_OK) << normjit_last_error();
  EXPECT_GE(compiles, 1u);
  EXPECT_EQ(stats.nvrtc_compiles, compiles);
  EXPECT_EQ(stats.memory_hits, memory_hits);
  EXPECT_EQ(stats.disk_hits, disk_hits);
  EXPECT_EQ(stats.bad_entries, 0u);

  EXPECT_EQ(normjit_engine_counters_ex(nullptr, &stats), NORMJIT_ERROR_INVALID_ARGUMENT);
  EXPECT_TRUE(mentions("invalid engine NULL")) << normjit_last_error();
  EXPECT_EQ(normjit_engine_counters_ex(engine, nullptr), NORMJIT_ERROR_INVALID_ARGUMENT);
  EXPECT_TRUE(mentions("invalid stats NULL")) << normjit_last_error();
  EXPECT_TRUE(mentions("normjit_engine_stats_init")) << normjit_last_error();
  stats.size = 8;  // not initialised with _init
  stats.nvrtc_compiles = 99;
  EXPECT_EQ(normjit_engine_counters_ex(engine, &stats), NORMJIT_ERROR_INVALID_ARGUMENT);
  EXPECT_TRUE(mentions("invalid stats.size 8")) << normjit_last_error();
  EXPECT_TRUE(mentions("is smaller than any normjit_engine_stats")) << normjit_last_error();
  EXPECT_EQ(stats.nvrtc_compiles, 99u) << "nothing written on error";
  stats.size = 1 << 20;
  EXPECT_EQ(normjit_engine_counters_ex(engine, &stats), NORMJIT_ERROR_INVALID_ARGUMENT);
  EXPECT_TRUE(mentions("stats.size 1048576")) << normjit_last_error();

  // A newer header's struct: longer; the field this library does not know is left as it is.
  struct {
    normjit_engine_stats known;
    uint64_t later;
  } newer;
  std::memset(&newer, 0, sizeof newer);
  normjit_engine_stats_init(&newer.known);
  newer.known.size = sizeof newer;
  newer.later = 7;
  ASSERT_EQ(normjit_engine_counters_ex(engine, &newer.known), NORMJIT_OK) << normjit_last_error();
  EXPECT_EQ(newer.known.size, sizeof newer);
  EXPECT_EQ(newer.known.nvrtc_compiles, compiles);
  EXPECT_EQ(newer.later, 7u);
  normjit_engine_destroy(engine);
}

// A corrupt entry in the disk cache counts in bad_entries, and its kernel is compiled again.
// No GPU: precompile reads the cache as prepare does.
TEST(CApiEngineStats, ACorruptCacheEntryCountsAsBad) {
  const char* spec = "op=layernorm shape=8,4096 dtype=bf16";
  testing::TempDir dir;
  normjit_engine* writer = engine_over(dir.path());
  ASSERT_NE(writer, nullptr);
  int compiled = 0;
  ASSERT_EQ(normjit_precompile(writer, spec, "sm_90", &compiled), NORMJIT_OK)
      << normjit_last_error();
  normjit_engine_destroy(writer);

  uint64_t corrupted = 0;  // one entry per batch class of the spec
  for (const auto& file : std::filesystem::recursive_directory_iterator(dir.path())) {
    if (file.path().extension() != ".entry") continue;
    std::fstream f(file.path(), std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(-1, std::ios::end);
    const char last = static_cast<char>(f.get());
    f.seekp(-1, std::ios::end);
    f.put(static_cast<char>(last ^ 0x01));  // a flipped bit of the payload: its checksum fails
    ASSERT_TRUE(f.good()) << file.path();
    ++corrupted;
  }
  ASSERT_GE(corrupted, 1u) << "no entry in " << dir.path();

  normjit_engine* reader = engine_over(dir.path());
  ASSERT_NE(reader, nullptr);
  ASSERT_EQ(normjit_precompile(reader, spec, "sm_90", &compiled), NORMJIT_OK)
      << normjit_last_error();
  EXPECT_EQ(compiled, 1) << "a corrupt entry is a miss";
  normjit_engine_stats stats;
  normjit_engine_stats_init(&stats);
  ASSERT_EQ(normjit_engine_counters_ex(reader, &stats), NORMJIT_OK) << normjit_last_error();
  EXPECT_EQ(stats.bad_entries, corrupted);
  EXPECT_EQ(stats.nvrtc_compiles, corrupted);
  // The rebuilt entries are good.
  ASSERT_EQ(normjit_precompile(reader, spec, "sm_90", &compiled), NORMJIT_OK);
  EXPECT_EQ(compiled, 0);
  ASSERT_EQ(normjit_engine_counters_ex(reader, &stats), NORMJIT_OK);
  EXPECT_EQ(stats.bad_entries, corrupted);
  normjit_engine_destroy(reader);
}

}  // namespace
}  // namespace normjit
