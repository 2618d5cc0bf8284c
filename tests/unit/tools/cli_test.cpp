// The normjit command on bad input: every mistake a user can make on the command line ends in
// a non-zero exit and exactly one "normjit: error: " line that names what was wrong, so that a
// script's log shows the cause at once. And every subcommand's --help carries an example.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <tuple>
#include <vector>

#include "normjit/normjit.hpp"
#include "runtime/compiler.hpp"
#include "tests/unit/tools/run_tool.hpp"

namespace normjit::testing {
namespace {

constexpr const char* kErrorPrefix = "normjit: error: ";
constexpr size_t npos = std::string::npos;

// Expects an error exit with exactly one error line; returns that line.
// `cache explain` with the words of `text` (a line `cache ls` printed) as its arguments.
std::vector<std::string> words(const std::string& text) {
  std::vector<std::string> out{"cache", "explain"};
  for (size_t i = 0; i < text.size();) {
    const size_t end = std::min(text.find(' ', i), text.size());
    if (end > i) out.push_back(text.substr(i, end - i));
    i = end + 1;
  }
  return out;
}

std::string single_error(const ToolResult& r) {
  EXPECT_NE(r.exit_code, 0) << r.describe();
  const std::vector<std::string> lines = r.err_lines(kErrorPrefix);
  EXPECT_EQ(lines.size(), 1u) << r.describe();
  return lines.empty() ? "" : lines[0];
}

class Cli : public ::testing::Test {
 protected:
  // The tool's default cache is a temp dir and no prewarmed layer applies: no test reads or
  // writes ~/.cache.
  ToolResult run(const std::vector<std::string>& args) {
    return run_tool(args, {"NORMJIT_CACHE_DIR=" + cache_.path(), "NORMJIT_CACHE_READONLY"});
  }
  std::string manifest(const std::string& name, const std::string& text) {
    const std::string path = dir_ / name;
    write_file(path, text);
    return path;
  }

