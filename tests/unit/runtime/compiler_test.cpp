// NVRTC compilation and the engine on a machine that may have no GPU.
#include "runtime/compiler.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <future>
#include <string>
#include <utility>
#include <vector>

#include "cache/cache.hpp"
#include "normjit/normjit.hpp"
#include "runtime/device.hpp"
#include "runtime/driver.hpp"

namespace normjit {
namespace {

const Target kSm90 = Target::parse("sm_90");

TEST(Compiler, CompilesTheSeedRmsNormToCubinAndPtx) {
  const NormSpec spec = NormSpec::parse("op=rmsnorm shape=112,64,512,512 dtype=f32");
  const KernelPlan p = plan(spec, kSm90);
  const CompiledKernel k = compile(emit(p), kSm90);
  EXPECT_GT(k.cubin.size(), 1000u);
  EXPECT_EQ(k.cubin.substr(0, 4), std::string("\x7f"
                                              "ELF",
                                              4));
  EXPECT_NE(k.ptx.find(".target sm_90"), std::string::npos);
  EXPECT_NE(k.ptx.find(k.lowered_name), std::string::npos);
  const Resources r = parse_resources(k.log);
  if (r.registers < 0 && gpu_available()) {
    // With a driver installed, NVRTC can take the cubin from the driver's compute cache
    // (~/.nv/ComputeCache) and then prints no ptxas report (seen on the H100 machine; with
    // CUDA_CACHE_DISABLE=1 the report is always there). Without a driver it must be there.
    GTEST_SKIP() << "NVRTC printed no ptxas report: a driver is installed and its compute cache "
                    "may have served the cubin (CUDA_CACHE_DISABLE=1 brings the report back)";
  }
  EXPECT_GT(r.registers, 0);
  EXPECT_EQ(r.spill_store_bytes, 0);
}

TEST(Compiler, EveryDtypeCompilesForSm80AndSm90) {
  for (const char* arch : {"sm_80", "sm_90"}) {
    for (const char* dtype : {"f32", "f16", "bf16"}) {
      for (const char* shape : {"2,7,5,3", "2,64,32,32", "1,1000,3"}) {
        const Target t = Target::parse(arch);
        const NormSpec spec = NormSpec::parse(std::string("op=rmsnorm affine=weight shape=") +
                                              shape + " dtype=" + dtype);
        EXPECT_NO_THROW(compile(emit(plan(spec, t)), t)) << spec.to_string() << " " << arch;
      }
    }
  }
}

TEST(Compiler, AnUnsupportedArchIsRefusedWithTheListOfSupportedOnes) {
  const NormSpec spec = NormSpec::parse("op=rmsnorm shape=2,8,8");
  const Target t = Target::parse("sm_52");
  try {
    compile(emit(plan(spec, t)), t);
    FAIL() << "sm_52 accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("sm_90"), std::string::npos) << e.what();
  }
}

TEST(Compiler, ACompileErrorCarriesLogOptionsAndSource) {
  EmittedKernel bad;
  bad.source =
      "#include \"normjit/params.cuh\"\n__global__ void k(normjit::Params p) { undeclared(); }\n";
  bad.name_expression = "&k";
  try {
    compile(bad, kSm90);
    FAIL() << "bad source compiled";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_EQ(e.code(), ErrorCode::kCompile);
    EXPECT_NE(m.find("undeclared"), std::string::npos) << m;                // the log
    EXPECT_NE(m.find("--gpu-architecture=sm_90"), std::string::npos) << m;  // the options
    EXPECT_NE(m.find("__global__ void k"), std::string::npos) << m;         // the source
  }
}

TEST(Compiler, KeyIgnoresBatchAndDependsOnTarget) {
  const auto a = key_inputs(NormSpec::parse("op=rmsnorm shape=1,64,32,32"), kSm90);
  const auto b = key_inputs(NormSpec::parse("op=rmsnorm shape=50,64,32,32 eps=0.1"), kSm90);
  const auto c =
      key_inputs(NormSpec::parse("op=rmsnorm shape=1,64,32,32"), Target::parse("sm_90a"));
  EXPECT_EQ(a.key(), b.key());
  EXPECT_NE(a.key(), c.key());
  EXPECT_NE(a.compiler.find("nvrtc"), std::string::npos);
}

// A hand-built spec with a weight_offset of -0 (from_fields makes it 0; validate() lets it
// through) is the spec without an offset: the same canonical text, the same kernel and key (its
// source said "-0", another key, a second compile and entry).
TEST(Compiler, ANegativeZeroWeightOffsetIsNoOffset) {
  NormSpec plain = NormSpec::parse("op=rmsnorm shape=4,4096 dtype=bf16 normalized_dims=1");
  plain.affine = Affine::kWeight;
  NormSpec negative = plain;
  negative.weight_offset = -0.0;
  negative.validate();
  EXPECT_EQ(negative.to_string(), plain.to_string());
  const auto a = key_inputs(plain, kSm90), b = key_inputs(negative, kSm90);
  EXPECT_EQ(a.key(), b.key());
}

TEST(Engine, WithoutAGpuPrecompilesAndRefusesToLaunchClearly) {
  if (gpu_available()) GTEST_SKIP() << "a GPU is present; this test covers machines without one";
  const auto dir = std::filesystem::temp_directory_path() / "normjit-engine-nogpu";
  std::filesystem::remove_all(dir);
  EngineOptions o;
  o.cache_dir = dir.string();
  Engine engine(o);
  const NormSpec spec = NormSpec::parse("op=rmsnorm shape=2,64,16 dtype=bf16");
  EXPECT_TRUE(engine.precompile(spec, "sm_90"));
  EXPECT_FALSE(engine.precompile(spec, "sm_90"));
  EXPECT_EQ(engine.counters().nvrtc_compiles, 1u);
  try {
    engine.prepare(spec);
    FAIL() << "prepare succeeded without a GPU";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kNoDevice);
    EXPECT_NE(std::string(e.what()).find("no GPU"), std::string::npos) << e.what();
  }
  std::filesystem::remove_all(dir);
}

// Threads that precompile one spec into one engine at once compile its kernel once: the first
// to miss the cache compiles, the others wait for its cubin (or find it saved). The spec's two
// batch classes plan the same kernel (one key), which Engine::prepare also builds on two
// threads at once. Needs no GPU.
TEST(Engine, ThreadsAskingForOneKernelAtOnceCompileItOnce) {
  const auto dir = std::filesystem::temp_directory_path() / "normjit-engine-one-compile";
  std::filesystem::remove_all(dir);
  EngineOptions o;
  o.cache_dir = dir.string();
  Engine engine(o);
  const NormSpec spec =
      NormSpec::parse("op=rmsnorm shape=1024,1024 dtype=bf16 normalized_dims=1 affine=weight");
  const std::vector<NormSpec> classes = batch_class_specs(spec);
  ASSERT_EQ(classes.size(), 2u);
  ASSERT_EQ(key_inputs(classes[1], Target::parse("sm_90")).key(),
            key_inputs(spec, Target::parse("sm_90")).key());
  std::vector<std::future<bool>> threads;
  for (const NormSpec& each : {classes[0], classes[1], classes[0], classes[1]}) {
    threads.push_back(std::async(std::launch::async,
                                 [&engine, each] { return engine.precompile(each, "sm_90"); }));
  }
  int compiled = 0;
  for (auto& t : threads) compiled += t.get();
  // Only the call that ran NVRTC says it compiled (every waiting one used to say so too).
  EXPECT_EQ(compiled, 1);
  EXPECT_EQ(engine.counters().nvrtc_compiles, 1u);
  EXPECT_FALSE(engine.precompile(spec, "sm_90"));
  EXPECT_EQ(engine.counters().nvrtc_compiles, 1u);
  std::filesystem::remove_all(dir);
}

// A spec built by hand is checked before precompile plans anything: a normalized_dims past the
// rank used to write past the shape (batch_class_specs) and crash or corrupt the heap, and a
// dtype past the enum's last to divide by its size of 0.
TEST(Engine, PrecompileRefusesAnInvalidHandBuiltSpecNamingTheField) {
  EngineOptions o;
  o.memory_only = true;
  Engine engine(o);
  const auto refused = [&](const NormSpec& spec, const std::string& field) {
    try {
      engine.precompile(spec, "sm_90");
      ADD_FAILURE() << field << ": accepted";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument) << e.what();
      EXPECT_NE(std::string(e.what()).find("invalid " + field), std::string::npos) << e.what();
    }
  };
  for (int dims : {-1, 5}) {
    NormSpec s;
    s.shape = {8, 64};
    s.normalized_dims = dims;
    refused(s, "normalized_dims " + std::to_string(dims));
  }
  NormSpec s = NormSpec::parse("op=rmsnorm shape=8,64 normalized_dims=1");
  s.dtype = static_cast<Dtype>(9);
  refused(s, "dtype 9");
  EXPECT_EQ(engine.counters().nvrtc_compiles, 0u);
}

