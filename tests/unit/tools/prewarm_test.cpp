// `normjit prewarm` on a machine without a GPU: the CPU half of the deployment path of
// docs/deployment.md. Prewarm fills a directory, --check then finds every kernel there and
// reports what a fresh directory lacks, a failed write is a failure, and `dump --cache-entry`
// shows what was stored. The GPU half is tests/gpu/deployment_test.cpp.
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>
#include <string>
#include <vector>

#include "generator/plan.hpp"
#include "normjit/normjit.hpp"
#include "runtime/compiler.hpp"
#include "tests/unit/tools/manifest.hpp"
#include "tests/unit/tools/run_tool.hpp"

namespace normjit::testing {
namespace {

constexpr size_t npos = std::string::npos;

// Channel-form rmsnorm specs (the form every build implements) of several shapes and dtypes.
const std::vector<std::string> kSpecs = {
    "op=rmsnorm shape=2,64,32,32 dtype=f32 affine=none",
    "op=rmsnorm shape=3,65,100 dtype=bf16 affine=weight",
    "op=rmsnorm shape=1,7,9 dtype=f16 affine=none",
};
const std::vector<std::string> kArchs = {"sm_80", "sm_90"};

std::string joined(const std::vector<std::string>& items) {
  std::string out;
  for (const std::string& item : items) out += (out.empty() ? "" : ",") + item;
  return out;
}

// The numbers of prewarm's summary line: compiled, already cached, failed.
struct Summary {
  int compiled = -1, cached = -1, failed = -1;
};
Summary summary_of(const ToolResult& r) {
  std::smatch m;
  Summary s;
  const std::regex line(R"(prewarm: (\d+) compiled, (\d+) already cached, (\d+) failed)");
  if (std::regex_search(r.out, m, line)) {
    s.compiled = std::stoi(m[1]);
    s.cached = std::stoi(m[2]);
    s.failed = std::stoi(m[3]);
  } else {
    ADD_FAILURE() << "no summary line\n" << r.describe();
  }
  return s;
}

class Prewarm : public ::testing::Test {
 protected:
  // NORMJIT_CACHE_READONLY is cleared so that the test's result does not depend on the
  // environment it runs in; prewarm ignores it anyway.
  ToolResult run(const std::vector<std::string>& args, std::vector<std::string> env = {}) {
    env.push_back("NORMJIT_CACHE_READONLY");
    env.push_back("NORMJIT_CACHE_DIR=" + (home_ / "default-cache"));
    return run_tool(args, env);
  }
  ToolResult prewarm(const std::string& dir, std::vector<std::string> env = {}) {
    return run({"prewarm", manifest_, "--arch", joined(kArchs), "--cache-dir", dir, "-j", "2"},
               std::move(env));
  }
  ToolResult check(const std::string& dir) {
    return run({"prewarm", manifest_, "--arch", joined(kArchs), "--cache-dir", dir, "--check"});
  }
  void SetUp() override { write_file(manifest_, manifest_of(kSpecs)); }

