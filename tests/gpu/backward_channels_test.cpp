// The backward kernels of the [N, C, *spatial] forms (issue 20) on the GPU: GroupNorm
// (group_backward.cuh, group_nhwc_backward.cuh) and RMSNorm/LayerNorm over dim 1
// (channels_backward.cuh). The forward with save_stats writes the statistics of each row
// (groupnorm: (n, g) at n * G + g; the channel forms: (n, position s) at n * S + s), the backward
// kernel takes them with x, dy and the weight, and dx, dweight and dbias are compared element by
// element with the float64 reference of backward_harness.hpp (BackwardRun; Config says where a
// statistics row's elements and their channels are), once from the statistics the forward saved
// and once from float64 statistics of x. Outputs are poisoned (NaN) first. Kernels are prepared
// in parallel (harness.hpp).
#include <cmath>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "backward_harness.hpp"
#include "harness.hpp"
#include "normjit/normjit.h"
#include "tests/unit/temp_dir.hpp"

namespace normjit::testing {
namespace {

struct Config {
  Op op = Op::kGroupNorm;
  std::vector<int64_t> shape;  // [N, C, *spatial]
  int64_t groups = 0;          // groupnorm
  Dtype dtype = Dtype::kF32;
  Affine affine = Affine::kBoth;
  std::optional<Dtype> param;
  double weight_offset = 0;
  bool nhwc = false;  // layout=nhwc: x [N, *spatial, C] in memory