TEST(Engine, RefusesADramBandwidthOutOfRangeNamingTheOption) {
  for (int bad : {-1, Target::kMaxDramGbps + 1}) {
    EngineOptions o;
    o.memory_only = true;
    o.dram_gbps = bad;
    try {
      Engine engine(o);
      ADD_FAILURE() << "dram_gbps " << bad << " accepted";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument) << e.what();
      EXPECT_NE(std::string(e.what()).find("dram_gbps"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find(std::to_string(bad)), std::string::npos) << e.what();
    }
  }
  EngineOptions o;
  o.memory_only = true;
  o.dram_gbps = 4814;
  EXPECT_NO_THROW(Engine{o});
  o.device = -1;  // as the C API refuses it
  try {
    Engine engine(o);
    ADD_FAILURE() << "device -1 accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("invalid device -1"), std::string::npos) << e.what();
  }
}

namespace {

// In a death test's child: precompiles a kernel in no cache layer with NORMJIT_JIT=value and
// exits 3 when it compiled, 4 when the JIT was off (a cache miss), 5 on another error.
[[noreturn]] void precompile_with_jit(const std::string& value) {
  ::setenv("NORMJIT_JIT", value.c_str(), 1);
  EngineOptions o;
  o.memory_only = true;
  Engine engine(o);
  try {
    engine.precompile(NormSpec::parse("op=rmsnorm shape=1,7,9 dtype=f16"), "sm_90");
    std::_Exit(3);
  } catch (const Error& e) {
    std::fprintf(stderr, "%s\n", e.what());
    std::_Exit(e.code() == ErrorCode::kCacheMiss ? 4 : 5);
  }
}

// A child's stderr holds `part` (or, with has false, does not).
class StderrHas : public ::testing::MatcherInterface<const std::string&> {
 public:
  StderrHas(std::string part, bool has) : part_(std::move(part)), has_(has) {}
  bool MatchAndExplain(const std::string& err,
                       ::testing::MatchResultListener* /*listener*/) const override {
    return (err.find(part_) != std::string::npos) == has_;
  }
  void DescribeTo(std::ostream* os) const override {
    *os << (has_ ? "contains " : "does not contain ") << "'" << part_ << "'";
  }

