// The backward axis (issue 20): backward=true in the canonical text, what it refuses (each
// error naming the argument and its value), its plan (the row-backward strategy, team sizes,
// the workspace of the dweight/dbias partials) and the configuration emit writes for it. The
// default (false) leaves every forward spec's text, plan and source as they were.
#include <gtest/gtest.h>

#include <string>

#include "generator/emit.hpp"
#include "generator/plan.hpp"
#include "generator/target.hpp"
#include "normjit/error.hpp"
#include "normjit/spec.hpp"

namespace normjit {
namespace {

constexpr size_t npos = std::string::npos;

bool has(const std::string& text, const std::string& word) { return text.find(word) != npos; }

// The error that parse(text) throws, with its code; fails when it throws none.
Error refusal(const std::string& text) {
  try {
    NormSpec::parse(text);
  } catch (const Error& e) {
    return e;
  }
  ADD_FAILURE() << "accepted: " << text;
  return Error(ErrorCode::kInternal, "");
}

TEST(BackwardSpec, CanonicalTextPutsBackwardLastAndRoundTrips) {
  const NormSpec s = NormSpec::parse(
      "backward=true op=layernorm shape=16,1000 dtype=bf16 normalized_dims=1 param_dtype=f32 "
      "weight_offset=1");
  EXPECT_TRUE(s.backward);
  EXPECT_EQ(s.to_string(),
            "op=layernorm shape=16,1000 dtype=bf16 normalized_dims=1 affine=both eps=1e-05 "
            "param_dtype=f32 weight_offset=1 backward=true");
  EXPECT_EQ(NormSpec::parse(s.to_string()), s);
  for (const char* text : {"op=rmsnorm shape=3,7 normalized_dims=1 affine=weight backward=true",
                           "op=rmsnorm shape=2,3,4 normalized_dims=2 backward=true",
                           "op=layernorm shape=5,65 dtype=f16 affine=none backward=true"}) {
    const NormSpec spec = NormSpec::parse(text);
    EXPECT_EQ(NormSpec::parse(spec.to_string()), spec) << text;
    EXPECT_TRUE(has(spec.to_string(), " backward=true")) << text;
  }
}

TEST(BackwardSpec, DefaultFalseKeepsTheForwardTextAndEquality) {
  const std::string text =
      "op=layernorm shape=16,1000 dtype=bf16 normalized_dims=1 affine=both "
      "eps=1e-05";
  const NormSpec forward = NormSpec::parse(text);
  EXPECT_FALSE(forward.backward);
  EXPECT_EQ(forward.to_string(), text);
  EXPECT_EQ(NormSpec::parse(text + " backward=false"), forward);
  EXPECT_EQ(NormSpec::parse(text + " backward=false").to_string(), text);
  NormSpec backward = forward;
  backward.backward = true;
  EXPECT_NE(backward, forward);
  // The forward's plan and source do not change with the axis: the same text as before.
  const Target h100 = Target::parse("sm_90");
  const EmittedKernel e = emit(plan(forward, h100));
  EXPECT_FALSE(has(e.source, "backward"));
  EXPECT_EQ(e.kernel, "normjit::row_norm<normjit::layernorm_bf16_h1000>");
}

TEST(BackwardSpec, BadValuesNameTheKey) {
  const Error e = refusal("op=rmsnorm shape=2,64 normalized_dims=1 backward=yes");
  EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
  EXPECT_TRUE(has(e.what(), "invalid backward 'yes': expected true or false")) << e.what();
  const Error twice =
      refusal("op=rmsnorm shape=2,64 normalized_dims=1 backward=true backward=true");
  EXPECT_TRUE(has(twice.what(), "key 'backward' is given twice")) << twice.what();
  const Error unknown = refusal("op=rmsnorm shape=2,64 backwards=true");
  EXPECT_TRUE(has(unknown.what(), "backward)")) << unknown.what();  // listed among the keys
}

TEST(BackwardSpec, GroupNormAndTheChannelFormsTakeTheAxis) {
  for (const char* text : {"op=groupnorm shape=2,64,8,8 groups=8 backward=true",
                           "op=groupnorm shape=2,64,8,8 groups=8 affine=none backward=true",
                           "op=rmsnorm shape=2,64,8,8 affine=weight backward=true",
                           "op=layernorm shape=2,64,8,8 normalized_dims=0 backward=true"}) {
    const NormSpec spec = NormSpec::parse(text);
    EXPECT_TRUE(spec.backward) << text;
    EXPECT_EQ(NormSpec::parse(spec.to_string()), spec) << text;
  }
  // What the gradient kernels still refuse, for these forms too.
  const Error stats = refusal("op=groupnorm shape=2,64,8,8 groups=8 save_stats=true backward=true");
  EXPECT_EQ(stats.code(), ErrorCode::kInvalidArgument);
  EXPECT_TRUE(has(stats.what(), "invalid save_stats true: backward=true")) << stats.what();
  const Error out = refusal("op=rmsnorm shape=2,64,8,8 out_dtype=bf16 backward=true");
  EXPECT_TRUE(has(out.what(), "invalid out_dtype 'bf16': backward=true")) << out.what();
}

TEST(BackwardSpec, AxesWithoutMeaningForTheGradientAreRefused) {
  const std::string base = "op=layernorm shape=8,64 dtype=bf16 backward=true ";
  struct Case {
    const char* axis;
    const char* expected;
  } cases[] = {
      {"out_dtype=f32",
       "invalid out_dtype 'f32': backward=true takes dy and writes dx in x's "
       "dtype (bf16)"},
      {"out_dtype=e4m3", "invalid out_dtype 'e4m3': backward=true"},
      {"residual=f32",
       "invalid residual 'f32': backward=true normalizes h = x + residual (its x is h) and adds "
       "h's gradient dh, both in h's dtype: residual must equal dtype (bf16)"},
      {"save_stats=true", "invalid save_stats true: backward=true reads the statistics"},
  };
  for (const Case& c : cases) {
    const Error e = refusal(base + c.axis);
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument) << c.axis;
    EXPECT_TRUE(has(e.what(), c.expected)) << e.what();
  }
  // x's own dtype as out_dtype is the default, not a variant.
  EXPECT_NO_THROW(NormSpec::parse(base + "out_dtype=bf16"));
  // The parameters' dtype and the weight offset are what the gradient kernel honours, and a
  // residual of x's dtype (dh added to dx).
  EXPECT_NO_THROW(NormSpec::parse(base + "param_dtype=f32 weight_offset=1"));
  EXPECT_TRUE(NormSpec::parse(base + "residual=bf16").residual == Dtype::kBF16);
}

TEST(BackwardPlan, RowBackwardStrategyTeamsAndWorkspace) {
  const Target h100 = Target::parse("sm_90");
  struct Case {
    const char* spec;
    int vec, team, rows_per_block;
    int64_t vectors;
  } cases[] = {
      {"op=layernorm shape=16,1000 dtype=bf16", 8, 64, 4, 2},
      {"op=layernorm shape=16,8192 dtype=bf16", 8, 512, 1, 2},
      {"op=layernorm shape=16,8192 dtype=f32", 4, 512, 1, 4},
      {"op=rmsnorm shape=16,4097 normalized_dims=1 affine=weight", 1, 512, 1, 9},
      {"op=rmsnorm shape=16,65 normalized_dims=1 dtype=f16", 1, 8, 32, 9},
      {"op=layernorm shape=16,1", 1, 1, 256, 1},
      {"op=layernorm shape=16,3 dtype=bf16 affine=weight", 1, 1, 256, 3},
  };
  for (const Case& c : cases) {
    const NormSpec spec = NormSpec::parse(std::string(c.spec) + " backward=true");
    const KernelPlan p = plan(spec, h100);
    EXPECT_EQ(p.strategy, Strategy::kRowBackward) << c.spec;
    EXPECT_EQ(p.vec, c.vec) << c.spec;
    EXPECT_EQ(p.block_x, c.team) << c.spec;
    EXPECT_EQ(p.rows_per_block, c.rows_per_block) << c.spec;
    EXPECT_EQ(p.block_y, c.rows_per_block) << c.spec;
    EXPECT_EQ(p.vectors, c.vectors) << c.spec;
    // The team holds the row; its last vectors are needed.
    const int64_t h = spec.row_length();
    EXPECT_GE(p.vectors * p.block_x * p.vec, h) << c.spec;
    EXPECT_LT((p.vectors - 1) * p.block_x * p.vec, h) << c.spec;
    EXPECT_LE(p.vectors * p.vec, 16) << c.spec;
    EXPECT_TRUE(has(p.to_string(), "strategy: row-backward")) << c.spec;
  }
}

TEST(BackwardPlan, ParametersMakeItCooperativeWithOnePartialPerCta) {
  const Target h100 = Target::parse("sm_90");
  const KernelPlan both = plan(NormSpec::parse("op=layernorm shape=4,1000 backward=true"), h100);
  EXPECT_TRUE(both.cooperative());
  EXPECT_EQ(both.workspace_header_floats(), 8);
  EXPECT_EQ(both.workspace_slot_floats(), 2 * 1000);
  EXPECT_EQ(both.workspace_floats(264), 8 + 264 * 2000);
  // Rows padded to 8 floats, so every CTA's partial starts 32-byte aligned.
  const KernelPlan weight = plan(
      NormSpec::parse("op=rmsnorm shape=4,65 normalized_dims=1 affine=weight backward=true"), h100);
  EXPECT_TRUE(weight.cooperative());
  EXPECT_EQ(weight.workspace_slot_floats(), 72);
  const KernelPlan none =
      plan(NormSpec::parse("op=layernorm shape=4,1000 affine=none backward=true"), h100);
  EXPECT_FALSE(none.cooperative());
  EXPECT_EQ(none.workspace_floats(264), 0);
  EXPECT_EQ(none.workspace_header_floats(), 0);
}

TEST(BackwardPlan, GridIsCappedByTheDeviceAndOwnsSeveralRowsPerTeam) {
  const Target h100 = Target::parse("sm_90");
  const KernelPlan p = plan(NormSpec::parse("op=layernorm shape=4,1000 backward=true"), h100);
  ASSERT_EQ(p.rows_per_block, 4);
  ASSERT_EQ(p.fill_ctas, 132);
  // 4 teams a CTA, 8 rows a team: 32 rows a CTA until the device is full.
  EXPECT_EQ(p.grid(8192, 500), 256);
  EXPECT_EQ(p.grid(8193, 500), 257);
  EXPECT_EQ(p.grid(1000000, 500), 500);
  EXPECT_EQ(p.grid(1000000, 100), 100);
  EXPECT_NE(p.grid_text().find("rows / 32"), std::string::npos) << p.grid_text();
}

// Fewer rows than 32 a CTA would need to fill the multiprocessors: a CTA per multiprocessor, or
// one per 4 rows (a row a team) where there are fewer; never beyond the CTAs the device holds.
TEST(BackwardPlan, FewRowsTakeACtaPerMultiprocessor) {
  const KernelPlan p =
      plan(NormSpec::parse("op=layernorm shape=4,1000 backward=true"), Target::parse("sm_90"));
  EXPECT_EQ(p.grid(1, 500), 1);
  EXPECT_EQ(p.grid(4, 500), 1);
  EXPECT_EQ(p.grid(5, 500), 2);
  EXPECT_EQ(p.grid(32, 500), 8);
  EXPECT_EQ(p.grid(528, 500), 132);
  EXPECT_EQ(p.grid(1000, 500), 132);
  EXPECT_EQ(p.grid(4224, 500), 132);  // 32 rows a CTA fill 132 CTAs
  EXPECT_EQ(p.grid(4225, 500), 133);
  EXPECT_EQ(p.grid(1000, 100), 100);
  EXPECT_NE(p.grid_text().find("min(rows / 4, 132 multiprocessors)"), std::string::npos)
      << p.grid_text();
  // The multiprocessors are the target's: an H100 PCIe's 114.
  const KernelPlan pcie =
      plan(NormSpec::parse("op=layernorm shape=4,1000 backward=true"), Target::parse("sm_90:114"));
  EXPECT_EQ(pcie.grid(1000, 500), 114);
  // A team a CTA (512 threads, f32 rows of 8192): a CTA a row up to 132 rows.
  const KernelPlan wide =
      plan(NormSpec::parse("op=rmsnorm shape=4,8192 affine=weight backward=true"),
           Target::parse("sm_90"));
  ASSERT_EQ(wide.rows_per_block, 1);
  EXPECT_EQ(wide.grid(8, 264), 8);
  EXPECT_EQ(wide.grid(256, 264), 132);
  EXPECT_EQ(wide.grid(4096, 264), 264);
}

// Rows a team of 256 threads holds in 16-byte accesses (bf16 rows of 4096) put two teams in a CTA
// and prefetch each team's next row, whatever the rows: the backward has one batch class. Rows
// of other teams, or of narrower accesses, take one team a CTA (or their teams of fewer threads).
TEST(BackwardPlan, TeamsOf256GoTwoACtaInEveryBatch) {
  const Target h100 = Target::parse("sm_90");
  for (const char* text :
       {"op=layernorm shape=1024,4096 dtype=bf16 normalized_dims=1 affine=both backward=true",
        "op=layernorm shape=16384,4096 dtype=bf16 normalized_dims=1 affine=both backward=true"}) {
    const NormSpec spec = NormSpec::parse(text);
    EXPECT_EQ(few_rows_limit(spec), 0) << text;
    EXPECT_EQ(batch_class(spec), kBatchAny) << text;
    EXPECT_FALSE(has_two_batch_classes(spec)) << text;
    EXPECT_EQ(batch_class_specs(spec).size(), 1u) << text;
    const KernelPlan paired = plan(spec, h100);
    EXPECT_EQ(paired.strategy, Strategy::kRowBackward) << text;
    EXPECT_EQ(paired.block_x, 256) << text;
    EXPECT_EQ(paired.rows_per_block, 2) << text;
    EXPECT_TRUE(paired.team_barriers) << text;
    EXPECT_EQ(paired.prefetch, 2) << text;  // also the next row's words into registers
    EXPECT_TRUE(has(paired.to_string(), "each team prefetches its next row")) << text;
    EXPECT_TRUE(has(paired.to_string(), "each team at its own barrier")) << text;
    EXPECT_TRUE(has(paired.to_string(), "team barriers: one per team")) << text;
    const EmittedKernel k = emit(paired);
    EXPECT_TRUE(has(k.source, "static constexpr int kRowsPerBlock = 2;")) << k.source;
    EXPECT_TRUE(has(k.source, "static constexpr bool kTeamBarriers = true;")) << k.source;
  }
  const KernelPlan paired = plan(
      NormSpec::parse("op=layernorm shape=1024,4096 dtype=bf16 normalized_dims=1 backward=true"),
      h100);
  EXPECT_EQ(paired.grid(1024, 132), 132);  // max(1024 / 16, min(1024 / 2, 132))
  EXPECT_EQ(paired.grid(100, 132), 50);
  EXPECT_EQ(paired.grid(16384, 132), 132);
  // f16 rows of 3072 (384 vectors: a team of 256), f32 rows of 4096, a channel form of one
  // position are paired too.
  for (const char* text : {"op=layernorm shape=8,3072 dtype=f16 normalized_dims=1 backward=true",
                           "op=rmsnorm shape=8,4096 normalized_dims=1 affine=none backward=true",
                           "op=layernorm shape=8,4096,1,1 dtype=bf16 normalized_dims=0 "
                           "backward=true"}) {
    const NormSpec spec = NormSpec::parse(text);
    EXPECT_EQ(plan(spec, h100).rows_per_block, 2) << text;
    EXPECT_FALSE(has_two_batch_classes(spec)) << text;
  }
  // Rows of 2049-4096 in narrower accesses (odd lengths): one team a CTA, the CTA's barrier.
  for (const char* text : {"op=layernorm shape=8,3001 dtype=bf16 normalized_dims=1 backward=true",
                           "op=rmsnorm shape=8,4094 dtype=f16 normalized_dims=1 backward=true",
                           "op=layernorm shape=8,2050 normalized_dims=1 backward=true"}) {
    const KernelPlan one = plan(NormSpec::parse(text), h100);
    ASSERT_EQ(one.strategy, Strategy::kRowBackward) << text;
    EXPECT_EQ(one.rows_per_block, 1) << text;
    EXPECT_FALSE(one.team_barriers) << text;
  }
  // No backward has two batch classes.
  for (const char* text :
       {"op=layernorm shape=8,8192 dtype=bf16 normalized_dims=1 backward=true",
        "op=layernorm shape=8,2048 normalized_dims=1 backward=true",
        "op=layernorm shape=8,768 dtype=bf16 normalized_dims=1 backward=true",
        "op=layernorm shape=8,1048576 dtype=bf16 normalized_dims=1 backward=true",
        "op=groupnorm shape=8,64,16,16 groups=8 backward=true",
        "op=rmsnorm shape=8,4096,4,4 backward=true"}) {
    const NormSpec spec = NormSpec::parse(text);
    EXPECT_EQ(few_rows_limit(spec), 0) << text;
    EXPECT_FALSE(has_two_batch_classes(spec)) << text;
    EXPECT_EQ(batch_class_specs(spec).size(), 1u) << text;
  }
}

// CTAs of several teams of whole warps give each team its own named barrier; teams narrower than
// a warp (whose reduction is shuffles alone) and CTAs of one team keep the CTA's.
TEST(BackwardPlan, TeamsOfSeveralWarpsWaitAtTheirOwnBarrier) {
  const Target h100 = Target::parse("sm_90");
  struct Case {
    const char* text;
    int teams;
    bool named;
  };
  for (const Case& c :
       {Case{"op=layernorm shape=8,768 backward=true", 4, true},  // f32: 64
        Case{"op=layernorm shape=8,1024 dtype=bf16 backward=true", 4, true},
        Case{"op=rmsnorm shape=8,2048 dtype=bf16 affine=weight backward=true", 2, true},
        Case{"op=layernorm shape=8,128 dtype=bf16 backward=true", 32, false},
        Case{"op=rmsnorm shape=8,8192 dtype=bf16 backward=true", 1, false}}) {
    const KernelPlan p = plan(NormSpec::parse(c.text), h100);
    ASSERT_EQ(p.strategy, Strategy::kRowBackward) << c.text;
    EXPECT_EQ(p.rows_per_block, c.teams) << c.text;
    EXPECT_EQ(p.team_barriers, c.named) << c.text;
    EXPECT_EQ(has(emit(p).source, "static constexpr bool kTeamBarriers = true;"), c.named)
        << c.text;
  }
}

// The CTAs' partials are summed in float4s where the row is whole groups of 4 columns, one float
// a column otherwise; without parameters there is no sum.
TEST(BackwardPlan, FinalSumInFloat4sWhereRowsAreGroupsOfFour) {
  const Target h100 = Target::parse("sm_90");
  struct Case {
    const char* text;
    bool quads;
  };
  for (const Case& c :
       {Case{"op=rmsnorm shape=8,4096 dtype=bf16 affine=weight backward=true", true},
        Case{"op=layernorm shape=8,1000 backward=true", true},
        Case{"op=layernorm shape=8,16384 dtype=bf16 backward=true", true},
        Case{"op=layernorm shape=8,1001 dtype=bf16 backward=true", false},
        Case{"op=layernorm shape=8,4094 dtype=f16 backward=true", false},
        Case{"op=rmsnorm shape=8,4096 affine=none backward=true", false}}) {
    const KernelPlan p = plan(NormSpec::parse(c.text), h100);
    ASSERT_EQ(p.strategy, Strategy::kRowBackward) << c.text;
    EXPECT_EQ(p.quad_final_sum, c.quads) << c.text;
    EXPECT_EQ(has(p.to_string(), "final sum: float4s"), c.quads) << p.to_string();
    EXPECT_EQ(has(emit(p).source, "static constexpr bool kQuadFinalSum = true;"), c.quads)
        << c.text;
  }
}

// A CTA that is one team prefetches its next row into L2 on sm_90; CTAs of several teams of f32
// rows, and sm_80 (no bulk prefetch), do not; CTAs of several teams of 16-bit rows do, each team
// its own next row.
TEST(BackwardPlan, OneTeamCtasPrefetchTheNextRowOnSm90) {
  const Target h100 = Target::parse("sm_90"), a100 = Target::parse("sm_80");
  const NormSpec wide = NormSpec::parse(
      "op=rmsnorm shape=4096,8192 dtype=bf16 normalized_dims=1 "
      "affine=weight backward=true");
  const KernelPlan one_team = plan(wide, h100);
  ASSERT_EQ(one_team.strategy, Strategy::kRowBackward);
  ASSERT_EQ(one_team.rows_per_block, 1);
  EXPECT_EQ(one_team.prefetch, 2);  // and its next row's words into registers (16-bit x)
  EXPECT_TRUE(has(one_team.to_string(), "prefetches its next row")) << one_team.to_string();
  EXPECT_EQ(plan(wide, a100).prefetch, 0);
  const KernelPlan four_teams =
      plan(NormSpec::parse("op=layernorm shape=4,768 backward=true"), h100);
  ASSERT_GT(four_teams.rows_per_block, 1);
  EXPECT_EQ(four_teams.prefetch, 0);
  const KernelPlan four_bf16_teams =
      plan(NormSpec::parse("op=layernorm shape=4,768 dtype=bf16 backward=true"), h100);
  ASSERT_GT(four_bf16_teams.rows_per_block, 1);
  EXPECT_EQ(four_bf16_teams.prefetch, 2);
  EXPECT_TRUE(has(four_bf16_teams.to_string(), "each team prefetches its next row"))
      << four_bf16_teams.to_string();
}

// 16-bit rows in pairs of up to 16384 elements: one team of 1024 threads holding x and dy as raw
// pairs, the weight loaded again where used, the dbias sums in shared memory (64 registers a
// thread); rows a team of 512 holds keep the f32 form.
TEST(BackwardPlan, SixteenBitRowsUpTo16384TakeOneTeamOf1024) {
  const Target h100 = Target::parse("sm_90");
  struct Case {
    const char* spec;
    int vec;
    int64_t vectors;
  } cases[] = {
      {"op=layernorm shape=2,16384 dtype=bf16", 8, 2},
      {"op=rmsnorm shape=4096,16384 normalized_dims=1 dtype=bf16 affine=weight", 8, 2},
      {"op=layernorm shape=7,8200 dtype=f16 affine=weight", 8, 2},  // 1025 vectors: one short
      {"op=rmsnorm shape=3,12290 normalized_dims=1 dtype=bf16 affine=weight param_dtype=f32", 2, 7},
  };
  for (const Case& c : cases) {
    const KernelPlan p = plan(NormSpec::parse(std::string(c.spec) + " backward=true"), h100);
    ASSERT_EQ(p.strategy, Strategy::kRowBackward) << c.spec;
    EXPECT_EQ(p.block_x, 1024) << c.spec;
    EXPECT_EQ(p.rows_per_block, 1) << c.spec;
    EXPECT_EQ(p.vec, c.vec) << c.spec;
    EXPECT_EQ(p.vectors, c.vectors) << c.spec;
    EXPECT_TRUE(p.hold_packed) << c.spec;
    EXPECT_EQ(p.reload_weight, p.problem.weight) << c.spec;
    EXPECT_EQ(p.shared_sums, p.problem.bias) << c.spec;
    EXPECT_EQ(p.smem_bytes, p.problem.bias ? 1024 * c.vectors * c.vec * 4 : 0) << c.spec;
    EXPECT_TRUE(has(p.why, "x and dy held as raw 16-bit pairs")) << p.why;
    const std::string source = emit(p).source;
    EXPECT_TRUE(has(source, "kHoldPacked = true;")) << source;
    EXPECT_EQ(has(source, "kReloadWeight = true;"), p.problem.weight) << source;
    EXPECT_EQ(has(source, "kSharedBiasSums = true;"), p.problem.bias) << source;
  }
  for (const char* text : {"op=layernorm shape=2,8192 dtype=bf16", "op=layernorm shape=2,4096",
                           "op=rmsnorm shape=2,8192 normalized_dims=1 dtype=f16 affine=weight"}) {
    const KernelPlan p = plan(NormSpec::parse(std::string(text) + " backward=true"), h100);
    ASSERT_EQ(p.strategy, Strategy::kRowBackward) << text;
    EXPECT_LE(p.block_x, 512) << text;
    // 16-bit x and dy held as raw pairs only for the next row in registers (below).
    EXPECT_EQ(p.hold_packed, p.prefetch == 2) << text;
    EXPECT_FALSE(p.reload_weight) << text;
    EXPECT_FALSE(p.shared_sums) << text;
    EXPECT_EQ(p.smem_bytes, 0) << text;
  }
}

// A team that prefetches its next row into L2 (sm_90, any number of teams a CTA) with 16-bit x
// also loads that row's words and statistics into a second set of registers as it takes a row
// (the kernel's kNextRowInRegisters, with x and dy held as raw pairs); f32 x, sm_80 (no
// prefetch), odd rows in 2-byte accesses (in CTAs of one team or several) and the wide team (64
// registers a thread) go without.
TEST(BackwardPlan, SixteenBitTeamsLoadTheirNextRowIntoRegisters) {
  const Target h100 = Target::parse("sm_90"), a100 = Target::parse("sm_80");
  const auto spec = [](const std::string& text) {
    return NormSpec::parse(text + " normalized_dims=1 backward=true");
  };
  for (const char* text : {"op=rmsnorm shape=1024,4096 dtype=bf16 affine=weight",
                           "op=layernorm shape=4096,8192 dtype=bf16",
                           "op=layernorm shape=256,8192 dtype=f16 affine=none",
                           "op=rmsnorm shape=16384,4096 dtype=bf16 affine=weight",
                           "op=layernorm shape=300,5120 dtype=bf16",
                           // CTAs of several teams (rows of 2048 and shorter)
                           "op=layernorm shape=4096,768 dtype=bf16",
                           "op=rmsnorm shape=16384,2048 dtype=bf16 affine=weight",
                           "op=layernorm shape=1024,1024 dtype=f16"}) {
    const KernelPlan p = plan(spec(text), h100);
    ASSERT_EQ(p.strategy, Strategy::kRowBackward) << text;
    EXPECT_EQ(p.prefetch, 2) << text;
    EXPECT_TRUE(p.hold_packed) << text;
    EXPECT_FALSE(p.reload_weight) << text;
    EXPECT_TRUE(has(p.why, "the next row's loaded into registers")) << p.why;
    const std::string source = emit(p).source;
    EXPECT_TRUE(has(source, "kNextRowInRegisters = true;")) << source;
    EXPECT_TRUE(has(source, "kHoldPacked = true;")) << source;
    // sm_80 has no bulk prefetch and takes neither.
    const KernelPlan old = plan(spec(text), a100);
    EXPECT_EQ(old.prefetch, 0) << text;
    EXPECT_FALSE(old.hold_packed) << text;
    EXPECT_TRUE(has(emit(old).source, "kNextRowInRegisters = false;")) << text;
  }
  for (const char* text :
       {"op=rmsnorm shape=4096,4096 dtype=f32 affine=weight",
        "op=layernorm shape=4096,768 dtype=f32", "op=layernorm shape=4096,767 dtype=bf16",
        "op=layernorm shape=4096,3001 dtype=bf16",
        "op=rmsnorm shape=1024,16384 dtype=bf16 affine=weight"}) {
    const KernelPlan p = plan(spec(text), h100);
    ASSERT_EQ(p.strategy, Strategy::kRowBackward) << text;
    EXPECT_NE(p.prefetch, 2) << text;
    EXPECT_FALSE(has(p.why, "the next row's loaded into registers")) << p.why;
    EXPECT_TRUE(has(emit(p).source, "kNextRowInRegisters = false;")) << text;
  }
}

// The wide team's dbias sums take 64 KiB of shared memory: on sm_75 (64 KiB an SM) rows with a
// bias keep the split kernel; without a bias they take the team of 1024 there too.
TEST(BackwardPlan, WideTeamWithABiasNeedsMoreThan64KiBOfSharedMemoryPerSm) {
  const NormSpec with_bias = NormSpec::parse("op=layernorm shape=4,16384 dtype=bf16 backward=true");
  const NormSpec weight_only = NormSpec::parse(
      "op=rmsnorm shape=4,16384 normalized_dims=1 dtype=bf16 affine=weight backward=true");
  EXPECT_EQ(plan(with_bias, Target::parse("sm_75")).strategy, Strategy::kRowSplitBackward);
  EXPECT_EQ(plan(weight_only, Target::parse("sm_75")).block_x, 1024);
  for (const char* arch : {"sm_80", "sm_86", "sm_89", "sm_90"}) {
    const KernelPlan p = plan(with_bias, Target::parse(arch));
    EXPECT_EQ(p.strategy, Strategy::kRowBackward) << arch;
    EXPECT_EQ(p.block_x, 1024) << arch;
    EXPECT_EQ(p.smem_bytes, 65536) << arch;
  }
}

// Longer rows take the split backward (split_backward_test.cpp).
TEST(BackwardPlan, RowsLongerThanOneTeamHoldsAreSplitNotRefused) {
  const Target h100 = Target::parse("sm_90");
  for (const char* text : {"op=layernorm shape=2,8193 dtype=bf16 backward=true",
                           "op=layernorm shape=2,32768 dtype=bf16 backward=true",
                           "op=layernorm shape=2,16384 backward=true",
                           "op=rmsnorm shape=2,1000000 normalized_dims=1 backward=true"}) {
    EXPECT_EQ(plan(NormSpec::parse(text), h100).strategy, Strategy::kRowSplitBackward) << text;
  }
  EXPECT_EQ(
      plan(NormSpec::parse("op=layernorm shape=2,8192 dtype=bf16 backward=true"), h100).strategy,
      Strategy::kRowBackward);
}

// The fused add's backward (residual): the row kernel adds dh to dx; wide teams (64 registers a
// thread) load it at each store; so does the split kernel of longer rows.
TEST(BackwardPlan, AResidualAddsDhInTheRowAndSplitKernels) {
  const Target h100 = Target::parse("sm_90");
  const auto spec = [](const char* shape, const char* dtype) {
    return NormSpec::parse(std::string("op=rmsnorm normalized_dims=1 affine=weight shape=") +
                           shape + " dtype=" + dtype + " residual=" + dtype + " backward=true");
  };
  const KernelPlan held = plan(spec("4096,8192", "bf16"), h100);
  EXPECT_EQ(held.strategy, Strategy::kRowBackward);
  EXPECT_FALSE(held.late_dh);
  EXPECT_TRUE(has(held.why, "plus dh")) << held.why;
  const EmittedKernel e = emit(held);
  EXPECT_EQ(e.kernel, "normjit::row_backward<normjit::rmsnorm_bf16_h8192_res_bf16_backward>");
  EXPECT_TRUE(has(e.source, "  static constexpr bool kResidual = true;")) << e.source;
  EXPECT_TRUE(has(e.source, "  static constexpr bool kLateResidual = false;")) << e.source;
  // The plan is the residual-free spec's but for dh.
  KernelPlan plain = plan(NormSpec::parse("op=rmsnorm normalized_dims=1 affine=weight "
                                          "shape=4096,8192 dtype=bf16 backward=true"),
                          h100);
  EXPECT_EQ(held.block_x, plain.block_x);
  EXPECT_EQ(held.vectors, plain.vectors);
  EXPECT_EQ(held.prefetch, plain.prefetch);
  EXPECT_TRUE(has(emit(plain).source, "  static constexpr bool kResidual = false;"));
  const KernelPlan wide = plan(spec("64,16384", "bf16"), h100);
  EXPECT_EQ(wide.block_x, 1024);
  EXPECT_TRUE(wide.late_dh);
  EXPECT_TRUE(has(emit(wide).source, "  static constexpr bool kLateResidual = true;"));
  EXPECT_TRUE(has(wide.why, "each vector of dh loaded at its store")) << wide.why;
  for (const auto& [shape, dtype] :
       {std::pair{"64,16385", "bf16"}, {"64,8193", "f32"}, {"16,4194304", "f32"}}) {
    const KernelPlan split = plan(spec(shape, dtype), h100);
    EXPECT_EQ(split.strategy, Strategy::kRowSplitBackward) << shape;
    EXPECT_TRUE(has(split.why, "dh added to dx, each vector loaded as dx's is stored"))
        << split.why;
    EXPECT_TRUE(has(emit(split).source, "  static constexpr bool kResidual = true;")) << shape;
  }
  EXPECT_TRUE(has(emit(plan(NormSpec::parse("op=layernorm shape=64,16385 dtype=bf16 "
                                            "backward=true"),
                            h100))
                      .source,
                  "  static constexpr bool kResidual = false;"));
}

// The channel forms channels last (ConvNeXt's LayerNorm2d on a channels_last tensor): each
// position's C channels are a contiguous row, so their backward is the row backward kernel over
// N x S rows of C, the same kernel (and cache entry) as the trailing form's rows of C.
TEST(BackwardPlan, ChannelFormsInNhwcAreTheRowBackwardOverNTimesSRows) {
  const Target h100 = Target::parse("sm_90");
  const KernelPlan p = plan(NormSpec::parse("op=layernorm shape=8,96,56,56 normalized_dims=0 "
                                            "dtype=bf16 layout=nhwc backward=true"),
                            h100);
  const KernelPlan rows = plan(NormSpec::parse("op=layernorm shape=25088,96 dtype=bf16 "
                                               "backward=true"),
                               h100);
  EXPECT_EQ(p.strategy, Strategy::kRowBackward);
  EXPECT_EQ(p.rows_per_item, 56 * 56);
  // A launch of N = 8 items takes the grid of 8 x 3136 rows (more rows than the CTAs own).
  const int64_t co_resident = 132 * 4;
  EXPECT_EQ(p.grid(8, co_resident), rows.grid(8 * 3136, co_resident));
  EXPECT_GT(p.grid(8, co_resident), rows.grid(8, co_resident));
  EXPECT_TRUE(has(p.why, "layout nhwc") &&
              has(p.why, "differentiated as rows by the row backward kernel (N x 3136 rows"))
      << p.why;
  EXPECT_EQ(emit(p).source, emit(rows).source);
  EXPECT_EQ(p.block_x, rows.block_x);
  EXPECT_EQ(p.vectors, rows.vectors);
}

TEST(BackwardEmit, ConfigurationNamesEveryConstantTheKernelChecks) {
  const Target h100 = Target::parse("sm_90");
  const EmittedKernel e = emit(
      plan(NormSpec::parse("op=rmsnorm shape=4096,4096 normalized_dims=1 dtype=bf16 affine=weight "
                           "param_dtype=f32 weight_offset=1 backward=true"),
           h100));
  EXPECT_EQ(e.kernel,
            "normjit::row_backward<normjit::rmsnorm_bf16_h4096_param_f32_offset_backward>");
  EXPECT_EQ(e.name_expression, "&" + e.kernel);
  for (const char* line :
       {"#include \"normjit/row_backward.cuh\"", "  using X = normjit::bf16_t;",
        "  using Param = float;", "  static constexpr bool kRms = true;",
        "  static constexpr bool kWeight = true;", "  static constexpr bool kBias = false;",
        "  static constexpr float kWeightOffset = 1;",
        "  static constexpr long long kRowLength = 4096;", "  static constexpr int kThreads = 256;",
        "  static constexpr int kRowsPerBlock = 2;", "  static constexpr int kVec = 8;",
        "  static constexpr int kVectors = 2;", "  static constexpr bool kTeamBarriers = true;",
        "  static constexpr bool kQuadFinalSum = true;",
        "  static constexpr long long kWorkspaceHeaderFloats = 8;",
        "  static constexpr long long kWorkspaceSlotFloats = 4096;"}) {
    EXPECT_TRUE(has(e.source, line)) << line << "\n" << e.source;
  }
  // Deterministic text.
  EXPECT_EQ(e.source, emit(plan(NormSpec::parse("op=rmsnorm shape=4096,4096 normalized_dims=1 "
                                                "dtype=bf16 affine=weight param_dtype=f32 "
                                                "weight_offset=1 backward=true"),
                                h100))
                          .source);
}

TEST(BackwardPlan, GroupNormUnitsWavesAndWorkspace) {
  const Target h100 = Target::parse("sm_90");
  struct Case {
    const char* spec;
    int vec, team, rows_per_block;
    int64_t vectors, chunks, units_per_channel, wave_rows;
    int min_blocks_per_sm;  // launch bounds: 3 for 16-bit channels of 16 values a thread in
                            // units of one chunk, 2 for the chunked units
  } cases[] = {
      // The seeds: 2 Mi-element groups; a wave's x and dy fit 24 MiB in f32 (one row), 16 MiB in
      // 16 bits (two rows).
      {"op=groupnorm shape=112,64,512,512 groups=8", 4, 256, 1, 4, 1, 64, 1, 1},
      // 16-bit channels of 16384 positions or more in 16-byte accesses: units of 16384
      // positions, 4 chunks of 16 values a thread.
      {"op=groupnorm shape=112,64,512,512 groups=8 dtype=bf16", 8, 256, 1, 2, 4, 16, 2, 2},
      {"op=groupnorm shape=1,256,256,256 groups=32 dtype=f16", 8, 256, 1, 2, 4, 4, 8, 2},
      {"op=groupnorm shape=2,320,128,128 groups=32 dtype=f16", 8, 256, 1, 2, 4, 1, 25, 2},
      // A channel of 20480 positions: 5 chunks, one unit of 4 and one of 1; 51 rows fit 16 MiB,
      // cut to the 33 rows (66 units a row) of one round of the 264 CTAs 132 SMs hold at 2.
      {"op=groupnorm shape=2,32,128,160 groups=8 dtype=bf16", 8, 256, 1, 2, 4, 2, 33, 2},
      // In narrower accesses: units of one chunk of 16 values a thread at every size (waves cut
      // to whole rounds of 396 units: 7 rows of 136 to 5, 31 of 40 to 29).
      {"op=groupnorm shape=2,32,1,65537 groups=4 dtype=bf16", 1, 256, 1, 16, 1, 17, 5, 3},
      {"op=groupnorm shape=2,32,4,4097 groups=4 dtype=bf16", 4, 256, 1, 4, 1, 5, 29, 3},
      // Stable Diffusion's: a unit per channel of 4096, 10 channels per group.
      {"op=groupnorm shape=2,320,64,64 groups=32", 4, 256, 1, 4, 1, 1, 76, 1},
      // Odd maps: scalar accesses, small teams, several units per CTA.
      // (8192 rows of 8 units a wave, 65536 units, cut to 6336: 2 rounds of 396 CTAs x 64 teams.)
      {"op=groupnorm shape=3,64,7,9 groups=8 dtype=f16", 1, 4, 64, 16, 1, 1, 6336, 3},
      {"op=groupnorm shape=3,6,1 groups=3", 1, 1, 256, 1, 1, 1, 32768, 1},
      {"op=groupnorm shape=2,8,4097 groups=2 affine=none", 1, 256, 1, 16, 1, 2, 191, 1},
      {"op=groupnorm shape=16,256,56,56 groups=32 dtype=bf16", 8, 256, 1, 2, 1, 1, 148, 3},
  };
  for (const Case& c : cases) {
    const NormSpec spec = NormSpec::parse(std::string(c.spec) + " backward=true");
    const KernelPlan p = plan(spec, h100);
    EXPECT_EQ(p.strategy, Strategy::kGroupBackward) << c.spec;
    EXPECT_TRUE(p.cooperative()) << c.spec;
    EXPECT_EQ(p.vec, c.vec) << c.spec;
    EXPECT_EQ(p.block_x, c.team) << c.spec;
    EXPECT_EQ(p.rows_per_block, c.rows_per_block) << c.spec;
    EXPECT_EQ(p.block_y, c.rows_per_block) << c.spec;
    EXPECT_EQ(p.vectors, c.vectors) << c.spec;
    EXPECT_EQ(p.chunks, c.chunks) << c.spec;
    EXPECT_EQ(p.units_per_channel, c.units_per_channel) << c.spec;
    EXPECT_EQ(p.wave_rows, c.wave_rows) << c.spec;
    EXPECT_EQ(p.min_blocks_per_sm, c.min_blocks_per_sm) << c.spec;
    // Step 2 loads two chunks ahead where a unit has more than two, else the one after.
    EXPECT_EQ(p.chunks_ahead, p.chunks == 1 ? 1 : std::min<int64_t>(2, p.chunks - 1)) << c.spec;
    // T units cover a channel, none empty, and no chunk of the first unit lies past its end; a
    // thread holds at most 16 values of x and of dy a chunk.
    const int64_t chunk = int64_t{p.block_x} * p.vectors * p.vec, unit = chunk * p.chunks;
    EXPECT_GE(p.units_per_channel * unit, spec.spatial()) << c.spec;
    EXPECT_LT((p.units_per_channel - 1) * unit, spec.spatial()) << c.spec;
    EXPECT_LT((p.chunks - 1) * chunk, spec.spatial()) << c.spec;
    EXPECT_LE(p.vectors * p.vec, 16) << c.spec;
    EXPECT_EQ(spec.spatial() % p.vec, 0) << c.spec;
    EXPECT_TRUE(has(p.to_string(), "strategy: group-backward")) << c.spec;
  }
  // The workspace: the barrier's 8 floats, two buffers of the wave's unit partials (2 floats
  // each), two of its channel sums and the accumulators of dweight and dbias, each padded to 8.
  const KernelPlan seed =
      plan(NormSpec::parse("op=groupnorm shape=112,64,512,512 groups=8 backward=true"), h100);
  EXPECT_EQ(seed.workspace_floats(0), 8 + 2 * 1024 + 2 * 16 + 128);
  EXPECT_EQ(seed.workspace_floats(264), seed.workspace_floats(0));  // the same for any grid
  const KernelPlan none =
      plan(NormSpec::parse("op=groupnorm shape=112,64,512,512 groups=8 affine=none backward=true"),
           h100);
  EXPECT_EQ(none.workspace_floats(0), 8 + 2 * 1024);
  // The grid: the units of a wave (or of the rows there are), at most the CTAs the device holds.
  EXPECT_EQ(seed.grid(112, 264), 264);
  EXPECT_EQ(seed.grid(112, 10000), 512);
  const KernelPlan small =
      plan(NormSpec::parse("op=groupnorm shape=3,64,7,9 groups=8 dtype=f16 backward=true"), h100);
  EXPECT_EQ(small.grid(1, 10000), 1);  // 8 rows of 8 units, 64 units per CTA
  // Chunked units: a wave of the bf16 seed is 2 rows of 8 channels of 16 units (4 chunks each),
  // so 256 CTAs at most, whatever the device holds beyond; its workspace holds their partials.
  const KernelPlan bf16 = plan(
      NormSpec::parse("op=groupnorm shape=112,64,512,512 groups=8 dtype=bf16 backward=true"), h100);
  EXPECT_EQ(bf16.grid(112, 264), 256);
  EXPECT_EQ(bf16.grid(112, 200), 200);
  EXPECT_EQ(bf16.workspace_floats(0), 8 + 2 * 512 + 2 * 32 + 128);
  EXPECT_EQ(small.grid(3, 10000), 3);  // 192 units
  EXPECT_EQ(small.grid(3, 2), 2);
}

// A GroupNorm backward plan streamed on the H200's 4814 GB/s: values a thread, chunks a unit,
// units a channel and rows a wave as given; dx's loads ahead of the row's sums, no prefetch of a
// next wave, two CTAs an SM (128 registers).
struct Streamed {
  int64_t values, chunks, units_per_channel, wave_rows;
};
void expect_streamed(const KernelPlan& p, const Streamed& want) {
  EXPECT_TRUE(p.load_ahead);
  EXPECT_EQ(p.vectors * p.vec, want.values);
  EXPECT_EQ(p.chunks, want.chunks);
  EXPECT_EQ(p.units_per_channel, want.units_per_channel);
  EXPECT_EQ(p.wave_rows, want.wave_rows);
  EXPECT_EQ(p.prefetch, 0);
  EXPECT_EQ(p.min_blocks_per_sm, 2);
  EXPECT_TRUE(has(p.to_string(), "streamed (DRAM of 4814 GB/s, at least 4000)")) << p.to_string();
}

// The L2 waves of bounded kernels are whole rounds of the units their co-resident CTAs run at
// once: a wave needs no more rounds than its rows' units fill, and one more row would need
// another round. Unbounded ones (f32, whose CTAs an SM the registers decide) keep the rows their
// 24 MiB of L2 hold.
TEST(BackwardPlan, GroupNormWavesOfBoundedKernelsAreWholeRoundsOfTheirCtas) {
  for (const char* arch : {"sm_90", "sm_90:66", "sm_90:132:4814", "sm_80", "sm_100"}) {
    const Target target = Target::parse(arch);
    for (const char* text : {"op=groupnorm shape=4,64,264,264 groups=8 dtype=bf16",
                             "op=groupnorm shape=16,256,56,56 groups=32 dtype=bf16",
                             "op=groupnorm shape=2,32,1,65537 groups=4 dtype=bf16",
                             "op=groupnorm shape=1,64,257,257 groups=32 dtype=bf16",
                             "op=groupnorm shape=1,128,255,255 groups=32 dtype=f16",
                             "op=groupnorm shape=2,320,128,128 groups=32 dtype=f16",
                             "op=groupnorm shape=3,64,7,9 groups=8 dtype=f16"}) {
      const NormSpec spec = NormSpec::parse(std::string(text) + " backward=true");
      const KernelPlan p = plan(spec, target);
      const std::string where = std::string(text) + " on " + arch;
      ASSERT_GT(p.min_blocks_per_sm, 1) << where;
      const int64_t slots = int64_t{target.sm_count} * p.min_blocks_per_sm * p.rows_per_block;
      const int64_t row_units = spec.channels() / spec.groups * p.units_per_channel;
      const int64_t units = p.wave_rows * row_units;
      if (units <= slots) continue;  // one round, partly filled: the wave is as L2 allows
      const int64_t rounds = (units + slots - 1) / slots;
      EXPECT_GT((p.wave_rows + 1) * row_units, rounds * slots) << where << ": " << p.why;
    }
  }
  const KernelPlan f32 =
      plan(NormSpec::parse("op=groupnorm shape=32,64,128,128 groups=32 backward=true"),
           Target::parse("sm_90"));
  EXPECT_EQ(f32.min_blocks_per_sm, 1);
  EXPECT_EQ(f32.wave_rows, 96);  // 24 MiB of 256 KiB rows: 768 units, more than 132 CTAs
  EXPECT_FALSE(has(f32.why, "waves cut")) << f32.why;
}

TEST(BackwardPlan, GroupNormOfLargeF32ChannelsStreamsWhereDramIsFast) {
  // f32 channels of 65536 positions and more stream on a GPU of 4 TB/s and more (an H200): 32
  // values a thread, two CTAs an SM, as many rows a wave as 2^18 units (the seed: 256 a row, its
  // 896 rows in one wave), no prefetch, dx's loads ahead of the row's sums. The H100's 3.35 TB/s
  // keeps the L2 waves, and so do smaller channels on either GPU (and 16-bit ones of fewer than
  // 262144 positions, below).
  const Target h100 = Target::parse("sm_90"), h200 = Target::parse("sm_90:132:4814");
  const NormSpec seed = NormSpec::parse("op=groupnorm shape=112,64,512,512 groups=8 backward=true");
  const KernelPlan fast = plan(seed, h200), slow = plan(seed, h100);
  expect_streamed(fast, {32, 1, 32, 1024});
  EXPECT_EQ(slow.min_blocks_per_sm, 1);
  // The workspace: two buffers of 1024 rows x 256 unit partials, two of 1024 x 8 channel sums.
  EXPECT_EQ(fast.workspace_floats(0), 8 + 2 * (1024 * 256 * 2) + 2 * (1024 * 8 * 2) + 128);
  EXPECT_EQ(fast.grid(112, 10000), 10000);  // 896 rows of 256 units: one wave
  EXPECT_EQ(fast.grid(1, 10000), 8 * 256);
  EXPECT_FALSE(slow.load_ahead);
  EXPECT_EQ(slow.wave_rows, 1);
  EXPECT_EQ(slow.prefetch, 1);
  EXPECT_FALSE(has(slow.to_string(), "streamed")) << slow.to_string();
  // The H100's kernel is the one before the rule, byte for byte; the H200's differs.
  EXPECT_NE(emit(fast).source, emit(slow).source);
  EXPECT_TRUE(has(emit(fast).source, "static constexpr bool kLoadAhead = true;"));
  EXPECT_TRUE(has(emit(slow).source, "static constexpr bool kLoadAhead = false;"));
  // The bandwidth at the threshold streams; below it, not.
  EXPECT_TRUE(plan(seed, Target::parse("sm_90:132:4000")).load_ahead);
  EXPECT_FALSE(plan(seed, Target::parse("sm_90:132:3999")).load_ahead);
  for (const char* other :
       {"op=groupnorm shape=1,256,256,256 groups=32 dtype=f16",
        "op=groupnorm shape=2,32,1,262147 groups=4 dtype=bf16",
        "op=groupnorm shape=32,64,128,128 groups=32", "op=groupnorm shape=2,320,64,64 groups=32"}) {
    const NormSpec spec = NormSpec::parse(std::string(other) + " backward=true");
    EXPECT_FALSE(plan(spec, h200).load_ahead) << other;
    EXPECT_EQ(emit(plan(spec, h200)).source, emit(plan(spec, h100)).source) << other;
  }
  // A large f32 channel whose rows are many: waves of 2^18 units, the workspace bounded.
  const KernelPlan many =
      plan(NormSpec::parse("op=groupnorm shape=4096,32,65536 groups=32 affine=none backward=true"),
           h200);
  EXPECT_TRUE(many.load_ahead);
  EXPECT_EQ(many.wave_rows, (int64_t{1} << 18) / 8);
}

TEST(BackwardPlan, GroupNormOf16BitChannelsOf262144PositionsStreamsWhereDramIsFast) {
  // 16-bit channels of 262144 positions and more in 16-byte accesses stream there too, in their
  // chunked units, 8 chunks of 4096 (16 values a thread, two CTAs an SM): the bf16 seed's 896
  // rows of 64 units in one wave of 4096 rows, no prefetch, dx's first chunk loaded ahead of the
  // row's sums. 65536 positions, narrow accesses and the H100 keep the L2 waves.
  const Target h100 = Target::parse("sm_90"), h200 = Target::parse("sm_90:132:4814");
  const NormSpec seed =
      NormSpec::parse("op=groupnorm shape=112,64,512,512 groups=8 dtype=bf16 backward=true");
  const KernelPlan fast = plan(seed, h200), slow = plan(seed, h100);
  expect_streamed(fast, {16, 8, 8, 4096});
  // Two buffers of 4096 rows x 64 unit partials, two of 4096 x 8 channel sums, the accumulators.
  EXPECT_EQ(fast.workspace_floats(0), 8 + 2 * (4096 * 64 * 2) + 2 * (4096 * 8 * 2) + 128);
  EXPECT_EQ(fast.grid(112, 264), 264);
  EXPECT_EQ(fast.grid(1, 10000), 8 * 64);
  EXPECT_FALSE(slow.load_ahead);
  EXPECT_EQ(slow.wave_rows, 2);
  EXPECT_EQ(slow.prefetch, 1);
  EXPECT_EQ(slow.chunks, 4);
  EXPECT_TRUE(plan(NormSpec::parse("op=groupnorm shape=1,128,512,512 groups=32 dtype=f16 "
                                   "backward=true"),
                   h200)
                  .load_ahead);
  for (const char* waves : {"op=groupnorm shape=1,512,256,256 groups=32 dtype=f16",
                            "op=groupnorm shape=4,64,263,263 groups=8 dtype=bf16",
                            "op=groupnorm shape=8,64,513,513 groups=8 dtype=bf16"}) {
    const KernelPlan p = plan(NormSpec::parse(std::string(waves) + " backward=true"), h200);
    EXPECT_FALSE(p.load_ahead) << waves;
    EXPECT_FALSE(has(p.to_string(), "streamed")) << waves;
  }
}

TEST(BackwardPlan, GroupNormWithAWorkspaceTooLargeIsUnsupportedNamingTheShape) {
  const Target h100 = Target::parse("sm_90");
  try {
    plan(NormSpec::parse("op=groupnorm shape=1,67108864 groups=1 backward=true"), h100);
    ADD_FAILURE() << "planned a workspace of 2^28 floats";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kUnsupported) << e.what();
    EXPECT_TRUE(has(e.what(), "unsupported shape '1,67108864'")) << e.what();
    EXPECT_TRUE(has(e.what(), "67108864 channels of 1 elements per group")) << e.what();
  }
}

