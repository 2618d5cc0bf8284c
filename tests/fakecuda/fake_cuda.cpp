// The fake CUDA driver of fake_cuda.hpp: every function of runtime/driver.hpp's list, served
// through cuGetProcAddress_v2 as the real libcuda.so.1 serves them. One device, shaped as an
// H100 SXM (9.0, 132 multiprocessors), whose memory is host memory.
#include "tests/fakecuda/fake_cuda.hpp"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "runtime/driver.hpp"

// The driver's opaque types, defined here: a handle is a pointer to one of these.
struct CUctx_st {
  unsigned long long id = 0;  // 0: the slot is free (no context has this handle now)
  int primary_refs = 0;
};
struct CUmod_st {
  bool loaded = true;  // false once unloaded or gone with its context: kept, never reused
  unsigned long long context = 0;
  std::string image;  // the cubin's bytes, searched for function names
};
struct CUfunc_st {
  CUmod_st* module = nullptr;
  std::string name;
  int max_dynamic_smem = 48 * 1024;
};
struct CUstream_st {
  unsigned long long context = 0;
  bool alive = true;  // false once destroyed: a handle is never reused, so its misuse shows
  // The capture under way, if any: which thread began it and in which mode decide which calls
  // it forbids, and to which thread.
  CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
  CUstreamCaptureMode mode = CU_STREAM_CAPTURE_MODE_GLOBAL;
  std::thread::id capturer;
  cuuint64_t capture = 0;
  CUgraph graph = nullptr;
};
struct CUevent_st {};
struct CUgraphNode_st {
  bool kernel = false;
  fakecuda::Launch launch;  // kernel nodes
  CUDA_KERNEL_NODE_PARAMS driver_view{};
  void* params_pointer = nullptr;  // driver_view.kernelParams[0]
  CUdeviceptr memset_to = 0;       // memset nodes
  unsigned char memset_value = 0;
  size_t memset_bytes = 0;
};
struct CUuserObject_st {
  void* ptr = nullptr;
  CUhostFn destroy = nullptr;
  unsigned refs = 0;
};
struct CUgraph_st {
  std::vector<std::unique_ptr<CUgraphNode_st>> nodes;
  std::map<CUuserObject, unsigned> user_objects;  // references the graph holds
};
struct CUgraphExec_st {
  std::vector<CUgraphNode_st> nodes;
  std::map<CUuserObject, unsigned> user_objects;
};

