/* normjit C API: a C ABI over the same engine, for C, Python ctypes, Rust, Julia.
 *
 *   normjit_engine* e;
 *   if (normjit_engine_create(NULL, &e) != NORMJIT_OK) puts(normjit_last_error());
 *   int64_t shape[] = {8, 64, 32, 32};
 *   normjit_rmsnorm(e, x, y, NULL, shape, 4, 0, NORMJIT_F32, 1e-5, stream);
 *   normjit_engine_destroy(e);
 *
 * Every call returns NORMJIT_OK or an error status; normjit_last_error() then gives a readable
 * message for the calling thread. Pointers are device pointers; stream is a CUstream or
 * cudaStream_t (NULL: the default stream). */
#ifndef NORMJIT_NORMJIT_H_
#define NORMJIT_NORMJIT_H_

#include <stddef.h>
#include <stdint.h>

/* The version of this header. CMakeLists.txt's project version must equal it (configuring
 * fails otherwise); tests/python/test_version.py holds pyproject.toml and normjit.__version__ to
 * it. normjit_version() gives the library's. */
#define NORMJIT_VERSION_MAJOR 0
#define NORMJIT_VERSION_MINOR 1
#define NORMJIT_VERSION_PATCH 0

#ifdef __cplusplus
extern "C" {
#endif

struct CUstream_st;

typedef enum normjit_status {
  NORMJIT_OK = 0,
  NORMJIT_ERROR_INVALID_ARGUMENT = 1,
  NORMJIT_ERROR_UNSUPPORTED = 2,
  NORMJIT_ERROR_COMPILE = 3,
  NORMJIT_ERROR_DRIVER = 4,
  NORMJIT_ERROR_NO_DEVICE = 5,
  NORMJIT_ERROR_CACHE_MISS = 6,
  NORMJIT_ERROR_INTERNAL = 7
} normjit_status;

typedef enum normjit_dtype {
  NORMJIT_F32 = 0,
  NORMJIT_F16 = 1,
  NORMJIT_BF16 = 2,
  NORMJIT_E4M3 = 3, /* output only (out_dtype) */
  NORMJIT_E5M2 = 4  /* output only (out_dtype) */
} normjit_dtype;

typedef struct normjit_engine_options {
  int device;                /* used when no context is current; default 0 */
  const char* cache_dir;     /* NULL: NORMJIT_CACHE_DIR or the default */
  const char* readonly_dirs; /* colon-separated; NULL: NORMJIT_CACHE_READONLY */
  uint64_t cache_max_bytes;  /* 0: NORMJIT_CACHE_MAX_BYTES or the default */
  int memory_only;           /* nonzero: no disk cache */
  int jit_disabled;          /* nonzero: a cache miss is an error (NORMJIT_JIT=off) */
} normjit_engine_options;

typedef struct normjit_engine normjit_engine;

/* Fills *options with the defaults. */
void normjit_engine_options_init(normjit_engine_options* options);
/* options may be NULL (defaults). Works without a GPU; launching then fails. */
normjit_status normjit_engine_create(const normjit_engine_options* options, normjit_engine** out);
void normjit_engine_destroy(normjit_engine* engine);

/* Engine options beyond normjit_engine_options, in a struct that later versions extend by
 * appending fields (its size tells which the caller knows, as for normjit_launch_args). Fill it
 * with normjit_engine_config_init (it sets size and the defaults), then set what differs. */
typedef struct normjit_engine_config {
  size_t size;                    /* sizeof(normjit_engine_config), set by its _init */
  normjit_engine_options options; /* as normjit_engine_create takes them */
  int dram_gbps; /* plan for this peak DRAM bandwidth in GB/s (1 to 1000000) instead of the
                    GPU's, e.g. the one a cache was prewarmed for with prewarm --arch
                    sm_90:132:4814; 0 (default): NORMJIT_DRAM_GBPS if set, else the
                    GPU's */
  int prewarm;   /* nonzero: the engine of a prewarm, filling cache_dir (or NORMJIT_CACHE_DIR's)
                    to be shipped, as `normjit prewarm`'s: it reads and writes that directory
                    alone (NORMJIT_CACHE_READONLY is not read), uncapped, with the JIT on
                    whatever NORMJIT_JIT says; creating it fails (NORMJIT_ERROR_INVALID_ARGUMENT)
                    where the directory cannot be created or written, and normjit_precompile
                    fails where its kernel could not be written there. readonly_dirs,
                    cache_max_bytes, memory_only and jit_disabled must be left 0. Default 0. */
  int no_readonly_dirs; /* nonzero: search no read-only layer, NORMJIT_CACHE_READONLY not read
                           (options.readonly_dirs NULL or "" means that variable's layers);
                           options.readonly_dirs must then be NULL or "". Default 0. */
} normjit_engine_config;

/* Fills *config with the defaults (those of normjit_engine_options_init, dram_gbps 0). */
void normjit_engine_config_init(normjit_engine_config* config);
/* What normjit_engine_config_init(config) calls, with the caller's sizeof *config: fills the
 * first `size` bytes of the caller's struct with the defaults of the fields it has (zeros past
 * them) and sets config->size = size, so that a library newer than the program writes no byte
 * past the program's struct. The function above is the entry point of programs built before
 * this macro, whose struct may be of any version since the first: it fills the first published
 * version (through dram_gbps here) and sets that size, so such a program's later fields are
 * not read; rebuild it to set them. The same holds for each _init below. */
void normjit_engine_config_init_sized(normjit_engine_config* config, size_t size);
#define normjit_engine_config_init(config) \
  normjit_engine_config_init_sized((config), sizeof *(config))
/* normjit_engine_create with a normjit_engine_config (not NULL); config->size as for
 * normjit_launch_ex. */
normjit_status normjit_engine_create_ex(const normjit_engine_config* config, normjit_engine** out);

/* The message of the calling thread's latest call if it failed, "" if it succeeded: every call
 * that returns a normjit_status clears it first, so read it right after the call that failed.
 * Valid until the thread's next such call. The others leave it as it is: normjit_last_error,
 * normjit_status_name, normjit_version, the _init functions and normjit_engine_destroy. */
const char* normjit_last_error(void);
const char* normjit_status_name(normjit_status status);

/* The version libnormjit was built as, "MAJOR.MINOR.PATCH" (a static string): compare it with
 * the NORMJIT_VERSION_* macros of the header compiled against, since a program may run against
 * another build of the library than it was compiled with. Leaves normjit_last_error() as it
 * is. */
const char* normjit_version(void);

/* RMSNorm. normalized_dims == 0: channel form, x [N, C, *spatial] reduced over dim 1,
 * weight [C] or NULL. normalized_dims == k > 0: the last k dims, weight of that shape or NULL. */
normjit_status normjit_rmsnorm(normjit_engine* engine, const void* x, void* y, const void* weight,
                               const int64_t* shape, int ndim, int normalized_dims,
                               normjit_dtype dtype, double eps, struct CUstream_st* stream);

/* LayerNorm. normalized_dims == 0: channel form, x [N, C, *spatial] reduced over dim 1 (ConvNeXt's
 * and SAM's LayerNorm2d), weight and bias [C] or NULL. normalized_dims == k > 0: the last k dims,
 * weight and bias of that shape or NULL. */
normjit_status normjit_layernorm(normjit_engine* engine, const void* x, void* y, const void* weight,
                                 const void* bias, const int64_t* shape, int ndim,
                                 int normalized_dims, normjit_dtype dtype, double eps,
                                 struct CUstream_st* stream);

/* GroupNorm of x [N, C, *spatial] with groups dividing C; weight and bias [C], or NULL. */
normjit_status normjit_groupnorm(normjit_engine* engine, const void* x, void* y, const void* weight,
                                 const void* bias, const int64_t* shape, int ndim, int64_t groups,
                                 normjit_dtype dtype, double eps, struct CUstream_st* stream);

/* A kernel prepared once and launched many times: the path for callers that launch the same
 * shape class often (the Python package, inference engines). The batch is not part of the
 * kernel: one kernel serves every batch size of its spec's other dims. (A row kernel with
 * parameters is planned apart for launches of few rows, decode (at most 512, 384 or 256 by the
 * threads a row takes: bf16 rows of 4096 up to 512, of 8192 up to 384, of 16384 up to 256;
 * `normjit dump --emit plan` prints a spec's), and for more:
 * normjit_prepare compiles or loads both, and each launch runs its own; a row's result bits
 * are the same in both.) */
typedef struct normjit_kernel normjit_kernel;

/* Compiles or loads the kernel of spec (the canonical text form, e.g.
 * "op=rmsnorm shape=1,4096 dtype=bf16 normalized_dims=1 affine=weight") for the current CUDA
 * context (or the primary context of options.device). *out is owned by the engine and stays
 * valid until normjit_engine_destroy; preparing the same spec again returns the same handle. */
normjit_status normjit_prepare(normjit_engine* engine, const char* spec, normjit_kernel** out);

/* Enqueues a prepared kernel on stream: batch is N (channel and group forms, layout=nhwc
 * included: x and y are then [N, *spatial, C] in memory) or the number of rows (trailing
 * forms); weight and bias as the spec's affine says (NULL otherwise). Checks the arguments,
 * then launches: no allocation, no synchronisation, nothing a CUDA-graph
 * capture cannot record, so it may be captured on any stream. */
normjit_status normjit_launch(const normjit_kernel* kernel, const void* x, void* y,
                              const void* weight, const void* bias, int64_t batch, double eps,
                              struct CUstream_st* stream);

/* Every argument of a launch, the variant axes' included: for normjit_launch_ex. Fill it with
 * normjit_launch_args_init first (it sets size, and the defaults: contiguous rows, no
 * residual, no scale, no statistics), then set what the kernel's spec asks for. */
typedef struct normjit_launch_args {
  size_t size; /* sizeof(normjit_launch_args), set by normjit_launch_args_init */
  const void* x;
  void* y; /* may equal x */
  const void* weight;
  const void* bias;
  int64_t batch; /* N (channel and group forms) or rows (trailing forms) */
  double eps;
  const void* residual; /* spec residual: added to x, in the residual dtype */
  void* residual_out;   /* spec residual: h = x + residual written here; may equal residual */
  const float* scale;   /* fp8 out_dtype: device pointer to one f32, y = norm * scale */
  float* mean;          /* save_stats: f32 per row (layernorm; groupnorm [N, G]), else NULL */
  float* rstd;          /* save_stats: f32 per row ([N, *spatial] for channel-form rmsnorm) */
  /* Trailing forms: row r of a tensor starts at element
   * (r / inner_rows) * strides[0] + (r % inner_rows) * strides[1]; the normalized dims are
   * contiguous. A stride of 0 means contiguous (strides[0] = row length with one level). */
  int64_t inner_rows; /* 1: one level */
  int64_t x_strides[2];
  int64_t y_strides[2];
  int64_t residual_strides[2];
  int64_t residual_out_strides[2];
} normjit_launch_args;

/* Fills *args with the defaults (every pointer NULL, batch 0, eps 1e-5, contiguous rows). */
void normjit_launch_args_init(normjit_launch_args* args);
void normjit_launch_args_init_sized(normjit_launch_args* args, size_t size);
#define normjit_launch_args_init(args) normjit_launch_args_init_sized((args), sizeof *(args))

/* normjit_launch with every argument: the variants (residual, fp8 scale, statistics) and
 * strided rows. args->size tells which fields the caller knows: a size below the first
 * published struct (today's) is invalid; a larger size (a newer header) is accepted when the
 * fields this library does not know are zero, else NORMJIT_ERROR_UNSUPPORTED. Graph-safe like
 * normjit_launch. */
normjit_status normjit_launch_ex(const normjit_kernel* kernel, const normjit_launch_args* args,
                                 struct CUstream_st* stream);

/* Every argument of a backward kernel (a spec with backward=true, prepared with
 * normjit_prepare): for normjit_launch_backward. Fill it with normjit_backward_args_init first
 * (it sets size; every pointer NULL), then set what the kernel's spec asks for. Tensors are
 * contiguous; the statistics are one f32 per row (groupnorm: per (n, g); the channel forms: per
 * (n, position)), as the forward with save_stats wrote them. With a residual (the forward's
 * fused add, h = x + residual normalized), x is h (the forward's residual_out) and dx is the
 * norm's gradient plus dresidual_out: the gradient of the forward's x and of its residual.
 * With an activation (the forward's, after its affine step), dy is the gradient of the
 * activation's output; the kernel reads the bias (affine both) for the activation's input. */
typedef struct normjit_backward_args {
  size_t size;        /* sizeof(normjit_backward_args), set by normjit_backward_args_init */
  const void* x;      /* the forward's input */
  const void* dy;     /* the gradient of the forward's output, x's dtype */
  const float* mean;  /* layernorm: the forward's saved mean (save_stats), f32 per row; rmsnorm:
                         NULL */
  const float* rstd;  /* the forward's saved rstd (save_stats), f32 per row */
  const void* weight; /* with affine weight or both, else NULL */
  void* dx;           /* the gradient of x, x's dtype; may equal x or dy (in place) */
  void* dweight;      /* with a weight: its gradient over every row, the parameters' dtype */
  void* dbias;        /* with a bias: its gradient over every row, the parameters' dtype */
  int64_t batch;      /* rows (groupnorm and the channel forms: N) */
  const void* dresidual_out; /* with a residual: h's gradient from its other uses, x's dtype,
                                added to dx; dx may equal it (in place). Added after batch: a
                                caller built before it passes a smaller size, read as NULL */
  const void* bias;          /* with an activation and affine both: the forward's bias, the
                                parameters' dtype (the activation's derivative is taken at
                                xhat * weight + bias), else NULL. Added after dresidual_out,
                                read as NULL from a smaller size */
} normjit_backward_args;

/* Fills *args with the defaults (every pointer NULL, batch 0). */
void normjit_backward_args_init(normjit_backward_args* args);
void normjit_backward_args_init_sized(normjit_backward_args* args, size_t size);
#define normjit_backward_args_init(args) normjit_backward_args_init_sized((args), sizeof *(args))

/* Enqueues a backward kernel: dx, and dweight and dbias summed over every row in a fixed order
 * (no floating-point atomics: the same bits on every run). Checks the arguments first (NULL,
 * misaligned or overlapping pointers, batch); args->size as for normjit_launch_ex. Graph-safe
 * like normjit_launch: the stream's (or capture's) workspace is allocated by its first launch,
 * outside the graph's work. normjit_launch and normjit_launch_ex refuse backward kernels. */
normjit_status normjit_launch_backward(const normjit_kernel* kernel,
                                       const normjit_backward_args* args,
                                       struct CUstream_st* stream);

/* Compile (or find in the cache) without a GPU, for arch such as "sm_90" (its full-size part)
 * or "sm_90:114" (a part with 114 multiprocessors, e.g. an H100 PCIe) or "sm_90:132:4814" (132
 * multiprocessors and 4814 GB/s of DRAM bandwidth, an H200). *compiled is set to
 * 1 when this call ran NVRTC, 0 when the kernel was already cached or another thread's call
 * compiled it while this one waited (compiled may be NULL). Every batch
 * class's kernel of the spec is compiled (a row kernel may be planned apart for launches of few
 * rows), so the spec then serves launches of any batch from the cache.
 * spec is the canonical text form, e.g. "op=rmsnorm shape=8,64,32,32 dtype=f32". */
normjit_status normjit_precompile(normjit_engine* engine, const char* spec, const char* arch,
                                  int* compiled);

/* Counters of the engine: NVRTC invocations, memory and disk hits (any pointer may be NULL).
 * normjit_engine_counters_ex gives these and the later counters. */
normjit_status normjit_engine_counters(const normjit_engine* engine, uint64_t* nvrtc_compiles,
                                       uint64_t* memory_hits, uint64_t* disk_hits);

/* Every counter of an engine, in a struct that later versions extend by appending fields (its
 * size tells which the caller knows, as for normjit_engine_config). Fill it with
 * normjit_engine_stats_init (it sets size, every counter 0), then pass it to
 * normjit_engine_counters_ex. */
typedef struct normjit_engine_stats {
  size_t size;             /* sizeof(normjit_engine_stats), set by its _init */
  uint64_t nvrtc_compiles; /* NVRTC invocations */
  uint64_t memory_hits;    /* kernels prepared from the engine's loaded ones */
  uint64_t disk_hits;      /* kernels prepared from a disk cache layer */
  uint64_t bad_entries;    /* disk entries rejected: corrupt, or a cubin the driver refused */
} normjit_engine_stats;

/* Fills *stats with size and every counter 0. */
void normjit_engine_stats_init(normjit_engine_stats* stats);
void normjit_engine_stats_init_sized(normjit_engine_stats* stats, size_t size);
#define normjit_engine_stats_init(stats) normjit_engine_stats_init_sized((stats), sizeof *(stats))
/* Writes the engine's counters into *stats (not NULL). stats->size tells which fields the caller
 * knows: a size below the first published struct (today's) is invalid; of a larger one (a newer
 * header) the fields this library does not know are left as they are (0 from _init). */
normjit_status normjit_engine_counters_ex(const normjit_engine* engine,
                                          normjit_engine_stats* stats);

#ifdef __cplusplus
}
#endif

#endif /* NORMJIT_NORMJIT_H_ */
