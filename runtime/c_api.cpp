// The C ABI: every entry point catches everything, stores a readable message for the
// calling thread and returns a status.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>

#include "normjit/normjit.h"
#include "normjit/normjit.hpp"

struct normjit_kernel {
  normjit::Kernel kernel;
};

struct normjit_engine {
  normjit::Engine engine;
  // The handles normjit_prepare gave out, one per loaded kernel (a kernel is loaded once per
  // context), so a caller that prepares per call does not grow this.
  std::mutex kernels_mutex;
  std::unordered_map<const void*, std::unique_ptr<normjit_kernel>> kernels;
  explicit normjit_engine(normjit::EngineOptions options) : engine(std::move(options)) {}
};

namespace {

thread_local std::string last_error;

template <class F>
normjit_status guarded(F&& body) {
  try {
    last_error.clear();
    body();
    return NORMJIT_OK;
  } catch (const normjit::Error& e) {
    last_error = e.what();
    return static_cast<normjit_status>(e.code());
  } catch (const std::exception& e) {
    last_error = std::string("internal error: ") + e.what();
    return NORMJIT_ERROR_INTERNAL;
  } catch (...) {
    last_error = "internal error: unknown exception";
    return NORMJIT_ERROR_INTERNAL;
  }
}

// A C caller may pass any int as a normjit_dtype (C enums are ints), but in C++ a value outside
// the enumerators' range must not even be loaded as the enum type: its bits are read as an int.
normjit::Dtype to_dtype(const normjit_dtype& dtype) {
  static_assert(sizeof(normjit_dtype) == sizeof(int), "a C enum is an int");
  int value = 0;
  std::memcpy(&value, &dtype, sizeof value);
  switch (value) {
    case NORMJIT_F32:
      return normjit::Dtype::kF32;
    case NORMJIT_F16:
      return normjit::Dtype::kF16;
    case NORMJIT_BF16:
      return normjit::Dtype::kBF16;
    case NORMJIT_E4M3:
      return normjit::Dtype::kE4M3;
    case NORMJIT_E5M2:
      return normjit::Dtype::kE5M2;
  }
  normjit::throw_invalid_argument("dtype", std::to_string(value),
                                  "expected NORMJIT_F32 (0), NORMJIT_F16 (1) or NORMJIT_BF16 (2)");
}

// x's dtype, for the one-call functions: fp8 is an output dtype only.
normjit::Dtype to_x_dtype(const normjit_dtype& dtype) {
  const normjit::Dtype d = to_dtype(dtype);
  if (normjit::is_fp8(d)) {
    normjit::throw_invalid_argument(
        "dtype",
        std::to_string(int(d == normjit::Dtype::kE4M3 ? NORMJIT_E4M3 : NORMJIT_E5M2)) + " (" +
            normjit::to_string(d) + ")",
        "is x's dtype here, and fp8 is an output dtype only: expected NORMJIT_F32 (0), "
        "NORMJIT_F16 (1) or NORMJIT_BF16 (2); for fp8 output, prepare a spec with out_dtype and "
        "launch it with normjit_launch_ex");
  }
  return d;
}

// A double eps as the kernel takes it (a float), checked as the double given: 1e-300 is
// refused as 1e-300, not as the 0 it would be as a float.
float to_float_eps(double eps) {
  if (!normjit::eps_in_range(eps)) normjit::check_eps(eps, "eps", normjit::format_double(eps));
  return float(eps);
}

std::vector<int64_t> to_shape(const int64_t* shape, int ndim) {
  if (ndim < 1 || ndim > normjit::kMaxRank) {
    normjit::throw_invalid_argument("ndim", std::to_string(ndim),
                                    "must be between 1 and " + std::to_string(normjit::kMaxRank) +
                                        " (the dimensions a tensor may have)");
  }
  if (!shape) normjit::throw_invalid_argument("shape", "NULL", "needs ndim sizes");
  return std::vector<int64_t>(shape, shape + ndim);
}

void check_engine(const normjit_engine* engine) {
  if (!engine)
    normjit::throw_invalid_argument("engine", "NULL", "create one with normjit_engine_create");
}

normjit::Affine affine_of(const void* weight, const void* bias) {
  if (bias && !weight) {
    normjit::throw_invalid_argument("weight", "NULL", "a bias needs a weight (affine=both)");
  }
  return bias ? normjit::Affine::kBoth : weight ? normjit::Affine::kWeight : normjit::Affine::kNone;
}

normjit_status run(normjit_engine* engine, const normjit::SpecFields& fields, const void* x,
                   void* y, const void* weight, const void* bias, CUstream_st* stream) {
  return guarded([&] {
    check_engine(engine);
    const normjit::NormSpec spec = normjit::NormSpec::from_fields(fields);
    engine->engine.run(spec, x, y, weight, bias, stream);
  });
}

// Fills the caller's struct of `size` bytes (its sizeof where it was compiled, which may be less
// or more than this library's): the defaults of the fields both know, zeros past them, and its
// size field. Nothing past `size` is written.
template <class T>
void init_sized(T* out, size_t size, const T& defaults) {
  if (!out || size < sizeof(size_t)) return;
  std::memset(static_cast<void*>(out), 0, size);
  std::memcpy(static_cast<void*>(out), &defaults, std::min(size, sizeof(T)));
  out->size = size;
}

// The first published size of each sized struct (its fields through the one named): the least
// its consumer takes, and all that its plain _init function writes. Programs built before the
// _init macros call that function with a struct of the size their header had, which may be any
// size since the first: writing this library's sizeof overran the older ones (a stack overflow
// in the caller), so it writes the first version alone, defaults and size, and a field such a
// program sets past it is not read (it takes the fields the first version had).
constexpr size_t kFirstEngineConfig =
    offsetof(normjit_engine_config, dram_gbps) + sizeof(normjit_engine_config::dram_gbps);
constexpr size_t kFirstLaunchArgs = offsetof(normjit_launch_args, residual_out_strides) +
                                    sizeof(normjit_launch_args::residual_out_strides);
constexpr size_t kFirstBackwardArgs =
    offsetof(normjit_backward_args, batch) + sizeof(normjit_backward_args::batch);
constexpr size_t kFirstEngineStats =
    offsetof(normjit_engine_stats, bad_entries) + sizeof(normjit_engine_stats::bad_entries);

// A caller's sized struct of `size` bytes (its `size` field): a smaller size than the first
// published version is refused (not such a struct; or not initialised with its _init function),
// and so is a size beyond any plausible struct (an uninitialised size). A later version only
// appends fields.
void check_struct_size(size_t size, size_t first_published, const std::string& type,
                       const std::string& field) {
  constexpr size_t kMaxSize = 4096;
  if (size < first_published || size > kMaxSize) {
    normjit::throw_invalid_argument(
        field, std::to_string(size),
        std::string(size < first_published ? "is smaller than" : "is far larger than") + " any " +
            type + " (" + std::to_string(first_published) + " bytes at least, " +
            std::to_string(kMaxSize) + " at most): initialise the struct with " + type + "_init");
  }
}

// A caller's args struct (an input), checked as by check_struct_size: the defaults of fields
// that an older, shorter struct lacks are kept. A caller's larger struct (a newer header than
// this library) is taken when the fields this library does not know are all zero, and refused
// otherwise: a variant it asks for would be dropped silently.
void check_args_size(const void* args, size_t size, size_t first_published, size_t known,
                     const std::string& type, const std::string& field = "args.size") {
  check_struct_size(size, first_published, type, field);
  if (size > known) {
    const unsigned char* tail = static_cast<const unsigned char*>(args);
    for (size_t i = known; i < size; ++i) {
      if (tail[i] != 0) {
        throw normjit::Error(normjit::ErrorCode::kUnsupported,
                             field + " " + std::to_string(size) +
                                 ": this libnormjit knows the first " + std::to_string(known) +
                                 " bytes of " + type +
                                 ", and the caller set fields after them (byte " +
                                 std::to_string(i) + "); use a libnormjit as new as the header");
      }
    }
  }
}

// The C++ options of a C caller's normjit_engine_options (NULL: the defaults).
normjit::EngineOptions engine_options(const normjit_engine_options* options) {
  normjit::EngineOptions o;
  if (!options) return o;
  if (options->device < 0) {
    normjit::throw_invalid_argument("device", std::to_string(options->device), "must be >= 0");
  }
  o.device = options->device;
  if (options->cache_dir) o.cache_dir = options->cache_dir;
  if (options->readonly_dirs) {
    std::string dirs = options->readonly_dirs;
    for (size_t start = 0; start <= dirs.size();) {
      size_t colon = dirs.find(':', start);
      if (colon == std::string::npos) colon = dirs.size();
      if (colon > start) o.readonly_cache_dirs.push_back(dirs.substr(start, colon - start));
      start = colon + 1;
    }
  }
  o.cache_max_bytes = options->cache_max_bytes;
  o.memory_only = options->memory_only != 0;
  o.jit_disabled = options->jit_disabled != 0;
  return o;
}

}  // namespace

