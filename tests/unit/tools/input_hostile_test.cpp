// The normjit command on hostile or careless input: manifests that are deep, huge or endless,
// values that used to be replaced by defaults, wrapped or clamped, targets that used to be built
// as another target, and values that used to split an error over lines. Each ends in a non-zero
// exit and one bounded "normjit: error: " line naming the argument and the value given, in
// bounded time and memory (the tool runs under `timeout` and a data-size limit).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include "normjit/error.hpp"
#include "runtime/compiler.hpp"
#include "tests/unit/tools/run_tool.hpp"

namespace normjit::testing {
namespace {

constexpr const char* kErrorPrefix = "normjit: error: ";
constexpr size_t npos = std::string::npos;
constexpr size_t kMaxErrorLine = 600;  // far above any message; far below a quoted 1 MiB value

// Expects an error exit (not a signal) with exactly one error line, every other line of stderr
// a usage hint, so that a value's newline cannot have split the message; returns that line.
std::string one_line_error(const ToolResult& r) {
  EXPECT_NE(r.exit_code, 0) << r.describe();
  EXPECT_LT(r.exit_code, 124) << "killed (timeout or signal): " << r.describe().substr(0, 2000);
  std::vector<std::string> errors;
  std::istringstream in(r.err);
  for (std::string line; std::getline(in, line);) {
    if (line.rfind(kErrorPrefix, 0) == 0) {
      errors.push_back(line);
    } else {
      EXPECT_EQ(line.rfind("run '", 0), 0u) << "a stray line: " << r.describe().substr(0, 2000);
    }
  }
  EXPECT_EQ(errors.size(), 1u) << r.describe().substr(0, 2000);
  if (errors.empty()) return "";
  EXPECT_LT(errors[0].size(), kMaxErrorLine) << errors[0].substr(0, 2000);
  return errors[0];
}

// A sanitizer's runtime maps terabytes of shadow memory at start, which a data limit refuses:
// sanitizer builds (the tool is built with the same flags) run the tool under the deadline
// alone, and the plain build keeps the memory bound.
#ifdef NORMJIT_SANITIZED
constexpr const char* kDataLimit = "";
#else
constexpr const char* kDataLimit = "ulimit -d 1048576 && ";
#endif

class Hostile : public ::testing::Test {
 protected:
  // `normjit args...` under `timeout` and (see kDataLimit) a 1 GiB limit on data (heap and
  // private mappings): an endless or huge input must end by itself, quickly and small.
  ToolResult run(const std::vector<std::string>& args) {
    std::vector<std::string> words = {"-c", std::string(kDataLimit) + "exec timeout 60 \"$@\"",
                                      "sh", tool_path()};
    words.insert(words.end(), args.begin(), args.end());
    return run_tool_at("/bin/sh", words,
                       {"NORMJIT_CACHE_DIR=" + cache_.path(), "NORMJIT_CACHE_READONLY"});
  }
  std::string manifest(const std::string& name, const std::string& text) {
    const std::string path = dir_ / name;
    write_file(path, text);
    return path;
  }
  ToolResult prewarm_check(const std::string& path) {
    return run({"prewarm", path, "--arch", "sm_90", "--check", "--cache-dir", cache_.path()});
  }
  std::vector<std::string> dump(std::vector<std::string> flags) {
    std::vector<std::string> args = {"dump", "--op", "rmsnorm", "--shape", "8,64,32,32"};
    args.insert(args.end(), flags.begin(), flags.end());
    if (std::find(flags.begin(), flags.end(), "--arch") == flags.end()) {
      args.insert(args.end(), {"--arch", "sm_90"});
    }
    return args;
  }

  // run_tool, with `program` instead of the tool.
  static ToolResult run_tool_at(const std::string& program, const std::vector<std::string>& args,
                                const std::vector<std::string>& env) {
    const char* saved = std::getenv("NORMJIT_TOOL");
    const std::string tool = saved ? saved : "";
    ::setenv("NORMJIT_TOOL", program.c_str(), 1);
    ToolResult r = run_tool(args, env);
    if (saved) {
      ::setenv("NORMJIT_TOOL", tool.c_str(), 1);
    } else {
      ::unsetenv("NORMJIT_TOOL");
    }
    return r;
  }