  TempDir dir_, cache_;
};

// A usage error points at the help of the command it was in; a command that needs a subcommand
// lists them.
TEST_F(Cli, UsageErrorsNameTheirCommandsHelp) {
  for (const auto& [args, says, help] :
       std::vector<std::tuple<std::vector<std::string>, std::string, std::string>>{
           {{"dump", "--emit", "PTX"}, "--emit: PTX", "normjit dump"},
           {{"cache", "ls", "--bogus"}, "--bogus", "normjit cache ls"},
           {{"cache"},
            "'normjit cache' needs a subcommand: one of ls, stats, verify, gc, clear, "
            "explain",
            "normjit cache"},
           {{},
            "'normjit' needs a subcommand: one of demo, dump, prewarm, cache, bench",
            "normjit"}}) {
    const ToolResult r = run(args);
    EXPECT_NE(r.exit_code, 0) << r.describe();
    EXPECT_EQ(r.err_lines("normjit: error: ").size(), 1u) << r.describe();
    EXPECT_NE(r.err.find(says), npos) << r.describe();
    EXPECT_NE(r.err.find("\nrun '" + help + " --help' for usage\n"), npos) << r.describe();
  }
}

TEST_F(Cli, UnknownOp) {
  for (const auto& args : std::vector<std::vector<std::string>>{
           {"dump", "--op", "softmax", "--shape", "8,64,32,32", "--arch", "sm_90"},
           {"bench", "--op", "softmax", "--shape", "8,64,32,32"}}) {
    const std::string& command = args[0];
    const std::string e = single_error(run(args));
    EXPECT_NE(e.find("'softmax'"), npos) << command << ": " << e;
    EXPECT_NE(e.find("rmsnorm"), npos) << command << ": the valid ops are listed: " << e;
  }
}

TEST_F(Cli, UnknownDtype) {
  const std::string e = single_error(run(
      {"dump", "--op", "rmsnorm", "--shape", "8,64,32,32", "--dtype", "f64", "--arch", "sm_90"}));
  EXPECT_NE(e.find("'f64'"), npos) << e;
  EXPECT_NE(e.find("bf16"), npos) << "the valid dtypes are listed: " << e;
}

TEST_F(Cli, MalformedShape) {
  for (const char* shape : {"8,64,abc", "8,,64", "8;64"}) {
    const std::string e =
        single_error(run({"dump", "--op", "rmsnorm", "--shape", shape, "--arch", "sm_90"}));
    EXPECT_NE(e.find(std::string("'") + shape + "'"), npos) << e;
    EXPECT_NE(e.find("shape"), npos) << e;
  }
}

TEST_F(Cli, UnknownArchListsTheSupportedOnes) {
  TempDir out;
  const std::string good = manifest("good.json", R"([{"op": "rmsnorm", "shape": [2, 64, 8]}])");
  for (const char* arch : {"sm_20", "sm_999", "compute_90", "volta"}) {
    for (const auto& args : std::vector<std::vector<std::string>>{
             {"dump", "--op", "rmsnorm", "--shape", "8,64,32,32", "--arch", arch},
             {"prewarm", good, "--arch", std::string("sm_80,") + arch, "--cache-dir", out.path()},
             {"prewarm", good, "--arch", arch, "--check", "--cache-dir", out.path()}}) {
      const std::string e = single_error(run(args));
      EXPECT_NE(e.find(std::string("'") + arch + "'"), npos) << args[0] << ": " << e;
      for (const std::string& supported : supported_archs()) {
        EXPECT_NE(e.find(supported), npos) << args[0] << ": lists " << supported << ": " << e;
      }
    }
  }
}

// --arch takes one value an occurrence, wherever it stands: before the manifest it used to take
// the manifest as a second target and then call the manifest missing.
TEST_F(Cli, PrewarmArchBeforeTheManifestTakesOneValue) {
  TempDir out;
  const std::string good = manifest("good.json", R"([{"op": "rmsnorm", "shape": [2, 64, 8]}])");
  for (const auto& args : std::vector<std::vector<std::string>>{
           {"prewarm", "--arch", "sm_90", good, "--cache-dir", out.path()},
           {"prewarm", "--arch=sm_80,sm_90", good, "--cache-dir", out.path()},
           {"prewarm", good, "--arch", "sm_80", "--arch", "sm_90", "--cache-dir", out.path()}}) {
    const ToolResult r = run(args);
    EXPECT_EQ(r.exit_code, 0) << r.describe();
    EXPECT_NE(r.out.find(" failed ("), npos) << r.describe();
  }
  const ToolResult both = run({"prewarm", good, "--arch", "sm_80", "--arch", "sm_90", "--check",
                               "--cache-dir", out.path()});
  EXPECT_EQ(both.exit_code, 0) << "both targets were compiled\n" << both.describe();
  EXPECT_NE(both.out.find("holds 2 of 2 kernels"), npos) << both.describe();
}

// prewarm names the directory as the user gave it, and --check calls a path that is not a
// directory an error (it said "(no such directory) holds 0" and listed every kernel missing).
TEST_F(Cli, PrewarmNamesTheDirectoryAsGivenAndChecksOnlyADirectory) {
  const std::string good = manifest("good.json", R"([{"op": "rmsnorm", "shape": [2, 64, 8]}])");
  const std::string file = manifest("a-file", "not a directory");
  const std::string flag =
      single_error(run({"prewarm", good, "--arch", "sm_90", "--cache-dir", file, "--check"}));
  EXPECT_NE(flag.find("invalid --cache-dir '" + file + "': is not a directory"), npos) << flag;
  const ToolResult env =
      run_tool({"prewarm", good, "--arch", "sm_90"}, {"NORMJIT_CACHE_DIR=" + file});
  const std::string e = single_error(env);
  EXPECT_NE(e.find("invalid NORMJIT_CACHE_DIR '" + file + "'"), npos) << e;
}

// A part's sizes after the arch: the error names the one that is wrong.
TEST_F(Cli, ArchSizesNameTheOneThatIsWrong) {
  for (const auto& [arch, why] : std::vector<std::pair<std::string, std::string>>{
           {"sm_90:0", "the multiprocessor count after ':'"},
           {"sm_90:x:4814", "the multiprocessor count after ':'"},
           {"sm_90:132:0", "the DRAM bandwidth (GB/s) after the second ':'"},
           {"sm_90:132:abc", "the DRAM bandwidth (GB/s) after the second ':'"}}) {
    const std::string e =
        single_error(run({"dump", "--op", "rmsnorm", "--shape", "8,64", "--arch", arch}));
    EXPECT_NE(e.find("invalid --arch '" + arch + "': " + why), npos) << e;
  }
}

TEST_F(Cli, DumpWithoutGpuNeedsArch) {
  if (gpu_available()) GTEST_SKIP() << "a GPU is present: dump takes its arch";
  const std::string e = single_error(run({"dump", "--op", "rmsnorm", "--shape", "8,64,32,32"}));
  EXPECT_NE(e.find("--arch"), npos) << e;
  EXPECT_NE(e.find("GPU"), npos) << "says why: " << e;
}

TEST_F(Cli, DumpNeedsASpec) {
  const std::string e = single_error(run({"dump", "--emit", "plan", "--arch", "sm_90"}));
  EXPECT_NE(e.find("--op"), npos) << e;
}

// A manifest of no spec (a generating step that produced nothing) fails prewarm and its check,
// naming the file, rather than passing with 0 of 0 kernels.
TEST_F(Cli, EmptyManifestIsAnError) {
  const std::string empty = manifest("empty.json", "[]\n");
  for (const char* check : {"", "--check"}) {
    std::vector<std::string> args = {"prewarm", empty,         "--arch",
                                     "sm_90",   "--cache-dir", cache_.path()};
    if (*check) args.push_back(check);
    const std::string e = single_error(run(args));
    EXPECT_NE(e.find("manifest '" + empty + "' lists no spec"), npos) << check << ": " << e;
  }
}

TEST_F(Cli, UnreadableManifest) {
  const std::string missing = dir_ / "no-such-manifest.json";
  for (const std::string& path : {missing, dir_.path()}) {  // absent; a directory
    for (const char* check : {"", "--check"}) {
      std::vector<std::string> args = {"prewarm", path,          "--arch",
                                       "sm_90",   "--cache-dir", cache_.path()};
      if (*check) args.push_back(check);
      const std::string e = single_error(run(args));
      EXPECT_NE(e.find("'" + path + "'"), npos) << e;
    }
  }
}

TEST_F(Cli, ManifestThatIsNotJson) {
  const std::string path = manifest("broken.json", "[{\"op\": \"rmsnorm\",\n \"shape\": [2, 64");
  const std::string e = single_error(run({"prewarm", path, "--arch", "sm_90"}));
  EXPECT_NE(e.find(path), npos) << e;
  EXPECT_NE(e.find("JSON"), npos) << e;
}

TEST_F(Cli, ManifestEntryWithBadValueNamesIndexLineAndValue) {
  struct Case {
    std::string text;
    std::vector<std::string> mentions;
  };
  const std::vector<Case> cases = {
      {"[\n  {\"op\": \"rmsnorm\", \"shape\": [2, 64, 8]},\n  {\"op\": \"rmsnorm\", \"shape\": "
       "[2, 64, 8], \"dtype\": \"f64\"}\n]\n",
       {"entry 1", "line 3", "'f64'"}},
      {"[{\"op\": \"rmsnorm\", \"shape\": [2, 64, 8]}, {\"op\": \"rmsnorm\", \"shape\": [2, "
       "\"64\", 8]}]",
       {"entry 1", "\"64\""}},
      {"[{\"op\": \"rmsnorm\", \"shape\": [2, 64, 8], \"dtyp\": \"f32\"}]", {"entry 0", "dtyp"}},
      {"[{\"op\": \"layernorm\", \"shape\": [2, 64, 8], \"eps\": \"small\"}]",
       {"entry 0", "\"small\""}},
      {"[{\"op\": \"groupnorm\", \"shape\": [2, 64, 8], \"groups\": 7}]", {"entry 0", "7"}},
      {"[{\"op\": \"rmsnorm\", \"shape\": [2, 0, 8]}]", {"entry 0", "2,0,8"}},
      {"[{\"op\": \"rmsnorm\", \"shape\": [2, 64, 8]},\n 42]", {"entry 1", "line 2", "42"}},
      {"{\"op\": \"rmsnorm\", \"shape\": [2, 64, 8]}", {"list"}},
  };
  for (size_t i = 0; i < cases.size(); ++i) {
    const std::string path = manifest("bad" + std::to_string(i) + ".json", cases[i].text);
    for (const char* check : {"", "--check"}) {
      std::vector<std::string> args = {"prewarm", path, "--arch", "sm_90"};
      if (*check) args.push_back(check);
      const std::string e = single_error(run(args));
      EXPECT_NE(e.find(path), npos) << e;
      for (const std::string& m : cases[i].mentions) {
        EXPECT_NE(e.find(m), npos) << "case " << i << " names " << m << ": " << e;
      }
    }
  }
}

TEST_F(Cli, UnwritableOutput) {
  for (const std::string& path : {dir_ / "no-such-dir/out.txt", dir_.path()}) {
    const std::string e = single_error(
        run({"dump", "--op", "rmsnorm", "--shape", "8,64,32,32", "--arch", "sm_90", "-o", path}));
    EXPECT_NE(e.find("'" + path + "'"), npos) << e;
  }
}

// demo without a GPU compiles the seeds into its cache directory and says where each went: a
// save that fails (the cache's fault hook: a full disk) leaves the kernel in memory alone,
// which it says, rather than naming the directory that does not hold it.
TEST_F(Cli, DemoSaysWhereEachKernelWent) {
  const std::string dir = dir_ / "demo";
  const ToolResult saved = normjit::testing::run_tool(
      {"demo", "--cache-dir", dir}, {"CUDA_VISIBLE_DEVICES=", "NORMJIT_CACHE_FAULT="});
  ASSERT_EQ(saved.exit_code, 0) << saved.describe();
  EXPECT_NE(saved.out.find("binary: compiled now"), npos) << saved.describe();
  EXPECT_EQ(saved.out.find("in memory only"), npos) << saved.describe();
  EXPECT_TRUE(saved.err_lines("normjit: warning").empty()) << saved.describe();
  // --repeat and --samples time and check launches: without a GPU the run says they went unused
  // (it took them in silence).
  const ToolResult timed =
      normjit::testing::run_tool({"demo", "--cache-dir", dir, "--repeat", "3", "--samples", "2"},
                                 {"CUDA_VISIBLE_DEVICES=", "NORMJIT_CACHE_FAULT="});
  ASSERT_EQ(timed.exit_code, 0) << timed.describe();
  EXPECT_NE(timed.out.find("binary: already cached"), npos) << timed.describe();
  EXPECT_EQ(timed.err_lines("normjit: warning: --repeat and --samples apply only on a GPU").size(),
            1u)
      << timed.describe();
  const std::string full = dir_ / "full";
  const ToolResult failed = normjit::testing::run_tool(
      {"demo", "--cache-dir", full}, {"CUDA_VISIBLE_DEVICES=", "NORMJIT_CACHE_FAULT=enospc"});
  ASSERT_EQ(failed.exit_code, 0) << failed.describe();
  EXPECT_NE(failed.out.find("binary: compiled now"), npos) << failed.describe();
  EXPECT_EQ(failed.out.find(", in " + full), npos) << failed.describe();
  EXPECT_NE(failed.out.find("in memory only (it could not be written to " + full), npos)
      << failed.describe();
}

// Standard output that cannot be written (a full disk): the command fails and says so, for the
// outputs printed through iostreams (dump) and through stdio alike.
TEST_F(Cli, AFailedWriteToStandardOutputIsAFailure) {
  for (const std::vector<std::string>& args : std::vector<std::vector<std::string>>{
           {"dump", "--op", "rmsnorm", "--shape", "8,64", "--arch", "sm_90", "--emit", "ptx"},
           {"dump", "--op", "rmsnorm", "--shape", "8,64", "--arch", "sm_90", "--emit", "plan"},
           {"cache", "ls", "--cache-dir", dir_.path()},
           {"--version"},
           {"prewarm", "--help"}}) {
    const ToolResult r = normjit::testing::run_tool(args, {}, "/dev/full");
    EXPECT_EQ(r.exit_code, 1) << args[0] << " " << args.back() << "\n" << r.describe();
    EXPECT_NE(r.err.find("normjit: error: cannot write standard output"), npos) << r.describe();
  }
}

TEST_F(Cli, UnwritableCacheDirectoryFailsPrewarm) {
  const std::string good = manifest("good.json", R"([{"op": "rmsnorm", "shape": [2, 64, 8]}])");
  const std::string file = manifest("a-file", "not a directory");
  // A path that is a file, and one that cannot be created (under a file). The store's own
  // warning ends "kernels are cached in memory only", which a failed prewarm used to echo.
  for (const std::string& dir : {file, file + "/sub"}) {
    const ToolResult r = run({"prewarm", good, "--arch", "sm_90", "--cache-dir", dir});
    const std::string e = single_error(r);
    EXPECT_EQ(r.exit_code, 1) << r.describe();
    EXPECT_NE(e.find("--cache-dir '" + dir + "'"), npos) << e;
    EXPECT_NE(e.find("prewarm cannot write"), npos) << e;
    EXPECT_NE(e.find("so it fails"), npos) << e;
    EXPECT_EQ(e.find("memory only"), npos) << e;
  }
}

TEST_F(Cli, DumpOfAbsentCacheEntryNamesKeyAndDirectories) {
  const std::string key(64, '0');
  const std::string e =
      single_error(run({"dump", "--cache-entry", key, "--cache-dir", cache_.path()}));
  EXPECT_NE(e.find(key), npos) << e;
  EXPECT_NE(e.find(cache_.path()), npos) << e;
  const std::string bad = single_error(run({"dump", "--cache-entry", "xyz"}));
  EXPECT_NE(bad.find("'xyz'"), npos) << bad;
}

TEST_F(Cli, BenchWithoutGpuSaysSo) {
  if (gpu_available()) GTEST_SKIP() << "a GPU is present: bench would run";
  for (const auto& args :
       std::vector<std::vector<std::string>>{{"bench", "--op", "rmsnorm", "--shape", "8,64,32,32"},
                                             {"bench", "--seeds"},
                                             {"bench", "--jit-latency"}}) {
    const std::string e = single_error(run(args));
    EXPECT_NE(e.find("GPU"), npos) << e;
    EXPECT_NE(e.find(gpu_unavailable_reason()), npos) << "says why: " << e;
  }
}

TEST_F(Cli, BenchNeedsExactlyOneThingToTime) {
  for (const auto& args :
       std::vector<std::vector<std::string>>{{"bench"}, {"bench", "--seeds", "--jit-latency"}}) {
    const std::string e = single_error(run(args));
    EXPECT_NE(e.find("--seeds"), npos) << e;
  }
}

TEST_F(Cli, BenchSpecsFileNamesTheFileAndTheBadLine) {
  const std::string missing = dir_ / "no-such-list.txt";
  const std::string e = single_error(run({"bench", "--specs", missing, "--compile"}));
  EXPECT_NE(e.find("'" + missing + "'"), npos) << e;
  const std::string empty = manifest("empty.txt", "# nothing\n\n");
  const std::string none = single_error(run({"bench", "--specs", empty, "--compile"}));
  EXPECT_NE(none.find("no spec"), npos) << none;
  const std::string bad =
      manifest("bad.txt",
               "# decode rows\nop=rmsnorm shape=1,4096 dtype=bf16 normalized_dims=1\n\n"
               "op=rmsnorm shape=1,4096 dtype=q7 normalized_dims=1\n");
  const std::string line = single_error(run({"bench", "--specs", bad, "--compile"}));
  EXPECT_NE(line.find("line 4"), npos) << line;
  EXPECT_NE(line.find("'q7'"), npos) << line;
  // --specs is one of the things to time, not one more beside --seeds.
  const std::string both = single_error(run({"bench", "--specs", bad, "--seeds"}));
  EXPECT_NE(both.find("--specs"), npos) << both;
}

// What the tool prints as a spec reads back: cache ls's line (with its arch= word), prewarm
// --check's (arch= and key=) and dump --emit plan's first line ("spec: ...") explain the same
// entry; an --arch that contradicts the line's arch= is named; bench --specs takes dump's
// "spec:" and names an arch= word it cannot honour.
TEST_F(Cli, PrintedSpecsReadBack) {
  const std::string manifest_path = manifest(
      "m.json", R"([{"op": "rmsnorm", "shape": [8, 64], "dtype": "bf16", "normalized_dims": 1}])");
  ASSERT_EQ(run({"prewarm", manifest_path, "--arch", "sm_80"}).exit_code, 0);
  const ToolResult ls = run({"cache", "ls"});
  ASSERT_EQ(ls.exit_code, 0) << ls.describe();
  const size_t at = ls.out.find("op=rmsnorm");
  ASSERT_NE(at, npos) << ls.describe();
  const std::string listed = ls.out.substr(at, ls.out.find('\n', at) - at);
  ASSERT_NE(listed.find(" arch=sm_80"), npos) << listed;
  const ToolResult explained = run(words(listed));
  ASSERT_EQ(explained.exit_code, 0) << explained.describe();
  EXPECT_NE(explained.out.find("target:     sm_80"), npos) << explained.describe();
  EXPECT_NE(explained.out.find("present:    yes"), npos) << explained.describe();
  // A hit is not compared with the other entries (the other batch class's is there).
  EXPECT_EQ(explained.out.find("nearest:"), npos) << explained.describe();
  const std::string key = explained.out.substr(explained.out.find("key:") + 12, 64);

  std::vector<std::string> with_key = words(listed + " key=" + key);
  const ToolResult same = run(with_key);
  EXPECT_EQ(same.exit_code, 0) << same.describe();
  EXPECT_EQ(same.out.find("note:"), npos) << same.describe();
  const ToolResult other = run(words(listed + " key=" + std::string(64, 'f')));
  EXPECT_NE(other.out.find("is not this spec's on this target"), npos) << other.describe();

  std::vector<std::string> contradicted = words(listed);
  contradicted.insert(contradicted.end(), {"--arch", "sm_90"});
  const std::string e = single_error(run(contradicted));
  EXPECT_NE(e.find("--arch 'sm_90'"), npos) << e;
  EXPECT_NE(e.find("arch=sm_80"), npos) << e;

  const ToolResult plan = run({"dump", "--op", "rmsnorm", "--shape", "8,64", "--dtype", "bf16",
                               "--normalized-dims", "1", "--emit", "plan", "--arch", "sm_80"});
  ASSERT_EQ(plan.exit_code, 0) << plan.describe();
  const std::string first = plan.out.substr(0, plan.out.find('\n'));
  ASSERT_EQ(first.rfind("spec: ", 0), 0u) << first;
  std::vector<std::string> from_plan = words(first);
  from_plan.insert(from_plan.end(), {"--arch", "sm_80"});
  const ToolResult by_plan = run(from_plan);
  EXPECT_EQ(by_plan.exit_code, 0) << by_plan.describe();
  EXPECT_NE(by_plan.out.find("key:        " + key), npos) << by_plan.describe();

  // An arch= or key= word given twice is an error, as a spec's own keys are (the last won).
  for (const std::string& twice :
       {listed + " arch=sm_90", listed + " key=" + key + " key=" + key}) {
    const std::string refused_twice = single_error(run(words(twice)));
    EXPECT_NE(refused_twice.find("is given twice"), npos) << refused_twice;
  }
  const std::string dumped_twice =
      single_error(run({"dump", "op=rmsnorm shape=8,64 arch=sm_80 arch=sm_90", "--emit", "plan"}));
  EXPECT_NE(dumped_twice.find("key 'arch' is given twice"), npos) << dumped_twice;

  const std::string specs = manifest("specs.txt", first + "\n");
  const ToolResult timed =
      run({"bench", "--compile", "--specs", specs, "--arch", "sm_80", "--repeat", "1", "--json"});
  EXPECT_EQ(timed.exit_code, 0) << timed.describe();
  const std::string with_arch = manifest("arch.txt", listed + "\n");
  const std::string refused =
      single_error(run({"bench", "--compile", "--specs", with_arch, "--arch", "sm_80"}));
  EXPECT_NE(refused.find("line 1"), npos) << refused;
  EXPECT_NE(refused.find("arch=sm_80"), npos) << refused;
}

// --spec TEXT (or the text alone, positional) stands for the flags: the plan's own "spec:" line
// given back to dump prints the same plan, and bench --compile takes it; beside a spec flag,
// empty or malformed, it is refused naming --spec.
TEST_F(Cli, DumpAndBenchTakeTheSpecAsText) {
  const std::vector<std::string> flags = {"--op",    "groupnorm", "--shape",  "2,320,63,63",
                                          "--dtype", "f16",       "--groups", "32"};
  std::vector<std::string> by_flags = {"dump", "--emit", "plan", "--arch", "sm_90:132:4814"};
  by_flags.insert(by_flags.end(), flags.begin(), flags.end());
  const ToolResult plan = run(by_flags);
  ASSERT_EQ(plan.exit_code, 0) << plan.describe();
  const std::string first = plan.out.substr(0, plan.out.find('\n'));
  ASSERT_EQ(first.rfind("spec: ", 0), 0u) << first;
  const std::string text = first.substr(6);
  const ToolResult by_text =
      run({"dump", "--emit", "plan", "--arch", "sm_90:132:4814", "--spec", text});
  ASSERT_EQ(by_text.exit_code, 0) << by_text.describe();
  EXPECT_EQ(by_text.out, plan.out);
  const ToolResult timed = run({"bench", "--compile", "--arch", "sm_80", "--repeat", "1", "--json",
                                "--spec", "op=rmsnorm shape=8,64 normalized_dims=1 dtype=bf16"});
  EXPECT_EQ(timed.exit_code, 0) << timed.describe();
  EXPECT_NE(timed.out.find("op=rmsnorm shape=8,64"), npos) << timed.describe();

  for (const char* command : {"dump", "bench"}) {
    const std::string both =
        single_error(run({command, "--arch", "sm_90", "--spec", text, "--dtype", "bf16"}));
    EXPECT_NE(both.find("--spec '" + text.substr(0, 20)), npos) << both;
    EXPECT_NE(both.find("not both"), npos) << both;
  }
  const std::string empty = single_error(run({"dump", "--arch", "sm_90", "--spec", " "}));
  EXPECT_NE(empty.find("invalid --spec ' '"), npos) << empty;
  const std::string bad =
      single_error(run({"dump", "--arch", "sm_90", "--spec", "op=rmsnorm shape=8,64 dtype=f64"}));
  EXPECT_NE(bad.find("--spec: "), npos) << bad;
  EXPECT_NE(bad.find("'f64'"), npos) << bad;

  // The spec as the tools print it: dump --emit plan's "spec: ..." line whole, and cache ls's
  // "... arch=TARGET" (dump then plans for that target, unless --arch names another).
  const ToolResult pasted =
      run({"dump", "--emit", "plan", "--arch", "sm_90:132:4814", "--spec", first});
  ASSERT_EQ(pasted.exit_code, 0) << pasted.describe();
  EXPECT_EQ(pasted.out, plan.out);
  const ToolResult with_arch =
      run({"dump", "--emit", "plan", "--spec", text + " arch=sm_90:132:4814"});
  ASSERT_EQ(with_arch.exit_code, 0) << with_arch.describe();
  EXPECT_EQ(with_arch.out, plan.out);
  const std::string other =
      single_error(run({"dump", "--arch", "sm_80", "--spec", text + " arch=sm_90"}));
  EXPECT_NE(other.find("invalid --arch 'sm_80': differs from the spec's arch=sm_90"), npos)
      << other;
  const std::string compile_arch = single_error(
      run({"bench", "--compile", "--repeat", "1", "--spec", "op=rmsnorm shape=8,64 arch=sm_90"}));
  EXPECT_NE(compile_arch.find("its arch=sm_90: bench --compile compiles for --arch"), npos)
      << compile_arch;

  // The text as the one positional argument, as `cache explain` takes it: the same plan; with
  // --spec as well, refused naming both.
  const ToolResult positional = run({"dump", "--emit", "plan", "--arch", "sm_90:132:4814", first});
  ASSERT_EQ(positional.exit_code, 0) << positional.describe();
  EXPECT_EQ(positional.out, plan.out);
  const ToolResult timed_positional = run({"bench", "--compile", "--arch", "sm_80", "--repeat", "1",
                                           "--json", "op=rmsnorm shape=8,64 dtype=bf16"});
  EXPECT_EQ(timed_positional.exit_code, 0) << timed_positional.describe();
  EXPECT_NE(timed_positional.out.find("op=rmsnorm shape=8,64"), npos)
      << timed_positional.describe();
  const std::string twice = single_error(run({"dump", "--arch", "sm_90", text, "--spec", text}));
  EXPECT_NE(twice.find("--spec excludes SPEC"), npos) << twice;
}

// A kernel planned for a part other than the arch's full-size one (a multiprocessor count, a
// DRAM bandwidth) is listed with that target, and its line explains as present: the GroupNorm
// backward of large f32 channels streams on an H200 (sm_90:132:4814) and not on the H100 that
// plain sm_90 means, so a listing that said arch=sm_90 would explain as a miss.
TEST_F(Cli, EntriesOfAnotherPartListAndExplainWithItsTarget) {
  const std::string manifest_path =
      manifest("gn.json", R"([{"op": "groupnorm", "shape": [2, 8, 65536], "groups": 2,
                               "backward": true}])");
  ASSERT_EQ(run({"prewarm", manifest_path, "--arch", "sm_90:132:4814"}).exit_code, 0);
  const ToolResult ls = run({"cache", "ls"});
  ASSERT_EQ(ls.exit_code, 0) << ls.describe();
  const size_t at = ls.out.find("op=groupnorm");
  ASSERT_NE(at, npos) << ls.describe();
  const std::string listed = ls.out.substr(at, ls.out.find('\n', at) - at);
  ASSERT_NE(listed.find(" arch=sm_90:132:4814"), npos) << listed;
  const ToolResult explained = run(words(listed));
  ASSERT_EQ(explained.exit_code, 0) << explained.describe();
  EXPECT_NE(explained.out.find("target:     sm_90:132:4814"), npos) << explained.describe();
  EXPECT_NE(explained.out.find("present:    yes"), npos) << explained.describe();
  // The plan says which bandwidth it was made for.
  const ToolResult plan = run({"dump", "--op", "groupnorm", "--shape", "2,8,65536", "--groups", "2",
                               "--backward", "--arch", "sm_90:132:4814"});
  ASSERT_EQ(plan.exit_code, 0) << plan.describe();
  EXPECT_NE(plan.out.find("arch: sm_90:132:4814"), npos) << plan.describe();
  EXPECT_NE(plan.out.find("streamed (DRAM of 4814 GB/s"), npos) << plan.describe();
}

