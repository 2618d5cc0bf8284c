// The backward kernels (issue 20) on the GPU: the forward with save_stats writes each row's mean
// and rstd, the backward kernel takes them with x, dy and the weight, and dx, dweight and dbias
// are compared element by element with the float64 reference of backward_harness.hpp
// (BackwardRun), once from the statistics the forward saved (what the backward kernel is given:
// it must be as exact as f32 arithmetic allows) and once from float64 statistics of x (the
// forward and backward together; with |mean| >> std the f32 mean the forward saves is itself
// off by up to half an ulp of the mean, so that check allows 2^-23 |mean| / std more).
// Outputs are poisoned (NaN) first, so an element left unwritten cannot pass. dweight and
// dbias are summed without floating-point atomics: two runs give the same bits.
// With a residual (the fused add's backward), x stands for h and the backward spec's kernel
// adds dh (random, in x's dtype) to dx: the reference's dx is the norm's plus dh.
// The last section (Activation*): the backward of a forward with an activation (silu, gelu),
// dy taken through its derivative, on every op, form and layout.
#include <cmath>
#include <cstring>
#include <functional>
#include <optional>
#include <set>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "backward_harness.hpp"
#include "harness.hpp"
#include "normjit/normjit.h"

namespace normjit::testing {
namespace {

struct Config {
  Op op = Op::kLayerNorm;
  int64_t rows = 1, hidden = 1;
  Dtype dtype = Dtype::kF32;
  Affine affine = Affine::kBoth;
  std::optional<Dtype> param;  // nullopt: x's dtype
  double weight_offset = 0;
  std::vector<int64_t> normalized;  // the normalized dims, their product `hidden`; empty: {hidden}
  bool residual = false;            // the backward spec's residual (x's dtype): dh added to dx

  NormSpec spec(bool backward) const {
    SpecFields f;
    f.op = op;
    std::vector<int64_t> shape = {rows};
    if (normalized.empty()) {
      shape.push_back(hidden);
    } else {
      shape.insert(shape.end(), normalized.begin(), normalized.end());
    }
    f.shape = shape;
    f.dtype = dtype;
    f.normalized_dims = normalized.empty() ? 1 : int(normalized.size());
    f.affine = affine;
    f.param_dtype = param;
    f.weight_offset = weight_offset;
    f.save_stats = !backward;
    f.backward = backward;
    if (backward && residual) f.residual = dtype;
    return NormSpec::from_fields(f);
  }
  std::string name() const { return spec(true).to_string(); }

