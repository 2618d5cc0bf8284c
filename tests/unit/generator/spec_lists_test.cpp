// Every spec list in scripts/specs (what `normjit bench --specs` and scripts/ab_bench.py time on
// the GPU machine) parses and plans for the H200 and the H100, so that a typo or a spec the
// library refuses shows up here, not in a GPU call. Lists for the emulation
// (scripts/experiments/emulate.sh) may put its launch words "strided " and "nan " before a spec.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>

#include "generator/plan.hpp"
#include "generator/target.hpp"
#include "normjit/error.hpp"
#include "normjit/spec.hpp"

namespace normjit {
namespace {

TEST(SpecLists, EveryListedSpecParsesAndPlans) {
  const std::filesystem::path dir = std::filesystem::path(NORMJIT_SOURCE_DIR) / "scripts" / "specs";
  ASSERT_TRUE(std::filesystem::is_directory(dir)) << dir;
  const Target targets[] = {Target::parse("sm_90:132:4814"), Target::parse("sm_90")};
  int lists = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    if (entry.path().extension() != ".txt") continue;
    ++lists;
    std::ifstream in(entry.path());
    ASSERT_TRUE(in) << entry.path();
    std::string line;
    int number = 0, specs = 0;
    while (std::getline(in, line)) {
      ++number;
      const size_t first = line.find_first_not_of(" \t\r");
      if (first == std::string::npos || line[first] == '#') continue;
      ++specs;
      const std::string where = entry.path().filename().string() + ":" + std::to_string(number);
      // The emulation's launch words (tests/emulation/kernel_emulation.cpp) before a spec.
      std::string text = line.substr(first);
      for (const char* word : {"strided ", "nan "}) {
        if (text.rfind(word, 0) == 0) text = text.substr(std::strlen(word));
      }
      try {
        const NormSpec spec = NormSpec::parse(text);
        for (const Target& target : targets) {
          const KernelPlan p = plan(spec, target);
          EXPECT_FALSE(p.why.empty()) << where;
        }
      } catch (const Error& e) {
        ADD_FAILURE() << where << ": " << e.what();
      }
    }
    EXPECT_GT(specs, 0) << entry.path() << " lists no spec";
  }
  EXPECT_GE(lists, 20) << "the spec lists of " << dir;
}

}  // namespace
}  // namespace normjit