  NormSpec spec(bool backward) const {
    SpecFields f;
    f.op = op;
    f.shape = shape;
    f.dtype = dtype;
    f.normalized_dims = 0;
    if (op == Op::kGroupNorm) f.groups = groups;
    f.affine = affine;
    f.param_dtype = param;
    f.weight_offset = weight_offset;
    f.save_stats = !backward;
    f.backward = backward;
    if (nhwc) f.layout = Layout::kNhwc;
    return NormSpec::from_fields(f);
  }
  std::string name() const { return spec(true).to_string(); }
  int64_t n() const { return shape[0]; }
  int64_t c() const { return shape[1]; }
  int64_t s() const {
    int64_t p = 1;
    for (size_t i = 2; i < shape.size(); ++i) p *= shape[i];
    return p;
  }
  // What BackwardRun asks (backward_harness.hpp). Rows of the statistics: (n, g) or
  // (n, position); a weight a channel.
  static constexpr bool residual = false;
  static constexpr Activation activation = Activation::kNone;
  int64_t stats_rows() const { return n() * (op == Op::kGroupNorm ? groups : s()); }
  int64_t params() const { return c(); }
  int64_t row_length() const { return op == Op::kGroupNorm ? c() / groups * s() : c(); }
  // Element i of row r: its offset in x.
  int64_t offset(int64_t r, int64_t i) const {
    if (op == Op::kGroupNorm) {
      const int64_t n = r / groups, g = r % groups, cg = c() / groups;
      // Element i of the group: channel g * CG + i / S at position i % S.
      if (nhwc) return (n * s() + i % s()) * c() + g * cg + i / s();
      return (n * c() + g * cg + i / s()) * s() + i % s();
    }
    const int64_t n = r / s(), pos = r % s();
    return nhwc ? r * c() + i : (n * c() + i) * s() + pos;
  }
  // The channel of element i of statistics row r.
  int64_t param_index(int64_t r, int64_t i) const {
    const int64_t at = offset(r, i);
    return nhwc ? at % c() : at / s() % c();
  }
};

using Errors = GradErrors;

// One forward (save_stats) and backward on the device (backward_harness.hpp).
using Backward = BackwardRun<Config>;

void expect_close(const Backward& run, const Config& c, Values values, const std::string& what) {
  const Dtype param = c.param.value_or(c.dtype);
  for (bool saved : {true, false}) {
    const Errors e = run.compare(saved);
    // Against float64 statistics: the f32 mean the forward saves is off by up to 2^-24 |mean|.
    const double slack = !saved && values == Values::kLargeMean ? std::ldexp(1e4, -23) : 0.0;
    const std::string how = what + (saved ? " (saved statistics)" : " (float64 statistics)");
    EXPECT_TRUE(e.finite) << c.name() << " " << how << ": an output is NaN or inf";
    EXPECT_LT(e.dx, tolerance(c.dtype) + slack) << c.name() << " " << how << ": dx";
    // 16-bit x of mean 1e4 and std 1 rounds to multiples of 8 (f16) or 64 (bf16): nearly every
    // element is 1e4, the variance comes from a few outliers and rstd nears 1/sqrt(eps). The f32
    // mean's rounding (2^-24 |mean|) times that rstd then moves every xhat by up to ~0.2, and
    // dweight/dbias (sums over every element) by as much against their terms: a property of f32
    // statistics, not of the kernel, which the saved-statistics comparison above measures.
    if (!saved && values == Values::kLargeMean && size_of(c.dtype) == 2) continue;
    if (c.affine != Affine::kNone) {
      EXPECT_LT(e.dweight, tolerance(param) + slack) << c.name() << " " << how << ": dweight";
    }
    if (c.affine == Affine::kBoth) {
      EXPECT_LT(e.dbias, tolerance(param) + slack) << c.name() << " " << how << ": dbias";
    }
  }
}

// Runs the backward of each config on `values` (one seed each, counting up from `seed`) and
// checks it against float64 with expect_close.
void expect_each_close(Engine& engine, const std::vector<Config>& configs, Values values,
                       uint64_t& seed, const std::string& what) {
  for (const Config& c : configs) {
    Backward run(engine, c, values, seed++);
    run.run();
    expect_close(run, c, values, what);
  }
}

Config group(std::vector<int64_t> shape, int64_t groups, Dtype dtype, Affine affine) {
  Config c;
  c.op = Op::kGroupNorm;
  c.shape = std::move(shape);
  c.groups = groups;
  c.dtype = dtype;
  c.affine = affine;
  return c;
}
Config channels(Op op, std::vector<int64_t> shape, Dtype dtype, Affine affine) {
  Config c;
  c.op = op;
  c.shape = std::move(shape);
  c.dtype = dtype;
  c.affine = affine;
  return c;
}

constexpr Dtype kDtypes[] = {Dtype::kF32, Dtype::kF16, Dtype::kBF16};

// RMSNorm without and with a weight, LayerNorm without and with weight and bias, over dim 1 of
// shape, in every dtype.
void add_every_channel_form(std::vector<Config>& configs, const std::vector<int64_t>& shape) {
  for (Dtype dtype : kDtypes) {
    configs.push_back(channels(Op::kRmsNorm, shape, dtype, Affine::kNone));
    configs.push_back(channels(Op::kRmsNorm, shape, dtype, Affine::kWeight));
    configs.push_back(channels(Op::kLayerNorm, shape, dtype, Affine::kNone));
    configs.push_back(channels(Op::kLayerNorm, shape, dtype, Affine::kBoth));
  }
}

void prepare(Engine& engine, const std::vector<Config>& configs) {
  std::vector<NormSpec> specs;
  for (const Config& c : configs) {
    specs.push_back(c.spec(false));
    specs.push_back(c.spec(true));
  }
  prepare_in_parallel(engine, specs);
}

struct GroupShape {
  std::vector<int64_t> shape;
  int64_t groups;
};

// GroupNorm of every shape in each dtype and affine form (shape by shape, then dtype).
std::vector<Config> every_group_form(const std::vector<GroupShape>& shapes,
                                     const std::vector<Dtype>& dtypes) {
  std::vector<Config> configs;
  for (const GroupShape& s : shapes) {
    for (Dtype dtype : dtypes) {
      for (Affine affine : {Affine::kNone, Affine::kWeight, Affine::kBoth}) {
        configs.push_back(group(s.shape, s.groups, dtype, affine));
      }
    }
  }
  return configs;
}

class BackwardChannelsGpu : public ::testing::Test {
 protected:
  void SetUp() override { NORMJIT_REQUIRE_GPU(); }
};

// GroupNorm: sizes 1, 3, 7, 65, 1000, 4097 in the spatial size, the channels per group and the
// batch; a prime channel of 65537 positions (narrow accesses, 17 units of 16 values a thread in
// 16 bits); odd maps (7x9); Stable Diffusion's shapes; every dtype and affine form.
TEST_F(BackwardChannelsGpu, GroupNormShapesDtypesAndAffineMatchFloat64) {
  device::PrimaryContext context;
  Engine engine(test_engine_options());
  const std::vector<Config> configs = every_group_form(
      {
          {{1, 1, 1}, 1},
          {{3, 6, 1}, 3},
          {{3, 6, 7}, 2},
          {{1, 7, 65}, 7},
          {{2, 4, 1000}, 2},
          {{3, 2, 4097}, 1},
          {{1, 4, 65537}, 2},
          {{7, 64, 7, 9}, 8},
          {{65, 4, 3}, 2},
          {{1, 3000, 1}, 3},
          {{2, 320, 64, 64}, 32},
          {{2, 640, 32, 32}, 32},
          {{1000, 8, 3, 3}, 4},
      },
      {std::begin(kDtypes), std::end(kDtypes)});
  prepare(engine, configs);
  uint64_t seed = 1;
  expect_each_close(engine, configs, Values::kNormal, seed, "normal values");
}

// GroupNorm over 16-bit channels of 16384 positions and more takes units of 4 chunks (a team's
// 16 values a thread each, the sums carried across them): a channel of exactly one unit, units
// whose last chunks lie past the channel's end (20480: a second unit of one chunk; 73728: a
// fifth of two), a last chunk only one thread of the team has (40968 positions: 8 of a chunk of
// 4096), every 16-bit dtype and affine form, adversarial values, and two runs bitwise equal.
// (Each dbias[c] sums N * S values of dy, whose mean is 0.5: kept under f16's 65504.)
TEST_F(BackwardChannelsGpu, ChunkedGroupNormUnitsMatchFloat64) {
  device::PrimaryContext context;
  Engine engine(test_engine_options());
  const std::vector<Config> configs = every_group_form(
      {{{3, 16, 128, 128}, 4}, {{2, 32, 128, 160}, 8}, {{1, 8, 256, 288}, 2}, {{2, 4, 40968}, 2}},
      {Dtype::kF16, Dtype::kBF16});
  prepare(engine, configs);
  uint64_t seed = 7000;
  const auto expect_chunked = [](const Backward& run, const Config& c) {
    const std::string plan = run.backward_kernel().plan_text();
    EXPECT_NE(plan.find("chunks per unit: 4"), std::string::npos) << c.name() << plan;
  };
  for (const Config& c : configs) {
    Backward run(engine, c, Values::kNormal, seed++);
    expect_chunked(run, c);
    run.run();
    expect_close(run, c, Values::kNormal, "normal values");
    expect_same_bits_again(run, c.name());
  }
  for (Values values : {Values::kLargeMean, Values::kTiny, Values::kNegative}) {
    for (const Config& c : {configs[2], configs[17]}) {
      Backward run(engine, c, values, seed++);
      run.run();
      expect_close(run, c, values, to_string(values));
    }
  }
}

// GroupNorm channels last (layout=nhwc: diffusion models trained in channels_last): its own
// kernel (group_nhwc_backward.cuh, checked on the plan) reads x and dy in their memory order,
// every channel of a unit of positions a CTA. Sizes 1, 3, 7, 65, 1000, 4097 in the spatial size,
// the channels per group and the batch; odd channel counts (scalar accesses); Stable Diffusion's
// maps; items larger than a wave (several waves a launch: the dweight accumulators carried from
// wave to wave); every dtype and affine form, f32 parameters with an offset, adversarial values,
// and two runs bitwise equal.
TEST_F(BackwardChannelsGpu, GroupNormInNhwcMatchesFloat64) {
  device::PrimaryContext context;
  const Target target = device::target_of(context.device());
  Engine engine(test_engine_options());
  std::vector<Config> configs = every_group_form(
      {
          {{1, 1, 1}, 1},
          {{3, 6, 1}, 3},
          {{3, 6, 7}, 2},
          {{1, 7, 65}, 7},
          {{2, 4, 1000}, 2},
          {{3, 2, 4097}, 1},
          {{7, 64, 7, 9}, 8},
          {{65, 4, 3}, 2},
          {{1, 1000, 3}, 8},
          {{2, 96, 5, 5, 5}, 3},
          {{2, 320, 64, 64}, 32},
          {{2, 640, 32, 32}, 32},
          {{2, 1280, 8, 8}, 32},
          {{1000, 8, 3, 3}, 4},
      },
      {std::begin(kDtypes), std::end(kDtypes)});
  // Several waves: f32 items of 8 MiB of x and dy (2 a wave), 16-bit ones of 8 MiB (1 a wave).
  for (Affine affine : {Affine::kWeight, Affine::kBoth}) {
    configs.push_back(group({5, 64, 128, 128}, 8, Dtype::kF32, affine));
    configs.push_back(group({3, 128, 128, 128}, 32, Dtype::kBF16, affine));
  }
  Config offset = group({4, 320, 16, 16}, 32, Dtype::kBF16, Affine::kBoth);
  offset.param = Dtype::kF32;
  offset.weight_offset = 1.0;
  configs.push_back(offset);
  for (Config& c : configs) {
    c.nhwc = true;
    const KernelPlan p = plan(c.spec(true), target);
    EXPECT_EQ(p.strategy, Strategy::kGroupNhwcBackward)
        << c.name() << ": " << to_string(p.strategy);
  }
  EXPECT_GT(plan(configs[configs.size() - 2].spec(true), target).wave_rows, 0);
  EXPECT_LT(plan(configs[configs.size() - 2].spec(true), target).wave_rows, 3);
  prepare(engine, configs);
  uint64_t seed = 2600;
  expect_each_close(engine, configs, Values::kNormal, seed, "normal values");
  for (Values values : {Values::kLargeMean, Values::kTiny, Values::kNegative}) {
    for (const Config& c : {configs[4 * 9 + 8], configs[10 * 9 + 5], configs[10 * 9 + 8]}) {
      Backward run(engine, c, values, seed++);
      run.run();
      expect_close(run, c, values, to_string(values));
    }
  }
  for (const Config& c : {configs[10 * 9 + 8], configs[configs.size() - 2]}) {
    Backward run(engine, c, Values::kNormal, seed++);
    run.run();
    expect_same_bits_again(run, c.name());
  }
}

// The channel forms: RMSNorm and LayerNorm over dim 1 (LayerNorm2d), the same sizes in C and S.
TEST_F(BackwardChannelsGpu, ChannelFormsShapesDtypesAndAffineMatchFloat64) {
  device::PrimaryContext context;
  Engine engine(test_engine_options());
  const std::vector<int64_t> shapes[] = {{1, 1, 1},     {3, 3, 7},       {2, 7, 65},
                                         {1, 65, 3, 3}, {3, 64, 7, 9},   {2, 1000, 3},
                                         {1, 3, 4097},  {2, 96, 56, 56}, {65, 16, 5}};
  std::vector<Config> configs;
  for (const auto& shape : shapes) {
    add_every_channel_form(configs, shape);
  }
  prepare(engine, configs);
  uint64_t seed = 1000;
  expect_each_close(engine, configs, Values::kNormal, seed, "normal values");
}

// The channel forms channels last (layout=nhwc: ConvNeXt's LayerNorm2d, timm's channels_last
// models): each position's C channels are a contiguous row, differentiated by the row backward
// kernel over N x S rows (checked on the plan), the statistics per (n, position) as the forward
// saved them; every dtype and affine form, short and long rows (split over CTAs), adversarial
// values.
TEST_F(BackwardChannelsGpu, ChannelFormsInNhwcDifferentiateAsRows) {
  device::PrimaryContext context;
  const Target target = device::target_of(context.device());
  Engine engine(test_engine_options());
  const std::vector<int64_t> shapes[] = {{1, 1, 1},     {3, 3, 7},       {2, 7, 65},
                                         {1, 65, 3, 3}, {2, 96, 56, 56}, {3, 768, 7, 7},
                                         {2, 1000, 3},  {1, 3, 4097},    {2, 20000, 3}};
  std::vector<Config> configs;
  for (const auto& shape : shapes) {
    add_every_channel_form(configs, shape);
  }
  for (Config& c : configs) {
    c.nhwc = true;
    const KernelPlan p = plan(c.spec(true), target);
    EXPECT_TRUE(p.strategy == Strategy::kRowBackward || p.strategy == Strategy::kRowSplitBackward)
        << c.name() << ": " << to_string(p.strategy);
    EXPECT_EQ(p.rows_per_item, c.s()) << c.name();
  }
  prepare(engine, configs);
  uint64_t seed = 1700;
  expect_each_close(engine, configs, Values::kNormal, seed, "normal values");
  for (Values values : {Values::kLargeMean, Values::kTiny, Values::kNegative}) {
    Config c = channels(Op::kLayerNorm, {4, 768, 7, 7}, Dtype::kBF16, Affine::kBoth);
    c.nhwc = true;
    prepare(engine, {c});
    Backward run(engine, c, values, seed++);
    run.run();
    expect_close(run, c, values, to_string(values));
  }
}

// The channel forms with one position per item (S = 1: rmsnorm's default on [N, C], LayerNorm2d
// on a pooled [N, C, 1, 1]): the backward runs the row backward kernels (checked on the plan),
// rows in registers and split over CTAs, every dtype and affine form, f32 parameters with an
// offset, adversarial values.
TEST_F(BackwardChannelsGpu, ChannelFormsOfOnePositionDifferentiateAsRows) {
  device::PrimaryContext context;
  const Target target = device::target_of(context.device());
  Engine engine(test_engine_options());
  const std::vector<int64_t> shapes[] = {{1, 1},          {3, 7},     {5, 65},    {7, 1021, 1, 1},
                                         {32, 768, 1, 1}, {64, 4096}, {2, 131072}};
  std::vector<Config> configs;
  for (const auto& shape : shapes) {
    add_every_channel_form(configs, shape);
    Config offset = channels(Op::kRmsNorm, shape, Dtype::kBF16, Affine::kWeight);
    offset.param = Dtype::kF32;
    offset.weight_offset = 1.0;
    configs.push_back(offset);
  }
  for (const Config& c : configs) {
    const Strategy strategy = plan(c.spec(true), target).strategy;
    EXPECT_TRUE(strategy == Strategy::kRowBackward || strategy == Strategy::kRowSplitBackward)
        << c.name() << ": " << to_string(strategy);
  }
  prepare(engine, configs);
  uint64_t seed = 1500;
  expect_each_close(engine, configs, Values::kNormal, seed, "normal values");
  for (Values values : {Values::kLargeMean, Values::kTiny, Values::kConstant, Values::kNegative}) {
    for (const Config& c : {channels(Op::kLayerNorm, {32, 768, 1, 1}, Dtype::kBF16, Affine::kBoth),
                            channels(Op::kRmsNorm, {3, 4099}, Dtype::kF32, Affine::kWeight)}) {
      prepare(engine, {c});
      Backward run(engine, c, values, seed++);
      run.run();
      expect_close(run, c, values, to_string(values));
    }
  }
}

TEST_F(BackwardChannelsGpu, AdversarialValues) {
  device::PrimaryContext context;
  Engine engine(test_engine_options());
  std::vector<Config> configs;
  for (Dtype dtype : kDtypes) {
    configs.push_back(group({4, 64, 7, 9}, 8, dtype, Affine::kBoth));
    configs.push_back(group({2, 8, 4097}, 2, dtype, Affine::kWeight));
    configs.push_back(channels(Op::kRmsNorm, {4, 64, 7, 9}, dtype, Affine::kWeight));
    configs.push_back(channels(Op::kLayerNorm, {4, 65, 33}, dtype, Affine::kBoth));
  }
  prepare(engine, configs);
  uint64_t seed = 2000;
  for (Values values : {Values::kLargeMean, Values::kTiny, Values::kConstant, Values::kNegative}) {
    expect_each_close(engine, configs, values, seed, to_string(values));
  }
}

TEST_F(BackwardChannelsGpu, ParamDtypeAndWeightOffset) {
  device::PrimaryContext context;
  Engine engine(test_engine_options());
  std::vector<Config> configs;
  for (Dtype dtype : {Dtype::kF16, Dtype::kBF16}) {
    for (double offset : {0.0, 1.0}) {
      Config g = group({2, 320, 16, 16}, 32, dtype, Affine::kBoth);
      Config r = channels(Op::kRmsNorm, {2, 64, 9, 9}, dtype, Affine::kWeight);
      Config l = channels(Op::kLayerNorm, {2, 96, 14, 14}, dtype, Affine::kBoth);
      for (Config* c : {&g, &r, &l}) {
        c->param = Dtype::kF32;
        c->weight_offset = offset;
        configs.push_back(*c);
      }
    }
  }
  prepare(engine, configs);
  uint64_t seed = 3000;
  expect_each_close(engine, configs, Values::kNormal, seed, "f32 parameters");
}

// The seeds' backward kernels (GroupNorm [112, 64, 512, 512], 8 groups of 2 Mi elements, with
// weight and bias; RMSNorm over dim 1 of the same x, no weight), f32 and bf16: the kernel of the
// seed spec serves every batch (the same key), so it runs here on 4 batch items, which keeps the
// float64 reference and the host copies small: everything against float64 from the saved
// statistics, and two runs bitwise equal.
TEST_F(BackwardChannelsGpu, SeedKernels) {
  device::PrimaryContext context;
  Engine engine(test_engine_options());
  std::vector<Config> seeds;
  for (Dtype dtype : {Dtype::kF32, Dtype::kBF16}) {
    seeds.push_back(group({112, 64, 512, 512}, 8, dtype, Affine::kBoth));
    seeds.push_back(channels(Op::kRmsNorm, {112, 64, 512, 512}, dtype, Affine::kNone));
  }
  std::vector<Config> configs = seeds;
  for (Config& c : configs) c.shape[0] = 4;
  prepare(engine, configs);
  uint64_t seed = 4000;
  for (size_t i = 0; i < configs.size(); ++i) {
    const Config& c = configs[i];
    EXPECT_EQ(engine.prepare(c.spec(true)).key(), engine.prepare(seeds[i].spec(true)).key())
        << seeds[i].name();
    Backward run(engine, c, Values::kNormal, seed++);
    run.run();
    const Errors e = run.compare(/*saved=*/true);
    EXPECT_TRUE(e.finite) << c.name();
    EXPECT_LT(e.dx, tolerance(c.dtype)) << c.name();
    if (c.affine != Affine::kNone) {
      EXPECT_LT(e.dweight, tolerance(c.dtype)) << c.name();
    }
    if (c.affine == Affine::kBoth) {
      EXPECT_LT(e.dbias, tolerance(c.dtype)) << c.name();
    }
    expect_same_bits_again(run, c.name());
  }
}

// No floating-point atomics: the same inputs give the same bits, run after run and on another
// stream (its own workspace).
TEST_F(BackwardChannelsGpu, DeterministicBitsAcrossRunsAndStreams) {
  device::PrimaryContext context;
  Engine engine(test_engine_options());
  const std::vector<Config> configs = {
      group({64, 320, 32, 32}, 32, Dtype::kBF16, Affine::kBoth),
      group({300, 64, 7, 9}, 8, Dtype::kF32, Affine::kWeight),
      channels(Op::kRmsNorm, {64, 64, 32, 32}, Dtype::kF32, Affine::kWeight),
      channels(Op::kLayerNorm, {64, 96, 28, 28}, Dtype::kBF16, Affine::kBoth),
  };
  prepare(engine, configs);
  uint64_t seed = 5000;
  for (const Config& c : configs) {
    Backward run(engine, c, Values::kNormal, seed++);
    run.run();
    expect_same_bits_again(run, c.name(), 2, /*on_another_stream=*/true);
  }
}

// Graph-safe: captured on a stream it never used, replays with new dy correct each time (the
// workspace exists before the capture and needs no reset). Channels-last GroupNorm too (its own
// kernel), also of several waves a launch (the dweight accumulators start afresh each launch).
TEST_F(BackwardChannelsGpu, CudaGraphOnAFreshStreamReplaysWithNewInputs) {
  device::PrimaryContext context;
  Engine engine(test_engine_options());
  std::vector<Config> configs = {
      group({2, 320, 32, 32}, 32, Dtype::kBF16, Affine::kBoth),
      channels(Op::kLayerNorm, {4, 96, 28, 28}, Dtype::kBF16, Affine::kBoth),
      group({2, 320, 32, 32}, 32, Dtype::kBF16, Affine::kBoth),
      group({3, 128, 128, 128}, 32, Dtype::kBF16, Affine::kBoth),
  };
  configs[2].nhwc = configs[3].nhwc = true;
  prepare(engine, configs);
  for (const Config& c : configs) {
    Backward run(engine, c, Values::kNormal, 6000);
    run.run();
    expect_close(run, c, Values::kNormal, "eager");
    expect_graph_replays(run, 6100, [&](const std::string& replay) {
      const Errors e = run.compare(/*saved=*/true);
      const std::string what = c.name() + " " + replay;
      EXPECT_TRUE(e.finite) << what;
      EXPECT_LT(e.dx, tolerance(c.dtype)) << what << ": dx";
      EXPECT_LT(e.dweight, tolerance(c.dtype)) << what << ": dweight";
      EXPECT_LT(e.dbias, tolerance(c.dtype)) << what << ": dbias";
    });
  }
}

// The backward of GroupNorm over f32 channels of 65536 positions and more (16-bit ones of 262144
// and more, in their chunked units) streams from DRAM on a part of 4 TB/s and more (an H200) and
// keeps its L2 waves below that (an H100). An engine told the H200's bandwidth plans the streamed
// kernel on any GPU, so it is tested wherever the suite runs: the seed's kernel (at batch 4), a
// prime channel length (scalar accesses) and 32 groups; bf16 maps of 512 x 512 and an f16 channel
// of 270336 positions (a last unit of 2 chunks), against float64 with ordinary and adversarial
// values, two runs bitwise equal, and replayed from a CUDA graph captured on a fresh stream.
TEST_F(BackwardChannelsGpu, StreamedGroupNormMatchesFloat64OnAnyGpu) {
  device::PrimaryContext context;
  EngineOptions fast = test_engine_options();
  fast.dram_gbps = 4814;
  Engine engine(fast);
  const std::vector<Config> configs = {
      group({4, 64, 512, 512}, 8, Dtype::kF32, Affine::kBoth),
      group({3, 6, 65537}, 3, Dtype::kF32, Affine::kWeight),
      group({2, 64, 256, 256}, 32, Dtype::kF32, Affine::kNone),
      group({2, 16, 512, 512}, 4, Dtype::kBF16, Affine::kBoth),
      group({2, 4, 270336}, 2, Dtype::kF16, Affine::kWeight),
  };
  prepare(engine, configs);
  for (const Config& c : configs) {
    EXPECT_NE(engine.prepare(c.spec(true)).plan_text().find("streamed (DRAM of 4814 GB/s"),
              std::string::npos)
        << c.name();
  }
  EngineOptions slow = test_engine_options();
  slow.dram_gbps = 3352;
  EXPECT_EQ(Engine(slow).prepare(configs[0].spec(true)).plan_text().find("streamed"),
            std::string::npos);
  uint64_t seed = 8000;
  for (Values values : {Values::kNormal, Values::kLargeMean, Values::kNegative}) {
    for (const Config& c : configs) {
      Backward run(engine, c, values, seed++);
      run.run();
      expect_close(run, c, values, to_string(values));
      if (values != Values::kNormal) continue;
      expect_same_bits_again(run, c.name());
      device::Stream stream;
      const CapturedGraph graph(stream.get(), [&] { run.backward(stream.get()); });
      run.new_dy(seed + 100);
      run.poison();
      graph.replay(stream.get());
      NORMJIT_CU(driver::api().cuStreamSynchronize(stream.get()));
      const Errors e = run.compare(/*saved=*/true);
      EXPECT_TRUE(e.finite) << c.name() << " replayed";
      EXPECT_LT(e.dx, tolerance(c.dtype)) << c.name() << " replayed";
      if (c.affine != Affine::kNone) {
        EXPECT_LT(e.dweight, tolerance(c.dtype)) << c.name() << " replayed";
      }
    }
  }
}

// A launch over fewer batch items than the spec's shape: the statistics, dx and the sums cover
// exactly those (the kernel serves every batch).
// The bandwidth of a C caller's normjit_engine_config reaches the plan: engines sharing one cache
// folder, told the H200's bandwidth, then the H100's, then the H200's again, prepare the backward
// of f32 channels of 65536 positions (streamed at the first, waves at the second): the second
// compiles its own kernel (another plan, another key), the third finds the first one's.
TEST_F(BackwardChannelsGpu, CApiEngineConfigPlansForItsBandwidth) {
  device::PrimaryContext context;  // current on this thread: the C engines take it
  TempDir dir;
  const char* spec = "op=groupnorm shape=2,16,256,256 dtype=f32 groups=4 affine=both backward=true";
  uint64_t compiles[3] = {};
  const int bandwidths[3] = {4814, 3352, 4814};
  for (int i = 0; i < 3; ++i) {
    normjit_engine_config config;
    normjit_engine_config_init(&config);
    config.options.cache_dir = dir.path().c_str();
    config.dram_gbps = bandwidths[i];
    normjit_engine* e = nullptr;
    ASSERT_EQ(normjit_engine_create_ex(&config, &e), NORMJIT_OK) << normjit_last_error();
    normjit_kernel* kernel = nullptr;
    EXPECT_EQ(normjit_prepare(e, spec, &kernel), NORMJIT_OK) << normjit_last_error();
    EXPECT_EQ(normjit_engine_counters(e, &compiles[i], nullptr, nullptr), NORMJIT_OK);
    normjit_engine_destroy(e);
  }
  EXPECT_GE(compiles[0], 1u);
  EXPECT_GE(compiles[1], 1u) << "the H100's bandwidth plans another kernel";
  EXPECT_EQ(compiles[2], 0u) << "the H200's kernel again, from the cache";
}

// NORMJIT_DRAM_GBPS plans an engine whose options leave dram_gbps at 0 for that bandwidth;
// options that name one keep theirs.
TEST_F(BackwardChannelsGpu, DramBandwidthFromTheEnvironment) {
  device::PrimaryContext context;
  const NormSpec spec = group({2, 16, 256, 256}, 4, Dtype::kF32, Affine::kBoth).spec(true);
  const auto streamed = [&](int option) {
    EngineOptions o = test_engine_options();
    o.dram_gbps = option;
    return Engine(o).prepare(spec).plan_text().find("streamed (DRAM of 4814 GB/s") !=
           std::string::npos;
  };
  ::setenv("NORMJIT_DRAM_GBPS", "4814", 1);
  EXPECT_TRUE(streamed(0));
  EXPECT_FALSE(streamed(3352));
  ::setenv("NORMJIT_DRAM_GBPS", "3352", 1);
  EXPECT_FALSE(streamed(0));
  EXPECT_TRUE(streamed(4814));
  ::unsetenv("NORMJIT_DRAM_GBPS");
}

TEST_F(BackwardChannelsGpu, SmallerBatchThanTheSpec) {
  device::PrimaryContext context;
  Engine engine(test_engine_options());
  Config big = group({8, 64, 7, 9}, 8, Dtype::kF32, Affine::kBoth);
  Config small = big;
  small.shape[0] = 3;
  // The same kernel: the batch is not part of the spec's kernel.
  EXPECT_EQ(engine.prepare(big.spec(true)).key(), engine.prepare(small.spec(true)).key());
  Backward run(engine, small, Values::kNormal, 7000);
  run.run();
  expect_close(run, small, Values::kNormal, "batch 3");
}

}  // namespace
}  // namespace normjit::testing
