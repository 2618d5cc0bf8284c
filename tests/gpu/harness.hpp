// GPU test harness: run a spec on the device with random (or adversarial) inputs, poisoned
// outputs, and compare every element with the float64 reference.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "normjit/normjit.hpp"
#include "runtime/device.hpp"
#include "tests/unit/driver_graph.hpp"
#include "tools/reference.hpp"

namespace normjit::testing {

// Skips the test with a visible message when there is no GPU.
#define NORMJIT_REQUIRE_GPU()                                            \
  do {                                                                   \
    if (!::normjit::gpu_available())                                     \
      GTEST_SKIP() << "no GPU: " << ::normjit::gpu_unavailable_reason(); \
  } while (0)

enum class Values {
  kNormal,     // mean 0.5, std 2
  kLargeMean,  // mean 1e4, std 1: variance by subtraction of squares would be garbage
  kTiny,       // magnitudes around 1e-6
  kConstant,   // every element equal: variance 0
  kNegative,   // all negative, mean -3
};

inline const char* to_string(Values v) {
  switch (v) {
    case Values::kNormal:
      return "normal";
    case Values::kLargeMean:
      return "large-mean";
    case Values::kTiny:
      return "tiny";
    case Values::kConstant:
      return "constant";
    case Values::kNegative:
      return "negative";
  }
  return "?";
}

inline std::vector<float> random_values(size_t n, Values kind, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> out(n);
  for (float& v : out) {
    const float z = normal(rng);
    switch (kind) {
      case Values::kNormal:
        v = 0.5f + 2.0f * z;
        break;
      case Values::kLargeMean:
        v = 1e4f + z;
        break;
      case Values::kTiny:
        v = 1e-6f * z;
        break;
      case Values::kConstant:
        v = 3.25f;
        break;
      case Values::kNegative:
        v = -3.0f - std::fabs(z);
        break;
    }
  }
  return out;
}

// GPU tests share one engine set-up: memory-only unless NORMJIT_TEST_CACHE_DIR names a cache
// (which makes re-runs skip NVRTC).
inline EngineOptions test_engine_options() {
  EngineOptions o;
  if (const char* dir = std::getenv("NORMJIT_TEST_CACHE_DIR")) {
    o.cache_dir = dir;
  } else {
    o.memory_only = true;
  }
  return o;
}

// A spec from its fields; k < 0 keeps the op's default normalized dims.
inline NormSpec make(Op op, std::vector<int64_t> shape, Dtype dtype, Affine affine, int k = -1,
                     int64_t groups = 0) {
  SpecFields f;
  f.op = op;
  f.shape = shape;
  f.dtype = dtype;
  f.affine = affine;
  if (k >= 0) f.normalized_dims = k;
  if (op == Op::kGroupNorm) f.groups = groups;
  return NormSpec::from_fields(f);
}

// The backward tests' errors of dx, dweight and dbias against float64: ||got - ref|| / ||ref||;
// finite is false where an element is NaN (left poisoned) or inf.
struct GradErrors {
  double dx = 0, dweight = 0, dbias = 0;
  bool finite = true;
};

// A buffer's bytes on the host.
inline std::vector<unsigned char> download(const device::Buffer& b) {
  std::vector<unsigned char> out(b.bytes());
  b.download(out.data(), out.size());
  return out;
}

// One element's share of ||got - ref||^2 and ||ref||^2 (finite set false by a non-finite got).
inline void accumulate(double got, double ref, double& err2, double& ref2, bool& finite) {
  if (!std::isfinite(got)) finite = false;
  err2 += (got - ref) * (got - ref);
  ref2 += ref * ref;
}

// ||got - ref|| / ||ref|| from the sums accumulate() made; infinite where an element was not.
inline double relative(double err2, double ref2, bool finite) {
  return finite ? std::sqrt(err2 / std::max(ref2, 1e-300)) : INFINITY;
}

inline double tolerance(Dtype dtype) { return dtype == Dtype::kF32 ? 1e-5 : 1e-2; }

// No floating-point atomics in a backward: launched again over the same inputs (its outputs
// poisoned first), RUN writes the bits of its first run (RUN.run() done), RERUNS times on the
// null stream and, with ON_ANOTHER_STREAM, once more on a stream of its own (its own
// workspace). RUN: a test's backward problem with poison(), backward(stream) and bits().
template <class Run>
void expect_same_bits_again(Run& run, const std::string& name, int reruns = 1,
                            bool on_another_stream = false) {
  const std::vector<unsigned char> first = run.bits();
  for (int i = 0; i < reruns; ++i) {
    run.poison();
    run.backward();
    NORMJIT_CU(driver::api().cuCtxSynchronize());
    EXPECT_TRUE(run.bits() == first)
        << name << (reruns == 1 ? ": a second run" : ": run " + std::to_string(i + 2))
        << " differs";
  }
  if (!on_another_stream) return;
  device::Stream other;
  run.poison();
  run.backward(other.get());
  NORMJIT_CU(driver::api().cuStreamSynchronize(other.get()));
  EXPECT_TRUE(run.bits() == first) << name << ": another stream differs";
}

struct RunResult {
  double rel_error = 0;    // ||y - ref|| / ||ref|| over every element
  bool all_finite = true;  // no element left poisoned (NaN) or overflowing
};

// One problem on the device: x (random, seeded), parameters, a poisoned output, and the
// host values of x and the parameters as the dtype rounds them, for the float64 reference.
struct Problem {
  NormSpec spec;
  std::vector<float> x_rounded;
  std::vector<double> weight, bias;
  device::Buffer x, y, w, b;

