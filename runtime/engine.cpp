#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <future>
#include <mutex>
#include <nlohmann/json.hpp>
#include <unordered_map>

#include "cache/cache.hpp"
#include "normjit/normjit.hpp"
#include "runtime/compiler.hpp"
#include "runtime/device.hpp"
#include "runtime/driver.hpp"
#include "templates/normjit/params.cuh"  // plain C++: the host uses the same struct

namespace normjit {
namespace detail {
namespace {

constexpr int kMaxClassDims = 8;

// The part of a spec that selects a compiled kernel: everything but the batch dims and eps.
// Fixed size, so that the hot path hashes and compares without allocating.
struct ClassKey {
  CUcontext context = nullptr;
  int op = 0, dtype = 0, affine = 0, normalized_dims = 0, rank = 0, batch_class = 0;
  int64_t groups = 0;
  int64_t dims[kMaxClassDims] = {};  // the non-batch dims

  static ClassKey of(const NormSpec& spec, CUcontext context) {
    ClassKey k;
    k.context = context;
    k.op = int(spec.op);
    k.dtype = int(spec.dtype);
    k.affine = int(spec.affine);
    k.normalized_dims = spec.normalized_dims;
    k.groups = spec.groups;
    k.batch_class = normjit::batch_class(spec);
    const size_t first = spec.channel_form() ? 1 : spec.shape.size() - spec.normalized_dims;
    k.rank = int(spec.shape.size() - first);
    std::copy(spec.shape.begin() + first, spec.shape.end(), k.dims);
    return k;
  }
  bool operator==(const ClassKey& o) const {
    return context == o.context && op == o.op && dtype == o.dtype && affine == o.affine &&
           normalized_dims == o.normalized_dims && rank == o.rank && batch_class == o.batch_class &&
           groups == o.groups && std::equal(dims, dims + rank, o.dims);
  }
};

struct ClassKeyHash {
  size_t operator()(const ClassKey& k) const {
    uint64_t h = 1469598103934665603ull;
    auto mix = [&](uint64_t v) { h = (h ^ v) * 1099511628211ull; };
    mix(reinterpret_cast<uintptr_t>(k.context));
    mix(uint64_t(k.op) | uint64_t(k.dtype) << 8 | uint64_t(k.affine) << 16 |
        uint64_t(k.normalized_dims) << 24 | uint64_t(k.batch_class) << 32);
    mix(uint64_t(k.groups));
    for (int i = 0; i < k.rank; ++i) mix(uint64_t(k.dims[i]));
    return size_t(h);
  }
};

// Owns a CUmodule; unloads it in its context, ignoring errors.
class Module {
 public:
  Module(CUmodule module, CUcontext context) : module_(module), context_(context) {}
  ~Module() {
    if (!driver::unavailable_reason().empty()) return;
    const driver::Api& cu = driver::api();
    if (cu.cuCtxPushCurrent(context_) == CUDA_SUCCESS) {
      cu.cuModuleUnload(module_);
      CUcontext popped;
      cu.cuCtxPopCurrent(&popped);
    }
  }
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;

 private:
  CUmodule module_;
  CUcontext context_;
};

// Owns device memory of a context; frees it in that context, ignoring errors.
class Allocation {
 public:
  Allocation(size_t bytes, CUcontext context) : context_(context) {
    NORMJIT_CU(driver::api().cuMemAlloc(&ptr_, bytes));
  }
  ~Allocation() {
    const driver::Api& cu = driver::api();
    if (cu.cuCtxPushCurrent(context_) == CUDA_SUCCESS) {
      cu.cuMemFree(ptr_);
      CUcontext popped;
      cu.cuCtxPopCurrent(&popped);
    }
  }
  Allocation(const Allocation&) = delete;
  Allocation& operator=(const Allocation&) = delete;
  CUdeviceptr get() const { return ptr_; }