 private:
  std::string part_;
  bool has_;
};
::testing::Matcher<const std::string&> has(const std::string& part, bool yes = true) {
  return ::testing::Matcher<const std::string&>(new StderrHas(part, yes));
}

// An environment variable set for a test's scope, unset at its end.
struct ScopedEnv {
  ScopedEnv(const char* name, const std::string& value) : name_(name) {
    ::setenv(name, value.c_str(), 1);
  }
  ~ScopedEnv() { ::unsetenv(name_); }
  const char* name_;
};

}  // namespace

// NORMJIT_JIT (engine.cpp's jit_disabled_by_env), each value in a child process, since its
// warning is once a process: off, 0, false and no in any case turn the JIT off, so that a
// kernel in no layer is a cache miss; on, 1, true, yes and empty leave it on; any other value
// leaves it on with one warning naming it (a typo must not pass as a setting that took effect).
TEST(Engine, JitSwitchTakesTheCommonSpellingsAndWarnsOfOthers) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  for (const char* off : {"off", "0", "OFF", "Off", "false", "FALSE", "no", "No"}) {
    EXPECT_EXIT(precompile_with_jit(off), ::testing::ExitedWithCode(4), has("JIT is off"))
        << "NORMJIT_JIT=" << off;
    EXPECT_EXIT(precompile_with_jit(off), ::testing::ExitedWithCode(4), has("warning", false))
        << "NORMJIT_JIT=" << off;
  }
  for (const char* on : {"on", "1", "ON", "true", "True", "yes", "YES", ""}) {
    EXPECT_EXIT(precompile_with_jit(on), ::testing::ExitedWithCode(3), has("warning", false))
        << "NORMJIT_JIT=" << on;
  }
  for (const std::string other : {"maybe", "disabled", " off", "2"}) {
    EXPECT_EXIT(precompile_with_jit(other), ::testing::ExitedWithCode(3),
                has("NORMJIT_JIT='" + other + "' is not off"))
        << "NORMJIT_JIT=" << other;
  }
}