  TempDir dir_, cache_;
};

// ---------------------------------------------------------------------------------------
// Class 1: unbounded recursion and memory

TEST_F(Hostile, DeeplyNestedManifestIsRefusedWithoutRecursion) {
  // 100000 levels used to overflow the stack while the bad value was quoted.
  const std::string open(100000, '['), close(100000, ']');
  for (const auto& [name, text] : std::vector<std::pair<std::string, std::string>>{
           {"deep.json", open + close},
           {"deep-unclosed.json", open},
           {"deep-field.json", "[{\"op\": " + open + close + ", \"shape\": [2, 64, 8]}]"},
           {"deep-objects.json", [] {
              std::string t;
              for (int i = 0; i < 100000; ++i) t += "{\"a\": ";
              return t + "1" + std::string(100000, '}');
            }()}}) {
    const std::string e = one_line_error(prewarm_check(manifest(name, text)));
    EXPECT_NE(e.find(name), npos) << e;
    EXPECT_NE(e.find("deeper than"), npos) << e;
  }
}

TEST_F(Hostile, HugeManifestIsRefusedBeforeItIsRead) {
  // A 100 MB field used to be echoed whole into a 100 MB error line.
  const std::string path =
      manifest("huge.json", "[{\"op\": \"" + std::string(100 << 20, 'a') + "\", \"shape\": [2]}]");
  const std::string e = one_line_error(prewarm_check(path));
  EXPECT_NE(e.find("'" + path + "'"), npos) << e;
  EXPECT_NE(e.find("16 MiB"), npos) << e;
}

TEST_F(Hostile, EndlessManifestIsRefused) {
  // /dev/zero used to grow memory until bad_alloc.
  const std::string e = one_line_error(prewarm_check("/dev/zero"));
  EXPECT_NE(e.find("'/dev/zero'"), npos) << e;
  EXPECT_NE(e.find("16 MiB"), npos) << e;
}

TEST_F(Hostile, LongValuesAreQuotedAsExcerpts) {
  const std::string mib(1 << 20, 'a');
  for (const auto& [name, text, mention] :
       std::vector<std::tuple<std::string, std::string, std::string>>{
           {"op.json", "[{\"op\": \"" + mib + "\", \"shape\": [2, 64, 8]}]", "op 'aaaa"},
           {"field.json", "[{\"" + mib + "\": 1, \"op\": \"rmsnorm\", \"shape\": [2, 64]}]",
            "field \"aaaa"},
           {"shape.json", "[{\"op\": \"rmsnorm\", \"shape\": \"2," + mib + "\"}]", "shape '2,aaaa"},
           {"unterminated.json", "[{\"op\": \"" + mib, "not valid JSON"},
           {"number.json",
            "[{\"op\": \"rmsnorm\", \"shape\": [2, 1" + std::string(1 << 20, '0') + "]}]",
            "shape 1000"}}) {
    const std::string e = one_line_error(prewarm_check(manifest(name, text)));
    EXPECT_NE(e.find(mention), npos) << name << ": " << e;
    EXPECT_NE(e.find("bytes)"), npos) << name << ": says how long the value is: " << e;
  }
  // One argument may hold at most 128 KiB (MAX_ARG_STRLEN).
  const std::string e = one_line_error(run(dump({"--dtype", std::string(100000, 'a')})));
  EXPECT_NE(e.find("--dtype 'aaaa"), npos) << e;
  EXPECT_NE(e.find("(100000 bytes)"), npos) << e;
}

// ---------------------------------------------------------------------------------------
// Class 5: values silently replaced or wrapped

TEST_F(Hostile, SpecFlagsAreValidatedAsGiven) {
  struct Case {
    std::vector<std::string> flags;
    std::vector<std::string> mentions;
  };
  const std::vector<Case> cases = {
      // These used to fall back to the defaults.
      {{"--eps", "nan"}, {"--eps 'nan'"}},
      {{"--eps=-inf"}, {"--eps '-inf'"}},
      {{"--eps=-1"}, {"--eps '-1'"}},
      {{"--eps", ""}, {"--eps ''"}},
      {{"--normalized-dims=-2"}, {"--normalized-dims '-2'"}},
      {{"--affine", ""}, {"--affine ''"}},
      {{"--dtype", ""}, {"--dtype ''"}},
      // A float cannot hold these: they became inf and 0 in the kernel.
      {{"--eps", "1e300"}, {"--eps '1e300'", "float"}},
      {{"--eps", "1e-300"}, {"--eps '1e-300'", "float"}},
      // Wrapped, clamped or read as hex by CLI11.
      {{"--normalized-dims", "4294967297"}, {"--normalized-dims '4294967297'", "out of range"}},
      {{"--normalized-dims", "0x1"}, {"--normalized-dims '0x1'"}},
      {{"--groups", "99999999999999999999"}, {"--groups '99999999999999999999'", "64-bit"}},
      {{"--groups", " 8"}, {"--groups ' 8'"}},
      // An undocumented separator.
      {{"--shape", "0x10"}, {"--shape '0x10'"}},
  };
  for (const Case& c : cases) {
    std::vector<std::string> args = {"dump", "--op", "rmsnorm", "--arch", "sm_90"};
    if (c.flags[0] != "--shape") args.insert(args.end(), {"--shape", "8,64,32,32"});
    args.insert(args.end(), c.flags.begin(), c.flags.end());
    const std::string e = one_line_error(run(args));
    for (const std::string& m : c.mentions) {
      EXPECT_NE(e.find(m), npos) << c.flags.back() << ": names " << m << ": " << e;
    }
  }
}

// An empty path, key or size used to stand for "not given": prewarm filled the default cache,
// dump -o "" wrote to stdout, --cache-entry "" was ignored, --max-bytes "" became 2 GiB.
TEST_F(Hostile, EmptyValuesAreErrorsNotTheDefault) {
  const std::string good = manifest("good.json", R"([{"op": "rmsnorm", "shape": [2, 64, 8]}])");
  const std::string key(64, '0');
  for (const auto& [args, flag] : std::vector<std::pair<std::vector<std::string>, std::string>>{
           {{"prewarm", good, "--arch", "sm_90", "--cache-dir", ""}, "--cache-dir"},
           {{"prewarm", good, "--arch", "sm_90", "--cache-dir", "", "--check"}, "--cache-dir"},
           {dump({"-o", ""}), "--output"},
           {dump({"--output", ""}), "--output"},
           {dump({"--cache-entry", ""}), "--cache-entry"},
           {{"dump", "--cache-entry", key, "--cache-dir", ""}, "--cache-dir"},
           {{"cache", "gc", "--max-bytes", ""}, "--max-bytes"},
           {{"cache", "ls", "--cache-dir", ""}, "--cache-dir"},
           {{"cache", "clear", "--cache-dir", ""}, "--cache-dir"},
           {{"demo", "--cache-dir", ""}, "--cache-dir"},
           {{"bench", "--seeds", "--cache-dir", ""}, "--cache-dir"},
           {{"bench", "--specs", ""}, "--specs"},
           {{"bench", "--compile", "--seeds", "--arch", ""}, "--arch"}}) {
    const ToolResult r = run(args);
    const std::string e = one_line_error(r);
    EXPECT_NE(e.find(flag + " ''"), npos) << args[0] << ": " << e;
    EXPECT_EQ(r.exit_code, 1) << "the tool's own error: " << r.describe();
    EXPECT_EQ(r.out, "") << "nothing done before the error: " << r.describe();
  }
}

// NORMJIT_CACHE_MAX_BYTES's syntax, read exactly as given: " 5" used to be taken as 5 bytes.
TEST_F(Hostile, ByteCountsAreReadExactlyAsGiven) {
  for (const char* size : {" 5", "5 ", " 512M", "2G\t", "+5", "0x10"}) {
    const std::string e =
        one_line_error(run({"cache", "gc", "--cache-dir", cache_.path(), "--max-bytes", size}));
    EXPECT_NE(e.find("--max-bytes " + quoted_excerpt(size)), npos) << e;
  }
}

TEST_F(Hostile, IntegerFlagsTakeDecimalIntegersOnly) {
  const std::string good = manifest("good.json", R"([{"op": "rmsnorm", "shape": [2, 64, 8]}])");
  for (const char* jobs : {"0x2", " 3", "1e1", "99999999999999999999", "0"}) {
    const std::string e = one_line_error(
        run({"prewarm", good, "--arch", "sm_90", "--cache-dir", cache_.path(), "-j", jobs}));
    EXPECT_NE(e.find(std::string("--jobs '") + jobs + "'"), npos) << e;
  }
  const std::string e = one_line_error(run({"bench", "--compile", "--seeds", "--repeat", "0x0"}));
  EXPECT_NE(e.find("--repeat '0x0'"), npos) << e;
  // demo and cache gc too: CLI11's own conversion took 0x10 and clamped or wrapped the rest.
  for (const char* bad : {"0x10", "-1", "99999999999999999999"}) {
    const std::string d = one_line_error(run({"demo", "--samples", bad}));
    EXPECT_NE(d.find(std::string("--samples '") + bad + "'"), npos) << d;
    const std::string g =
        one_line_error(run({"cache", "gc", "--cache-dir", cache_.path(), "--temp-age", bad}));
    EXPECT_NE(g.find(std::string("--temp-age '") + bad + "'"), npos) << g;
  }
}

TEST_F(Hostile, ManifestValuesAreValidatedAsGiven) {
  struct Case {
    std::string text;
    std::vector<std::string> mentions;
  };
  const std::vector<Case> cases = {
      // A repeated key used to keep the last value.
      {"[{\"op\": \"rmsnorm\", \"shape\": [2, 64, 8]},\n {\"op\": \"rmsnorm\", \"shape\": [2, 64, "
       "8], \"op\": \"layernorm\"}]",
       {"entry 1", "line 2", "\"op\"", "twice"}},
      {"[{\"op\": \"rmsnorm\", \"shape\": [2, 64, 8], \"eps\": 1e-5, \"eps\": 1e-6}]",
       {"entry 0", "\"eps\"", "twice"}},
      // Past int64: used to read as a double, "not an integer".
      {"[{\"op\": \"groupnorm\", \"shape\": [2, 64, 8], \"groups\": 99999999999999999999}]",
       {"entry 0", "groups 99999999999999999999", "64-bit"}},
      {"[{\"op\": \"rmsnorm\", \"shape\": [2, 99999999999999999999, 8]}]",
       {"entry 0", "shape 99999999999999999999", "64-bit"}},
      {"[{\"op\": \"rmsnorm\", \"shape\": [2, 64, 8], \"normalized_dims\": 4294967297}]",
       {"entry 0", "normalized_dims 4294967297", "out of range"}},
      // Not representable as a float.
      {"[{\"op\": \"rmsnorm\", \"shape\": [2, 64, 8], \"eps\": 1e-300}]",
       {"entry 0", "eps 1e-300", "float"}},
      {"[{\"op\": \"rmsnorm\", \"shape\": [2, 64, 8], \"eps\": 1e300}]",
       {"entry 0", "eps 1e+300", "float"}},
      {"[{\"op\": \"rmsnorm\", \"shape\": \"2x64\"}]", {"entry 0", "'2x64'"}},
  };
  for (size_t i = 0; i < cases.size(); ++i) {
    const std::string path = manifest("case" + std::to_string(i) + ".json", cases[i].text);
    const std::string e = one_line_error(prewarm_check(path));
    EXPECT_NE(e.find(path), npos) << e;
    for (const std::string& m : cases[i].mentions) {
      EXPECT_NE(e.find(m), npos) << "case " << i << " names " << m << ": " << e;
    }
  }
}

// ---------------------------------------------------------------------------------------
// Class 6: targets

TEST_F(Hostile, FamilyTargetIsBuiltAsNamed) {
  // sm_100f used to be built as sm_100a.
  const std::vector<std::string> archs = supported_archs();
  if (std::find(archs.begin(), archs.end(), "sm_100") == archs.end()) {
    GTEST_SKIP() << "this NVRTC builds no sm_100";
  }
  const ToolResult r = run(dump({"--emit", "ptx", "--arch", "sm_100f"}));
  ASSERT_EQ(r.exit_code, 0) << r.describe();
  EXPECT_NE(r.out.find(".target sm_100f"), npos) << r.out.substr(0, 2000);
}

TEST_F(Hostile, TargetWithoutThatVariantIsRefusedListingTheValidOnes) {
  // sm_90f does not exist; it used to be built as sm_90a.
  const std::string good = manifest("good.json", R"([{"op": "rmsnorm", "shape": [2, 64, 8]}])");
  for (const char* arch : {"sm_90f", "sm_80a", "sm_090"}) {
    for (const auto& args : std::vector<std::vector<std::string>>{
             dump({"--arch", arch}),
             {"prewarm", good, "--arch", std::string("sm_80,") + arch, "--check"}}) {
      const std::string e = one_line_error(run(args));
      EXPECT_NE(e.find(std::string("--arch '") + arch + "'"), npos) << e;
      std::vector<std::string> valid = supported_archs();
      valid.push_back("sm_90a");
      if (std::find(valid.begin(), valid.end(), "sm_100") != valid.end()) {
        valid.push_back("sm_100f");
      }
      for (const std::string& target : valid) {
        EXPECT_NE(e.find(target + ","), npos) << "lists " << target << ": " << e;
      }
    }
  }
}

// demo and cache explain used to take any arch of the right spelling (sm_1000 was planned for,
// and demo printed its plans before NVRTC refused it); bench took --arch without --compile
// unchecked. Each is now refused as dump refuses it, before anything is printed.
TEST_F(Hostile, EveryArchFlagIsCheckedAsDumpChecksIt) {
  const std::vector<std::string> valid = supported_archs();
  std::vector<std::string> archs = {"sm_1000", "bogus", "sm_90f"};
  for (const char* old : {"sm_50", "sm_60", "sm_70"}) {  // spelled right, dropped by this NVRTC
    if (std::find(valid.begin(), valid.end(), old) == valid.end()) archs.push_back(old);
  }
  for (const std::string& arch : archs) {
    for (const auto& args : std::vector<std::vector<std::string>>{
             {"demo", "--arch", arch},
             {"cache", "explain", "op=rmsnorm shape=8,64", "--arch", arch},
             {"cache", "explain", std::string(64, '0'), "--arch", arch},
             {"bench", "--op", "rmsnorm", "--shape", "8,64", "--arch", arch},
             {"bench", "--compile", "--op", "rmsnorm", "--shape", "8,64", "--arch", arch}}) {
      const ToolResult r = run(args);
      const std::string e = one_line_error(r);
      EXPECT_NE(e.find("--arch '" + arch + "'"), npos) << args[0] << ": " << e;
      EXPECT_NE(e.find("sm_90,"), npos) << args[0] << ": lists the valid targets: " << e;
      EXPECT_EQ(r.exit_code, 1) << r.describe();
      EXPECT_EQ(r.out, "") << args[0] << ": nothing printed before the error: " << r.describe();
    }
  }
}

// ---------------------------------------------------------------------------------------
// Clear CLI messages

TEST_F(Hostile, EmptyArchListDoesNotSwallowTheNextFlag) {
  const std::string good = manifest("good.json", R"([{"op": "rmsnorm", "shape": [2, 64, 8]}])");
  for (const char* arch : {",,", "", "sm_80,,sm_90", "sm_90,"}) {
    const std::string e = one_line_error(
        run({"prewarm", good, "--arch", arch, "--check", "--cache-dir", cache_.path()}));
    EXPECT_NE(e.find(std::string("--arch '") + arch + "'"), npos) << e;
    EXPECT_EQ(e.find("--check'"), npos) << "took the next flag as a target: " << e;
    EXPECT_EQ(e.find("--cache-dir'"), npos) << "took the next flag as a target: " << e;
  }
}

TEST_F(Hostile, UnknownSubcommandIsNamed) {
  std::string e = one_line_error(run({"frobnicate"}));
  EXPECT_NE(e.find("'frobnicate'"), npos) << e;
  EXPECT_NE(e.find("prewarm"), npos) << "lists the subcommands: " << e;
  e = one_line_error(run({"cache", "frobnicate"}));
  EXPECT_NE(e.find("'frobnicate'"), npos) << e;
  EXPECT_NE(e.find("verify"), npos) << "lists the cache subcommands: " << e;
}

// CLI11 said only "A subcommand is required" for an option it did not know before one.
TEST_F(Hostile, UnknownOptionBeforeASubcommandIsNamed) {
  for (const auto& [args, option, subcommand] :
       std::vector<std::tuple<std::vector<std::string>, std::string, std::string>>{
           {{"--bogus"}, "'--bogus'", "prewarm"},
           {{"--bogus=3"}, "'--bogus=3'", "prewarm"},
           {{"-x"}, "'-x'", "prewarm"},
           {{"--bogus", "dump"}, "'--bogus'", "prewarm"},
           {{"cache", "--bogus"}, "'--bogus'", "verify"}}) {
    const std::string e = one_line_error(run(args));
    EXPECT_NE(e.find("unknown option " + option), npos) << e;
    EXPECT_NE(e.find(subcommand), npos) << "lists the subcommands: " << e;
  }
}

TEST_F(Hostile, ValueWithANewlineGivesOneLine) {
  const std::string good = manifest("good.json", R"([{"op": "rmsnorm", "shape": [2, 64, 8]}])");
  const std::string odd_path = manifest("odd\nname.json", "[{\"op\": \"rms\\nnorm\"}]");
  for (const auto& [args, mention] : std::vector<std::pair<std::vector<std::string>, std::string>>{
           {dump({"--dtype", "f32\nf16"}), "'f32\\nf16'"},
           {dump({"--arch", "sm_90\n"}), "'sm_90\\n'"},
           {dump({"--eps", "1e-5\n"}), "'1e-5\\n'"},
           {{"dump", "--op", "rmsnorm", "--shape", "8,\n64", "--arch", "sm_90"}, "'8,\\n64'"},
           {dump({"stray\nword"}), "stray\\nword"},
           {{"prewarm", odd_path, "--arch", "sm_90", "--check"}, "odd\\nname.json"},
           {{"prewarm", good, "--arch", "sm_90\n,sm_80", "--check"}, "'sm_90\\n'"},
           {{"frob\nnicate"}, "'frob\\nnicate'"}}) {
    const std::string e = one_line_error(run(args));
    EXPECT_NE(e.find(mention), npos) << e;
  }
}

}  // namespace
}  // namespace normjit::testing
