// Every operator x dtype x affine option on the GPU against the float64 reference: fixed
// shapes that exercise each strategy's edges, a randomized sweep of 240 shapes (seed printed,
// NORMJIT_TEST_SEED reproduces it), adversarial values and in-place launches.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "harness.hpp"

namespace normjit::testing {
namespace {

const Dtype kDtypes[] = {Dtype::kF32, Dtype::kF16, Dtype::kBF16};

std::vector<Affine> affines(Op op) {
  if (op == Op::kRmsNorm) return {Affine::kNone, Affine::kWeight};
  return {Affine::kNone, Affine::kWeight, Affine::kBoth};
}

// Worst error per dtype over the whole test, printed at the end for the closing note.
struct Worst {
  double error[3] = {0, 0, 0};
  int dtype_runs[3] = {0, 0, 0};
  int runs = 0;
  void add(Dtype d, double e) {
    error[int(d)] = std::max(error[int(d)], e);
    ++dtype_runs[int(d)];
    ++runs;
  }
  // A dtype that did not run shows "-", not an error of 0.
  void print(const char* what) const {
    std::string line = "[ worst    ] " + std::string(what) + ": " + std::to_string(runs) + " runs";
    const char* names[3] = {"f32", "f16", "bf16"};
    for (int d = 0; d < 3; ++d) {
      char value[32] = "-";
      if (dtype_runs[d] > 0) std::snprintf(value, sizeof value, "%.2e", error[d]);
      line += std::string(d == 0 ? "; " : ", ") + names[d] + " " + value;
    }
    std::printf("%s\n", line.c_str());
  }
};

void check(Engine& engine, const NormSpec& spec, Values values, uint64_t seed, Worst& worst,
           bool in_place = false) {
  const RunResult r = run_and_compare(engine, spec, values, seed, in_place);
  // f32 statistics of data with |mean| >> std lose about 2^-24 * |mean| / std; the tolerance
  // allows that on top of the dtype's own.
  double tol = tolerance(spec.dtype);
  if (values == Values::kLargeMean && spec.dtype == Dtype::kF32) tol = 1e-4;
  EXPECT_TRUE(r.all_finite) << spec.to_string() << " values " << to_string(values);
  EXPECT_LT(r.rel_error, tol) << spec.to_string() << " values " << to_string(values)
                              << (in_place ? " in place" : "");
  worst.add(spec.dtype, r.rel_error);
}

class Ops : public ::testing::Test {
 protected:
  void SetUp() override { NORMJIT_REQUIRE_GPU(); }
};

TEST_F(Ops, FixedShapesEveryOperatorDtypeAndAffine) {
  device::PrimaryContext context;
  Engine engine(test_engine_options());
  Worst worst;
  for (Dtype d : kDtypes) {
    // LayerNorm and RMSNorm over trailing dims: row lengths around each strategy's edges.
    for (Op op : {Op::kLayerNorm, Op::kRmsNorm}) {
      for (Affine a : affines(op)) {
        for (const auto& [shape, k] :
             std::vector<std::pair<std::vector<int64_t>, int>>{{{3, 1}, 1},
                                                               {{2, 3}, 1},
                                                               {{5, 7}, 1},
                                                               {{4, 31}, 1},
                                                               {{3, 64}, 1},
                                                               {{2, 65}, 1},
                                                               {{2, 127}, 1},
                                                               {{3, 1000}, 1},
                                                               {{2, 4097}, 1},
                                                               {{1, 32768}, 1},
                                                               {{2, 32769}, 1},
                                                               {{3, 100000}, 1},
                                                               {{2, 3, 5, 7}, 3},
                                                               {{6, 4, 4}, 2},
                                                               {{1, 1}, 1},
                                                               {{300, 24}, 1}}) {
          check(engine, make(op, shape, d, a, k), Values::kNormal, shape[0] * 31 + k, worst);
        }
      }
    }
    // GroupNorm: G in {1, 2, C}, spatial sizes odd and even, rows split over CTAs; vectors
    // that span two channels (S odd, the group a multiple of the vector: 7x7 maps; split rows
    // of 49146) or several (S = 3 or 1 under a vector of 4 or 8).
    for (Affine a : affines(Op::kGroupNorm)) {
      for (const auto& [shape, g] :
           std::vector<std::pair<std::vector<int64_t>, int64_t>>{{{2, 4, 3, 3}, 1},
                                                                 {{2, 4, 3, 3}, 2},
                                                                 {{2, 4, 3, 3}, 4},
                                                                 {{1, 6, 7}, 3},
                                                                 {{3, 64, 65}, 8},
                                                                 {{2, 32, 16, 16}, 32},
                                                                 {{1, 2, 1}, 2},
                                                                 {{2, 8, 8191}, 2},
                                                                 {{2, 16, 64, 64}, 2},
                                                                 {{1, 7, 1000}, 7},
                                                                 {{2, 64, 7, 7}, 8},
                                                                 {{2, 16, 3}, 2},
                                                                 {{3, 32, 1}, 4},
                                                                 {{2, 12, 8191}, 2}}) {
        check(engine, make(Op::kGroupNorm, shape, d, a, -1, g), Values::kNormal, shape[1] + g,
              worst);
      }
    }
  }
  worst.print("fixed shapes");
}

TEST_F(Ops, RandomizedSweep) {
  device::PrimaryContext context;
  Engine engine(test_engine_options());
  uint64_t seed = std::chrono::system_clock::now().time_since_epoch().count();
  if (const char* s = std::getenv("NORMJIT_TEST_SEED")) seed = std::strtoull(s, nullptr, 10);
  std::printf("[ seed     ] NORMJIT_TEST_SEED=%llu\n", static_cast<unsigned long long>(seed));
  std::mt19937_64 rng(seed);
  auto pick = [&](std::initializer_list<int64_t> from) {
    return *(from.begin() + std::uniform_int_distribution<size_t>(0, from.size() - 1)(rng));
  };
  auto size = [&] {
    return rng() % 2 ? pick({1, 2, 3, 7, 31, 64, 65, 127, 1000, 4097})
                     : int64_t(std::uniform_int_distribution<int>(1, 300)(rng));
  };
  Worst worst;
  for (int i = 0; i < 240; ++i) {
    const Op op = Op(rng() % 3);
    const Dtype d = kDtypes[rng() % 3];
    const auto choices = affines(op);
    const Affine a = choices[rng() % choices.size()];
    const int64_t batch = pick({1, 1, 2, 3, 17});
    NormSpec spec;
    if (op == Op::kGroupNorm || (op == Op::kRmsNorm && rng() % 2)) {
      int64_t c = size() % 200 + 1;
      std::vector<int64_t> shape = {batch, c, size()};
      if (rng() % 2) shape.push_back(pick({1, 2, 3, 5, 8}));
      const int64_t g = op == Op::kGroupNorm ? pick({1, 2, c}) : 0;
      if (g == 2 && c % 2) shape[1] = c = c + 1;
      spec = make(op, shape, d, a, op == Op::kRmsNorm ? 0 : -1, g);
    } else {
      std::vector<int64_t> shape = {batch, size()};
      if (rng() % 2) shape.push_back(pick({1, 2, 3, 7, 64}));
      spec = make(op, shape, d, a, int(1 + rng() % (shape.size() - 1)));
    }
    if (spec.elements() > (int64_t{1} << 24)) continue;  // keep the CPU reference quick
    check(engine, spec, Values::kNormal, seed + i, worst);
  }
  EXPECT_GE(worst.runs, 200);
  worst.print("randomized sweep");
}

TEST_F(Ops, AdversarialValues) {
  device::PrimaryContext context;
  Engine engine(test_engine_options());
  Worst worst;
  for (Values v : {Values::kLargeMean, Values::kTiny, Values::kConstant, Values::kNegative}) {
    for (Dtype d : kDtypes) {
      check(engine, make(Op::kLayerNorm, {3, 1000}, d, Affine::kBoth, 1), v, 1, worst);
      check(engine, make(Op::kLayerNorm, {2, 100000}, d, Affine::kBoth, 1), v, 2, worst);
      check(engine, make(Op::kRmsNorm, {3, 4096}, d, Affine::kWeight, 1), v, 3, worst);
      check(engine, make(Op::kGroupNorm, {2, 8, 33}, d, Affine::kBoth, -1, 4), v, 4, worst);
      check(engine, make(Op::kGroupNorm, {2, 16, 64, 64}, d, Affine::kBoth, -1, 2), v, 5, worst);
    }
  }
  worst.print("adversarial values");
}

TEST_F(Ops, InPlace) {
  device::PrimaryContext context;
  Engine engine(test_engine_options());
  Worst worst;
  check(engine, make(Op::kLayerNorm, {3, 1000}, Dtype::kF32, Affine::kBoth, 1), Values::kNormal, 1,
        worst, /*in_place=*/true);
  check(engine, make(Op::kLayerNorm, {2, 200000}, Dtype::kBF16, Affine::kBoth, 1), Values::kNormal,
        2, worst, /*in_place=*/true);
  check(engine, make(Op::kGroupNorm, {2, 16, 64, 64}, Dtype::kF16, Affine::kBoth, -1, 2),
        Values::kNormal, 3, worst, /*in_place=*/true);
  check(engine, make(Op::kRmsNorm, {5, 333}, Dtype::kF32, Affine::kWeight, 1), Values::kNormal, 4,
        worst, /*in_place=*/true);
}

// GroupNorm groups split over CTAs without a stage (2-byte scalar accesses: S = 4097 is odd, the
// group 67 x 4097 too), several rows per slot: each row's place is computed where it is used
// (a later row once loaded the first row's data again; found by the randomized sweep).
TEST_F(Ops, UnstagedGroupNormSplitRowsEachLoadTheirOwnGroup) {
  device::PrimaryContext context;
  Engine engine(test_engine_options());
  Worst worst;
  const NormSpec spec = make(Op::kGroupNorm, {17, 134, 4097}, Dtype::kF16, Affine::kWeight, -1, 2);
  const KernelPlan p = plan(spec, device::target_of(context.device()));
  ASSERT_EQ(p.strategy, Strategy::kRowSplit);
  ASSERT_FALSE(p.staged);
  check(engine, spec, Values::kNormal, 1, worst);
  const NormSpec both = make(Op::kGroupNorm, {5, 63, 999, 11}, Dtype::kBF16, Affine::kBoth, -1, 3);
  ASSERT_FALSE(plan(both, device::target_of(context.device())).staged);
  check(engine, both, Values::kLargeMean, 2, worst);
  worst.print("unstaged GroupNorm split rows");
}

TEST_F(Ops, RowsLongerThanTheChipHolds) {
  // Past what the co-resident CTAs hold (the streaming fallback), up to 2^28 elements.
  device::PrimaryContext context;
  Engine engine(test_engine_options());
  Worst worst;
  check(engine, make(Op::kLayerNorm, {2, 5000011}, Dtype::kF32, Affine::kBoth, 1),
        Values::kLargeMean, 1, worst);
  check(engine, make(Op::kRmsNorm, {1, 7000003}, Dtype::kF16, Affine::kWeight, 1), Values::kNormal,
        2, worst);
  check(engine, make(Op::kLayerNorm, {1, int64_t{1} << 28}, Dtype::kBF16, Affine::kNone, 1),
        Values::kNormal, 3, worst);
  // Each row over every SM, several rows one after another (generations of the exchange),
  // parts whose last one is short: GroupNorm rows of 16 channels x 360000, odd lengths
  // (scalar accesses), five rows.
  check(engine, make(Op::kGroupNorm, {3, 32, 600, 600}, Dtype::kF32, Affine::kBoth, -1, 2),
        Values::kLargeMean, 4, worst);
  check(engine, make(Op::kLayerNorm, {3, 9000001}, Dtype::kBF16, Affine::kBoth, 1),
        Values::kNegative, 5, worst);
  check(engine, make(Op::kLayerNorm, {5, 8388609}, Dtype::kF32, Affine::kWeight, 1),
        Values::kLargeMean, 6, worst);
  // 16-byte bf16 vectors spanning two channels of an odd spatial size (1001 x 1001).
  check(engine, make(Op::kGroupNorm, {1, 64, 1001, 1001}, Dtype::kBF16, Affine::kBoth, -1, 4),
        Values::kNormal, 7, worst);
  worst.print("rows past the chip");
}

TEST_F(Ops, OneRowFillsTheChip) {
  // Rows split over more than half of the SMs, so one row at a time: with per-element
  // parameters the plan then keeps them in the shared memory a stage would take (LayerNorm),
  // or stages and keeps fewer (RMSNorm with a weight), or (16-bit LayerNorm) halves each CTA's
  // chunk to keep them all beside a smaller stage (123 CTAs, the last chunk partial); against
  // float64, with large means in f32 (bf16 would round mean 1e4, std 1 to one constant) and
  // all-negative values in bf16.
  device::PrimaryContext context;
  Engine engine(test_engine_options());
  Worst worst;
  check(engine, make(Op::kLayerNorm, {3, 3000017}, Dtype::kF32, Affine::kBoth, 1),
        Values::kLargeMean, 1, worst);
  check(engine, make(Op::kLayerNorm, {2, 4194304}, Dtype::kF32, Affine::kBoth, 1),
        Values::kLargeMean, 2, worst);
  check(engine, make(Op::kLayerNorm, {3, 6000000}, Dtype::kBF16, Affine::kBoth, 1),
        Values::kNegative, 3, worst);
  check(engine, make(Op::kLayerNorm, {2, 4000000}, Dtype::kF16, Affine::kWeight, 1),
        Values::kNormal, 4, worst);
  check(engine, make(Op::kRmsNorm, {3, 4000000}, Dtype::kF32, Affine::kWeight, 1), Values::kNormal,
        5, worst);
  check(engine, make(Op::kLayerNorm, {3, 4000000}, Dtype::kBF16, Affine::kBoth, 1),
        Values::kNegative, 6, worst);
  worst.print("one row fills the chip");
}

TEST_F(Ops, SplitRowsInCtasOf512TwoAnSm) {
  // Rows the split kernel cuts into 64 CTAs of 512 threads, two an SM, on every GPU (plan.cpp,
  // half_ctas_pay): LayerNorm and RMSNorm rows of 786432 to 2 Mi elements, f32 GroupNorm groups
  // of 1 Mi; against float64 with large means, negatives and a C not a power of two.
  device::PrimaryContext context;
  const Target target = device::target_of(context.device());
  Engine engine(test_engine_options());
  Worst worst;
  const NormSpec specs[] = {
      make(Op::kLayerNorm, {3, 786432}, Dtype::kF32, Affine::kBoth, 1),
      make(Op::kLayerNorm, {2, 1048576}, Dtype::kBF16, Affine::kBoth, 1),
      make(Op::kRmsNorm, {3, 1500000}, Dtype::kBF16, Affine::kWeight, 1),
      make(Op::kRmsNorm, {2, 1048576}, Dtype::kF32, Affine::kNone, 1),
      make(Op::kGroupNorm, {2, 128, 512, 512}, Dtype::kF32, Affine::kBoth, -1, 32),
      make(Op::kGroupNorm, {1, 96, 512, 512}, Dtype::kF32, Affine::kWeight, -1, 24),
  };
  uint64_t seed = 1;
  for (const NormSpec& spec : specs) {
    const KernelPlan p = plan(spec, target);
    ASSERT_EQ(p.strategy, Strategy::kRowSplit) << spec.to_string();
    EXPECT_EQ(p.block_x, 512) << p.to_string();
    const Values values = spec.dtype == Dtype::kF32 ? Values::kLargeMean : Values::kNegative;
    check(engine, spec, values, seed++, worst);
  }
  EXPECT_EQ(worst.runs, 6);
  worst.print("split rows in CTAs of 512");
}

TEST_F(Ops, DynamicSharedMemoryOfExactlyTheDefaultLimit) {
  // 48 KiB of dynamic shared memory beside a few static bytes is over the default limit,
  // which counts both: the engine must raise the kernel's limit for it as well (it used to
  // only above 48 KiB of dynamic memory, and the launch then found no co-resident CTAs).
  // Rows of 35001 f32: 12 scalar vectors a thread of 1024, each with its weight resident in
  // shared memory (4096 bytes a vector); the row itself is not staged (4-byte vectors).
  device::PrimaryContext context;
  Engine engine(test_engine_options());
  const NormSpec spec = make(Op::kRmsNorm, {3, 35001}, Dtype::kF32, Affine::kWeight, 1);
  const KernelPlan p = plan(spec, device::target_of(context.device()));
  ASSERT_EQ(p.strategy, Strategy::kRowSplit);
  ASSERT_EQ(p.smem_bytes, 48 * 1024) << p.to_string();
  Worst worst;
  check(engine, spec, Values::kNormal, 1, worst);
  check(engine, spec, Values::kLargeMean, 2, worst);
  EXPECT_EQ(worst.runs, 2);
  worst.print("48 KiB of dynamic shared memory");
}

TEST_F(Ops, SplitRowsServeEveryBatchSizeWithOneKernel) {
  device::PrimaryContext context;
  Engine engine(test_engine_options());
  Worst worst;
  // Rows of 200000 elements are split over CTAs; the batch sets how many rows run per wave.
  for (int64_t n : {1, 2, 5, 64, 300}) {
    check(engine, make(Op::kLayerNorm, {n, 200000}, Dtype::kF32, Affine::kBoth, 1), Values::kNormal,
          n, worst);
  }
  const EngineCounters c = engine.counters();
  EXPECT_EQ(c.nvrtc_compiles + c.disk_hits, 1u);
}

}  // namespace
}  // namespace normjit::testing