  TempDir home_;
  const std::string manifest_ = home_ / "manifest.json";
};

TEST_F(Prewarm, FillsADirectoryWithoutAGpuThenCheckFindsEverything) {
  const std::string dir = home_ / "shipped";
  const ToolResult first = prewarm(dir);
  ASSERT_EQ(first.exit_code, 0) << first.describe();
  const Summary s = summary_of(first);
  EXPECT_EQ(s.compiled, int(kSpecs.size() * kArchs.size())) << first.describe();
  EXPECT_EQ(s.failed, 0);
  EXPECT_TRUE(first.err_lines("normjit: warning").empty()) << first.describe();

  const ToolResult again = prewarm(dir);
  ASSERT_EQ(again.exit_code, 0) << again.describe();
  const Summary t = summary_of(again);
  EXPECT_EQ(t.compiled, 0) << "the second run finds everything cached\n" << again.describe();
  EXPECT_EQ(t.cached, int(kSpecs.size() * kArchs.size()));

  const ToolResult ok = check(dir);
  EXPECT_EQ(ok.exit_code, 0) << ok.describe();
  EXPECT_EQ(ok.out.find("missing "), npos) << ok.describe();
  EXPECT_TRUE(ok.err_lines("normjit: error: ").empty()) << ok.describe();
  EXPECT_EQ(ok.out.find("temporary"), npos) << ok.describe();
  EXPECT_TRUE(ok.err_lines("normjit: warning").empty()) << ok.describe();
  // The flags of the prewarm step passed to --check as well: -j compiles nothing here, and says so.
  const ToolResult jobs = run(
      {"prewarm", manifest_, "--arch", joined(kArchs), "--cache-dir", dir, "--check", "-j", "2"});
  EXPECT_EQ(jobs.exit_code, 0) << jobs.describe();
  EXPECT_EQ(jobs.out, ok.out);
  EXPECT_EQ(jobs.err_lines("normjit: warning: --jobs sets parallel compilations").size(), 1u)
      << jobs.describe();

  // A write that did not finish (an interrupted prewarm) is never loaded, but would be shipped:
  // --check and cache ls name it (they said nothing).
  const std::string temporary = dir + "/.tmp-" + std::string(64, 'a') + "-1-ff";
  { std::ofstream(temporary) << "partial"; }
  const ToolResult noted = check(dir);
  EXPECT_EQ(noted.exit_code, 0) << noted.describe();
  EXPECT_NE(noted.out.find("holds 1 temporary file of writes that did not finish (e.g. " +
                           temporary + ")"),
            npos)
      << noted.describe();
  const ToolResult ls = run({"cache", "ls", "--cache-dir", dir});
  EXPECT_NE(ls.out.find("and 1 temporary file of writes that did not finish"), npos)
      << ls.describe();
  // gc --temp-age 0 removes it, and says which of the bytes freed were temporary files (the
  // count of entries evicted does not include them).
  const ToolResult gc = run({"cache", "gc", "--cache-dir", dir, "--temp-age", "0"});
  EXPECT_EQ(gc.exit_code, 0) << gc.describe();
  EXPECT_NE(gc.out.find("evicted 0 entries, freed 7 B (7 B of it temporary files)"), npos)
      << gc.describe();
  EXPECT_FALSE(std::filesystem::exists(temporary)) << gc.describe();

  // A plain gc sweeps temporaries an hour old. Opening the store sweeps them before gc looks, and
  // gc still counts them as freed (it said "freed 0 B" of a directory it had just emptied).
  const std::string stale = dir + "/.tmp-" + std::string(64, 'b') + "-1-ee";
  { std::ofstream(stale) << "stale bytes"; }
  std::filesystem::last_write_time(
      stale, std::filesystem::file_time_type::clock::now() - std::chrono::hours(2));
  const ToolResult plain = run({"cache", "gc", "--cache-dir", dir});
  EXPECT_EQ(plain.exit_code, 0) << plain.describe();
  EXPECT_NE(plain.out.find("evicted 0 entries, freed 11 B (11 B of it temporary files)"), npos)
      << plain.describe();
  EXPECT_FALSE(std::filesystem::exists(stale)) << plain.describe();
  // Nothing stale left: no temporary files to mention.
  const ToolResult quiet = run({"cache", "gc", "--cache-dir", dir});
  EXPECT_NE(quiet.out.find("evicted 0 entries, freed 0 B; "), npos) << quiet.describe();
}

TEST_F(Prewarm, CheckListsWhatAFreshDirectoryLacks) {
  TempDir empty;
  for (const std::string& dir : {empty.path(), home_ / "does-not-exist"}) {
    const ToolResult r = check(dir);
    EXPECT_NE(r.exit_code, 0) << r.describe();
    EXPECT_EQ(r.err_lines("normjit: error: ").size(), 1u) << r.describe();
    for (const std::string& text : kSpecs) {
      const NormSpec spec = NormSpec::parse(text);
      for (const std::string& arch : kArchs) {
        const std::string key = key_inputs(spec, Target::parse(arch)).key();
        EXPECT_NE(r.out.find("missing "), npos) << r.describe();
        EXPECT_NE(r.out.find(spec.to_string() + " arch=" + arch + " key=" + key), npos)
            << "names the spec, arch and key\n"
            << r.describe();
      }
    }
  }
  // --check compiled nothing and created nothing.
  EXPECT_FALSE(std::filesystem::exists(home_ / "does-not-exist"));
}

TEST_F(Prewarm, CheckNamesOnlyTheMissingKernel) {
  const std::string dir = home_ / "shipped";
  ASSERT_EQ(prewarm(dir).exit_code, 0);
  // A manifest with one more spec than was prewarmed.
  std::vector<std::string> more = kSpecs;
  more.push_back("op=rmsnorm shape=4,48,17 dtype=f32 affine=weight");
  write_file(manifest_, manifest_of(more));
  const ToolResult r = check(dir);
  EXPECT_NE(r.exit_code, 0) << r.describe();
  const std::string missing = NormSpec::parse(more.back()).to_string();
  for (const std::string& text : more) {
    const std::string spec = NormSpec::parse(text).to_string();
    EXPECT_EQ(r.out.find(spec + " arch=") != npos, spec == missing) << spec << "\n" << r.describe();
  }
}

// Entries that differ only in the batch or eps, and targets the plan does not tell apart, share
// their kernels: --check counts and lists each kernel once, as prewarm compiles it once (it
// listed the same key once per (entry, arch) pair, "0 of 6 kernels").
TEST_F(Prewarm, CheckCountsEachKernelOnce) {
  const std::string shared = home_ / "shared.json";
  write_file(shared,
             R"([{"op": "rmsnorm", "shape": [8, 4096], "dtype": "bf16", "normalized_dims": 1},
 {"op": "rmsnorm", "shape": [1000, 4096], "dtype": "bf16", "normalized_dims": 1},
 {"op": "rmsnorm", "shape": [8, 4096], "dtype": "bf16", "normalized_dims": 1, "eps": 1e-6}])");
  const std::string dir = home_ / "shared";
  const std::vector<std::string> check_args = {"prewarm",     shared, "--arch", "sm_90,sm_90:114",
                                               "--cache-dir", dir,    "--check"};
  const ToolResult lacking = run(check_args);
  EXPECT_NE(lacking.exit_code, 0) << lacking.describe();
  EXPECT_EQ(lacking.out_lines("missing ").size(), 1u) << lacking.describe();
  EXPECT_NE(lacking.out.find("holds 0 of 1 kernel of"), npos) << lacking.describe();
  ASSERT_EQ(run({"prewarm", shared, "--arch", "sm_90,sm_90:114", "--cache-dir", dir}).exit_code, 0);
  const ToolResult full = run(check_args);
  EXPECT_EQ(full.exit_code, 0) << full.describe();
  EXPECT_NE(full.out.find("holds 1 of 1 kernel of"), npos) << full.describe();
}

TEST_F(Prewarm, AFailedWriteIsAFailure) {
  // The store falls back to memory when it cannot write; prewarm must not report that as done.
  const ToolResult r = prewarm(home_ / "full", {"NORMJIT_CACHE_FAULT=enospc"});
  EXPECT_NE(r.exit_code, 0) << r.describe();
  EXPECT_EQ(r.err_lines("normjit: error: ").size(), 1u) << r.describe();
  EXPECT_EQ(summary_of(r).failed, int(kSpecs.size() * kArchs.size())) << r.describe();
  // The summary counts what the directory holds, not what was asked for.
  EXPECT_NE(r.out.find("(0 of the "), npos) << r.describe();
}

// Prewarm compiles whatever NORMJIT_JIT says (its engine is EngineOptions::prewarm; the
// variable's spellings are tests/unit/runtime/compiler_test.cpp's): a build environment that
// sets NORMJIT_JIT=off for the application still fills its directory. It failed every kernel
// before, telling the user to prewarm it.
TEST_F(Prewarm, CompilesWhateverTheJitSwitchSays) {
  const std::string one = home_ / "one.json";
  write_file(one, manifest_of({kSpecs[0]}));
  int run_count = 0;
  for (const char* value : {"off", "0", "no", "maybe"}) {
    const std::string dir = home_ / ("jit" + std::to_string(run_count++));
    const ToolResult r = run({"prewarm", one, "--arch", "sm_90", "--cache-dir", dir},
                             {std::string("NORMJIT_JIT=") + value});
    EXPECT_EQ(r.exit_code, 0) << "NORMJIT_JIT=" << value << "\n" << r.describe();
    EXPECT_EQ(summary_of(r).compiled, 1) << r.describe();
    EXPECT_EQ(r.err_lines("normjit: warning: ").size(), 0u) << r.describe();
  }
}

// Only the directory counts, and all of it: a kernel in a NORMJIT_CACHE_READONLY layer is
// compiled into it as well, and NORMJIT_CACHE_MAX_BYTES does not evict from it.
TEST_F(Prewarm, FillsTheDirectoryWhateverTheReadOnlyLayersAndTheCap) {
  const std::string layer = home_ / "layer", dir = home_ / "shipped";
  ASSERT_EQ(prewarm(layer).exit_code, 0);
  const ToolResult r = run({"prewarm", manifest_, "--arch", joined(kArchs), "--cache-dir", dir},
                           {"NORMJIT_CACHE_READONLY=" + layer, "NORMJIT_CACHE_MAX_BYTES=1"});
  EXPECT_EQ(r.exit_code, 0) << r.describe();
  EXPECT_EQ(summary_of(r).cached, 0) << r.describe();
  EXPECT_EQ(check(dir).exit_code, 0) << check(dir).describe();
  // Variables a prewarm does not use draw no warning when malformed (they said "using the
  // default 2G" and "planning for the GPU's" of a cap and a GPU that play no part).
  const std::string other = home_ / "other";
  const ToolResult quiet =
      run({"prewarm", manifest_, "--arch", joined(kArchs), "--cache-dir", other},
          {"NORMJIT_CACHE_MAX_BYTES=abc", "NORMJIT_DRAM_GBPS=fast"});
  EXPECT_EQ(quiet.exit_code, 0) << quiet.describe();
  EXPECT_EQ(quiet.err.find("warning"), std::string::npos) << quiet.describe();
}

// A part with fewer multiprocessors than the arch's full-size one plans long rows differently;
// `--arch sm_90:114` prewarms what an engine on such a GPU (an H100 PCIe) looks up. Kernels
// that do not depend on the count are the same key and compiled once.
TEST_F(Prewarm, AMultiprocessorCountPrewarmsThatPartsLongRowKernels) {
  const std::vector<std::string> specs = {
      "op=layernorm shape=2,64,256,256 dtype=f32 normalized_dims=3 affine=both",
      "op=rmsnorm shape=2,64,32,32 dtype=f32 affine=none"};
  write_file(manifest_, manifest_of(specs));
  const NormSpec long_rows = NormSpec::parse(specs[0]);
  const std::string dir = home_ / "sxm";
  const ToolResult sxm = run({"prewarm", manifest_, "--arch", "sm_90", "--cache-dir", dir});
  ASSERT_EQ(sxm.exit_code, 0) << sxm.describe();

  // The SXM directory lacks exactly the PCIe plan of the long rows.
  const ToolResult lacks =
      run({"prewarm", manifest_, "--arch", "sm_90:114", "--cache-dir", dir, "--check"});
  EXPECT_NE(lacks.exit_code, 0) << lacks.describe();
  const std::string pcie_key = key_inputs(long_rows, Target::parse("sm_90:114")).key();
  EXPECT_NE(lacks.out.find(long_rows.to_string() + " arch=sm_90:114 key=" + pcie_key), npos)
      << lacks.describe();
  EXPECT_EQ(lacks.out.find(NormSpec::parse(specs[1]).to_string() + " arch="), npos)
      << "the channel kernel is the same for every count\n"
      << lacks.describe();

  const std::string both = home_ / "both";
  const ToolResult r =
      run({"prewarm", manifest_, "--arch", "sm_90,sm_90:114", "--cache-dir", both, "-j", "2"});
  ASSERT_EQ(r.exit_code, 0) << r.describe();
  EXPECT_EQ(summary_of(r).compiled, 3) << "two long-row plans, one channel kernel\n"
                                       << r.describe();
  for (const char* arch : {"sm_90", "sm_90:114"}) {
    const ToolResult ok =
        run({"prewarm", manifest_, "--arch", arch, "--cache-dir", both, "--check"});
    EXPECT_EQ(ok.exit_code, 0) << arch << "\n" << ok.describe();
  }
  const ToolResult bad = run({"prewarm", manifest_, "--arch", "sm_90:0", "--cache-dir", both});
  EXPECT_NE(bad.exit_code, 0);
  EXPECT_EQ(
      bad.err_lines("normjit: error: invalid --arch 'sm_90:0': the multiprocessor count").size(),
      1u)
      << bad.describe();
}

// Prewarm and --check agree on the seed manifest, whatever the generator supports today: each
// kernel prewarm could not build is one --check reports missing, and the exit codes follow.
TEST_F(Prewarm, SeedManifestPrewarmAndCheckAgree) {
  const std::string seeds = std::string(NORMJIT_SOURCE_DIR) + "/tools/manifests/seeds.json";
  const std::string dir = home_ / "seeds";
  const ToolResult r = run({"prewarm", seeds, "--arch", "sm_90", "--cache-dir", dir});
  const Summary s = summary_of(r);
  const size_t entries = nlohmann::json::parse(read_file(seeds)).size();
  EXPECT_EQ(size_t(s.compiled + s.cached + s.failed), entries) << r.describe();
  EXPECT_EQ(r.exit_code == 0, s.failed == 0) << r.describe();
  EXPECT_EQ(r.err_lines("failed: ").size(), size_t(s.failed)) << r.describe();

  const ToolResult c = run({"prewarm", seeds, "--arch", "sm_90", "--cache-dir", dir, "--check"});
  EXPECT_EQ(c.exit_code == 0, s.failed == 0) << c.describe();
  // Kernels that cannot even be planned are reported as "cannot be checked" rather than missing.
  std::smatch m;
  ASSERT_TRUE(std::regex_search(c.out, m, std::regex(R"((\d+) missing(, (\d+) cannot)?)")))
      << c.describe();
  const int unknown = m[3].matched ? std::stoi(m[3]) : 0;
  EXPECT_EQ(std::stoi(m[1]) + unknown, s.failed) << c.describe();
}

// A spec whose kernel has a second plan for launches of another size (its batch class: a
// row kernel with parameters) is two kernels: prewarm writes and reads back both, counts both,
// and --check names the other class's kernel when it is missing (a JIT-off engine would
// otherwise run the spec's plan for every batch). A backward is one kernel for every batch.
TEST_F(Prewarm, BatchClassesAreKernelsPrewarmWritesAndCheckFinds) {
  const std::vector<std::string> specs = {
      "op=layernorm shape=8,4096 dtype=bf16",
      "op=layernorm shape=1000,16384 dtype=bf16 normalized_dims=1 affine=both",
      "op=rmsnorm shape=2,64,32,32 dtype=f32 affine=none",                         // one class
      "op=layernorm shape=1024,4096 dtype=bf16 normalized_dims=1 backward=true"};  // one class
  // manifest_of() writes op, shape, dtype and affine only: backward is given here.
  write_file(manifest_, R"([
    {"op": "layernorm", "shape": [8, 4096], "dtype": "bf16"},
    {"op": "layernorm", "shape": [1000, 16384], "dtype": "bf16"},
    {"op": "rmsnorm", "shape": [2, 64, 32, 32], "dtype": "f32", "affine": "none"},
    {"op": "layernorm", "shape": [1024, 4096], "dtype": "bf16", "backward": true}
  ])");
  const std::string dir = home_ / "classes";
  const ToolResult r = run({"prewarm", manifest_, "--arch", "sm_90", "--cache-dir", dir});
  ASSERT_EQ(r.exit_code, 0) << r.describe();
  EXPECT_EQ(summary_of(r).compiled, 4) << r.describe();
  EXPECT_NE(r.out.find("(6 kernels in " + dir), npos) << r.describe();
  EXPECT_NE(r.err.find("prewarm: 6 kernels (4 specs x 1 arch"), npos) << r.describe();
  const Target h100 = Target::parse("sm_90");
  size_t entries = 0;
  for (const std::string& text : specs) {
    for (const NormSpec& each : batch_class_specs(NormSpec::parse(text))) {
      ++entries;
      EXPECT_TRUE(std::filesystem::exists(dir + "/" + key_inputs(each, h100).key() + ".entry"))
          << each.to_string();
    }
  }
  EXPECT_EQ(entries, 6u);
  EXPECT_EQ(batch_class_specs(NormSpec::parse(specs[3])).size(), 1u);
  const std::vector<std::string> check_args = {"prewarm",     manifest_, "--arch", "sm_90",
                                               "--cache-dir", dir,       "--check"};
  const ToolResult ok = run(check_args);
  EXPECT_EQ(ok.exit_code, 0) << ok.describe();
  EXPECT_NE(ok.out.find("holds 6 of 6 kernels"), npos) << ok.describe();
  // The rows of 16384's other class (launches of at most 256 rows) removed: --check fails and
  // names it.
  const NormSpec other = batch_class_specs(NormSpec::parse(specs[1]))[1];
  EXPECT_EQ(other.shape[0], 1);
  const std::string other_key = key_inputs(other, h100).key();
  ASSERT_TRUE(std::filesystem::remove(dir + "/" + other_key + ".entry"));
  const ToolResult lacking = run(check_args);
  EXPECT_NE(lacking.exit_code, 0) << lacking.describe();
  EXPECT_NE(lacking.out.find("the kernel of its other batch class, " + other.to_string() +
                             " arch=sm_90 key=" + other_key),
            npos)
      << lacking.describe();
  EXPECT_NE(lacking.out.find("holds 5 of 6 kernels"), npos) << lacking.describe();
  // A second prewarm writes it again.
  const ToolResult again = run({"prewarm", manifest_, "--arch", "sm_90", "--cache-dir", dir});
  EXPECT_EQ(again.exit_code, 0) << again.describe();
  EXPECT_TRUE(std::filesystem::exists(dir + "/" + other_key + ".entry")) << again.describe();
  EXPECT_EQ(run(check_args).exit_code, 0);
}

