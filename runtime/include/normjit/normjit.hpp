// normjit: CUDA normalization kernels generated, compiled and cached at run time.
//
//   normjit::Engine engine;                       // cache and JIT settings from the environment
//   auto spec = normjit::NormSpec::parse("op=rmsnorm shape=8,64,32,32 dtype=f32");
//   normjit::Kernel k = engine.prepare(spec);     // compile or load, once per shape class
//   k.launch({x, y, nullptr, nullptr, /*batch=*/8, /*eps=*/1e-5f}, stream);
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "normjit/error.hpp"
#include "normjit/spec.hpp"

struct CUstream_st;  // CUstream and cudaStream_t are both pointers to this

namespace normjit {

// Where the rows of a trailing-form tensor start, in elements: row r at
// (r / inner_rows) * outer + (r % inner_rows) * inner (LaunchArgs::inner_rows). The last
// dims (the normalized ones) are contiguous. 0 means contiguous: outer = the row length with
// one level; inner = the row length and outer = inner_rows * inner with two.
struct RowStrides {
  int64_t outer = 0;  // between rows (one level) or groups of inner_rows rows
  int64_t inner = 0;  // between the rows of a group (two levels)
};

struct LaunchArgs {
  const void* x = nullptr;       // input, device pointer
  void* y = nullptr;             // output, device pointer; may equal x (in place)
  const void* weight = nullptr;  // required when the spec has a weight
  const void* bias = nullptr;    // required when the spec has a bias
  int64_t batch = 0;             // N (channel and group forms) or rows (trailing forms)
  float eps = 1e-5f;
  // The variant axes' arguments (nullptr unless the spec asks for them):
  const void* residual = nullptr;  // spec residual: added to x, in the residual dtype
  void* residual_out = nullptr;    // spec residual: h = x + residual; may equal residual
  const float* scale = nullptr;    // fp8 out_dtype: device pointer to one f32 (y = norm * scale)
  float* mean = nullptr;           // save_stats: f32 per row (layernorm, groupnorm [N, G])
  float* rstd = nullptr;           // save_stats: f32 per row ([N, *spatial] for channel rmsnorm)
  // Trailing forms: a row layout of two levels (per-head rows of [tokens, heads, dim]
  // sliced out of a wider tensor); batch must be a multiple of inner_rows.
  int64_t inner_rows = 1;
  RowStrides x_rows = {}, y_rows = {}, residual_rows = {}, residual_out_rows = {};
};

// The arguments of a backward kernel (a spec with backward=true): the forward's input and
// saved statistics (save_stats), the gradient of its output, and where the gradients go.
// Contiguous rows of the spec's row length. dweight and dbias are complete sums over the
// batch's rows (written, not accumulated into), the same bits on every run. With a residual
// (the forward's fused add), x is h = x + residual, which the forward wrote to residual_out,
// and dx = the norm's gradient + dresidual_out: the gradient of the forward's x and residual.
struct BackwardArgs {
  const void* x = nullptr;       // the forward's input, device pointer
  const void* dy = nullptr;      // the gradient of the forward's output, x's dtype
  const float* mean = nullptr;   // layernorm: the forward's saved mean, f32 per row; rmsnorm: none
  const float* rstd = nullptr;   // the forward's saved rstd, f32 per row
  const void* weight = nullptr;  // required when the spec has a weight (affine weight or both)
  void* dx = nullptr;            // the gradient of x, x's dtype; may equal x or dy (in place)
  void* dweight = nullptr;       // required with a weight: its gradient, the parameters' dtype
  void* dbias = nullptr;         // required with a bias: its gradient, the parameters' dtype
  int64_t batch = 0;             // rows
  // Required with a residual: h's gradient from its other uses (the residual stream), x's
  // dtype, added to dx; dx may equal it (in place).
  const void* dresidual_out = nullptr;
  // Required with an activation and affine both (the activation's derivative is taken at
  // xhat * weight + bias), else nullptr: the forward's bias, the parameters' dtype.
  const void* bias = nullptr;
};

// Where a prepared kernel's binary came from.
enum class Source { kCompiled, kDisk, kMemory };
const char* to_string(Source source);

class Kernel;
namespace detail {
struct LoadedKernel;
class EngineImpl;
const void* identity(const Kernel& kernel);  // the same for every copy of one loaded kernel
// The workspaces the kernel's split launches hold (one a stream, one a live graph; released
// ones kept for reuse included): for tests.
size_t workspace_count(const Kernel& kernel);
}  // namespace detail

// A kernel ready to launch in the context it was prepared in. Cheap to copy.
class Kernel {
 public:
  Kernel() = default;
  // Enqueues on stream (nullptr: the legacy default stream). Validates the arguments
  // (null or misaligned pointers, partial overlap, batch) first; launches nothing on error.
  // A split kernel's launch uses a workspace of the stream's, or, captured into a CUDA graph, of
  // the graph's: released for reuse when the graph, and all instantiated from it, are destroyed.
  // Destroy such graphs before the engine and the last copy of the Kernel, which free it.
  // Executable graphs instantiated from one capture share its workspace: not replayed at once.
  void launch(const LaunchArgs& args, CUstream_st* stream) const;
  // The same for a kernel prepared for a backward spec (backward=true); launch() refuses those,
  // and this refuses forward kernels. Graph-safe like launch(): no allocation or synchronization
  // once the stream (or capture) has its workspace, which its first launch allocates.
  void launch_backward(const BackwardArgs& args, CUstream_st* stream) const;