// An entry whose payload is corrupt (its header and preimage intact) is no hit for a load, so
// explain does not call it present: by spec and by key, it names the bad entry and why.
TEST_F(Cli, ExplainCallsAnEntryWithACorruptPayloadBad) {
  const std::string manifest_path = manifest("r.json", R"([{"op": "rmsnorm", "shape": [8, 64]}])");
  ASSERT_EQ(run({"prewarm", manifest_path, "--arch", "sm_90"}).exit_code, 0);
  std::vector<std::filesystem::path> entries;
  for (const auto& f : std::filesystem::recursive_directory_iterator(cache_.path())) {
    if (f.is_regular_file() && f.path().filename().string().size() > 64 &&
        f.path().filename().string().find(".json") == npos) {
      entries.push_back(f.path());
    }
  }
  ASSERT_EQ(entries.size(), 1u);
  std::string bytes = read_file(entries[0]);
  ASSERT_GT(bytes.size(), 16u);
  bytes.back() = static_cast<char>(bytes.back() ^ 0x5a);  // the payload's last byte
  write_file(entries[0], bytes);
  const std::string key = entries[0].filename().string().substr(0, 64);
  for (const std::vector<std::string>& args : std::vector<std::vector<std::string>>{
           {"cache", "explain", "op=rmsnorm shape=8,64", "--arch", "sm_90"},
           {"cache", "explain", key}}) {
    const ToolResult r = run(args);
    ASSERT_EQ(r.exit_code, 0) << r.describe();
    EXPECT_EQ(r.out.find("present:    yes"), npos) << r.describe();
    EXPECT_NE(r.out.find("present:    a bad entry at " + entries[0].string() + ": "), npos)
        << r.describe();
  }
  // ls and stats check entries whole too: they call it bad where verify does (they used to read
  // the header only, so ls listed the entry's spec and stats counted no bad entry).
  const ToolResult ls = run({"cache", "ls"});
  EXPECT_EQ(ls.exit_code, 0) << ls.describe();
  EXPECT_NE(ls.out.find(key), npos) << ls.describe();
  EXPECT_NE(ls.out.find("BAD: payload checksum mismatch"), npos) << ls.describe();
  EXPECT_EQ(ls.out.find("op=rmsnorm"), npos) << ls.describe();
  const ToolResult stats = run({"cache", "stats"});
  EXPECT_EQ(stats.exit_code, 0) << stats.describe();
  EXPECT_NE(stats.out.find("1 in the writable layer"), npos) << stats.describe();
  EXPECT_NE(stats.out.find("1 of them bad"), npos) << stats.describe();
  const ToolResult verify = run({"cache", "verify"});
  EXPECT_NE(verify.exit_code, 0) << verify.describe();
  EXPECT_NE(verify.out.find("1 entry checked, 1 bad"), npos) << verify.describe();
  EXPECT_NE(verify.err.find("verify --remove' deletes"), npos) << verify.describe();
  // The same entry in a read-only layer: --remove would not touch it, so it is not advised.
  TempDir empty;
  const ToolResult shipped =
      run_tool({"cache", "verify"},
               {"NORMJIT_CACHE_DIR=" + empty.path(), "NORMJIT_CACHE_READONLY=" + cache_.path()});
  EXPECT_NE(shipped.exit_code, 0) << shipped.describe();
  EXPECT_NE(shipped.err.find("they are in read-only layers, which are never changed"), npos)
      << shipped.describe();
  EXPECT_EQ(shipped.err.find("--remove"), npos) << shipped.describe();
  // prewarm --check: the kernel is not there, and its entry is named corrupt, with why.
  const ToolResult check = run({"prewarm", manifest_path, "--arch", "sm_90", "--check"});
  EXPECT_NE(check.exit_code, 0) << check.describe();
  EXPECT_NE(check.out.find("corrupt entry 0"), npos) << check.describe();
  EXPECT_NE(check.out.find("key=" + key + ": payload checksum mismatch"), npos) << check.describe();
}

