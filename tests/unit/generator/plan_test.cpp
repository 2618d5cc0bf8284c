#include "generator/plan.hpp"

#include <gtest/gtest.h>

#include "generator/emit.hpp"
#include "generator/target.hpp"
#include "normjit/error.hpp"

namespace normjit {
namespace {

TEST(Target, ParsesRealArchitecturesOnly) {
  EXPECT_EQ(Target::parse("sm_90").name(), "sm_90");
  EXPECT_EQ(Target::parse("sm_90a").variant, Target::Variant::kArchSpecific);
  EXPECT_EQ(Target::parse("sm_80").sm, 80);
  EXPECT_THROW(Target::parse("compute_90"), Error);
  EXPECT_THROW(Target::parse("sm_"), Error);
  EXPECT_THROW(Target::parse("sm_9x"), Error);
  EXPECT_THROW(Target::parse("90"), Error);
}

TEST(Target, IsExactlyTheNamedVariantOrRefused) {
  // sm_100f used to be built as sm_100a, and sm_90f (which does not exist) as sm_90a.
  const Target family = Target::parse("sm_100f");
  EXPECT_EQ(family.variant, Target::Variant::kFamilySpecific);
  EXPECT_EQ(family.name(), "sm_100f");
  EXPECT_EQ(family.base_name(), "sm_100");
  EXPECT_EQ(Target::parse("sm_100a").name(), "sm_100a");
  EXPECT_NE(Target::parse("sm_100a"), family);
  EXPECT_EQ(Target::parse("sm_120f:84").text(), "sm_120f:84");
  EXPECT_EQ(Target::parse(family.text()), family);
  EXPECT_EQ(Target::names_of(100), (std::vector<std::string>{"sm_100", "sm_100a", "sm_100f"}));
  EXPECT_EQ(Target::names_of(90), (std::vector<std::string>{"sm_90", "sm_90a"}));
  EXPECT_EQ(Target::names_of(80), (std::vector<std::string>{"sm_80"}));
  for (const char* bad : {"sm_90f", "sm_80a", "sm_86f", "sm_90af", "sm_090", "sm_+90", "sm_90 "}) {
    try {
      Target::parse(bad);
      ADD_FAILURE() << bad << " was accepted";
    } catch (const Error& e) {
      const std::string message = e.what();
      EXPECT_NE(message.find(std::string("'") + bad + "'"), std::string::npos) << message;
    }
  }
  try {
    Target::parse("sm_90f");
  } catch (const Error& e) {
    const std::string message = e.what();
    for (const char* valid : {"sm_90a", "sm_100a", "sm_100f"}) {
      EXPECT_NE(message.find(valid), std::string::npos) << "lists " << valid << ": " << message;
    }
  }
}

TEST(Target, SpellsAMultiprocessorCountAfterAColon) {
  // Offline, a target is the arch's full-size part unless its spelling names a count: the
  // deployment of an H100 PCIe (114 SMs) or a MIG slice prewarms the kernels it will run.
  const Target sxm = Target::parse("sm_90");
  EXPECT_EQ(sxm.sm_count, 132);
  EXPECT_EQ(sxm.text(), "sm_90");
  const Target pcie = Target::parse("sm_90:114");
  EXPECT_EQ(pcie.sm, 90);
  EXPECT_EQ(pcie.sm_count, 114);
  EXPECT_EQ(pcie.name(), "sm_90");  // what NVRTC builds for
  EXPECT_EQ(pcie.text(), "sm_90:114");
  EXPECT_EQ(Target::parse(pcie.text()), pcie);
  EXPECT_EQ(Target::parse("sm_90a:16").text(), "sm_90a:16");
  EXPECT_EQ(Target::parse("sm_90:132"), sxm);  // the full-size count spelled out
  EXPECT_EQ(Target::parse("sm_90:132").text(), "sm_90");
  EXPECT_EQ(Target::parse("sm_80:132").text(), "sm_80:132");
  for (const char* bad :
       {"sm_90:", "sm_90:0", "sm_90:-4", "sm_90:x", "sm_90:1025", ":114", "sm_9x:114"}) {
    EXPECT_THROW(Target::parse(bad), Error) << bad;
  }
}

TEST(Target, SpellsADramBandwidthAfterASecondColon) {
  // The full-size part's DRAM bandwidth unless a second ':' names another (GB/s): an H200 is an
  // sm_90 of 132 SMs with 4.9 TB/s where the H100 SXM has 3.35.
  const Target sxm = Target::parse("sm_90");
  EXPECT_EQ(sxm.dram_gbps, 3352);
  EXPECT_EQ(Target::parse("sm_90:132:3352"), sxm);
  EXPECT_EQ(Target::parse("sm_90:132:3352").text(), "sm_90");
  const Target h200 = Target::parse("sm_90:132:4814");
  EXPECT_EQ(h200.sm_count, 132);
  EXPECT_EQ(h200.dram_gbps, 4814);
  EXPECT_FALSE(h200 == sxm);
  EXPECT_EQ(h200.name(), "sm_90");  // what NVRTC builds for
  EXPECT_EQ(h200.text(), "sm_90:132:4814");
  EXPECT_EQ(Target::parse(h200.text()), h200);
  const Target pcie = Target::parse("sm_90:114:2039");
  EXPECT_EQ(pcie.text(), "sm_90:114:2039");
  EXPECT_EQ(Target::parse("sm_90:114").dram_gbps, 3352);  // a count alone keeps the bandwidth
  EXPECT_EQ(Target::parse("sm_100f").dram_gbps, 8000);
  // An arch the table does not know has no bandwidth (0) and prints none until one is named.
  EXPECT_EQ(Target::parse("sm_75").dram_gbps, 0);
  EXPECT_EQ(Target::parse("sm_75").text(), "sm_75");
  EXPECT_EQ(Target::parse("sm_75:40:320").text(), "sm_75:40:320");
  for (const char* bad : {"sm_90:132:", "sm_90:132:0", "sm_90:132:-1", "sm_90:132:4.9",
                          "sm_90:132:4814:1", "sm_90::4814", "sm_90:132:1000001"}) {
    EXPECT_THROW(Target::parse(bad), Error) << bad;
  }
  try {
    Target::parse("sm_90:132:fast");
    ADD_FAILURE() << "sm_90:132:fast parsed";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("DRAM bandwidth"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("sm_90:132:fast"), std::string::npos) << e.what();
  }
}

TEST(Plan, LongRowsDependOnTheMultiprocessorCountShortOnesDoNot) {
  const NormSpec seed = NormSpec::parse("op=layernorm shape=16,64,256,256 dtype=f32");
  const KernelPlan sxm = plan(seed, Target::parse("sm_90"));
  const KernelPlan pcie = plan(seed, Target::parse("sm_90:114"));
  EXPECT_EQ(sxm.strategy, Strategy::kRowSplit);
  EXPECT_EQ(sxm.split_chunks, 128);
  // 128 chunks of the seed's row do not fit 114 SMs at once.
  EXPECT_NE(pcie.strategy, Strategy::kRowSplit);
  EXPECT_NE(emit(sxm).source, emit(pcie).source);
  const NormSpec rows =
      NormSpec::parse("op=layernorm shape=4096,4096 normalized_dims=1 dtype=bf16");
  EXPECT_EQ(emit(plan(rows, Target::parse("sm_90"))).source,
            emit(plan(rows, Target::parse("sm_90:114"))).source);
  const NormSpec channels = NormSpec::parse("op=rmsnorm shape=112,64,512,512 dtype=bf16");
  EXPECT_EQ(emit(plan(channels, Target::parse("sm_90"))).source,
            emit(plan(channels, Target::parse("sm_90:16"))).source);
}

TEST(Plan, ChannelFormUsesSixteenByteAccessesWhenTheSpatialSizeAllows) {
  const Target t = Target::parse("sm_90");
  const KernelPlan f32 = plan(NormSpec::parse("op=rmsnorm shape=112,64,512,512 dtype=f32"), t);
  EXPECT_EQ(f32.strategy, Strategy::kChannels);
  EXPECT_EQ(f32.vec, 4);
  const KernelPlan bf16 = plan(NormSpec::parse("op=rmsnorm shape=112,64,512,512 dtype=bf16"), t);
  EXPECT_EQ(bf16.vec, 8);
  // An odd spatial size cannot keep rows aligned: scalar accesses.
  EXPECT_EQ(plan(NormSpec::parse("op=rmsnorm shape=3,7,5,3"), t).vec, 1);
  EXPECT_EQ(plan(NormSpec::parse("op=rmsnorm shape=3,7,6"), t).vec, 2);
}

TEST(Plan, LayerNormChannelFormIsTheChannelKernelWithAMeanAndABias) {
  const Target t = Target::parse("sm_90");
  // ConvNeXt's LayerNorm2d: [N, 96, 56, 56], weight and bias [96].
  const NormSpec spec = NormSpec::parse("op=layernorm shape=2,96,56,56 normalized_dims=0");
  const KernelPlan p = plan(spec, t);
  EXPECT_EQ(p.strategy, Strategy::kChannels);
  EXPECT_TRUE(p.problem.channel_form);
  EXPECT_EQ(p.problem.channels, 96);
  EXPECT_EQ(p.problem.spatial, 56 * 56);
  EXPECT_TRUE(p.problem.weight);
  EXPECT_TRUE(p.problem.bias);
  EXPECT_EQ(p.vec, 4);
  EXPECT_TRUE(p.cached);
  // The same tiling as rmsnorm's channel form of that shape: only the statistics differ.
  const KernelPlan rms = plan(NormSpec::parse("op=rmsnorm shape=2,96,56,56 affine=weight"), t);
  EXPECT_EQ(p.block_x, rms.block_x);
  EXPECT_EQ(p.block_y, rms.block_y);
  EXPECT_EQ(p.blocks_per_item, rms.blocks_per_item);
  const EmittedKernel e = emit(p);
  EXPECT_EQ(e.name_expression, "&normjit::channels_norm<normjit::layernorm_f32_c96_s3136>");
  for (const char* field : {"kRms = false;", "kBias = true;", "kWeight = true;", "kChannels = 96;",
                            "kSpatial = 3136;", "kCached = true;"}) {
    EXPECT_NE(e.source.find(field), std::string::npos) << field << "\n" << e.source;
  }
  // Too many channels for registers: read twice (the shifted one-pass statistics).
  const KernelPlan wide = plan(NormSpec::parse("op=layernorm shape=1,4099,4 normalized_dims=0"), t);
  EXPECT_EQ(wide.strategy, Strategy::kChannels);
  EXPECT_FALSE(wide.cached);
  // Saved statistics: mean and rstd.
  const KernelPlan stats =
      plan(NormSpec::parse(
               "op=layernorm shape=1,256,64,64 dtype=bf16 normalized_dims=0 save_stats=true"),
           t);
  EXPECT_NE(stats.why.find("mean and rstd saved"), std::string::npos) << stats.why;
  EXPECT_NE(emit(stats).source.find("kSaveStats = true;"), std::string::npos);
  // The trailing form of the same shape is still a row kernel.
  EXPECT_NE(plan(NormSpec::parse("op=layernorm shape=2,96,56,56"), t).strategy,
            Strategy::kChannels);
}

TEST(Plan, TheBatchIsNotPartOfTheKernel) {
  const Target t = Target::parse("sm_90");
  const KernelPlan a = plan(NormSpec::parse("op=rmsnorm shape=1,64,32,32"), t);
  const KernelPlan b = plan(NormSpec::parse("op=rmsnorm shape=112,64,32,32"), t);
  EXPECT_EQ(emit(a).source, emit(b).source);
  EXPECT_EQ(emit(a).name_expression, emit(b).name_expression);
  const KernelPlan c = plan(NormSpec::parse("op=rmsnorm shape=1,64,32,33"), t);
  EXPECT_NE(emit(a).source, emit(c).source);
}

TEST(Plan, EveryThreadKeepsABoundedNumberOfValues) {
  const Target t = Target::parse("sm_90");
  for (int64_t c : {1, 3, 7, 64, 65, 1000, 4099}) {
    const NormSpec spec = NormSpec::parse("op=rmsnorm shape=2," + std::to_string(c) + ",16,16");
    const KernelPlan p = plan(spec, t);
    EXPECT_LE(p.block_x * p.block_y, 1024) << spec.to_string();
    // 32 positions per CTA, or 16 of 32 threads each where that keeps vectors (512 threads).
    if (p.block_y == 32 && p.vec > 1) {
      EXPECT_EQ(p.block_x, 16) << spec.to_string();
    } else {
      EXPECT_GE(p.block_x, 32) << spec.to_string();
    }
    EXPECT_EQ(p.blocks_per_item, (256 + p.block_x * p.vec - 1) / (p.block_x * p.vec));
  }
  // The channels are split so a thread keeps 32 values where 32 threads can share a position
  // (a smaller unrolled kernel, faster to compile), and up to 64 before x is read twice.
  const auto per_thread = [&](const std::string& spec) {
    const KernelPlan p = plan(NormSpec::parse(spec), t);
    const int64_t channels = NormSpec::parse(spec).channels();
    return (channels + p.block_y - 1) / p.block_y * p.vec;
  };
  const auto cached = [&](const std::string& spec) {
    return plan(NormSpec::parse(spec), t).cached;
  };
  EXPECT_EQ(per_thread("op=rmsnorm shape=112,64,512,512"), 32);
  EXPECT_EQ(per_thread("op=rmsnorm shape=112,64,512,512 dtype=bf16"), 32);
  EXPECT_EQ(per_thread("op=rmsnorm shape=2,512,64,64"), 64);
  EXPECT_TRUE(cached("op=rmsnorm shape=2,512,64,64"));
  EXPECT_TRUE(cached("op=rmsnorm shape=2,256,64,64 dtype=bf16"));
  EXPECT_FALSE(cached("op=rmsnorm shape=2,4096,64,64"));
  EXPECT_FALSE(cached("op=rmsnorm shape=2,1024,64,64 dtype=bf16"));
  // f32 with C 1024: 8-byte vectors keep 64 values a thread in registers where 16-byte ones
  // would need 128 (read twice); never narrower than 8 bytes (bf16 keeps 16, read twice).
  const KernelPlan narrow = plan(NormSpec::parse("op=rmsnorm shape=32,1024,14,14"), t);
  EXPECT_EQ(narrow.vec, 2);
  EXPECT_TRUE(narrow.cached);
  EXPECT_EQ(per_thread("op=rmsnorm shape=32,1024,14,14"), 64);
  EXPECT_EQ(plan(NormSpec::parse("op=rmsnorm shape=2,1024,64,64 dtype=bf16"), t).vec, 8);
  EXPECT_EQ(plan(NormSpec::parse("op=rmsnorm shape=32,1024,14,14 dtype=bf16"), t).vec, 4);
  EXPECT_EQ(plan(NormSpec::parse("op=rmsnorm shape=2,2048,64,64"), t).vec, 4);  // 2: 128 values
  // 64 cached values a thread: 512 threads a CTA (128 registers each, where 1024 threads leave
  // 64, fewer than the values), and the same values in registers.
  const KernelPlan wide = plan(NormSpec::parse("op=layernorm shape=32,256,28,28 dtype=bf16 "
                                               "normalized_dims=0"),
                               t);
  EXPECT_EQ(wide.block_x * wide.block_y, 512);
  EXPECT_TRUE(wide.cached);
  EXPECT_EQ(wide.blocks_per_item, 7);  // 784 positions in vectors of 8: 98 over 16 threads
  // Scalar accesses (a 7x7 map; before sm_90, which takes the slab kernel there) keep 32
  // positions per CTA while a thread holds at most 32 values; more (C 2048: 64 values, or read
  // twice) would spill at 1024 threads: 16 positions.
  const Target sm80 = Target::parse("sm_80");
  EXPECT_EQ(plan(NormSpec::parse("op=layernorm shape=32,768,7,7 normalized_dims=0"), sm80).block_x,
            32);
  EXPECT_EQ(plan(NormSpec::parse("op=rmsnorm shape=32,1024,7,7 dtype=bf16"), sm80).block_x, 32);
  for (const char* spec :
       {"op=rmsnorm shape=32,2048,7,7 dtype=bf16",
        "op=layernorm shape=8,1536,7,7 normalized_dims=0", "op=rmsnorm shape=2,4096,9,9"}) {
    const KernelPlan p = plan(NormSpec::parse(spec), sm80);
    EXPECT_EQ(p.block_x, 16) << spec;
    EXPECT_EQ(p.block_y, 32) << spec;
    EXPECT_EQ(p.blocks_per_item, (NormSpec::parse(spec).spatial() + 15) / 16) << spec;
  }
  EXPECT_TRUE(plan(NormSpec::parse("op=rmsnorm shape=32,2048,7,7 dtype=bf16"), sm80).cached);
  EXPECT_FALSE(plan(NormSpec::parse("op=rmsnorm shape=2,4096,9,9"), sm80).cached);
}

TEST(Plan, SmallOddMapsOnSm90TakeTheSlabKernelOverAClusterOfCtas) {
  const Target sm90 = Target::parse("sm_90");
  // RMSNorm C 2048 on 7x7, bf16: 200704 bytes an item, 8 CTAs of 256 channels (25088 bytes).
  const KernelPlan p = plan(NormSpec::parse("op=rmsnorm shape=32,2048,7,7 dtype=bf16"), sm90);
  EXPECT_EQ(p.strategy, Strategy::kChannelsSlab);
  EXPECT_EQ(p.blocks_per_item, 8);
  EXPECT_EQ(p.grid(32, 0), 256);
  EXPECT_EQ(p.vec, 8);                // 16-byte vectors of x: x and y must be 16-byte aligned
  EXPECT_EQ(p.sums_per_position, 5);  // 256 threads over 49 positions
  // The slab, then f32: 2 x 256 factors, 5 x 49 partials, five arrays of 49 (slab_smem_bytes).
  EXPECT_EQ(p.smem_bytes, 256 * 49 * 2 + 4 * (2 * 256 + 5 * 49 + 5 * 49));
  // RMSNorm stores y in 16-byte vectors along the slab; LayerNorm an element at a time from the
  // sums' layout (x still 16-byte aligned: the bulk copy).
  EXPECT_EQ(p.slab_store_vec, 8);
  const KernelPlan ln =
      plan(NormSpec::parse("op=layernorm shape=32,768,7,7 normalized_dims=0 dtype=bf16"), sm90);
  EXPECT_EQ(ln.strategy, Strategy::kChannelsSlab);
  EXPECT_EQ(ln.slab_store_vec, 1);
  EXPECT_EQ(ln.vec, 8);
  // LayerNorm's threads hold their values of the slab in registers: ceil(96 channels / 5 a
  // position); RMSNorm's vectors read the slab.
  EXPECT_EQ(ln.slab_held, 20);
  EXPECT_EQ(p.slab_held, 0);
  // 3x3 maps: 28 threads a position, ceil(512 / 28) values each.
  EXPECT_EQ(
      plan(NormSpec::parse("op=layernorm shape=4,4096,3,3 normalized_dims=0 dtype=bf16"), sm90)
          .slab_held,
      19);
  // More than 64 values a thread stay in shared memory: f32 C 3200 on 7x7, 8 CTAs of 400
  // channels (78400-byte slabs), 5 threads a position: 80 values each.
  const KernelPlan wide =
      plan(NormSpec::parse("op=layernorm shape=2,3200,7,7 normalized_dims=0"), sm90);
  EXPECT_EQ(wide.strategy, Strategy::kChannelsSlab);
  EXPECT_EQ(wide.blocks_per_item, 8);
  EXPECT_EQ(wide.slab_held, 0);
  // The smallest cluster whose slabs are at most 16 KiB, else the largest that divides C.
  EXPECT_EQ(plan(NormSpec::parse("op=layernorm shape=8,96,7,7 normalized_dims=0 dtype=bf16"), sm90)
                .blocks_per_item,
            1);  // 9408 bytes
  EXPECT_EQ(
      plan(NormSpec::parse("op=layernorm shape=8,96,7,7 normalized_dims=0"), sm90).blocks_per_item,
      2);  // 18816 bytes: two slabs of 9408
  // 64800 bytes: slabs of a quarter (16200 bytes) are not whole 16-byte vectors; two of 32400.
  EXPECT_EQ(plan(NormSpec::parse("op=rmsnorm shape=8,200,9,9"), sm90).blocks_per_item, 2);
  // Where it does not apply: before sm_90, vector accesses (14x14), slabs that are not whole
  // 16-byte vectors (C 3 of f32 on 7x7: 588 bytes), maps over 256 positions, backward,
  // channels last, and items whose slabs stay over 96 KiB (C 32768 of f32 on 7x7).
  for (const auto& [spec, target] : std::vector<std::pair<std::string, std::string>>{
           {"op=rmsnorm shape=32,2048,7,7 dtype=bf16", "sm_80"},
           {"op=rmsnorm shape=32,2048,14,14 dtype=bf16", "sm_90"},
           {"op=rmsnorm shape=2,3,7,7", "sm_90"},
           {"op=rmsnorm shape=2,64,17,17", "sm_90"},
           {"op=rmsnorm shape=2,32768,7,7", "sm_90"},
       }) {
    EXPECT_EQ(plan(NormSpec::parse(spec), Target::parse(target)).strategy, Strategy::kChannels)
        << spec << " on " << target;
  }
  EXPECT_EQ(plan(NormSpec::parse("op=rmsnorm shape=32,2048,7,7 backward=true"), sm90).strategy,
            Strategy::kChannelsBackward);
  EXPECT_NE(
      plan(NormSpec::parse("op=layernorm shape=8,768,7,7 normalized_dims=0 layout=nhwc"), sm90)
          .strategy,
      Strategy::kChannelsSlab);
  // The emitted configuration names the constants the kernel checks against its own layout.
  const std::string source = emit(p).source;
  for (const char* line : {"static constexpr int kCluster = 8;", "static constexpr int kVec = 8;",
                           "static constexpr int kGroups = 5;",
                           "static constexpr long long kDynamicSmemBytes = 29096;"}) {
    EXPECT_NE(source.find(line), std::string::npos) << line;
  }
  EXPECT_NE(source.find("#include \"normjit/channels_slab.cuh\""), std::string::npos);
}

TEST(Emit, IsDeterministicAndInstantiatesTheTemplateWithOneNamedConfiguration) {
  const KernelPlan p =
      plan(NormSpec::parse("op=rmsnorm shape=8,64,32,32 dtype=f16"), Target::parse("sm_80"));
  const EmittedKernel a = emit(p), b = emit(p);
  EXPECT_EQ(a.source, b.source);
  EXPECT_EQ(a.name_expression, "&normjit::channels_norm<normjit::rmsnorm_f16_c64_s1024>");
  EXPECT_EQ(a.kernel, a.name_expression.substr(1));
  EXPECT_NE(a.source.find("#include \"normjit/channels_norm.cuh\""), std::string::npos);
  // Every decision of the plan is a named constant of the configuration.
  for (const char* field : {"using X = normjit::half_t;", "using Y = normjit::half_t;",
                            "kRms = true;", "kBias = false;", "kChannels = 64;", "kSpatial = 1024;",
                            "kThreadsX = 32;", "kThreadsY = 16;", "kVec = 8;", "kWeight = false;",
                            "kCached = true;", "kBlocksPerItem = 4;"}) {
    EXPECT_NE(a.source.find(field), std::string::npos) << field << "\n" << a.source;
  }
}

// A variant changes the configuration's constants and its name, never the batch-free identity
// of the plain kernel: the defaults emit today's source.
TEST(Emit, VariantsAreNamedConstantsOfTheConfiguration) {
  const Target t = Target::parse("sm_90");
  NormSpec spec =
      NormSpec::parse("op=rmsnorm shape=4,4096 normalized_dims=1 affine=weight dtype=bf16");
  const EmittedKernel plain = emit(plan(spec, t));
  EXPECT_NE(plain.source.find("kResidual = false;"), std::string::npos);
  EXPECT_NE(plain.source.find("kWeightOffset = 0;"), std::string::npos);
  spec.residual = Dtype::kF32;
  spec.param_dtype = Dtype::kF32;
  spec.out_dtype = Dtype::kE4M3;
  spec.weight_offset = 1.0;
  spec.save_stats = true;
  const EmittedKernel v = emit(plan(spec, t));
  for (const char* field :
       {"using Residual = float;", "using Param = float;", "using Y = normjit::e4m3_t;",
        "kResidual = true;", "kWeightOffset = 1;", "kSaveStats = true;"}) {
    EXPECT_NE(v.source.find(field), std::string::npos) << field << "\n" << v.source;
  }
  EXPECT_EQ(
      v.kernel,
      "normjit::row_norm<normjit::rmsnorm_bf16_h4096_res_f32_param_f32_offset_to_e4m3_stats>");
  // fp8 conversions exist from sm_89 on: sm_80 refuses at plan time, naming the axis.
  try {
    plan(spec, Target::parse("sm_80"));
    ADD_FAILURE() << "fp8 output planned for sm_80";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("out_dtype"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("sm_89"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace normjit

namespace normjit {
namespace {

TEST(PlanRows, StrategyFollowsTheRowLength) {
  const Target t = Target::parse("sm_90");
  EXPECT_EQ(plan(NormSpec::parse("op=layernorm shape=4096,4096 dtype=bf16"), t).strategy,
            Strategy::kRowRegisters);
  EXPECT_EQ(plan(NormSpec::parse("op=layernorm shape=2,32768"), t).strategy,
            Strategy::kRowRegisters);
  // A team's thread holds 16 f32 values or 32 packed 16-bit ones: half the team for bf16.
  EXPECT_EQ(plan(NormSpec::parse("op=layernorm shape=4096,16384"), t).block_x, 1024);
  EXPECT_EQ(plan(NormSpec::parse("op=layernorm shape=4096,16384 dtype=bf16"), t).block_x, 512);
  // The seeds: millions of elements per row, split over co-resident CTAs.
  const KernelPlan ln = plan(NormSpec::parse("op=layernorm shape=16,64,256,256"), t);
  EXPECT_EQ(ln.strategy, Strategy::kRowSplit);
  EXPECT_TRUE(ln.cooperative());
  EXPECT_LE(ln.split_chunks, t.sm_count);
  const KernelPlan gn = plan(NormSpec::parse("op=groupnorm shape=112,64,512,512 groups=8"), t);
  EXPECT_EQ(gn.strategy, Strategy::kRowSplit);
  EXPECT_EQ(gn.rows_per_item, 8);
  // Longer than the whole chip holds: the streaming fallback.
  EXPECT_EQ(plan(NormSpec::parse("op=layernorm shape=2,268435456"), t).strategy,
            Strategy::kRowStream);
  // A smaller part of the same arch holds less: the plan depends on the SM count.
  Target small = t;
  small.sm_count = 60;
  EXPECT_EQ(plan(NormSpec::parse("op=layernorm shape=16,64,256,256"), small).strategy,
            Strategy::kRowStream);
}

// The row team (threads a row) of a spec's plan on sm_90.
int team(const char* text) { return plan(NormSpec::parse(text), Target::parse("sm_90")).block_x; }

// f32 rows of at most 1024 elements in 16-byte accesses take teams of 8 values a thread where
// that leaves no more vector slots idle, in both batch classes (a row's team, so its bits, must
// not depend on the launch's rows); rows of 768 (a quarter of a team of 128 idle), of 2048, 16-bit
// rows and f32 rows with scalar accesses keep 16.
TEST(PlanRows, ShortF32RowsTakeTeamsOfEightValuesInEveryBatchClass) {
  EXPECT_EQ(team("op=layernorm shape=8192,1024 dtype=f32"), 128);
  EXPECT_EQ(team("op=layernorm shape=1,1024 dtype=f32"), 128);
  EXPECT_EQ(team("op=rmsnorm shape=300,1024 normalized_dims=1 dtype=f32 affine=weight"), 128);
  EXPECT_EQ(team("op=layernorm shape=8192,512 dtype=f32"), 64);
  EXPECT_EQ(team("op=layernorm shape=12608,768 dtype=f32"), 64);
  EXPECT_EQ(team("op=layernorm shape=4096,2048 dtype=f32"), 128);
  EXPECT_EQ(team("op=layernorm shape=8192,1024 dtype=bf16"), 64);
  EXPECT_EQ(team("op=layernorm shape=8192,1023 dtype=f32"), 64);
  EXPECT_EQ(team("op=layernorm shape=8192,1024 dtype=bf16 residual=f32"), 64);
}

// LayerNorm with a residual of x's 16-bit dtype over rows of 4096 to 8192 takes teams of 16 values
// a thread (kResidualLayerNormRows), in both batch classes, its parameters then held with x in
// launches of many rows too. Rows of 16384, plain LayerNorm and add + RMSNorm keep 32 values;
// rows of 2048 take 16 by kShortPackedRow, and an f32 residual (h held in f32) as unpacked rows.
TEST(PlanRows, ResidualLayerNormRowsTakeTeamsOfSixteenValuesInEveryBatchClass) {
  EXPECT_EQ(team("op=layernorm shape=1024,4096 dtype=bf16 residual=bf16"), 256);
  EXPECT_EQ(team("op=layernorm shape=1,4096 dtype=bf16 residual=bf16"), 256);
  EXPECT_EQ(team("op=layernorm shape=16384,8192 dtype=f16 residual=f16"), 512);
  EXPECT_EQ(team("op=layernorm shape=1,8192 dtype=f16 residual=f16"), 512);
  EXPECT_EQ(team("op=layernorm shape=1024,2048 dtype=bf16 residual=bf16"), 128);
  EXPECT_EQ(team("op=layernorm shape=1024,16384 dtype=bf16 residual=bf16"), 512);
  EXPECT_EQ(team("op=layernorm shape=1024,4096 dtype=bf16 residual=f32"), 256);
  EXPECT_EQ(team("op=layernorm shape=1024,4096 dtype=bf16"), 128);
  EXPECT_EQ(
      team("op=rmsnorm shape=1024,4096 normalized_dims=1 dtype=bf16 affine=weight residual=bf16"),
      128);
  EXPECT_TRUE(plan(NormSpec::parse("op=layernorm shape=1024,4096 dtype=bf16 residual=bf16"),
                   Target::parse("sm_90"))
                  .params_ahead);
}

// Row kernels of 16-bit rows (x, h and the parameters 16-bit, y at most) take launch bounds of 64
// registers (row_blocks_bound): CTAs of 256 without a residual in launches of many rows (4 CTAs an
// SM), and in either batch class LayerNorm in CTAs of 512 at fewer than 32 values a thread without
// a residual and RMSNorm in CTAs of 512 with an f16 residual (2). The few-rows class in CTAs of
// 256, f32 rows, an f32 weight, y or residual, the other residuals, GroupNorm's rows and CTAs of
// 128 name none (0).
TEST(PlanRows, SixteenBitRowsInCtasOf256And512TakeLaunchBoundsOf64Registers) {
  struct Case {
    const char* spec;
    int threads;  // the CTA's
    int bound;    // min_blocks_per_sm
  };
  const std::string rms = "op=rmsnorm normalized_dims=1 affine=weight ";
  const std::vector<std::pair<std::string, Case>> cases = {
      {rms, {"shape=4096,8192 dtype=bf16", 256, 4}},
      {rms, {"shape=1024,8192 dtype=f16 weight_offset=1 activation=silu", 256, 4}},
      {rms, {"shape=1024,7200 dtype=bf16 param_dtype=f16 save_stats=true out_dtype=e4m3", 256, 4}},
      {"op=rmsnorm normalized_dims=1 affine=none ", {"shape=4096,8192 dtype=bf16", 256, 4}},
      {"op=layernorm ", {"shape=4096,5120 dtype=f16 save_stats=true", 256, 4}},
      {"op=layernorm ", {"shape=4096,12288 dtype=bf16", 512, 2}},
      {rms, {"shape=4096,16384 dtype=f16 residual=f16", 512, 2}},
      // The few-rows class in CTAs of 512 (one team a CTA).
      {"op=layernorm ", {"shape=200,12288 dtype=bf16", 512, 2}},
      {"op=layernorm ", {"shape=1,9216 dtype=f16", 512, 2}},
      {rms, {"shape=200,16384 dtype=f16 residual=f16", 512, 2}},
      // None: the few-rows class in CTAs of 256; f32 weight, y, residual, rows.
      {rms, {"shape=100,8192 dtype=bf16", 256, 0}},
      {"op=layernorm ", {"shape=100,6144 dtype=f16", 256, 0}},
      {rms, {"shape=4096,8192 dtype=bf16 param_dtype=f32", 256, 0}},
      {rms, {"shape=4096,8192 dtype=bf16 out_dtype=f32", 256, 0}},
      {rms, {"shape=4096,8192 dtype=bf16 residual=f32", 512, 0}},
      {"op=layernorm ", {"shape=4096,8192 dtype=f32", 512, 0}},
      // Residuals in CTAs of 256; in CTAs of 512 all but RMSNorm's f16 one.
      {rms, {"shape=4096,8192 dtype=f16 residual=f16", 256, 0}},
      {"op=layernorm ", {"shape=1024,4096 dtype=bf16 residual=bf16", 256, 0}},
      {"op=layernorm ", {"shape=4096,8192 dtype=bf16 residual=bf16", 512, 0}},
      {"op=layernorm ", {"shape=4096,16384 dtype=bf16 residual=bf16", 512, 0}},
      {rms, {"shape=4096,16384 dtype=bf16 residual=bf16", 512, 0}},
      // CTAs of 512 at 32 values a thread without a residual; CTAs of 128.
      {"op=layernorm ", {"shape=4096,16384 dtype=bf16", 512, 0}},
      {rms, {"shape=4096,12288 dtype=bf16", 512, 0}},
      {rms, {"shape=4096,4096 dtype=bf16", 128, 0}},
  };
  for (const auto& [prefix, c] : cases) {
    const std::string text = prefix + c.spec;
    const KernelPlan p = plan(NormSpec::parse(text), Target::parse("sm_90"));
    EXPECT_EQ(p.block_x * p.block_y, c.threads) << text;
    EXPECT_EQ(p.min_blocks_per_sm, c.bound) << text;
  }
}

// The row kernel loads per-element parameters with x when they take at most 32 registers per
// thread (packed 16-bit pairs count half), so a decode launch waits for one memory latency, not
// one per vector; GroupNorm's per-channel parameters and rows without any are never loaded so.
TEST(PlanRows, ParametersLoadedWithXWhenTheyFitThirtyTwoRegisters) {
  const Target t = Target::parse("sm_90");
  const auto ahead = [&](const char* text) { return plan(NormSpec::parse(text), t).params_ahead; };
  // 32 bf16 values per thread: a weight takes 16 words, weight and bias 32.
  EXPECT_TRUE(ahead("op=rmsnorm shape=1,4096 normalized_dims=1 dtype=bf16 affine=weight"));
  EXPECT_TRUE(ahead("op=layernorm shape=1,8192 dtype=bf16"));
  // f32 weight beside bf16 x: 32 words.
  EXPECT_TRUE(
      ahead("op=rmsnorm shape=1,8192 normalized_dims=1 dtype=bf16 affine=weight "
            "param_dtype=f32"));
  // f32 LayerNorm at 16 values per thread (rows up to 16384): 32 words; at 32 values: 64.
  EXPECT_TRUE(ahead("op=layernorm shape=1,4096"));
  EXPECT_FALSE(ahead("op=layernorm shape=1,32768"));
  EXPECT_FALSE(ahead("op=rmsnorm shape=1,4096 normalized_dims=1 dtype=bf16 affine=none"));
  EXPECT_FALSE(ahead("op=groupnorm shape=8,64,7,7 groups=8"));
  // More rows than the few-rows class's (256; 512 in teams of at most 128 threads): only where
  // the slice and its parameters take at most 40 registers together, the rest left for rows in
  // flight.
  EXPECT_TRUE(ahead("op=rmsnorm shape=1000,4096 normalized_dims=1 dtype=bf16 affine=weight"));
  EXPECT_FALSE(ahead("op=layernorm shape=1000,4096 dtype=bf16"));
  EXPECT_TRUE(ahead("op=layernorm shape=512,4096 dtype=bf16"));
  EXPECT_FALSE(ahead("op=layernorm shape=513,4096 dtype=bf16"));
  EXPECT_TRUE(ahead("op=layernorm shape=384,4096 dtype=f32"));
  EXPECT_FALSE(ahead("op=layernorm shape=385,4096 dtype=f32"));
  EXPECT_TRUE(ahead("op=layernorm shape=256,8192 dtype=f32"));
  EXPECT_FALSE(ahead("op=layernorm shape=257,8192 dtype=f32"));
  // With a residual, x and the residual are both in flight before h is formed: 16 + 16 words,
  // and the weight's 16 are loaded at the store (a few rows still load it with x).
  EXPECT_FALSE(
      ahead("op=rmsnorm shape=1024,4096 normalized_dims=1 dtype=bf16 affine=weight residual=bf16"));
  EXPECT_TRUE(
      ahead("op=rmsnorm shape=256,4096 normalized_dims=1 dtype=bf16 affine=weight residual=bf16"));
  EXPECT_TRUE(
      ahead("op=rmsnorm shape=1024,2048 normalized_dims=1 dtype=bf16 affine=weight residual=bf16"));
  // The bound is 40 registers: f32 LayerNorm rows of 768 (ViT-B, BERT-base: 12 values a thread,
  // 12 + 24 words) and of 1024 (8 values a thread: 8 + 16) load their weight and bias with x;
  // rows of 4096 (16 + 32) at the store.
  EXPECT_TRUE(ahead("op=layernorm shape=12608,768 dtype=f32"));
  // 16-bit rows in a team of 256 (rows of 4097 to 8192 in 16-byte accesses, 16 words of slice)
  // hold an f32 weight (48 words); not 16-bit parameters of 48 words (a weight and bias, a
  // residual beside a weight), nor an f32 weight in other teams.
  EXPECT_TRUE(
      ahead("op=rmsnorm shape=4096,8192 normalized_dims=1 dtype=bf16 affine=weight "
            "param_dtype=f32"));
  EXPECT_TRUE(
      ahead("op=rmsnorm shape=16384,6000 normalized_dims=1 dtype=f16 affine=weight "
            "param_dtype=f32"));
  EXPECT_FALSE(ahead("op=layernorm shape=16384,8192 dtype=bf16"));
  EXPECT_FALSE(
      ahead("op=rmsnorm shape=4096,8192 normalized_dims=1 dtype=bf16 affine=weight residual=bf16"));
  EXPECT_FALSE(
      ahead("op=rmsnorm shape=4096,8192 normalized_dims=1 dtype=bf16 affine=weight "
            "param_dtype=f32 residual=bf16"));
  EXPECT_FALSE(
      ahead("op=rmsnorm shape=4096,4096 normalized_dims=1 dtype=bf16 affine=weight "
            "param_dtype=f32"));
  EXPECT_FALSE(
      ahead("op=rmsnorm shape=4096,16384 normalized_dims=1 dtype=bf16 affine=weight "
            "param_dtype=f32"));
  EXPECT_FALSE(ahead("op=layernorm shape=4096,4096 dtype=bf16"));
  EXPECT_TRUE(ahead("op=layernorm shape=8192,1024 dtype=f32"));
  EXPECT_FALSE(ahead("op=layernorm shape=4096,4096 dtype=f32"));
  // Rows of scalar accesses (odd lengths) in a team of 512 threads load them at the store in
  // launches of many rows, though 9 + 18 words are under 40; a launch of few rows, a team of 1024
  // (not measured) and a row with a residual keep the rule above.
  EXPECT_FALSE(ahead("op=layernorm shape=4096,4097 normalized_dims=1 dtype=bf16"));
  EXPECT_FALSE(ahead("op=rmsnorm shape=4096,4097 normalized_dims=1 dtype=f32 affine=weight"));
  EXPECT_FALSE(ahead("op=layernorm shape=257,4097 normalized_dims=1 dtype=bf16"));
  EXPECT_TRUE(ahead("op=layernorm shape=16,4097 normalized_dims=1 dtype=bf16"));
  // In a team of 256 (rows of 2049 to 4095), 16-bit LayerNorm only, and only past 512 rows (its
  // few-rows class reaches that far); RMSNorm and f32 LayerNorm keep the rule above.
  EXPECT_FALSE(ahead("op=layernorm shape=4096,2049 normalized_dims=1 dtype=bf16"));
  EXPECT_FALSE(ahead("op=layernorm shape=513,3001 normalized_dims=1 dtype=f16"));
  EXPECT_TRUE(ahead("op=layernorm shape=512,3001 normalized_dims=1 dtype=bf16"));
  EXPECT_TRUE(ahead("op=layernorm shape=300,3333 normalized_dims=1 dtype=bf16"));
  EXPECT_TRUE(ahead("op=layernorm shape=4096,2049 normalized_dims=1 dtype=f32"));
  EXPECT_TRUE(ahead("op=rmsnorm shape=4096,2049 normalized_dims=1 dtype=bf16 affine=weight"));
  EXPECT_TRUE(ahead("op=layernorm shape=4096,2049 normalized_dims=1 dtype=bf16 residual=bf16"));
  EXPECT_EQ(few_rows_limit(NormSpec::parse("op=layernorm shape=1,3001 dtype=bf16")), 512);
  EXPECT_EQ(few_rows_limit(NormSpec::parse("op=layernorm shape=1,3001 dtype=f32")), 384);
  EXPECT_EQ(few_rows_limit(NormSpec::parse("op=layernorm shape=1,4097 dtype=bf16")), 256);
  EXPECT_EQ(few_rows_limit(NormSpec::parse("op=layernorm shape=1,6000 dtype=bf16")), 384);
  // Row kernels of at most 128 threads a row: 512 rows (bf16 rows of 4096, f32 rows of 2048,
  // with a residual too); teams of 256 (f32 rows of 4096, bf16 rows of 8192) 384; wider teams
  // (bf16 rows of 16384, f32 rows of 8192) 256.
  EXPECT_EQ(few_rows_limit(NormSpec::parse("op=layernorm shape=1,4096 dtype=bf16")), 512);
  EXPECT_EQ(few_rows_limit(NormSpec::parse("op=layernorm shape=1,2048 dtype=f32")), 512);
  EXPECT_EQ(
      few_rows_limit(NormSpec::parse(
          "op=rmsnorm shape=1,4096 normalized_dims=1 dtype=bf16 affine=weight residual=bf16")),
      512);
  EXPECT_EQ(few_rows_limit(NormSpec::parse("op=layernorm shape=1,768 dtype=f32")), 512);
  EXPECT_EQ(few_rows_limit(NormSpec::parse("op=layernorm shape=1,4096 dtype=f32")), 384);
  EXPECT_EQ(few_rows_limit(NormSpec::parse("op=layernorm shape=1,8192 dtype=bf16")), 384);
  EXPECT_EQ(few_rows_limit(NormSpec::parse("op=layernorm shape=1,16384 dtype=bf16")), 256);
  EXPECT_EQ(few_rows_limit(NormSpec::parse("op=layernorm shape=1,8192 dtype=f32")), 256);
  EXPECT_EQ(
      few_rows_limit(NormSpec::parse(
          "op=rmsnorm shape=1,8192 normalized_dims=1 dtype=bf16 affine=weight param_dtype=f32")),
      384);
  EXPECT_TRUE(ahead("op=layernorm shape=512,4096 normalized_dims=1 dtype=bf16"));
  EXPECT_FALSE(ahead("op=layernorm shape=513,4096 normalized_dims=1 dtype=bf16"));
  EXPECT_TRUE(
      ahead("op=rmsnorm shape=400,4096 normalized_dims=1 dtype=bf16 affine=weight residual=bf16"));
  EXPECT_TRUE(ahead("op=layernorm shape=300,4096 normalized_dims=1 dtype=f32"));
  EXPECT_FALSE(ahead("op=layernorm shape=400,4096 normalized_dims=1 dtype=f32"));
  EXPECT_EQ(batch_class_specs(NormSpec::parse("op=layernorm shape=2,3001 dtype=bf16"))[1].batch(),
            513);
  EXPECT_TRUE(ahead("op=rmsnorm shape=4096,9999 normalized_dims=1 dtype=bf16 affine=weight"));
  EXPECT_TRUE(
      ahead("op=rmsnorm shape=4096,4097 normalized_dims=1 dtype=bf16 affine=weight residual=bf16"));
  EXPECT_NE(batch_class(NormSpec::parse("op=layernorm shape=384,4096")),
            batch_class(NormSpec::parse("op=layernorm shape=385,4096")));
  // Kernels whose plan never depends on the batch have one class.
  EXPECT_EQ(batch_class(NormSpec::parse("op=groupnorm shape=1,64,7,7 groups=8")),
            batch_class(NormSpec::parse("op=groupnorm shape=1000,64,7,7 groups=8")));
  EXPECT_EQ(batch_class(NormSpec::parse("op=layernorm shape=1,4096 affine=none")),
            batch_class(NormSpec::parse("op=layernorm shape=1000,4096 affine=none")));
  // precompile() compiles a spec of each class.
  EXPECT_EQ(batch_class_specs(NormSpec::parse("op=layernorm shape=2,3,4096")).size(), 2u);
  EXPECT_EQ(batch_class_specs(NormSpec::parse("op=layernorm shape=2,3,4096"))[1].batch(), 257);
  EXPECT_EQ(batch_class_specs(NormSpec::parse("op=layernorm shape=400,4096"))[1].batch(), 1);
  EXPECT_EQ(batch_class_specs(NormSpec::parse("op=groupnorm shape=2,64,7,7 groups=8")).size(), 1u);
  // Engine::prepare asks has_two_batch_classes (no allocation) what batch_class_specs builds,
  // and launches by batch_class(spec, batch).
  for (const char* text :
       {"op=layernorm shape=2,3,4096", "op=layernorm shape=400,4096", "op=layernorm shape=4096",
        "op=layernorm shape=2,4096 affine=none", "op=rmsnorm shape=1,4096 normalized_dims=1",
        "op=rmsnorm shape=1,4096 normalized_dims=1 affine=weight residual=bf16 dtype=bf16",
        "op=rmsnorm shape=3,40000 normalized_dims=1 affine=weight",
        "op=rmsnorm shape=2,64,32,32 affine=weight", "op=groupnorm shape=2,64,7,7 groups=8",
        "op=rmsnorm shape=2,64,4,4 affine=weight layout=nhwc",
        "op=rmsnorm shape=2,64,32,32 affine=weight layout=nhwc",
        "op=layernorm shape=300,64,4,4 normalized_dims=0 layout=nhwc",
        "op=layernorm shape=2,64,4096 backward=true", "op=layernorm shape=2,3001 dtype=bf16",
        "op=layernorm shape=2,4096 dtype=bf16", "op=layernorm shape=2,8192 dtype=f32"}) {
    const NormSpec spec = NormSpec::parse(text);
    const std::vector<NormSpec> classes = batch_class_specs(spec);
    EXPECT_EQ(has_two_batch_classes(spec), classes.size() == 2) << text;
    for (const NormSpec& each : classes) {
      const int64_t batch = each.batch();
      EXPECT_EQ(batch_class(spec, batch), batch_class(each)) << text << ", batch " << batch;
    }
    // A prepared kernel launches by its plan's batch_class_of, which agrees with the spec's.
    const KernelPlan planned = plan(spec, t);
    for (int64_t batch : {1, 2, 16, 64, 256, 257, 384, 385, 512, 513, 1000}) {
      EXPECT_EQ(planned.batch_class_of(batch), batch_class(spec, batch))
          << text << ", batch " << batch;
    }
  }
  EXPECT_NE(plan(NormSpec::parse("op=layernorm shape=1,4096"), t)
                .to_string()
                .find("parameters loaded: with x"),
            std::string::npos);
  // `normjit dump` says which launches a plan serves.
  const auto class_line = [&](const char* text) {
    const std::string s = plan(NormSpec::parse(text), t).to_string();
    const size_t at = s.find("batch class: ");
    return at == std::string::npos ? std::string() : s.substr(at, s.find('\n', at) - at);
  };
  EXPECT_EQ(class_line("op=layernorm shape=1,4096"),
            "batch class: few rows (launches of at most 384 rows; a prepared kernel runs the "
            "other class's plan for more)");
  EXPECT_EQ(class_line("op=layernorm shape=400,4096"),
            "batch class: more than 384 rows (a prepared kernel runs the few-rows plan for "
            "launches of at most 384)");
  EXPECT_EQ(class_line("op=layernorm shape=300,4096 affine=none"), "batch class: any");
}

// The row kernels that keep their parameters' loads above the reduction (kPinParams), where
// ptxas had sunk them past it: launches of a few rows in teams within one warp (at most 32
// threads a row; not RMSNorm with a residual, whose decode rows ran slower so, nor in wider teams,
// whose block barrier already holds the loads above it), launches of many 16-bit LayerNorm rows
// and RMSNorm rows of up to 1024 in teams wider than a warp, and 16-bit add + LayerNorm in both.
TEST(PlanRows, ParameterLoadsKeptAboveTheReductionWhereTheyWereSunk) {
  const Target t = Target::parse("sm_90");
  const auto plan_of = [&](const char* text) { return plan(NormSpec::parse(text), t); };
  const auto pinned = [&](const char* text) {
    const KernelPlan p = plan_of(text);
    EXPECT_TRUE(!p.pin_params || p.params_ahead) << text;
    return p.pin_params;
  };
  EXPECT_TRUE(pinned("op=rmsnorm shape=1,32,128 normalized_dims=1 dtype=bf16 affine=weight"));
  EXPECT_TRUE(pinned("op=rmsnorm shape=64,64 normalized_dims=1 dtype=bf16 affine=weight"));
  EXPECT_TRUE(pinned("op=layernorm shape=197,768 normalized_dims=1 dtype=bf16"));
  // A team of 128 (rows of 4096); but RMSNorm's 16-bit rows of 1024 (teams of 64) in both
  // classes, which thus plan one kernel.
  EXPECT_FALSE(pinned("op=rmsnorm shape=1,4096 normalized_dims=1 dtype=bf16 affine=weight"));
  EXPECT_TRUE(pinned("op=rmsnorm shape=16,1024 normalized_dims=1 dtype=bf16 affine=weight"));
  EXPECT_FALSE(pinned("op=rmsnorm shape=16,1023 normalized_dims=1 dtype=bf16 affine=weight"));
  EXPECT_FALSE(
      pinned("op=rmsnorm shape=1,1024 normalized_dims=1 dtype=bf16 affine=weight residual=bf16"));
  EXPECT_FALSE(pinned("op=rmsnorm shape=4096,128 normalized_dims=1 dtype=bf16 affine=weight"));
  EXPECT_FALSE(pinned("op=rmsnorm shape=1,32,128 normalized_dims=1 dtype=bf16 affine=none"));
  EXPECT_FALSE(pinned("op=groupnorm shape=1,32,4,4 groups=8 dtype=bf16"));
  // Launches of many 16-bit LayerNorm rows that load the parameters with x in teams wider than
  // a warp: 64 (rows of 1024), 128 (2048), 256 (5120) and 512 (12288); RMSNorm's rows of 1024
  // (64); not f32 rows, f32 parameters beside bf16 x, teams within a warp (rows of 512: 32), or
  // RMSNorm's LLM rows (teams of 128 to 512, the parameters loaded with x).
  EXPECT_TRUE(pinned("op=layernorm shape=8192,1024 dtype=bf16"));
  EXPECT_TRUE(pinned("op=layernorm shape=16384,1024 dtype=f16"));
  EXPECT_TRUE(pinned("op=layernorm shape=4096,2048 dtype=bf16"));
  EXPECT_TRUE(pinned("op=layernorm shape=4096,5120 dtype=bf16"));
  EXPECT_TRUE(pinned("op=layernorm shape=4096,12288 dtype=bf16"));
  EXPECT_TRUE(pinned("op=rmsnorm shape=4096,1024 normalized_dims=1 dtype=bf16 affine=weight"));
  EXPECT_TRUE(plan_of("op=rmsnorm shape=4096,4096 normalized_dims=1 dtype=bf16 affine=weight")
                  .params_ahead);
  EXPECT_FALSE(pinned("op=rmsnorm shape=4096,4096 normalized_dims=1 dtype=bf16 affine=weight"));
  EXPECT_FALSE(pinned("op=rmsnorm shape=4096,2048 normalized_dims=1 dtype=bf16 affine=weight"));
  EXPECT_FALSE(pinned("op=layernorm shape=8192,1024 dtype=f32"));
  EXPECT_FALSE(pinned("op=layernorm shape=8192,1024 dtype=bf16 param_dtype=f32"));
  EXPECT_FALSE(pinned("op=layernorm shape=16384,512 dtype=bf16"));
  // add + LayerNorm with 16-bit x, parameters and residual, in both classes and any team (its h
  // is stored after the reduction); not with f32 parameters, nor with an f32 residual (whose
  // plan loads the parameters after the reduction), nor add + RMSNorm (its early stores of h
  // waited behind the loads).
  EXPECT_TRUE(pinned("op=layernorm shape=8192,1024 dtype=bf16 residual=bf16"));
  EXPECT_TRUE(pinned("op=layernorm shape=1024,4096 dtype=f16 residual=f16"));
  EXPECT_FALSE(pinned("op=layernorm shape=1024,4096 dtype=bf16 residual=f32"));
  EXPECT_TRUE(pinned("op=layernorm shape=1,8192 dtype=bf16 residual=bf16"));
  EXPECT_FALSE(pinned("op=layernorm shape=1024,4096 dtype=bf16 param_dtype=f32 residual=bf16"));
  EXPECT_FALSE(pinned(
      "op=rmsnorm shape=1024,4096 normalized_dims=1 dtype=bf16 affine=weight residual=bf16"));
}

// The row team's size: 16 values per thread (f32), 32 packed 16-bit ones, 16 for 16-bit rows
// of at most 2048 elements where no more vector slots idle; CTAs of 128 threads for the
// trailing forms, 256 for GroupNorm's groups.
TEST(PlanRows, XIsReadEvictFirstInLaunchesThatFitInL2) {
  const auto rows = [](const char* text, const char* arch) {
    return plan(NormSpec::parse(text), Target::parse(arch)).evict_first_rows;
  };
  // The arch's L2 over the bytes a row reads and writes: x and y, with a residual also the
  // residual and h. sm_90: 50 MiB; sm_80: 40 MiB.
  const int64_t h100 = int64_t{50} << 20, a100 = int64_t{40} << 20;
  EXPECT_EQ(rows("op=layernorm shape=12608,768 dtype=bf16", "sm_90"), h100 / (768 * 4));
  EXPECT_EQ(rows("op=layernorm shape=12608,768 dtype=f32", "sm_90"), h100 / (768 * 8));
  EXPECT_EQ(rows("op=layernorm shape=12608,768 dtype=bf16", "sm_80"), a100 / (768 * 4));
  EXPECT_EQ(rows("op=rmsnorm shape=1000,1024 normalized_dims=1 dtype=bf16 affine=weight "
                 "residual=f32",
                 "sm_90"),
            h100 / (1024 * (2 + 2 + 4 + 4)));
  // fp8 output: a byte of y per element.
  EXPECT_EQ(rows("op=rmsnorm shape=1000,1024 normalized_dims=1 dtype=bf16 affine=weight "
                 "out_dtype=e4m3",
                 "sm_90"),
            h100 / (1024 * 3));
  // Rows longer than 1024 elements (LLM rows) keep plain loads.
  EXPECT_EQ(rows("op=rmsnorm shape=4096,1025 normalized_dims=1 dtype=bf16", "sm_90"), 0);
  EXPECT_EQ(rows("op=rmsnorm shape=1,4096 normalized_dims=1 dtype=bf16 affine=weight", "sm_90"), 0);
  // The same for every multiprocessor count (the plan of short rows does not depend on it).
  EXPECT_EQ(rows("op=layernorm shape=12608,768 dtype=bf16", "sm_90:66"), h100 / (768 * 4));
  // None before sm_80 (no createpolicy), none where the table does not know the L2, none for
  // GroupNorm's rows (not measured).
  EXPECT_EQ(rows("op=layernorm shape=12608,768 dtype=bf16", "sm_75"), 0);
  EXPECT_EQ(rows("op=layernorm shape=12608,768 dtype=bf16", "sm_100"), 0);
  EXPECT_EQ(rows("op=groupnorm shape=32,1024,14,14 groups=32 dtype=bf16", "sm_90"), 0);
  // The batch is not part of it: a launch of any size takes the same kernel.
  EXPECT_EQ(rows("op=layernorm shape=100000,768 dtype=bf16", "sm_90"),
            rows("op=layernorm shape=1000,768 dtype=bf16", "sm_90"));
}

// RMSNorm rows of 16-byte accesses, at least 4 KiB of x, in a launch of many rows ask L2 for their
// row (sm_90's bulk prefetch); LayerNorm, f32 parameters beside 16-bit x, a few rows, short or odd
// rows and archs without the bulk prefetch do not.
TEST(PlanRows, ManyRmsNormRowsPrefetchTheirRowIntoL2) {
  const auto prefetches = [](const char* text, const char* arch = "sm_90") {
    return plan(NormSpec::parse(text), Target::parse(arch)).prefetch_row;
  };
  const char* rms = "op=rmsnorm shape=4096,8192 normalized_dims=1 dtype=bf16 affine=weight";
  EXPECT_TRUE(prefetches(rms));
  EXPECT_TRUE(prefetches("op=rmsnorm shape=16384,2048 normalized_dims=1 dtype=bf16"));
  EXPECT_TRUE(prefetches("op=rmsnorm shape=4096,8192 normalized_dims=1 dtype=f32 affine=weight"));
  EXPECT_TRUE(
      prefetches("op=rmsnorm shape=4096,8192 normalized_dims=1 dtype=bf16 "
                 "affine=weight residual=bf16 out_dtype=e4m3 weight_offset=1"));
  EXPECT_FALSE(prefetches(rms, "sm_80"));
  EXPECT_FALSE(prefetches("op=layernorm shape=4096,8192 dtype=bf16"));
  EXPECT_FALSE(
      prefetches("op=rmsnorm shape=4096,8192 normalized_dims=1 dtype=bf16 "
                 "affine=weight param_dtype=f32"));
  EXPECT_FALSE(prefetches("op=rmsnorm shape=16,8192 normalized_dims=1 dtype=bf16 affine=weight"));
  EXPECT_FALSE(prefetches("op=rmsnorm shape=16384,1024 normalized_dims=1 dtype=bf16"));
  EXPECT_FALSE(prefetches("op=rmsnorm shape=4096,4097 normalized_dims=1 dtype=bf16"));
  EXPECT_FALSE(prefetches("op=groupnorm shape=32,1024,14,14 groups=32 dtype=bf16"));
  // Beside a residual, only rows of at least 16 KiB of x.
  EXPECT_FALSE(
      prefetches("op=rmsnorm shape=4096,4096 normalized_dims=1 dtype=bf16 affine=weight "
                 "residual=bf16"));
  EXPECT_TRUE(
      prefetches("op=rmsnorm shape=4096,4096 normalized_dims=1 dtype=f32 affine=weight "
                 "residual=f32"));
  // The plan says so.
  const std::string text = plan(NormSpec::parse(rms), Target::parse("sm_90")).to_string();
  EXPECT_NE(text.find("L2 prefetch of the row: one bulk prefetch by the team's first thread"),
            std::string::npos)
      << text;
}

TEST(PlanRows, TeamAndCtaSizes) {
  const Target t = Target::parse("sm_90");
  struct Case {
    const char* spec;
    int team;
    int rows_per_block;
  };
  for (const Case& c : {
           Case{"op=rmsnorm shape=16,2048 dtype=bf16 normalized_dims=1 affine=weight", 128, 1},
           Case{"op=layernorm shape=16,1024 dtype=bf16", 64, 2},
           // 96 vectors: 32 threads x 3 at 32 values; 64 x 2 would leave 32 slots idle.
           Case{"op=layernorm shape=16,768 dtype=bf16", 32, 4},
           Case{"op=rmsnorm shape=16,4096 dtype=bf16 normalized_dims=1 affine=weight", 128, 1},
           Case{"op=layernorm shape=16,8192 dtype=f16", 256, 1},
           // f32 rows of at most 1024: 8 values a thread (ShortF32Rows... below).
           Case{"op=layernorm shape=16,1024", 128, 1},
           Case{"op=layernorm shape=16,2048", 128, 1},
           Case{"op=groupnorm shape=3,64,7,7 groups=8 dtype=f16", 16, 16},
       }) {
    const KernelPlan p = plan(NormSpec::parse(c.spec), t);
    EXPECT_EQ(p.strategy, Strategy::kRowRegisters) << c.spec;
    EXPECT_EQ(p.block_x, c.team) << c.spec;
    EXPECT_EQ(p.rows_per_block, c.rows_per_block) << c.spec;
    EXPECT_GE(int64_t{p.block_x} * p.vectors * p.vec, p.problem.row_length) << c.spec;
  }
}

TEST(PlanRows, GridsAndWorkspaceFollowTheBatch) {
  const Target t = Target::parse("sm_90");
  const KernelPlan small = plan(NormSpec::parse("op=layernorm shape=7,3"), t);
  EXPECT_EQ(small.rows_per_block * small.block_x, 128);
  EXPECT_EQ(small.grid(1000, 0), (1000 + small.rows_per_block - 1) / small.rows_per_block);
  const KernelPlan gn = plan(NormSpec::parse("op=groupnorm shape=112,64,512,512 groups=8"), t);
  const int64_t co_resident = 264;
  const int64_t slots = co_resident / gn.split_chunks;
  EXPECT_EQ(gn.grid(112, co_resident), slots * gn.split_chunks);  // every slot busy
  EXPECT_EQ(gn.grid(1, co_resident) / gn.split_chunks, std::min<int64_t>(slots, 8));
  EXPECT_EQ(gn.workspace_floats(co_resident), slots * (16 * gn.split_chunks + 4));
  EXPECT_EQ(plan(NormSpec::parse("op=layernorm shape=4,1024"), t).workspace_floats(264), 0);
}

// Rows longer than the split kernel holds stream over every SM: P co-resident CTAs per row,
// each a part of kSeg elements in pieces of whole vectors, together covering the row, their
// number close to the SM count however few the rows.
TEST(PlanRows, StreamingRowsSpreadOverEverySm) {
  struct Case {
    const char* spec;
    const char* arch;
  };
  for (const Case& c :
       {Case{"op=layernorm shape=2,268435456 normalized_dims=1", "sm_90"},
        Case{"op=layernorm shape=16,64,256,256", "sm_90:114"},
        Case{"op=layernorm shape=16,64,256,256", "sm_80"},
        Case{"op=layernorm shape=5,8388609 normalized_dims=1 affine=weight", "sm_90"},
        Case{"op=rmsnorm shape=2,268435456 normalized_dims=1 dtype=bf16", "sm_90"},
        Case{"op=groupnorm shape=3,32,600,600 groups=2", "sm_90"},
        Case{"op=groupnorm shape=4,99,333,333 groups=3 dtype=bf16", "sm_80"}}) {
    SCOPED_TRACE(std::string(c.spec) + " " + c.arch);
    const NormSpec spec = NormSpec::parse(c.spec);
    const Target t = Target::parse(c.arch);
    const KernelPlan p = plan(spec, t);
    ASSERT_EQ(p.strategy, Strategy::kRowStream);
    EXPECT_TRUE(p.cooperative());
    const int64_t h = spec.row_length();
    const int64_t vectors = p.vectors;
    const int64_t parts = p.split_chunks;
    const int64_t seg = p.segment;
    EXPECT_LE(parts, t.sm_count);
    EXPECT_GE(parts * 10, t.sm_count * 8) << "most SMs take a part";
    EXPECT_LT((parts - 1) * seg, h);
    EXPECT_GE(parts * seg, h);
    EXPECT_EQ(seg % (int64_t{p.block_x} * p.vec * vectors), 0) << "whole pieces";
    EXPECT_GE(vectors, 1);
    // Two rows per pass where parameters are per element: half the vectors per row.
    const bool pairs = spec.op != Op::kGroupNorm && spec.affine != Affine::kNone;
    EXPECT_LE(vectors, pairs ? 2 : 4);
    const int64_t rows = 3 * p.rows_per_item;
    EXPECT_EQ(p.grid(3, t.sm_count), parts);  // one slot: the rows one after another
    EXPECT_EQ(p.grid(3, 2 * t.sm_count), std::min<int64_t>(2 * t.sm_count / parts, rows) * parts);
    EXPECT_EQ(p.workspace_floats(t.sm_count), 16 * parts + 4);
  }
}

// A split row is shared evenly by its P CTAs: each chunk holds the fewest whole vectors per
// thread that cover the row, so under one vector per thread more than an exact P-th, and the
// last is not empty. (With full chunks, a row a little longer than one chunk left a full CTA
// and a sliver, and every row waited for the full one: the Stable Diffusion GroupNorm rows
// of 40960 elements.)
TEST(PlanRows, SplitChunksAreEven) {
  const Target t = Target::parse("sm_90");
  for (const char* text : {"op=groupnorm shape=8,1280,32,32 groups=32",
                           "op=groupnorm shape=8,1280,32,32 groups=32 dtype=bf16",
                           "op=layernorm shape=3,65537 normalized_dims=1",
                           "op=layernorm shape=2,100002 normalized_dims=1",
                           "op=layernorm shape=5,32771 normalized_dims=1 dtype=f16",
                           "op=rmsnorm shape=4,1000003 normalized_dims=1 affine=weight",
                           "op=layernorm shape=16,64,256,256",
                           "op=groupnorm shape=112,64,512,512 groups=8 dtype=bf16"}) {
    SCOPED_TRACE(text);
    const NormSpec spec = NormSpec::parse(text);
    const KernelPlan p = plan(spec, t);
    ASSERT_EQ(p.strategy, Strategy::kRowSplit);
    const int64_t h = spec.row_length();
    const int64_t piece = int64_t{p.block_x} * p.vec;  // one vector per thread
    const int64_t chunk = piece * p.vectors;
    const int64_t parts = p.split_chunks;
    EXPECT_GE(parts * chunk, h);
    EXPECT_LT((parts - 1) * chunk, h) << "the last chunk is not empty";
    EXPECT_LT((chunk - piece) * parts, h) << "under one vector per thread above a P-th";
  }
  // 40960 = 8 x 5120: eight equal chunks (CTAs of 256 threads, 5 vectors each), the most CTAs a
  // group that keep two items' 64 groups in one wave.
  const KernelPlan sd = plan(NormSpec::parse("op=groupnorm shape=8,1280,32,32 groups=32"), t);
  EXPECT_EQ(sd.block_x, 256);
  EXPECT_EQ(sd.split_chunks, 8);
  EXPECT_EQ(sd.vectors * sd.vec * sd.block_x, 5120);
}

// The split CTAs (1, 2 or 4 an SM) must fit the arch's shared memory: the stage and the resident
// parameters (LayerNorm) are sized from it.
TEST(PlanRows, SplitSharedMemoryFitsTheSm) {
  const auto staged = [](const KernelPlan& p) { return p.staged; };
  const auto resident = [](const KernelPlan& p) { return p.resident_vectors; };
  const auto prefetch = [](const KernelPlan& p) { return p.prefetch; };
  // A split plan: CTAs per row, whether the next row is staged, resident vectors.
  const auto expect_split = [&](const KernelPlan& p, int64_t chunks, bool is_staged,
                                int64_t vectors) {
    ASSERT_EQ(p.strategy, Strategy::kRowSplit);
    EXPECT_EQ(p.split_chunks, chunks);
    EXPECT_EQ(staged(p), is_staged);
    EXPECT_EQ(resident(p), vectors);
  };
  const Target hopper = Target::parse("sm_90");
  // LayerNorm bf16: with 64 values per thread (64 CTAs per row, two rows in flight) the
  // 128 KiB stage would leave room for the weight and bias of 3 of each thread's 8 vectors
  // (32 KiB each), and a row would move 26 MB instead of 16. Half the values (128 CTAs per
  // row): a 64 KiB stage and all 4 vectors' parameters resident, prefetched into L2.
  const KernelPlan ln16 =
      plan(NormSpec::parse("op=layernorm shape=16,64,256,256 dtype=bf16"), hopper);
  expect_split(ln16, 128, true, 4);
  EXPECT_EQ(ln16.smem_bytes, 64 * 1024 + 4 * 1024 * 8 * 2 * 2);
  EXPECT_EQ(prefetch(ln16), 1);
  // f16 rows of 64 Ki elements: the same choice (half the values: 4 vectors a thread, all
  // their parameters resident), in 8 CTAs of 256 threads (4 an SM).
  const KernelPlan ln16_short =
      plan(NormSpec::parse("op=layernorm shape=512,65536 dtype=f16"), hopper);
  expect_split(ln16_short, 8, true, 4);
  EXPECT_EQ(ln16_short.vectors, 4);
  EXPECT_EQ(ln16_short.block_x, 256);
  // bf16 rows of 8 Mi elements: 256 CTAs of 32 Ki would not be co-resident on 132 SMs, so
  // 128 of 64 Ki: unstaged (one row fills the chip), 7 of 8 vectors resident.
  const KernelPlan ln16_long =
      plan(NormSpec::parse("op=layernorm shape=8,8388608 dtype=bf16"), hopper);
  expect_split(ln16_long, 128, false, 7);
  // RMSNorm bf16 with a weight (16 KiB per vector): 6 of 8 resident beside the 128 KiB stage,
  // a row moves an eighth more than x and y: the full chunk stays.
  const KernelPlan rms16 = plan(
      NormSpec::parse("op=rmsnorm shape=16,4194304 normalized_dims=1 affine=weight dtype=bf16"),
      hopper);
  expect_split(rms16, 64, true, 6);
  EXPECT_EQ(prefetch(rms16), 0);
  // LayerNorm f32: one row fills the chip (128 CTAs), and staging would leave 5 of 8 vectors'
  // parameters streaming for every row (52 MB a row instead of 36): unstaged, 7 of 8 resident.
  const KernelPlan ln = plan(NormSpec::parse("op=layernorm shape=16,64,256,256"), hopper);
  expect_split(ln, 128, false, 7);
  EXPECT_EQ(ln.smem_bytes, 7 * 1024 * 4 * 4 * 2);
  // RMSNorm f32 rows with a weight: staged, 6 of 8 resident; without the stage all 8 would
  // be, but that saves a row only a ninth of its bytes: staged.
  const KernelPlan rms =
      plan(NormSpec::parse("op=rmsnorm shape=16,4194304 normalized_dims=1 affine=weight"), hopper);
  expect_split(rms, 128, true, 6);
  for (const KernelPlan* p : {&ln16, &ln16_short, &ln16_long, &rms16, &ln, &rms}) {
    EXPECT_LE(p->smem_bytes + 2048, 228 * 1024);
  }
  // No parameters per element (GroupNorm's are per channel), or none at all: nothing resident,
  // and on sm_90 the row after the staged one is prefetched into L2. Rows whose parameters
  // stream for every row are not prefetched (the prefetched rows would take their L2).
  const KernelPlan gn90 =
      plan(NormSpec::parse("op=groupnorm shape=112,64,512,512 groups=8"), hopper);
  EXPECT_EQ(resident(gn90), 0);
  EXPECT_EQ(prefetch(gn90), 2);  // after each row's barrier
  // GroupNorm -> SiLU (a longer epilogue) prefetches once the row's partial is out, as the
  // rows of the other ops do; -> GELU keeps the barrier's point, as plain GroupNorm.
  const auto gn_act = [&](const char* activation, const char* shape) {
    return plan(NormSpec::parse(std::string("op=groupnorm groups=32 dtype=f16 shape=") + shape +
                                " activation=" + activation),
                hopper);
  };
  for (const char* shape : {"1,256,512,512", "2,320,64,64", "112,64,512,512"}) {
    ASSERT_EQ(gn_act("silu", shape).strategy, Strategy::kRowSplit) << shape;
    EXPECT_EQ(prefetch(gn_act("silu", shape)), 1) << shape;
    EXPECT_EQ(prefetch(gn_act("gelu", shape)), 2) << shape;
    EXPECT_EQ(prefetch(gn_act("none", shape)), 2) << shape;
  }
  EXPECT_NE(gn_act("silu", "1,256,512,512").to_string().find("prefetch: after each row's partial"),
            std::string::npos);
  const KernelPlan bare =
      plan(NormSpec::parse("op=layernorm shape=16,64,256,256 affine=none"), hopper);
  EXPECT_EQ(resident(bare), 0);
  EXPECT_EQ(prefetch(bare), 1);  // once the staged row's partial is out
  // Staged, RMSNorm rows with a weight stream a quarter of it for every row: no prefetch.
  // Unstaged, the f32 LayerNorm seed streams an eighth: the next row is prefetched.
  EXPECT_EQ(prefetch(rms), 0);
  EXPECT_EQ(prefetch(ln), 1);
  // f16 rows of odd length: 2-byte vectors, which cp.async cannot move, so unstaged with no
  // parameters resident. With weight and bias all of them stream: no prefetch; without them
  // the next row is prefetched. 16 such vectors per thread at most (kSplitMaxVectors): 62 CTAs.
  const KernelPlan odd = plan(NormSpec::parse("op=layernorm shape=4,1000001 dtype=f16"), hopper);
  expect_split(odd, 62, false, 0);
  EXPECT_EQ(prefetch(odd), 0);
  const KernelPlan odd_bare =
      plan(NormSpec::parse("op=layernorm shape=4,1000001 dtype=f16 affine=none"), hopper);
  EXPECT_EQ(staged(odd_bare), false);
  EXPECT_EQ(prefetch(odd_bare), 1);
  // sm_80 has no bulk prefetch.
  EXPECT_EQ(prefetch(plan(NormSpec::parse("op=groupnorm shape=112,64,512,512 groups=8"),
                          Target::parse("sm_80"))),
            0);
  // sm_86 (100 KiB per SM): a 128 KiB stage does not fit, so the split kernel runs unstaged
  // there, with no dynamic shared memory.
  Target ampere_small = Target::parse("sm_86");
  ampere_small.sm_count = 132;
  const KernelPlan gn =
      plan(NormSpec::parse("op=groupnorm shape=112,64,512,512 groups=8"), ampere_small);
  ASSERT_EQ(gn.strategy, Strategy::kRowSplit);
  EXPECT_EQ(gn.smem_bytes, 0);
  EXPECT_EQ(staged(gn), false);
  EXPECT_EQ(prefetch(gn), 0);
}

TEST(PlanRows, GroupNormVectorsDivideTheGroup) {
  const Target t = Target::parse("sm_90");
  // H = 8 * 3 = 24 is a multiple of 4, S = 3 is not: vectors of 4 span channels.
  EXPECT_EQ(plan(NormSpec::parse("op=groupnorm shape=2,16,3 groups=2"), t).vec, 4);
  // 7x7 maps, 64 channels per group: H = 3136.
  EXPECT_EQ(plan(NormSpec::parse("op=groupnorm shape=32,2048,7,7 groups=32"), t).vec, 4);
  EXPECT_EQ(plan(NormSpec::parse("op=groupnorm shape=32,2048,7,7 groups=32 dtype=bf16"), t).vec, 8);
  // S even: vectors stay within a channel (S = 950: pairs, though H = 15200 allows 4).
  EXPECT_EQ(plan(NormSpec::parse("op=groupnorm shape=8,512,25,38 groups=32"), t).vec, 2);
  // The plan says so.
  EXPECT_NE(plan(NormSpec::parse("op=groupnorm shape=32,2048,7,7 groups=32"), t)
                .why.find("16-byte vectors may span channels (S = 49 is odd)"),
            std::string::npos);
  EXPECT_EQ(plan(NormSpec::parse("op=groupnorm shape=8,512,25,38 groups=32"), t).why.find("span"),
            std::string::npos);
  // One channel of 7x7 per group: H = 49, odd, so scalar.
  EXPECT_EQ(plan(NormSpec::parse("op=groupnorm shape=2,32,7,7 groups=32"), t).vec, 1);
  EXPECT_EQ(plan(NormSpec::parse("op=groupnorm shape=2,16,64 groups=2"), t).vec, 4);
  EXPECT_EQ(plan(NormSpec::parse("op=groupnorm shape=2,16,64 groups=2"), t).param_vec, 1);
  EXPECT_EQ(plan(NormSpec::parse("op=layernorm shape=2,64"), t).param_vec, 4);
}

// GroupNorm's groups split over CTAs: as many CTAs per group as let two items (N = 2) run in the
// fewest waves of co-resident CTAs, then the smallest chunks.
TEST(Plan, GroupNormSplitsGroupsSoThatTwoItemsShareTheFewestWaves) {
  const Target h100 = Target::parse("sm_90");
  const auto chunks = [&](const std::string& spec, const Target& t) {
    const KernelPlan p = plan(NormSpec::parse(spec), t);
    EXPECT_EQ(p.strategy, Strategy::kRowSplit) << spec;
    return p.split_chunks;
  };
  // 32 groups of 40960 f16 elements in CTAs of 256 threads (528 slots): 3 CTAs hold a group,
  // 7 of 3 vectors a thread hold it in one wave of 448 (8 would need the same 3 vectors).
  EXPECT_EQ(chunks("op=groupnorm shape=2,320,64,64 dtype=f16 groups=32", h100), 7);
  // 163840 elements: 10 CTAs of 256 a group (the fewest) run 64 groups in waves of 52 and 12;
  // 16 in waves of 33 and 31, smaller chunks; 20 would need three waves.
  EXPECT_EQ(chunks("op=groupnorm shape=2,320,128,128 dtype=f16 groups=32", h100), 16);
  // The seed: 64 CTAs of 8 vectors a group, two groups a wave; more CTAs a group, one.
  EXPECT_EQ(chunks("op=groupnorm shape=112,64,512,512 groups=8", h100), 64);
  // The A100's 108 SMs hold one group of 64 CTAs per wave, 44 idle: 103 CTAs of 5 vectors.
  const KernelPlan a100 =
      plan(NormSpec::parse("op=groupnorm shape=112,64,512,512 groups=8"), Target::parse("sm_80"));
  EXPECT_EQ(a100.split_chunks, 103);
  EXPECT_EQ(a100.vectors, 5);
  // The batch never enters: one item plans the same kernel.
  EXPECT_EQ(chunks("op=groupnorm shape=1,320,128,128 dtype=f16 groups=32", h100), 16);
}

// The split kernel's CTA: the smallest of 256 x 4 and 512 x 2 an SM that cuts a row into at
// most 64 CTAs with the vectors a thread of 1024 x 1 would have, else 1024 x 1; 1024 threads an
// SM in every shape.
TEST(PlanRows, SplitCtaIsTheSmallestThatCutsARowIntoAtMost64) {
  const Target h200 = Target::parse("sm_90:132:4814");
  struct Case {
    const char* spec;
    int threads;
    int64_t chunks;
  };
  for (const Case& c : {
           // SD 1.5 UNet and VAE maps: 16 and 64 CTAs of 256 a group.
           Case{"op=groupnorm shape=1,512,128,128 dtype=f16 groups=32 activation=silu", 256, 16},
           Case{"op=groupnorm shape=1,512,256,256 dtype=f16 groups=32", 256, 64},
           // 128 CTAs of 256 a group: 64 of 512.
           Case{"op=groupnorm shape=1,256,512,512 dtype=f16 groups=32 activation=silu", 512, 64},
           Case{"op=groupnorm shape=112,64,512,512 dtype=bf16 groups=8", 512, 64},
           // 128 CTAs of 512: the CTA of 1024 (the f32 seeds).
           Case{"op=groupnorm shape=112,64,512,512 groups=8", 1024, 64},
           Case{"op=layernorm shape=16,64,256,256 dtype=bf16", 1024, 128},
           Case{"op=rmsnorm shape=64,524288 dtype=bf16 normalized_dims=1 affine=weight", 256, 32},
           // An odd f32 row: 16 scalar vectors a thread in 17 CTAs of 256, 13 in 5 of 1024.
           Case{"op=layernorm shape=96,65537 normalized_dims=1", 1024, 5},
       }) {
    SCOPED_TRACE(c.spec);
    const KernelPlan p = plan(NormSpec::parse(c.spec), h200);
    ASSERT_EQ(p.strategy, Strategy::kRowSplit);
    EXPECT_EQ(p.block_x, c.threads);
    EXPECT_EQ(p.block_x * p.split_blocks_per_sm, 1024);
    EXPECT_EQ(p.split_chunks, c.chunks);
    EXPECT_NE(p.to_string().find("(" + std::to_string(c.threads) + " threads, " +
                                 std::to_string(1024 / c.threads) + " CTAs an SM)"),
              std::string::npos);
    if (p.block_x < 1024) {
      EXPECT_LE(p.split_chunks, 64);
    }
  }
  // Plain 16-bit GroupNorm takes 512 x 2 only with DRAM of 4000 GB/s and more (its seeds ran
  // faster in 1024 x 1 on the H100's 3352 GB/s); with an activation, in f32 and for the other
  // ops 512 x 2 on both; 256 x 4 on both.
  for (const char* h100 : {"sm_90", "sm_90:132:3352", "sm_90:132:3999"}) {
    SCOPED_TRACE(h100);
    const Target t = Target::parse(h100);
    const auto threads = [&](const char* spec) { return plan(NormSpec::parse(spec), t).block_x; };
    EXPECT_EQ(threads("op=groupnorm shape=1,256,512,512 dtype=f16 groups=32"), 1024);
    EXPECT_EQ(threads("op=groupnorm shape=112,64,512,512 dtype=bf16 groups=8"), 1024);
    EXPECT_EQ(threads("op=groupnorm shape=1,256,512,512 dtype=f16 groups=32 activation=silu"), 512);
    EXPECT_EQ(threads("op=groupnorm shape=1,128,512,512 groups=32 activation=silu"), 512);
    EXPECT_EQ(threads("op=groupnorm shape=8,128,512,512 groups=32"), 512);
    EXPECT_EQ(threads("op=layernorm shape=16,1048576 dtype=bf16 normalized_dims=1"), 512);
    EXPECT_EQ(threads("op=rmsnorm shape=16,786432 normalized_dims=1 affine=weight"), 512);
    EXPECT_EQ(threads("op=groupnorm shape=1,512,128,128 dtype=f16 groups=32"), 256);
  }
  EXPECT_EQ(plan(NormSpec::parse("op=groupnorm shape=1,256,512,512 dtype=f16 groups=32"),
                 Target::parse("sm_90:132:4000"))
                .block_x,
            512);
}

// The split kernel stages the next row only where its vectors hold 4 elements or more: vectors
// of 1 or 2 (f32 scalars and pairs, 16-bit pairs) load straight into registers, and the plan
// says so.
TEST(PlanRows, SplitRowsOfOneAndTwoElementVectorsAreNotStaged) {
  const Target h200 = Target::parse("sm_90:132:4814");
  struct Case {
    const char* spec;
    int vector_bytes;
  };
  for (const Case& c : {
           Case{"op=layernorm shape=96,65537 normalized_dims=1", 4},
           Case{"op=rmsnorm shape=16,1000003 normalized_dims=1 affine=weight", 4},
           Case{"op=layernorm shape=96,65538 dtype=f16 normalized_dims=1", 4},
           Case{"op=groupnorm shape=2,320,63,63 dtype=f16 groups=32", 4},
           Case{"op=layernorm shape=64,100002 normalized_dims=1", 8},
           Case{"op=groupnorm shape=2,64,255,255 groups=32", 8},
           Case{"op=layernorm shape=96,65540 dtype=bf16 normalized_dims=1", 8},
           Case{"op=groupnorm shape=2,128,255,255 dtype=f16 groups=32", 8},
           Case{"op=layernorm shape=512,65536 dtype=f16 normalized_dims=1", 16},
       }) {
    SCOPED_TRACE(c.spec);
    const NormSpec spec = NormSpec::parse(c.spec);
    const KernelPlan p = plan(spec, h200);
    ASSERT_EQ(p.strategy, Strategy::kRowSplit);
    ASSERT_EQ(p.vec * size_of(spec.dtype), c.vector_bytes);
    EXPECT_EQ(p.staged, p.vec >= 4);
    EXPECT_EQ(p.to_string().find("load faster straight into registers") != std::string::npos,
              p.vec < 4);
  }
}

// A split row with a residual of x's own dtype is not prefetched into L2; one with an f32
// residual to 16-bit x is (both measured on the H200).
TEST(PlanRows, SplitRowsWithAResidualOfXsDtypeAreNotPrefetched) {
  const Target h200 = Target::parse("sm_90:132:4814");
  struct Case {
    const char* spec;
    int prefetch;
  };
  for (const Case& c : {
           Case{"op=rmsnorm shape=64,262144 dtype=bf16 normalized_dims=1 affine=weight "
                "residual=bf16",
                0},
           Case{"op=rmsnorm shape=64,262144 normalized_dims=1 affine=weight residual=f32", 0},
           Case{"op=rmsnorm shape=128,131072 dtype=bf16 normalized_dims=1 affine=weight "
                "residual=f32",
                1},
       }) {
    SCOPED_TRACE(c.spec);
    const KernelPlan p = plan(NormSpec::parse(c.spec), h200);
    ASSERT_EQ(p.strategy, Strategy::kRowSplit);
    EXPECT_EQ(p.prefetch, c.prefetch);
    EXPECT_EQ(p.to_string().find("not prefetched into L2") != std::string::npos, c.prefetch == 0);
    EXPECT_EQ(p.to_string().find("is prefetched into L2") != std::string::npos, c.prefetch == 1);
  }
}

// Every split plan, whatever its CTA, on every arch and size of chip: 1024 threads an SM; no
// more CTAs a row than co-reside and than a CTA has threads (exchange.cuh merges one partial a
// thread); a small CTA only where a row takes at most 64 of them; the dynamic shared memory of
// its CTAs an SM within the SM's, beside 2 KiB each for the driver and the static arrays.
TEST(PlanRows, SplitPlansKeepTheirCtaWithinTheSm) {
  int split_plans = 0, small_ctas = 0;
  for (const char* arch : {"sm_80", "sm_90", "sm_90:114", "sm_90:132:4814", "sm_100", "sm_90:16"}) {
    const Target t = Target::parse(arch);
    for (const char* dtype : {"f32", "f16", "bf16"}) {
      for (const std::string& shape_and_op : {
               std::string("op=groupnorm groups=32 shape=1,512,128,128"),
               std::string("op=groupnorm groups=32 shape=2,320,64,64"),
               std::string("op=groupnorm groups=32 shape=1,256,512,512 activation=silu"),
               std::string("op=groupnorm groups=32 shape=2,128,255,255"),
               std::string("op=groupnorm groups=8 shape=4,64,512,512"),
               std::string("op=layernorm shape=8,65536 normalized_dims=1"),
               std::string("op=layernorm shape=8,65537 normalized_dims=1"),
               std::string("op=layernorm shape=4,1048576 normalized_dims=1"),
               std::string("op=layernorm shape=2,64,256,256"),
               std::string("op=rmsnorm shape=8,131072 normalized_dims=1 affine=weight"),
               std::string("op=rmsnorm shape=8,1000003 normalized_dims=1"),
               std::string(
                   "op=rmsnorm shape=8,262144 normalized_dims=1 affine=weight residual=f32"),
           }) {
        const std::string text = shape_and_op + " dtype=" + dtype;
        SCOPED_TRACE(text + " on " + arch);
        const KernelPlan p = plan(NormSpec::parse(text), t);
        if (p.strategy != Strategy::kRowSplit) continue;
        ++split_plans;
        const int per_sm = p.split_blocks_per_sm;
        EXPECT_EQ(p.block_x * per_sm, 1024);
        EXPECT_LE(p.split_chunks, int64_t{per_sm} * t.sm_count);
        EXPECT_LE(p.split_chunks, p.block_x);
        if (p.block_x < 1024) {
          ++small_ctas;
          EXPECT_LE(p.split_chunks, 64);
        }
        EXPECT_LE(int64_t{per_sm} * (p.smem_bytes + 2048),
                  int64_t{arch_facts(t.sm).smem_per_sm_kib} * 1024);
      }
    }
  }
  // The sweep reaches split plans of both kinds.
  EXPECT_GT(split_plans, 100);
  EXPECT_GT(small_ctas, 40);
}

}  // namespace
}  // namespace normjit