// EngineOptions::prewarm: the directory alone (a kernel of a NORMJIT_CACHE_READONLY layer is
// compiled into it all the same), uncapped (NORMJIT_CACHE_MAX_BYTES of 1 byte keeps every
// entry), the JIT on (NORMJIT_JIT=off does not stop it). Needs no GPU.
TEST(Engine, APrewarmEngineFillsItsDirectoryAloneUncappedWithTheJitOn) {
  const auto root = std::filesystem::temp_directory_path() / "normjit-engine-prewarm";
  std::filesystem::remove_all(root);
  const std::string shipped = (root / "shipped").string(), layer = (root / "layer").string();
  const std::vector<NormSpec> specs = {NormSpec::parse("op=rmsnorm shape=1,7,9 dtype=f16"),
                                       NormSpec::parse("op=rmsnorm shape=2,5,3 dtype=bf16")};
  {
    EngineOptions o;
    o.cache_dir = layer;
    Engine fill(o);
    for (const NormSpec& spec : specs) EXPECT_TRUE(fill.precompile(spec, "sm_90"));
  }
  {
    const ScopedEnv readonly("NORMJIT_CACHE_READONLY", layer);
    const ScopedEnv cap("NORMJIT_CACHE_MAX_BYTES", "1");
    const ScopedEnv jit("NORMJIT_JIT", "off");
    EngineOptions o;
    o.cache_dir = shipped;
    o.prewarm = true;
    Engine engine(o);
    for (const NormSpec& spec : specs) {
      EXPECT_TRUE(engine.precompile(spec, "sm_90")) << "found in the read-only layer, not in dir";
    }
    EXPECT_EQ(engine.counters().nvrtc_compiles, specs.size());
  }
  // What the directory holds by itself: an engine reading only it finds both, compiles none.
  EngineOptions o;
  o.cache_dir = shipped;
  o.jit_disabled = true;
  Engine check(o);
  for (const NormSpec& spec : specs) EXPECT_FALSE(check.precompile(spec, "sm_90"));
  std::filesystem::remove_all(root);
}

// EngineOptions::no_readonly_cache_dirs: NORMJIT_CACHE_READONLY is not read, so a kernel only in
// the variable's layer is a miss for a JIT-off engine that the variable's layer serves without
// it; with readonly_cache_dirs named as well, the engine is refused, naming both. Needs no GPU.
TEST(Engine, NoReadonlyCacheDirsIgnoresTheVariablesLayers) {
  const auto root = std::filesystem::temp_directory_path() / "normjit-engine-no-readonly";
  std::filesystem::remove_all(root);
  const std::string layer = (root / "layer").string(), own = (root / "own").string();
  const NormSpec spec = NormSpec::parse("op=rmsnorm shape=3,40 normalized_dims=1 dtype=f16");
  {
    EngineOptions o;
    o.cache_dir = layer;
    Engine fill(o);
    EXPECT_TRUE(fill.precompile(spec, "sm_90"));
  }
  const ScopedEnv readonly("NORMJIT_CACHE_READONLY", layer);
  EngineOptions o;
  o.cache_dir = own;
  o.jit_disabled = true;
  {
    Engine with_layer(o);
    EXPECT_FALSE(with_layer.precompile(spec, "sm_90")) << "the variable's layer serves it";
  }
  o.no_readonly_cache_dirs = true;
  {
    Engine without(o);
    try {
      without.precompile(spec, "sm_90");
      ADD_FAILURE() << "the variable's layer was searched";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kCacheMiss) << e.what();
    }
  }
  o.readonly_cache_dirs = {layer};
  try {
    Engine both(o);
    ADD_FAILURE() << "an engine with layers named and none asked for was made";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument) << e.what();
    EXPECT_NE(std::string(e.what()).find("invalid readonly_cache_dirs '" + layer + "'"),
              std::string::npos)
        << e.what();
    EXPECT_NE(std::string(e.what()).find("no_readonly_cache_dirs"), std::string::npos) << e.what();
  }
  std::filesystem::remove_all(root);
}