// A listing without a layer it could not read is not the whole cache: ls and stats list what
// they read, name the layer (NOT READ) and fail, as verify does (they exited 0 with a warning).
// verify of a named directory that does not exist fails: "0 entries checked, 0 bad" would pass
// an image's check of a mistyped path.
TEST_F(Cli, CacheCommandsFailOnWhatTheyCouldNotRead) {
  const std::string missing = dir_ / "no-such-layer";
  for (const char* command : {"ls", "stats", "verify"}) {
    const ToolResult r = run_tool({"cache", command}, {"NORMJIT_CACHE_DIR=" + cache_.path(),
                                                       "NORMJIT_CACHE_READONLY=" + missing});
    EXPECT_NE(r.exit_code, 0) << command << "\n" << r.describe();
    EXPECT_NE(r.err.find("1 read-only layer could not be read"), npos) << r.describe();
  }
  const ToolResult ls = run_tool(
      {"cache", "ls"}, {"NORMJIT_CACHE_DIR=" + cache_.path(), "NORMJIT_CACHE_READONLY=" + missing});
  EXPECT_NE(ls.out.find("NOT READ read-only cache layer " + missing), npos) << ls.describe();
  const std::string typo = dir_ / "typo";
  for (const std::vector<std::string>& env : std::vector<std::vector<std::string>>{
           {"NORMJIT_CACHE_READONLY"}, {"NORMJIT_CACHE_READONLY", "NORMJIT_CACHE_DIR=" + typo}}) {
    std::vector<std::string> args = {"cache", "verify"};
    if (env.size() == 1) args.insert(args.end(), {"--cache-dir", typo});
    const std::string e = single_error(run_tool(args, env));
    EXPECT_NE(e.find("'" + typo + "': does not exist: nothing to verify"), npos) << e;
    EXPECT_NE(e.find(env.size() == 1 ? "--cache-dir" : "NORMJIT_CACHE_DIR"), npos) << e;
  }
}