  // spec(), plan_text() and key() throw Error(kInvalidArgument) on an empty
  // (default-constructed) Kernel; source() of one is kMemory.
  const NormSpec& spec() const;   // the spec it was prepared for (batch as given then)
  Source source() const;          // how prepare() obtained it
  std::string plan_text() const;  // the plan, as `normjit dump --emit plan` prints it
  std::string key() const;        // cache key
  explicit operator bool() const { return impl_ != nullptr; }

 private:
  friend class detail::EngineImpl;
  friend const void* detail::identity(const Kernel& kernel);
  // The loaded kernel of the launch's batch class: impl_ (the spec's) or other_.
  const detail::LoadedKernel& for_batch(int64_t batch) const;
  std::shared_ptr<const detail::LoadedKernel> impl_;
  // A row kernel with parameters is planned for launches of few rows (decode) apart from the
  // rest (batch_class): the other class's kernel, which launches of that class run. Null
  // when the spec has one class (or, with JIT off, the other is in no cache).
  std::shared_ptr<const detail::LoadedKernel> other_;
  Source source_ = Source::kMemory;
};

struct EngineOptions {
  int device = 0;  // used when no context is current on the calling thread
  // Cache settings; empty/zero means "from the environment" (NORMJIT_CACHE_DIR,
  // NORMJIT_CACHE_READONLY, NORMJIT_CACHE_MAX_BYTES, NORMJIT_JIT).
  std::string cache_dir;
  std::vector<std::string> readonly_cache_dirs;
  uint64_t cache_max_bytes = 0;
  bool memory_only = false;   // no disk cache at all
  bool jit_disabled = false;  // a miss is an error (as NORMJIT_JIT=off)
  // Plan for this peak DRAM bandwidth (GB/s) instead of the GPU's (0: NORMJIT_DRAM_GBPS if set,
  // else the GPU's, from its memory clock and bus width). Kernels are planned for the GPU they run
  // on; a plan that depends on the bandwidth (the backward of GroupNorm over large f32 channels)
  // differs between, say, an H100 (3352) and an H200 (4814). Set it to the bandwidth a cache was
  // prewarmed for
  // (`prewarm --arch sm_90:132:B`) to run those kernels on another part, or to test either plan
  // on one GPU.
  int dram_gbps = 0;
  // The engine of a prewarm (as `normjit prewarm`'s), which fills cache_dir (or
  // NORMJIT_CACHE_DIR's) to be shipped: it reads and writes that directory alone
  // (NORMJIT_CACHE_READONLY is not read), with no byte cap (the directory must end up complete),
  // and compiles whatever NORMJIT_JIT says. Construction fails (kInvalidArgument) where the
  // directory cannot be created or written, and a precompile fails where its kernel could not be
  // written there, so that a prewarm never passes for a success with kernels missing.
  // readonly_cache_dirs, cache_max_bytes, memory_only and jit_disabled must be left unset.
  bool prewarm = false;
  // Search no read-only layer: NORMJIT_CACHE_READONLY is not read (an empty
  // readonly_cache_dirs means the variable's layers). readonly_cache_dirs must then be empty.
  // (Last, so that an aggregate initialization of the fields above keeps its meaning.)
  bool no_readonly_cache_dirs = false;
};

struct EngineCounters {
  uint64_t nvrtc_compiles = 0;  // NVRTC invocations
  uint64_t memory_hits = 0;
  uint64_t disk_hits = 0;
  uint64_t bad_entries = 0;  // disk entries rejected (corrupt, or a cubin the driver refused)
};

// Thread-safe. One in-memory table per CUDA context; compiles each key once (single flight).
class Engine {
 public:
  explicit Engine(EngineOptions options = {});
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // A ready kernel for the current context (or the primary context of options.device), for
  // launches of any batch: where the plan of a row kernel depends on the batch class (few rows or
  // more: at most 512, 384 or 256 rows by the threads a row takes, bf16 rows of 4096 up to 512,
  // of 8192 up to 384, of 16384 up to 256; plan_text() says),
  // the kernel of each class is compiled or loaded (two at once on a miss) and every launch runs
  // its own class's; the bits of a row are the same in both. The spec's batch picks the class
  // that spec(), key() and plan_text() report.
  Kernel prepare(const NormSpec& spec);
  // prepare(spec) then launch with batch and eps from the spec.
  void run(const NormSpec& spec, const void* x, void* y, const void* weight, const void* bias,
           CUstream_st* stream);

  // No GPU needed: plan, compile for arch ("sm_90", its full-size part; "sm_90:114", a part
  // with 114 multiprocessors; "sm_90:132:4814", 132 and 4814 GB/s of DRAM) and store in the cache:
  // the spec's kernel for every batch class (a row kernel's plan may differ for launches of few
  // rows), so that the spec serves launches of any batch from the cache. Returns whether this call
  // compiled a binary (false: all were cached, or another thread's call compiled them while
  // this one waited). Validates the spec first, as prepare() does.
  bool precompile(const NormSpec& spec, const std::string& arch);

  EngineCounters counters() const;

 private:
  std::unique_ptr<detail::EngineImpl> impl_;
};

// True when libcuda.so.1 loads and reports at least one GPU.
bool gpu_available();
// Why not, in one line ("libcuda.so.1 not found", "no CUDA device"); empty when available.
std::string gpu_unavailable_reason();

}  // namespace normjit