// A prewarm engine fails where a plain one would warn and cache in memory only: a directory it
// cannot create or write (here a regular file), a save that failed (the cache's fault hook: a
// full disk); and it refuses the options it decides itself.
TEST(Engine, APrewarmEngineFailsWhereItsKernelsCannotBeWritten) {
  const auto root = std::filesystem::temp_directory_path() / "normjit-engine-prewarm-fails";
  std::filesystem::remove_all(root);
  std::filesystem::create_directories(root);
  const std::string file = (root / "a-file").string();
  std::fclose(std::fopen(file.c_str(), "w"));
  const auto expect_invalid = [](const EngineOptions& o, const std::vector<std::string>& parts) {
    try {
      Engine engine(o);
      ADD_FAILURE() << "a prewarm engine was made";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument) << e.what();
      for (const std::string& part : parts) {
        EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
      }
    }
  };
  EngineOptions o;
  o.prewarm = true;
  o.cache_dir = file;
  expect_invalid(o, {"invalid cache_dir '" + file + "'", "Not a directory"});
  o.cache_dir = (root / "dir").string();
  for (const auto& [name, set] : std::vector<std::pair<std::string, void (*)(EngineOptions&)>>{
           {"readonly_cache_dirs", [](EngineOptions& e) { e.readonly_cache_dirs = {"/tmp"}; }},
           {"cache_max_bytes", [](EngineOptions& e) { e.cache_max_bytes = 1 << 20; }},
           {"memory_only", [](EngineOptions& e) { e.memory_only = true; }},
           {"jit_disabled", [](EngineOptions& e) { e.jit_disabled = true; }}}) {
    EngineOptions bad = o;
    set(bad);
    expect_invalid(bad, {"invalid " + name + " ", "prewarm"});
  }
  const ScopedEnv fault("NORMJIT_CACHE_FAULT", "enospc");
  std::vector<std::string> warnings;
  cache::set_warning_sink([&](const std::string& message) { warnings.push_back(message); });
  Engine engine(o);
  // Twice: the second call finds the kernel the memory layer kept, which is not in the
  // directory either (it passed, compiling nothing, before).
  for (int call = 0; call < 2; ++call) {
    try {
      engine.precompile(NormSpec::parse("op=rmsnorm shape=1,7,9 dtype=f16"), "sm_90");
      ADD_FAILURE() << "a kernel that could not be written passed, call " << call;
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument) << e.what();
      EXPECT_NE(std::string(e.what()).find("could not write the kernel of op=rmsnorm"),
                std::string::npos)
          << e.what();
    }
  }
  cache::set_warning_sink(nullptr);
  EXPECT_EQ(warnings.size(), 1u) << "the store's own warning says why the write failed";
  std::filesystem::remove_all(root);
}

