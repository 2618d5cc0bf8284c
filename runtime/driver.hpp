// The CUDA driver API, loaded at run time from libcuda.so.1 through cuGetProcAddress, so
// that nothing links against the driver and every tool starts on a machine without one.
#pragma once

#include <cuda.h>

#include <string>

namespace normjit::driver {

// Every driver function normjit uses, once, with the lowest API version whose signature
// matches the declaration in <cuda.h> that we compile against. A driver that lacks one is not
// used at all (unavailable_reason names it): cuStreamGetCaptureInfo's 12.3 signature sets the
// floor, so the functions of 12.0 and before (cuCtxGetId) need no fallback.
#define NORMJIT_FOR_EACH_DRIVER_FUNCTION(X)            \
  X(cuInit, 2000)                                      \
  X(cuDriverGetVersion, 2020)                          \
  X(cuGetErrorName, 6000)                              \
  X(cuGetErrorString, 6000)                            \
  X(cuDeviceGet, 2000)                                 \
  X(cuDeviceGetCount, 2000)                            \
  X(cuDeviceGetName, 2000)                             \
  X(cuDeviceGetAttribute, 2000)                        \
  X(cuDevicePrimaryCtxRetain, 7000)                    \
  X(cuDevicePrimaryCtxRelease, 11000)                  \
  X(cuCtxGetCurrent, 4000)                             \
  X(cuCtxSetCurrent, 4000)                             \
  X(cuCtxGetDevice, 2000)                              \
  X(cuCtxGetId, 12000)                                 \
  X(cuCtxSynchronize, 2000)                            \
  X(cuCtxPushCurrent, 4000)                            \
  X(cuCtxPopCurrent, 4000)                             \
  X(cuModuleLoadData, 2000)                            \
  X(cuModuleUnload, 2000)                              \
  X(cuModuleGetFunction, 2000)                         \
  X(cuFuncGetAttribute, 2020)                          \
  X(cuFuncSetAttribute, 9000)                          \
  X(cuLaunchKernel, 4000)                              \
  X(cuLaunchCooperativeKernel, 9000)                   \
  X(cuOccupancyMaxActiveBlocksPerMultiprocessor, 6050) \
  X(cuMemAlloc, 3020)                                  \
  X(cuMemFree, 3020)                                   \
  X(cuMemcpyHtoD, 3020)                                \
  X(cuMemcpyDtoH, 3020)                                \
  X(cuMemcpyDtoD, 3020)                                \
  X(cuMemsetD8, 3020)                                  \
  X(cuMemGetAddressRange, 3020)                        \
  X(cuEventCreate, 2000)                               \
  X(cuEventRecord, 2000)                               \
  X(cuEventSynchronize, 2000)                          \
  X(cuEventElapsedTime, 2000)                          \
  X(cuEventDestroy, 4000)                              \
  X(cuStreamSynchronize, 2000)                         \
  X(cuStreamCreate, 2000)                              \
  X(cuStreamDestroy, 4000)                             \
  X(cuMemsetD8Async, 3020)                             \
  X(cuMemcpyHtoDAsync, 3020)                           \
  X(cuStreamGetCaptureInfo, 12030)                     \
  X(cuThreadExchangeStreamCaptureMode, 10010)          \
  X(cuStreamBeginCapture, 10010)                       \
  X(cuStreamEndCapture, 10000)                         \
  X(cuGraphInstantiateWithFlags, 11040)                \
  X(cuGraphLaunch, 10000)                              \
  X(cuGraphDestroy, 10000)                             \
  X(cuGraphExecDestroy, 10000)                         \
  X(cuGraphGetNodes, 10000)                            \
  X(cuGraphKernelNodeGetParams, 12000)                 \
  X(cuUserObjectCreate, 11030)                         \
  X(cuUserObjectRelease, 11030)                        \
  X(cuGraphRetainUserObject, 11030)

struct Api {
#define NORMJIT_DECLARE_MEMBER(name, version) decltype(&::name) name = nullptr;
  NORMJIT_FOR_EACH_DRIVER_FUNCTION(NORMJIT_DECLARE_MEMBER)
#undef NORMJIT_DECLARE_MEMBER
};

// The loaded table, after cuInit(0). Throws Error(kNoDevice) naming the reason when there is
// no driver, no GPU, or the driver is too old. Loads once; thread-safe.
const Api& api();
// Same check without throwing: empty when usable, else the reason.
std::string unavailable_reason();

// "CUDA_ERROR_INVALID_VALUE (invalid argument)"
std::string describe(CUresult result);

// Whether a failure to load a cubin (cuModuleLoadData, cuModuleGetFunction) may be the image's:
// corrupt, for another GPU or a newer toolkit, or without the kernel. A cache entry is rebuilt
// then; a failure of the context, the device or the process (a destroyed context, no memory, a
// sticky fault) is the caller's error, and the entry stays.
bool rejects_the_image(CUresult result);

// Throws Error(kDriver): "<call> failed: <name> (<text>) at file:line".
[[noreturn]] void throw_driver_error(CUresult result, const char* call, const char* file, int line);

}  // namespace normjit::driver

// Every driver call goes through this: it records the call text, the error name and where.
#define NORMJIT_CU(call)                                                                    \
  do {                                                                                      \
    const CUresult normjit_cu_result_ = (call);                                             \
    if (normjit_cu_result_ != CUDA_SUCCESS)                                                 \
      ::normjit::driver::throw_driver_error(normjit_cu_result_, #call, __FILE__, __LINE__); \
  } while (0)
