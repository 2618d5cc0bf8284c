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

TEST(BackwardSpec, FormsWithoutABackwardKernelAreUnsupportedNotInvalid) {
  const Error group = refusal("op=groupnorm shape=2,64,8,8 groups=8 backward=true");
  EXPECT_EQ(group.code(), ErrorCode::kUnsupported);
  EXPECT_TRUE(has(group.what(),
                  "unsupported op 'groupnorm': backward=true is not yet supported "
                  "for groupnorm"))
      << group.what();
  const Error channels = refusal("op=rmsnorm shape=2,64,8,8 backward=true");
  EXPECT_EQ(channels.code(), ErrorCode::kUnsupported);
  EXPECT_TRUE(has(channels.what(),
                  "unsupported normalized_dims 0: backward=true is not yet "
                  "supported for the channel form"))
      << channels.what();
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
      {"residual=bf16", "invalid residual 'bf16': backward=true has no residual variant yet"},
      {"save_stats=true", "invalid save_stats true: backward=true reads the statistics"},
  };
  for (const Case& c : cases) {
    const Error e = refusal(base + c.axis);
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument) << c.axis;
    EXPECT_TRUE(has(e.what(), c.expected)) << e.what();
  }
  // x's own dtype as out_dtype is the default, not a variant.
  EXPECT_NO_THROW(NormSpec::parse(base + "out_dtype=bf16"));
  // The parameters' dtype and the weight offset are what the gradient kernel honours.
  EXPECT_NO_THROW(NormSpec::parse(base + "param_dtype=f32 weight_offset=1"));
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
  EXPECT_EQ(p.grid(1, 500), 1);
  EXPECT_EQ(p.grid(16, 500), 1);
  EXPECT_EQ(p.grid(17, 500), 2);
  EXPECT_EQ(p.grid(1000, 500), 63);
  EXPECT_EQ(p.grid(1000000, 500), 500);
}

TEST(BackwardPlan, RowsTooLongForOneTeamAreUnsupportedNamingTheShape) {
  const Target h100 = Target::parse("sm_90");
  for (const char* text : {"op=layernorm shape=2,8193 dtype=bf16 backward=true",
                           "op=layernorm shape=2,16384 dtype=bf16 backward=true",
                           "op=rmsnorm shape=2,1000000 normalized_dims=1 backward=true"}) {
    try {
      plan(NormSpec::parse(text), h100);
      ADD_FAILURE() << "planned: " << text;
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kUnsupported) << e.what();
      EXPECT_TRUE(has(e.what(), "unsupported shape '2,")) << e.what();
      EXPECT_TRUE(has(e.what(), "rows of up to 8192 elements")) << e.what();
      EXPECT_TRUE(has(e.what(), "are not yet supported")) << e.what();
    }
  }
  EXPECT_NO_THROW(
      plan(NormSpec::parse("op=layernorm shape=2,8192 dtype=bf16 backward=true"), h100));
}

TEST(BackwardEmit, ConfigurationNamesEveryConstantTheKernelChecks) {
  const Target h100 = Target::parse("sm_90");
  const EmittedKernel e = emit(
      plan(NormSpec::parse("op=rmsnorm shape=16,4096 normalized_dims=1 dtype=bf16 affine=weight "
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
        "  static constexpr int kRowsPerBlock = 1;", "  static constexpr int kVec = 8;",
        "  static constexpr int kVectors = 2;",
        "  static constexpr long long kWorkspaceHeaderFloats = 8;",
        "  static constexpr long long kWorkspaceSlotFloats = 4096;"}) {
    EXPECT_TRUE(has(e.source, line)) << line << "\n" << e.source;
  }
  // Deterministic text.
  EXPECT_EQ(e.source, emit(plan(NormSpec::parse("op=rmsnorm shape=16,4096 normalized_dims=1 "
                                                "dtype=bf16 affine=weight param_dtype=f32 "
                                                "weight_offset=1 backward=true"),
                                h100))
                          .source);
}

}  // namespace
}  // namespace normjit