TEST(BackwardPlan, ChannelFormsOwnPositionsAndSumPartialsPerCta) {
  const Target h100 = Target::parse("sm_90");
  struct Case {
    const char* spec;
    int vec, threads_x, threads_y;
    bool cached;
    int64_t tiles;
  } cases[] = {
      // 32 values of x (and of dy) a thread: tiles of 128 positions in every dtype.
      {"op=rmsnorm shape=112,64,512,512", 4, 32, 8, true, 2048},
      {"op=rmsnorm shape=112,64,512,512 dtype=bf16 affine=weight", 8, 16, 16, true, 2048},
      {"op=layernorm shape=4,64,7,9 normalized_dims=0", 1, 128, 2, true, 1},
      {"op=layernorm shape=4,1000,3,3 normalized_dims=0 dtype=bf16", 1, 8, 32, true, 2},
      {"op=layernorm shape=4,2048,3,3 normalized_dims=0 dtype=bf16", 1, 8, 32, false, 2},
  };
  for (const Case& c : cases) {
    const NormSpec spec = NormSpec::parse(std::string(c.spec) + " backward=true");
    const KernelPlan p = plan(spec, h100);
    EXPECT_EQ(p.strategy, Strategy::kChannelsBackward) << c.spec;
    EXPECT_EQ(p.vec, c.vec) << c.spec;
    EXPECT_EQ(p.block_x, c.threads_x) << c.spec;
    EXPECT_EQ(p.block_y, c.threads_y) << c.spec;
    EXPECT_EQ(p.cached, c.cached) << c.spec;
    EXPECT_EQ(p.blocks_per_item, c.tiles) << c.spec;
    EXPECT_EQ(p.grid(3, 100000), 3 * c.tiles) << c.spec;
    EXPECT_EQ(p.grid(3, 2), 2) << c.spec;
    EXPECT_TRUE(has(p.to_string(), "strategy: channels-backward")) << c.spec;
  }
  // Parameters: cooperative, one partial of C floats (padded to 8) per CTA and per parameter.
  const KernelPlan ln =
      plan(NormSpec::parse("op=layernorm shape=4,1000,3,3 normalized_dims=0 backward=true"), h100);
  EXPECT_TRUE(ln.cooperative());
  EXPECT_EQ(ln.workspace_slot_floats(), 2 * 1000);
  EXPECT_EQ(ln.workspace_floats(10), 8 + 10 * 2000);
  const KernelPlan rms = plan(NormSpec::parse("op=rmsnorm shape=4,65,3 backward=true"), h100);
  EXPECT_FALSE(rms.cooperative());
  EXPECT_EQ(rms.workspace_floats(10), 0);
  const KernelPlan w =
      plan(NormSpec::parse("op=rmsnorm shape=4,65,3 affine=weight backward=true"), h100);
  EXPECT_EQ(w.workspace_slot_floats(), 72);
}