  // What BackwardRun asks (backward_harness.hpp): rows of `hidden` elements, a weight a column.
  static constexpr Activation activation = Activation::kNone;
  int64_t stats_rows() const { return rows; }
  int64_t row_length() const { return hidden; }
  int64_t params() const { return hidden; }
  int64_t offset(int64_t r, int64_t i) const { return r * hidden + i; }
  int64_t param_index(int64_t, int64_t i) const { return i; }
};

using Errors = GradErrors;

// One forward (save_stats) and backward on the device, with the host's rounded copies of every
// input for the float64 reference (backward_harness.hpp).
using Backward = BackwardRun<Config>;

double tolerance_of(Dtype dtype) { return tolerance(dtype); }

// Against the saved statistics: f32 arithmetic, and the outputs' rounding.
void expect_exact(const Backward& run, const Config& c, const std::string& what) {
  const Errors e = run.compare(/*saved=*/true);
  const Dtype param = c.param.value_or(c.dtype);
  EXPECT_TRUE(e.finite) << c.name() << " " << what << ": an output is NaN or inf";
  EXPECT_LT(e.dx, tolerance_of(c.dtype)) << c.name() << " " << what << ": dx";
  if (c.affine != Affine::kNone) {
    EXPECT_LT(e.dweight, tolerance_of(param)) << c.name() << " " << what << ": dweight";
  }
  if (c.affine == Affine::kBoth) {
    EXPECT_LT(e.dbias, tolerance_of(param)) << c.name() << " " << what << ": dbias";
  }
}

// Against float64 statistics of x (forward and backward together).
void expect_chain(const Backward& run, const Config& c, Values values, const std::string& what) {
  const Errors e = run.compare(/*saved=*/false);
  // The f32 mean the forward saves is off by up to 2^-24 |mean|; with std 1 and mean 1e4 that
  // shifts every xhat by about 6e-4.
  const double slack = values == Values::kLargeMean ? std::ldexp(1e4, -23) : 0.0;
  const Dtype param = c.param.value_or(c.dtype);
  EXPECT_TRUE(e.finite) << c.name() << " " << what;
  EXPECT_LT(e.dx, tolerance_of(c.dtype) + slack) << c.name() << " " << what << ": dx";
  if (c.affine != Affine::kNone) {
    EXPECT_LT(e.dweight, tolerance_of(param) + slack) << c.name() << " " << what << ": dweight";
  }
  if (c.affine == Affine::kBoth) {
    EXPECT_LT(e.dbias, tolerance_of(param) + slack) << c.name() << " " << what << ": dbias";
  }
}

struct OpAffine {
  Op op;
  Affine affine;
};
constexpr OpAffine kForms[] = {{Op::kRmsNorm, Affine::kNone},
                               {Op::kRmsNorm, Affine::kWeight},
                               {Op::kLayerNorm, Affine::kNone},
                               {Op::kLayerNorm, Affine::kWeight},
                               {Op::kLayerNorm, Affine::kBoth}};
constexpr Dtype kDtypes[] = {Dtype::kF32, Dtype::kF16, Dtype::kBF16};

class BackwardGpu : public ::testing::Test {
 protected:
  void SetUp() override { NORMJIT_REQUIRE_GPU(); }
};

// Every form x dtype x hidden x rows (rows of 1, a few, many), the residual as given.
std::vector<Config> sweep(std::initializer_list<int64_t> hiddens,
                          std::initializer_list<int64_t> rows, bool residual = false) {
  std::vector<Config> configs;
  for (int64_t hidden : hiddens) {
    for (Dtype dtype : kDtypes) {
      for (const OpAffine& form : kForms) {
        for (int64_t r : rows) {
          Config c;
          c.op = form.op;
          c.affine = form.affine;
          c.dtype = dtype;
          c.hidden = hidden;
          c.rows = r;
          c.residual = residual;
          configs.push_back(c);
        }
      }
    }
  }
  return configs;
}

// Prepares every config's forward and backward kernels at once (NVRTC in parallel), then runs
// each (seeds from `seed` on) against both references; `check`, when given, first looks at each
// run (its plan).
void expect_every_config_matches(
    Engine& engine, const std::vector<Config>& configs, uint64_t seed,
    const std::function<void(const Backward&, const Config&)>& check = {}) {
  std::vector<NormSpec> specs;
  for (const Config& c : configs) {
    specs.push_back(c.spec(false));
    specs.push_back(c.spec(true));
  }
  prepare_in_parallel(engine, specs);
  for (const Config& c : configs) {
    Backward run(engine, c, Values::kNormal, seed++);
    if (check) check(run, c);
    run.run();
    expect_exact(run, c, "saved statistics");
    expect_chain(run, c, Values::kNormal, "float64 statistics");
  }
}

TEST_F(BackwardGpu, EveryHiddenBatchDtypeAndAffineMatchesFloat64) {
  device::PrimaryContext context;
  Engine engine(test_engine_options());
  // 3072: a team of 256 threads in every dtype, two teams a CTA (launches of at most 2048 rows).
  expect_every_config_matches(engine, sweep({1, 3, 7, 65, 1000, 3072, 4097, 8192}, {1, 3, 1000}),
                              1);
}

TEST_F(BackwardGpu, AdversarialValues) {
  device::PrimaryContext context;
  Engine engine(test_engine_options());
  uint64_t seed = 100;
  for (Values values : {Values::kLargeMean, Values::kTiny, Values::kConstant, Values::kNegative}) {
    for (Dtype dtype : kDtypes) {
      for (const OpAffine& form : kForms) {
        for (int64_t hidden : {7, 1000, 4097}) {
          Config c;
          c.op = form.op;
          c.affine = form.affine;
          c.dtype = dtype;
          c.hidden = hidden;
          c.rows = 64;
          Backward run(engine, c, values, seed++);
          run.run();
          expect_exact(run, c, to_string(values));
          expect_chain(run, c, values, to_string(values));
        }
      }
    }
  }
}

TEST_F(BackwardGpu, ParamDtypeAndWeightOffset) {
  device::PrimaryContext context;
  Engine engine(test_engine_options());
  uint64_t seed = 200;
  for (Dtype dtype : {Dtype::kF16, Dtype::kBF16}) {
    for (const OpAffine& form : {kForms[1], kForms[3], kForms[4]}) {
      for (double offset : {0.0, 1.0}) {
        for (int64_t hidden : {65, 4096}) {
          Config c;
          c.op = form.op;
          c.affine = form.affine;
          c.dtype = dtype;
          c.param = Dtype::kF32;
          c.weight_offset = offset;
          c.hidden = hidden;
          c.rows = 300;
          Backward run(engine, c, Values::kNormal, seed++);
          run.run();
          expect_exact(run, c, "f32 parameters");
          expect_chain(run, c, Values::kNormal, "f32 parameters");
        }
      }
    }
  }
  // f32 x with 16-bit parameters: the backward of normjit.torch's add_rms_norm and
  // add_layer_norm on an f32 h (an f32 residual) beside the parameters of a 16-bit model.
  for (Dtype param : {Dtype::kF16, Dtype::kBF16}) {
    for (const OpAffine& form : {kForms[1], kForms[4]}) {
      for (int64_t hidden : {7, 4096}) {
        Config c;
        c.op = form.op;
        c.affine = form.affine;
        c.dtype = Dtype::kF32;
        c.param = param;
        c.hidden = hidden;
        c.rows = 300;
        Backward run(engine, c, Values::kNormal, seed++);
        run.run();
        expect_exact(run, c, "16-bit parameters of f32 x");
        expect_chain(run, c, Values::kNormal, "16-bit parameters of f32 x");
      }
    }
  }
  // The offset with parameters in x's dtype.
  Config c;
  c.op = Op::kRmsNorm;
  c.affine = Affine::kWeight;
  c.dtype = Dtype::kBF16;
  c.weight_offset = 1.0;
  c.hidden = 2048;
  c.rows = 100;
  Backward run(engine, c, Values::kNormal, seed++);
  run.run();
  expect_exact(run, c, "weight offset");
}

TEST_F(BackwardGpu, InPlaceDxOverDy) {
  device::PrimaryContext context;
  Engine engine(test_engine_options());
  // 768: four teams of 64 a CTA, each holding its next row's dy in registers while it writes dx.
  for (const OpAffine& form : {kForms[1], kForms[4]}) {
    for (int64_t hidden : {7, 768, 4096}) {
      Config c;
      c.op = form.op;
      c.affine = form.affine;
      c.dtype = Dtype::kBF16;
      c.hidden = hidden;
      c.rows = 333;
      Backward run(engine, c, Values::kNormal, 300 + hidden);
      run.run(/*in_place=*/true);
      const Errors e = run.compare(/*saved=*/true, &run.dy());
      EXPECT_TRUE(e.finite) << c.name();
      EXPECT_LT(e.dx, tolerance(c.dtype)) << c.name();
      EXPECT_LT(e.dweight, tolerance(c.dtype)) << c.name();
    }
  }
}

// No floating-point atomics: the same inputs give the same bits, run after run, on other
// streams (their own workspaces) and in a CUDA graph.
TEST_F(BackwardGpu, DeterministicBitsAcrossRunsAndStreams) {
  device::PrimaryContext context;
  Engine engine(test_engine_options());
  for (const OpAffine& form : {kForms[1], kForms[4]}) {
    for (Dtype dtype : {Dtype::kF32, Dtype::kBF16}) {
      for (int64_t hidden : {65, 768, 4096, 8192}) {  // 768: CTAs of four teams
        Config c;
        c.op = form.op;
        c.affine = form.affine;
        c.dtype = dtype;
        c.hidden = hidden;
        c.rows = 4096;  // enough rows that every CTA the device holds takes several
        Backward run(engine, c, Values::kNormal, 400 + hidden);
        run.run();
        expect_exact(run, c, "first run");
        expect_same_bits_again(run, c.name(), 3, /*on_another_stream=*/true);
      }
    }
  }
}

// A row's dx does not depend on how many rows the launch has (its dweight does: it sums them).
// Rows of 4096 bf16 and 3072 f16 (teams of 256 threads): more than 2048 rows run one team a
// CTA, the first three rows two teams a CTA (the few-rows class's kernel), the same dx bits;
// bf16 rows of 1024 in CTAs of four teams of 64, each team holding its next row in registers.
TEST_F(BackwardGpu, DxOfARowDoesNotDependOnTheBatch) {
  device::PrimaryContext context;
  Engine engine(test_engine_options());
  struct Case {
    Dtype dtype;
    int64_t hidden, rows;
  };
  for (const Case& k : {Case{Dtype::kF32, 1000, 2000}, Case{Dtype::kBF16, 4096, 3000},
                        Case{Dtype::kF16, 3072, 2100}, Case{Dtype::kBF16, 1024, 5000}}) {
    Config c;
    c.op = Op::kLayerNorm;
    c.affine = Affine::kBoth;
    c.dtype = k.dtype;
    c.hidden = k.hidden;
    c.rows = k.rows;
    Backward run(engine, c, Values::kNormal, 500);
    run.run();
    const std::vector<unsigned char> all = download(run.dx());
    BackwardArgs a = run.args();
    a.batch = 3;  // the first three rows only
    run.poison();
    run.backward_kernel().launch_backward(a, nullptr);
    NORMJIT_CU(driver::api().cuCtxSynchronize());
    const std::vector<unsigned char> three = download(run.dx());
    const size_t bytes = size_t(3 * c.hidden) * size_of(c.dtype);
    EXPECT_EQ(std::memcmp(all.data(), three.data(), bytes), 0) << c.spec(true).to_string();
  }
}

// Graph-safe: the backward captured on a stream it never used, its replays with new dy in the
// captured buffer correct each time (the workspace's barrier counter needs no reset).
TEST_F(BackwardGpu, CudaGraphOnAFreshStreamReplaysWithNewInputs) {
  device::PrimaryContext context;
  Engine engine(test_engine_options());
  for (const OpAffine& form : {kForms[1], kForms[4]}) {
    Config c;
    c.op = form.op;
    c.affine = form.affine;
    c.dtype = Dtype::kBF16;
    c.hidden = 4096;
    c.rows = 1000;
    Backward run(engine, c, Values::kNormal, 600);
    run.run();  // eager first, on the default stream
    expect_exact(run, c, "eager");
    expect_graph_replays(run, 700, [&](const std::string& what) { expect_exact(run, c, what); });
  }
}

// The C entry point: a backward kernel prepared from its spec text and launched through
// normjit_backward_args gives the C++ entry point's bits; a forward launch of it is refused.
TEST_F(BackwardGpu, CApiLaunchesTheSameKernel) {
  device::PrimaryContext context;
  Engine engine(test_engine_options());
  Config c;
  c.op = Op::kLayerNorm;
  c.affine = Affine::kBoth;
  c.dtype = Dtype::kBF16;
  c.hidden = 1000;
  c.rows = 100;
  Backward run(engine, c, Values::kNormal, 800);
  run.run();
  const std::vector<unsigned char> cpp = run.bits();

  normjit_engine_options options;
  normjit_engine_options_init(&options);
  options.memory_only = 1;
  normjit_engine* e = nullptr;
  ASSERT_EQ(normjit_engine_create(&options, &e), NORMJIT_OK) << normjit_last_error();
  normjit_kernel* k = nullptr;
  ASSERT_EQ(normjit_prepare(e, c.name().c_str(), &k), NORMJIT_OK) << normjit_last_error();
  const BackwardArgs a = run.args();
  normjit_backward_args args;
  normjit_backward_args_init(&args);
  args.x = a.x;
  args.dy = a.dy;
  args.mean = a.mean;
  args.rstd = a.rstd;
  args.weight = a.weight;
  args.dx = a.dx;
  args.dweight = a.dweight;
  args.dbias = a.dbias;
  args.batch = a.batch;
  run.poison();
  EXPECT_EQ(normjit_launch_backward(k, &args, nullptr), NORMJIT_OK) << normjit_last_error();
  NORMJIT_CU(driver::api().cuCtxSynchronize());
  EXPECT_TRUE(run.bits() == cpp) << "the C launch differs from the C++ launch";
  // The forward entry points refuse it, naming the one to use.
  EXPECT_EQ(normjit_launch(k, a.x, a.dx, a.weight, nullptr, a.batch, 1e-5, nullptr),
            NORMJIT_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(normjit_last_error()).find("normjit_launch_backward"), std::string::npos)
      << normjit_last_error();
  normjit_engine_destroy(e);
}

// ---------------------------------------------------------------------------------------
// Rows longer than one team holds (more than 8192 elements; 16-bit rows in pairs, more than 16384:
// up to that one team of 1024 threads takes them): the row-split-backward kernel, a row over P
// co-resident CTAs exchanging its sums; parts held in registers (rows up to about a million
// elements on the H100: f32 hidden 16384 is 4 CTAs of 4096), or streamed twice in waves of
// up to 16 rows (the LayerNorm seed's 4 Mi elements; rows of 2 Mi here, so that a wave of 16
// and a second one fit the device and the host's float64 reference quickly).

constexpr int64_t kStreamedRow = int64_t{1} << 21;  // streamed on the H100 (> 264 x 4096)

Config long_config(Op op, Affine affine, Dtype dtype, int64_t hidden, int64_t rows) {
  Config c;
  c.op = op;
  c.affine = affine;
  c.dtype = dtype;
  c.hidden = hidden;
  c.rows = rows;
  return c;
}

// Rows a team of 1024 holds as raw 16-bit pairs (16-bit, an even length, up to 16384): the row
// kernel, not the split one.
bool wide_team_row(const Config& c) {
  return size_of(c.dtype) == 2 && c.hidden % 2 == 0 && c.hidden <= 16384;
}

void expect_wide_team(const Backward& run, const Config& c) {
  const std::string plan = run.backward_kernel().plan_text();
  EXPECT_NE(plan.find("strategy: row-backward"), std::string::npos) << c.name() << plan;
  EXPECT_NE(plan.find("(1024 threads)"), std::string::npos) << c.name() << plan;
  EXPECT_NE(plan.find("raw 16-bit pairs"), std::string::npos) << c.name() << plan;
}

// The plan these tests mean to exercise: the split backward, held or streamed.
void expect_split(const Backward& run, const Config& c, bool streamed) {
  const std::string plan = run.backward_kernel().plan_text();
  EXPECT_NE(plan.find("strategy: row-split-backward"), std::string::npos) << c.name() << plan;
  EXPECT_NE(plan.find(streamed ? "(streamed, read twice)" : "(in registers)"), std::string::npos)
      << c.name() << plan;
}

TEST_F(BackwardGpu, LongRowsEveryDtypeAndAffineMatchFloat64) {
  device::PrimaryContext context;
  Engine engine(test_engine_options());
  // One row; a few (fewer than the slots); more rows than slots (each slot loops).
  expect_every_config_matches(engine, sweep({8193, 16384, 65537}, {1, 7, 300}), 1000,
                              [](const Backward& run, const Config& c) {
                                if (wide_team_row(c)) {
                                  expect_wide_team(run, c);
                                } else {
                                  expect_split(run, c, /*streamed=*/false);
                                }
                              });
}

// Runs every residual config against both references, checking that its plan adds dh where it
// should: past 8192 (f32) and 16384 (16-bit) elements, and at 65537 (2-element or scalar
// vectors), the split kernel, which loads each vector of dh at its store too.
void expect_residual_configs_match(Engine& engine, const std::vector<Config>& configs,
                                   uint64_t seed) {
  expect_every_config_matches(engine, configs, seed, [](const Backward& run, const Config& c) {
    const std::string plan = run.backward_kernel().plan_text();
    const bool split = plan.find("strategy: row-split-backward") != std::string::npos;
    EXPECT_EQ(split, c.hidden > (c.dtype == Dtype::kF32 ? 8192 : 16384)) << c.name() << plan;
    if (split) {
      EXPECT_NE(plan.find("dh added to dx, each vector loaded as dx's is stored"),
                std::string::npos)
          << c.name() << plan;
    } else {
      EXPECT_NE(plan.find("plus dh"), std::string::npos) << c.name() << plan;
    }
    if (!split && c.hidden > 8192) {
      EXPECT_NE(plan.find("each vector of dh loaded at its store"), std::string::npos)
          << c.name() << plan;
    }
  });
}

// The fused add's backward: dh added to dx by the row kernel, every form and dtype, rows of one
// to a few thousand elements, held with x and dy or (teams of 1024: 16-bit rows over 8192)
// loaded at each store; in place over dh; adversarial values. Three tests, so that the GPU
// suite's shards run them side by side: rows of one team, long rows (wide team, split), and
// adversarial values, streamed rows and in place.
TEST_F(BackwardGpu, ResidualAddsDhEveryFormDtypeAndLength) {
  device::PrimaryContext context;
  Engine engine(test_engine_options());
  expect_residual_configs_match(
      engine, sweep({1, 3, 7, 65, 1000, 3072, 4097, 8192}, {1, 7, 300}, true), 5000);
}

TEST_F(BackwardGpu, ResidualAddsDhLongRows) {
  device::PrimaryContext context;
  Engine engine(test_engine_options());
  expect_residual_configs_match(engine, sweep({8200, 16384, 16385, 65537}, {1, 7, 300}, true),
                                5400);
}

TEST_F(BackwardGpu, ResidualAddsDhAdversarialStreamedAndInPlace) {
  device::PrimaryContext context;
  Engine engine(test_engine_options());
  uint64_t seed = 5600;
  for (Values values : {Values::kLargeMean, Values::kTiny, Values::kNegative}) {
    for (const OpAffine& form : {kForms[1], kForms[4]}) {
      for (int64_t hidden : {1000, 8200}) {
        Config c = long_config(form.op, form.affine, Dtype::kBF16, hidden, 64);
        c.residual = true;
        Backward run(engine, c, values, seed++);
        run.run();
        expect_exact(run, c, to_string(values));
        expect_chain(run, c, values, to_string(values));
      }
    }
  }
  // Streamed rows (x, dy read twice; dh once, in the second pass): the seed's LayerNorm shape.
  for (Dtype dtype : {Dtype::kF32, Dtype::kBF16}) {
    Config c = long_config(Op::kLayerNorm, Affine::kBoth, dtype, kStreamedRow, 20);
    c.residual = true;
    Backward run(engine, c, Values::kNormal, seed++);
    expect_split(run, c, /*streamed=*/true);
    run.run();
    expect_exact(run, c, "streamed, saved statistics");
  }
  // In place over dh (each element read before it is written, by the thread that writes it),
  // with a weight offset and f32 parameters (Gemma's fused add).
  for (int64_t hidden : {7, 4096, 16384, 40000}) {
    Config c = long_config(Op::kRmsNorm, Affine::kWeight, Dtype::kBF16, hidden, 333);
    c.param = Dtype::kF32;
    c.weight_offset = 1.0;
    c.residual = true;
    Backward run(engine, c, Values::kNormal, seed++);
    run.run(/*in_place=*/true);
    const Errors e = run.compare(/*saved=*/true, &run.dh());
    EXPECT_TRUE(e.finite) << c.name();
    EXPECT_LT(e.dx, tolerance(c.dtype)) << c.name();
    EXPECT_LT(e.dweight, tolerance(Dtype::kF32)) << c.name();
  }
}

// 16-bit rows longer than a team of 512 holds, in one team of 1024: a last vector only some
// threads have (8200: 1025 vectors of 8), 2-element vectors (12290), adversarial values.
TEST_F(BackwardGpu, WideTeamRowsEveryFormMatchFloat64) {
  device::PrimaryContext context;
  Engine engine(test_engine_options());
  std::vector<Config> configs;
  for (int64_t hidden : {8200, 12290}) {
    for (Dtype dtype : {Dtype::kF16, Dtype::kBF16}) {
      for (const OpAffine& form : kForms) {
        for (int64_t rows : {1, 7, 300}) {
          configs.push_back(long_config(form.op, form.affine, dtype, hidden, rows));
        }
      }
    }
  }
  std::vector<NormSpec> specs;
  for (const Config& c : configs) {
    specs.push_back(c.spec(false));
    specs.push_back(c.spec(true));
  }
  prepare_in_parallel(engine, specs);
  uint64_t seed = 1050;
  for (const Config& c : configs) {
    Backward run(engine, c, Values::kNormal, seed++);
    expect_wide_team(run, c);
    run.run();
    expect_exact(run, c, "saved statistics");
    expect_chain(run, c, Values::kNormal, "float64 statistics");
  }
  for (Values values : {Values::kLargeMean, Values::kTiny, Values::kNegative}) {
    for (const OpAffine& form : {kForms[1], kForms[4]}) {
      const Config c = long_config(form.op, form.affine, Dtype::kBF16, 8200, 64);
      Backward run(engine, c, values, seed++);
      run.run();
      expect_exact(run, c, to_string(values));
      expect_chain(run, c, values, to_string(values));
    }
  }
}

// A prime length (scalar accesses, a short last part) near what the co-resident CTAs hold.
TEST_F(BackwardGpu, PrimeRowOfAMillionElements) {
  device::PrimaryContext context;
  Engine engine(test_engine_options());
  uint64_t seed = 1100;
  for (const Config& c : {long_config(Op::kLayerNorm, Affine::kBoth, Dtype::kF32, 1000003, 3),
                          long_config(Op::kLayerNorm, Affine::kBoth, Dtype::kBF16, 1000003, 5),
                          long_config(Op::kRmsNorm, Affine::kWeight, Dtype::kF16, 1000003, 2)}) {
    Backward run(engine, c, Values::kNormal, seed++);
    run.run();
    expect_exact(run, c, "saved statistics");
    expect_chain(run, c, Values::kNormal, "float64 statistics");
  }
}

// Streamed parts: one wave (3 rows), and a wave of 16 rows then one of 4 (the CTAs' dweight and
// dbias accumulators read back and added in the second); no parameters: a row per wave.
TEST_F(BackwardGpu, StreamedRowsInWaves) {
  device::PrimaryContext context;
  Engine engine(test_engine_options());
  uint64_t seed = 1200;
  for (Dtype dtype : kDtypes) {
    for (const OpAffine& form : kForms) {
      for (int64_t rows : {3, 20}) {
        if (rows == 20 && dtype == Dtype::kF16) continue;  // f32 and bf16 cover the waves
        const Config c = long_config(form.op, form.affine, dtype, kStreamedRow, rows);
        Backward run(engine, c, Values::kNormal, seed++);
        expect_split(run, c, /*streamed=*/true);
        run.run();
        expect_exact(run, c, "saved statistics");
        expect_chain(run, c, Values::kNormal, "float64 statistics");
      }
    }
  }
}

// The design's LayerNorm seed: x [16, 64, 256, 256] normalized over (64, 256, 256), weight and
// bias of 4 Mi elements, f32: 16 rows of 4 Mi elements, one wave over every co-resident CTA.
TEST_F(BackwardGpu, LayerNormSeed) {
  device::PrimaryContext context;
  Engine engine(test_engine_options());
  Config c = long_config(Op::kLayerNorm, Affine::kBoth, Dtype::kF32, 64 * 256 * 256, 16);
  c.normalized = {64, 256, 256};
  Backward run(engine, c, Values::kNormal, 1300);
  expect_split(run, c, /*streamed=*/true);
  run.run();
  expect_exact(run, c, "saved statistics");
  expect_chain(run, c, Values::kNormal, "float64 statistics");
}

TEST_F(BackwardGpu, LongRowsAdversarialValues) {
  device::PrimaryContext context;
  Engine engine(test_engine_options());
  uint64_t seed = 1400;
  for (Values values : {Values::kLargeMean, Values::kTiny, Values::kConstant, Values::kNegative}) {
    for (Dtype dtype : kDtypes) {
      for (const OpAffine& form : kForms) {
        for (int64_t hidden : {16384, 65537}) {
          const Config c = long_config(form.op, form.affine, dtype, hidden, 64);
          Backward run(engine, c, values, seed++);
          run.run();
          expect_exact(run, c, to_string(values));
          expect_chain(run, c, values, to_string(values));
        }
      }
      // Streamed: a large mean and a tiny variance.
      if (values == Values::kLargeMean || values == Values::kTiny) {
        const Config c = long_config(Op::kLayerNorm, Affine::kBoth, dtype, kStreamedRow, 3);
        Backward run(engine, c, values, seed++);
        run.run();
        expect_exact(run, c, to_string(values));
        expect_chain(run, c, values, to_string(values));
      }
    }
  }
}

TEST_F(BackwardGpu, LongRowsParamDtypeWeightOffsetAndInPlace) {
  device::PrimaryContext context;
  Engine engine(test_engine_options());
  uint64_t seed = 1500;
  for (int64_t hidden : {int64_t{16384}, kStreamedRow}) {
    for (const OpAffine& form : {kForms[1], kForms[4]}) {
      Config c = long_config(form.op, form.affine, Dtype::kBF16, hidden, hidden > 65536 ? 3 : 300);
      c.param = Dtype::kF32;
      c.weight_offset = 1.0;
      Backward run(engine, c, Values::kNormal, seed++);
      run.run();
      expect_exact(run, c, "f32 parameters, weight offset");
      expect_chain(run, c, Values::kNormal, "f32 parameters, weight offset");
      // dx over dy.
      const Config d = long_config(form.op, form.affine, Dtype::kBF16, hidden, 5);
      Backward in_place(engine, d, Values::kNormal, seed++);
      in_place.run(/*in_place=*/true);
      const Errors e = in_place.compare(/*saved=*/true, &in_place.dy());
      EXPECT_TRUE(e.finite) << d.name();
      EXPECT_LT(e.dx, tolerance(d.dtype)) << d.name() << ": in place";
      EXPECT_LT(e.dweight, tolerance(d.dtype)) << d.name() << ": in place";
    }
  }
}

// No floating-point atomics: the same bits run after run and on another stream (its own
// workspace, whose counters start from 0).
TEST_F(BackwardGpu, LongRowsDeterministicBits) {
  device::PrimaryContext context;
  Engine engine(test_engine_options());
  const Config configs[] = {
      long_config(Op::kLayerNorm, Affine::kBoth, Dtype::kBF16, 16384, 4096),
      long_config(Op::kRmsNorm, Affine::kWeight, Dtype::kF32, 16384, 1000),
      long_config(Op::kLayerNorm, Affine::kBoth, Dtype::kF32, 65537, 500),
      long_config(Op::kLayerNorm, Affine::kBoth, Dtype::kBF16, kStreamedRow, 20),
  };
  for (const Config& c : configs) {
    Backward run(engine, c, Values::kNormal, 1600 + c.hidden);
    run.run();
    expect_exact(run, c, "first run");
    expect_same_bits_again(run, c.name(), 2, /*on_another_stream=*/true);
  }
}

// A row's dx has the same bits whether it is launched alone, with a few rows or within the whole
// batch (its dweight does not: it sums the rows): held parts looping over rows per slot, and
// streamed ones in waves of one row or of 16.
TEST_F(BackwardGpu, LongRowsDxDoesNotDependOnTheBatch) {
  device::PrimaryContext context;
  Engine engine(test_engine_options());
  const Config configs[] = {
      long_config(Op::kLayerNorm, Affine::kBoth, Dtype::kF32, 16384, 2000),
      long_config(Op::kRmsNorm, Affine::kWeight, Dtype::kBF16, 16384, 2000),
      long_config(Op::kLayerNorm, Affine::kBoth, Dtype::kF32, 65537, 300),
      long_config(Op::kLayerNorm, Affine::kBoth, Dtype::kF32, kStreamedRow, 20),
  };
  for (const Config& c : configs) {
    Backward run(engine, c, Values::kNormal, 1700 + c.hidden);
    run.run();
    const std::vector<unsigned char> all = download(run.dx());
    for (int64_t rows : {int64_t{1}, int64_t{3}}) {
      BackwardArgs a = run.args();
      a.batch = rows;  // the first rows only
      run.poison();
      run.backward_kernel().launch_backward(a, nullptr);
      NORMJIT_CU(driver::api().cuCtxSynchronize());
      const std::vector<unsigned char> few = download(run.dx());
      const size_t bytes = size_t(rows * c.hidden) * size_of(c.dtype);
      EXPECT_EQ(std::memcmp(all.data(), few.data(), bytes), 0)
          << c.name() << ": dx of the first " << rows << " rows launched alone differs";
    }
  }
}

// Graph-safe: captured on a stream it never used, replays with new dy in the captured buffer
// correct each time (the exchange's counters and the barrier's need no reset).
TEST_F(BackwardGpu, LongRowsCudaGraphOnAFreshStream) {
  device::PrimaryContext context;
  Engine engine(test_engine_options());
  const Config configs[] = {
      long_config(Op::kRmsNorm, Affine::kWeight, Dtype::kBF16, 16384, 1000),
      long_config(Op::kLayerNorm, Affine::kBoth, Dtype::kBF16, kStreamedRow, 20),
  };
  for (const Config& c : configs) {
    Backward run(engine, c, Values::kNormal, 1800);
    run.run();  // eager first, on the default stream
    expect_exact(run, c, "eager");
    expect_graph_replays(run, 1900, [&](const std::string& what) { expect_exact(run, c, what); });
  }
}

// Pointers the plan's vector accesses cannot take are refused, naming the argument, before
// anything is launched.
TEST_F(BackwardGpu, MisalignedPointersAreNamed) {
  device::PrimaryContext context;
  Engine engine(test_engine_options());
  Config c;
  c.op = Op::kRmsNorm;
  c.affine = Affine::kWeight;
  c.dtype = Dtype::kBF16;
  c.hidden = 4096;  // 16-byte vectors
  c.rows = 4;
  Backward run(engine, c, Values::kNormal, 900);
  // A weight shifted within its own buffer would reach past its end (into whatever the
  // allocator placed next, dweight on the H100: refused as an overlap first); a roomier one.
  device::Buffer roomy(size_t(c.hidden) * 2 + 256);
  for (const char* name : {"x", "dy", "dx", "weight", "rstd"}) {
    BackwardArgs a = run.args();
    a.batch = 2;  // half the rows: a shifted dx still lies inside its buffer (no overlap)
    const auto shift = [](const void* p, int bytes) { return static_cast<const char*>(p) + bytes; };
    const std::string n = name;
    if (n == "x") a.x = shift(a.x, 2);
    if (n == "dy") a.dy = shift(a.dy, 2);
    if (n == "dx") a.dx = const_cast<char*>(shift(a.dx, 2));
    if (n == "weight") a.weight = shift(roomy.get(), 2);
    if (n == "rstd") a.rstd = reinterpret_cast<const float*>(shift(a.rstd, 2));
    try {
      run.backward_kernel().launch_backward(a, nullptr);
      ADD_FAILURE() << name << ": a misaligned pointer was launched";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument) << e.what();
      EXPECT_NE(std::string(e.what()).find("invalid " + n + " 0x"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("aligned"), std::string::npos) << e.what();
    }
  }
}

// ---------------------------------------------------------------------------------------
// Backward with an activation: the forward was y = act(z), z = xhat * (offset + w) + b (silu, or
// gelu's exact erf form; w 1 and b 0 where the spec has none), and the backward kernel takes dy,
// y's gradient, through the activation's derivative at z:
//   dz = dy * act'(z), silu'(z) = s * (1 + z * (1 - s)) (s = sigmoid(z)),
//   gelu'(z) = Phi(z) + z * exp(-z^2 / 2) / sqrt(2 pi);
// then the plain backward with dy replaced by dz: g = dz * (offset + w), dweight = sum dz * xhat,
// dbias = sum dz, dx = rstd * (g - mean(g) - xhat * mean(g * xhat)) (rmsnorm: without mean(g)),
// plus dh with a residual. Every op and form (trailing rows, the channel forms and groupnorm, in
// nchw and nhwc): the harness maps each statistics row's elements to their offsets and channels
// as backward_channels_test.cpp does, so one float64 reference serves every strategy. The
// forward (with the activation and save_stats) saves the statistics; outputs are poisoned first.

const char* bias_name(Bias b) {
  switch (b) {
    case Bias::kNormal:
      return "normal bias";
    case Bias::kVeryNegative:
      return "very negative bias";
    case Bias::kLargePositive:
      return "large positive bias";
    case Bias::kMixed:
      return "mixed bias";
  }
  return "?";
}

struct ActConfig {
  Op op = Op::kLayerNorm;
  std::vector<int64_t> shape;  // trailing forms: [*leading, *normalized]; else [N, C, *spatial]
  int normalized_dims = 1;     // 0: the channel form (groupnorm: always 0)
  int64_t groups = 0;
  Dtype dtype = Dtype::kF32;
  Affine affine = Affine::kBoth;
  std::optional<Dtype> param;
  double weight_offset = 0;
  bool nhwc = false;
  bool residual = false;  // the backward spec's residual (x's dtype): dh added to dx
  Activation activation = Activation::kSilu;

