// What the tests on the fake driver share: a fixture that fails a test for any driver misuse
// the fake noted, device memory, a problem's buffers, and a captured graph.
#pragma once

#include <gtest/gtest.h>
#include <stdlib.h>

#include <algorithm>
#include <string>
#include <vector>

#include "normjit/normjit.hpp"
#include "runtime/device.hpp"
#include "runtime/driver.hpp"
#include "tests/fakecuda/fake_cuda.hpp"
#include "tests/unit/driver_graph.hpp"
#include "tests/unit/temp_dir.hpp"

namespace normjit::fake_testing {

using testing::CapturedGraph;
using testing::current_context;
using testing::id_of;
using testing::TempDir;

// One cache directory for the whole binary: each kernel is compiled once, whichever test asks.
inline const std::string& shared_cache_dir() {
  static const TempDir dir;
  return dir.path();
}

inline EngineOptions options() {
  EngineOptions o;
  o.cache_dir = shared_cache_dir();
  o.no_readonly_cache_dirs = true;
  return o;
}

inline NormSpec spec_of(const std::string& text) { return NormSpec::parse(text); }

// A row kernel (one launch, no workspace) and a split kernel (cooperative, a workspace).
inline const char* const kRows =
    "op=rmsnorm shape=8,4096 normalized_dims=1 dtype=bf16 affine=weight";
inline const char* const kSplit = "op=layernorm shape=3,1000003 normalized_dims=1 dtype=bf16";

// x, y, weight and bias of a spec, in the current context.
struct Problem {
  explicit Problem(const NormSpec& s)
      : spec(s),
        x(size_t(s.elements()) * 4),
        y(size_t(s.elements()) * 4),
        w(size_t(s.param_elements()) * 4),
        b(size_t(s.param_elements()) * 4) {}
  LaunchArgs args() const {
    return LaunchArgs{x.get(),
                      y.get(),
                      spec.affine != Affine::kNone ? w.get() : nullptr,
                      spec.affine == Affine::kBoth ? b.get() : nullptr,
                      spec.batch(),
                      1e-5f};
  }
  NormSpec spec;
  device::Buffer x, y, w, b;
};

class FakeDriver : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_EQ(driver::unavailable_reason(), "") << "no driver loaded";
    // The fake, not a libcuda.so.1 that LD_LIBRARY_PATH found first (the binary's RPATH should
    // win: tests/fakecuda/CMakeLists.txt).
    char name[256] = {};
    driver::api().cuDeviceGetName(name, sizeof(name), 0);
    ASSERT_NE(std::string(name).find("fakecuda"), std::string::npos) << "driver: " << name;
    // The engines' settings are the tests', not the environment's.
    for (const char* variable : {"NORMJIT_JIT", "NORMJIT_DRAM_GBPS", "NORMJIT_CACHE_DIR",
                                 "NORMJIT_CACHE_READONLY", "NORMJIT_CACHE_MAX_BYTES"}) {
      ::unsetenv(variable);
    }
    fakecuda::hold_destructors(false);
    fakecuda::clear_launches();
    fakecuda::clear_misuses();
  }
  void TearDown() override {
    fakecuda::hold_destructors(false);  // a test that stopped while holding them
    fakecuda::drain_destructors();
    for (const std::string& m : fakecuda::misuses()) ADD_FAILURE() << "driver misuse: " << m;
    EXPECT_EQ(fakecuda::armed_failures(), 0u) << "a fail_next() that no call took";
  }
};

}  // namespace normjit::fake_testing
