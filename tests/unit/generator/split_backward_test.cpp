// The backward of trailing rows longer than one team holds (issue 20; more than 8192 elements):
// the row-split-backward strategy (templates/normjit/row_split_backward.cuh), chosen by plan()
// where row-backward cannot hold the row; its parts held in registers or streamed, its waves,
// grid and workspace; the configuration emit writes for it; and the rows it still refuses.
#include <gtest/gtest.h>

#include <string>
#include <utility>

#include "generator/emit.hpp"
#include "generator/plan.hpp"
#include "generator/target.hpp"
#include "normjit/error.hpp"
#include "normjit/spec.hpp"

namespace normjit {
namespace {

bool has(const std::string& text, const std::string& word) {
  return text.find(word) != std::string::npos;
}

KernelPlan plan_of(const std::string& text, const char* target = "sm_90") {
  return plan(NormSpec::parse(text + " backward=true"), Target::parse(target));
}

TEST(SplitBackwardPlan, RowsOneTeamCannotHoldTakeTheSplitBackward) {
  // The longest rows row-backward holds (512 threads of 16 values; 16-bit rows in pairs 1024
  // threads, backward_test.cpp) keep it.
  EXPECT_EQ(plan_of("op=layernorm shape=2,8192 dtype=bf16").strategy, Strategy::kRowBackward);
  EXPECT_EQ(plan_of("op=layernorm shape=2,16384 dtype=bf16").strategy, Strategy::kRowBackward);
  EXPECT_EQ(plan_of("op=rmsnorm shape=2,8191 normalized_dims=1").strategy, Strategy::kRowBackward);
  for (const char* text :
       {"op=layernorm shape=2,8193 dtype=bf16", "op=layernorm shape=2,32768 dtype=bf16",
        "op=layernorm shape=2,16384", "op=rmsnorm shape=2,16386 normalized_dims=1 dtype=f16",
        // 8200 f32: 4-element vectors, 5 per thread of 512 (20 values).
        "op=layernorm shape=2,8200", "op=rmsnorm shape=2,1000000 normalized_dims=1",
        "op=layernorm shape=16,64,256,256 normalized_dims=3"}) {
    const KernelPlan p = plan_of(text);
    EXPECT_EQ(p.strategy, Strategy::kRowSplitBackward) << text;
    EXPECT_TRUE(p.cooperative()) << text;
    EXPECT_TRUE(has(p.to_string(), "strategy: row-split-backward")) << text;
  }
}

TEST(SplitBackwardPlan, HeldPartsAreEvenAndFitTheCoResidentCtas) {
  struct Case {
    const char* spec;
    int vec;
    int64_t vectors, parts, segment;
    int blocks_per_sm;  // 3 (f32 LayerNorm with a weight and no bias: 2)
    bool reload;        // the weight loaded again each row: at 3 per SM with a weight
  } cases[] = {
      // f32 hidden 16384 and bf16 hidden 32768: CTAs of 256 threads x 16 values.
      {"op=rmsnorm shape=4096,32768 normalized_dims=1 dtype=bf16 affine=weight", 8, 2, 8, 4096, 3,
       true},
      {"op=layernorm shape=16,16384", 4, 4, 4, 4096, 3, true},
      {"op=layernorm shape=16,32768 dtype=bf16", 8, 2, 8, 4096, 3, true},
      {"op=layernorm shape=16,32768 dtype=bf16 affine=weight", 8, 2, 8, 4096, 3, true},
      {"op=layernorm shape=16,16384 affine=weight", 4, 4, 4, 4096, 2, false},
      {"op=layernorm shape=16,16384 affine=none", 4, 4, 4, 4096, 3, false},
      // Odd rows: scalar accesses, the fewest vectors per thread that keep the parts even.
      {"op=rmsnorm shape=3,8193 normalized_dims=1 affine=none", 1, 11, 3, 2816, 3, false},
      {"op=layernorm shape=3,65537", 1, 16, 17, 4096, 3, true},
      // A prime near what 396 CTAs (3 per SM on 132) hold: 245 parts, the last one short.
      {"op=layernorm shape=2,1000003 dtype=f16", 1, 16, 245, 4096, 3, true},
      // RMSNorm of a row 264 CTAs would not hold, held by 3 per SM (396): 293 parts.
      {"op=rmsnorm shape=2,1200001 normalized_dims=1 dtype=f16", 1, 16, 293, 4096, 3, false},
  };
  for (const Case& c : cases) {
    const KernelPlan p = plan_of(c.spec);
    ASSERT_EQ(p.strategy, Strategy::kRowSplitBackward) << c.spec;
    EXPECT_EQ(p.vec, c.vec) << c.spec;
    EXPECT_EQ(p.param_vec, c.vec) << c.spec;
    EXPECT_EQ(p.block_x, 256) << c.spec;
    EXPECT_EQ(p.block_y, 1) << c.spec;
    EXPECT_EQ(p.split_blocks_per_sm, c.blocks_per_sm) << c.spec;
    EXPECT_EQ(p.reload_weight, c.reload) << c.spec;
    EXPECT_EQ(has(p.why, "weight loaded again with each row"), c.reload) << c.spec;
    EXPECT_EQ(has(emit(p).source, "kReloadWeight = true;"), c.reload) << c.spec;
    // dbias summed in shared memory wherever a bias is held at 3 per SM.
    EXPECT_EQ(p.shared_sums, p.problem.bias) << c.spec;
    EXPECT_EQ(has(emit(p).source, "kSharedBiasSums = true;"), p.problem.bias) << c.spec;
    EXPECT_EQ(p.vectors, c.vectors) << c.spec;
    EXPECT_LE(p.vectors * p.vec, 16) << c.spec;
    EXPECT_EQ(p.split_chunks, c.parts) << c.spec;
    EXPECT_EQ(p.segment, c.segment) << c.spec;
    EXPECT_EQ(p.pieces, 1) << c.spec;
    EXPECT_EQ(p.wave_rows, 1) << c.spec;
    // P parts of the segment cover the row, none empty.
    const int64_t h = p.problem.row_length;
    EXPECT_LT((p.split_chunks - 1) * p.segment, h) << c.spec;
    EXPECT_GE(p.split_chunks * p.segment, h) << c.spec;
    EXPECT_TRUE(has(p.to_string(), "piece (in registers)")) << c.spec;
    EXPECT_TRUE(has(p.why, "x and dy read once")) << c.spec;
  }
}

TEST(SplitBackwardPlan, RowsLongerThanTheChipHoldsAreStreamedInWaves) {
  struct Case {
    const char* spec;
    int vec;
    int64_t vectors, pieces, segment, parts, wave_rows;
  } cases[] = {
      // The LayerNorm seed: 256 of the 264 co-resident CTAs, 8 pieces of 8 values per thread,
      // 16 rows per wave (with parameters).
      {"op=layernorm shape=16,64,256,256 normalized_dims=3", 4, 2, 8, 16384, 256, 16},
      {"op=layernorm shape=16,64,256,256 normalized_dims=3 dtype=bf16", 8, 1, 8, 16384, 256, 16},
      // No parameters: a row per wave.
      {"op=layernorm shape=16,64,256,256 normalized_dims=3 dtype=bf16 affine=none", 8, 1, 8, 16384,
       256, 1},
      // Odd, one element past what the held parts take (264 CTAs): 17 pieces of one vector.
      {"op=layernorm shape=2,1081345 affine=weight", 1, 1, 17, 4352, 249, 16},
      // RMSNorm holds 396 CTAs' worth (3 per SM); one element more is streamed on 264.
      {"op=rmsnorm shape=2,1622017 normalized_dims=1 affine=weight", 1, 5, 5, 6400, 254, 16},
  };
  for (const Case& c : cases) {
    const KernelPlan p = plan_of(c.spec);
    ASSERT_EQ(p.strategy, Strategy::kRowSplitBackward) << c.spec;
    EXPECT_EQ(p.vec, c.vec) << c.spec;
    EXPECT_EQ(p.vectors, c.vectors) << c.spec;
    EXPECT_EQ(p.pieces, c.pieces) << c.spec;
    EXPECT_EQ(p.segment, c.segment) << c.spec;
    EXPECT_EQ(p.segment, p.pieces * p.vectors * p.vec * p.block_x) << c.spec;
    EXPECT_EQ(p.split_chunks, c.parts) << c.spec;
    EXPECT_LE(p.split_chunks, 264) << c.spec;
    EXPECT_EQ(p.wave_rows, c.wave_rows) << c.spec;
    EXPECT_TRUE(has(p.to_string(), "pieces (streamed, read twice)")) << c.spec;
    EXPECT_TRUE(has(p.why, "x and dy read twice")) << c.spec;
  }
  // Fewer SMs hold less: a row held on 132 SMs is streamed on 16.
  EXPECT_EQ(plan_of("op=layernorm shape=2,1000003 dtype=f16").pieces, 1);
  EXPECT_GT(plan_of("op=layernorm shape=2,1000003 dtype=f16", "sm_90:16").pieces, 1);
}

TEST(SplitBackwardPlan, StreamedStepsOfOneVectorInWavesOfRowsPrefetchTwoStepsAhead) {
  // The bf16 seed: one 16-byte vector a thread a piece, waves of 16 rows (parameters), sm_90.
  const KernelPlan seed = plan_of("op=layernorm shape=16,64,256,256 normalized_dims=3 dtype=bf16");
  EXPECT_EQ(seed.prefetch, 2);
  EXPECT_TRUE(has(seed.to_string(), "steps prefetched ahead: 2\n"));
  EXPECT_TRUE(has(seed.why, "2 steps (a row's piece) ahead of its loads towards L2"));
  EXPECT_TRUE(has(emit(seed).source, "  static constexpr int kStepsAhead = 2;"));
  // Not where it was slower or not measured: two vectors a piece (the f32 seed), waves of one
  // row (no parameters), before sm_90, narrower accesses (odd rows), parts held in registers.
  for (const auto& [spec, target] : {
           std::pair{"op=layernorm shape=16,64,256,256 normalized_dims=3", "sm_90"},
           std::pair{"op=layernorm shape=16,64,256,256 normalized_dims=3 dtype=bf16 affine=none",
                     "sm_90"},
           std::pair{"op=layernorm shape=16,64,256,256 normalized_dims=3 dtype=bf16", "sm_80"},
           std::pair{"op=layernorm shape=2,1081345 affine=weight", "sm_90"},
           std::pair{"op=rmsnorm shape=4096,32768 dtype=bf16 affine=weight", "sm_90"},
       }) {
    const KernelPlan p = plan_of(spec, target);
    ASSERT_EQ(p.strategy, Strategy::kRowSplitBackward) << spec << " " << target;
    EXPECT_EQ(p.prefetch, 0) << spec << " " << target;
    EXPECT_FALSE(has(p.why, "ahead of its loads")) << spec << " " << target;
    EXPECT_TRUE(has(emit(p).source, "  static constexpr int kStepsAhead = 0;")) << spec;
  }
}

TEST(SplitBackwardPlan, GridIsWholeSlotsOfPCtas) {
  const KernelPlan p = plan_of("op=rmsnorm shape=4096,16384 normalized_dims=1");
  ASSERT_EQ(p.split_chunks, 4);
  EXPECT_EQ(p.grid(1, 264), 4);
  EXPECT_EQ(p.grid(10, 264), 40);
  EXPECT_EQ(p.grid(4096, 264), 264);
  EXPECT_EQ(p.grid(4096, 266), 264);  // whole slots only
  EXPECT_EQ(p.rows_per_item, 1);
  EXPECT_TRUE(has(p.grid_text(), "4 CTAs per row"));
}

TEST(SplitBackwardPlan, WorkspaceIsTheBarrierThenPerSlotExchangeAndSlices) {
  // Per slot: the exchange (a 32-byte counter, then 2 generations x W rows x P parts x 2 floats,
  // padded to 8) and P slices of the CTAs' partials (kParams x the segment, padded to 8).
  const KernelPlan held = plan_of("op=rmsnorm shape=4096,16384 normalized_dims=1 affine=weight");
  EXPECT_EQ(held.workspace_header_floats(), 8);
  EXPECT_EQ(held.workspace_slot_floats(), 8 + 16 + 4 * 4096);
  EXPECT_EQ(held.workspace_floats(264), 8 + 66 * (8 + 16 + 4 * 4096));
  const KernelPlan seed = plan_of("op=layernorm shape=16,64,256,256 normalized_dims=3");
  EXPECT_EQ(seed.workspace_slot_floats(), 8 + 2 * 16 * 256 * 2 + 256 * 2 * 16384);
  EXPECT_EQ(seed.workspace_floats(264), 8 + seed.workspace_slot_floats());
  // Without parameters, the exchange alone (odd row: 3 parts, 12 floats padded to 16).
  const KernelPlan none = plan_of("op=rmsnorm shape=3,8193 normalized_dims=1 affine=none");
  EXPECT_TRUE(none.cooperative());
  EXPECT_EQ(none.workspace_slot_floats(), 8 + 16);
  EXPECT_EQ(none.workspace_floats(264), 8 + 88 * 24);
}

TEST(SplitBackwardPlan, RowsWhosePartialsOutgrowTheWorkspaceAreUnsupportedNamingTheShape) {
  // 40 M f32 elements with weight and bias: 80 M floats of partials.
  try {
    plan_of("op=layernorm shape=2,40000000");
    ADD_FAILURE() << "planned";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kUnsupported) << e.what();
    EXPECT_TRUE(has(e.what(), "unsupported shape '2,40000000'")) << e.what();
    EXPECT_TRUE(has(e.what(), "rows of 40000000 elements need")) << e.what();
    EXPECT_TRUE(has(e.what(), "more than the 67108864 supported")) << e.what();
  }
  // Without parameters there are no partials: the same rows are planned.
  EXPECT_NO_THROW(plan_of("op=layernorm shape=2,40000000 affine=none"));
}

TEST(SplitBackwardEmit, ConfigurationNamesEveryConstantTheKernelChecks) {
  const EmittedKernel e =
      emit(plan_of("op=layernorm shape=16,64,256,256 normalized_dims=3 dtype=bf16"));
  EXPECT_EQ(e.kernel, "normjit::row_split_backward<normjit::layernorm_bf16_h4194304_backward>");
  EXPECT_EQ(e.name_expression, "&" + e.kernel);
  for (const char* line :
       {"#include \"normjit/row_split_backward.cuh\"", "  using X = normjit::bf16_t;",
        "  using Param = normjit::bf16_t;", "  static constexpr bool kRms = false;",
        "  static constexpr bool kWeight = true;", "  static constexpr bool kBias = true;",
        "  static constexpr float kWeightOffset = 0;",
        "  static constexpr long long kRowLength = 4194304;",
        "  static constexpr int kThreads = 256;", "  static constexpr int kBlocksPerSm = 2;",
        "  static constexpr int kVec = 8;", "  static constexpr int kVectors = 1;",
        "  static constexpr long long kParts = 256;",
        "  static constexpr long long kSegment = 16384;",
        "  static constexpr long long kPieces = 8;", "  static constexpr int kWaveRows = 16;",
        "  static constexpr long long kWorkspaceHeaderFloats = 8;",
        "  static constexpr long long kWorkspaceSlotFloats = 8405000;"}) {
    EXPECT_TRUE(has(e.source, line)) << line << "\n" << e.source;
  }
  // The rows row-backward holds keep their source (and so their cache keys).
  const EmittedKernel short_rows = emit(plan_of("op=layernorm shape=16,8192 dtype=bf16"));
  EXPECT_TRUE(has(short_rows.source, "#include \"normjit/row_backward.cuh\""));
  EXPECT_FALSE(has(short_rows.source, "kParts"));
}

}  // namespace
}  // namespace normjit