// A layer named twice, or the writable one named again, is searched once, and the listing's
// header says so where it names the layers (it listed every name as a layer).
TEST_F(Cli, CacheListingNamesALayerSearchedOnceUnderAnotherName) {
  TempDir ro;
  const ToolResult ls = run_tool({"cache", "ls"}, {"NORMJIT_CACHE_DIR=" + cache_.path(),
                                                   "NORMJIT_CACHE_READONLY=" + ro.path() + ":" +
                                                       ro.path() + "/:" + cache_.path() + "/"});
  EXPECT_EQ(ls.exit_code, 0) << ls.describe();
  EXPECT_NE(ls.out.find("read-only layer: " + ro.path() + "\n"), npos) << ls.describe();
  for (const std::string& again : {ro.path() + "/", cache_.path() + "/"}) {
    EXPECT_NE(ls.out.find("read-only layer: " + again +
                          " (the writable layer or an earlier one "
                          "under another name: searched once)"),
              npos)
        << ls.describe();
  }
}

// A malformed NORMJIT_CACHE_MAX_BYTES: one warning a command, and cache gc, which evicts down to
// its limit, refuses to take the default in its place unless --max-bytes is given.
TEST_F(Cli, MalformedCacheLimitWarnsOnceAndStopsGc) {
  const std::vector<std::string> env = {"NORMJIT_CACHE_DIR=" + cache_.path(),
                                        "NORMJIT_CACHE_READONLY", "NORMJIT_CACHE_MAX_BYTES=1.5G"};
  const std::string warning = "normjit: warning: NORMJIT_CACHE_MAX_BYTES='1.5G' is not a byte";
  for (const std::vector<std::string>& args :
       std::vector<std::vector<std::string>>{{"cache", "ls"}, {"cache", "verify"}}) {
    const ToolResult r = normjit::testing::run_tool(args, env);
    EXPECT_EQ(r.exit_code, 0) << r.describe();
    EXPECT_EQ(r.err_lines(warning).size(), 1u) << r.describe();
  }
  const ToolResult gc = normjit::testing::run_tool({"cache", "gc"}, env);
  EXPECT_NE(gc.exit_code, 0) << gc.describe();
  EXPECT_NE(gc.err.find("normjit: error: NORMJIT_CACHE_MAX_BYTES='1.5G' is not a byte count"), npos)
      << gc.describe();
  EXPECT_NE(gc.err.find("give --max-bytes"), npos) << gc.describe();
  EXPECT_EQ(gc.err.find("using the default"), npos) << "it does not say it uses one\n"
                                                    << gc.describe();
  const ToolResult given = normjit::testing::run_tool({"cache", "gc", "--max-bytes", "1G"}, env);
  EXPECT_EQ(given.exit_code, 0) << given.describe();
}

