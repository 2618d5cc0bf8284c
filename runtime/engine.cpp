#include <algorithm>
#include <atomic>
#include <bit>
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <future>
#include <mutex>
#include <new>
#include <nlohmann/json.hpp>
#include <unordered_set>

#include "cache/cache.hpp"
#include "normjit/normjit.hpp"
#include "runtime/compiler.hpp"
#include "runtime/device.hpp"
#include "runtime/driver.hpp"
#include "runtime/insert_only_map.hpp"
#include "runtime/single_flight.hpp"
#include "runtime/workspace_owner.hpp"
#include "runtime/workspace_pool.hpp"
#include "templates/normjit/params.cuh"  // plain C++: the host uses the same struct

namespace normjit {
namespace detail {
namespace {

constexpr int kMaxClassDims = 8;

// A CUDA context: its handle, which a context created after this one is destroyed (cuCtxDestroy,
// the last cuDevicePrimaryCtxRelease) may have again, and its id, which no other context of the
// process has.
struct Context {
  CUcontext handle = nullptr;
  unsigned long long id = 0;  // cuCtxGetId
};

Context context_of(CUcontext handle) {
  Context out{handle, 0};
  NORMJIT_CU(driver::api().cuCtxGetId(handle, &out.id));
  return out;
}

// Whether the context of `id` still lives at `handle`: neither destroyed nor replaced by another
// context with the same handle, in which a module or an allocation of ours would be another's.
bool still_there(CUcontext handle, unsigned long long id) {
  unsigned long long now = 0;
  return driver::api().cuCtxGetId(handle, &now) == CUDA_SUCCESS && now == id;
}

// The part of a spec that selects a compiled kernel: everything but the batch dims and eps,
// the variant axes included (two specs that differ only in a variant must not share a kernel).
// Fixed size, so that the hot path hashes and compares without allocating.
struct ClassKey {
  // The context's id, not its handle: a kernel loaded in a destroyed context must not be handed
  // out in a new context that has the handle (the module went with the old one).
  unsigned long long context = 0;
  int op = 0, dtype = 0, affine = 0, normalized_dims = 0, rank = 0, batch_class = 0;
  int param_type = 0, out_type = 0;
  int residual = -1;  // the residual's dtype; -1: no residual
  bool save_stats = false;
  bool backward = false;
  bool nhwc = false;
  uint64_t weight_offset = 0;  // the double's bits (no tolerance: another value, another kernel)
  int activation = 0;
  int64_t groups = 0;
  int64_t dims[kMaxClassDims] = {};  // the non-batch dims

  static ClassKey of(const NormSpec& spec, const Context& context) {
    ClassKey k;
    k.context = context.id;
    k.op = int(spec.op);
    k.dtype = int(spec.dtype);
    k.affine = int(spec.affine);
    k.normalized_dims = spec.normalized_dims;
    k.param_type = int(spec.param_type());
    k.out_type = int(spec.out_type());
    k.residual = spec.residual ? int(*spec.residual) : -1;
    k.save_stats = spec.save_stats;
    k.backward = spec.backward;
    k.nhwc = spec.nhwc();
    // -0 is no offset, as NormSpec::from_fields makes it (a hand-built spec may hold it).
    k.weight_offset = std::bit_cast<uint64_t>(spec.weight_offset == 0 ? 0.0 : spec.weight_offset);
    k.activation = int(spec.activation);
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
           param_type == o.param_type && out_type == o.out_type && residual == o.residual &&
           save_stats == o.save_stats && backward == o.backward && nhwc == o.nhwc &&
           weight_offset == o.weight_offset && activation == o.activation && groups == o.groups &&
           std::equal(dims, dims + rank, o.dims);
  }
};

struct ClassKeyHash {
  size_t operator()(const ClassKey& k) const {
    uint64_t h = 1469598103934665603ull;
    auto mix = [&](uint64_t v) { h = (h ^ v) * 1099511628211ull; };
    mix(k.context);
    mix(uint64_t(k.op) | uint64_t(k.dtype) << 8 | uint64_t(k.affine) << 16 |
        uint64_t(k.normalized_dims) << 24 | uint64_t(k.batch_class) << 32);
    mix(uint64_t(k.param_type) | uint64_t(k.out_type) << 8 | uint64_t(k.residual + 1) << 16 |
        uint64_t(k.save_stats) << 24 | uint64_t(k.backward) << 25 | uint64_t(k.activation) << 26 |
        uint64_t(k.nhwc) << 28);
    mix(k.weight_offset);
    mix(uint64_t(k.groups));
    for (int i = 0; i < k.rank; ++i) mix(uint64_t(k.dims[i]));
    return size_t(h);
  }
};

// Lets this thread make calls that a capture in global mode forbids (cuMemAlloc, loading a
// module) while a stream is being captured, for as long as it lives; they are not recorded
// into the graph, and none of them touches the capturing stream.
// The nothrow form, for destructors, goes on in the thread's own mode where it cannot switch.
class RelaxedCaptureMode {
 public:
  RelaxedCaptureMode() { NORMJIT_CU(driver::api().cuThreadExchangeStreamCaptureMode(&mode_)); }
  explicit RelaxedCaptureMode(std::nothrow_t)
      : switched_(driver::api().cuThreadExchangeStreamCaptureMode(&mode_) == CUDA_SUCCESS) {}
  ~RelaxedCaptureMode() {
    if (switched_) driver::api().cuThreadExchangeStreamCaptureMode(&mode_);
  }
  RelaxedCaptureMode(const RelaxedCaptureMode&) = delete;
  RelaxedCaptureMode& operator=(const RelaxedCaptureMode&) = delete;

 private:
  CUstreamCaptureMode mode_ = CU_STREAM_CAPTURE_MODE_RELAXED;
  bool switched_ = true;
};

// Owns a CUmodule; unloads it in its context, ignoring errors (none to unload once the context
// is destroyed: its handle may be another context's by then).
class Module {
 public:
  Module(CUmodule module, const Context& context) : module_(module), context_(context) {}
  ~Module() {
    if (!driver::unavailable_reason().empty()) return;
    const driver::Api& cu = driver::api();
    // Another thread may be capturing in global mode, which forbids this thread an unload: the
    // capture would be invalidated, and the module kept.
    const RelaxedCaptureMode relaxed(std::nothrow);
    if (still_there(context_.handle, context_.id) &&
        cu.cuCtxPushCurrent(context_.handle) == CUDA_SUCCESS) {
      cu.cuModuleUnload(module_);
      CUcontext popped;
      cu.cuCtxPopCurrent(&popped);
    }
  }
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;

