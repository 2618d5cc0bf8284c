// LayerNorm's channel form (normalized_dims=0: ConvNeXt's and SAM's LayerNorm2d) on the GPU
// against the float64 reference: vision shapes, odd and 3-D spatial sizes, C not a multiple of
// the vector width, C = 1, every dtype, with and without weight and bias, adversarial values,
// in place, poisoned outputs (harness.hpp: an unwritten element is NaN and cannot pass), and
// the saved mean and rstd of each (n, position).
#include <cmath>
#include <vector>

#include "harness.hpp"

namespace normjit::testing {
namespace {

NormSpec layernorm2d(const std::vector<int64_t>& shape, Dtype dtype, Affine affine,
                     bool save_stats = false) {
  SpecFields f;
  f.op = Op::kLayerNorm;
  f.shape = shape;
  f.dtype = dtype;
  f.affine = affine;
  f.normalized_dims = 0;
  f.save_stats = save_stats;
  return NormSpec::from_fields(f);
}

class LayerNormChannels : public ::testing::Test {
 protected:
  void SetUp() override { NORMJIT_REQUIRE_GPU(); }
};

const Dtype kDtypes[] = {Dtype::kF32, Dtype::kF16, Dtype::kBF16};
const Affine kAffines[] = {Affine::kNone, Affine::kWeight, Affine::kBoth};

TEST_F(LayerNormChannels, MatchesFloat64OnVisionAndOddShapes) {
  device::PrimaryContext context;
  Engine engine(test_engine_options());
  const std::vector<std::vector<int64_t>> shapes = {
      {2, 96, 56, 56},   // ConvNeXt-T stage 1
      {1, 256, 64, 64},  // SAM's neck
      {2, 768, 7, 7},    // ConvNeXt-T stage 4: odd spatial, scalar accesses
      {3, 8, 3, 5, 7},   // a 3-D volume, odd
      {2, 13, 4, 6},     // C not a multiple of the threads sharing a position
      {2, 1, 9, 9},      // C = 1: y = bias
      {1, 1, 1},        {3, 7, 65},      {2, 65, 1000},
      {5, 2, 127},      {2, 4099, 4},  // too many channels for registers: read twice
      {1, 3, 1024},     {4, 127, 1, 31}, {1, 64, 8, 8, 8},
  };
  std::vector<NormSpec> specs;
  for (const auto& shape : shapes) {
    for (Dtype dtype : kDtypes) {
      for (Affine affine : kAffines) specs.push_back(layernorm2d(shape, dtype, affine));
    }
  }
  prepare_in_parallel(engine, specs);
  uint64_t seed = 1;
  for (const NormSpec& spec : specs) {
    const RunResult r = run_and_compare(engine, spec, Values::kNormal, seed++);
    EXPECT_TRUE(r.all_finite) << spec.to_string();
    EXPECT_LT(r.rel_error, tolerance(spec.dtype)) << spec.to_string();
  }
}

TEST_F(LayerNormChannels, AdversarialValuesCachedAndReadTwice) {
  // Large mean (1e4, std 1): a variance by subtraction of squares would be garbage; the cached
  // kernel takes two exact passes, the read-twice one shifts by channel 0. Constant values:
  // variance 0, y = bias.
  device::PrimaryContext context;
  Engine engine(test_engine_options());
  for (Values v : {Values::kLargeMean, Values::kTiny, Values::kConstant, Values::kNegative}) {
    for (Dtype dtype : kDtypes) {
      for (const std::vector<int64_t>& shape :
           std::vector<std::vector<int64_t>>{{3, 65, 33}, {2, 96, 7, 7}, {1, 3000, 8}}) {
        const NormSpec spec = layernorm2d(shape, dtype, Affine::kBoth);
        const RunResult r = run_and_compare(engine, spec, v, 11);
        EXPECT_TRUE(r.all_finite) << spec.to_string() << " values " << to_string(v);
        // f32 loses about 2^-24 |mean| / std with large means (ops_test allows 1e-4).
        const double tol =
            dtype == Dtype::kF32 && v == Values::kLargeMean ? 1e-4 : tolerance(dtype);
        EXPECT_LT(r.rel_error, tol) << spec.to_string() << " values " << to_string(v);
      }
    }
  }
}

TEST_F(LayerNormChannels, InPlace) {
  device::PrimaryContext context;
  Engine engine(test_engine_options());
  const NormSpec spec = layernorm2d({3, 96, 10, 10}, Dtype::kBF16, Affine::kBoth);
  const RunResult r = run_and_compare(engine, spec, Values::kNormal, 5, /*in_place=*/true);
  EXPECT_TRUE(r.all_finite);
  EXPECT_LT(r.rel_error, tolerance(spec.dtype));
}

TEST_F(LayerNormChannels, OneKernelServesEveryBatchSize) {
  device::PrimaryContext context;
  Engine engine(test_engine_options());
  for (int64_t n : {1, 2, 17, 300}) {
    const NormSpec spec = layernorm2d({n, 24, 40}, Dtype::kF32, Affine::kBoth);
    const RunResult r = run_and_compare(engine, spec, Values::kNormal, n);
    EXPECT_LT(r.rel_error, tolerance(spec.dtype)) << spec.to_string();
  }
  EXPECT_EQ(engine.counters().nvrtc_compiles + engine.counters().disk_hits, 1u);
}

TEST_F(LayerNormChannels, SavedMeanAndRstdPerPositionMatchFloat64) {
  // [N, S] each, every element written (poisoned first) and nothing past the end.
  device::PrimaryContext context;
  Engine engine(test_engine_options());
  for (const std::vector<int64_t>& shape :
       std::vector<std::vector<int64_t>>{{2, 96, 9, 9}, {2, 4099, 4}, {3, 5, 7}}) {
    for (Dtype dtype : kDtypes) {
      const NormSpec spec = layernorm2d(shape, dtype, Affine::kBoth, /*save_stats=*/true);
      Problem p(spec, Values::kLargeMean, 21);
      const int64_t n = spec.batch(), s = spec.spatial(), c = spec.channels();
      const size_t stats = size_t(n * s), pad = 16;
      device::Buffer mean((stats + pad) * 4), rstd((stats + pad) * 4);
      mean.fill_bytes(0xff);
      rstd.fill_bytes(0xff);
      LaunchArgs a{p.x.get(), p.y.get(), p.w.get(), p.b.get(), n, float(spec.eps)};
      a.mean = static_cast<float*>(mean.get());
      a.rstd = static_cast<float*>(rstd.get());
      engine.prepare(spec).launch(a, nullptr);
      NORMJIT_CU(driver::api().cuCtxSynchronize());
      const RunResult r = p.compare(p.y);
      EXPECT_TRUE(r.all_finite) << spec.to_string();
      std::vector<float> got_mean(stats + pad), got_rstd(stats + pad);
      mean.download(got_mean.data(), got_mean.size() * 4);
      rstd.download(got_rstd.data(), got_rstd.size() * 4);
      double worst_mean = 0, worst_rstd = 0;
      for (int64_t b = 0; b < n; ++b) {
        for (int64_t pos = 0; pos < s; ++pos) {
          double m = 0, v = 0;
          for (int64_t ch = 0; ch < c; ++ch) m += p.x_rounded[(b * c + ch) * s + pos];
          m /= double(c);
          for (int64_t ch = 0; ch < c; ++ch) {
            const double d = p.x_rounded[(b * c + ch) * s + pos] - m;
            v += d * d;
          }
          v /= double(c);
          const double ref_rstd = 1.0 / std::sqrt(v + double(float(spec.eps)));
          const size_t i = size_t(b * s + pos);
          worst_mean = std::max(worst_mean,
                                std::fabs(got_mean[i] - m) / (std::fabs(m) + std::sqrt(v) + 1e-30));
          worst_rstd = std::max(worst_rstd, std::fabs(got_rstd[i] - ref_rstd) / ref_rstd);
        }
      }
      EXPECT_LT(worst_mean, 1e-5) << spec.to_string();
      EXPECT_LT(worst_rstd, 1e-4) << spec.to_string();  // large mean: f32 of |mean| / std 1e4
      for (size_t i = stats; i < stats + pad; ++i) {
        EXPECT_TRUE(std::isnan(got_mean[i])) << "mean written past [N, S] at " << i;
        EXPECT_TRUE(std::isnan(got_rstd[i])) << "rstd written past [N, S] at " << i;
      }
    }
  }
}

TEST_F(LayerNormChannels, ParametersOfCAreChecked) {
  // weight and bias are [C]: a launch without them is refused when the spec has them.
  device::PrimaryContext context;
  Engine engine(test_engine_options());
  const NormSpec spec = layernorm2d({2, 64, 8, 8}, Dtype::kF32, Affine::kBoth);
  Problem p(spec, Values::kNormal, 3);
  Kernel k = engine.prepare(spec);
  try {
    k.launch({p.x.get(), p.y.get(), p.w.get(), nullptr, 2, 1e-5f}, nullptr);
    ADD_FAILURE() << "launch without a bias accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("bias"), std::string::npos) << e.what();
  }
  EXPECT_EQ(spec.param_elements(), 64);
}

}  // namespace
}  // namespace normjit::testing
