// CHECK(call): exits with the file, line and CUDA runtime's message when a runtime call fails. For
// the standalone CUDA programs under scripts/ (nhwc_group_bw.cu, nhwc_cluster_probe.cu,
// experiments/held_map_floor.cu), each built alone with nvcc.
#pragma once

#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>

#define CHECK(call)                                                                    \
  do {                                                                                 \
    cudaError_t e_ = (call);                                                           \
    if (e_ != cudaSuccess) {                                                           \
      std::fprintf(stderr, "%s:%d: %s\n", __FILE__, __LINE__, cudaGetErrorString(e_)); \
      std::exit(1);                                                                    \
    }                                                                                  \
  } while (0)
