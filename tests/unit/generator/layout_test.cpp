// The layout axis (issue 19 item 2): `layout=nchw|nhwc`, channels innermost for GroupNorm and the
// channel forms. Its text, its default (left out of the canonical text: today's specs and keys are
// unchanged), its validation, and the plans: the channel forms become rows of C through the row
// kernels (N x S rows, the kernel independent of S), GroupNorm has its own kernel.
#include <gtest/gtest.h>

#include <string>

#include "generator/emit.hpp"
#include "generator/plan.hpp"
#include "normjit/error.hpp"
#include "normjit/spec.hpp"

namespace normjit {
namespace {

constexpr size_t npos = std::string::npos;

bool has(const std::string& text, const std::string& word) { return text.find(word) != npos; }

// The message of the Error that parsing `text` throws, with its code checked.
std::string refusal(const std::string& text, ErrorCode code = ErrorCode::kInvalidArgument) {
  try {
    NormSpec::parse(text);
  } catch (const Error& e) {
    EXPECT_EQ(int(e.code()), int(code)) << e.what();
    return e.what();
  }
  ADD_FAILURE() << "accepted: " << text;
  return "";
}

std::string refusal_of_plan(const std::string& text) {
  try {
    plan(NormSpec::parse(text), Target::parse("sm_90"));
  } catch (const Error& e) {
    EXPECT_EQ(int(e.code()), int(ErrorCode::kUnsupported)) << e.what();
    return e.what();
  }
  ADD_FAILURE() << "planned: " << text;
  return "";
}

const Target kH100 = Target::parse("sm_90");

TEST(SpecLayout, DefaultIsNchwAndLeftOutOfTheText) {
  const NormSpec plain = NormSpec::parse("op=groupnorm shape=2,64,8,8 groups=8");
  EXPECT_EQ(plain.layout, Layout::kNchw);
  EXPECT_FALSE(plain.nhwc());
  EXPECT_EQ(plain.to_string(),
            "op=groupnorm shape=2,64,8,8 dtype=f32 groups=8 affine=both eps=1e-05");
  // Given as the default, it is still the same spec and text.
  const NormSpec nchw = NormSpec::parse("op=groupnorm shape=2,64,8,8 groups=8 layout=nchw");
  EXPECT_EQ(nchw, plain);
  EXPECT_EQ(nchw.to_string(), plain.to_string());
  // And so the same kernel source (the cache key's main input).
  EXPECT_EQ(emit(plan(nchw, kH100)).source, emit(plan(plain, kH100)).source);
}

TEST(SpecLayout, NhwcRoundTripsAfterSaveStatsBeforeBackward) {
  for (const char* text :
       {"op=groupnorm shape=2,320,64,64 dtype=f16 groups=32 affine=both eps=1e-05 layout=nhwc",
        "op=rmsnorm shape=8,96,56,56 dtype=bf16 affine=weight eps=1e-06 layout=nhwc",
        "op=layernorm shape=8,768,7,7 dtype=f32 normalized_dims=0 affine=both eps=1e-06 "
        "layout=nhwc",
        "op=groupnorm shape=2,32,5,6,7 dtype=bf16 groups=8 affine=both eps=1e-05 "
        "param_dtype=f32 out_dtype=e4m3 weight_offset=1 save_stats=true layout=nhwc",
        "op=rmsnorm shape=4,3,9 dtype=f32 affine=none eps=1e-05 layout=nhwc"}) {
    const NormSpec spec = NormSpec::parse(text);
    EXPECT_TRUE(spec.nhwc()) << text;
    EXPECT_EQ(spec.to_string(), text);
    EXPECT_EQ(NormSpec::parse(spec.to_string()), spec) << text;
  }
  // Any order in, the canonical order out.
  EXPECT_EQ(
      NormSpec::parse("layout=nhwc save_stats=true op=groupnorm shape=2,64,8 groups=8").to_string(),
      "op=groupnorm shape=2,64,8 dtype=f32 groups=8 affine=both eps=1e-05 save_stats=true "
      "layout=nhwc");
  // The layout is part of the spec's identity.
  EXPECT_NE(NormSpec::parse("op=groupnorm shape=2,64,8 groups=8 layout=nhwc"),
            NormSpec::parse("op=groupnorm shape=2,64,8 groups=8"));
}

TEST(SpecLayout, BadValuesAndTrailingFormsAreRefusedNamingTheArgument) {
  const std::string gn = "op=groupnorm shape=2,64,8,8 groups=8 ";
  std::string e = refusal(gn + "layout=NHWC");
  EXPECT_TRUE(has(e, "invalid layout 'NHWC'") && has(e, "nchw, nhwc")) << e;
  e = refusal(gn + "layout=");
  EXPECT_TRUE(has(e, "invalid layout ''")) << e;
  e = refusal(gn + "layout=nhwc layout=nchw");
  EXPECT_TRUE(has(e, "'layout'") && has(e, "twice")) << e;
  // Trailing forms normalize contiguous trailing dims: no channels to put last.
  e = refusal("op=layernorm shape=2,64,8,8 layout=nhwc");
  EXPECT_TRUE(has(e, "invalid layout 'nhwc'") && has(e, "trailing form of layernorm") &&
              has(e, "normalized_dims 3") && has(e, "normalized_dims 0"))
      << e;
  e = refusal("op=rmsnorm shape=4,4096 normalized_dims=1 layout=nhwc");
  EXPECT_TRUE(has(e, "invalid layout 'nhwc'") && has(e, "rmsnorm")) << e;
  // A residual stays a trailing-form axis.
  e = refusal("op=rmsnorm shape=4,64,8 residual=f32 layout=nhwc");
  EXPECT_TRUE(has(e, "residual")) << e;
  // The keys list names it.
  e = refusal("op=rmsnorm shape=4,64 lay=nhwc");
  EXPECT_TRUE(has(e, "layout")) << e;
  // Channels last, GroupNorm's backward has its own kernel; the channel forms' is the row
  // kernel's.
  EXPECT_TRUE(
      NormSpec::parse("op=groupnorm shape=2,64,8 groups=8 layout=nhwc backward=true").nhwc());
  EXPECT_TRUE(NormSpec::parse("op=layernorm shape=2,64,7,7 normalized_dims=0 layout=nhwc "
                              "backward=true")
                  .nhwc());
}

TEST(SpecLayout, FromFieldsAndValidateOfAStructBuiltByHand) {
  SpecFields f;
  f.op = Op::kRmsNorm;
  f.shape = std::vector<int64_t>{2, 16, 3, 3};
  f.layout = Layout::kNhwc;
  const NormSpec spec = NormSpec::from_fields(f);
  EXPECT_TRUE(spec.nhwc());
  NormSpec bad = spec;
  bad.normalized_dims = 2;
  try {
    bad.validate();
    ADD_FAILURE() << "validated";
  } catch (const Error& e) {
    EXPECT_TRUE(has(e.what(), "invalid layout 'nhwc'")) << e.what();
  }
}

// The channel forms in nhwc: rows of C contiguous elements, N x S of them, through the row
// kernels; the kernel (its source) does not depend on S or N.
TEST(PlanLayout, ChannelFormsAreRowsOfCThroughTheRowKernel) {
  const KernelPlan p =
      plan(NormSpec::parse("op=layernorm shape=8,96,56,56 dtype=bf16 normalized_dims=0 "
                           "layout=nhwc"),
           kH100);
  EXPECT_EQ(p.strategy, Strategy::kRowRegisters);
  EXPECT_FALSE(p.problem.channel_form);
  EXPECT_TRUE(p.problem.nhwc);
  EXPECT_EQ(p.problem.row_length, 96);
  EXPECT_EQ(p.rows_per_item, 56 * 56);
  EXPECT_EQ(p.vec, 8);  // 96 bf16: 16-byte accesses along the channels
  // The grid covers N x S rows.
  EXPECT_EQ(p.grid(8, 0), (8 * 56 * 56 + p.rows_per_block - 1) / p.rows_per_block);
  const std::string text = p.to_string();
  EXPECT_TRUE(has(text, "layout: nhwc") && has(text, "strategy: row-registers") &&
              has(text, "rows of the row kernel"))
      << text;
  // Another spatial size and batch: the same kernel source.
  const KernelPlan other =
      plan(NormSpec::parse("op=layernorm shape=2,96,28,17 dtype=bf16 normalized_dims=0 "
                           "layout=nhwc"),
           kH100);
  EXPECT_EQ(emit(other).source, emit(p).source);
  // ... and not the trailing form's (whose rows take the launch's strides).
  const KernelPlan trailing =
      plan(NormSpec::parse("op=layernorm shape=8,96 dtype=bf16 normalized_dims=1"), kH100);
  EXPECT_NE(emit(trailing).source, emit(p).source);
  const std::string source = emit(p).source;
  EXPECT_TRUE(has(source, "static constexpr bool kContiguousRows = true;")) << source;
  EXPECT_TRUE(has(source, "layernorm_bf16_h96_contiguous")) << source;
  EXPECT_FALSE(has(emit(trailing).source, "kContiguousRows"));
  // nchw stays the channel kernel.
  EXPECT_EQ(
      plan(NormSpec::parse("op=layernorm shape=8,96,56,56 dtype=bf16 normalized_dims=0"), kH100)
          .strategy,
      Strategy::kChannels);
}

// The channel forms with one position per item (S = 1: rmsnorm's default on a 2-D [N, C],
// LayerNorm2d on [N, C, 1, 1]) lie as rows of C in either layout: the forward plans the row
// kernels, as for nhwc, where it planned the channel kernels (the slab, 3x the time of the rows
// on the H200 for [4096, 8192] bf16: docs/performance-notes.md), and the backward the row
// backward kernels, whose source is then the trailing form's.
TEST(PlanLayout, ChannelFormsOfOnePositionAreRowsOfC) {
  const KernelPlan p =
      plan(NormSpec::parse("op=rmsnorm shape=4096,8192 dtype=bf16 affine=weight"), kH100);
  EXPECT_EQ(p.strategy, Strategy::kRowRegisters);
  EXPECT_FALSE(p.problem.channel_form);
  EXPECT_TRUE(p.problem.channel_rows);
  EXPECT_FALSE(p.problem.nhwc);
  EXPECT_EQ(p.problem.row_length, 8192);
  EXPECT_EQ(p.rows_per_item, 1);
  EXPECT_EQ(p.grid(4096, 0), (4096 + p.rows_per_block - 1) / p.rows_per_block);
  const std::string text = p.to_string();
  EXPECT_TRUE(has(text, "layout: nchw") && has(text, "one position per item (S = 1)") &&
              has(text, "rows of the row kernel"))
      << text;
  const std::string source = emit(p).source;
  EXPECT_TRUE(has(source, "static constexpr bool kContiguousRows = true;")) << source;
  EXPECT_TRUE(has(source, "rmsnorm_bf16_h8192_contiguous {")) << source;
  // [N, C, 1, 1] of another N of the same batch class (more than 384 rows; a launch of fewer
  // takes the few-rows kernel, which starts no L2 prefetch of its row), and either layout of it
  // or of any map (nhwc: N x S contiguous rows of C): the same kernel, so one cache entry.
  for (const char* other : {"op=rmsnorm shape=1000,8192,1,1 dtype=bf16 affine=weight",
                            "op=rmsnorm shape=1000,8192,1,1 dtype=bf16 affine=weight layout=nhwc",
                            "op=rmsnorm shape=100,8192,5,3 dtype=bf16 affine=weight layout=nhwc"}) {
    EXPECT_EQ(emit(plan(NormSpec::parse(other), kH100)).source, source) << other;
  }
  // LayerNorm2d on a pooled map, and the few-rows class of its launches.
  const NormSpec pooled =
      NormSpec::parse("op=layernorm shape=2,768,1,1 dtype=f16 normalized_dims=0");
  EXPECT_EQ(plan(pooled, kH100).strategy, Strategy::kRowRegisters);
  EXPECT_EQ(batch_class(pooled), kBatchFewRows);
  const std::vector<NormSpec> classes = batch_class_specs(pooled);
  ASSERT_EQ(classes.size(), 2u);
  EXPECT_EQ(batch_class(classes[1]), kBatchAny);
  EXPECT_TRUE(has_two_batch_classes(pooled));
  // Two positions: the channel kernels still, forward and backward.
  EXPECT_EQ(plan(NormSpec::parse("op=layernorm shape=2,768,2 dtype=f16 normalized_dims=0"), kH100)
                .strategy,
            Strategy::kChannels);
  EXPECT_EQ(plan(NormSpec::parse("op=layernorm shape=2,768,2 dtype=f16 normalized_dims=0 "
                                 "backward=true"),
                 kH100)
                .strategy,
            Strategy::kChannelsBackward);
  // The backward of one position: the row backward kernels, the trailing form's source.
  const KernelPlan backward = plan(
      NormSpec::parse("op=layernorm shape=2,768,1,1 dtype=f16 normalized_dims=0 backward=true"),
      kH100);
  EXPECT_EQ(backward.strategy, Strategy::kRowBackward);
  EXPECT_TRUE(has(backward.to_string(), "differentiated as rows by the row backward kernel"))
      << backward.to_string();
  EXPECT_EQ(emit(backward).source,
            emit(plan(NormSpec::parse(
                          "op=layernorm shape=2,768 dtype=f16 normalized_dims=1 backward=true"),
                      kH100))
                .source);
  EXPECT_EQ(plan(NormSpec::parse("op=rmsnorm shape=2,131072 affine=weight backward=true"), kH100)
                .strategy,
            Strategy::kRowSplitBackward);
}

TEST(PlanLayout, ChannelFormRowsOfOddAndLongChannelCounts) {
  // C = 3: scalar accesses; C = 65536: rows longer than a team, split over CTAs.
  const KernelPlan three =
      plan(NormSpec::parse("op=rmsnorm shape=2,3,7,9 dtype=f16 layout=nhwc"), kH100);
  EXPECT_EQ(three.strategy, Strategy::kRowRegisters);
  EXPECT_EQ(three.vec, 1);
  EXPECT_EQ(three.rows_per_item, 63);
  const KernelPlan wide = plan(
      NormSpec::parse("op=rmsnorm shape=1,65536,2 dtype=f32 affine=weight layout=nhwc"), kH100);
  EXPECT_EQ(wide.strategy, Strategy::kRowSplit);
  EXPECT_EQ(wide.rows_per_item, 2);
}

// The row kernel's few-rows class counts the N x S rows of an nhwc launch.
TEST(PlanLayout, BatchClassCountsPositionsAsRows) {
  const NormSpec few = NormSpec::parse("op=rmsnorm shape=2,64,4,4 affine=weight layout=nhwc");
  EXPECT_EQ(batch_class(few), kBatchFewRows);  // 32 rows
  const NormSpec many = NormSpec::parse("op=rmsnorm shape=2,64,16,32 affine=weight layout=nhwc");
  EXPECT_EQ(batch_class(many), kBatchAny);  // 1024 rows
  // Rows of 64 channels take a team of at most 128 threads: their few-rows class reaches 512.
  EXPECT_EQ(batch_class(NormSpec::parse("op=rmsnorm shape=2,64,16,16 affine=weight layout=nhwc")),
            kBatchFewRows);
  // nchw channel forms have no batch class.
  EXPECT_EQ(batch_class(NormSpec::parse("op=rmsnorm shape=2,64,4,4 affine=weight")), kBatchAny);
  // What precompile compiles: each class a launch of this spec's other dims can take.
  const std::vector<NormSpec> from_few = batch_class_specs(few);
  ASSERT_EQ(from_few.size(), 2u);
  EXPECT_EQ(batch_class(from_few[1]), kBatchAny);
  EXPECT_EQ(from_few[1].shape, (std::vector<int64_t>{33, 64, 4, 4}));
  const std::vector<NormSpec> from_many = batch_class_specs(many);
  ASSERT_EQ(from_many.size(), 2u);
  EXPECT_EQ(batch_class(from_many[1]), kBatchFewRows);
  EXPECT_EQ(from_many[1].shape[0], 1);
  // Positions beyond the few-rows class even at N = 1: one class only.
  EXPECT_EQ(batch_class_specs(NormSpec::parse("op=rmsnorm shape=4,64,32,32 affine=weight "
                                              "layout=nhwc"))
                .size(),
            1u);
}

TEST(PlanLayout, GroupNormHasItsOwnKernelSpecializedOnCGAndS) {
  const KernelPlan p = plan(
      NormSpec::parse("op=groupnorm shape=2,320,64,64 dtype=f16 groups=32 layout=nhwc"), kH100);
  EXPECT_EQ(p.strategy, Strategy::kGroupNhwc);
  EXPECT_EQ(p.vec, 8);
  // A CTA row covers the channels of one position's tile (tiles of 8 groups here).
  EXPECT_EQ(p.block_x * p.vec * p.blocks_per_item, 320);
  EXPECT_LE(p.block_x * p.block_y, 1024);
  EXPECT_EQ(p.pieces, 1);
  // Segments cover S, none empty.
  EXPECT_LT((p.split_chunks - 1) * p.segment, 64 * 64);
  EXPECT_GE(p.split_chunks * p.segment, 64 * 64);
  EXPECT_EQ(p.segment, int64_t{p.block_y} * p.vectors * p.pieces);
  EXPECT_TRUE(p.cooperative());
  EXPECT_EQ(p.workspace_slot_floats(), 4 + 8 * 32 * p.split_chunks);
  // Items over the slots the device holds: one slot of tiles x P CTAs per item here.
  EXPECT_EQ(p.exchange_ctas(), p.blocks_per_item * p.split_chunks);
  EXPECT_EQ(p.grid(2, 132), std::min<int64_t>(132 / p.exchange_ctas(), 2) * p.exchange_ctas());
  EXPECT_EQ(p.workspace_floats(132), 132 / p.exchange_ctas() * p.workspace_slot_floats());
  const std::string text = p.to_string();
  EXPECT_TRUE(has(text, "strategy: group-nhwc") && has(text, "layout: nhwc") &&
              has(text, "x read once") && has(text, "Chan's formula") && has(text, "deterministic"))
      << text;
  const std::string source = emit(p).source;
  for (const char* field :
       {"static constexpr int kChannels = 320;", "static constexpr int kGroups = 32;",
        "static constexpr int kChannelsPerGroup = 10;",
        "static constexpr long long kSpatial = 4096;", "static constexpr int kVec = 8;",
        "static constexpr int kPieces = 1;", "kWorkspaceSlotFloats",
        "normjit::group_nhwc<normjit::groupnorm_f16_c320_g32_s4096_nhwc>",
        "#include \"normjit/group_nhwc.cuh\""}) {
    EXPECT_TRUE(has(source, field)) << field << "\n" << source;
  }
}

// Small maps: a CTA per tile of one group covers every position of an item, N x G CTAs and no
// exchange; where a group's channels allow only 4-byte accesses (C/G = 10 in f16), the exchange
// (in tiles of 8 groups: the test below).
TEST(PlanLayout, GroupNormSmallMapsTakeATileOfOneGroupPerCta) {
  const KernelPlan p =
      plan(NormSpec::parse("op=groupnorm shape=2,1280,8,8 dtype=f16 groups=32 layout=nhwc"), kH100);
  EXPECT_EQ(p.strategy, Strategy::kGroupNhwc);
  EXPECT_EQ(p.blocks_per_item, 32);
  EXPECT_EQ(p.block_x * p.vec, 40);  // a CTA row covers one group's channels
  EXPECT_EQ(p.vec, 8);
  EXPECT_GE(int64_t{p.block_y} * p.vectors, 64);  // every position of the item
  EXPECT_EQ(p.split_chunks, 1);
  EXPECT_FALSE(p.cooperative());
  EXPECT_EQ(p.workspace_floats(132), 0);
  EXPECT_EQ(p.grid(2, 132), 64);
  EXPECT_EQ(p.grid(7, 132), 7 * 32);  // not capped by the CTAs the device holds
  const std::string text = p.to_string();
  EXPECT_TRUE(has(text, "tile of 1 group") && has(text, "no exchange") &&
              has(text, "32 x batch CTAs"))
      << text;
  EXPECT_TRUE(has(emit(p).source, "static constexpr int kTiles = 32;")) << emit(p).source;

  // An item one CTA holds needs no tiles.
  const KernelPlan narrow =
      plan(NormSpec::parse("op=groupnorm shape=2,64,8,8 dtype=f16 groups=32 layout=nhwc"), kH100);
  EXPECT_EQ(narrow.blocks_per_item, 1);  // one CTA holds an item: no tiles needed
  const KernelPlan spanning = plan(
      NormSpec::parse("op=groupnorm shape=2,320,64,64 dtype=f16 groups=32 layout=nhwc"), kH100);
  EXPECT_GT(spanning.split_chunks, 1);
  EXPECT_TRUE(spanning.cooperative());
  // Tiles are whole groups: C/G channels times a divisor of G.
  for (const char* text : {"op=groupnorm shape=2,640,32,32 dtype=f16 groups=32 layout=nhwc",
                           "op=groupnorm shape=40,256,32,32 dtype=bf16 groups=32 layout=nhwc",
                           "op=groupnorm shape=2,1280,16,16 dtype=f32 groups=32 layout=nhwc"}) {
    const NormSpec spec = NormSpec::parse(text);
    const KernelPlan t = plan(spec, kH100);
    ASSERT_GT(t.blocks_per_item, 1) << text;
    EXPECT_EQ(spec.groups % t.blocks_per_item, 0) << text;
    EXPECT_EQ(int64_t{t.block_x} * t.vec * t.blocks_per_item, spec.channels()) << text;
    EXPECT_GE(t.vec * size_of(spec.dtype), 8) << text;
    EXPECT_LE(t.block_x * t.block_y, 1024) << text;
    EXPECT_GE(int64_t{t.block_y} * t.vectors, spec.spatial()) << text;
  }
}

TEST(PlanLayout, GroupNormItemsLargerThanTheChipStreamTwice) {
  // The VAE's f32 [1, 128, 256, 256]: 8 Mi elements per item, more than 132 SMs' registers.
  const KernelPlan f32 = plan(
      NormSpec::parse("op=groupnorm shape=1,128,256,256 dtype=f32 groups=32 layout=nhwc"), kH100);
  EXPECT_EQ(f32.strategy, Strategy::kGroupNhwc);
  EXPECT_GT(f32.pieces, 1);
  EXPECT_LE(f32.split_chunks, 132);
  EXPECT_TRUE(has(f32.to_string(), "read twice")) << f32.to_string();
  // In bf16 it fits (16-bit pairs held packed): read once.
  const KernelPlan bf16 = plan(
      NormSpec::parse("op=groupnorm shape=1,128,256,256 dtype=bf16 groups=32 layout=nhwc"), kH100);
  EXPECT_EQ(bf16.pieces, 1);
  EXPECT_LE(bf16.split_chunks, 132);
  // C/G = 4 channels: 8-byte vectors, each within one group.
  EXPECT_EQ(bf16.vec, 4);
}

// Threads that hold 5 or more positions keep the last 2 in dynamic shared memory (their
// registers spill otherwise); 4 or fewer, all in registers.
TEST(PlanLayout, GroupNormManyHeldPositionsPutTwoInSharedMemory) {
  const KernelPlan vae = plan(
      NormSpec::parse("op=groupnorm shape=1,512,128,128 dtype=f16 groups=32 layout=nhwc"), kH100);
  EXPECT_EQ(vae.pieces, 1);
  EXPECT_GE(vae.vectors, 5);
  EXPECT_EQ(vae.nhwc_aside, 2);
  // 2 positions x the CTA's threads x one 16-byte vector (8 f16 channels).
  EXPECT_EQ(vae.vec, 8);
  EXPECT_EQ(vae.smem_bytes, 2 * vae.block_x * vae.block_y * 16);
  EXPECT_TRUE(has(vae.to_string(), "2 of a thread's " + std::to_string(vae.vectors) +
                                       " positions held in shared memory"))
      << vae.to_string();
  const std::string source = emit(vae).source;
  EXPECT_TRUE(has(source, "static constexpr int kAside = 2;") &&
              has(source, "static constexpr long long kDynamicSmemBytes = " +
                              std::to_string(vae.smem_bytes) + ";"))
      << source;

  const KernelPlan few = plan(
      NormSpec::parse("op=groupnorm shape=1,512,64,64 dtype=f16 groups=32 layout=nhwc"), kH100);
  EXPECT_LT(few.vectors, 5);
  EXPECT_EQ(few.nhwc_aside, 0);
  EXPECT_EQ(few.smem_bytes, 0);
  EXPECT_TRUE(has(emit(few).source, "static constexpr int kAside = 0;"));
  // Not on a part of 64 KiB of shared memory an SM (beside the kernel's static 32 KiB), where
  // a part of 100 KiB takes it.
  const NormSpec mid =
      NormSpec::parse("op=groupnorm shape=1,512,96,96 dtype=f16 groups=32 layout=nhwc");
  const KernelPlan t4 = plan(mid, Target::parse("sm_75"));
  EXPECT_EQ(t4.pieces, 1);
  EXPECT_GE(t4.vectors, 5);
  EXPECT_EQ(t4.nhwc_aside, 0);
  EXPECT_EQ(t4.smem_bytes, 0);
  const KernelPlan a40 = plan(mid, Target::parse("sm_86"));
  EXPECT_GE(a40.vectors, 5);
  EXPECT_EQ(a40.nhwc_aside, 2);
  // f32 x is not (the rule was measured and tested on 16-bit x).
  const KernelPlan f32 = plan(
      NormSpec::parse("op=groupnorm shape=2,1280,32,32 dtype=f32 groups=32 layout=nhwc"), kH100);
  EXPECT_EQ(f32.pieces, 1);
  EXPECT_GE(f32.vectors, 5);
  EXPECT_EQ(f32.nhwc_aside, 0);
  // Vectors of 8 bytes (C/G = 4 bf16 channels) are not put aside, however many a thread holds.
  const KernelPlan narrow = plan(
      NormSpec::parse("op=groupnorm shape=1,128,256,256 dtype=bf16 groups=32 layout=nhwc"), kH100);
  EXPECT_GE(narrow.vectors, 5);
  EXPECT_EQ(narrow.nhwc_aside, 0);
}

TEST(PlanLayout, GroupNormSmallItemsNeedNoExchange) {
  const KernelPlan p =
      plan(NormSpec::parse("op=groupnorm shape=2,32,3,5,7 groups=8 layout=nhwc"), kH100);
  EXPECT_EQ(p.split_chunks, 1);
  EXPECT_FALSE(p.cooperative());
  EXPECT_EQ(p.workspace_slot_floats(), 0);
  EXPECT_EQ(p.grid(5, 0), 5);
  EXPECT_TRUE(has(p.to_string(), "no exchange")) << p.to_string();
  // C not a multiple of any vector: scalar accesses, vectors of one channel.
  const KernelPlan odd =
      plan(NormSpec::parse("op=groupnorm shape=2,65,7,9 groups=5 dtype=bf16 layout=nhwc"), kH100);
  EXPECT_EQ(odd.vec, 1);
  EXPECT_EQ(odd.block_x, 65);
  // C = 96, G = 3: 32 channels per group, 16-byte bf16 vectors.
  const KernelPlan three =
      plan(NormSpec::parse("op=groupnorm shape=2,96,7,9 groups=3 dtype=bf16 layout=nhwc"), kH100);
  EXPECT_EQ(three.vec, 8);
  // A CTA of at least a warp even for 3 channels and one position.
  const KernelPlan tiny =
      plan(NormSpec::parse("op=groupnorm shape=4,3,1,1 groups=3 layout=nhwc"), kH100);
  EXPECT_GE(tiny.block_x * tiny.block_y, 32);
  EXPECT_EQ(tiny.block_x, 3);
}

TEST(PlanLayout, GroupNormRefusesChannelsOneCtaRowCannotCover) {
  // 4099 odd channels: scalar accesses, more than 1024 of them per position.
  const std::string e =
      refusal_of_plan("op=groupnorm shape=1,4099,2,2 groups=1 dtype=f32 layout=nhwc");
  EXPECT_TRUE(has(e, "unsupported shape") && has(e, "4099") && has(e, "layout=nhwc")) << e;
}

TEST(PlanLayout, GroupNormSpanningVectorsAreNamedInThePlan) {
  // C/G = 10 with 16-byte f16 vectors of 8: a vector may span two groups.
  const KernelPlan p = plan(
      NormSpec::parse("op=groupnorm shape=2,320,64,64 dtype=bf16 groups=32 layout=nhwc"), kH100);
  EXPECT_EQ(p.vec, 8);
  EXPECT_TRUE(has(p.why, "span groups")) << p.why;
}

// Channels last, an item split over CTAs: segments as small as let two items share one wave
// (at most 66 CTAs an item on the H100), of at least 16 KiB of x each. (Groups a multiple of 8
// take tiles of 8 groups instead: the test below; 1280 channels of 8x8 take tiles of one group
// and no exchange: the test above.)
TEST(PlanLayout, GroupNormNhwcSegmentsLetTwoItemsShareAWave) {
  const auto at = [](const std::string& spec) { return plan(NormSpec::parse(spec), kH100); };
  const KernelPlan unet = at("op=groupnorm shape=2,320,64,64 dtype=f16 groups=20 layout=nhwc");
  EXPECT_EQ(unet.pieces, 1);
  EXPECT_EQ(unet.blocks_per_item, 1);
  EXPECT_EQ(unet.split_chunks, 66);  // 4096 positions: 63 a CTA
  EXPECT_EQ(unet.segment, 63);
  EXPECT_EQ(unet.segment, int64_t{unet.block_y} * unet.vectors);
  // Larger than two items per wave allow in registers: the item alone fills the wave.
  const KernelPlan large = at("op=groupnorm shape=1,512,128,128 dtype=f16 groups=1 layout=nhwc");
  EXPECT_EQ(large.pieces, 1);
  EXPECT_EQ(large.blocks_per_item, 1);
  EXPECT_GT(large.split_chunks, 66);
  EXPECT_LE(large.split_chunks, 132);
}

// Channels last, an item that the exchange splits (x in registers) and whose groups are a
// multiple of 8 (at least two tiles): the channels are cut into tiles of 8 groups, each split
// over its own CTAs, the item's tiles x chunks in one slot of co-resident CTAs.
TEST(PlanLayout, GroupNormNhwcExchangedItemsAreCutIntoTilesOfEightGroups) {
  const auto at = [](const std::string& spec) { return plan(NormSpec::parse(spec), kH100); };
  // The SD VAE's f16 [1, 512, 128, 128]: 4 tiles of 128 channels, 16 threads of 16 bytes.
  const KernelPlan vae = at("op=groupnorm shape=1,512,128,128 dtype=f16 groups=32 layout=nhwc");
  EXPECT_EQ(vae.blocks_per_item, 4);
  EXPECT_EQ(vae.vec, 8);
  EXPECT_EQ(vae.block_x, 16);
  EXPECT_EQ(vae.pieces, 1);
  EXPECT_GT(vae.split_chunks, 1);
  EXPECT_LT((vae.split_chunks - 1) * vae.segment, 128 * 128);
  EXPECT_GE(vae.split_chunks * vae.segment, 128 * 128);
  EXPECT_EQ(vae.segment, int64_t{vae.block_y} * vae.vectors);
  EXPECT_TRUE(vae.cooperative());
  EXPECT_EQ(vae.exchange_ctas(), 4 * vae.split_chunks);
  EXPECT_LE(vae.exchange_ctas(), 132);
  // Its exchange still lays out all G groups of the P chunks: each tile writes its own.
  EXPECT_EQ(vae.workspace_slot_floats(), 4 + 8 * 32 * vae.split_chunks);
  const int64_t slots = 132 / vae.exchange_ctas();
  EXPECT_EQ(vae.grid(3, 132), std::min<int64_t>(slots, 3) * vae.exchange_ctas());
  EXPECT_EQ(vae.workspace_floats(132), slots * vae.workspace_slot_floats());
  const std::string text = vae.to_string();
  EXPECT_TRUE(
      has(text, "tile of 8 groups (128 channels") &&
      has(text, "split over " + std::to_string(vae.split_chunks) + " CTAs a tile") &&
      has(text, "4 tiles of groups x " + std::to_string(vae.split_chunks) + " CTAs per item") &&
      has(text, "Chan's formula"))
      << text;
  const std::string source = emit(vae).source;
  for (const std::string& field :
       {std::string("static constexpr int kTiles = 4;"),
        "static constexpr long long kChunks = " + std::to_string(vae.split_chunks) + ";"}) {
    EXPECT_TRUE(has(source, field)) << field << "\n" << source;
  }
  // 16 groups: two tiles (20 channels a group: 8-byte vectors within a group).
  const KernelPlan two = at("op=groupnorm shape=2,320,64,64 dtype=f16 groups=16 layout=nhwc");
  EXPECT_EQ(two.blocks_per_item, 2);
  EXPECT_EQ(int64_t{two.block_x} * two.vec, 160);
  EXPECT_GT(two.split_chunks, 1);
  // Two items share a wave where their tiles' CTAs allow, as the untiled item's.
  EXPECT_LE(two.exchange_ctas() * 2, 132);
  // Not for 8 groups (one tile), nor groups that 8 does not divide.
  for (const char* text : {"op=groupnorm shape=1,512,128,128 dtype=f16 groups=8 layout=nhwc",
                           "op=groupnorm shape=1,480,128,128 dtype=f16 groups=12 layout=nhwc",
                           "op=groupnorm shape=1,512,128,128 dtype=bf16 groups=1 layout=nhwc"}) {
    const KernelPlan p = at(text);
    EXPECT_EQ(p.blocks_per_item, 1) << text;
    EXPECT_GT(p.split_chunks, 1) << text;
    EXPECT_EQ(p.exchange_ctas(), p.split_chunks) << text;
  }
  // Items larger than the chip holds stream their segments over all channels, untiled.
  const KernelPlan streamed =
      at("op=groupnorm shape=1,256,512,512 dtype=f16 groups=32 layout=nhwc");
  EXPECT_GT(streamed.pieces, 1);
  EXPECT_EQ(streamed.blocks_per_item, 1);
}

// Channels-last GroupNorm's backward (group_nhwc_backward.cuh): a CTA covers every channel of
// its positions (TX vectors of V channels, TX * V == C), units of TY * K positions of an item
// that T cover S, items in waves within L2, a workspace laid out as the template checks; its own
// kernel and source, not the channels-first one's.
TEST(PlanLayout, GroupNormNhwcBackwardCoversEveryChannelOfAUnitOfPositions) {
  struct Case {
    const char* spec;
    int vec;
    int tx, ty;
  };
  const Case cases[] = {
      {"op=groupnorm shape=2,320,64,64 dtype=bf16 groups=32", 8, 40, 6},
      {"op=groupnorm shape=2,320,64,64 dtype=f32 groups=32 affine=none", 4, 80, 3},
      {"op=groupnorm shape=1,128,512,512 dtype=f16 groups=32", 8, 16, 16},
      {"op=groupnorm shape=2,1280,8,8 dtype=f16 groups=32 param_dtype=f32", 8, 160, 1},
      {"op=groupnorm shape=2,4096,4,4 dtype=bf16 groups=32", 8, 512, 1},
      {"op=groupnorm shape=4,96,7,9 dtype=bf16 groups=3", 8, 12, 21},
      // Odd channel counts take scalar accesses; a CTA has at least a warp.
      {"op=groupnorm shape=3,3,7 groups=3", 1, 3, 11},
      {"op=groupnorm shape=1,1,1 groups=1 affine=weight", 1, 1, 32},
  };
  for (const Case& c : cases) {
    const NormSpec spec = NormSpec::parse(std::string(c.spec) + " layout=nhwc backward=true");
    const KernelPlan p = plan(spec, kH100);
    const int64_t channels = spec.channels(), s = spec.spatial(), groups = spec.groups;
    EXPECT_EQ(p.strategy, Strategy::kGroupNhwcBackward) << c.spec;
    EXPECT_TRUE(p.cooperative()) << c.spec;
    EXPECT_EQ(p.vec, c.vec) << c.spec;
    EXPECT_EQ(p.block_x, c.tx) << c.spec;
    EXPECT_EQ(p.block_y, c.ty) << c.spec;
    EXPECT_EQ(int64_t{p.block_x} * p.vec, channels) << c.spec;
    EXPECT_GE(p.block_x * p.block_y, 32) << c.spec;
    EXPECT_LE(p.block_x * p.block_y, 1024) << c.spec;
    // T units of TY * K positions cover an item, none empty.
    const int64_t unit = int64_t{p.block_y} * p.vectors;
    EXPECT_GE(p.units_per_channel * unit, s) << c.spec;
    EXPECT_LT((p.units_per_channel - 1) * unit, s) << c.spec;
    // A wave's x and dy within L2's 16 MiB (f32: 24), or one item.
    const int64_t item_bytes = 2 * channels * s * size_of(spec.dtype);
    EXPECT_GE(p.wave_rows, 1) << c.spec;
    if (p.wave_rows > 1) {
      EXPECT_LE(p.wave_rows * item_bytes, int64_t{24} << 20) << c.spec;
    }
    // The workspace: the barrier's counter, the units' group partials, with parameters their
    // channel partials, the wave's group means, with parameters the channels' accumulators.
    const bool params = spec.affine != Affine::kNone;
    const auto padded = [](int64_t floats) { return (floats + 7) / 8 * 8; };
    const int64_t r = p.wave_rows, t = p.units_per_channel;
    EXPECT_EQ(p.workspace_floats(0),
              8 + padded(r * groups * t * 2) + (params ? padded(r * channels * t * 2) : 0) +
                  padded(r * groups * 2) + (params ? padded(channels * 2) : 0))
        << c.spec;
    EXPECT_EQ(p.workspace_floats(0), p.workspace_floats(1000)) << c.spec;  // any grid
    EXPECT_LE(p.workspace_floats(0), int64_t{5} << 20) << c.spec;
    // Launch bounds that leave each thread 128 registers.
    const int64_t warps = (int64_t{p.block_x} * p.block_y + 31) / 32;
    EXPECT_EQ(p.min_blocks_per_sm, std::max<int64_t>(1, 65536 / (128 * warps * 32))) << c.spec;
    // A wave's units, at most the CTAs the device holds; a batch smaller than a wave, its own.
    EXPECT_EQ(p.grid(1, 100000), t) << c.spec;
    EXPECT_EQ(p.grid(1000000, 7), 7) << c.spec;
    const std::string text = p.to_string();
    EXPECT_TRUE(has(text, "strategy: group-nhwc-backward") && has(text, "layout: nhwc") &&
                has(text, "channels last") && has(text, "read twice"))
        << text;
    EXPECT_EQ(has(text, "dweight and dbias summed per channel over n in order"), params) << text;
    const std::string source = emit(p).source;
    EXPECT_TRUE(has(source, "#include \"normjit/group_nhwc_backward.cuh\"") &&
                has(source, "_nhwc_backward>(normjit::Params)") &&
                has(source, "kUnitsPerItem = " + std::to_string(t) + ";") &&
                has(source, "kWaveItems = " + std::to_string(r) + ";"))
        << source;
    // Not the channels-first kernel's source (nor its cache entry).
    NormSpec nchw = spec;
    nchw.layout = Layout::kNchw;
    EXPECT_NE(emit(plan(nchw, kH100)).source, source) << c.spec;
  }
}

// Its CTA covers a position's channels with a vector a thread: at most 512 vectors; more
// (or shared memory past 48 KiB) is refused at plan time naming the argument, with the way out.
TEST(PlanLayout, GroupNormNhwcBackwardRefusesChannelsOneCtaCannotCover) {
  std::string e = refusal_of_plan(
      "op=groupnorm shape=2,8192,4,4 dtype=bf16 groups=32 layout=nhwc backward=true");
  EXPECT_TRUE(has(e, "channels") && has(e, "8192") && has(e, "512") && has(e, "nchw")) << e;
  e = refusal_of_plan("op=groupnorm shape=2,1030,4,4 groups=2 layout=nhwc backward=true");
  EXPECT_TRUE(has(e, "channels") && has(e, "1030")) << e;
  // The same shapes forward, and channels first, plan.
  EXPECT_NO_THROW(plan(NormSpec::parse("op=groupnorm shape=2,8192,4,4 dtype=bf16 groups=32 "
                                       "layout=nhwc"),
                       kH100));
  EXPECT_NO_THROW(plan(NormSpec::parse("op=groupnorm shape=2,8192,4,4 dtype=bf16 groups=32 "
                                       "backward=true"),
                       kH100));
}

}  // namespace
}  // namespace normjit
