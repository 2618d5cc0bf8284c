/* The C API from a C99 program built against the installed package: an engine with its sized
 * config (the _init macro: this program's sizeof), a precompile, the status and version. No
 * GPU needed. */
#include <normjit/normjit.h>
#include <stdio.h>
#include <string.h>

int main(int argc, char** argv) {
  normjit_engine_config config;
  normjit_engine* engine = NULL;
  normjit_status status;
  int compiled = 0;
  if (argc != 2) return 2;
  normjit_engine_config_init(&config);
  if (config.size != sizeof config) return 3;
  config.options.cache_dir = argv[1];
  status = normjit_engine_create_ex(&config, &engine);
  if (status != NORMJIT_OK) {
    fprintf(stderr, "%s: %s\n", normjit_status_name(status), normjit_last_error());
    return 1;
  }
  status = normjit_precompile(engine, "op=rmsnorm shape=4,1024 dtype=bf16 normalized_dims=1",
                              "sm_90", &compiled);
  if (status != NORMJIT_OK) {
    fprintf(stderr, "%s: %s\n", normjit_status_name(status), normjit_last_error());
    normjit_engine_destroy(engine);
    return 1;
  }
  printf("c: %s, library %s\n", compiled ? "compiled" : "cached", normjit_version());
  normjit_engine_destroy(engine);
  return strcmp(normjit_version(), "") == 0;
}