// Two specs that are each other's batch class ([8, 4096] and [1000, 4096]) are the same two
// kernels: prewarm compiles them once and counts the second spec as sharing them.
TEST_F(Prewarm, SpecsOfEachOthersBatchClassCompileOnce) {
  write_file(manifest_, manifest_of({"op=layernorm shape=8,4096 dtype=bf16",
                                     "op=layernorm shape=1000,4096 dtype=bf16"}));
  const std::string dir = home_ / "pair";
  const ToolResult r = run({"prewarm", manifest_, "--arch", "sm_90", "--cache-dir", dir});
  ASSERT_EQ(r.exit_code, 0) << r.describe();
  const Summary s = summary_of(r);
  EXPECT_EQ(s.compiled + s.cached, 1) << r.describe();
  EXPECT_NE(r.out.find("(2 kernels in " + dir + "; 1 more (spec, arch) pair shares"), npos)
      << r.describe();
  EXPECT_EQ(run({"prewarm", manifest_, "--arch", "sm_90", "--cache-dir", dir, "--check"}).exit_code,
            0);
}

// `cache explain` of a spec with two batch classes names the other class's spec and key (the
// file a JIT-off engine loads beside it); a spec of one class has no such line.
TEST_F(Prewarm, CacheExplainNamesTheOtherBatchClass) {
  const NormSpec two =
      NormSpec::parse("op=layernorm shape=1000,16384 dtype=bf16 normalized_dims=1 affine=both");
  const std::vector<NormSpec> classes = batch_class_specs(two);
  ASSERT_EQ(classes.size(), 2u);
  const NormSpec other = classes[1];
  const ToolResult r =
      run({"cache", "explain", two.to_string(), "--arch", "sm_90", "--cache-dir", home_ / "empty"});
  ASSERT_EQ(r.exit_code, 0) << r.describe();
  EXPECT_NE(r.out.find("other:      " + other.to_string() +
                       " key=" + key_inputs(other, Target::parse("sm_90")).key() +
                       " (the batch class of launches of at most 256 rows"),
            npos)
      << r.describe();
  const ToolResult one =
      run({"cache", "explain", kSpecs[0], "--arch", "sm_90", "--cache-dir", home_ / "empty"});
  ASSERT_EQ(one.exit_code, 0) << one.describe();
  EXPECT_EQ(one.out.find("other:"), npos) << one.describe();
}