TEST(BackwardEmit, GroupAndChannelConfigurations) {
  const Target h100 = Target::parse("sm_90");
  const EmittedKernel g = emit(
      plan(NormSpec::parse("op=groupnorm shape=2,320,64,64 groups=32 dtype=bf16 param_dtype=f32 "
                           "backward=true"),
           h100));
  EXPECT_EQ(g.kernel,
            "normjit::group_backward<normjit::groupnorm_bf16_g32_h40960_param_f32_backward>");
  for (const char* line :
       {"#include \"normjit/group_backward.cuh\"", "  using X = normjit::bf16_t;",
        "  using Param = float;", "  static constexpr int kChannels = 320;",
        "  static constexpr int kGroups = 32;", "  static constexpr int kChannelsPerGroup = 10;",
        "  static constexpr long long kSpatial = 4096;", "  static constexpr int kThreads = 256;",
        "  static constexpr int kVec = 8;", "  static constexpr int kVectors = 2;",
        "  static constexpr long long kUnitsPerChannel = 1;",
        "  static constexpr long long kWaveRows = 79;"}) {
    EXPECT_TRUE(has(g.source, line)) << line << "\n" << g.source;
  }
  const EmittedKernel c =
      emit(plan(NormSpec::parse("op=layernorm shape=2,96,56,56 normalized_dims=0 weight_offset=1 "
                                "backward=true"),
                h100));
  EXPECT_EQ(c.kernel,
            "normjit::channels_backward<normjit::layernorm_f32_c96_s3136_offset_backward>");
  for (const char* line :
       {"#include \"normjit/channels_backward.cuh\"", "  static constexpr bool kRms = false;",
        "  static constexpr float kWeightOffset = 1;", "  static constexpr int kChannels = 96;",
        "  static constexpr long long kSpatial = 3136;", "  static constexpr int kVec = 4;",
        "  static constexpr long long kWorkspaceHeaderFloats = 8;",
        "  static constexpr long long kWorkspaceSlotFloats = 192;"}) {
    EXPECT_TRUE(has(c.source, line)) << line << "\n" << c.source;
  }
}

}  // namespace
}  // namespace normjit