 private:
  CUmodule module_;
  Context context_;
};

// Owns device memory of a context; frees it in that context, ignoring errors (as Module: not once
// the context is destroyed, when the address may be another context's allocation). cuMemFree
// waits for the launches still using it.
class Allocation {
 public:
  Allocation(size_t bytes, const Context& context) : context_(context) {
    NORMJIT_CU(driver::api().cuMemAlloc(&ptr_, bytes));
  }
  ~Allocation() {
    if (!driver::unavailable_reason().empty()) return;
    const driver::Api& cu = driver::api();
    const RelaxedCaptureMode relaxed(std::nothrow);  // as ~Module: a capture may be under way
    if (still_there(context_.handle, context_.id) &&
        cu.cuCtxPushCurrent(context_.handle) == CUDA_SUCCESS) {
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
  Context context_;
};

// NORMJIT_JIT: off, 0, false or no (any case) turn the JIT off; on, 1, true or yes (any case),
// empty or unset leave it on. Any other value leaves it on too, with one warning per process
// naming the value: a typo ("of", "disabled") must not pass as a setting that took effect.
bool jit_disabled_by_env() {
  const char* value = std::getenv("NORMJIT_JIT");
  if (value == nullptr || *value == '\0') return false;
  std::string word = value;
  for (char& c : word) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (word == "off" || word == "0" || word == "false" || word == "no") return true;
  if (word == "on" || word == "1" || word == "true" || word == "yes") return false;
  static std::once_flag warned;
  std::call_once(warned, [&] {
    cache::warn("NORMJIT_JIT=" + quoted_excerpt(value) +
                " is not off, 0, false, no, on, 1, true or yes; the JIT stays on");
  });
  return false;
}

// A prewarm engine's settings: the cache options it decides itself must be left unset.
void check_prewarm_options(const EngineOptions& o) {
  const auto refuse = [](const std::string& name, const std::string& value) {
    throw_invalid_argument(name, value,
                           "is not for a prewarm engine (prewarm true), which reads and writes "
                           "its cache directory alone, uncapped, with the JIT on; leave it unset");
  };
  if (!o.readonly_cache_dirs.empty())
    refuse("readonly_cache_dirs", quoted_excerpt(o.readonly_cache_dirs[0]));
  if (o.cache_max_bytes != 0) refuse("cache_max_bytes", std::to_string(o.cache_max_bytes));
  if (o.memory_only) refuse("memory_only", "true");
  if (o.jit_disabled) refuse("jit_disabled", "true");
}

[[noreturn]] void throw_jit_disabled(const NormSpec& spec, const Target& target,
                                     const std::string& key) {
  throw Error(ErrorCode::kCacheMiss,
              "kernel not in any cache layer and JIT is off "
              "(jit_disabled, or NORMJIT_JIT=off): " +
                  spec.to_string() + " for " + target.text() + ", key " + key +
                  " (prewarm it with --arch " + target.text() + ")");
}

// The kernel's mangled name an entry's metadata records; empty when it records none.
std::string lowered_name_of(const cache::Entry& entry) {
  try {
    return nlohmann::json::parse(entry.metadata).at("lowered_name").get<std::string>();
  } catch (const std::exception&) {
    return "";
  }
}

}  // namespace

struct LoadedKernel {
  NormSpec spec;
  KernelPlan plan;
  std::string key;
  Context context;
  std::unique_ptr<Module> module;
  CUfunction function = nullptr;
  int64_t co_resident = 0;  // CTAs of this kernel the device holds at once

  // Split kernels keep arrival counters in a workspace, so launches sharing one must be
  // ordered: one workspace per stream (per thread for CU_STREAM_PER_THREAD), and one per
  // (capture, stream) for launches recorded into a CUDA graph, whose replays run apart from the
  // stream's other work (a graph's replays are ordered among themselves): workspace_owner.hpp.
  // A capture's lasts as long as its graph and what was instantiated from it, then serves
  // another owner (workspace_pool.hpp); a destroyed stream's is freed when a new stream has its
  // handle. Taken under a mutex on split launches only.
  float* workspace(CUstream stream) const;

  mutable std::mutex workspace_mutex;
  mutable WorkspacePool<Allocation> workspaces;
};

// Launches k over `batch` with params (its workspace filled in here for cooperative plans).
void enqueue(const LoadedKernel& k, Params& params, int64_t batch, CUstream_st* stream);

namespace {

// The release of a workspace captured into `graph`: set once the graph, every executable graph
// instantiated from it and every clone are destroyed and their launches have finished. A user
// object that the graph owns does it: each of them holds a reference (an executable graph its own,
// dropped after its last launch), and the last one's release runs its destructor, on a CUDA
// internal thread, which calls no CUDA function (workspace_pool.hpp).
std::shared_ptr<GraphRelease> release_with(CUgraph graph) {
  const driver::Api& cu = driver::api();
  auto release = std::make_shared<GraphRelease>();
  auto ref = std::make_unique<std::shared_ptr<GraphRelease>>(release);  // the destructor's
  CUuserObject object = nullptr;
  CUresult result = cu.cuUserObjectCreate(&object, ref.get(), release_with_graph,
                                          /*initialRefcount=*/1, CU_USER_OBJECT_NO_DESTRUCTOR_SYNC);
  if (result == CUDA_SUCCESS) {
    ref.release();  // the user object's now
    // The graph takes the one reference, ours.
    result = cu.cuGraphRetainUserObject(graph, object, /*count=*/1, CU_GRAPH_USER_OBJECT_MOVE);
    if (result == CUDA_SUCCESS) return release;
    cu.cuUserObjectRelease(object, /*count=*/1);  // runs the destructor: no launch had it
  }
  // The launch goes on with a workspace of the capture's own that is never released, as before
  // user objects: a bounded loss, where failing the capture would lose the user's work.
  static std::once_flag warned;
  std::call_once(warned, [&] {
    cache::warn("a CUDA graph could not take a user object (" + driver::describe(result) +
                "): the workspaces of graphs captured with normjit's split kernels are kept "
                "until their kernel is destroyed");
  });
  return nullptr;
}

}  // namespace

float* LoadedKernel::workspace(CUstream stream) const {
  const driver::Api& cu = driver::api();
  CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
  cuuint64_t capture = 0;
  CUgraph graph = nullptr;
  NORMJIT_CU(
      cu.cuStreamGetCaptureInfo(stream, &status, &capture, &graph, nullptr, nullptr, nullptr));
  const bool capturing = status == CU_STREAM_CAPTURE_STATUS_ACTIVE;
  const WorkspaceOwner owner = workspace_owner(stream, capturing ? capture : 0);
  std::lock_guard lock(workspace_mutex);
  if (Allocation* mine = workspaces.find(owner)) return reinterpret_cast<float*>(mine->get());

  const size_t bytes = size_t(plan.workspace_floats(co_resident)) * sizeof(float);
  const std::shared_ptr<GraphRelease> release = capturing ? release_with(graph) : nullptr;
  Allocation* allocation = workspaces.reuse(owner, release);
  if (!allocation) {
    const RelaxedCaptureMode relaxed;  // the stream may be capturing
    allocation = workspaces.add(owner, std::make_unique<Allocation>(bytes, context), release);
  }
  // Counters start at 0, zeroed in the stream's order: before the first launch that uses
  // them, and in a capture as a node of the graph, so each replay starts from 0 as well.
  const CUresult zeroed = cu.cuMemsetD8Async(allocation->get(), 0, bytes, stream);
  if (zeroed != CUDA_SUCCESS) {
    workspaces.give_up(owner);  // no launch used it
    driver::throw_driver_error(zeroed, "cuMemsetD8Async(workspace, 0, bytes, stream)", __FILE__,
                               __LINE__);
  }
  float* out = reinterpret_cast<float*>(allocation->get());
  return out;
}

class EngineImpl {
 public:
  explicit EngineImpl(EngineOptions options);
  ~EngineImpl();

  Kernel prepare(const NormSpec& spec);
  // The kernel of spec's own batch class (prepare() adds the other's).
  Kernel prepare_class(const NormSpec& spec, const Context& context);
  bool precompile(const NormSpec& spec, const std::string& arch);
  bool precompile_one(const NormSpec& spec, const std::string& arch);
  EngineCounters counters() const;
  // The workspaces that kernel's loaded kernels hold, released ones included.
  static size_t workspace_count(const Kernel& kernel);

 private:
  // The calling thread's context, made the engine's primary context where it has none.
  Context current_context();
  std::shared_ptr<const LoadedKernel> build(const NormSpec& spec, const Context& context,
                                            Source* source);
  Target device_target();
  // The table's kernel of key: kernel, or the one published before it.
  std::shared_ptr<const LoadedKernel> publish(const ClassKey& key,
                                              std::shared_ptr<const LoadedKernel> kernel);
  // The kernel of cache key `key` compiled by NVRTC and saved to the cache. One compile of a
  // key at a time: the two batch classes of a spec whose plans come out the same (one key),
  // prepared together on two threads, compile once (the second waits for the first's cubin).
  // recheck_cache: look in the cache again first (the caller missed it). *compiled_here (where
  // given) is set when this call ran NVRTC, not another thread's call it waited for.
  std::shared_ptr<const CompiledKernel> compile_and_save(
      const std::string& key, const NormSpec& spec, const KernelPlan& plan,
      const EmittedKernel& emitted, const cache::KeyInputs& inputs, const Target& target,
      bool recheck_cache, bool* compiled_here = nullptr);