namespace fakecuda {
namespace {

constexpr int kContextSlots = 8;
constexpr unsigned kSms = 132;
constexpr int kRegistersPerThread = 40;           // what every fake function "uses"
constexpr int kSharedPerBlockOptin = 232448;      // H100: 227 KiB a CTA
constexpr int kSharedPerMultiprocessor = 233472;  // H100: 228 KiB an SM
constexpr int kRegistersPerMultiprocessor = 65536;

struct State {
  std::mutex mutex;
  CUctx_st contexts[kContextSlots];
  unsigned long long next_context_id = 1;
  cuuint64_t next_capture = 1;
  std::vector<std::unique_ptr<CUmod_st>> modules;  // every module loaded, as tombstones once gone
  // Every function handle given out, kept for the process: a handle outlives its module (a
  // launch with it is then refused), so it is never freed under a caller that still holds it.
  std::vector<std::unique_ptr<CUfunc_st>> functions;
  std::map<CUdeviceptr, std::pair<size_t, unsigned long long>> allocations;  // size, context
  std::set<CUstream> streams;
  std::set<CUgraph> graphs;
  std::set<CUgraphExec> execs;
  std::set<CUuserObject> user_objects;
  std::vector<Launch> launches;
  std::vector<std::string> misuses;
  std::map<std::string, std::pair<CUresult, int>> failures;
  std::map<std::string, size_t> calls;
  CUstream_st legacy_stream;
  // CU_STREAM_PER_THREAD of each thread that used it: one stream a thread, seen by all threads'
  // capture rules.
  std::map<std::thread::id, std::unique_ptr<CUstream_st>> per_thread;
  // User-object destructors run later on a thread of the driver's, as CUDA runs them.
  std::deque<std::pair<CUhostFn, void*>> destructors;
  size_t destructors_running = 0;
  bool destructors_held = false;
  bool worker_started = false;
  std::condition_variable destructors_changed;
};

State& state() {
  static State* s = new State;  // never destroyed: threads may call in during exit
  return *s;
}

thread_local CUcontext t_current = nullptr;
thread_local std::vector<CUcontext> t_stack;
thread_local CUstreamCaptureMode t_mode = CU_STREAM_CAPTURE_MODE_GLOBAL;

using Lock = std::unique_lock<std::mutex>;

// Counts the call; the failure that fail_next() set for it, or CUDA_SUCCESS.
CUresult enter(State& s, const char* function) {
  ++s.calls[function];
  auto it = s.failures.find(function);
  if (it == s.failures.end() || it->second.second <= 0) return CUDA_SUCCESS;
  --it->second.second;
  return it->second.first;
}

#define FAKE_ENTER(name)                                   \
  State& s = state();                                      \
  Lock lock(s.mutex);                                      \
  if (CUresult injected = enter(s, name); injected != 0) { \
    return injected;                                       \
  }

unsigned long long live_id(CUcontext c) { return c ? c->id : 0; }

// The current context's id, 0 when there is none or it was destroyed.
unsigned long long current_id() { return live_id(t_current); }

CUstream_st* stream_of(State& s, CUstream stream) {
  if (stream == nullptr) return &s.legacy_stream;
  if (stream == CU_STREAM_PER_THREAD) {
    std::unique_ptr<CUstream_st>& mine = s.per_thread[std::this_thread::get_id()];
    if (!mine) mine = std::make_unique<CUstream_st>();
    return mine.get();
  }
  if (stream == CU_STREAM_LEGACY) return &s.legacy_stream;
  return s.streams.count(stream) && stream->alive ? stream : nullptr;
}

// A call that a capture forbids (it may synchronize or allocate), by the rules of
// cuThreadExchangeStreamCaptureMode: a thread whose mode is not relaxed may not make it while it
// has a capture of its own not begun relaxed, nor, where its mode is global, while another thread
// has a capture begun global. Refused, and those captures invalidated.
bool forbidden_by_capture(State& s, const char* what) {
  if (t_mode == CU_STREAM_CAPTURE_MODE_RELAXED) return false;
  const std::thread::id me = std::this_thread::get_id();
  std::vector<CUstream_st*> causes;
  const auto consider = [&](CUstream_st* stream) {
    if (stream->status != CU_STREAM_CAPTURE_STATUS_ACTIVE) return;
    const bool own = stream->capturer == me && stream->mode != CU_STREAM_CAPTURE_MODE_RELAXED;
    const bool others = stream->capturer != me && t_mode == CU_STREAM_CAPTURE_MODE_GLOBAL &&
                        stream->mode == CU_STREAM_CAPTURE_MODE_GLOBAL;
    if (own || others) causes.push_back(stream);
  };
  for (CUstream stream : s.streams) {
    if (stream->alive) consider(stream);
  }
  for (auto& [thread, stream] : s.per_thread) consider(stream.get());
  if (causes.empty()) return false;
  for (CUstream_st* stream : causes) stream->status = CU_STREAM_CAPTURE_STATUS_INVALIDATED;
  s.misuses.push_back(std::string(what) +
                      " while a stream was captured (its capture forbids it to this thread)");
  return true;
}

void release_user_object(State& s, CUuserObject object, unsigned count) {
  if (!s.user_objects.count(object) || count == 0 || count > object->refs) {
    s.misuses.push_back("a user object released " + std::to_string(count) +
                        " times where it holds fewer references (or none)");
    return;
  }
  object->refs -= count;
  if (object->refs == 0) {
    s.destructors.emplace_back(object->destroy, object->ptr);
    s.user_objects.erase(object);
    delete object;
    s.destructors_changed.notify_all();
  }
}

// The driver's thread that runs user-object destructors, started with the first user object.
void start_destructor_thread(State& s) {
  if (s.worker_started) return;
  s.worker_started = true;
  std::thread([&s] {
    Lock lock(s.mutex);
    for (;;) {
      s.destructors_changed.wait(lock,
                                 [&s] { return !s.destructors.empty() && !s.destructors_held; });
      const auto [fn, ptr] = s.destructors.front();
      s.destructors.pop_front();
      ++s.destructors_running;
      lock.unlock();
      fn(ptr);
      lock.lock();
      --s.destructors_running;
      s.destructors_changed.notify_all();
    }
  }).detach();  // blocked on its condition at exit, as the driver's own threads are
}

size_t rounded(size_t bytes) {
  const size_t page = size_t(::sysconf(_SC_PAGESIZE));
  return (bytes + page - 1) / page * page;
}

// Gives back an allocation's memory and keeps its addresses reserved, inaccessible.
void release(CUdeviceptr address, size_t bytes) {
  if (::mmap(reinterpret_cast<void*>(address), rounded(bytes), PROT_NONE,
             MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED | MAP_NORESERVE, -1, 0) == MAP_FAILED) {
    std::perror("fakecuda: reserving freed device memory");  // it would stay usable: no test
    std::abort();
  }
}

bool known_function(CUfunction f) {
  // A function of an unloaded module is gone.
  return f && f->module->loaded;
}

// ---- device, context ----

CUresult cuInit(unsigned int) {
  FAKE_ENTER("cuInit");
  return CUDA_SUCCESS;
}
CUresult cuDriverGetVersion(int* version) {
  FAKE_ENTER("cuDriverGetVersion");
  *version = CUDA_VERSION;
  return CUDA_SUCCESS;
}
const char* error_name(CUresult r) {
  switch (r) {
    case CUDA_SUCCESS:
      return "CUDA_SUCCESS";
    case CUDA_ERROR_INVALID_VALUE:
      return "CUDA_ERROR_INVALID_VALUE";
    case CUDA_ERROR_OUT_OF_MEMORY:
      return "CUDA_ERROR_OUT_OF_MEMORY";
    case CUDA_ERROR_INVALID_CONTEXT:
      return "CUDA_ERROR_INVALID_CONTEXT";
    case CUDA_ERROR_CONTEXT_IS_DESTROYED:
      return "CUDA_ERROR_CONTEXT_IS_DESTROYED";
    case CUDA_ERROR_INVALID_IMAGE:
      return "CUDA_ERROR_INVALID_IMAGE";
    case CUDA_ERROR_INVALID_HANDLE:
      return "CUDA_ERROR_INVALID_HANDLE";
    case CUDA_ERROR_NOT_FOUND:
      return "CUDA_ERROR_NOT_FOUND";
    case CUDA_ERROR_ILLEGAL_STATE:
      return "CUDA_ERROR_ILLEGAL_STATE";
    case CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED:
      return "CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED";
    case CUDA_ERROR_STREAM_CAPTURE_INVALIDATED:
      return "CUDA_ERROR_STREAM_CAPTURE_INVALIDATED";
    case CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE:
      return "CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE";
    case CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES:
      return "CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES";
    case CUDA_ERROR_NOT_SUPPORTED:
      return "CUDA_ERROR_NOT_SUPPORTED";
    case CUDA_ERROR_INVALID_DEVICE:
      return "CUDA_ERROR_INVALID_DEVICE";
    case CUDA_ERROR_ILLEGAL_ADDRESS:
      return "CUDA_ERROR_ILLEGAL_ADDRESS";
    case CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD:
      return "CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD";
    default:
      return nullptr;
  }
}
CUresult cuGetErrorName(CUresult r, const char** out) {
  FAKE_ENTER("cuGetErrorName");
  *out = error_name(r);
  return *out ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}
CUresult cuGetErrorString(CUresult r, const char** out) {
  FAKE_ENTER("cuGetErrorString");
  *out = error_name(r) ? "an error of the fake CUDA driver" : nullptr;
  return *out ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}
CUresult cuDeviceGet(CUdevice* device, int ordinal) {
  FAKE_ENTER("cuDeviceGet");
  if (ordinal != 0) return CUDA_ERROR_INVALID_DEVICE;
  *device = 0;
  return CUDA_SUCCESS;
}
CUresult cuDeviceGetCount(int* count) {
  FAKE_ENTER("cuDeviceGetCount");
  *count = 1;
  return CUDA_SUCCESS;
}
CUresult cuDeviceGetName(char* name, int length, CUdevice) {
  FAKE_ENTER("cuDeviceGetName");
  std::snprintf(name, size_t(length), "%s", "fake H100 (normjit tests/fakecuda)");
  return CUDA_SUCCESS;
}
CUresult cuDeviceGetAttribute(int* value, CUdevice_attribute attribute, CUdevice device) {
  FAKE_ENTER("cuDeviceGetAttribute");
  if (device != 0) return CUDA_ERROR_INVALID_DEVICE;
  switch (attribute) {
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR:
      *value = 9;
      break;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR:
      *value = 0;
      break;
    case CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT:
      *value = int(kSms);
      break;
    case CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE:
      *value = 2619000;
      break;
    case CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH:
      *value = 5120;
      break;
    case CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE:
      *value = 50 * 1024 * 1024;
      break;
    case CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK:
      *value = 1024;
      break;
    case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN:
      *value = kSharedPerBlockOptin;
      break;
    default:
      return CUDA_ERROR_INVALID_VALUE;  // a test that needs more adds it here
  }
  return CUDA_SUCCESS;
}
CUresult cuDevicePrimaryCtxRetain(CUcontext* out, CUdevice device) {
  FAKE_ENTER("cuDevicePrimaryCtxRetain");
  if (device != 0) return CUDA_ERROR_INVALID_DEVICE;
  for (CUctx_st& c : s.contexts) {
    if (c.id != 0 && c.primary_refs > 0) {
      ++c.primary_refs;
      *out = &c;
      return CUDA_SUCCESS;
    }
  }
  // A new context takes the first free slot: the handle of the last one destroyed, as the real
  // driver may give it.
  for (CUctx_st& c : s.contexts) {
    if (c.id == 0) {
      c.id = s.next_context_id++;
      c.primary_refs = 1;
      *out = &c;
      return CUDA_SUCCESS;
    }
  }
  return CUDA_ERROR_OUT_OF_MEMORY;
}
CUresult cuDevicePrimaryCtxRelease(CUdevice device) {
  FAKE_ENTER("cuDevicePrimaryCtxRelease");
  if (device != 0) return CUDA_ERROR_INVALID_DEVICE;
  for (CUctx_st& c : s.contexts) {
    if (c.id != 0 && c.primary_refs > 0) {
      if (--c.primary_refs == 0) {
        // Destroyed: its modules and memory go with it (the runtime must not touch them again).
        const unsigned long long id = c.id;
        for (const auto& module : s.modules) {
          if (module->context == id) module->loaded = false;
        }
        for (auto it = s.allocations.begin(); it != s.allocations.end();) {
          if (it->second.second == id) {
            release(it->first, it->second.first);
            it = s.allocations.erase(it);
          } else {
            ++it;
          }
        }
        c.id = 0;
      }
      return CUDA_SUCCESS;
    }
  }
  return CUDA_ERROR_INVALID_CONTEXT;
}
CUresult cuCtxGetCurrent(CUcontext* out) {
  FAKE_ENTER("cuCtxGetCurrent");
  *out = t_current;
  return CUDA_SUCCESS;
}
CUresult cuCtxSetCurrent(CUcontext c) {
  FAKE_ENTER("cuCtxSetCurrent");
  if (c && c->id == 0) return CUDA_ERROR_INVALID_CONTEXT;
  t_current = c;
  return CUDA_SUCCESS;
}
CUresult cuCtxGetDevice(CUdevice* device) {
  FAKE_ENTER("cuCtxGetDevice");
  if (current_id() == 0) return CUDA_ERROR_INVALID_CONTEXT;
  *device = 0;
  return CUDA_SUCCESS;
}
CUresult cuCtxGetId(CUcontext c, unsigned long long* id) {
  FAKE_ENTER("cuCtxGetId");
  const CUcontext which = c ? c : t_current;
  if (!which) return CUDA_ERROR_INVALID_CONTEXT;
  if (which->id == 0) return CUDA_ERROR_CONTEXT_IS_DESTROYED;
  *id = which->id;
  return CUDA_SUCCESS;
}
CUresult cuCtxSynchronize() {
  FAKE_ENTER("cuCtxSynchronize");
  if (current_id() == 0) return CUDA_ERROR_INVALID_CONTEXT;
  if (forbidden_by_capture(s, "cuCtxSynchronize")) return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
  return CUDA_SUCCESS;
}
CUresult cuCtxPushCurrent(CUcontext c) {
  FAKE_ENTER("cuCtxPushCurrent");
  if (!c || c->id == 0) return CUDA_ERROR_INVALID_CONTEXT;
  t_stack.push_back(t_current);
  t_current = c;
  return CUDA_SUCCESS;
}
CUresult cuCtxPopCurrent(CUcontext* out) {
  FAKE_ENTER("cuCtxPopCurrent");
  if (t_stack.empty()) return CUDA_ERROR_INVALID_CONTEXT;
  if (out) *out = t_current;
  t_current = t_stack.back();
  t_stack.pop_back();
  return CUDA_SUCCESS;
}

// ---- modules, functions, launches ----

CUresult cuModuleLoadData(CUmodule* out, const void* image) {
  FAKE_ENTER("cuModuleLoadData");
  if (current_id() == 0) return CUDA_ERROR_INVALID_CONTEXT;
  if (forbidden_by_capture(s, "cuModuleLoadData")) return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
  const auto* bytes = static_cast<const unsigned char*>(image);
  // An ELF64, little-endian, for EM_CUDA (190): what NVRTC's cubins are.
  constexpr unsigned char kCubin[] = {0x7f, 'E', 'L', 'F', 2, 1};
  if (std::memcmp(bytes, kCubin, sizeof(kCubin)) != 0 || bytes[18] != 190 || bytes[19] != 0) {
    return CUDA_ERROR_INVALID_IMAGE;
  }
  // An ELF64's size: the furthest end of its header tables and its sections' contents.
  const auto field = [bytes](size_t at, size_t width) {
    uint64_t v = 0;
    std::memcpy(&v, bytes + at, width);
    return v;
  };
  const uint64_t shoff = field(0x28, 8), shentsize = field(0x3a, 2), shnum = field(0x3c, 2);
  const uint64_t phoff = field(0x20, 8), phentsize = field(0x36, 2), phnum = field(0x38, 2);
  uint64_t size = std::max(shoff + shentsize * shnum, phoff + phentsize * phnum);
  for (uint64_t i = 0; i < shnum; ++i) {
    const size_t header = shoff + i * shentsize;
    constexpr uint64_t kNoBits = 8;
    if (field(header + 0x04, 4) != kNoBits) {
      size = std::max(size, field(header + 0x18, 8) + field(header + 0x20, 8));
    }
  }
  auto* module = new CUmod_st;
  module->context = current_id();
  module->image.assign(reinterpret_cast<const char*>(bytes), size);
  s.modules.emplace_back(module);
  *out = module;
  return CUDA_SUCCESS;
}
CUresult cuModuleUnload(CUmodule module) {
  FAKE_ENTER("cuModuleUnload");
  if (!module->loaded) {
    s.misuses.push_back("cuModuleUnload of a module that is not loaded (its context destroyed?)");
    return CUDA_ERROR_INVALID_HANDLE;
  }
  if (module->context != current_id()) {
    s.misuses.push_back("cuModuleUnload in another context than the module's");
    return CUDA_ERROR_INVALID_CONTEXT;
  }
  if (forbidden_by_capture(s, "cuModuleUnload")) return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
  module->loaded = false;
  return CUDA_SUCCESS;
}
CUresult cuModuleGetFunction(CUfunction* out, CUmodule module, const char* name) {
  FAKE_ENTER("cuModuleGetFunction");
  if (!module->loaded) return CUDA_ERROR_INVALID_HANDLE;
  if (module->image.find(std::string(name) + '\0') == std::string::npos) {
    return CUDA_ERROR_NOT_FOUND;
  }
  for (const auto& f : s.functions) {  // one handle a function, as the driver gives
    if (f->module == module && f->name == name) {
      *out = f.get();
      return CUDA_SUCCESS;
    }
  }
  s.functions.push_back(std::make_unique<CUfunc_st>(CUfunc_st{module, name}));
  *out = s.functions.back().get();
  return CUDA_SUCCESS;
}
CUresult cuFuncGetAttribute(int* value, CUfunction_attribute attribute, CUfunction f) {
  FAKE_ENTER("cuFuncGetAttribute");
  if (!known_function(f)) return CUDA_ERROR_INVALID_HANDLE;
  switch (attribute) {
    case CU_FUNC_ATTRIBUTE_NUM_REGS:
      *value = kRegistersPerThread;
      break;
    case CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES:
      *value = 0;
      break;
    case CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES:
      *value = 0;
      break;
    case CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK:
      *value = 1024;
      break;
    case CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES:
      *value = f->max_dynamic_smem;
      break;
    default:
      return CUDA_ERROR_INVALID_VALUE;
  }
  return CUDA_SUCCESS;
}
CUresult cuFuncSetAttribute(CUfunction f, CUfunction_attribute attribute, int value) {
  FAKE_ENTER("cuFuncSetAttribute");
  if (!known_function(f)) return CUDA_ERROR_INVALID_HANDLE;
  if (attribute != CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES ||
      value > kSharedPerBlockOptin) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  f->max_dynamic_smem = value;
  return CUDA_SUCCESS;
}
int occupancy(int block, size_t smem) {
  int n = std::min(2048 / std::max(block, 1), 32);
  n = std::min(n, kRegistersPerMultiprocessor / (std::max(block, 1) * kRegistersPerThread));
  if (smem > 0) n = std::min(n, int(kSharedPerMultiprocessor / smem));
  return n;
}
CUresult cuOccupancyMaxActiveBlocksPerMultiprocessor(int* blocks, CUfunction f, int block,
                                                     size_t smem) {
  FAKE_ENTER("cuOccupancyMaxActiveBlocksPerMultiprocessor");
  if (!known_function(f)) return CUDA_ERROR_INVALID_HANDLE;
  *blocks = occupancy(block, smem);
  return CUDA_SUCCESS;
}
CUresult launch(State& s, CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                unsigned by, unsigned bz, unsigned smem, CUstream stream, void** params,
                bool cooperative) {
  if (current_id() == 0) return CUDA_ERROR_INVALID_CONTEXT;
  if (!known_function(f) || f->module->context != current_id()) {
    return CUDA_ERROR_INVALID_HANDLE;  // a function of another context, or of an unloaded module
  }
  CUstream_st* st = stream_of(s, stream);
  if (!st) return CUDA_ERROR_INVALID_HANDLE;
  if (gx == 0 || gy != 1 || gz != 1 || bz != 1 || bx * by > 1024) return CUDA_ERROR_INVALID_VALUE;
  if (int(smem) > f->max_dynamic_smem) return CUDA_ERROR_INVALID_VALUE;
  if (cooperative && gx > unsigned(occupancy(int(bx * by), smem)) * kSms) {
    return CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE;
  }
  Launch l;
  l.function = f->name;
  l.context = current_id();
  l.grid = gx;
  l.block_x = bx;
  l.block_y = by;
  l.smem = smem;
  l.cooperative = cooperative;
  l.stream = stream;
  l.thread = std::this_thread::get_id();
  std::memcpy(&l.params, params[0], sizeof(normjit::Params));
  if (st->status == CU_STREAM_CAPTURE_STATUS_INVALIDATED) {
    return CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
  }
  if (st->status == CU_STREAM_CAPTURE_STATUS_ACTIVE) {
    auto node = std::make_unique<CUgraphNode_st>();
    node->kernel = true;
    node->launch = l;
    node->launch.from_graph = true;
    node->driver_view.func = f;
    node->driver_view.gridDimX = gx;
    node->driver_view.gridDimY = gy;
    node->driver_view.gridDimZ = gz;
    node->driver_view.blockDimX = bx;
    node->driver_view.blockDimY = by;
    node->driver_view.blockDimZ = bz;
    node->driver_view.sharedMemBytes = smem;
    st->graph->nodes.push_back(std::move(node));
    return CUDA_SUCCESS;
  }
  s.launches.push_back(l);
  return CUDA_SUCCESS;
}
CUresult cuLaunchKernel(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                        unsigned by, unsigned bz, unsigned smem, CUstream stream, void** params,
                        void** extra) {
  FAKE_ENTER("cuLaunchKernel");
  if (extra) return CUDA_ERROR_INVALID_VALUE;
  return launch(s, f, gx, gy, gz, bx, by, bz, smem, stream, params, false);
}
CUresult cuLaunchCooperativeKernel(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                                   unsigned by, unsigned bz, unsigned smem, CUstream stream,
                                   void** params) {
  FAKE_ENTER("cuLaunchCooperativeKernel");
  return launch(s, f, gx, gy, gz, bx, by, bz, smem, stream, params, true);
}

// ---- memory ----

// The allocation holding [address, address + bytes), or end().
auto allocation_of(State& s, CUdeviceptr address, size_t bytes) {
  auto it = s.allocations.upper_bound(address);
  if (it == s.allocations.begin()) return s.allocations.end();
  --it;
  if (address + bytes > it->first + it->second.first) return s.allocations.end();
  return it;
}
CUresult cuMemAlloc(CUdeviceptr* out, size_t bytes) {
  FAKE_ENTER("cuMemAlloc");
  if (current_id() == 0) return CUDA_ERROR_INVALID_CONTEXT;
  if (forbidden_by_capture(s, "cuMemAlloc")) return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
  if (bytes == 0) return CUDA_ERROR_INVALID_VALUE;
  // Pages of their own, never handed out again once freed (release()): a stale pointer then
  // faults rather than reaching another allocation, and is never taken for a live one.
  void* p =
      ::mmap(nullptr, rounded(bytes), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return CUDA_ERROR_OUT_OF_MEMORY;
  *out = reinterpret_cast<CUdeviceptr>(p);
  s.allocations[*out] = {bytes, current_id()};
  return CUDA_SUCCESS;
}
CUresult cuMemFree(CUdeviceptr address) {
  FAKE_ENTER("cuMemFree");
  auto it = s.allocations.find(address);
  if (it == s.allocations.end()) {
    s.misuses.push_back("cuMemFree of an address that is not allocated (its context destroyed?)");
    return CUDA_ERROR_INVALID_VALUE;
  }
  if (it->second.second != current_id()) {
    s.misuses.push_back("cuMemFree in another context than the allocation's");
    return CUDA_ERROR_INVALID_CONTEXT;
  }
  if (forbidden_by_capture(s, "cuMemFree")) return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
  release(address, it->second.first);
  s.allocations.erase(it);
  return CUDA_SUCCESS;
}
CUresult cuMemGetAddressRange(CUdeviceptr* base, size_t* bytes, CUdeviceptr address) {
  FAKE_ENTER("cuMemGetAddressRange");
  auto it = allocation_of(s, address, 1);
  if (it == s.allocations.end()) return CUDA_ERROR_NOT_FOUND;
  if (base) *base = it->first;
  if (bytes) *bytes = it->second.first;
  return CUDA_SUCCESS;
}
CUresult copy(State& s, CUdeviceptr to, const void* from, size_t bytes, bool device_to,
              bool device_from, const char* name) {
  if (forbidden_by_capture(s, name)) return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
  if (device_to && allocation_of(s, to, bytes) == s.allocations.end()) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  if (device_from &&
      allocation_of(s, reinterpret_cast<CUdeviceptr>(from), bytes) == s.allocations.end()) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  std::memcpy(reinterpret_cast<void*>(to), from, bytes);
  return CUDA_SUCCESS;
}
CUresult cuMemcpyHtoD(CUdeviceptr to, const void* from, size_t bytes) {
  FAKE_ENTER("cuMemcpyHtoD");
  return copy(s, to, from, bytes, true, false, "cuMemcpyHtoD");
}
CUresult cuMemcpyDtoH(void* to, CUdeviceptr from, size_t bytes) {
  FAKE_ENTER("cuMemcpyDtoH");
  return copy(s, reinterpret_cast<CUdeviceptr>(to), reinterpret_cast<const void*>(from), bytes,
              false, true, "cuMemcpyDtoH");
}
CUresult cuMemcpyDtoD(CUdeviceptr to, CUdeviceptr from, size_t bytes) {
  FAKE_ENTER("cuMemcpyDtoD");
  return copy(s, to, reinterpret_cast<const void*>(from), bytes, true, true, "cuMemcpyDtoD");
}
CUresult cuMemcpyHtoDAsync(CUdeviceptr to, const void* from, size_t bytes, CUstream stream) {
  FAKE_ENTER("cuMemcpyHtoDAsync");
  CUstream_st* st = stream_of(s, stream);
  if (!st) return CUDA_ERROR_INVALID_HANDLE;
  if (st->status != CU_STREAM_CAPTURE_STATUS_NONE) return CUDA_ERROR_NOT_SUPPORTED;
  if (allocation_of(s, to, bytes) == s.allocations.end()) return CUDA_ERROR_INVALID_VALUE;
  std::memcpy(reinterpret_cast<void*>(to), from, bytes);
  return CUDA_SUCCESS;
}
CUresult cuMemsetD8(CUdeviceptr to, unsigned char value, size_t bytes) {
  FAKE_ENTER("cuMemsetD8");
  if (forbidden_by_capture(s, "cuMemsetD8")) return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
  if (allocation_of(s, to, bytes) == s.allocations.end()) return CUDA_ERROR_INVALID_VALUE;
  std::memset(reinterpret_cast<void*>(to), value, bytes);
  return CUDA_SUCCESS;
}
CUresult cuMemsetD8Async(CUdeviceptr to, unsigned char value, size_t bytes, CUstream stream) {
  FAKE_ENTER("cuMemsetD8Async");
  CUstream_st* st = stream_of(s, stream);
  if (!st) return CUDA_ERROR_INVALID_HANDLE;
  if (allocation_of(s, to, bytes) == s.allocations.end()) return CUDA_ERROR_INVALID_VALUE;
  if (st->status == CU_STREAM_CAPTURE_STATUS_INVALIDATED) {
    return CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
  }
  if (st->status == CU_STREAM_CAPTURE_STATUS_ACTIVE) {
    auto node = std::make_unique<CUgraphNode_st>();
    node->memset_to = to;
    node->memset_value = value;
    node->memset_bytes = bytes;
    st->graph->nodes.push_back(std::move(node));
    return CUDA_SUCCESS;
  }
  std::memset(reinterpret_cast<void*>(to), value, bytes);
  return CUDA_SUCCESS;
}

// ---- events, streams ----

CUresult cuEventCreate(CUevent* out, unsigned) {
  FAKE_ENTER("cuEventCreate");
  *out = new CUevent_st;
  return CUDA_SUCCESS;
}
CUresult cuEventRecord(CUevent, CUstream) {
  FAKE_ENTER("cuEventRecord");
  return CUDA_SUCCESS;
}
CUresult cuEventSynchronize(CUevent) {
  FAKE_ENTER("cuEventSynchronize");
  return CUDA_SUCCESS;
}
CUresult cuEventElapsedTime(float* ms, CUevent, CUevent) {
  FAKE_ENTER("cuEventElapsedTime");
  *ms = 0.001f;
  return CUDA_SUCCESS;
}
CUresult cuEventDestroy(CUevent event) {
  FAKE_ENTER("cuEventDestroy");
  delete event;
  return CUDA_SUCCESS;
}
CUresult cuStreamCreate(CUstream* out, unsigned) {
  FAKE_ENTER("cuStreamCreate");
  if (current_id() == 0) return CUDA_ERROR_INVALID_CONTEXT;
  auto* stream = new CUstream_st;
  stream->context = current_id();
  s.streams.insert(stream);
  *out = stream;
  return CUDA_SUCCESS;
}
CUresult cuStreamDestroy(CUstream stream) {
  FAKE_ENTER("cuStreamDestroy");
  if (!s.streams.count(stream) || !stream->alive) return CUDA_ERROR_INVALID_HANDLE;
  if (stream->status != CU_STREAM_CAPTURE_STATUS_NONE) return CUDA_ERROR_ILLEGAL_STATE;
  stream->alive = false;  // kept: no later stream has its handle
  return CUDA_SUCCESS;
}
CUresult cuStreamSynchronize(CUstream stream) {
  FAKE_ENTER("cuStreamSynchronize");
  CUstream_st* st = stream_of(s, stream);
  if (!st) return CUDA_ERROR_INVALID_HANDLE;
  if (st->status != CU_STREAM_CAPTURE_STATUS_NONE) {
    st->status = CU_STREAM_CAPTURE_STATUS_INVALIDATED;
    s.misuses.push_back("cuStreamSynchronize of a stream being captured");
    return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
  }
  return CUDA_SUCCESS;
}

// ---- capture, graphs, user objects ----

CUresult cuStreamGetCaptureInfo(CUstream stream, CUstreamCaptureStatus* status, cuuint64_t* id,
                                CUgraph* graph, const CUgraphNode** dependencies,
                                const CUgraphEdgeData** edges, size_t* count) {
  FAKE_ENTER("cuStreamGetCaptureInfo");
  CUstream_st* st = stream_of(s, stream);
  if (!st) return CUDA_ERROR_INVALID_HANDLE;
  *status = st->status;
  if (id) *id = st->capture;
  if (graph) *graph = st->status == CU_STREAM_CAPTURE_STATUS_ACTIVE ? st->graph : nullptr;
  if (dependencies) *dependencies = nullptr;
  if (edges) *edges = nullptr;
  if (count) *count = 0;
  return CUDA_SUCCESS;
}
CUresult cuThreadExchangeStreamCaptureMode(CUstreamCaptureMode* mode) {
  FAKE_ENTER("cuThreadExchangeStreamCaptureMode");
  std::swap(*mode, t_mode);
  return CUDA_SUCCESS;
}
CUresult cuStreamBeginCapture(CUstream stream, CUstreamCaptureMode mode) {
  FAKE_ENTER("cuStreamBeginCapture");
  if (stream == nullptr || stream == CU_STREAM_LEGACY) return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
  CUstream_st* st = stream_of(s, stream);
  if (!st) return CUDA_ERROR_INVALID_HANDLE;
  if (st->status != CU_STREAM_CAPTURE_STATUS_NONE) return CUDA_ERROR_ILLEGAL_STATE;
  st->status = CU_STREAM_CAPTURE_STATUS_ACTIVE;
  st->mode = mode;
  st->capturer = std::this_thread::get_id();
  st->capture = s.next_capture++;
  st->graph = new CUgraph_st;
  s.graphs.insert(st->graph);
  return CUDA_SUCCESS;
}
CUresult destroy_graph(State& s, CUgraph graph) {
  if (!s.graphs.count(graph)) return CUDA_ERROR_INVALID_VALUE;
  for (const auto& [object, count] : graph->user_objects) release_user_object(s, object, count);
  s.graphs.erase(graph);
  delete graph;
  return CUDA_SUCCESS;
}
CUresult cuStreamEndCapture(CUstream stream, CUgraph* out) {
  FAKE_ENTER("cuStreamEndCapture");
  CUstream_st* st = stream_of(s, stream);
  if (!st) return CUDA_ERROR_INVALID_HANDLE;
  if (st->status == CU_STREAM_CAPTURE_STATUS_NONE) return CUDA_ERROR_ILLEGAL_STATE;
  if (st->mode != CU_STREAM_CAPTURE_MODE_RELAXED && st->capturer != std::this_thread::get_id()) {
    return CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD;
  }
  const bool invalidated = st->status == CU_STREAM_CAPTURE_STATUS_INVALIDATED;
  CUgraph graph = st->graph;
  st->status = CU_STREAM_CAPTURE_STATUS_NONE;
  st->graph = nullptr;
  if (invalidated) {
    destroy_graph(s, graph);
    *out = nullptr;
    return CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
  }
  *out = graph;
  return CUDA_SUCCESS;
}
CUresult cuGraphInstantiateWithFlags(CUgraphExec* out, CUgraph graph, unsigned long long) {
  FAKE_ENTER("cuGraphInstantiateWithFlags");
  if (!s.graphs.count(graph)) return CUDA_ERROR_INVALID_VALUE;
  auto* exec = new CUgraphExec_st;
  for (const auto& node : graph->nodes) exec->nodes.push_back(*node);
  // An executable graph holds references of its own to the graph's user objects.
  exec->user_objects = graph->user_objects;
  for (const auto& [object, count] : exec->user_objects) object->refs += count;
  s.execs.insert(exec);
  *out = exec;
  return CUDA_SUCCESS;
}
CUresult cuGraphLaunch(CUgraphExec exec, CUstream stream) {
  FAKE_ENTER("cuGraphLaunch");
  if (!s.execs.count(exec)) return CUDA_ERROR_INVALID_VALUE;
  CUstream_st* st = stream_of(s, stream);
  if (!st) return CUDA_ERROR_INVALID_HANDLE;
  if (st->status != CU_STREAM_CAPTURE_STATUS_NONE) {
    s.misuses.push_back(
        "cuGraphLaunch into a stream being captured (the fake has no child graphs)");
    return CUDA_ERROR_NOT_SUPPORTED;
  }
  for (const CUgraphNode_st& node : exec->nodes) {
    if (node.kernel) {
      if (!known_function(node.driver_view.func)) {
        s.misuses.push_back("cuGraphLaunch of a kernel whose module was unloaded");
        return CUDA_ERROR_INVALID_HANDLE;
      }
      Launch l = node.launch;
      l.stream = stream;
      l.thread = std::this_thread::get_id();
      s.launches.push_back(l);
    } else if (allocation_of(s, node.memset_to, node.memset_bytes) != s.allocations.end()) {
      std::memset(reinterpret_cast<void*>(node.memset_to), node.memset_value, node.memset_bytes);
    } else {
      s.misuses.push_back("a graph's memset node writes memory that was freed");
      return CUDA_ERROR_ILLEGAL_ADDRESS;
    }
  }
  return CUDA_SUCCESS;
}
CUresult cuGraphDestroy(CUgraph graph) {
  FAKE_ENTER("cuGraphDestroy");
  return destroy_graph(s, graph);
}
CUresult cuGraphExecDestroy(CUgraphExec exec) {
  FAKE_ENTER("cuGraphExecDestroy");
  if (!s.execs.count(exec)) return CUDA_ERROR_INVALID_VALUE;
  for (const auto& [object, count] : exec->user_objects) release_user_object(s, object, count);
  s.execs.erase(exec);
  delete exec;
  return CUDA_SUCCESS;
}
CUresult cuGraphGetNodes(CUgraph graph, CUgraphNode* nodes, size_t* count) {
  FAKE_ENTER("cuGraphGetNodes");
  if (!s.graphs.count(graph)) return CUDA_ERROR_INVALID_VALUE;
  if (nodes) {
    for (size_t i = 0; i < std::min(*count, graph->nodes.size()); ++i) {
      nodes[i] = graph->nodes[i].get();
    }
  }
  *count = graph->nodes.size();
  return CUDA_SUCCESS;
}
CUresult cuGraphKernelNodeGetParams(CUgraphNode node, CUDA_KERNEL_NODE_PARAMS* out) {
  FAKE_ENTER("cuGraphKernelNodeGetParams");
  if (!node->kernel) return CUDA_ERROR_INVALID_VALUE;
  node->params_pointer = &node->launch.params;
  *out = node->driver_view;
  out->kernelParams = &node->params_pointer;
  return CUDA_SUCCESS;
}
CUresult cuUserObjectCreate(CUuserObject* out, void* ptr, CUhostFn destroy, unsigned refs,
                            unsigned flags) {
  FAKE_ENTER("cuUserObjectCreate");
  if (!destroy || refs == 0 || flags != CU_USER_OBJECT_NO_DESTRUCTOR_SYNC) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  *out = new CUuserObject_st{ptr, destroy, refs};
  s.user_objects.insert(*out);
  start_destructor_thread(s);
  return CUDA_SUCCESS;
}
CUresult cuUserObjectRelease(CUuserObject object, unsigned count) {
  FAKE_ENTER("cuUserObjectRelease");
  release_user_object(s, object, count);
  return CUDA_SUCCESS;
}
CUresult cuGraphRetainUserObject(CUgraph graph, CUuserObject object, unsigned count,
                                 unsigned flags) {
  FAKE_ENTER("cuGraphRetainUserObject");
  if (!s.graphs.count(graph) || !s.user_objects.count(object) || count == 0) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  // MOVE takes the caller's references; otherwise the graph adds its own.
  if (flags != CU_GRAPH_USER_OBJECT_MOVE) object->refs += count;
  graph->user_objects[object] += count;
  return CUDA_SUCCESS;
}

}  // namespace

// Every function of runtime/driver.hpp's list, by the name the runtime asks cuGetProcAddress for.
const std::map<std::string, void*>& table() {
  static const std::map<std::string, void*> functions = [] {
    std::map<std::string, void*> t;
    // A compile error here: the runtime calls a function the fake lacks, or one whose
    // signature differs from <cuda.h>'s.
#define FAKE_ENTRY(name, version) \
  t[#name] = reinterpret_cast<void*>(static_cast<decltype(&::name)>(&name));
    NORMJIT_FOR_EACH_DRIVER_FUNCTION(FAKE_ENTRY)
#undef FAKE_ENTRY
    return t;
  }();
  return functions;
}
bool known_name(const std::string& function) { return table().count(function) != 0; }

std::vector<Launch> launches() {
  Lock lock(state().mutex);
  return state().launches;
}
void clear_launches() {
  Lock lock(state().mutex);
  state().launches.clear();
}
std::vector<std::string> misuses() {
  Lock lock(state().mutex);
  return state().misuses;
}
void clear_misuses() {
  Lock lock(state().mutex);
  state().misuses.clear();
}
size_t live_modules() {
  Lock lock(state().mutex);
  return size_t(std::count_if(state().modules.begin(), state().modules.end(),
                              [](const auto& module) { return module->loaded; }));
}
size_t live_allocations() {
  Lock lock(state().mutex);
  return state().allocations.size();
}
size_t live_graphs() {
  Lock lock(state().mutex);
  return state().graphs.size() + state().execs.size();
}
size_t live_user_objects() {
  Lock lock(state().mutex);
  return state().user_objects.size();
}
void fail_next(const std::string& function, CUresult result, int count) {
  if (!known_name(function)) {
    throw std::invalid_argument("fakecuda::fail_next: '" + function +
                                "' is no function of runtime/driver.hpp's list");
  }
  Lock lock(state().mutex);
  state().failures[function] = {result, count};
}
size_t armed_failures() {
  Lock lock(state().mutex);
  size_t armed = 0;
  for (const auto& [name, failure] : state().failures) armed += size_t(failure.second);
  state().failures.clear();
  return armed;
}
void hold_destructors(bool held) {
  State& s = state();
  Lock lock(s.mutex);
  s.destructors_held = held;
  s.destructors_changed.notify_all();
}
void drain_destructors() {
  State& s = state();
  Lock lock(s.mutex);
  s.destructors_changed.wait(lock, [&s] {
    return (s.destructors.empty() || s.destructors_held) && s.destructors_running == 0;
  });
}
size_t calls(const std::string& function) {
  Lock lock(state().mutex);
  return state().calls[function];
}

}  // namespace fakecuda

// For tests in other languages (tests/python/test_fake_driver_cpu.py, through ctypes): the last
// launch recorded, as one line of JSON, or "{}" when there is none. The text lives until the
// calling thread's next call.
extern "C" __attribute__((visibility("default"))) const char* fakecuda_last_launch_json() {
  thread_local std::string text;
  const std::vector<fakecuda::Launch> all = fakecuda::launches();
  if (all.empty()) return (text = "{}").c_str();
  const fakecuda::Launch& l = all.back();
  const normjit::Params& p = l.params;
  const auto number = [](const char* name, auto value) {
    return "\"" + std::string(name) + "\": " + std::to_string(value);
  };
  const auto address = [&number](const char* name, const void* value) {
    return number(name, reinterpret_cast<uintptr_t>(value));
  };
  const auto pitch = [](const char* name, const normjit::RowPitch& r) {
    return "\"" + std::string(name) + "\": [" + std::to_string(r.outer) + ", " +
           std::to_string(r.inner) + "]";
  };
  text = "{" + number("launches", all.size()) + ", \"function\": \"" + l.function + "\", " +
         number("grid", l.grid) + ", " + number("cooperative", int(l.cooperative)) + ", " +
         address("stream", l.stream) + ", " + address("x", p.x) + ", " + address("y", p.y) + ", " +
         address("weight", p.weight) + ", " + address("bias", p.bias) + ", " +
         address("workspace", p.workspace) + ", " + number("batch", p.batch) + ", " +
         "\"eps\": " + std::to_string(double(p.eps)) + ", " + address("residual", p.residual) +
         ", " + address("residual_out", p.residual_out) + ", " + address("scale", p.scale) + ", " +
         address("mean", p.mean) + ", " + address("rstd", p.rstd) + ", " +
         number("inner_rows", p.inner_rows) + ", " + pitch("x_rows", p.x_rows) + ", " +
         pitch("y_rows", p.y_rows) + ", " + pitch("residual_rows", p.residual_rows) + ", " +
         pitch("residual_out_rows", p.residual_out_rows) + ", " + address("dy", p.dy) + ", " +
         address("dweight", p.dweight) + ", " + address("dbias", p.dbias) + "}";
  return text.c_str();
}

// The one symbol the runtime looks up itself; every other function comes through it (table()).
extern "C" __attribute__((visibility("default"))) CUresult cuGetProcAddress_v2(
    const char* symbol, void** pfn, int, cuuint64_t, CUdriverProcAddressQueryResult* status) {
  const auto& functions = fakecuda::table();
  auto it = functions.find(symbol);
  if (status) {
    *status =
        it == functions.end() ? CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND : CU_GET_PROC_ADDRESS_SUCCESS;
  }
  *pfn = it == functions.end() ? nullptr : it->second;
  return it == functions.end() ? CUDA_ERROR_NOT_FOUND : CUDA_SUCCESS;
}