// A directory with files in it on an entry's name leaves the cache writable for every other
// kernel, and that one in memory: a prewarm engine fails for it (it passed, saying compiled).
TEST(Engine, APrewarmEngineFailsWhereADirectoryHasTheEntrysName) {
  const auto root = std::filesystem::temp_directory_path() / "normjit-engine-prewarm-blocked";
  std::filesystem::remove_all(root);
  const NormSpec spec = NormSpec::parse("op=rmsnorm shape=1,7,9 dtype=f16");
  EngineOptions o;
  o.prewarm = true;
  o.cache_dir = (root / "first").string();
  std::vector<std::string> names;  // the spec's entries, from a prewarm that writes them
  {
    Engine first(o);
    EXPECT_TRUE(first.precompile(spec, "sm_90"));
    for (const auto& e : std::filesystem::directory_iterator(root / "first")) {
      if (e.path().extension() == ".entry") names.push_back(e.path().filename().string());
    }
  }
  ASSERT_FALSE(names.empty());
  o.cache_dir = (root / "blocked").string();
  for (const std::string& name : names) {
    std::filesystem::create_directories(root / "blocked" / name);
    std::fclose(std::fopen((root / "blocked" / name / "a-file").string().c_str(), "w"));
  }
  std::vector<std::string> warnings;
  cache::set_warning_sink([&](const std::string& message) { warnings.push_back(message); });
  Engine engine(o);
  try {
    engine.precompile(spec, "sm_90");
    ADD_FAILURE() << "a kernel whose entry name a directory has passed";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument) << e.what();
    EXPECT_NE(std::string(e.what()).find("could not write the kernel of op=rmsnorm"),
              std::string::npos)
        << e.what();
  }
  cache::set_warning_sink(nullptr);
  // The load's warning (the name is no entry), then the save's (it cannot be published).
  EXPECT_TRUE(std::any_of(warnings.begin(), warnings.end(), [](const std::string& w) {
    return w.find("a directory with files in it has its name") != std::string::npos;
  })) << (warnings.empty() ? "no warning" : warnings[0]);
  std::filesystem::remove_all(root);
}

// A cached cubin the driver refuses is rebuilt only when the refusal is about the image; a
// destroyed context or a full GPU leaves the entry in the cache (engine.cpp's load path).
TEST(Driver, OnlyImageErrorsRejectACachedKernel) {
  for (CUresult image : {CUDA_ERROR_INVALID_IMAGE, CUDA_ERROR_NO_BINARY_FOR_GPU,
                         CUDA_ERROR_UNSUPPORTED_PTX_VERSION, CUDA_ERROR_NOT_FOUND}) {
    EXPECT_TRUE(driver::rejects_the_image(image)) << int(image);
  }
  for (CUresult other :
       {CUDA_ERROR_CONTEXT_IS_DESTROYED, CUDA_ERROR_OUT_OF_MEMORY, CUDA_ERROR_INVALID_CONTEXT,
        CUDA_ERROR_NOT_INITIALIZED, CUDA_ERROR_ILLEGAL_ADDRESS}) {
    EXPECT_FALSE(driver::rejects_the_image(other)) << int(other);
  }
}

// NORMJIT_DRAM_GBPS: a bandwidth in range is taken; unset, empty and 0 mean the GPU's; anything
// else is the GPU's too, with one warning naming the value.
TEST(Device, DramBandwidthFromTheEnvironment) {
  std::vector<std::string> warnings;
  cache::set_warning_sink([&](const std::string& message) { warnings.push_back(message); });
  ::unsetenv("NORMJIT_DRAM_GBPS");
  EXPECT_EQ(device::dram_gbps_from_env(), 0);
  for (const auto& [value, gbps] : std::vector<std::pair<std::string, int>>{
           {"4814", 4814}, {"3352", 3352}, {"0", 0}, {"", 0}, {"1000000", 1000000}}) {
    ::setenv("NORMJIT_DRAM_GBPS", value.c_str(), 1);
    EXPECT_EQ(device::dram_gbps_from_env(), gbps) << value;
  }
  EXPECT_TRUE(warnings.empty());
  for (const char* bad : {"4.8T", "-1", "1000001", "fast", "4814 "}) {
    ::setenv("NORMJIT_DRAM_GBPS", bad, 1);
    EXPECT_EQ(device::dram_gbps_from_env(), 0) << bad;
  }
  ::unsetenv("NORMJIT_DRAM_GBPS");
  cache::set_warning_sink(nullptr);
  ASSERT_EQ(warnings.size(), 1u) << "one warning per process";
  EXPECT_NE(warnings[0].find("NORMJIT_DRAM_GBPS='4.8T'"), std::string::npos) << warnings[0];
  EXPECT_NE(warnings[0].find("the GPU's"), std::string::npos) << warnings[0];
}

}  // namespace
}  // namespace normjit