// A spec with two batch classes whose plans come out the same (bf16 RMSNorm rows of 1024 with a
// weight load their parameters with x in both) is one kernel: `cache explain` names no other,
// prewarm writes and counts one entry, and --check finds it whole.
TEST_F(Prewarm, BatchClassesOfOneKernelCountOnce) {
  const NormSpec spec =
      NormSpec::parse("op=rmsnorm shape=1024,1024 dtype=bf16 normalized_dims=1 affine=weight");
  const Target h100 = Target::parse("sm_90");
  const std::vector<NormSpec> classes = batch_class_specs(spec);
  ASSERT_EQ(classes.size(), 2u);
  ASSERT_EQ(key_inputs(classes[1], h100).key(), key_inputs(spec, h100).key());
  const ToolResult explain =
      run({"cache", "explain", spec.to_string(), "--arch", "sm_90", "--cache-dir", home_ / "e"});
  ASSERT_EQ(explain.exit_code, 0) << explain.describe();
  EXPECT_EQ(explain.out.find("other:"), npos) << explain.describe();
  write_file(manifest_, R"([{"op": "rmsnorm", "shape": [1024, 1024], "dtype": "bf16",
                             "normalized_dims": 1, "affine": "weight"}])");
  const std::string dir = home_ / "one";
  const ToolResult r = run({"prewarm", manifest_, "--arch", "sm_90", "--cache-dir", dir});
  ASSERT_EQ(r.exit_code, 0) << r.describe();
  EXPECT_NE(r.out.find("(1 kernel in " + dir), npos) << r.describe();
  const ToolResult check =
      run({"prewarm", manifest_, "--arch", "sm_90", "--cache-dir", dir, "--check"});
  EXPECT_EQ(check.exit_code, 0) << check.describe();
  EXPECT_NE(check.out.find("holds 1 of 1 kernel"), npos) << check.describe();
}