  // The forward with the activation and save_stats (x stands for h with a residual, as above),
  // or the backward.
  NormSpec spec(bool backward) const {
    SpecFields f;
    f.op = op;
    f.shape = shape;
    f.dtype = dtype;
    f.normalized_dims = op == Op::kGroupNorm ? 0 : normalized_dims;
    if (op == Op::kGroupNorm) f.groups = groups;
    f.affine = affine;
    f.param_dtype = param;
    f.weight_offset = weight_offset;
    f.activation = activation;
    f.save_stats = !backward;
    f.backward = backward;
    if (nhwc) f.layout = Layout::kNhwc;
    if (backward && residual) f.residual = dtype;
    return NormSpec::from_fields(f);
  }
  std::string name() const { return spec(true).to_string(); }
  bool trailing() const { return op != Op::kGroupNorm && normalized_dims > 0; }
  int64_t elements() const {
    int64_t p = 1;
    for (int64_t d : shape) p *= d;
    return p;
  }
  int64_t c() const { return shape[1]; }  // the channel and group forms
  int64_t s() const {
    int64_t p = 1;
    for (size_t i = 2; i < shape.size(); ++i) p *= shape[i];
    return p;
  }
  // Elements normalized together, and the rows of the statistics (trailing: the rows; groupnorm:
  // (n, g) at n * G + g; the channel forms: (n, position) at n * S + s).
  int64_t row_length() const {
    if (trailing()) {
      int64_t p = 1;
      for (size_t i = shape.size() - size_t(normalized_dims); i < shape.size(); ++i) p *= shape[i];
      return p;
    }
    return op == Op::kGroupNorm ? c() / groups * s() : c();
  }
  int64_t stats_rows() const { return elements() / row_length(); }
  int64_t params() const { return trailing() ? row_length() : c(); }
  // Element i of statistics row r: its offset in x.
  int64_t offset(int64_t r, int64_t i) const {
    if (trailing()) return r * row_length() + i;
    if (op == Op::kGroupNorm) {
      const int64_t n = r / groups, g = r % groups, cg = c() / groups;
      if (nhwc) return (n * s() + i % s()) * c() + g * cg + i / s();
      return (n * c() + g * cg + i / s()) * s() + i % s();
    }
    const int64_t n = r / s(), pos = r % s();
    return nhwc ? r * c() + i : (n * c() + i) * s() + pos;
  }
  // The parameter (channel or column) of element i of statistics row r.
  int64_t param_index(int64_t r, int64_t i) const {
    if (trailing()) return i;
    const int64_t at = offset(r, i);
    return nhwc ? at % c() : at / s() % c();
  }
};

using ActBackward = BackwardRun<ActConfig>;

// Against the saved statistics (the kernel's own inputs: f32 arithmetic and the outputs'
// rounding) and, unless x has a large mean, against float64 statistics of x. With |mean| >> std
// the f32 mean the forward saves is off by up to 2^-24 |mean|, which moves every xhat and so
// every z, and act'(z) moves with it (|act''| up to 0.5 for silu, 0.8 for gelu): that chain is
// a property of f32 statistics, which the plain backward's tests bound; the saved-statistics
// check measures the kernel.
void expect_close(const ActBackward& run, const ActConfig& c, Values values,
                  const std::string& what) {
  const Dtype param = c.param.value_or(c.dtype);
  for (bool saved : {true, false}) {
    if (!saved && values == Values::kLargeMean) continue;
    const Errors e = run.compare(saved);
    const std::string how =
        c.name() + " " + what + (saved ? " (saved statistics)" : " (float64 statistics)");
    EXPECT_TRUE(e.finite) << how << ": an output is NaN or inf";
    EXPECT_LT(e.dx, tolerance(c.dtype)) << how << ": dx";
    if (c.affine != Affine::kNone) {
      EXPECT_LT(e.dweight, tolerance(param)) << how << ": dweight";
    }
    if (c.affine == Affine::kBoth) {
      EXPECT_LT(e.dbias, tolerance(param)) << how << ": dbias";
    }
  }
}

// The backward's plan names the activation it takes dy through.
void expect_activation_in_plan(const ActBackward& run, const ActConfig& c) {
  const std::string plan = run.backward_kernel().plan_text();
  EXPECT_NE(plan.find(std::string("dy taken through ") + to_string(c.activation) +
                      "'s derivative at the forward's xhat * w + b"),
            std::string::npos)
      << c.name() << "\n"
      << plan;
}

void prepare_act(Engine& engine, const std::vector<ActConfig>& configs) {
  std::vector<NormSpec> specs;
  for (const ActConfig& c : configs) {
    specs.push_back(c.spec(false));
    specs.push_back(c.spec(true));
  }
  prepare_in_parallel(engine, specs);
}

ActConfig act_rows(Op op, Affine affine, Dtype dtype, int64_t hidden, int64_t rows, Activation a) {
  ActConfig c;
  c.op = op;
  c.shape = {rows, hidden};
  c.normalized_dims = 1;
  c.dtype = dtype;
  c.affine = affine;
  c.activation = a;
  return c;
}
ActConfig act_group(std::vector<int64_t> shape, int64_t groups, Dtype dtype, Affine affine,
                    Activation a, bool nhwc = false) {
  ActConfig c;
  c.op = Op::kGroupNorm;
  c.shape = std::move(shape);
  c.normalized_dims = 0;
  c.groups = groups;
  c.dtype = dtype;
  c.affine = affine;
  c.activation = a;
  c.nhwc = nhwc;
  return c;
}
ActConfig act_channels(Op op, std::vector<int64_t> shape, Dtype dtype, Affine affine, Activation a,
                       bool nhwc = false) {
  ActConfig c = act_group(std::move(shape), 0, dtype, affine, a, nhwc);
  c.op = op;
  return c;
}

constexpr Activation kActivations[] = {Activation::kSilu, Activation::kGelu};

// The strategy line of a plan ("strategy: row-backward" gives "row-backward").
std::string strategy_in(const std::string& plan) {
  const std::string key = "strategy: ";
  const size_t at = plan.find(key);
  if (at == std::string::npos) return "?";
  const size_t from = at + key.size();
  return plan.substr(from, plan.find_first_of(" \n", from) - from);
}

// silu and gelu, f32/f16/bf16, through every backward strategy: GroupNorm in nchw (units of one
// channel; 16-bit channels of 16384 positions in chunked units) and nhwc (every channel of a unit
// of positions); LayerNorm rows of 1 to 65537 elements (teams of a few threads to 1024, rows split
// over CTAs in registers, and 2 Mi elements streamed twice); RMSNorm rows with a weight, with a
// weight offset of 1 and f32 parameters, and with a residual (dh added to dx); the channel forms
// in nchw (channels-backward) and nhwc (rows); GroupNorm streamed from DRAM (an engine told an
// H200's bandwidth plans it on any GPU). Each against float64 and two runs bitwise equal.
TEST_F(BackwardGpu, ActivationMatchesFloat64EveryStrategy) {
  device::PrimaryContext context;
  Engine engine(test_engine_options());
  std::vector<ActConfig> configs;
  for (Activation a : kActivations) {
    for (Dtype dtype : kDtypes) {
      for (bool nhwc : {false, true}) {
        configs.push_back(act_group({2, 64, 9, 9}, 8, dtype, Affine::kBoth, a, nhwc));
        configs.push_back(act_group({1, 320, 16, 16}, 32, dtype, Affine::kBoth, a, nhwc));
        configs.push_back(act_group({3, 6, 7}, 2, dtype, Affine::kNone, a, nhwc));
        configs.push_back(act_group({4, 96, 5, 5, 5}, 3, dtype, Affine::kWeight, a, nhwc));
        configs.push_back(
            act_channels(Op::kLayerNorm, {2, 96, 7, 7}, dtype, Affine::kBoth, a, nhwc));
        configs.push_back(
            act_channels(Op::kRmsNorm, {3, 65, 3, 3}, dtype, Affine::kWeight, a, nhwc));
      }
      const int64_t lengths[] = {1, 7, 65, 1000, 4097, 16384, 65537};
      const int64_t rows[] = {300, 300, 100, 64, 33, 64, 5};
      for (int i = 0; i < 7; ++i) {
        configs.push_back(act_rows(Op::kLayerNorm, Affine::kBoth, dtype, lengths[i], rows[i], a));
      }
      for (int64_t hidden : {7, 4097, 16384}) {
        configs.push_back(act_rows(Op::kRmsNorm, Affine::kWeight, dtype, hidden, 33, a));
      }
      // The fused add's backward: dh added to dx (the row kernel; the split one past 16384).
      ActConfig residual = act_rows(Op::kRmsNorm, Affine::kWeight, dtype, 4096, 33, a);
      residual.residual = true;
      configs.push_back(residual);
      residual = act_rows(Op::kLayerNorm, Affine::kBoth, dtype, 20000, 7, a);
      residual.residual = true;
      configs.push_back(residual);
      if (dtype == Dtype::kF32) continue;
      // Gemma's RMSNorm (a weight offset of 1, f32 parameters), alone and with the residual;
      // LayerNorm with both.
      ActConfig offset = act_rows(Op::kRmsNorm, Affine::kWeight, dtype, 2048, 100, a);
      offset.param = Dtype::kF32;
      offset.weight_offset = 1.0;
      configs.push_back(offset);
      offset.residual = true;
      configs.push_back(offset);
      offset = act_rows(Op::kLayerNorm, Affine::kBoth, dtype, 1000, 64, a);
      offset.param = Dtype::kF32;
      offset.weight_offset = 1.0;
      configs.push_back(offset);
      // GroupNorm over 16-bit channels of 16384 positions: chunked units.
      configs.push_back(act_group({2, 16, 128, 128}, 4, dtype, Affine::kBoth, a));
    }
    // Rows of 2 Mi elements: streamed twice, in waves.
    configs.push_back(act_rows(Op::kLayerNorm, Affine::kBoth,
                               a == Activation::kSilu ? Dtype::kF32 : Dtype::kBF16, kStreamedRow, 3,
                               a));
  }
  prepare_act(engine, configs);
  std::set<std::string> strategies;
  bool wide_team = false, split_held = false, streamed = false, chunked = false;
  uint64_t seed = 9000;
  for (const ActConfig& c : configs) {
    ActBackward run(engine, c, Values::kNormal, seed++);
    expect_activation_in_plan(run, c);
    const std::string plan = run.backward_kernel().plan_text();
    strategies.insert(strategy_in(plan));
    wide_team = wide_team || plan.find("(1024 threads)") != std::string::npos;
    split_held = split_held || (strategy_in(plan) == "row-split-backward" &&
                                plan.find("(streamed, read twice)") == std::string::npos);
    streamed = streamed || plan.find("(streamed, read twice)") != std::string::npos;
    chunked = chunked || plan.find("chunks per unit: 4") != std::string::npos;
    run.run();
    expect_close(run, c, Values::kNormal, "normal values");
    expect_same_bits_again(run, c.name());
  }
  for (Strategy s : {Strategy::kRowBackward, Strategy::kRowSplitBackward, Strategy::kGroupBackward,
                     Strategy::kGroupNhwcBackward, Strategy::kChannelsBackward}) {
    EXPECT_TRUE(strategies.count(to_string(s))) << "no config planned " << to_string(s);
  }
  EXPECT_TRUE(wide_team) << "no row in a team of 1024 threads";
  EXPECT_TRUE(split_held) << "no row split over CTAs in registers";
  EXPECT_TRUE(streamed) << "no streamed row";
  EXPECT_TRUE(chunked) << "no GroupNorm in chunked units";

  // GroupNorm streamed from DRAM: planned for an H200's bandwidth, on whatever GPU runs this.
  EngineOptions fast = test_engine_options();
  fast.dram_gbps = 4814;
  Engine fast_engine(fast);
  const std::vector<ActConfig> dram = {
      act_group({2, 16, 512, 512}, 4, Dtype::kBF16, Affine::kBoth, Activation::kSilu),
      act_group({3, 6, 65537}, 3, Dtype::kF32, Affine::kBoth, Activation::kGelu),
  };
  prepare_act(fast_engine, dram);
  for (const ActConfig& c : dram) {
    ActBackward run(fast_engine, c, Values::kNormal, seed++);
    expect_activation_in_plan(run, c);
    EXPECT_NE(run.backward_kernel().plan_text().find("streamed (DRAM of 4814 GB/s"),
              std::string::npos)
        << c.name() << "\n"
        << run.backward_kernel().plan_text();
    run.run();
    expect_close(run, c, Values::kNormal, "streamed from DRAM");
    expect_same_bits_again(run, c.name());
  }
}

// Adversarial x (a large mean: 1e4 + N(0, 1); tiny values; all negative) and biases that push
// the activation's input z = xhat * w + b where its derivative is flat: mostly below -10 (silu'
// near 0: dz some 1e-5 of dy), above 6 (both derivatives near 1, silu's 1 - s losing its bits),
// or a mix channel by channel. Every strategy's kernel, f32 and 16-bit, against float64. The very
// negative biases run silu only: there gelu' is about z * phi(z) (1e-5 at z = -5, 1e-20 at -10)
// and the A&S form of Phi that the kernels share with the forward (epilogue.cuh) is off by up to
// a few percent of Phi in that tail, which the f32 emulation of that formula puts at 6e-5 of
// ||dz|| when every z lies there (f32's tolerance is 1e-5); the mixed biases run gelu with a
// third of its inputs there (5e-8 of ||dz||).
TEST_F(BackwardGpu, ActivationAdversarialValuesAndBiases) {
  device::PrimaryContext context;
  Engine engine(test_engine_options());
  std::vector<ActConfig> configs;
  for (Activation a : kActivations) {
    for (Dtype dtype : kDtypes) {
      configs.push_back(act_group({2, 64, 9, 9}, 8, dtype, Affine::kBoth, a));
      configs.push_back(act_group({2, 64, 9, 9}, 8, dtype, Affine::kBoth, a, /*nhwc=*/true));
      configs.push_back(act_rows(Op::kLayerNorm, Affine::kBoth, dtype, 4097, 16, a));
      configs.push_back(act_rows(Op::kLayerNorm, Affine::kBoth, dtype, 65537, 3, a));
      configs.push_back(act_channels(Op::kLayerNorm, {2, 96, 7, 7}, dtype, Affine::kBoth, a));
      configs.push_back(
          act_channels(Op::kLayerNorm, {2, 96, 7, 7}, dtype, Affine::kBoth, a, /*nhwc=*/true));
      configs.push_back(act_rows(Op::kRmsNorm, Affine::kWeight, dtype, 1000, 16, a));
      configs.push_back(act_channels(Op::kRmsNorm, {3, 65, 3, 3}, dtype, Affine::kWeight, a));
    }
  }
  prepare_act(engine, configs);
  uint64_t seed = 9500;
  for (const ActConfig& c : configs) {
    for (Values values : {Values::kLargeMean, Values::kTiny, Values::kNegative}) {
      ActBackward run(engine, c, values, seed++);
      run.run();
      expect_close(run, c, values, to_string(values));
    }
    if (c.affine != Affine::kBoth) continue;
    for (Bias bias : {Bias::kVeryNegative, Bias::kLargePositive, Bias::kMixed}) {
      // f16 dx of z below -10 (silu' about 1e-5) would be subnormal: f32 and bf16 take it.
      if (bias == Bias::kVeryNegative &&
          (c.activation != Activation::kSilu || c.dtype == Dtype::kF16)) {
        continue;
      }
      ActBackward run(engine, c, Values::kNormal, seed++, bias);
      run.run();
      expect_close(run, c, Values::kNormal, bias_name(bias));
      if (bias == Bias::kMixed) expect_same_bits_again(run, c.name());
    }
  }
}

// No floating-point atomics with an activation either: the same bits run after run and on
// another stream (its own workspace), with batches that give every CTA the device holds
// several rows (items).
TEST_F(BackwardGpu, ActivationDeterministicBitsAcrossRunsAndStreams) {
  device::PrimaryContext context;
  Engine engine(test_engine_options());
  const std::vector<ActConfig> configs = {
      act_rows(Op::kLayerNorm, Affine::kBoth, Dtype::kBF16, 4096, 4096, Activation::kSilu),
      act_rows(Op::kLayerNorm, Affine::kBoth, Dtype::kF32, 65537, 64, Activation::kGelu),
      act_group({16, 320, 32, 32}, 32, Dtype::kBF16, Affine::kBoth, Activation::kSilu),
      act_group({16, 320, 32, 32}, 32, Dtype::kBF16, Affine::kBoth, Activation::kSilu,
                /*nhwc=*/true),
      act_channels(Op::kRmsNorm, {16, 64, 32, 32}, Dtype::kF32, Affine::kWeight, Activation::kGelu),
      act_channels(Op::kLayerNorm, {16, 96, 28, 28}, Dtype::kF16, Affine::kBoth, Activation::kGelu,
                   /*nhwc=*/true),
  };
  prepare_act(engine, configs);
  uint64_t seed = 9800;
  for (const ActConfig& c : configs) {
    ActBackward run(engine, c, Values::kNormal, seed++, Bias::kMixed);
    run.run();
    const Errors e = run.compare(/*saved=*/true);
    EXPECT_TRUE(e.finite) << c.name();
    EXPECT_LT(e.dx, tolerance(c.dtype)) << c.name();
    expect_same_bits_again(run, c.name(), 2, /*on_another_stream=*/true);
  }
}

// Graph-safe with an activation: the backward (reading the bias too) captured on a stream it
// never used, its replays with new dy in the captured buffer correct each time. GroupNorm ->
// SiLU in nchw and nhwc (Stable Diffusion's [2, 320, 32, 32], 32 groups), LayerNorm -> GELU rows.
TEST_F(BackwardGpu, ActivationCudaGraphOnAFreshStreamReplaysWithNewInputs) {
  device::PrimaryContext context;
  Engine engine(test_engine_options());
  const std::vector<ActConfig> configs = {
      act_group({2, 320, 32, 32}, 32, Dtype::kBF16, Affine::kBoth, Activation::kSilu),
      act_group({2, 320, 32, 32}, 32, Dtype::kBF16, Affine::kBoth, Activation::kSilu,
                /*nhwc=*/true),
      act_rows(Op::kLayerNorm, Affine::kBoth, Dtype::kBF16, 4096, 1000, Activation::kGelu),
  };
  prepare_act(engine, configs);
  for (const ActConfig& c : configs) {
    ActBackward run(engine, c, Values::kNormal, 9900);
    run.run();  // eager first, on the default stream
    expect_close(run, c, Values::kNormal, "eager");
    expect_graph_replays(run, 9910, [&](const std::string& replay) {
      const Errors e = run.compare(/*saved=*/true);
      const std::string what = c.name() + " " + replay;
      EXPECT_TRUE(e.finite) << what;
      EXPECT_LT(e.dx, tolerance(c.dtype)) << what << ": dx";
      EXPECT_LT(e.dweight, tolerance(c.dtype)) << what << ": dweight";
      EXPECT_LT(e.dbias, tolerance(c.dtype)) << what << ": dbias";
    });
  }
}

// The bias is an argument of the backward exactly when the spec has an activation and a bias:
// its absence is refused, naming it, and so is a bias given to a spec whose backward does not
// read it (an activation without a bias; a bias without an activation), before anything is
// launched (dx stays poisoned).
TEST_F(BackwardGpu, ActivationLaunchRefusesAMissingOrUnwantedBias) {
  device::PrimaryContext context;
  Engine engine(test_engine_options());
  // Refused naming the bias, with each of `words` in the message; dx left poisoned.
  const auto expect_refused = [](ActBackward& run, const ActConfig& c, const BackwardArgs& a,
                                 const std::vector<std::string>& words) {
    run.poison();
    const std::vector<unsigned char> poisoned = download(run.dx());
    try {
      run.backward_kernel().launch_backward(a, nullptr);
      ADD_FAILURE() << c.name() << ": launched with bias " << a.bias;
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument) << c.name() << ": " << e.what();
      for (const std::string& word : words) {
        EXPECT_NE(std::string(e.what()).find(word), std::string::npos)
            << c.name() << ": no '" << word << "' in: " << e.what();
      }
    }
    NORMJIT_CU(driver::api().cuCtxSynchronize());
    EXPECT_TRUE(download(run.dx()) == poisoned) << c.name() << ": dx written by a refused launch";
  };
  const std::vector<ActConfig> needs_bias = {
      act_group({2, 64, 9, 9}, 8, Dtype::kBF16, Affine::kBoth, Activation::kSilu),
      act_group({2, 64, 9, 9}, 8, Dtype::kF16, Affine::kBoth, Activation::kGelu, /*nhwc=*/true),
      act_rows(Op::kLayerNorm, Affine::kBoth, Dtype::kF32, 1000, 8, Activation::kGelu),
      act_rows(Op::kLayerNorm, Affine::kBoth, Dtype::kBF16, 65537, 2, Activation::kSilu),
      act_channels(Op::kLayerNorm, {2, 96, 7, 7}, Dtype::kF32, Affine::kBoth, Activation::kSilu),
  };
  uint64_t seed = 9950;
  for (const ActConfig& c : needs_bias) {
    ActBackward run(engine, c, Values::kNormal, seed++);
    run.forward();
    BackwardArgs a = run.args();
    ASSERT_NE(a.bias, nullptr);
    a.bias = nullptr;
    expect_refused(run, c, a, {"invalid bias NULL", "the activation's derivative"});
    // With the bias, the same arguments launch and match float64.
    run.poison();
    run.backward();
    NORMJIT_CU(driver::api().cuCtxSynchronize());
    expect_close(run, c, Values::kNormal, "after a refused launch");
  }
  // A bias where the backward reads none: an activation without a bias (affine weight), and a
  // bias without an activation.
  device::Buffer stray(size_t(4096) * 4);
  const std::pair<ActConfig, const char*> unwanted[] = {
      {act_rows(Op::kRmsNorm, Affine::kWeight, Dtype::kBF16, 4096, 4, Activation::kSilu),
       "has no bias"},
      {act_group({2, 64, 9, 9}, 8, Dtype::kF32, Affine::kWeight, Activation::kGelu), "has no bias"},
      {act_rows(Op::kLayerNorm, Affine::kBoth, Dtype::kBF16, 4096, 4, Activation::kNone),
       "has no activation"},
  };
  for (const auto& [c, why] : unwanted) {
    ActBackward run(engine, c, Values::kNormal, seed++);
    run.forward();
    BackwardArgs a = run.args();
    EXPECT_EQ(a.bias, nullptr) << c.name();
    a.bias = stray.get();
    expect_refused(run, c, a, {"invalid bias 0x", why});
  }
}

}  // namespace
}  // namespace normjit::testing