  EngineOptions options_;
  std::unique_ptr<cache::Store> store_;

  // The loaded kernels by class key. Lock-free reads; writers (rare) add under publish_mutex_.
  // Nothing a reader may see is freed before the engine dies.
  detail::InsertOnlyMap<ClassKey, std::shared_ptr<const LoadedKernel>, ClassKeyHash> table_;
  std::mutex publish_mutex_;

  // Single flight: one build per class key (plan, compile or load, and the module's load), and
  // one compile per cache key (two classes may share a kernel); other callers wait for it.
  detail::SingleFlight<ClassKey, std::shared_ptr<const LoadedKernel>, ClassKeyHash> class_builds_;
  detail::SingleFlight<std::string, std::shared_ptr<const CompiledKernel>> compiles_;

  // Batch classes that prepare() found in no cache layer with JIT off (its spec's other class,
  // whose batches the spec's own kernel serves): not looked up, or warned about, again.
  std::mutex missing_mutex_;
  std::unordered_set<ClassKey, ClassKeyHash> missing_classes_;

  std::mutex context_mutex_;
  CUcontext primary_ = nullptr;  // retained primary context of options_.device, if we used it
  CUdevice primary_device_ = 0;

  std::atomic<uint64_t> nvrtc_compiles_{0}, memory_hits_{0}, disk_hits_{0}, bad_entries_{0};
};

namespace {

// The options as the engine runs with them: the environment's where they leave a setting to it.
EngineOptions resolved(EngineOptions o) {
  if (o.no_readonly_cache_dirs && !o.readonly_cache_dirs.empty()) {
    throw_invalid_argument("readonly_cache_dirs", quoted_excerpt(o.readonly_cache_dirs[0]),
                           "contradicts no_readonly_cache_dirs (true: no read-only layer); "
                           "set one of the two");
  }
  if (o.prewarm) check_prewarm_options(o);
  if (!o.prewarm && jit_disabled_by_env()) o.jit_disabled = true;
  // A prewarm plans for the targets it is given: the GPU's bandwidth, and so the variable that
  // replaces it, is not used (and a malformed one is not warned about).
  if (o.dram_gbps == 0 && !o.prewarm) o.dram_gbps = device::dram_gbps_from_env();
  return o;
}

// The engine's cache layers. Made in the engine's member initializers, before anything the
// destructor frees, so that a throw here (a prewarm's unusable directory) leaks nothing.
std::unique_ptr<cache::Store> open_store(const EngineOptions& o) {
  // A prewarm reads the directory's variable alone (a malformed cap it ignores is not warned of).
  cache::StoreOptions store;
  if (o.prewarm) {
    store.dir = cache::StoreOptions::dir_from_env();
  } else {
    store = cache::StoreOptions::from_env();
  }
  if (!o.cache_dir.empty()) store.dir = o.cache_dir;
  if (!o.readonly_cache_dirs.empty()) store.readonly = o.readonly_cache_dirs;
  if (o.no_readonly_cache_dirs) store.readonly.clear();
  if (o.cache_max_bytes) store.max_bytes = o.cache_max_bytes;
  if (o.memory_only) {
    store.dir.clear();
    store.readonly.clear();
  }
  if (!o.prewarm) return std::make_unique<cache::Store>(store);
  // The directory alone, complete: production reads it as a read-only layer, uncapped.
  store.readonly.clear();
  store.max_bytes = cache::kNoMaxBytes;
  store.must_write = true;
  try {
    return std::make_unique<cache::Store>(store);
  } catch (const Error& e) {
    throw_invalid_argument("cache_dir", quoted_excerpt(store.dir),
                           std::string("a prewarm engine cannot write its kernels there (") +
                               e.what() + "); give a directory it can create or write");
  }
}

}  // namespace

EngineImpl::EngineImpl(EngineOptions options)
    : options_(resolved(std::move(options))), store_(open_store(options_)) {}

EngineImpl::~EngineImpl() {
  table_.clear();  // the kernels' modules unload in their context (primary_'s, maybe)
  if (primary_) {
    // Modules must unload before the primary context goes (cleared above).
    driver::api().cuDevicePrimaryCtxRelease(primary_device_);
  }
}

EngineCounters EngineImpl::counters() const {
  EngineCounters c;
  c.nvrtc_compiles = nvrtc_compiles_.load();
  c.memory_hits = memory_hits_.load();
  c.disk_hits = disk_hits_.load();
  // The store rejects the corrupt entries; the engine counts the cubins the driver refused.
  c.bad_entries = bad_entries_.load() + store_->stats().bad_entries;
  return c;
}

// Two driver calls on the hot path: the id is not cached by handle, which a destroyed context's
// successor may have.
Context EngineImpl::current_context() {
  const driver::Api& cu = driver::api();
  CUcontext context = nullptr;
  NORMJIT_CU(cu.cuCtxGetCurrent(&context));
  if (context) return context_of(context);
  std::lock_guard<std::mutex> lock(context_mutex_);
  if (!primary_) {
    NORMJIT_CU(cu.cuDeviceGet(&primary_device_, options_.device));
    NORMJIT_CU(cu.cuDevicePrimaryCtxRetain(&primary_, primary_device_));
  }
  NORMJIT_CU(cu.cuCtxSetCurrent(primary_));
  return context_of(primary_);
}

// The target of the calling thread's current context's device.
Target EngineImpl::device_target() {
  const driver::Api& cu = driver::api();
  CUdevice device;
  NORMJIT_CU(cu.cuCtxGetDevice(&device));
  Target target = device::target_of(device);
  if (options_.dram_gbps > 0) target.dram_gbps = options_.dram_gbps;
  return target;
}

std::shared_ptr<const LoadedKernel> EngineImpl::publish(
    const ClassKey& key, std::shared_ptr<const LoadedKernel> kernel) {
  std::lock_guard<std::mutex> lock(publish_mutex_);
  return table_.insert(key, std::move(kernel));
}

std::shared_ptr<const LoadedKernel> EngineImpl::build(const NormSpec& spec, const Context& context,
                                                      Source* source) {
  const driver::Api& cu = driver::api();
  // A kernel first asked for inside a capture (say, by a model captured before it ran once)
  // loads its module there: allowed, and nothing of it is recorded into the graph.
  const RelaxedCaptureMode relaxed;
  const Target target = device_target();
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

  bool rejected = false;  // an entry the driver refused (it may stay in a read-only layer)
  if (std::optional<cache::Entry> entry = store_->load(kernel->key)) {
    const std::string lowered = lowered_name_of(*entry);
    const CUresult r =
        lowered.empty() ? CUDA_ERROR_INVALID_IMAGE : load_module(entry->cubin, lowered);
    if (r != CUDA_SUCCESS && !driver::rejects_the_image(r)) {
      // Not the entry's fault (a destroyed context, no memory): the entry stays for a later
      // call, and this one fails with the driver's error.
      const std::string call = "loading the cached kernel of " + spec.to_string();
      driver::throw_driver_error(r, call.c_str(), __FILE__, __LINE__);
    }
    if (r == CUDA_SUCCESS) {
      disk_hits_++;
      *source = Source::kDisk;
    } else {
      bad_entries_++;
      rejected = true;
      cache::warn("cache entry " + kernel->key + " for " + spec.to_string() +
                  " was rejected by the driver (" + driver::describe(r) + "); rebuilding it");
      store_->discard(kernel->key);
      kernel->module.reset();
      kernel->function = nullptr;
    }
  }
  if (!kernel->function) {
    if (options_.jit_disabled) throw_jit_disabled(spec, target, kernel->key);
    const std::shared_ptr<const CompiledKernel> compiled =
        compile_and_save(kernel->key, spec, kernel->plan, emitted, inputs, target, !rejected);
    NORMJIT_CU(load_module(compiled->cubin, compiled->lowered_name));
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
  if (kernel->co_resident < 1) {
    throw Error(ErrorCode::kInternal,
                "the kernel for " + spec.to_string() + " fits no multiprocessor of the device (" +
                    std::to_string(kernel->plan.block_x * kernel->plan.block_y) + " threads, " +
                    std::to_string(kernel->plan.smem_bytes) + " bytes of dynamic shared memory)");
  }
  if (kernel->plan.cooperative() && kernel->co_resident < kernel->plan.exchange_ctas()) {
    throw Error(ErrorCode::kInternal, "the split kernel for " + spec.to_string() + " needs " +
                                          std::to_string(kernel->plan.exchange_ctas()) +
                                          " co-resident CTAs; the device holds " +
                                          std::to_string(kernel->co_resident));
  }
  return kernel;
}

Kernel EngineImpl::prepare(const NormSpec& spec) {
  spec.validate();
  const Context context = current_context();
  if (!has_two_batch_classes(spec)) return prepare_class(spec, context);
  // The hot path, both classes loaded: two lookups, no allocation. The other class's key
  // differs in its batch class alone (the batch dims are no part of a key).
  const ClassKey key = ClassKey::of(spec, context);
  ClassKey other_key = key;
  other_key.batch_class = key.batch_class == kBatchAny ? kBatchFewRows : kBatchAny;
  const auto* own_hit = table_.find(key);
  const auto* other_hit = table_.find(other_key);
  if (own_hit && other_hit) {
    memory_hits_++;
    Kernel out;
    out.impl_ = *own_hit;
    out.other_ = *other_hit;
    out.source_ = Source::kMemory;
    return out;
  }
  if (own_hit && options_.jit_disabled) {
    const std::lock_guard lock(missing_mutex_);
    if (missing_classes_.count(other_key) != 0) {  // the other class missed before: as then
      memory_hits_++;
      Kernel out;
      out.impl_ = *own_hit;
      out.source_ = Source::kMemory;
      return out;
    }
  }
  const std::vector<NormSpec> classes = batch_class_specs(spec);
  const NormSpec& other = classes[1];
  // Both missing: the other class compiles on a second thread beside this one (NVRTC and the
  // cache are thread-safe), so a first prepare takes about one compile's time.
  std::future<Kernel> other_kernel;
  if (!own_hit && !other_hit) {
    other_kernel = std::async(std::launch::async, [this, &other, context] {
      NORMJIT_CU(driver::api().cuCtxSetCurrent(context.handle));
      return prepare_class(other, context);
    });
  }
  Kernel out = prepare_class(spec, context);  // on a throw, other_kernel's destructor waits
  try {
    out.other_ = (other_kernel.valid() ? other_kernel.get() : prepare_class(other, context)).impl_;
  } catch (const Error& e) {
    if (e.code() != ErrorCode::kCacheMiss) throw;
    // JIT off and the other class in no cache layer (a cache prewarmed by precompile holds
    // both): this class's kernel serves every batch, the same bits, planned for the other.
    // Once: later calls take the hot path's answer (above) without probing every layer.
    bool first = false;
    {
      const std::lock_guard lock(missing_mutex_);
      first = missing_classes_.insert(other_key).second;
    }
    if (first) {
      cache::warn("the kernel of " + other.to_string() + " (launches of " +
                  (batch_class(other) == kBatchFewRows ? "at most " : "more than ") +
                  std::to_string(few_rows_limit(spec)) +
                  " rows) is in no cache layer and JIT is off: the kernel of " + spec.to_string() +
                  " serves them");
    }
  }
  return out;
}

Kernel EngineImpl::prepare_class(const NormSpec& spec, const Context& context) {
  const ClassKey key = ClassKey::of(spec, context);
  Kernel out;
  if (const auto* hit = table_.find(key)) {
    memory_hits_++;
    out.impl_ = *hit;
    out.source_ = Source::kMemory;
    return out;
  }
  // Miss: join the build in flight for this key, or start it. A build published (and its
  // flight ended) since the lookup above is found in the table again inside the flight.
  Source source = Source::kMemory;
  out.impl_ = class_builds_.run(key, [&]() -> std::shared_ptr<const LoadedKernel> {
    if (const auto* now = table_.find(key)) return *now;
    source = Source::kCompiled;
    return publish(key, build(spec, context, &source));
  });
  if (source == Source::kMemory) memory_hits_++;  // another thread's build
  out.source_ = source;
  return out;
}

bool EngineImpl::precompile(const NormSpec& spec, const std::string& arch) {
  spec.validate();  // before batch_class_specs, which reads the shape as normalized_dims says
  // Every batch class's kernel: a prewarmed spec serves launches of any batch.
  bool compiled = false;
  for (const NormSpec& each : batch_class_specs(spec)) compiled |= precompile_one(each, arch);
  return compiled;
}

bool EngineImpl::precompile_one(const NormSpec& spec, const std::string& arch) {
  const Target target = Target::parse(arch);
  const KernelPlan p = plan(spec, target);
  const EmittedKernel emitted = emit(p);
  const cache::KeyInputs inputs = key_inputs(p, emitted, target);
  const std::string key = inputs.key();
  // A prewarm engine's product is the entry in its directory, not a kernel the memory layer
  // kept where a save failed (a full disk, a lost permission: the store then memory-only, with a
  // warning) or where a directory has taken the entry's name: neither counts as done.
  if (options_.prewarm ? store_->published(key) : store_->load(key).has_value()) return false;
  if (options_.jit_disabled) throw_jit_disabled(spec, target, key);
  bool compiled_here = false;
  compile_and_save(key, spec, p, emitted, inputs, target, /*recheck_cache=*/true, &compiled_here);
  if (options_.prewarm && !store_->published(key)) {
    throw_invalid_argument("cache_dir", quoted_excerpt(store_->options().dir),
                           "a prewarm engine could not write the kernel of " + spec.to_string() +
                               " for " + target.text() + " there (see the warning above)");
  }
  // Not where another thread's compile of the key ran while this one waited for it.
  return compiled_here;
}

std::shared_ptr<const CompiledKernel> EngineImpl::compile_and_save(
    const std::string& key, const NormSpec& spec, const KernelPlan& plan,
    const EmittedKernel& emitted, const cache::KeyInputs& inputs, const Target& target,
    bool recheck_cache, bool* compiled_here) {
  return compiles_.run(key, [&] {
    // Saved since the caller missed the cache (a compile of the key that ended just before
    // this one started, or another process's): loaded, not compiled again. Not where the
    // caller found an entry the driver refused: the cache may still hold it.
    std::optional<cache::Entry> entry;
    if (recheck_cache) entry = store_->load(key, /*counted=*/false);  // the caller's miss counted
    if (entry) {
      if (std::string lowered = lowered_name_of(*entry); !lowered.empty()) {
        return std::make_shared<const CompiledKernel>(
            CompiledKernel{entry->cubin, entry->ptx, std::move(lowered), ""});
      }
    }
    nvrtc_compiles_++;
    if (compiled_here) *compiled_here = true;  // run only by the thread that makes the value
    auto compiled = std::make_shared<const CompiledKernel>(compile(emitted, target));
    store_->save({key, inputs.preimage(), entry_metadata(spec, plan, *compiled), compiled->cubin,
                  compiled->ptx});
    return compiled;
  });
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

// `p` must be given exactly when the spec asks for it. The messages are built on error only:
// `needs` is appended to "the spec (...) needs it", `unwanted()` follows "the spec (...) ".
template <class Unwanted>
void check_present(const void* p, const char* name, bool wanted, const NormSpec& spec,
                   const char* needs, Unwanted unwanted) {
  if (wanted && !p) {
    throw_invalid_argument(name, "NULL",
                           "the spec (" + spec.to_string() + ") needs it" + std::string(needs));
  }
  if (!wanted && p) {
    throw_invalid_argument(name, pointer_text(p),
                           "the spec (" + spec.to_string() + ") " + std::string(unwanted()));
  }
}

void check_aligned(const void* p, const char* name, int align, const char* why) {
  if (p && reinterpret_cast<uintptr_t>(p) % align != 0) {
    throw_invalid_argument(name, pointer_text(p),
                           "must be aligned to " + std::to_string(align) + " bytes " + why);
  }
}

constexpr int64_t kMaxReachBytes = int64_t{1} << 62;  // bytes one argument may span

// The rows of one tensor of a trailing-form launch: strides as given, and as resolved.
struct RowArg {
  const char* tensor;      // "x"
  const char* outer_name;  // "x_rows.outer"
  const char* inner_name;  // "x_rows.inner"
  const RowStrides& given;
  RowPitch& resolved;
  int element;   // bytes
  bool written;  // its rows must not overlap each other
};

// The bytes an argument spans, [begin, begin + bytes): blocks of `block` bytes every `pitch`
// bytes (pitch 0: one block), so that interleaved rows of two tensors (the q and k slices of one
// qkv tensor) are seen to be disjoint.
struct Region {
  const char* name = nullptr;
  uintptr_t begin = 0;  // 0: not given
  uint64_t bytes = 0;
  uint64_t pitch = 0, block = 0;
  bool written = false;
};

Region region(const char* name, const void* p, uint64_t bytes, bool written) {
  return {name, reinterpret_cast<uintptr_t>(p), bytes, 0, bytes, written};
}

bool overlap(const Region& a, const Region& b) {
  if (!a.begin || !b.begin) return false;
  const bool intersect =
      a.begin >= b.begin ? a.begin - b.begin < b.bytes : b.begin - a.begin < a.bytes;
  if (!intersect) return false;
  if (a.pitch != 0 && a.pitch == b.pitch && a.block <= a.pitch && b.block <= b.pitch) {
    // Both on one lattice of `pitch` bytes: every block of b starts d bytes after one of a's.
    const int64_t pitch = int64_t(a.pitch);
    int64_t d = (int64_t(b.begin) - int64_t(a.begin)) % pitch;
    if (d < 0) d += pitch;
    return !(uint64_t(d) >= a.block && a.pitch - uint64_t(d) >= b.block);
  }
  return true;
}

// Resolves the strides of one trailing-form tensor of `groups` x `inner_rows` rows of
// Params::inner_rows and the magic number that divides a row index by it in the kernels
// (row_common.cuh: (umulhi(row, magic) + row) >> shift, exact for rows below 2^62): shift =
// ceil(log2(d)), magic = floor(2^64 * (2^shift - d) / d) + 1.
void set_inner_rows(Params& params, int64_t d) {
  unsigned shift = 0;
  while ((uint64_t{1} << shift) < uint64_t(d)) ++shift;
  const unsigned __int128 numerator = (unsigned __int128)((uint64_t{1} << shift) - uint64_t(d))
                                      << 64;
  params.inner_rows = d;
  params.inner_magic = uint64_t(numerator / uint64_t(d)) + 1;
  params.inner_shift = shift;
}

// `row_length` elements (0: contiguous), checks them and returns the bytes it spans.
Region resolve_rows(const RowArg& r, const void* p, int64_t groups, int64_t inner_rows,
                    int64_t row_length) {
  const RowStrides& s = r.given;
  if (s.outer < 0) {
    throw_invalid_argument(r.outer_name, std::to_string(s.outer), "must be >= 0 (0: contiguous)");
  }
  if (s.inner < 0) {
    throw_invalid_argument(r.inner_name, std::to_string(s.inner), "must be >= 0 (0: contiguous)");
  }
  auto too_far = [&]() {
    const bool strided = s.outer != 0 || (inner_rows > 1 && s.inner != 0);
    throw_invalid_argument(strided ? r.outer_name : "batch",
                           std::to_string(strided ? s.outer : groups * inner_rows),
                           std::string("makes ") + r.tensor + " span more than 2^62 bytes");
  };
  // One level: row r at r * outer (the inner stride is not used). Two: inner between the rows
  // of a group, outer between groups.
  const int64_t inner = inner_rows > 1 && s.inner != 0 ? s.inner : row_length;
  int64_t outer = s.outer;
  if (outer == 0 && inner_rows == 1) outer = row_length;
  if (outer == 0 && __builtin_mul_overflow(inner_rows, inner, &outer)) too_far();
  r.resolved = {outer, inner};
  // Elements from the first row's start to the last row's end.
  int64_t a = 0, b = 0, extent = 0, bytes = 0;
  if (__builtin_mul_overflow(groups - 1, outer, &a) ||
      __builtin_mul_overflow(inner_rows - 1, inner, &b) || __builtin_add_overflow(a, b, &extent) ||
      __builtin_add_overflow(extent, row_length, &extent) ||
      __builtin_mul_overflow(extent, int64_t{r.element}, &bytes) || bytes >= kMaxReachBytes) {
    too_far();
  }
  // The dims of more than one row, ordered by stride: the outermost gives the region's pitch.
  struct Dim {
    int64_t stride, count;
    const char* name;
  } small{inner, inner_rows, r.inner_name}, large{outer, groups, r.outer_name};
  if (small.count == 1 || (large.count > 1 && large.stride < small.stride)) std::swap(small, large);
  if (r.written) {
    // Rows of a written tensor must not overlap, or the kernel's writes would race.
    auto at_least = [&](const Dim& d, int64_t need) {
      if (d.count > 1 && d.stride < need) {
        throw_invalid_argument(d.name, std::to_string(d.stride),
                               "must be at least " + std::to_string(need) +
                                   " elements so that the rows of " + r.tensor +
                                   " do not overlap (" + r.tensor + " is written; rows of " +
                                   std::to_string(row_length) + " elements, inner_rows " +
                                   std::to_string(inner_rows) + ")");
      }
    };
    at_least(small, row_length);
    at_least(large, small.count > 1 ? (small.count - 1) * small.stride + row_length : row_length);
  }
  Region out{r.tensor, reinterpret_cast<uintptr_t>(p), uint64_t(bytes), 0, uint64_t(bytes),
             r.written};
  if (large.count > 1) {
    out.pitch = uint64_t(large.stride) * r.element;
    out.block = uint64_t(bytes) - uint64_t(large.count - 1) * out.pitch;
  } else if (small.count > 1) {
    out.pitch = uint64_t(small.stride) * r.element;
    out.block = uint64_t(row_length) * r.element;
  }
  return out;
}

bool trailing_form(const NormSpec& spec) {
  return !spec.channel_form() && spec.op != Op::kGroupNorm;
}

}  // namespace

namespace detail {

// Everything the spec alone decides about the arguments, checked before anything needs a
// device (so that a bad argument is named as such on a machine without one too), and the
// kernel's parameters from them: every field but the workspace, strides resolved.
// No allocation on success: it runs on every launch.
Params launch_params(const NormSpec& spec, const LaunchArgs& args) {
  if (spec.backward) {
    throw_invalid_argument("spec", "'" + spec.to_string() + "'",
                           "is a backward kernel (backward=true): launch it with "
                           "Kernel::launch_backward (C: normjit_launch_backward)");
  }
  const auto none = [] { return ""; };
  check_present(args.x, "x", true, spec, "", none);
  check_present(args.y, "y", true, spec, "", none);
  const auto affine = [&] {
    return std::string("has affine=") + to_string(spec.affine) + "; pass NULL or change affine";
  };
  check_present(args.weight, "weight", spec.affine != Affine::kNone, spec, "", affine);
  check_present(args.bias, "bias", spec.affine == Affine::kBoth, spec, "", affine);
  const auto no_residual = [] { return "has no residual; pass NULL or give the spec one"; };
  check_present(args.residual, "residual", spec.residual.has_value(), spec, "", no_residual);
  check_present(args.residual_out, "residual_out", spec.residual.has_value(), spec,
                " (x + residual is written there; it may equal residual)", no_residual);
  check_present(args.scale, "scale", is_fp8(spec.out_type()), spec,
                " (a device pointer to one f32 that y is multiplied by)", [&] {
                  return std::string("has out_dtype ") + to_string(spec.out_type()) +
                         ", not fp8; a scale is for e4m3 and e5m2 outputs: pass NULL";
                });
  const auto no_stats = [] { return "does not save statistics (save_stats); pass NULL"; };
  check_present(args.rstd, "rstd", spec.save_stats, spec, "", no_stats);
  check_present(args.mean, "mean", spec.save_stats && spec.op != Op::kRmsNorm, spec, "", [&] {
    return std::string(spec.save_stats ? "is rmsnorm, which has no mean (save_stats writes rstd "
                                         "only); pass NULL"
                                       : no_stats());
  });
  if (args.batch < 1) {
    throw_invalid_argument("batch", std::to_string(args.batch), "must be at least 1");
  }
  // As a spec's: a denormal is refused (the message formatted only then: the launch path).
  if (!eps_in_range(args.eps)) check_eps(args.eps, "eps", format_double(args.eps));
  const int x_size = size_of(spec.dtype), y_size = size_of(spec.out_type());
  const int64_t per_item = spec.elements() / spec.batch();
  int64_t elements = 0;
  if (__builtin_mul_overflow(per_item, args.batch, &elements) ||
      elements >= kMaxReachBytes / std::max(x_size, y_size) || args.batch > (int64_t{1} << 40)) {
    throw_invalid_argument("batch", std::to_string(args.batch), "is too large for this kernel");
  }

  Params params{};
  const int residual_size = spec.residual ? size_of(*spec.residual) : 1;
  const RowArg rows[] = {
      {"x", "x_rows.outer", "x_rows.inner", args.x_rows, params.x_rows, x_size, false},
      {"y", "y_rows.outer", "y_rows.inner", args.y_rows, params.y_rows, y_size, true},
      {"residual", "residual_rows.outer", "residual_rows.inner", args.residual_rows,
       params.residual_rows, residual_size, false},
      {"residual_out", "residual_out_rows.outer", "residual_out_rows.inner", args.residual_out_rows,
       params.residual_out_rows, residual_size, true},
  };
  const void* row_pointers[] = {args.x, args.y, args.residual, args.residual_out};
  Region regions[9];  // x, y, residual, residual_out, weight, bias, scale, mean, rstd
  if (!trailing_form(spec)) {
    auto refuse = [&](const char* name, int64_t value, const char* pass) {
      throw_invalid_argument(name, std::to_string(value),
                             std::string("row strides are for the trailing forms; the spec (") +
                                 spec.to_string() + ") is " +
                                 (spec.op == Op::kGroupNorm ? "groupnorm" : "the channel form") +
                                 ": pass " + pass);
    };
    if (args.inner_rows != 1) refuse("inner_rows", args.inner_rows, "1");
    for (const RowArg& r : rows) {
      if (r.given.outer != 0) refuse(r.outer_name, r.given.outer, "0");
      if (r.given.inner != 0) refuse(r.inner_name, r.given.inner, "0");
    }
    set_inner_rows(params, 1);
    regions[0] = region("x", args.x, uint64_t(elements) * x_size, false);
    regions[1] = region("y", args.y, uint64_t(elements) * y_size, true);
  } else {
    if (args.inner_rows < 1) {
      throw_invalid_argument("inner_rows", std::to_string(args.inner_rows),
                             "must be at least 1 (1: one level of rows)");
    }
    if (args.batch % args.inner_rows != 0) {
      throw_invalid_argument("inner_rows", std::to_string(args.inner_rows),
                             "must divide batch (" + std::to_string(args.batch) + ")");
    }
    set_inner_rows(params, args.inner_rows);
    const int64_t groups = args.batch / args.inner_rows;
    const int64_t row_length = spec.row_length();
    for (int i = 0; i < 4; ++i) {
      const RowArg& r = rows[i];
      if (i >= 2 && !spec.residual) {
        if (r.given.outer != 0 || r.given.inner != 0) {
          throw_invalid_argument(r.given.outer != 0 ? r.outer_name : r.inner_name,
                                 std::to_string(r.given.outer != 0 ? r.given.outer : r.given.inner),
                                 "the spec (" + spec.to_string() + ") has no residual; pass 0");
        }
        continue;
      }
      regions[i] = resolve_rows(r, row_pointers[i], groups, args.inner_rows, row_length);
    }
  }
  const uint64_t param_bytes = uint64_t(spec.param_elements()) * size_of(spec.param_type());
  const uint64_t stats_bytes = uint64_t(args.batch) * uint64_t(per_item / spec.row_length()) * 4;
  regions[4] = region("weight", args.weight, param_bytes, false);
  regions[5] = region("bias", args.bias, param_bytes, false);
  regions[6] = region("scale", args.scale, 4, false);
  regions[7] = region("mean", args.mean, stats_bytes, true);
  regions[8] = region("rstd", args.rstd, stats_bytes, true);

  // In place: y == x with the same rows and element size, residual_out == residual with the
  // same rows (each element is read before it is written, by the thread that writes it).
  // Otherwise a written argument shares no byte with any other.
  auto same_rows = [](const RowPitch& a, const RowPitch& b) {
    return a.outer == b.outer && a.inner == b.inner;
  };
  if (args.x == args.y && (x_size != y_size || !same_rows(params.x_rows, params.y_rows))) {
    throw_invalid_argument(
        "y", pointer_text(args.y),
        x_size != y_size
            ? std::string("equals x, and in place needs an output dtype of x's size (x ") +
                  to_string(spec.dtype) + ", y " + to_string(spec.out_type()) + ")"
            : std::string("equals x, and in place needs y's row strides equal to x's"));
  }
  if (args.residual && args.residual == args.residual_out &&
      !same_rows(params.residual_rows, params.residual_out_rows)) {
    throw_invalid_argument("residual_out", pointer_text(args.residual_out),
                           "equals residual, and in place needs residual_out's row strides equal "
                           "to residual's");
  }
  for (int i = 0; i < 9; ++i) {
    for (int j = i + 1; j < 9; ++j) {
      const Region& a = regions[i];
      const Region& b = regions[j];
      if (!(a.written || b.written) || !overlap(a, b)) continue;
      const bool pair = (i == 0 && j == 1) || (i == 2 && j == 3);  // x and y, or the residuals
      if (pair && a.begin == b.begin) continue;                    // in place, checked above
      const Region& w = a.written ? a : b;
      const Region& o = a.written ? b : a;
      throw_invalid_argument(
          w.name, pointer_text(reinterpret_cast<const void*>(w.begin)),
          std::string(pair ? "partially overlaps " : "overlaps ") + o.name + " (" +
              pointer_text(reinterpret_cast<const void*>(o.begin)) +
              (pair ? std::string("); pass ") + w.name + " == " + o.name +
                          " for in place, or disjoint buffers"
                    : std::string("); ") + w.name + " is written: it must share no memory with " +
                          "another argument"));
    }
  }

  params.x = args.x;
  params.y = args.y;
  params.weight = args.weight;
  params.bias = args.bias;
  params.workspace = nullptr;  // launch() sets it for split plans
  params.batch = args.batch;
  if (spec.channel_rows()) {
    // The channel forms in nhwc (or of S = 1) run the row kernel over N x S rows of C
    // (contiguous: the kernel takes their stride as a constant); the grid counts them as the
    // plan's rows per item.
    params.batch = args.batch * spec.spatial();
  }
  params.eps = args.eps;
  params.residual = args.residual;
  params.residual_out = args.residual_out;
  params.scale = args.scale;
  params.mean = args.mean;
  params.rstd = args.rstd;
  return params;
}

// The same for a backward kernel: the pointers its spec asks for, the batch, and no overlap
// between a written argument and any other (dx may equal x or dy: in place).
Params backward_params(const NormSpec& spec, const BackwardArgs& args) {
  if (!spec.backward) {
    throw_invalid_argument("spec", "'" + spec.to_string() + "'",
                           "is a forward kernel: launch it with Kernel::launch (C: "
                           "normjit_launch_ex), or give the spec backward=true");
  }
  const auto none = [] { return ""; };
  check_present(args.x, "x", true, spec, " (the forward's input)", none);
  check_present(args.dy, "dy", true, spec, " (the gradient of the forward's output)", none);
  check_present(args.dx, "dx", true, spec, "", none);
  check_present(args.rstd, "rstd", true, spec, " (the forward's saved rstd, save_stats)", none);
  check_present(args.mean, "mean", spec.op != Op::kRmsNorm, spec,
                " (the forward's saved mean, save_stats)",
                [] { return "is rmsnorm, which has no mean; pass NULL"; });
  const auto affine = [&] {
    return std::string("has affine=") + to_string(spec.affine) + "; pass NULL or change affine";
  };
  check_present(args.weight, "weight", spec.affine != Affine::kNone, spec, "", affine);
  check_present(args.dweight, "dweight", spec.affine != Affine::kNone, spec, "", affine);
  check_present(args.dbias, "dbias", spec.affine == Affine::kBoth, spec, "", affine);
  check_present(args.dresidual_out, "dresidual_out", spec.residual.has_value(), spec,
                " (the gradient of h, the forward's residual_out, added to dx)",
                [] { return "has no residual; pass NULL or give the spec residual"; });
  // The bias is read only for the activation's input z = xhat * w + b.
  const bool activation = spec.activation != Activation::kNone;
  check_present(
      args.bias, "bias", activation && spec.affine == Affine::kBoth, spec,
      " (the activation's derivative is taken at xhat * weight + bias)", [&] {
        return std::string(spec.affine != Affine::kBoth ? "has no bias" : "has no activation") +
               ": the backward reads the bias only for an activation's input; pass "
               "NULL";
      });
  if (args.batch < 1) {
    throw_invalid_argument("batch", std::to_string(args.batch), "must be at least 1");
  }
  const int x_size = size_of(spec.dtype), param_size = size_of(spec.param_type());
  const int64_t row_length = spec.row_length();
  // Elements of one batch item (a row; groupnorm and the channel forms: C * S), and the
  // statistics the forward saved per item (a row's; per group; per position).
  const int64_t per_item = spec.elements() / spec.batch();
  int64_t elements = 0;
  if (__builtin_mul_overflow(per_item, args.batch, &elements) ||
      elements >= kMaxReachBytes / x_size || args.batch > (int64_t{1} << 40)) {
    throw_invalid_argument("batch", std::to_string(args.batch), "is too large for this kernel");
  }
  const uint64_t tensor_bytes = uint64_t(elements) * x_size;
  const uint64_t param_bytes = uint64_t(spec.param_elements()) * param_size;
  const uint64_t stats_bytes = uint64_t(args.batch) * uint64_t(per_item / row_length) * 4;
  const Region regions[] = {
      region("x", args.x, tensor_bytes, false),
      region("dy", args.dy, tensor_bytes, false),
      region("mean", args.mean, stats_bytes, false),
      region("rstd", args.rstd, stats_bytes, false),
      region("weight", args.weight, param_bytes, false),
      region("dx", args.dx, tensor_bytes, true),
      region("dweight", args.dweight, param_bytes, true),
      region("dbias", args.dbias, param_bytes, true),
      region("dresidual_out", args.dresidual_out, tensor_bytes, false),
      region("bias", args.bias, param_bytes, false),
  };
  const Region& dx = regions[5];
  // What dx may equal: x, dy and dresidual_out.
  const auto dx_may_equal = [&](const Region& r) {
    return &r == &regions[0] || &r == &regions[1] || &r == &regions[8];
  };
  for (const Region& a : regions) {
    for (const Region& b : regions) {
      if (&a >= &b || !(a.written || b.written) || !overlap(a, b)) continue;
      // In place: dx over x, dy or dresidual_out, exactly (each element is read before it is
      // written, by the thread that writes it).
      const bool in_place = (&b == &dx && dx_may_equal(a)) || (&a == &dx && dx_may_equal(b));
      if (in_place && a.begin == b.begin) continue;
      const Region& w = a.written ? a : b;
      const Region& o = a.written ? b : a;
      throw_invalid_argument(
          w.name, pointer_text(reinterpret_cast<const void*>(w.begin)),
          std::string(in_place ? "partially overlaps " : "overlaps ") + o.name + " (" +
              pointer_text(reinterpret_cast<const void*>(o.begin)) +
              (in_place
                   ? std::string("); pass dx == ") + o.name + " for in place, or disjoint buffers"
                   : std::string("); ") + w.name +
                         " is written: it must share no memory with another argument"));
    }
  }

  Params params{};
  set_inner_rows(params, 1);
  params.x_rows = params.y_rows = {row_length, row_length};
  params.x = args.x;
  params.y = args.dx;
  params.weight = args.weight;
  params.bias = args.bias;     // with an activation: its input z = xhat * w + b
  params.workspace = nullptr;  // launch_backward() sets it when the plan sums parameters
  // The channel forms in nhwc: the row backward kernel over N x S rows of C (as the forward).
  params.batch = spec.channel_rows() ? args.batch * spec.spatial() : args.batch;
  params.eps = 0.f;                             // the saved rstd has it
  params.mean = const_cast<float*>(args.mean);  // read, not written, by the backward kernel
  params.rstd = const_cast<float*>(args.rstd);
  params.dy = args.dy;
  params.residual = args.dresidual_out;  // dh, read by the row backward kernel of a residual
  params.dweight = args.dweight;
  params.dbias = args.dbias;
  return params;
}

}  // namespace detail

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

const detail::LoadedKernel& Kernel::for_batch(int64_t batch) const {
  if (other_ && impl_->plan.batch_class_of(batch) != impl_->plan.batch_class) return *other_;
  return *impl_;
}

void Kernel::launch(const LaunchArgs& args, CUstream_st* stream) const {
  if (!impl_) throw Error(ErrorCode::kInvalidArgument, "launch of an empty normjit::Kernel");
  const detail::LoadedKernel& k = for_batch(args.batch);
  const NormSpec& spec = k.spec;
  const KernelPlan& plan = k.plan;
  Params params = detail::launch_params(spec, args);
  // What the plan decides: vector accesses of plan.vec elements (x, y, residual) and
  // plan.param_vec (weight, bias) must be aligned, and so must every row a stride starts.
  const char* vector = "for the plan's vector width";
  check_aligned(args.x, "x", size_of(spec.dtype) * plan.vec, vector);
  check_aligned(args.y, "y", size_of(spec.out_type()) * plan.vec, vector);
  if (spec.residual) {
    check_aligned(args.residual, "residual", size_of(*spec.residual) * plan.vec, vector);
    check_aligned(args.residual_out, "residual_out", size_of(*spec.residual) * plan.vec, vector);
  }
  check_aligned(args.weight, "weight", size_of(spec.param_type()) * plan.param_vec, vector);
  check_aligned(args.bias, "bias", size_of(spec.param_type()) * plan.param_vec, vector);
  check_aligned(args.scale, "scale", 4, "(an f32)");
  check_aligned(args.mean, "mean", 4, "(f32)");
  check_aligned(args.rstd, "rstd", 4, "(f32)");
  if (plan.vec > 1 && trailing_form(spec)) {
    auto check_stride = [&](int64_t given, const char* name) {
      if (given % plan.vec != 0) {
        throw_invalid_argument(name, std::to_string(given),
                               "must be a multiple of " + std::to_string(plan.vec) +
                                   " elements: the plan accesses " + std::to_string(plan.vec) +
                                   " elements at a time, and every row must start aligned to that");
      }
    };
    const RowStrides* given[] = {&args.x_rows, &args.y_rows, &args.residual_rows,
                                 &args.residual_out_rows};
    const char* names[][2] = {{"x_rows.outer", "x_rows.inner"},
                              {"y_rows.outer", "y_rows.inner"},
                              {"residual_rows.outer", "residual_rows.inner"},
                              {"residual_out_rows.outer", "residual_out_rows.inner"}};
    for (int i = 0; i < 4; ++i) {
      check_stride(given[i]->outer, names[i][0]);
      if (args.inner_rows > 1) check_stride(given[i]->inner, names[i][1]);
    }
  }
  detail::enqueue(k, params, args.batch, stream);
}

void Kernel::launch_backward(const BackwardArgs& args, CUstream_st* stream) const {
  if (!impl_) throw Error(ErrorCode::kInvalidArgument, "launch of an empty normjit::Kernel");
  const detail::LoadedKernel& k = for_batch(args.batch);
  const NormSpec& spec = k.spec;
  const KernelPlan& plan = k.plan;
  Params params = detail::backward_params(spec, args);
  const char* vector = "for the plan's vector width";
  const int x_size = size_of(spec.dtype), param_size = size_of(spec.param_type());
  check_aligned(args.x, "x", x_size * plan.vec, vector);
  check_aligned(args.dy, "dy", x_size * plan.vec, vector);
  check_aligned(args.dx, "dx", x_size * plan.vec, vector);
  check_aligned(args.dresidual_out, "dresidual_out", x_size * plan.vec, vector);
  check_aligned(args.weight, "weight", param_size * plan.param_vec, vector);
  check_aligned(args.bias, "bias", param_size * plan.param_vec, vector);
  check_aligned(args.dweight, "dweight", param_size, "(its dtype's size)");
  check_aligned(args.dbias, "dbias", param_size, "(its dtype's size)");
  check_aligned(args.mean, "mean", 4, "(f32)");
  check_aligned(args.rstd, "rstd", 4, "(f32)");
  detail::enqueue(k, params, args.batch, stream);
}

namespace detail {

void enqueue(const LoadedKernel& k, Params& params, int64_t batch, CUstream_st* stream) {
  const KernelPlan& plan = k.plan;
  const int64_t grid = plan.grid(batch, k.co_resident);
  if (grid > 0x7fffffff) {
    throw_invalid_argument("batch", std::to_string(batch),
                           "needs " + std::to_string(grid) + " CTAs, more than a grid holds");
  }
  const driver::Api& cu = driver::api();
  // The current context by its id (one call, as cuCtxGetCurrent): a context made after the
  // kernel's was destroyed may have its handle, where the kernel's module is gone.
  unsigned long long current = 0;
  const CUresult got_id = cu.cuCtxGetId(nullptr, &current);
  if (got_id == CUDA_SUCCESS) {
    if (current != k.context.id) {
      throw Error(ErrorCode::kInvalidArgument,
                  "launch in another CUDA context than the kernel was prepared in (or that "
                  "context was destroyed since)");
    }
  } else {
    CUcontext none = nullptr;
    NORMJIT_CU(cu.cuCtxGetCurrent(&none));
    if (none) driver::throw_driver_error(got_id, "cuCtxGetId(current)", __FILE__, __LINE__);
    // No context current on this thread: the kernel's, made current, if it still lives.
    if (!still_there(k.context.handle, k.context.id)) {
      throw Error(ErrorCode::kInvalidArgument,
                  "launch of a kernel whose CUDA context was destroyed; prepare it again");
    }
    NORMJIT_CU(cu.cuCtxSetCurrent(k.context.handle));
  }
  const CUstream cu_stream = reinterpret_cast<CUstream>(stream);
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

}  // namespace detail

// A default-constructed Kernel has nothing to describe: an error, as launch() says, not a null
// dereference.
const NormSpec& Kernel::spec() const {
  if (!impl_) throw Error(ErrorCode::kInvalidArgument, "spec() of an empty normjit::Kernel");
  return impl_->spec;
}
Source Kernel::source() const { return source_; }
const void* detail::identity(const Kernel& kernel) { return kernel.impl_.get(); }

size_t detail::workspace_count(const Kernel& kernel) { return EngineImpl::workspace_count(kernel); }

size_t detail::EngineImpl::workspace_count(const Kernel& kernel) {
  size_t out = 0;
  for (const LoadedKernel* k : {kernel.impl_.get(), kernel.other_.get()}) {
    if (!k) continue;
    std::lock_guard lock(k->workspace_mutex);
    out += k->workspaces.size();
  }
  return out;
}

std::string Kernel::plan_text() const {
  if (!impl_) throw Error(ErrorCode::kInvalidArgument, "plan_text() of an empty normjit::Kernel");
  return impl_->plan.to_string();
}
std::string Kernel::key() const {
  if (!impl_) throw Error(ErrorCode::kInvalidArgument, "key() of an empty normjit::Kernel");
  return impl_->key;
}

// ---------------------------------------------------------------------------------------
// Engine

namespace {
// Options refused before an engine is built (its members, once made, would need its destructor).
EngineOptions checked(EngineOptions options) {
  if (options.device < 0) {  // as the C API refuses it
    throw_invalid_argument("device", std::to_string(options.device), "must be >= 0");
  }
  if (options.dram_gbps < 0 || options.dram_gbps > Target::kMaxDramGbps) {
    throw_invalid_argument("dram_gbps", std::to_string(options.dram_gbps),
                           "a DRAM bandwidth in GB/s, from 1 to " +
                               std::to_string(Target::kMaxDramGbps) + ", or 0 for the GPU's");
  }
  return options;
}
}  // namespace

Engine::Engine(EngineOptions options)
    : impl_(std::make_unique<detail::EngineImpl>(checked(std::move(options)))) {}
Engine::~Engine() = default;

Kernel Engine::prepare(const NormSpec& spec) { return impl_->prepare(spec); }

void Engine::run(const NormSpec& spec, const void* x, void* y, const void* weight, const void* bias,
                 CUstream_st* stream) {
  // The variants' pointers (residual, scale, statistics) and strided rows need
  // prepare(spec).launch(args, stream): here they are absent, and a spec that needs one is
  // refused, naming it, before a device is needed.
  spec.validate();  // first: batch() of a hand-built spec past its rank reads past its shape
  const LaunchArgs args{x, y, weight, bias, spec.batch(), float(spec.eps)};
  detail::launch_params(spec, args);
  prepare(spec).launch(args, stream);
}

bool Engine::precompile(const NormSpec& spec, const std::string& arch) {
  return impl_->precompile(spec, arch);
}

EngineCounters Engine::counters() const { return impl_->counters(); }

bool gpu_available() { return driver::unavailable_reason().empty(); }
std::string gpu_unavailable_reason() { return driver::unavailable_reason(); }

}  // namespace normjit