TEST_F(Prewarm, DumpShowsACachedEntry) {
  const std::string dir = home_ / "shipped";
  ASSERT_EQ(prewarm(dir).exit_code, 0);
  const NormSpec spec = NormSpec::parse(kSpecs[1]);
  const std::string key = key_inputs(spec, Target::parse("sm_90")).key();
  const std::vector<std::string> flags = {"dump",
                                          "--op",
                                          to_string(spec.op),
                                          "--shape",
                                          format_shape(spec.shape),
                                          "--dtype",
                                          to_string(spec.dtype),
                                          "--affine",
                                          to_string(spec.affine),
                                          "--arch",
                                          "sm_90"};
  auto from_entry = [&](const char* emit) {
    return run({"dump", "--cache-entry", key, "--cache-dir", dir, "--emit", emit});
  };
  auto from_spec = [&](const char* emit) {
    std::vector<std::string> args = flags;
    args.insert(args.end(), {"--emit", emit});
    return run(args);
  };
  for (const char* emit : {"source", "ptx"}) {
    const ToolResult a = from_entry(emit), b = from_spec(emit);
    ASSERT_EQ(a.exit_code, 0) << a.describe();
    ASSERT_EQ(b.exit_code, 0) << b.describe();
    EXPECT_EQ(a.out, b.out) << emit;
  }
  const ToolResult plan = from_entry("plan");
  ASSERT_EQ(plan.exit_code, 0) << plan.describe();
  const nlohmann::json metadata = nlohmann::json::parse(plan.out);
  EXPECT_EQ(metadata.at("spec").get<std::string>(), spec.to_string());
  EXPECT_EQ(metadata.at("arch").get<std::string>(), "sm_90");

  const ToolResult resources = from_entry("resources");
  ASSERT_EQ(resources.exit_code, 0) << resources.describe();
  const ToolResult compiled = from_spec("resources");
  // The same report as compiling the spec, plus a note that the cubin is the entry's.
  EXPECT_EQ(resources.out.substr(0, compiled.out.size()), compiled.out) << resources.out;
  EXPECT_NE(resources.out.find("identical"), npos) << resources.out;
}

}  // namespace
}  // namespace normjit::testing