extern "C" {

void normjit_engine_options_init(normjit_engine_options* options) {
  if (!options) return;
  *options = normjit_engine_options{};
}

normjit_status normjit_engine_create(const normjit_engine_options* options, normjit_engine** out) {
  return guarded([&] {
    if (!out) normjit::throw_invalid_argument("out", "NULL", "needs somewhere to put the engine");
    *out = nullptr;
    *out = new normjit_engine(engine_options(options));
  });
}

void normjit_engine_config_init_sized(normjit_engine_config* config, size_t size) {
  init_sized(config, size, normjit_engine_config{});
}

// The entry point of programs built before the header's macro (in parentheses: not the macro).
void(normjit_engine_config_init)(normjit_engine_config* config) {
  normjit_engine_config_init_sized(config, kFirstEngineConfig);
}

normjit_status normjit_engine_create_ex(const normjit_engine_config* config, normjit_engine** out) {
  return guarded([&] {
    if (!out) normjit::throw_invalid_argument("out", "NULL", "needs somewhere to put the engine");
    *out = nullptr;
    if (!config) {
      normjit::throw_invalid_argument(
          "config", "NULL", "fill a normjit_engine_config with normjit_engine_config_init");
    }
    // The first published struct ended at dram_gbps; prewarm came later.
    check_args_size(config, config->size, kFirstEngineConfig, sizeof(normjit_engine_config),
                    "normjit_engine_config", "config.size");
    normjit_engine_config c{};
    std::memcpy(&c, config, std::min(config->size, sizeof(normjit_engine_config)));
    // Named as the C struct (and Python's Engine) names it: the C++ engine would refuse its own
    // field, readonly_cache_dirs.
    if (c.prewarm != 0 && c.options.readonly_dirs && *c.options.readonly_dirs) {
      normjit::throw_invalid_argument(
          "options.readonly_dirs", normjit::quoted_excerpt(c.options.readonly_dirs),
          "is not for a prewarm engine (prewarm nonzero), which reads and writes its cache "
          "directory alone; leave it NULL");
    }
    if (c.no_readonly_dirs != 0 && c.options.readonly_dirs && *c.options.readonly_dirs) {
      normjit::throw_invalid_argument(
          "options.readonly_dirs", normjit::quoted_excerpt(c.options.readonly_dirs),
          "contradicts no_readonly_dirs (nonzero: no read-only layer); set one of the two");
    }
    normjit::EngineOptions o = engine_options(&c.options);
    o.dram_gbps = c.dram_gbps;  // checked by the engine
    o.prewarm = c.prewarm != 0;
    o.no_readonly_cache_dirs = c.no_readonly_dirs != 0;
    *out = new normjit_engine(std::move(o));
  });
}

void normjit_engine_destroy(normjit_engine* engine) { delete engine; }

const char* normjit_last_error(void) { return last_error.c_str(); }

// The header's numbers, which CMakeLists.txt checks against the project's version.
#define DOTTED_TEXT(a, b, c) #a "." #b "." #c
#define DOTTED(a, b, c) DOTTED_TEXT(a, b, c)  // a, b and c expanded first
const char* normjit_version(void) {
  return DOTTED(NORMJIT_VERSION_MAJOR, NORMJIT_VERSION_MINOR, NORMJIT_VERSION_PATCH);
}
#undef DOTTED
#undef DOTTED_TEXT

const char* normjit_status_name(normjit_status status) {
  int value = 0;  // any int from C: read as one (see to_dtype)
  static_assert(sizeof(normjit_status) == sizeof(int), "a C enum is an int");
  std::memcpy(&value, &status, sizeof value);
  switch (value) {
    case NORMJIT_OK:
      return "ok";
    case NORMJIT_ERROR_INVALID_ARGUMENT:
      return "invalid argument";
    case NORMJIT_ERROR_UNSUPPORTED:
      return "unsupported";
    case NORMJIT_ERROR_COMPILE:
      return "compile error";
    case NORMJIT_ERROR_DRIVER:
      return "driver error";
    case NORMJIT_ERROR_NO_DEVICE:
      return "no device";
    case NORMJIT_ERROR_CACHE_MISS:
      return "cache miss";
    case NORMJIT_ERROR_INTERNAL:
      return "internal error";
  }
  return "unknown status";
}

normjit_status normjit_rmsnorm(normjit_engine* engine, const void* x, void* y, const void* weight,
                               const int64_t* shape, int ndim, int normalized_dims,
                               normjit_dtype dtype, double eps, struct CUstream_st* stream) {
  normjit::SpecFields f;
  normjit_status status = guarded([&] {
    f.op = normjit::Op::kRmsNorm;
    f.shape = to_shape(shape, ndim);
    f.dtype = to_x_dtype(dtype);
    f.normalized_dims = normalized_dims;
    f.affine = affine_of(weight, nullptr);
    f.eps = eps;
  });
  return status != NORMJIT_OK ? status : run(engine, f, x, y, weight, nullptr, stream);
}

normjit_status normjit_layernorm(normjit_engine* engine, const void* x, void* y, const void* weight,
                                 const void* bias, const int64_t* shape, int ndim,
                                 int normalized_dims, normjit_dtype dtype, double eps,
                                 struct CUstream_st* stream) {
  normjit::SpecFields f;
  normjit_status status = guarded([&] {
    f.op = normjit::Op::kLayerNorm;
    f.shape = to_shape(shape, ndim);
    f.dtype = to_x_dtype(dtype);
    f.normalized_dims = normalized_dims;
    f.affine = affine_of(weight, bias);
    f.eps = eps;
  });
  return status != NORMJIT_OK ? status : run(engine, f, x, y, weight, bias, stream);
}

normjit_status normjit_groupnorm(normjit_engine* engine, const void* x, void* y, const void* weight,
                                 const void* bias, const int64_t* shape, int ndim, int64_t groups,
                                 normjit_dtype dtype, double eps, struct CUstream_st* stream) {
  normjit::SpecFields f;
  normjit_status status = guarded([&] {
    f.op = normjit::Op::kGroupNorm;
    f.shape = to_shape(shape, ndim);
    f.dtype = to_x_dtype(dtype);
    f.groups = groups;
    f.affine = affine_of(weight, bias);
    f.eps = eps;
  });
  return status != NORMJIT_OK ? status : run(engine, f, x, y, weight, bias, stream);
}

normjit_status normjit_prepare(normjit_engine* engine, const char* spec, normjit_kernel** out) {
  return guarded([&] {
    if (out) *out = nullptr;  // on every failure, the engine's included (as engine_create does)
    check_engine(engine);
    if (!out) normjit::throw_invalid_argument("out", "NULL", "needs somewhere to put the kernel");
    if (!spec)
      normjit::throw_invalid_argument("spec", "NULL",
                                      "expected e.g. \"op=rmsnorm shape=8,64,32,32\"");
    normjit::Kernel kernel = engine->engine.prepare(normjit::NormSpec::parse(spec));
    std::lock_guard<std::mutex> lock(engine->kernels_mutex);
    std::unique_ptr<normjit_kernel>& handle = engine->kernels[normjit::detail::identity(kernel)];
    if (!handle) handle = std::make_unique<normjit_kernel>(normjit_kernel{std::move(kernel)});
    *out = handle.get();
  });
}

normjit_status normjit_launch(const normjit_kernel* kernel, const void* x, void* y,
                              const void* weight, const void* bias, int64_t batch, double eps,
                              struct CUstream_st* stream) {
  return guarded([&] {
    if (!kernel)
      normjit::throw_invalid_argument("kernel", "NULL", "prepare one with normjit_prepare");
    kernel->kernel.launch({x, y, weight, bias, batch, to_float_eps(eps)}, stream);
  });
}

void normjit_launch_args_init_sized(normjit_launch_args* args, size_t size) {
  normjit_launch_args defaults{};
  defaults.eps = 1e-5;
  defaults.inner_rows = 1;
  init_sized(args, size, defaults);
}

void(normjit_launch_args_init)(normjit_launch_args* args) {
  normjit_launch_args_init_sized(args, kFirstLaunchArgs);
}

normjit_status normjit_launch_ex(const normjit_kernel* kernel, const normjit_launch_args* args,
                                 struct CUstream_st* stream) {
  return guarded([&] {
    if (!args) {
      normjit::throw_invalid_argument("args", "NULL", "fill one with normjit_launch_args_init");
    }
    // args->size says which version of the struct the caller was compiled with. Every field
    // through residual_out_strides is the first published version.
    check_args_size(args, args->size, kFirstLaunchArgs, sizeof(normjit_launch_args),
                    "normjit_launch_args");
    normjit_launch_args a;
    normjit_launch_args_init(&a);
    std::memcpy(&a, args, std::min(args->size, sizeof(normjit_launch_args)));
    if (!kernel) {
      normjit::throw_invalid_argument("kernel", "NULL", "prepare one with normjit_prepare");
    }
    const float eps = to_float_eps(a.eps);
    normjit::LaunchArgs l;
    l.x = a.x;
    l.y = a.y;
    l.weight = a.weight;
    l.bias = a.bias;
    l.batch = a.batch;
    l.eps = eps;
    l.residual = a.residual;
    l.residual_out = a.residual_out;
    l.scale = a.scale;
    l.mean = a.mean;
    l.rstd = a.rstd;
    l.inner_rows = a.inner_rows;
    l.x_rows = {a.x_strides[0], a.x_strides[1]};
    l.y_rows = {a.y_strides[0], a.y_strides[1]};
    l.residual_rows = {a.residual_strides[0], a.residual_strides[1]};
    l.residual_out_rows = {a.residual_out_strides[0], a.residual_out_strides[1]};
    kernel->kernel.launch(l, stream);
  });
}

void normjit_backward_args_init_sized(normjit_backward_args* args, size_t size) {
  init_sized(args, size, normjit_backward_args{});
}

void(normjit_backward_args_init)(normjit_backward_args* args) {
  normjit_backward_args_init_sized(args, kFirstBackwardArgs);
}

normjit_status normjit_launch_backward(const normjit_kernel* kernel,
                                       const normjit_backward_args* args,
                                       struct CUstream_st* stream) {
  return guarded([&] {
    if (!args) {
      normjit::throw_invalid_argument("args", "NULL", "fill one with normjit_backward_args_init");
    }
    // Every field through batch is the first published version.
    check_args_size(args, args->size, kFirstBackwardArgs, sizeof(normjit_backward_args),
                    "normjit_backward_args");
    normjit_backward_args a;
    normjit_backward_args_init(&a);
    std::memcpy(&a, args, std::min(args->size, sizeof(normjit_backward_args)));
    if (!kernel) {
      normjit::throw_invalid_argument("kernel", "NULL", "prepare one with normjit_prepare");
    }
    normjit::BackwardArgs b;
    b.x = a.x;
    b.dy = a.dy;
    b.mean = a.mean;
    b.rstd = a.rstd;
    b.weight = a.weight;
    b.dx = a.dx;
    b.dweight = a.dweight;
    b.dbias = a.dbias;
    b.batch = a.batch;
    b.dresidual_out = a.dresidual_out;
    b.bias = a.bias;
    kernel->kernel.launch_backward(b, stream);
  });
}

normjit_status normjit_precompile(normjit_engine* engine, const char* spec, const char* arch,
                                  int* compiled) {
  return guarded([&] {
    check_engine(engine);
    if (!spec)
      normjit::throw_invalid_argument("spec", "NULL",
                                      "expected e.g. \"op=rmsnorm shape=8,64,32,32\"");
    if (!arch) normjit::throw_invalid_argument("arch", "NULL", "expected e.g. \"sm_90\"");
    const bool did = engine->engine.precompile(normjit::NormSpec::parse(spec), arch);
    if (compiled) *compiled = did ? 1 : 0;
  });
}

normjit_status normjit_engine_counters(const normjit_engine* engine, uint64_t* nvrtc_compiles,
                                       uint64_t* memory_hits, uint64_t* disk_hits) {
  return guarded([&] {
    check_engine(engine);
    const normjit::EngineCounters c = engine->engine.counters();
    if (nvrtc_compiles) *nvrtc_compiles = c.nvrtc_compiles;
    if (memory_hits) *memory_hits = c.memory_hits;
    if (disk_hits) *disk_hits = c.disk_hits;
  });
}

void normjit_engine_stats_init_sized(normjit_engine_stats* stats, size_t size) {
  init_sized(stats, size, normjit_engine_stats{});
}

void(normjit_engine_stats_init)(normjit_engine_stats* stats) {
  normjit_engine_stats_init_sized(stats, kFirstEngineStats);
}

normjit_status normjit_engine_counters_ex(const normjit_engine* engine,
                                          normjit_engine_stats* stats) {
  return guarded([&] {
    check_engine(engine);
    if (!stats) {
      normjit::throw_invalid_argument("stats", "NULL",
                                      "fill a normjit_engine_stats with normjit_engine_stats_init");
    }
    // Every field through bad_entries is the first published version. An output: of a newer
    // caller's larger struct, the fields after this library's are not written.
    check_struct_size(stats->size, kFirstEngineStats, "normjit_engine_stats", "stats.size");
    const normjit::EngineCounters c = engine->engine.counters();
    normjit_engine_stats s;
    s.size = stats->size;
    s.nvrtc_compiles = c.nvrtc_compiles;
    s.memory_hits = c.memory_hits;
    s.disk_hits = c.disk_hits;
    s.bad_entries = c.bad_entries;
    std::memcpy(stats, &s, std::min(stats->size, sizeof s));
  });
}

}  // extern "C"