TEST_F(Cli, VersionNamesNormjitAndNvrtc) {
  const ToolResult r = run({"--version"});
  EXPECT_EQ(r.exit_code, 0) << r.describe();
  EXPECT_EQ(r.out.rfind("normjit " NORMJIT_VERSION "\n", 0), 0u) << r.describe();
  EXPECT_NE(r.out.find(nvrtc_version()), npos) << r.describe();
  EXPECT_EQ(r.err, "") << r.describe();
}

// dump plans and compiles a spec without the cache: --cache-dir there used to be ignored.
TEST_F(Cli, DumpCacheDirOnlyAppliesWithCacheEntry) {
  const std::string e = single_error(run({"dump", "--op", "rmsnorm", "--shape", "8,64", "--arch",
                                          "sm_90", "--cache-dir", dir_.path()}));
  EXPECT_NE(e.find("--cache-dir '" + dir_.path() + "'"), npos) << e;
  EXPECT_NE(e.find("only applies with --cache-entry"), npos) << e;
}

// On the GPU bench times GPU 0's own target: --arch without --compile used to do nothing.
TEST_F(Cli, BenchArchOnlyAppliesWithCompile) {
  for (const auto& args : std::vector<std::vector<std::string>>{
           {"bench", "--op", "rmsnorm", "--shape", "8,64", "--arch", "sm_90"},
           {"bench", "--seeds", "--arch", "sm_90"}}) {
    const ToolResult r = run(args);
    const std::string e = single_error(r);
    EXPECT_EQ(r.exit_code, 1) << r.describe();
    EXPECT_NE(e.find("--arch 'sm_90'"), npos) << e;
    EXPECT_NE(e.find("only applies with --compile"), npos) << e;
  }
}

