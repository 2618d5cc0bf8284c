// Driver-level helpers of the tests that run kernels' launches (tests/gpu on a GPU, tests/fakecuda
// on the fake driver): the current context and its id, and a CUDA graph captured from what a test
// enqueues.
#pragma once

#include <cuda.h>

#include <vector>

#include "runtime/driver.hpp"

namespace normjit::testing {

inline CUcontext current_context() {
  CUcontext out = nullptr;
  NORMJIT_CU(driver::api().cuCtxGetCurrent(&out));
  return out;
}

inline unsigned long long id_of(CUcontext context) {
  unsigned long long out = 0;
  NORMJIT_CU(driver::api().cuCtxGetId(context, &out));
  return out;
}

// A CUDA graph captured (global mode) from whatever `record` enqueues on `stream`, instantiated;
// owns both, or with kExecutableOnly the executable graph alone (the graph destroyed at once,
// so that the executable graph alone holds what the capture left). If record throws, the capture
// is ended (the stream stays usable) and the error passes on.
class CapturedGraph {
 public:
  enum Keep { kBoth, kExecutableOnly };
  template <class Record>
  CapturedGraph(CUstream stream, Record&& record, Keep keep = kBoth) {
    const driver::Api& cu = driver::api();
    NORMJIT_CU(cu.cuStreamBeginCapture(stream, CU_STREAM_CAPTURE_MODE_GLOBAL));
    try {
      record();
    } catch (...) {
      if (cu.cuStreamEndCapture(stream, &graph_) == CUDA_SUCCESS && graph_) {
        cu.cuGraphDestroy(graph_);
      }
      graph_ = nullptr;
      throw;
    }
    NORMJIT_CU(cu.cuStreamEndCapture(stream, &graph_));
    const CUresult instantiated = cu.cuGraphInstantiateWithFlags(&exec_, graph_, 0);
    if (instantiated != CUDA_SUCCESS || keep == kExecutableOnly) {
      cu.cuGraphDestroy(graph_);
      graph_ = nullptr;
    }
    if (instantiated != CUDA_SUCCESS) {
      driver::throw_driver_error(instantiated, "cuGraphInstantiateWithFlags", __FILE__, __LINE__);
    }
  }
  ~CapturedGraph() {
    if (exec_) driver::api().cuGraphExecDestroy(exec_);
    if (graph_) driver::api().cuGraphDestroy(graph_);
  }
  CapturedGraph(const CapturedGraph&) = delete;
  CapturedGraph& operator=(const CapturedGraph&) = delete;
  void replay(CUstream stream) const { NORMJIT_CU(driver::api().cuGraphLaunch(exec_, stream)); }
  // The functions of the graph's kernel nodes (in the order the driver lists them); none where
  // only the executable graph was kept.
  std::vector<CUfunction> kernel_functions() const {
    std::vector<CUfunction> out;
    if (!graph_) return out;
    const driver::Api& cu = driver::api();
    size_t count = 0;
    NORMJIT_CU(cu.cuGraphGetNodes(graph_, nullptr, &count));
    std::vector<CUgraphNode> nodes(count);
    NORMJIT_CU(cu.cuGraphGetNodes(graph_, nodes.data(), &count));
    for (CUgraphNode node : nodes) {
      CUDA_KERNEL_NODE_PARAMS params{};
      if (cu.cuGraphKernelNodeGetParams(node, &params) == CUDA_SUCCESS) out.push_back(params.func);
    }
    return out;
  }

 private:
  CUgraph graph_ = nullptr;
  CUgraphExec exec_ = nullptr;
};

}  // namespace normjit::testing
