#include "runtime/driver.hpp"

#include <dlfcn.h>

#include <mutex>

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

void throw_driver_error(CUresult result, const char* call, const char* file, int line) {
  throw Error(ErrorCode::kDriver, std::string(call) + " failed: " + describe(result) + " at " +
                                      file + ":" + std::to_string(line));
}

}  // namespace normjit::driver
