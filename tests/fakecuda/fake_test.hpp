// What the tests on the fake driver share: a fixture that fails a test for any driver misuse
// the fake noted, device memory, a problem's buffers, and a captured graph.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "normjit/normjit.hpp"
#include "runtime/driver.hpp"
#include "tests/fakecuda/fake_cuda.hpp"
#include "tests/unit/temp_dir.hpp"

namespace normjit::fake_testing {

using testing::TempDir;

// One cache directory for the whole binary: each kernel is compiled once, whichever test asks.
inline const std::string& shared_cache_dir() {
  static const TempDir dir;
  return dir.path();
}

inline EngineOptions options() {
  EngineOptions o;
  o.cache_dir = shared_cache_dir();
  o.readonly_cache_dirs = {};
  return o;
}

inline NormSpec spec_of(const std::string& text) { return NormSpec::parse(text); }

// A row kernel (one launch, no workspace) and a split kernel (cooperative, a workspace).
inline const char* const kRows =
    "op=rmsnorm shape=8,4096 normalized_dims=1 dtype=bf16 affine=weight";
inline const char* const kSplit = "op=layernorm shape=3,1000003 normalized_dims=1 dtype=bf16";

// Device memory of the fake (host memory), freed in its context.
class Buffer {
 public:
  explicit Buffer(size_t bytes) { NORMJIT_CU(driver::api().cuMemAlloc(&ptr_, bytes)); }
  ~Buffer() { driver::api().cuMemFree(ptr_); }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  void* get() const { return reinterpret_cast<void*>(ptr_); }

 private:
  CUdeviceptr ptr_ = 0;
};

// x, y, weight and bias of a spec, in the current context.
struct Problem {
  explicit Problem(const NormSpec& s)
      : spec(s),
        x(size_t(s.elements()) * 4),
        y(size_t(s.elements()) * 4),
        w(size_t(std::max<int64_t>(s.param_elements(), 1)) * 4),
        b(size_t(std::max<int64_t>(s.param_elements(), 1)) * 4) {}
  LaunchArgs args() const {
    return LaunchArgs{x.get(),
                      y.get(),
                      spec.affine != Affine::kNone ? w.get() : nullptr,
                      spec.affine == Affine::kBoth ? b.get() : nullptr,
                      spec.batch(),
                      1e-5f};
  }
  NormSpec spec;
  Buffer x, y, w, b;
};

inline CUcontext current() {
  CUcontext c = nullptr;
  NORMJIT_CU(driver::api().cuCtxGetCurrent(&c));
  return c;
}

inline unsigned long long id_of(CUcontext c) {
  unsigned long long id = 0;
  NORMJIT_CU(driver::api().cuCtxGetId(c, &id));
  return id;
}

class FakeDriver : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_EQ(driver::unavailable_reason(), "") << "the fake driver did not load";
    fakecuda::clear_launches();
    fakecuda::clear_misuses();
  }
  void TearDown() override {
    const std::vector<std::string> misuses = fakecuda::misuses();
    for (const std::string& m : misuses) ADD_FAILURE() << "driver misuse: " << m;
  }
};

// A CUDA graph captured (global mode) from what `record` enqueues on `stream`, instantiated.
class Graph {
 public:
  template <class Record>
  Graph(CUstream stream, Record&& record) {
    const driver::Api& cu = driver::api();
    NORMJIT_CU(cu.cuStreamBeginCapture(stream, CU_STREAM_CAPTURE_MODE_GLOBAL));
    record();
    NORMJIT_CU(cu.cuStreamEndCapture(stream, &graph_));
    NORMJIT_CU(cu.cuGraphInstantiateWithFlags(&exec_, graph_, 0));
  }
  ~Graph() {
    if (exec_) driver::api().cuGraphExecDestroy(exec_);
    if (graph_) driver::api().cuGraphDestroy(graph_);
  }
  Graph(const Graph&) = delete;
  Graph& operator=(const Graph&) = delete;
  void replay(CUstream stream) const { NORMJIT_CU(driver::api().cuGraphLaunch(exec_, stream)); }
  size_t kernel_nodes() const {
    const driver::Api& cu = driver::api();
    size_t count = 0;
    NORMJIT_CU(cu.cuGraphGetNodes(graph_, nullptr, &count));
    std::vector<CUgraphNode> nodes(count);
    NORMJIT_CU(cu.cuGraphGetNodes(graph_, nodes.data(), &count));
    size_t kernels = 0;
    for (CUgraphNode node : nodes) {
      CUDA_KERNEL_NODE_PARAMS params{};
      kernels += cu.cuGraphKernelNodeGetParams(node, &params) == CUDA_SUCCESS ? 1 : 0;
    }
    return kernels;
  }

 private:
  CUgraph graph_ = nullptr;
  CUgraphExec exec_ = nullptr;
};

}  // namespace normjit::fake_testing