// --compile times NVRTC alone: --cache-dir and --warmup used to be accepted and unused there,
// and --calls is only read by --jit-latency.
TEST_F(Cli, BenchCompileRefusesFlagsItDoesNotUse) {
  const std::vector<std::string> compile = {"bench",   "--compile", "--op",   "rmsnorm",
                                            "--shape", "8,64",      "--arch", "sm_90"};
  struct Case {
    std::vector<std::string> extra;
    std::string named;
  };
  for (const Case& c :
       std::vector<Case>{{{"--cache-dir", dir_.path()}, "--cache-dir '" + dir_.path() + "'"},
                         {{"--warmup", "5"}, "--warmup '5'"},
                         {{"--calls", "100"}, "--calls '100'"}}) {
    std::vector<std::string> args = compile;
    args.insert(args.end(), c.extra.begin(), c.extra.end());
    const ToolResult r = run(args);
    const std::string e = single_error(r);
    EXPECT_EQ(r.exit_code, 1) << r.describe();
    EXPECT_NE(e.find(c.named), npos) << e;
    EXPECT_NE(e.find("--compile"), npos) << e;
  }
  // --calls without --jit-latency, GPU or not.
  const std::string e = single_error(run({"bench", "--seeds", "--calls", "100"}));
  EXPECT_NE(e.find("--calls '100'"), npos) << e;
  EXPECT_NE(e.find("only applies with --jit-latency"), npos) << e;
  // --repeat is what --compile counts.
  std::vector<std::string> repeat = compile;
  repeat.insert(repeat.end(), {"--repeat", "1"});
  EXPECT_EQ(run(repeat).exit_code, 0);
  // --jit-latency counts its own samples and warms nothing up: both named, GPU or not.
  for (const auto& [flag, value] : {std::pair{"--warmup", "2"}, std::pair{"--repeat", "7"}}) {
    const std::string latency = single_error(run({"bench", "--jit-latency", flag, value}));
    EXPECT_NE(latency.find(std::string(flag) + " '" + value + "'"), npos) << latency;
    EXPECT_NE(latency.find("does not apply with --jit-latency"), npos) << latency;
  }
}