  Problem(const NormSpec& s, Values values, uint64_t seed)
      : spec(s), x(size_t(s.elements()) * size_of(s.dtype)), y(x.bytes()) {
    new_x(values, seed);
    poison();
    std::mt19937_64 rng(seed + 1);
    std::normal_distribution<float> normal(1.0f, 0.5f);
    auto make_param = [&](device::Buffer& buffer, std::vector<double>& rounded, float shift) {
      std::vector<float> v(spec.param_elements());
      for (float& e : v) e = normal(rng) + shift;
      const auto bytes = reference::encode(spec.dtype, v);
      buffer = device::Buffer(bytes.size());
      buffer.upload(bytes.data(), bytes.size());
      for (float e : reference::decode(spec.dtype, bytes.data(), v.size())) rounded.push_back(e);
    };
    if (spec.affine != Affine::kNone) make_param(w, weight, 0.0f);
    if (spec.affine == Affine::kBoth) make_param(b, bias, -1.0f);
  }

  // Fresh values into the same x buffer (a captured graph reads them on replay).
  void new_x(Values values, uint64_t seed) {
    const size_t n = size_t(spec.elements());
    const std::vector<unsigned char> host =
        reference::encode(spec.dtype, random_values(n, values, seed));
    x_rounded = reference::decode(spec.dtype, host.data(), n);
    x.upload(host.data(), host.size());
  }
  void poison() { y.fill_bytes(0xff); }  // NaN in every dtype: an unwritten element cannot pass

  // Every element of out against the float64 reference of the current x.
  RunResult compare(const device::Buffer& out) const {
    const size_t n = size_t(spec.elements());
    std::vector<unsigned char> y_host(n * size_of(spec.dtype));
    out.download(y_host.data(), y_host.size());
    const std::vector<float> got = reference::decode(spec.dtype, y_host.data(), n);
    RunResult r;
    double err2 = 0, ref2 = 0;
    const int64_t units = reference::units(spec);
    for (int64_t u = 0; u < units; ++u) {
      const reference::Unit unit = reference::unit(spec, u);
      std::vector<double> xu;
      for (int64_t o : unit.offsets) xu.push_back(x_rounded[o]);
      const std::vector<double> ref = reference::normalize(spec, unit, xu, weight, bias);
      for (size_t i = 0; i < ref.size(); ++i) {
        const double g = got[unit.offsets[i]];
        if (!std::isfinite(g)) r.all_finite = false;
        err2 += (g - ref[i]) * (g - ref[i]);
        ref2 += ref[i] * ref[i];
      }
    }
    r.rel_error = r.all_finite ? std::sqrt(err2 / std::max(ref2, 1e-300)) : INFINITY;
    return r;
  }
};

// Runs spec through engine on fresh random inputs (seeded) and compares every element.
inline RunResult run_and_compare(Engine& engine, const NormSpec& spec, Values values, uint64_t seed,
                                 bool in_place = false) {
  Problem p(spec, values, seed);
  const device::Buffer& out = in_place ? p.x : p.y;
  engine.run(spec, p.x.get(), out.get(), p.w.get(), p.b.get(), nullptr);
  NORMJIT_CU(driver::api().cuCtxSynchronize());
  return p.compare(out);
}

// Prepares every spec with up to 8 threads (NVRTC compiles in parallel; the engine joins
// concurrent builds), so that a test over many kernels waits for the slowest compile, not the
// sum. Errors are left to the test, which prepares each spec again where it uses it.
inline void prepare_in_parallel(Engine& engine, const std::vector<NormSpec>& specs) {
  const unsigned threads = std::min(8u, std::max(1u, std::thread::hardware_concurrency()));
  std::atomic<size_t> next{0};
  std::vector<std::thread> pool;
  for (unsigned t = 0; t < threads; ++t) {
    pool.emplace_back([&] {
      for (size_t i = next++; i < specs.size(); i = next++) {
        try {
          engine.prepare(specs[i]);
        } catch (...) {
          // reported where the spec is used
        }
      }
    });
  }
  for (std::thread& t : pool) t.join();
}

// Graph-safe backward: RUN's backward captured on a stream it never used, then replayed three
// times, each with new dy in the captured buffer (seeds SEED, SEED + 1, SEED + 2) and its outputs
// poisoned; CHECK(what) checks each replay's outputs, WHAT naming the replay ("replay 0", ...).
// RUN: a test's backward problem with backward(stream), new_dy(seed) and poison().
template <class Run, class Check>
void expect_graph_replays(Run& run, uint64_t seed, Check&& check) {
  device::Stream stream;
  const CapturedGraph graph(stream.get(), [&] { run.backward(stream.get()); });
  for (int replay = 0; replay < 3; ++replay) {
    run.new_dy(seed + uint64_t(replay));
    run.poison();
    graph.replay(stream.get());
    NORMJIT_CU(driver::api().cuStreamSynchronize(stream.get()));
    check("replay " + std::to_string(replay));
  }
}

}  // namespace normjit::testing
