#include "runtime/driver.hpp"

#include <cudaTypedefs.h>
#include <dlfcn.h>

#include <mutex>
#include <type_traits>

#include "normjit/error.hpp"

namespace normjit::driver {
namespace {

struct Loaded {
  Api api;
  std::string error;  // empty when api is usable
};

Loaded load() {
  Loaded out;
  void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    out.error = "the CUDA driver (libcuda.so.1) is not installed: " + std::string(dlerror());
    return out;
  }
  // Deliberately never dlclose'd: modules and contexts may outlive any owner of ours.
  using GetProc =
      CUresult (*)(const char*, void**, int, cuuint64_t, CUdriverProcAddressQueryResult*);
  auto get_proc = reinterpret_cast<GetProc>(dlsym(lib, "cuGetProcAddress_v2"));
  if (!get_proc) {
    out.error = "the CUDA driver is too old (no cuGetProcAddress_v2; CUDA 12.0 or newer needed)";
    return out;
  }
  Api api;
  // Each function is asked for at a version whose signature is the one <cuda.h> declares, and
  // so the one the table's member has (cudaTypedefs.h names each version's type): a version whose
  // signature differs is a compile error. An older version of the same signature passes (as
  // cuEventElapsedTime at 2000, which <cuda.h> now maps to its 12.8 _v2).
#define NORMJIT_CHECK_VERSION(name, version)                                \
  static_assert(std::is_same_v<PFN_##name##_v##version, decltype(&::name)>, \
                #name " is not declared in <cuda.h> as its version " #version " is");
  NORMJIT_FOR_EACH_DRIVER_FUNCTION(NORMJIT_CHECK_VERSION)
#undef NORMJIT_CHECK_VERSION
#define NORMJIT_LOAD_MEMBER(name, version)                                                     \
  {                                                                                            \
    void* fn = nullptr;                                                                        \
    CUdriverProcAddressQueryResult status{};                                                   \
    if (get_proc(#name, &fn, version, CU_GET_PROC_ADDRESS_DEFAULT, &status) != CUDA_SUCCESS || \
        !fn) {                                                                                 \
      out.error = "the CUDA driver lacks " #name " (version " #version ")";                    \
      return out;                                                                              \
    }                                                                                          \
    api.name = reinterpret_cast<decltype(api.name)>(fn);                                       \
  }
  NORMJIT_FOR_EACH_DRIVER_FUNCTION(NORMJIT_LOAD_MEMBER)
#undef NORMJIT_LOAD_MEMBER
  const CUresult init = api.cuInit(0);
  if (init != CUDA_SUCCESS) {
    out.error = "cuInit failed: " + [&] {
      const char* name = nullptr;
      api.cuGetErrorName(init, &name);
      return std::string(name ? name : "unknown error");
    }();
    if (init == CUDA_ERROR_NO_DEVICE) out.error = "no CUDA device is present";
    return out;
  }
  int count = 0;
  if (api.cuDeviceGetCount(&count) != CUDA_SUCCESS || count == 0) {
    out.error = "no CUDA device is present";
    return out;
  }
  out.api = api;
  return out;
}

const Loaded& loaded() {
  static const Loaded instance = load();
  return instance;
}

}  // namespace

const Api& api() {
  const Loaded& l = loaded();
  if (!l.error.empty()) throw Error(ErrorCode::kNoDevice, "no GPU available: " + l.error);
  return l.api;
}

std::string unavailable_reason() { return loaded().error; }

std::string describe(CUresult result) {
  const Loaded& l = loaded();
  const char* name = nullptr;
  const char* text = nullptr;
  if (l.api.cuGetErrorName) l.api.cuGetErrorName(result, &name);
  if (l.api.cuGetErrorString) l.api.cuGetErrorString(result, &text);
  std::string out = name ? name : ("CUresult " + std::to_string(int(result)));
  if (text) out += std::string(" (") + text + ")";
  return out;
}

bool rejects_the_image(CUresult result) {
  switch (result) {
    // The state of the context, the device or the process: the image may be fine.
    case CUDA_SUCCESS:
    case CUDA_ERROR_OUT_OF_MEMORY:
    case CUDA_ERROR_NOT_INITIALIZED:
    case CUDA_ERROR_DEINITIALIZED:
    case CUDA_ERROR_NO_DEVICE:
    case CUDA_ERROR_INVALID_DEVICE:
    case CUDA_ERROR_INVALID_CONTEXT:
    case CUDA_ERROR_CONTEXT_IS_DESTROYED:
    case CUDA_ERROR_CONTEXT_ALREADY_IN_USE:
    case CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED:
    case CUDA_ERROR_STREAM_CAPTURE_INVALIDATED:
    case CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD:
    case CUDA_ERROR_ILLEGAL_ADDRESS:  // a kernel's earlier fault, sticky
    case CUDA_ERROR_ILLEGAL_INSTRUCTION:
    case CUDA_ERROR_MISALIGNED_ADDRESS:
    case CUDA_ERROR_INVALID_ADDRESS_SPACE:
    case CUDA_ERROR_INVALID_PC:
    case CUDA_ERROR_LAUNCH_FAILED:
    case CUDA_ERROR_HARDWARE_STACK_ERROR:
    case CUDA_ERROR_ECC_UNCORRECTABLE:
    case CUDA_ERROR_ASSERT:
    case CUDA_ERROR_SYSTEM_NOT_READY:
    case CUDA_ERROR_SYSTEM_DRIVER_MISMATCH:
      return false;
    default:  // the image (corrupt, for another GPU, a newer toolkit, without the kernel)
      return true;
  }
}

void throw_driver_error(CUresult result, const char* call, const char* file, int line) {
  throw Error(ErrorCode::kDriver, std::string(call) + " failed: " + describe(result) + " at " +
                                      file + ":" + std::to_string(line));
}

}  // namespace normjit::driver