 private:
  CUdeviceptr ptr_ = 0;
  CUcontext context_;
};

[[noreturn]] void throw_jit_disabled(const NormSpec& spec, const Target& target,
                                     const std::string& key) {
  throw Error(ErrorCode::kCacheMiss,
              "kernel not in any cache layer and JIT is off "
              "(NORMJIT_JIT=off): " +
                  spec.to_string() + " for " + target.name() + ", key " + key);
}

}  // namespace

struct LoadedKernel {
  NormSpec spec;
  KernelPlan plan;
  std::string key;
  CUcontext context = nullptr;
  std::unique_ptr<Module> module;
  CUfunction function = nullptr;
  int64_t co_resident = 0;  // CTAs of this kernel the device holds at once

  // Split kernels keep arrival counters in a workspace, so launches sharing one must be
  // ordered: one workspace per stream, and one per (capture, stream) for launches recorded
  // into a CUDA graph, whose replays run apart from the stream's other work (a graph's
  // replays are ordered among themselves). Taken under a mutex on split launches only.
  float* workspace(CUstream stream) const;

  struct WorkspaceOwner {
    CUstream stream;
    unsigned long long capture;  // the capture sequence's id; 0: not capturing
    bool operator==(const WorkspaceOwner&) const = default;
  };
  mutable std::mutex workspace_mutex;
  mutable std::vector<std::pair<WorkspaceOwner, std::unique_ptr<Allocation>>> workspaces;
};

// Lets this thread make calls that a capture in global mode forbids (cuMemAlloc, loading a
// module) while a stream is being captured, for as long as it lives; they are not recorded
// into the graph, and none of them touches the capturing stream.
class RelaxedCaptureMode {
 public:
  RelaxedCaptureMode() { NORMJIT_CU(driver::api().cuThreadExchangeStreamCaptureMode(&mode_)); }
  ~RelaxedCaptureMode() { driver::api().cuThreadExchangeStreamCaptureMode(&mode_); }
  RelaxedCaptureMode(const RelaxedCaptureMode&) = delete;
  RelaxedCaptureMode& operator=(const RelaxedCaptureMode&) = delete;

 private:
  CUstreamCaptureMode mode_ = CU_STREAM_CAPTURE_MODE_RELAXED;
};

float* LoadedKernel::workspace(CUstream stream) const {
  const driver::Api& cu = driver::api();
  CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
  cuuint64_t capture = 0;
  NORMJIT_CU(
      cu.cuStreamGetCaptureInfo(stream, &status, &capture, nullptr, nullptr, nullptr, nullptr));
  const WorkspaceOwner owner{stream, status == CU_STREAM_CAPTURE_STATUS_ACTIVE ? capture : 0};
  std::lock_guard<std::mutex> lock(workspace_mutex);
  for (const auto& [o, allocation] : workspaces) {
    if (o == owner) return reinterpret_cast<float*>(allocation->get());
  }
  const size_t bytes = size_t(plan.workspace_floats(co_resident)) * sizeof(float);
  std::unique_ptr<Allocation> allocation;
  {
    const RelaxedCaptureMode relaxed;  // the stream may be capturing
    allocation = std::make_unique<Allocation>(bytes, context);
  }
  // Counters start at 0, zeroed in the stream's order: before the first launch that uses
  // them, and in a capture as a node of the graph, so each replay starts from 0 as well.
  NORMJIT_CU(cu.cuMemsetD8Async(allocation->get(), 0, bytes, stream));
  float* out = reinterpret_cast<float*>(allocation->get());
  workspaces.emplace_back(owner, std::move(allocation));
  return out;
}

class EngineImpl {
 public:
  explicit EngineImpl(EngineOptions options);
  ~EngineImpl();

  Kernel prepare(const NormSpec& spec);
  bool precompile(const NormSpec& spec, const std::string& arch);
  EngineCounters counters() const;

 private:
  using Table = std::unordered_map<ClassKey, std::shared_ptr<const LoadedKernel>, ClassKeyHash>;

  CUcontext current_context();
  std::shared_ptr<const LoadedKernel> build(const NormSpec& spec, CUcontext context,
                                            Source* source);
  Target device_target(CUcontext context);
  void publish(const ClassKey& key, std::shared_ptr<const LoadedKernel> kernel);

  EngineOptions options_;
  std::unique_ptr<cache::Store> store_;