// A key fixes its target: --arch (or an arch= word) beside one used to be checked, then unused.
TEST_F(Cli, CacheExplainOfAKeyRefusesATarget) {
  const std::string key(64, 'a');
  const ToolResult flag = run({"cache", "explain", key, "--arch", "sm_80"});
  const std::string e = single_error(flag);
  EXPECT_EQ(flag.exit_code, 1) << flag.describe();
  EXPECT_NE(e.find("--arch 'sm_80'"), npos) << e;
  EXPECT_NE(e.find("a key names its target already"), npos) << e;
  for (const std::string& request : {key, "key=" + key}) {
    const std::string word = single_error(run({"cache", "explain", request, "arch=sm_80"}));
    EXPECT_NE(word.find("arch 'sm_80'"), npos) << word;
    EXPECT_NE(word.find("drop the arch= word"), npos) << word;
    // Alone, the key is explained.
    const ToolResult alone = run({"cache", "explain", request});
    EXPECT_EQ(alone.exit_code, 0) << alone.describe();
    EXPECT_NE(alone.out.find("key:        " + key), npos) << alone.describe();
  }
}

// cache stats names where its size limit came from: an unset or malformed
// NORMJIT_CACHE_MAX_BYTES leaves the default, which used to be labeled as the variable's.
TEST_F(Cli, CacheStatsNamesTheSourceOfItsLimit) {
  const auto stats = [&](const std::string& max) {
    return run_tool({"cache", "stats"},
                    {"NORMJIT_CACHE_DIR=" + cache_.path(), "NORMJIT_CACHE_READONLY", max});
  };
  for (const std::string& max :
       {std::string("NORMJIT_CACHE_MAX_BYTES"), std::string("NORMJIT_CACHE_MAX_BYTES=lots")}) {
    const ToolResult r = stats(max);
    EXPECT_EQ(r.exit_code, 0) << r.describe();
    EXPECT_NE(r.out.find("of 2.0 GiB (default)"), npos) << max << "\n" << r.describe();
  }
  const ToolResult set = stats("NORMJIT_CACHE_MAX_BYTES=512M");
  EXPECT_EQ(set.exit_code, 0) << set.describe();
  EXPECT_NE(set.out.find("of 512.0 MiB (NORMJIT_CACHE_MAX_BYTES)"), npos) << set.describe();
}

TEST_F(Cli, HelpOfEverySubcommandHasAnExample) {
  for (const auto& command : std::vector<std::vector<std::string>>{
           {}, {"demo"}, {"dump"}, {"prewarm"}, {"cache"}, {"bench"}}) {
    std::vector<std::string> args = command;
    args.push_back("--help");
    const ToolResult r = run(args);
    EXPECT_EQ(r.exit_code, 0) << r.describe();
    EXPECT_NE(r.out.find("Example"), npos) << r.describe();
  }
}

}  // namespace
}  // namespace normjit::testing
