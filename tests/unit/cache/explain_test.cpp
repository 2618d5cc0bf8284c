// explain(): which stored entry is nearest to a request that missed, and what differs.
#include <gtest/gtest.h>

#include "cache/cache.hpp"
#include "test_util.hpp"

namespace normjit::cache {
namespace {

using testing::sample_inputs;
using testing::TempDir;

EntryInfo info_for(const KeyInputs& inputs, bool readonly = false) {
  EntryInfo info;
  info.preimage = inputs.preimage();
  info.key = sha256_hex(info.preimage);
  info.layer = readonly ? "/ro" : "/rw";
  info.readonly = readonly;
  info.valid = true;
  return info;
}

TEST(Explain, FindsTheEntryThatDiffersOnlyInTheTarget) {
  KeyInputs wanted = sample_inputs(0);
  wanted.target = "sm_90a";
  KeyInputs same_but_target = sample_inputs(0);
  KeyInputs other_kernel = sample_inputs(1);
  other_kernel.target = "sm_90a";
  const Explanation e =
      explain({info_for(other_kernel), info_for(same_but_target)}, wanted.preimage());
  EXPECT_EQ(e.key, wanted.key());
  EXPECT_FALSE(e.found);
  ASSERT_TRUE(e.nearest);
  EXPECT_EQ(e.nearest->key, same_but_target.key());
  EXPECT_EQ(e.missing, std::vector<std::string>{"target: sm_90a"});
  EXPECT_EQ(e.extra, std::vector<std::string>{"target: sm_90"});
  EXPECT_EQ(e.total_lines, 10u);
  EXPECT_EQ(e.shared_lines, 9u);
  EXPECT_TRUE(e.source_difference.empty());
}

TEST(Explain, ShowsAChangedOptionAndCompiler) {
  KeyInputs wanted = sample_inputs(0);
  KeyInputs stored = sample_inputs(0);
  stored.options.push_back("-lineinfo");
  stored.compiler = "nvrtc 12.8";
  const Explanation e = explain({info_for(stored)}, wanted.preimage());
  ASSERT_TRUE(e.nearest);
  EXPECT_EQ(e.missing, std::vector<std::string>{"compiler: nvrtc 13.0"});
  EXPECT_EQ(e.extra, (std::vector<std::string>{"option: -lineinfo", "compiler: nvrtc 12.8"}));
}

TEST(Explain, PointsAtTheFirstDifferingSourceLine) {
  KeyInputs wanted = sample_inputs(0);
  wanted.source = "#include <a>\nint x = 1;\nconstexpr int kC = 64;\n";
  KeyInputs stored = wanted;
  stored.source = "#include <a>\nint x = 1;\nconstexpr int kC = 128;\n";
  const Explanation e = explain({info_for(stored)}, wanted.preimage());
  ASSERT_TRUE(e.nearest);
  EXPECT_EQ(e.missing.size(), 1u);
  EXPECT_NE(e.source_difference.find("source line 3"), std::string::npos) << e.source_difference;
  EXPECT_NE(e.source_difference.find("kC = 64"), std::string::npos) << e.source_difference;
  EXPECT_NE(e.source_difference.find("kC = 128"), std::string::npos) << e.source_difference;
}

// Two entries that differ from the request in the same preimage lines (source and name, as
// another op and another dtype do) are told apart by the source's own lines: the one that
// shares more of them is nearer, whichever is listed first. It used to be the first listed.
TEST(Explain, ATieGoesToTheEntryWhoseSourceSharesMoreLines) {
  KeyInputs wanted = sample_inputs(0);
  wanted.source = "#include <rms>\nusing T = half;\nconstexpr int kC = 64;\nrun<T, kC>();\n";
  wanted.name_expression = "&rms<half>";
  KeyInputs other_op = wanted;
  other_op.source = "#include <ln>\nusing T = float;\nconstexpr int kC = 32;\nrun_ln<T>();\n";
  other_op.name_expression = "&ln<float>";
  KeyInputs other_dtype = wanted;
  other_dtype.source = "#include <rms>\nusing T = bf16;\nconstexpr int kC = 64;\nrun<T, kC>();\n";
  other_dtype.name_expression = "&rms<bf16>";
  for (const bool dtype_first : {false, true}) {
    const std::vector<EntryInfo> entries =
        dtype_first ? std::vector<EntryInfo>{info_for(other_dtype), info_for(other_op)}
                    : std::vector<EntryInfo>{info_for(other_op), info_for(other_dtype)};
    const Explanation e = explain(entries, wanted.preimage());
    ASSERT_TRUE(e.nearest);
    EXPECT_EQ(e.nearest->key, other_dtype.key()) << "listed first: " << dtype_first;
    EXPECT_EQ(e.missing.size(), 2u);
    EXPECT_NE(e.source_difference.find("source line 2"), std::string::npos) << e.source_difference;
  }
}

TEST(Explain, ReportsAPresentKeyFromItsFirstLayerAndStillTheNearestOther) {
  const KeyInputs wanted = sample_inputs(0);
  KeyInputs neighbour = sample_inputs(0);
  neighbour.template_digest = "ffff";
  EntryInfo invalid = info_for(wanted);
  invalid.valid = false;
  const Explanation e =
      explain({invalid, info_for(wanted, /*readonly=*/true), info_for(wanted), info_for(neighbour)},
              wanted.preimage());
  ASSERT_TRUE(e.found);
  EXPECT_TRUE(e.found->readonly) << "the first valid copy, in layer order";
  ASSERT_TRUE(e.nearest);
  EXPECT_EQ(e.nearest->key, neighbour.key());
}

TEST(Explain, WithNothingStoredThereIsNoNearestEntry) {
  const Explanation e = explain({}, sample_inputs(0).preimage());
  EXPECT_FALSE(e.found);
  EXPECT_FALSE(e.nearest);
  EXPECT_EQ(e.total_lines, 10u);
}

// The preimages come from the entries on disk: list() reads them without the cubins.
TEST(Explain, WorksOnAStoresListing) {
  TempDir tmp;
  StoreOptions options;
  options.dir = tmp.path();
  Store store(options);
  store.save(testing::sample_entry(0));
  store.save(testing::sample_entry(1));
  KeyInputs wanted = sample_inputs(1);
  wanted.compiler = "nvrtc 13.1";
  const Explanation e = explain(store.list(/*verify=*/false), wanted.preimage());
  EXPECT_FALSE(e.found);
  ASSERT_TRUE(e.nearest);
  EXPECT_EQ(e.nearest->key, testing::sample_entry(1).key);
  EXPECT_EQ(e.missing, std::vector<std::string>{"compiler: nvrtc 13.1"});
  EXPECT_TRUE(explain(store.list(false), sample_inputs(0).preimage()).found);
}

}  // namespace
}  // namespace normjit::cache