  // Lock-free reads: readers load the current immutable table; writers (rare) copy it under
  // publish_mutex_, add, and swap. Replaced tables are kept until the engine dies, so no
  // reader ever sees freed memory.
  std::atomic<const Table*> table_{new Table};
  std::mutex publish_mutex_;
  std::vector<std::unique_ptr<const Table>> retired_;

  // Single flight: one build per key; other callers wait on its future.
  std::mutex flight_mutex_;
  std::unordered_map<ClassKey, std::shared_future<std::shared_ptr<const LoadedKernel>>,
                     ClassKeyHash>
      in_flight_;

  std::mutex context_mutex_;
  CUcontext primary_ = nullptr;  // retained primary context of options_.device, if we used it
  CUdevice primary_device_ = 0;

  std::atomic<uint64_t> nvrtc_compiles_{0}, memory_hits_{0}, disk_hits_{0}, bad_entries_{0};
};

EngineImpl::EngineImpl(EngineOptions options) : options_(std::move(options)) {
  if (const char* jit = std::getenv("NORMJIT_JIT")) {
    if (std::strcmp(jit, "off") == 0 || std::strcmp(jit, "0") == 0) options_.jit_disabled = true;
  }
  cache::StoreOptions store = cache::StoreOptions::from_env();
  if (!options_.cache_dir.empty()) store.dir = options_.cache_dir;
  if (!options_.readonly_cache_dirs.empty()) store.readonly = options_.readonly_cache_dirs;
  if (options_.cache_max_bytes) store.max_bytes = options_.cache_max_bytes;
  if (options_.memory_only) {
    store.dir.clear();
    store.readonly.clear();
  }
  store_ = std::make_unique<cache::Store>(store);
}

EngineImpl::~EngineImpl() {
  delete table_.load();
  retired_.clear();
  if (primary_) {
    // Modules must unload before the primary context goes; the tables held them.
    driver::api().cuDevicePrimaryCtxRelease(primary_device_);
  }
}

EngineCounters EngineImpl::counters() const {
  EngineCounters c;
  c.nvrtc_compiles = nvrtc_compiles_.load();
  c.memory_hits = memory_hits_.load();
  c.disk_hits = disk_hits_.load();
  c.bad_entries = bad_entries_.load();
  return c;
}

CUcontext EngineImpl::current_context() {
  const driver::Api& cu = driver::api();
  CUcontext context = nullptr;
  NORMJIT_CU(cu.cuCtxGetCurrent(&context));
  if (context) return context;
  std::lock_guard<std::mutex> lock(context_mutex_);
  if (!primary_) {
    NORMJIT_CU(cu.cuDeviceGet(&primary_device_, options_.device));
    NORMJIT_CU(cu.cuDevicePrimaryCtxRetain(&primary_, primary_device_));
  }
  NORMJIT_CU(cu.cuCtxSetCurrent(primary_));
  return primary_;
}

Target EngineImpl::device_target(CUcontext context) {
  (void)context;  // current on this thread
  const driver::Api& cu = driver::api();
  CUdevice device;
  NORMJIT_CU(cu.cuCtxGetDevice(&device));
  return device::target_of(device);
}

void EngineImpl::publish(const ClassKey& key, std::shared_ptr<const LoadedKernel> kernel) {
  std::lock_guard<std::mutex> lock(publish_mutex_);
  const Table* old = table_.load(std::memory_order_acquire);
  auto next = std::make_unique<Table>(*old);
  (*next)[key] = std::move(kernel);
  table_.store(next.release(), std::memory_order_release);
  retired_.emplace_back(old);
}

std::shared_ptr<const LoadedKernel> EngineImpl::build(const NormSpec& spec, CUcontext context,
                                                      Source* source) {
  const driver::Api& cu = driver::api();
  // A kernel first asked for inside a capture (say, by a model captured before it ran once)
  // loads its module there: allowed, and nothing of it is recorded into the graph.
  const RelaxedCaptureMode relaxed;
  const Target target = device_target(context);
  auto kernel = std::make_shared<LoadedKernel>();
  kernel->spec = spec;
  kernel->plan = plan(spec, target);
  kernel->context = context;
  const EmittedKernel emitted = emit(kernel->plan);
  const cache::KeyInputs inputs = key_inputs(kernel->plan, emitted, target);
  kernel->key = inputs.key();

  auto load_module = [&](const std::string& cubin, const std::string& lowered) -> CUresult {
    CUmodule module = nullptr;
    const CUresult r = cu.cuModuleLoadData(&module, cubin.data());
    if (r != CUDA_SUCCESS) return r;
    kernel->module = std::make_unique<Module>(module, context);
    return cu.cuModuleGetFunction(&kernel->function, module, lowered.c_str());
  };

  if (std::optional<cache::Entry> entry = store_->load(kernel->key)) {
    std::string lowered;
    try {
      lowered = nlohmann::json::parse(entry->metadata).at("lowered_name").get<std::string>();
    } catch (const std::exception&) {
      lowered.clear();
    }
    const CUresult r =
        lowered.empty() ? CUDA_ERROR_INVALID_IMAGE : load_module(entry->cubin, lowered);
    if (r == CUDA_SUCCESS) {
      disk_hits_++;
      *source = Source::kDisk;
    } else {
      bad_entries_++;
      cache::warn("cache entry " + kernel->key + " for " + spec.to_string() +
                  " was rejected by the driver (" + driver::describe(r) + "); rebuilding it");
      store_->discard(kernel->key);
      kernel->module.reset();
      kernel->function = nullptr;
    }
  }
  if (!kernel->function) {
    if (options_.jit_disabled) throw_jit_disabled(spec, target, kernel->key);
    nvrtc_compiles_++;
    const CompiledKernel compiled = compile(emitted, target);
    cache::Entry entry{kernel->key, inputs.preimage(), entry_metadata(spec, kernel->plan, compiled),
                       compiled.cubin, compiled.ptx};
    store_->save(entry);
    NORMJIT_CU(load_module(compiled.cubin, compiled.lowered_name));
    *source = Source::kCompiled;
  }
  // The default limit (48 KiB) counts the static shared memory too: a plan of 48 KiB of
  // dynamic shared memory beside a few static bytes needs the attribute as well, so it is set
  // for every kernel that takes any (harmless below the limit).
  if (kernel->plan.smem_bytes > 0) {
    NORMJIT_CU(cu.cuFuncSetAttribute(kernel->function,
                                     CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                     kernel->plan.smem_bytes));
  }
  int per_sm = 0;
  NORMJIT_CU(cu.cuOccupancyMaxActiveBlocksPerMultiprocessor(
      &per_sm, kernel->function, kernel->plan.block_x * kernel->plan.block_y,
      kernel->plan.smem_bytes));
  kernel->co_resident = int64_t{per_sm} * target.sm_count;
  if (kernel->plan.cooperative() && kernel->co_resident < kernel->plan.split_chunks) {
    throw Error(ErrorCode::kInternal, "the split kernel for " + spec.to_string() + " needs " +
                                          std::to_string(kernel->plan.split_chunks) +
                                          " co-resident CTAs; the device holds " +
                                          std::to_string(kernel->co_resident));
  }
  return kernel;
}

Kernel EngineImpl::prepare(const NormSpec& spec) {
  spec.validate();
  const CUcontext context = current_context();
  const ClassKey key = ClassKey::of(spec, context);
  Kernel out;
  {
    const Table* table = table_.load(std::memory_order_acquire);
    auto it = table->find(key);
    if (it != table->end()) {
      memory_hits_++;
      out.impl_ = it->second;
      out.source_ = Source::kMemory;
      return out;
    }
  }
  // Miss: join the build in flight for this key, or start it.
  std::promise<std::shared_ptr<const LoadedKernel>> promise;
  std::shared_future<std::shared_ptr<const LoadedKernel>> future;
  bool leader = false;
  {
    std::lock_guard<std::mutex> lock(flight_mutex_);
    const Table* table = table_.load(std::memory_order_acquire);
    auto it = table->find(key);
    if (it != table->end()) {
      memory_hits_++;
      out.impl_ = it->second;
      out.source_ = Source::kMemory;
      return out;
    }
    auto flight = in_flight_.find(key);
    if (flight != in_flight_.end()) {
      future = flight->second;
    } else {
      future = promise.get_future().share();
      in_flight_.emplace(key, future);
      leader = true;
    }
  }
  if (!leader) {
    out.impl_ = future.get();  // rethrows the leader's error
    out.source_ = Source::kMemory;
    memory_hits_++;
    return out;
  }
  Source source = Source::kCompiled;
  try {
    auto kernel = build(spec, context, &source);
    publish(key, kernel);
    promise.set_value(kernel);
    out.impl_ = std::move(kernel);
    out.source_ = source;
  } catch (...) {
    promise.set_exception(std::current_exception());
    std::lock_guard<std::mutex> lock(flight_mutex_);
    in_flight_.erase(key);
    throw;
  }
  std::lock_guard<std::mutex> lock(flight_mutex_);
  in_flight_.erase(key);
  return out;
}

bool EngineImpl::precompile(const NormSpec& spec, const std::string& arch) {
  const Target target = Target::parse(arch);
  const KernelPlan p = plan(spec, target);
  const EmittedKernel emitted = emit(p);
  const cache::KeyInputs inputs = key_inputs(p, emitted, target);
  const std::string key = inputs.key();
  if (store_->load(key)) return false;
  if (options_.jit_disabled) throw_jit_disabled(spec, target, key);
  nvrtc_compiles_++;
  const CompiledKernel compiled = compile(emitted, target);
  store_->save(
      {key, inputs.preimage(), entry_metadata(spec, p, compiled), compiled.cubin, compiled.ptx});
  return true;
}

}  // namespace detail

// ---------------------------------------------------------------------------------------
// Kernel

namespace {

std::string pointer_text(const void* p) {
  char buffer[32];
  std::snprintf(buffer, sizeof(buffer), "%p", p);
  return buffer;
}

void check_present(const void* p, const char* name, bool wanted, const NormSpec& spec) {
  if (wanted && !p) {
    throw_invalid_argument(name, "nullptr",
                           std::string("the spec (") + spec.to_string() + ") needs it");
  }
  if (!wanted && p) {
    throw_invalid_argument(name, pointer_text(p),
                           std::string("the spec (") + spec.to_string() + ") has affine=" +
                               to_string(spec.affine) + "; pass nullptr or change affine");
  }
}

void check_aligned(const void* p, const char* name, int align) {
  if (p && reinterpret_cast<uintptr_t>(p) % align != 0) {
    throw_invalid_argument(
        name, pointer_text(p),
        "must be aligned to " + std::to_string(align) + " bytes for the plan's vector width");
  }
}

// What the spec alone decides about the arguments: checked before anything needs a device, so
// a bad argument is named as such on a machine without one too.
void check_arguments(const NormSpec& spec, const LaunchArgs& args) {
  check_present(args.x, "x", true, spec);
  check_present(args.y, "y", true, spec);
  check_present(args.weight, "weight", spec.affine != Affine::kNone, spec);
  check_present(args.bias, "bias", spec.affine == Affine::kBoth, spec);
  if (args.batch < 1) {
    throw_invalid_argument("batch", std::to_string(args.batch), "must be at least 1");
  }
  if (!(args.eps > 0.0f) || !std::isfinite(args.eps)) {
    throw_invalid_argument("eps", format_double(args.eps),
                           "must be a finite number greater than 0");
  }
}

}  // namespace

const char* to_string(Source source) {
  switch (source) {
    case Source::kCompiled:
      return "compiled";
    case Source::kDisk:
      return "disk";
    case Source::kMemory:
      return "memory";
  }
  return "?";
}

void Kernel::launch(const LaunchArgs& args, CUstream_st* stream) const {
  if (!impl_) throw Error(ErrorCode::kInvalidArgument, "launch of an empty normjit::Kernel");
  const detail::LoadedKernel& k = *impl_;
  const NormSpec& spec = k.spec;
  const KernelPlan& plan = k.plan;
  const int element = size_of(spec.dtype);
  const int align = element * plan.vec;
  check_arguments(spec, args);
  check_aligned(args.x, "x", align);
  check_aligned(args.y, "y", align);
  check_aligned(args.weight, "weight", element * plan.param_vec);
  check_aligned(args.bias, "bias", element * plan.param_vec);
  const int64_t per_item = spec.elements() / spec.batch();
  int64_t elements = 0;
  if (__builtin_mul_overflow(per_item, args.batch, &elements) || elements >= (int64_t{1} << 62) ||
      args.batch > (int64_t{1} << 40)) {
    throw_invalid_argument("batch", std::to_string(args.batch), "is too large for this kernel");
  }
  const int64_t grid = plan.grid(args.batch, k.co_resident);
  if (grid > 0x7fffffff) {
    throw_invalid_argument("batch", std::to_string(args.batch),
                           "needs " + std::to_string(grid) + " CTAs, more than a grid holds");
  }
  const uintptr_t x0 = reinterpret_cast<uintptr_t>(args.x);
  const uintptr_t y0 = reinterpret_cast<uintptr_t>(args.y);
  const uintptr_t bytes = uintptr_t(elements) * element;
  if (x0 != y0 && x0 < y0 + bytes && y0 < x0 + bytes) {
    throw_invalid_argument("y", pointer_text(args.y),
                           "partially overlaps x (" + pointer_text(args.x) +
                               "); pass y == x for in place, or disjoint buffers");
  }
  const driver::Api& cu = driver::api();
  CUcontext current = nullptr;
  NORMJIT_CU(cu.cuCtxGetCurrent(&current));
  if (current != k.context) {
    if (current) {
      throw Error(ErrorCode::kInvalidArgument,
                  "launch in another CUDA context than the kernel was prepared in");
    }
    NORMJIT_CU(cu.cuCtxSetCurrent(k.context));
  }
  const CUstream cu_stream = reinterpret_cast<CUstream>(stream);
  Params params{};
  params.x = args.x;
  params.y = args.y;
  params.weight = args.weight;
  params.bias = args.bias;
  params.batch = args.batch;
  params.eps = args.eps;
  void* kernel_args[] = {&params};
  if (plan.cooperative()) {
    params.workspace = k.workspace(cu_stream);
    NORMJIT_CU(cu.cuLaunchCooperativeKernel(k.function, unsigned(grid), 1, 1, plan.block_x,
                                            plan.block_y, 1, plan.smem_bytes, cu_stream,
                                            kernel_args));
  } else {
    NORMJIT_CU(cu.cuLaunchKernel(k.function, unsigned(grid), 1, 1, plan.block_x, plan.block_y, 1,
                                 plan.smem_bytes, cu_stream, kernel_args, nullptr));
  }
}

const NormSpec& Kernel::spec() const { return impl_->spec; }
Source Kernel::source() const { return source_; }
const void* detail::identity(const Kernel& kernel) { return kernel.impl_.get(); }
std::string Kernel::plan_text() const { return impl_->plan.to_string(); }
std::string Kernel::key() const { return impl_->key; }

// ---------------------------------------------------------------------------------------
// Engine

Engine::Engine(EngineOptions options)
    : impl_(std::make_unique<detail::EngineImpl>(std::move(options))) {}
Engine::~Engine() = default;

Kernel Engine::prepare(const NormSpec& spec) { return impl_->prepare(spec); }

void Engine::run(const NormSpec& spec, const void* x, void* y, const void* weight, const void* bias,
                 CUstream_st* stream) {
  const LaunchArgs args{x, y, weight, bias, spec.batch(), float(spec.eps)};
  spec.validate();
  check_arguments(spec, args);
  prepare(spec).launch(args, stream);
}

bool Engine::precompile(const NormSpec& spec, const std::string& arch) {
  return impl_->precompile(spec, arch);
}

EngineCounters Engine::counters() const { return impl_->counters(); }

bool gpu_available() { return driver::unavailable_reason().empty(); }
std::string gpu_unavailable_reason() { return driver::unavailable_reason(); }

}  // namespace normjit
