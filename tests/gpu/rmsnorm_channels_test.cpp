// RMSNorm channel form on the GPU against the float64 reference: many shapes, every dtype,
// with and without weight, adversarial values, in place, and bad launches refused.
#include <algorithm>
#include <filesystem>
#include <thread>

#include "harness.hpp"

namespace normjit::testing {
namespace {

struct Case {
  std::vector<int64_t> shape;
  Dtype dtype;
  Affine affine;
};

std::string name(const Case& c) {
  return "op=rmsnorm shape=" + format_shape(c.shape) + " dtype=" + normjit::to_string(c.dtype) +
         " affine=" + normjit::to_string(c.affine);
}

class RmsNormChannels : public ::testing::Test {
 protected:
  void SetUp() override { NORMJIT_REQUIRE_GPU(); }
};

TEST_F(RmsNormChannels, MatchesFloat64OnManyShapes) {
  device::PrimaryContext context;
  Engine engine(test_engine_options());
  const std::vector<std::vector<int64_t>> shapes = {
      {1, 1, 1},       {3, 1, 7},    {2, 3, 1},     {1, 7, 65},     {2, 64, 32, 32},
      {3, 65, 1000},   {1, 1000, 3}, {2, 31, 4097}, {5, 2, 127},    {1, 64, 8, 8, 8},
      {4, 127, 1, 31}, {2, 4099, 4}, {7, 16, 2, 3}, {1, 256, 1024}, {9, 3, 64},
  };
  for (const auto& shape : shapes) {
    for (Dtype dtype : {Dtype::kF32, Dtype::kF16, Dtype::kBF16}) {
      for (Affine affine : {Affine::kNone, Affine::kWeight}) {
        const Case c{shape, dtype, affine};
        const NormSpec spec = NormSpec::parse(name(c));
        const RunResult r = run_and_compare(engine, spec, Values::kNormal, shape.size() + shape[0]);
        EXPECT_TRUE(r.all_finite) << spec.to_string();
        EXPECT_LT(r.rel_error, tolerance(dtype)) << spec.to_string();
      }
    }
  }
}

TEST_F(RmsNormChannels, AdversarialValues) {
  device::PrimaryContext context;
  Engine engine(test_engine_options());
  for (Values v : {Values::kLargeMean, Values::kTiny, Values::kConstant, Values::kNegative}) {
    for (Dtype dtype : {Dtype::kF32, Dtype::kF16, Dtype::kBF16}) {
      const NormSpec spec = NormSpec::parse("op=rmsnorm shape=3,65,33 affine=weight dtype=" +
                                            std::string(normjit::to_string(dtype)));
      const RunResult r = run_and_compare(engine, spec, v, 11);
      EXPECT_LT(r.rel_error, tolerance(dtype)) << spec.to_string() << " values " << to_string(v);
    }
  }
}

TEST_F(RmsNormChannels, InPlace) {
  device::PrimaryContext context;
  Engine engine(test_engine_options());
  const NormSpec spec = NormSpec::parse("op=rmsnorm shape=3,64,100 dtype=bf16 affine=weight");
  const RunResult r = run_and_compare(engine, spec, Values::kNormal, 5, /*in_place=*/true);
  EXPECT_LT(r.rel_error, tolerance(spec.dtype));
}

TEST_F(RmsNormChannels, OneKernelServesEveryBatchSize) {
  device::PrimaryContext context;
  Engine engine(test_engine_options());
  for (int64_t n : {1, 2, 17, 300}) {
    const NormSpec spec = NormSpec::parse("op=rmsnorm shape=" + std::to_string(n) + ",24,40");
    const RunResult r = run_and_compare(engine, spec, Values::kNormal, n);
    EXPECT_LT(r.rel_error, tolerance(spec.dtype)) << spec.to_string();
  }
  EXPECT_EQ(engine.counters().nvrtc_compiles + engine.counters().disk_hits, 1u);
}

TEST_F(RmsNormChannels, BadLaunchesAreRefusedAndLaunchNothing) {
  device::PrimaryContext context;
  Engine engine(test_engine_options());
  const NormSpec spec = NormSpec::parse("op=rmsnorm shape=2,64,32,32");
  Kernel k = engine.prepare(spec);
  const size_t bytes = size_t(spec.elements()) * 4;
  device::Buffer x(bytes + 64), y(bytes + 64);
  y.fill_bytes(0xab);
  char* xp = static_cast<char*>(x.get());
  char* yp = static_cast<char*>(y.get());
  auto refused = [&](const LaunchArgs& a, const std::string& word) {
    try {
      k.launch(a, nullptr);
      ADD_FAILURE() << "launch accepted; expected an error naming " << word;
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
      EXPECT_NE(std::string(e.what()).find(word), std::string::npos) << e.what();
    }
  };
  refused({nullptr, yp, nullptr, nullptr, 2, 1e-5f}, "x");
  refused({xp, nullptr, nullptr, nullptr, 2, 1e-5f}, "y");
  refused({xp + 4, yp, nullptr, nullptr, 2, 1e-5f}, "aligned");
  refused({xp, yp + 2, nullptr, nullptr, 2, 1e-5f}, "aligned");
  refused({xp, yp, xp, nullptr, 2, 1e-5f}, "weight");
  refused({xp, yp, nullptr, nullptr, 0, 1e-5f}, "batch");
  refused({xp, yp, nullptr, nullptr, -3, 1e-5f}, "batch");
  refused({xp, yp, nullptr, nullptr, 2, 0.0f}, "eps");
  refused({xp, xp + 64, nullptr, nullptr, 2, 1e-5f}, "overlaps");
  NORMJIT_CU(driver::api().cuCtxSynchronize());
  std::vector<unsigned char> after(bytes);
  y.download(after.data(), bytes);
  for (unsigned char v : after) ASSERT_EQ(v, 0xab) << "a refused launch wrote to y";
}

TEST_F(RmsNormChannels, ConcurrentPreparesCompileOnce) {
  device::PrimaryContext context;
  EngineOptions o;
  o.memory_only = true;
  Engine engine(o);
  const NormSpec spec = NormSpec::parse("op=rmsnorm shape=2,48,20 dtype=f16");
  std::vector<std::thread> threads;
  std::vector<std::string> keys(8);
  std::vector<Source> sources(8);
  for (int i = 0; i < 8; ++i) {
    threads.emplace_back([&, i] {
      NORMJIT_CU(driver::api().cuCtxSetCurrent(nullptr));  // each thread finds its context
      const Kernel kernel = engine.prepare(spec);
      keys[i] = kernel.key();
      sources[i] = kernel.source();
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(engine.counters().nvrtc_compiles, 1u);
  for (const auto& k : keys) EXPECT_EQ(k, keys[0]);
  // One thread built the kernel (compiled and loaded it); the others waited for that build or
  // found it published, and took it from memory.
  EXPECT_EQ(std::count(sources.begin(), sources.end(), Source::kCompiled), 1);
  EXPECT_EQ(std::count(sources.begin(), sources.end(), Source::kMemory), 7);
  EXPECT_EQ(engine.counters().memory_hits, 7u);
}

TEST_F(RmsNormChannels, SecondEngineLoadsFromDisk) {
  device::PrimaryContext context;
  char dir[] = "/tmp/normjit-gpu-cache-XXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  EngineOptions o;
  o.cache_dir = dir;
  const NormSpec spec = NormSpec::parse("op=rmsnorm shape=2,40,24 dtype=bf16");
  {
    Engine first(o);
    EXPECT_EQ(first.prepare(spec).source(), Source::kCompiled);
    EXPECT_EQ(first.prepare(spec).source(), Source::kMemory);
  }
  Engine second(o);
  EXPECT_EQ(second.prepare(spec).source(), Source::kDisk);
  EXPECT_EQ(second.counters().nvrtc_compiles, 0u);
  const RunResult r = run_and_compare(second, spec, Values::kNormal, 3);
  EXPECT_LT(r.rel_error, tolerance(spec.dtype));
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace normjit::testing
