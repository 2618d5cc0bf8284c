/* The C API compiled as C99: bad arguments give a status and a message naming the argument;
 * precompiling needs no GPU; the second precompile is a cache hit; normjit_launch_args is a C
 * struct that normjit_launch_args_init fills and normjit_launch_ex checks; normjit_engine_stats
 * one that normjit_engine_stats_init fills and normjit_engine_counters_ex checks and writes; the
 * library's version is the header's. */
#define _XOPEN_SOURCE 700
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "normjit/normjit.h"

static int failures = 0;

#define EXPECT(cond)                                                      \
  do {                                                                    \
    if (!(cond)) {                                                        \
      fprintf(stderr, "%s:%d: expected %s\n", __FILE__, __LINE__, #cond); \
      failures++;                                                         \
    }                                                                     \
  } while (0)

static int mentions(const char* needle) { return strstr(normjit_last_error(), needle) != NULL; }

int main(void) {
  char dir[] = "/tmp/normjit-c-api-XXXXXX";
  normjit_engine_options options;
  normjit_engine* engine = NULL;
  int64_t shape[4] = {2, 64, 8, 8};
  int64_t zero_shape[4] = {2, 0, 8, 8};
  float fake[1];
  int compiled = -1;
  normjit_launch_args args;
  normjit_engine_stats stats;
  uint64_t compiles = 0;
  char version[32];
  normjit_status s;

  if (!mkdtemp(dir)) return 1;
  snprintf(version, sizeof(version), "%d.%d.%d", NORMJIT_VERSION_MAJOR, NORMJIT_VERSION_MINOR,
           NORMJIT_VERSION_PATCH);
  EXPECT(strcmp(normjit_version(), version) == 0);
  normjit_engine_options_init(&options);
  options.cache_dir = dir;
  EXPECT(normjit_engine_create(&options, NULL) == NORMJIT_ERROR_INVALID_ARGUMENT);
  EXPECT(mentions("out"));
  EXPECT(normjit_engine_create(&options, &engine) == NORMJIT_OK);

  /* Bad input is refused before anything is compiled or launched. */
  s = normjit_rmsnorm(NULL, fake, fake, NULL, shape, 4, 0, NORMJIT_F32, 1e-5, NULL);
  EXPECT(s == NORMJIT_ERROR_INVALID_ARGUMENT && mentions("engine"));
  s = normjit_rmsnorm(engine, fake, fake, NULL, NULL, 4, 0, NORMJIT_F32, 1e-5, NULL);
  EXPECT(s == NORMJIT_ERROR_INVALID_ARGUMENT && mentions("shape"));
  s = normjit_rmsnorm(engine, fake, fake, NULL, zero_shape, 4, 0, NORMJIT_F32, 1e-5, NULL);
  EXPECT(s == NORMJIT_ERROR_INVALID_ARGUMENT && mentions("shape") && mentions("dimension 1 is 0"));
  s = normjit_rmsnorm(engine, fake, fake, NULL, shape, 4, 0, NORMJIT_F32, -1.0, NULL);
  EXPECT(s == NORMJIT_ERROR_INVALID_ARGUMENT && mentions("eps"));
  s = normjit_rmsnorm(engine, fake, fake, NULL, shape, 4, 0, (normjit_dtype)7, 1e-5, NULL);
  EXPECT(s == NORMJIT_ERROR_INVALID_ARGUMENT && mentions("dtype"));
  s = normjit_groupnorm(engine, fake, fake, NULL, NULL, shape, 4, 5, NORMJIT_F32, 1e-5, NULL);
  EXPECT(s == NORMJIT_ERROR_INVALID_ARGUMENT && mentions("groups"));
  EXPECT(strcmp(normjit_status_name(NORMJIT_ERROR_INVALID_ARGUMENT), "invalid argument") == 0);
  /* fp8 is an output dtype only: x's dtype of a one-call function is never fp8. */
  s = normjit_rmsnorm(engine, fake, fake, NULL, shape, 4, 0, NORMJIT_E4M3, 1e-5, NULL);
  EXPECT(s == NORMJIT_ERROR_INVALID_ARGUMENT && mentions("dtype") && mentions("output dtype only"));

  /* The extended launch: defaults, then the struct is checked before the kernel. */
  memset(&args, 0x5a, sizeof(args));
  normjit_launch_args_init(&args);
  EXPECT(args.size == sizeof(normjit_launch_args) && args.eps == 1e-5 && args.inner_rows == 1);
  EXPECT(args.x == NULL && args.residual == NULL && args.scale == NULL && args.mean == NULL);
  EXPECT(args.batch == 0 && args.x_strides[0] == 0 && args.residual_out_strides[1] == 0);
  args.x = fake;
  args.y = fake;
  args.batch = 2;
  args.x_strides[0] = 128;
  s = normjit_launch_ex(NULL, &args, NULL);
  EXPECT(s == NORMJIT_ERROR_INVALID_ARGUMENT && mentions("kernel"));
  s = normjit_launch_ex(NULL, NULL, NULL);
  EXPECT(s == NORMJIT_ERROR_INVALID_ARGUMENT && mentions("args"));
  args.size = sizeof(args.size);
  s = normjit_launch_ex(NULL, &args, NULL);
  EXPECT(s == NORMJIT_ERROR_INVALID_ARGUMENT && mentions("args.size"));

  /* Compiling needs no GPU; the second time the kernel comes from the cache. */
  s = normjit_precompile(engine, "op=rmsnorm shape=2,64,8,8 dtype=f32", "sm_90", &compiled);
  if (s != NORMJIT_OK) fprintf(stderr, "precompile: %s\n", normjit_last_error());
  EXPECT(s == NORMJIT_OK && compiled == 1);
  s = normjit_precompile(engine, "op=rmsnorm shape=2,64,8,8 dtype=f32", "sm_90", &compiled);
  EXPECT(s == NORMJIT_OK && compiled == 0);
  s = normjit_precompile(engine, "op=rmsnorm shape=2,64,8,8 dtype=f32", "sm_12", &compiled);
  EXPECT(s == NORMJIT_ERROR_INVALID_ARGUMENT && mentions("arch"));

  /* Every counter, bad_entries included, in a sized struct. */
  memset(&stats, 0x5a, sizeof(stats));
  normjit_engine_stats_init(&stats);
  EXPECT(stats.size == sizeof(normjit_engine_stats) && stats.nvrtc_compiles == 0);
  EXPECT(stats.memory_hits == 0 && stats.disk_hits == 0 && stats.bad_entries == 0);
  EXPECT(normjit_engine_counters(engine, &compiles, NULL, NULL) == NORMJIT_OK);
  EXPECT(normjit_engine_counters_ex(engine, &stats) == NORMJIT_OK);
  EXPECT(stats.nvrtc_compiles == compiles && compiles >= 1 && stats.bad_entries == 0);
  s = normjit_engine_counters_ex(engine, NULL);
  EXPECT(s == NORMJIT_ERROR_INVALID_ARGUMENT && mentions("stats"));
  stats.size = 0;
  s = normjit_engine_counters_ex(engine, &stats);
  EXPECT(s == NORMJIT_ERROR_INVALID_ARGUMENT && mentions("stats.size"));

  normjit_engine_destroy(engine);
  {
    char command[256];
    snprintf(command, sizeof(command), "rm -rf %s", dir);
    if (system(command) != 0) failures++;
  }
  if (failures)
    fprintf(stderr, "%d expectation(s) failed\n", failures);
  else
    printf("c api: all expectations held\n");
  return failures ? 1 : 0;
}
